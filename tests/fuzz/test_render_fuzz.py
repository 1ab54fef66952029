"""`tfjob render` on generated documents: a clean refusal (exit 2, every message naming its field, nothing on
stdout) or objects the API server accepts, for a job the API server accepts too. Never a traceback or a hang."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fuzz_documents import documents
from fuzz_oracle import input_documents, refusal_problems, rendered_refusals, tfjob_refusals
from fuzz_settings import EXAMPLES, FUZZ, SEED
from hypothesis import event, given, seed, settings
from hypothesis.control import currently_in_test_context

from tfjob_operator.client import cli

pytestmark = pytest.mark.timeout(600)


def check_render(raw: bytes, code: int, stdout: str, stderr: str) -> None:
    if currently_in_test_context():  # the counts --hypothesis-show-statistics prints
        event("refused" if code == 2 else "accepted" if code == 0 else f"exit {code}")
    if code == 2:
        assert refusal_problems(stdout, stderr) == [], stderr
        return
    assert code == 0, (code, stderr)
    assert "Traceback" not in stderr and "error" not in stderr, stderr
    docs = input_documents(raw)
    assert [tfjob_refusals(d) for d in docs] == [[] for _ in docs], "render accepted what the API server refuses"
    assert rendered_refusals(stdout) == [], "render printed objects the API server refuses"


def render_in_process(raw: bytes) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_bytes(raw)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["render", str(path)])
    return code, out.getvalue(), err.getvalue()


@FUZZ
@seed(SEED)
@given(raw=documents())
def test_render_refuses_cleanly_or_renders_what_the_api_server_accepts(raw: bytes) -> None:
    check_render(raw, *render_in_process(raw))


@settings(FUZZ, max_examples=max(3, EXAMPLES // 50))  # each a `tfjob` process (~2 CPU-s of imports)
@seed(SEED)
@given(raw=documents())
def test_render_as_a_command_exits_0_or_2_without_traceback_or_hang(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_bytes(raw)
        done = subprocess.run([sys.executable, "-m", "tfjob_operator", "render", str(path)],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    check_render(raw, done.returncode, done.stdout, done.stderr)


GOOD = """\
apiVersion: tfjob.dev/v1
kind: TFJob
metadata:
  name: mnist
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf:1
"""

#: The reproducers of issue 15, each with the words its refusal must contain.
REPRODUCERS = {
    "yaml-list-as-document": (b"- apiVersion: tfjob.dev/v1\n- kind: TFJob\n", "must be a YAML mapping, got a list"),
    "yaml-scalar-as-document": (b"just a string\n", "must be a YAML mapping, got a string"),
    "not-utf8": (GOOD.replace("mnist", "mn\udcffist").encode("utf-8", "surrogateescape"), "not UTF-8 text (byte"),
    "1000-nested-brackets": (b"[" * 1000 + b"]" * 1000, "nested too deeply to read"),
    "metadata-x": (GOOD.replace("metadata:\n  name: mnist", "metadata: x").encode(),
                   "metadata: Input should be a valid dictionary"),
    "namespace-bad": (GOOD.replace("  name: mnist", "  name: mnist\n  namespace: Bad NS!").encode(),
                      "metadata.namespace: 'Bad NS!' is not a namespace name"),
    "unknown-gang-backend": (GOOD.replace("  name: mnist", "  name: mnist\n  annotations:\n"
                                          "    tfjob.dev/gang-backend: yunikorn").encode(),
                             "unknown gang backend 'yunikorn'"),
    "image-list": (GOOD.replace("image: tf:1", "image: [x]").encode(),
                   "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: must be a string, got ['x']"),
    "same-job-twice": ((GOOD + "---\n" + GOOD).encode(), "documents 1 and 2 are the same TFJob default/mnist"),
    "10000-workers": (GOOD.replace("replicas: 2", "replicas: 10000").encode(),
                      "spec.tfReplicaSpecs.Worker.replicas: must be ≤ 1000, got 10000"),
    # kubectl reads an integer past int64 as a float (tfjob_operator.api.kubeyaml), and so does render.
    "replicas-2-to-the-63": (GOOD.replace("replicas: 2", "replicas: 9223372036854775808").encode(),
                             "replicas: must be an integer that fits in 64 bits, got 9.223372036854776e+18"),
    "replicas-10-to-the-30": (GOOD.replace("replicas: 2", f"replicas: {10**30}").encode(),
                              "replicas: must be an integer that fits in 64 bits, got 1e+30"),
    "env-as-mapping": (GOOD.replace("image: tf:1", "image: tf:1\n            env: {A: b}").encode(),
                       "containers[0].env: must be an array"),
    "ports-5": (GOOD.replace("image: tf:1", "image: tf:1\n            ports: 5").encode(),
                "containers[0].ports: must be an array, got 5"),
    "container-as-string": (GOOD.replace("          - name: tensorflow\n            image: tf:1",
                                         "          - tensorflow").encode(), "containers[0]: must be an object"),
    "container-name-mapping": (GOOD.replace("name: tensorflow", "name: {a: 1}").encode(),
                               "containers[0].name: must be a string"),
    "template-labels-list": (GOOD.replace("        spec:\n          containers", "        metadata: {labels: [a]}\n"
                                          "        spec:\n          containers").encode(),
                             "template.metadata.labels: must be an object"),
}


@pytest.mark.parametrize("raw", [pytest.param(raw, id=name) for name, (raw, _) in REPRODUCERS.items()])
def test_issue_reproducer_is_refused_naming_the_field(raw: bytes) -> None:
    name = next(n for n, (r, _) in REPRODUCERS.items() if r == raw)
    code, stdout, stderr = render_in_process(raw)
    assert code == 2 and refusal_problems(stdout, stderr) == [], stderr
    assert REPRODUCERS[name][1] in stderr


def test_deep_nesting_is_refused_whatever_the_interpreters_recursion_limit() -> None:
    raw, words = REPRODUCERS["1000-nested-brackets"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # as some libraries do: PyYAML could then read 1000 levels
    try:
        code, stdout, stderr = render_in_process(raw)
    finally:
        sys.setrecursionlimit(limit)
    assert code == 2 and stdout == "" and words in stderr


def test_alias_bomb_is_refused_without_expanding_it() -> None:
    from fuzz_documents import ALIAS_BOMB

    started = time.perf_counter()
    code, stdout, stderr = render_in_process(ALIAS_BOMB)
    assert code == 2 and refusal_problems(stdout, stderr) == [], stderr
    assert "YAML aliases expanded" in stderr and len(stderr) < 1000  # 9^9 'lol's would be gigabytes
    assert time.perf_counter() - started < 30  # a bound against expansion, not a timing claim


@pytest.mark.parametrize("raw", [
    pytest.param(GOOD.replace("template:\n        spec:", "template:\n        metadata:\n          labels:\n"
                              "        spec:").encode(), id="labels-null"),
    pytest.param(GOOD.replace("image: tf:1", "image: tf:1\n            ports:").encode(), id="ports-null"),
])
def test_null_fields_are_unset_so_a_valid_job_still_renders(raw: bytes) -> None:
    code, stdout, stderr = render_in_process(raw)
    check_render(raw, code, stdout, stderr)
    assert code == 0


#: The three of issue 40 (954 generated manifests, three wrong): values tagged !!binary are what kubectl sends,
#: the base64-decoded text (tfjob_operator.api.kubeyaml), and a pod may have any number of containers, as in Kubernetes.
ACCEPTED = {
    "binary-name": (GOOD.replace("name: mnist", "name: !!binary bW5pc3Q="), "mnist-worker-0"),
    "binary-restart-policy": (GOOD.replace("      replicas: 2", "      replicas: 2\n      restartPolicy: !!binary "
                                           "T25GYWlsdXJl"), "restartPolicy: OnFailure"),
    "20-containers": (GOOD.replace("          - name: tensorflow\n            image: tf:1\n", "".join(
        f"          - name: {n}\n            image: tf:1\n" for n in ["tensorflow", *(f"side{i}" for i in range(19))])),
        "name: side18"),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_issue_40_cases_render_what_kubectl_would_send(name: str) -> None:
    text, shown = ACCEPTED[name]
    raw = text.encode()
    code, stdout, stderr = render_in_process(raw)
    check_render(raw, code, stdout, stderr)  # and the API server (the oracle) stores the job as kubectl sends it
    assert code == 0 and shown in stdout, stderr
