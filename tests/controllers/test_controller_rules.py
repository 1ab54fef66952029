"""The controllers' decisions as tables: rollout steps, Job outcomes, NoExecute eviction and the pods a taint
change looks at, GC actions."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubelocal.controllers.garbage_collector import dependent_action
from kubelocal.controllers.job import JobCounts, JobDecision, decide
from kubelocal.controllers.node_lifecycle import NODE_NAME, eviction_delay, no_execute_since
from kubelocal.controllers.rollout import SetState, plan, surge_and_unavailable, template_hash
from kubelocal.kubeclient import FieldIndex

ROLLING: dict[str, Any] = {"type": "RollingUpdate"}  # 25% surge, 25% unavailable
NO_DOWNTIME = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
RECREATE = {"type": "Recreate"}


@pytest.mark.parametrize(("strategy", "replicas", "expected"), [
    (ROLLING, 4, (1, 1)),
    (ROLLING, 3, (1, 0)),       # surge rounds up, unavailable rounds down
    (ROLLING, 10, (3, 2)),
    ({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, 3, (0, 1)),  # would deadlock: one may go
    ({"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 2}}, 4, (2, 2)),
])
def test_surge_and_unavailable(strategy: dict[str, Any], replicas: int, expected: tuple[int, int]) -> None:
    assert surge_and_unavailable(strategy, replicas) == expected


@pytest.mark.parametrize(("case", "replicas", "strategy", "new", "old", "expected"), [
    ("first rollout scales the new set straight up", 3, ROLLING, SetState("n", 0, 0), [], {"n": 3}),
    ("surge first: one extra new pod", 3, NO_DOWNTIME, SetState("n", 0, 0), [SetState("o", 3, 3)], {"n": 1}),
    ("no old pod goes before the new one is available", 3, NO_DOWNTIME, SetState("n", 1, 0),
     [SetState("o", 3, 3)], {}),
    ("then one old pod goes", 3, NO_DOWNTIME, SetState("n", 1, 1), [SetState("o", 3, 3)], {"o": 2}),
    ("an unavailable old pod may go within the surge budget", 3, NO_DOWNTIME, SetState("n", 1, 1),
     [SetState("o", 3, 1)], {"o": 2}),
    ("done: nothing to change", 3, NO_DOWNTIME, SetState("n", 3, 3), [SetState("o", 0, 0)], {}),
    ("scaled down below the new set: shrink it", 2, ROLLING, SetState("n", 3, 3), [], {"n": 2}),
    ("recreate: old sets to zero first", 2, RECREATE, SetState("n", 0, 0), [SetState("o", 2, 2, 2)], {"o": 0}),
    ("recreate: wait for old pods to go", 2, RECREATE, SetState("n", 0, 0), [SetState("o", 0, 0, 1)], {}),
    ("recreate: then the new set", 2, RECREATE, SetState("n", 0, 0), [SetState("o", 0, 0, 0)], {"n": 2}),
])
def test_rollout_plan(case: str, replicas: int, strategy: dict[str, Any], new: SetState, old: list[SetState],
                      expected: dict[str, int]) -> None:
    assert plan(replicas, strategy, new, old) == expected, case


def test_template_hash_is_stable_and_changes_with_the_template() -> None:
    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    same = {"spec": {"containers": [{"image": "i", "name": "c"}]}, "metadata": {"labels": {"app": "a"}}}
    assert template_hash(template) == template_hash(same)
    assert template_hash(template) != template_hash({**template, "spec": {"containers": []}})
    assert template_hash(template) != template_hash(template, collision_count=1)
    assert set(template_hash(template)) <= set("bcdfghjklmnpqrstvwxz2456789")


COMPLETE = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
FAILED = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")


@pytest.mark.parametrize(("spec", "counts", "expected"), [
    ({}, JobCounts(0, 0, 0), JobDecision(create=1)),
    ({}, JobCounts(1, 0, 0), JobDecision()),
    ({"completions": 3, "parallelism": 2}, JobCounts(0, 0, 0), JobDecision(create=2)),
    ({"completions": 3, "parallelism": 2}, JobCounts(1, 2, 0), JobDecision()),
    ({"completions": 3, "parallelism": 2}, JobCounts(0, 2, 0), JobDecision(create=1)),
    ({"completions": 3}, JobCounts(0, 3, 0), JobDecision(finished=COMPLETE)),
    ({"backoffLimit": 1}, JobCounts(0, 0, 1), JobDecision(create=1)),
    ({"backoffLimit": 1}, JobCounts(0, 0, 2), JobDecision(finished=FAILED)),
    ({"completions": None, "parallelism": 2}, JobCounts(1, 1, 0), JobDecision()),
    ({"completions": None, "parallelism": 2}, JobCounts(0, 1, 0), JobDecision(finished=COMPLETE)),
])
def test_job_decision(spec: dict[str, Any], counts: JobCounts, expected: JobDecision) -> None:
    assert decide(spec, counts) == expected


NOW = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)
NOW_TEXT = "2026-11-24T12:00:00.000000Z"
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-24T11:59:50Z"}
DEFAULT_TOLERATION = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 300}


@pytest.mark.parametrize(("case", "tolerations", "taints", "cap", "expected"), [
    ("no NoExecute taint: stays", [], [{"key": "x", "effect": "NoSchedule"}], None, None),
    ("not tolerated: now", [], [UNREACHABLE], None, 0.0),
    ("tolerated 300 s, tainted 10 s ago", [DEFAULT_TOLERATION], [UNREACHABLE], None, 290.0),
    ("the cap shortens the wait", [DEFAULT_TOLERATION], [UNREACHABLE], 0.0, 0.0),
    ("tolerated forever: stays", [{"operator": "Exists"}], [UNREACHABLE], 0.0, None),
    ("a value toleration must match the value", [{"key": "k", "value": "a", "effect": "NoExecute"}],
     [{"key": "k", "value": "b", "effect": "NoExecute"}], None, 0.0),
])
def test_eviction_delay(case: str, tolerations: list[dict[str, Any]], taints: list[dict[str, Any]],
                        cap: float | None, expected: float | None) -> None:
    assert eviction_delay({"spec": {"tolerations": tolerations}}, taints, NOW, cap) == expected, case


SEEN = "2026-11-24T11:59:00.5Z"


@pytest.mark.parametrize(("case", "taints", "before", "expected"), [
    ("no node, no taints", None, {}, {}),
    ("NoSchedule taints do not evict", [{"key": "k", "effect": "NoSchedule"}], {}, {}),
    ("a taint's timeAdded is when it began", [{"key": "k", "value": "v", "effect": "NoExecute", "timeAdded": "T"}],
     {}, {("k", "v"): "T"}),
    ("without timeAdded, it began when first seen", [{"key": "k", "effect": "NoExecute"}], {}, {("k", ""): NOW_TEXT}),
    ("and stays so on later looks", [{"key": "k", "effect": "NoExecute"}], {("k", ""): SEEN}, {("k", ""): SEEN}),
    ("a removed taint is forgotten", [{"key": "a", "effect": "NoExecute"}], {("a", ""): SEEN, ("b", ""): SEEN},
     {("a", ""): SEEN}),
])
def test_no_execute_since_is_what_a_pods_eviction_time_reads_from_its_node(
        case: str, taints: list[dict[str, Any]] | None, before: dict[tuple[str, str], str],
        expected: dict[tuple[str, str], str]) -> None:
    node = None if taints is None else {"spec": {"taints": taints}}
    assert no_execute_since(node, before, NOW_TEXT) == expected, case


def _bound(name: str, node: str | None) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {"nodeName": node} if node else {}}


@pytest.mark.parametrize(("case", "steps", "expected"), [
    ("pods are found by their node", [("a", "n1"), ("b", "n2"), ("c", "n1")], {"n1": ["a", "c"], "n2": ["b"]}),
    ("a pending pod is under the empty value, as fieldSelector=spec.nodeName= finds it",
     [("a", None)], {"": ["a"], "n1": []}),
    ("binding moves a pod from pending to its node", [("a", None), ("a", "n1")], {"": [], "n1": ["a"]}),
    ("a deleted pod leaves its node", [("a", "n1"), ("b", "n1"), ("a", "DELETED")], {"n1": ["b"]}),
    ("an update on the same node keeps one entry", [("a", "n1"), ("a", "n1")], {"n1": ["a"]}),
])
def test_the_node_name_index_selects_exactly_the_pods_on_a_node(
        case: str, steps: list[tuple[str, str | None]], expected: dict[str, list[str]]) -> None:
    index = FieldIndex(NODE_NAME)
    current: dict[tuple[str, str], dict[str, Any]] = {}
    for name, node in steps:
        key = ("ns", name)
        new = None if node == "DELETED" else _bound(name, node)
        index.update(key, current.get(key), new)
        if new is None:
            current.pop(key, None)
        else:
            current[key] = new
    assert {value: [name for _, name in index.keys(value)] for value in expected} == expected, case


@pytest.mark.parametrize(("owners", "expected"), [
    ({}, "keep"),
    ({"a": True}, "keep"),
    ({"a": False}, "delete"),
    ({"a": True, "b": False}, "unlink"),
    ({"a": False, "b": False}, "delete"),
])
def test_dependent_action(owners: dict[str, bool], expected: str) -> None:
    assert dependent_action(owners) == expected
