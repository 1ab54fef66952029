"""A job whose reconcile keeps raising is failed with the error named after a bounded number of attempts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tfjob_operator.reconcile import EmitEvent
from tfjob_operator.reconcile_errors import MAX_UNEXPECTED_ERRORS, REASON, give_up, gives_up

NOW = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)


@pytest.mark.parametrize(("failures", "expected"), [(1, False), (MAX_UNEXPECTED_ERRORS - 1, False),
                                                    (MAX_UNEXPECTED_ERRORS, True), (MAX_UNEXPECTED_ERRORS + 7, True)])
def test_retries_are_bounded(failures: int, expected: bool) -> None:
    assert gives_up(failures) is expected


def test_giving_up_fails_the_job_naming_the_error_with_a_warning_event() -> None:
    job = {"metadata": {"name": "m", "namespace": "default"}, "spec": {},
           "status": {"conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning"}]}}
    decision = give_up(job, TypeError("'int' object is not iterable"), 5, NOW)
    failed = next(c for c in decision.status.conditions if c.type == "Failed")
    running = next(c for c in decision.status.conditions if c.type == "Running")
    assert (failed.status, failed.reason, running.status) == ("True", REASON, "False")
    assert "TypeError: 'int' object is not iterable" in (failed.message or "")
    assert decision.status.state == "Failed" and decision.status.completionTime
    (event,) = decision.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Warning", REASON)


def test_a_finished_job_keeps_its_outcome() -> None:
    job = {"metadata": {"name": "m"}, "status": {"conditions": [{"type": "Succeeded", "status": "True",
                                                                  "reason": "JobSucceeded"}]}}
    decision = give_up(job, RuntimeError("x"), 9, NOW)
    assert [(c.type, c.reason) for c in decision.status.conditions] == [("Succeeded", "JobSucceeded")]
    assert decision.of_type(EmitEvent) == []
