"""The process kubelet's rules as pure functions: pod phase, restarts, exit codes, log tails."""

from pathlib import Path
from typing import Any

import pytest

from kubelocal.kubelet import backoff_delay, exit_code, pod_phase, should_restart, tail_offset

RUNNING = {"state": {"running": {}}}
WAITING = {"state": {"waiting": {"reason": "ContainerCreating"}}}
OK = {"state": {"terminated": {"exitCode": 0}}}
FAILED = {"state": {"terminated": {"exitCode": 3}}}
BACKING_OFF = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}


@pytest.mark.parametrize(
    ("policy", "statuses", "terminal", "phase"),
    [
        ("Never", [WAITING], False, "Pending"),
        ("Never", [RUNNING, WAITING], False, "Pending"),
        ("Never", [RUNNING], False, "Running"),
        ("Never", [RUNNING, OK], False, "Running"),
        ("Never", [OK], False, "Succeeded"),
        ("Never", [OK, OK], False, "Succeeded"),
        ("Never", [FAILED], False, "Failed"),
        ("Never", [OK, FAILED], False, "Failed"),
        ("Never", [RUNNING, FAILED], False, "Running"),
        ("OnFailure", [OK], False, "Succeeded"),
        ("OnFailure", [BACKING_OFF], False, "Running"),
        ("OnFailure", [OK, BACKING_OFF], False, "Running"),
        ("Always", [OK], False, "Running"),
        ("Always", [BACKING_OFF], False, "Running"),
        # torn down (deleted or evicted): nothing restarts, so the phase is final
        ("Always", [OK], True, "Succeeded"),
        ("Always", [{"state": {"terminated": {"exitCode": 143}}}], True, "Failed"),
        ("OnFailure", [BACKING_OFF], True, "Failed"),
        ("Always", [WAITING], True, "Failed"),
    ],
)
def test_pod_phase_from_container_states(policy: str, statuses: list[dict[str, Any]], terminal: bool,
                                         phase: str) -> None:
    assert pod_phase(policy, statuses, terminal=terminal) == phase


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 137, True),
     ("Never", 1, False), ("Never", 0, False)],
)
def test_restart_policy(policy: str, code: int, restart: bool) -> None:
    assert should_restart(policy, code) is restart


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_signals_read_as_128_plus_signal(returncode: int, code: int) -> None:
    assert exit_code(returncode) == code


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_delay(n, 0.2, 1.0) for n in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.parametrize(
    ("content", "lines", "expected"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"", 3, b""),
    ],
)
def test_tail_offset_starts_at_the_last_lines(tmp_path: Path, content: bytes, lines: int, expected: bytes) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(content)
    assert content[tail_offset(path, lines):] == expected


def test_tail_offset_handles_logs_longer_than_a_block(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"".join(b"line %06d\n" % i for i in range(20000)))
    assert path.read_bytes()[tail_offset(path, 3):] == b"line 019997\nline 019998\nline 019999\n"
