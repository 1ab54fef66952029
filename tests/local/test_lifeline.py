"""The pods' guardian (kubelocal.lifeline): what it is told to watch dies with the process that told it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest
from polling import wait_for

from kubelocal.lifeline import Lifeline

pytestmark = pytest.mark.timeout(60)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start_group(sleepers: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    sleepers.append(proc)
    return proc


def exited(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None


def test_closing_the_lifeline_kills_the_groups_still_watched_and_spares_forgotten_ones(
        sleepers: list[subprocess.Popen[bytes]]) -> None:
    lifeline = Lifeline()
    lifeline.start()
    watched, forgotten = start_group(sleepers), start_group(sleepers)
    lifeline.watch(watched.pid)
    lifeline.watch(forgotten.pid)
    lifeline.forget(forgotten.pid)
    lifeline.close()
    assert watched.wait(timeout=15) == -signal.SIGKILL
    assert forgotten.poll() is None


def test_a_killed_guardian_is_replaced_and_told_every_group_still_watched(
        sleepers: list[subprocess.Popen[bytes]]) -> None:
    lifeline = Lifeline()
    lifeline.start()
    first = start_group(sleepers)
    lifeline.watch(first.pid)
    guardian = psutil.Process(lifeline.pid)
    guardian.kill()
    guardian.wait(timeout=15)
    second = start_group(sleepers)
    lifeline.watch(second.pid)  # finds the guardian gone: a new one learns both groups
    assert lifeline.pid != guardian.pid
    lifeline.close()
    wait_for(lambda: exited(first) and exited(second), timeout=15, what="both watched groups killed")
