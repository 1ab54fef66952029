"""`tfjob submit`, `status` and `wait` against a real API server (the local control plane, no operator):
API errors become one line naming the HTTP reason with a hint, exit 1, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from operator_harness import Cluster, free_port, needs_kubelocal

pytestmark = pytest.mark.timeout(120)

JOB = """
apiVersion: tfjob.dev/v1
kind: TFJob
metadata:
  name: {name}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: local
            command: [python, -c, "pass"]
"""


def tfjob(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfjob_operator", *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=60)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    return lines[-1]


def test_submit_of_a_file_reports_each_job_created_and_the_one_that_exists(cluster: Cluster, tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    first.write_text(JOB.format(name="helper-a"))
    assert tfjob(cluster.kubeconfig, "submit", str(first)).returncode == 0
    both = tmp_path / "both.yaml"
    both.write_text(JOB.format(name="helper-a") + "---\n" + JOB.format(name="helper-b"))
    done = tfjob(cluster.kubeconfig, "submit", str(both))
    assert done.stdout == "tfjob.tfjob.dev/helper-b created (namespace default)\n"
    assert done.stderr.splitlines() == [
        'error: create tfjob/helper-a: HTTP 409 Conflict: tfjobs.tfjob.dev "helper-a" already exists; '
        "delete it first (kubectl delete tfjob/helper-a -n default) or choose another name",
        "error: 1 of 2 TFJobs were not created",
    ]
    assert done.returncode == 1


def test_status_and_wait_of_a_missing_job_say_404_and_where_to_look(cluster: Cluster) -> None:
    for args in (("status", "nope"), ("wait", "nope", "--timeout", "5")):
        line = one_error_line(tfjob(cluster.kubeconfig, *args))
        assert line.startswith("error: get tfjob/nope: HTTP 404 Not Found: ")
        assert line.endswith("; check the name and the namespace (kubectl get tfjobs -n default); no kubeflow.org/v1 "
                             "TFJob of that name either")


@pytest.mark.parametrize(("status", "reason", "hint"), [
    (403, "Forbidden", "ask for RBAC that allows it (kubectl auth can-i create tfjobs -n default)"),
    (422, "Unprocessable Entity", "fix the field it names"),
    (500, "Internal Server Error", "the API server is overloaded or failing; try again shortly"),
])
@needs_kubelocal()
def test_submit_refused_by_the_server_names_the_http_reason_and_a_hint(
        cluster: Cluster, tmp_path: Path, status: int, reason: str, hint: str) -> None:
    manifest = tmp_path / "c.yaml"
    manifest.write_text(JOB.format(name=f"helper-{status}"))
    cluster.apiserver.faults.fail("POST", r"/tfjobs$", status, count=1)
    line = one_error_line(tfjob(cluster.kubeconfig, "submit", str(manifest)))
    assert line.startswith(f"error: create tfjob/helper-{status}: HTTP {status} {reason}")
    assert line.endswith(f"; {hint}")


def test_unreachable_server_is_one_line_saying_so(tmp_path: Path) -> None:
    from kubelocal.apiserver import write_kubeconfig

    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, f"http://127.0.0.1:{free_port()}")
    line = one_error_line(tfjob(kubeconfig, "status", "anything"))
    assert line.startswith("error: get tfjob/anything: cannot reach the API server (")
    assert line.endswith("; is the cluster up? check --kubeconfig and --context")


def test_missing_kubeconfig_is_one_line_with_what_to_do(tmp_path: Path) -> None:
    line = one_error_line(tfjob(tmp_path / "none", "status", "anything"))
    assert line.startswith("error: no usable kubeconfig (")
    assert line.endswith("; pass --kubeconfig, set KUBECONFIG, or start a cluster with `tfjob local up`")
