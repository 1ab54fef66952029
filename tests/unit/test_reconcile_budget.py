"""A job's reconcile has a memory budget (bytes of the pods it would render, estimated from sizes before
rendering) and a time budget; a job over either is failed with reason ReconcileBudgetExceeded and a Warning Event."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.controller import reconcile_budget
from tfjob_operator.reconcile import EmitEvent
from tfjob_operator.reconcile.render import RenderOptions, render

NOW = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)
MIB = 1024 * 1024


def job(workers: int, env_bytes: int = 0, ps: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "tensorflow", "image": "tf", "command": ["python", "train.py"]}
    if env_bytes:
        container["env"] = [{"name": "BLOB", "value": "x" * env_bytes}]
    replica = {"replicas": workers, "template": {"spec": {"containers": [container]}}}
    specs = {"Worker": replica, **({"PS": {**replica, "replicas": ps}} if ps else {})}
    return {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "m", "namespace": "default"},
            "spec": {"tfReplicaSpecs": specs}}


@pytest.mark.parametrize(("workers", "env_bytes", "ps", "over"), [
    (2, 0, 0, False),              # a usual job
    (1000, 0, 0, False),           # as many pods as the limits allow, lean template (~36 MiB)
    (1000, 200_000, 0, True),      # as many pods and as fat a template as the limits allow
    (200, 200_000, 0, False),      # a fat template, fewer pods
    (600, 100_000, 400, True),     # the pods of several types add up
])
def test_the_memory_budget_counts_every_pod_with_its_template_and_tf_config(
        workers: int, env_bytes: int, ps: int, over: bool) -> None:
    why = reconcile_budget.over_bytes(parse_tfjob(job(workers, env_bytes, ps)), reconcile_budget.DEFAULT_BYTES)
    assert (why is not None) is over
    if why:
        assert f"{workers + ps} pods" in why and "TFJOB_RECONCILE_BUDGET_BYTES" in why and "128 MiB" in why


@pytest.mark.parametrize(("workers", "env_bytes"), [(1, 0), (3, 5000), (40, 20_000)])
def test_the_estimate_is_never_below_what_render_builds(workers: int, env_bytes: int) -> None:
    tfjob = parse_tfjob(job(workers, env_bytes))
    built = sum(len(json.dumps(p)) for p in render(tfjob, RenderOptions()).pods)
    assert built <= reconcile_budget.rendered_bytes(tfjob) < 3 * built + 10_000


def test_a_job_over_budget_fails_with_the_reason_and_a_warning_event() -> None:
    obj = job(1000, 200_000)
    why = reconcile_budget.over_bytes(parse_tfjob(obj), 64 * MIB)
    assert why is not None
    decision = reconcile_budget.fail(obj, why, NOW)
    failed = next(c for c in decision.status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", reconcile_budget.REASON)
    assert "1000 pods" in (failed.message or "") and decision.status.state == "Failed"
    (event,) = decision.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Warning", reconcile_budget.REASON)


def test_the_time_budget_message_names_the_setting_and_the_time_spent() -> None:
    message = reconcile_budget.over_seconds(31.25, 30.0)
    assert "30 s" in message and "TFJOB_RECONCILE_BUDGET_SECONDS" in message and "31.2 s" in message
