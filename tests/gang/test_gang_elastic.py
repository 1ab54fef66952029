"""Elastic gangs in the pure admission: the widest width in [min, max] that fits (checked against the independent
oracle), never below min, all or nothing at that width, a waiting gang started narrower, and how that meets
priority, FIFO and the anti-starvation reservation. Rigid gangs are untouched (tests/gang/test_gang_replay_sim.py
and the replay hashes in the report)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from types import SimpleNamespace
from typing import Any

import k8s_oracle
import pytest
from gangfixtures import bound_pods, gang, in_flight_reservations, node, pod

from tfjob_operator.api import constants
from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.gang import base, elastic, queue
from tfjob_operator.gang.cluster import Cluster
from tfjob_operator.gang.elastic import elastic_bounds, gang_at, held_by, rendered_sizes, widest_fit
from tfjob_operator.gang.placement import AdmissionPolicy, Elastic, admit_in
from tfjob_operator.gang.request import GangRequest

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def workers(key: str, n: int, gpu: int = 1, chief_gpu: int | None = None, **kw: Any) -> GangRequest:
    """A gang of ``n`` worker pods labelled as workers (and a chief when ``chief_gpu`` is given)."""
    g = gang(key, n, gpu=gpu, **kw)
    pods = [_labelled(p, "worker") for p in g.pods]
    if chief_gpu is not None:
        pods.insert(0, _labelled(pod(f"{key}-chief-0", gpu=chief_gpu, **kw), "chief"))
    return GangRequest(key, tuple(pods), priority=g.priority, arrival=g.arrival, domain_label=g.domain_label)


def _labelled(p: dict[str, Any], rtype: str) -> dict[str, Any]:
    p["metadata"]["labels"] = {constants.LABEL_REPLICA_TYPE: rtype}
    return p


def elastic_of(g: GangRequest, lo: int, hi: int) -> Elastic:
    return Elastic(lo, hi, width=sum(1 for p in g.pods if elastic.is_worker(p)), at=partial(gang_at, g))


# ------------------------------------------------------------------ widest width that fits

# (case, nodes, bound pods, gang, (min, max), widest or None)
WIDEST = [
    ("max fits", [node("a", gpu=8)], [], workers("j", 4), (2, 6), 6),
    ("narrower when max does not", [node("a", gpu=3)], [], workers("j", 4), (2, 4), 3),
    ("never below min", [node("a", gpu=1)], [], workers("j", 4), (2, 4), None),
    ("min exactly", [node("a", gpu=2)], [], workers("j", 4), (2, 4), 2),
    ("across node shapes", [node("a", gpu=8), node("b", gpu=2), node("c", gpu=1)],
     [pod("x", gpu=5, node_name="a", phase="Running")], workers("j", 4, gpu=2), (1, 8), 2),
    ("two GPUs per worker on odd nodes", [node("a", gpu=3), node("b", gpu=3)], [], workers("j", 4, gpu=2), (1, 4), 2),
    ("cpu is short, not GPUs", [node("a", gpu=8, cpu="3")], [], workers("j", 4, cpu="1"), (1, 8), 3),
    ("a tainted node is not counted without a toleration",
     [node("a", gpu=8, taints=[GPU_TAINT]), node("b", gpu=2)], [], workers("j", 4), (1, 8), 2),
    ("a tainted node counts with one",
     [node("a", gpu=8, taints=[GPU_TAINT]), node("b", gpu=2)], [], workers("j", 4, tolerations=[GPU_TOLERATION]),
     (1, 8), 8),
    ("the chief comes first and is never dropped", [node("a", gpu=4)], [], workers("j", 4, chief_gpu=2), (1, 4), 2),
    ("the chief alone does not fit", [node("a", gpu=1)], [], workers("j", 4, gpu=1, chief_gpu=2), (1, 4), None),
    ("one domain for every pod", [node("a", gpu=2, labels={"rack": "1"}), node("b", gpu=3, labels={"rack": "2"})],
     [], workers("j", 4, domain_label="rack"), (1, 4), 3),
]


@pytest.mark.parametrize(("nodes", "bound", "g", "bounds", "widest"), [r[1:] for r in WIDEST],
                         ids=[r[0] for r in WIDEST])
def test_widest_width_that_fits(nodes: list[dict[str, Any]], bound: list[dict[str, Any]], g: GangRequest,
                                bounds: tuple[int, int], widest: int | None) -> None:
    assert widest_fit(Cluster.from_objects(nodes, bound), g, bounds) == widest


def _oracle_widest(nodes: Sequence[Mapping[str, Any]], bound: Sequence[Mapping[str, Any]], template: dict[str, Any],
                   bounds: tuple[int, int]) -> int | None:
    """Independently: how many copies of the pod each node takes (Kubernetes' fit rules, k8s_oracle), summed."""
    room = 0
    for n in nodes:
        if not k8s_oracle.may_run_on(template, n):
            continue
        here = [p for p in bound if p["spec"].get("nodeName") == n["metadata"]["name"]]
        k = 0
        while k < bounds[1] and not k8s_oracle.overcommitted(n, here + [template] * (k + 1)):
            k += 1
        room += k
    return min(room, bounds[1]) if room >= bounds[0] else None


@pytest.mark.parametrize("seed", range(40))
def test_widest_fit_agrees_with_the_oracle_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [node(f"n{i}", gpu=rng.choice([0, 1, 2, 4, 8]), cpu=str(rng.choice([2, 4, 16])),
                  taints=[GPU_TAINT] if rng.random() < 0.3 else None, ready=rng.random() > 0.1)
             for i in range(rng.randint(1, 5))]
    bound = [pod(f"b{i}", gpu=rng.choice([0, 1, 2]), cpu="1", node_name=n["metadata"]["name"], phase="Running")
             for i, n in enumerate(nodes) if rng.random() < 0.5
             and int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 2]
    per = rng.choice([1, 2])
    tolerate = [GPU_TOLERATION] if rng.random() < 0.5 else None
    g = workers("j", 2, gpu=per, cpu=str(rng.choice([1, 2])), tolerations=tolerate)
    lo = rng.randint(1, 3)
    bounds = (lo, lo + rng.randint(0, 6))
    expected = _oracle_widest(nodes, bound, dict(g.pods[0]), bounds)
    assert widest_fit(Cluster.from_objects(nodes, bound), g, bounds) == expected


def test_the_jobs_own_pods_count_as_free_for_it() -> None:
    """The widen signal: a job running 2 workers on a 4-GPU node would fit 4 there, were its own pods released."""
    own = [_labelled(pod(f"j-worker-{i}", gpu=1, node_name="a", phase="Running"), "worker") for i in range(2)]
    other = pod("x", gpu=1, node_name="b", phase="Running")
    cluster = Cluster.from_objects([node("a", gpu=4), node("b", gpu=1)], [*own, other])
    g = workers("j", 2)
    assert widest_fit(cluster, g, (1, 8)) == 2
    assert widest_fit(cluster, g, (1, 8), held_by(own)) == 4


def test_gang_at_keeps_the_other_pods_and_copies_a_worker() -> None:
    g = workers("j", 2, chief_gpu=2)
    wider = gang_at(g, 4)
    names = [p["metadata"]["name"] for p in wider.pods]
    assert names[0] == "j-chief-0" and len(set(names)) == 5 and sum(map(elastic.is_worker, wider.pods)) == 4
    assert sum(map(elastic.is_worker, gang_at(g, 1).pods)) == 1


# ------------------------------------------------------------------ in the pass


def test_a_waiting_elastic_gang_gets_the_narrower_width_that_fits_and_holds_it() -> None:
    e = workers("e", 4, arrival=0.0)
    small = gang("small", 1, gpu=1, arrival=1.0)
    result = admit_in(Cluster.from_objects([node("a", gpu=3)]), [e, small], elastic={"e": elastic_of(e, 2, 4)})
    assert result.admitted == {}  # all or nothing at its width: not 3 of its 4 pods
    assert result.fits == {"e": 3}
    assert "3 of its 4 workers fit now" in result.waits["e"].message
    assert "small" in result.waits  # ranked after it: the 3 GPUs are held for it while it is created again


def test_an_elastic_gang_that_fits_its_width_is_admitted_whole() -> None:
    e = workers("e", 2)
    result = admit_in(Cluster.from_objects([node("a", gpu=3)]), [e], elastic={"e": elastic_of(e, 1, 4)})
    assert sorted(result.admitted["e"]) == ["e-worker-0", "e-worker-1"] and result.fits == {"e": 2}


def test_below_min_the_elastic_gang_waits_like_a_rigid_one() -> None:
    e = workers("e", 4)
    small = gang("small", 1, gpu=1, arrival=1.0)
    result = admit_in(Cluster.from_objects([node("a", gpu=1)]), [e, small], elastic={"e": elastic_of(e, 2, 4)})
    assert result.fits == {"e": None} and "e" in result.waits
    assert "small" in result.admitted  # nothing held: backfill as for any waiting gang


def test_a_higher_priority_gang_is_placed_before_the_elastic_one_narrows() -> None:
    e = workers("e", 4, arrival=0.0)
    high = gang("high", 2, gpu=1, priority=10, arrival=5.0)
    result = admit_in(Cluster.from_objects([node("a", gpu=4)]), [e, high], elastic={"e": elastic_of(e, 1, 4)})
    assert "high" in result.admitted and result.fits == {"e": 2}


def test_an_elastic_gang_never_takes_capacity_reserved_for_a_starving_gang() -> None:
    # "big" (8 GPUs, earlier) has waited long enough: node a (6 free now) is held for it; e sees only node b.
    big = gang("big", 8, gpu=1, arrival=0.0)
    e = workers("e", 4, arrival=1.0)
    nodes = [node("a", gpu=8), node("b", gpu=2)]
    running = [pod("r", gpu=2, node_name="a", phase="Running"), pod("s", gpu=1, node_name="b", phase="Running")]
    result = admit_in(Cluster.from_objects(nodes, running), [big, e], AdmissionPolicy(starvation_passes=0),
                      elastic={"e": elastic_of(e, 1, 4)})
    assert result.reserved_for == "big" and set(result.held) == {"a"}
    assert result.fits == {"e": 1}


def test_rigid_gangs_pass_as_before_when_elastic_gangs_are_given() -> None:
    queue_ = [gang("r1", 3, gpu=1, arrival=0.0), gang("r2", 2, gpu=1, arrival=1.0)]
    cluster = Cluster.from_objects([node("a", gpu=4)])
    plain = admit_in(cluster, queue_)
    assert admit_in(cluster, queue_, elastic={}) == plain and plain.fits == {}


# ------------------------------------------------------------------ the builtin pass over jobs


def job(name: str, workers_: int) -> Any:
    container = {"name": "tensorflow", "image": "tf:1",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}
    return parse_tfjob({"apiVersion": "tfjob.dev/v1", "kind": "TFJob",
                        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers_,
                                                               "template": {"spec": {"containers": [container]}}}}}})


def gated(name: str, width: int) -> list[dict[str, Any]]:
    """The gang's pods as the reconcile creates them at ``width``: gated, recording their gang size."""
    from tfjob_operator.gang.builtin import BuiltinBackend
    from tfjob_operator.reconcile.render import render

    j = job(name, width)
    pods = [BuiltinBackend().decorate_pod(j, p) for p in render(j).pods]
    for p in pods:
        p["metadata"]["annotations"][constants.ANNOTATION_GANG_REPLICAS] = json.dumps({"Worker": width})
        p["status"] = {"phase": "Pending"}
    return pods


@pytest.fixture
def elastic_jobs(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    """Jobs by name → (min, max): a stand-in for spec.elasticPolicy until the API field is in this branch."""
    bounds: dict[str, tuple[int, int]] = {}
    monkeypatch.setattr(queue, "elastic_bounds", lambda j: bounds.get(j.name))
    monkeypatch.setattr(base, "elastic_bounds", lambda j: bounds.get(j.name))
    return bounds


def test_the_pass_admits_an_elastic_gang_at_the_width_its_pods_were_created_with(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (2, 4)
    # The spec says 4 workers; the reconcile created 2 (what fit): the gang is complete at 2, not "creating".
    pods = gated("e", 2)
    gangs = [queue.QueuedGang(job("e", 4), pods)]
    nodes = [node("a", gpu=2)]
    plan = queue.plan_pass_in(gangs, Cluster.from_objects(nodes), now=NOW)
    assert plan.admitted == ["ns/e"] and sorted(r.pod for r in plan.releases) == ["e-worker-0", "e-worker-1"]
    assert plan.fits == {"ns/e": 2}
    # A rigid job with the same pods is still waiting for the rest of its gang.
    rigid = queue.plan_pass_in([queue.QueuedGang(job("r", 4), gated("r", 2))], Cluster.from_objects(nodes), now=NOW)
    assert rigid.admitted == [] and "waiting for all 4 pods" in rigid.waits["ns/r"].message


def test_the_pass_reports_a_narrower_width_for_a_gang_created_too_wide(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (2, 4)
    all_pods = [*gated("e", 4), pod("x", gpu=1, node_name="a", phase="Running")]
    gangs = [queue.QueuedGang(job("e", 4), all_pods[:4])]
    cluster = Cluster.from_objects([node("a", gpu=4)], bound_pods(all_pods), in_flight_reservations(all_pods))
    plan = queue.plan_pass_in(gangs, cluster, now=NOW)
    assert plan.admitted == [] and plan.fits == {"ns/e": 3}


def test_rendered_sizes_reads_the_pods_record() -> None:
    assert rendered_sizes(gated("e", 3)) == {3} and rendered_sizes([pod("x")]) == set()


def test_pods_of_two_widths_are_not_admitted_together(elastic_jobs: dict[str, tuple[int, int]]) -> None:
    elastic_jobs["e"] = (2, 4)
    # Created again at 3 while the old width-4 pod worker-3 is still there (not yet being deleted).
    pods = [*gated("e", 3), gated("e", 4)[3]]
    plan = queue.plan_pass_in([queue.QueuedGang(job("e", 4), pods)], Cluster.from_objects([node("a", gpu=8)]),
                              now=NOW)
    assert plan.admitted == [] and plan.waits["ns/e"].message == (
        "waiting for the gang to be created again at one width (its pods record 3 and 4)")


# ------------------------------------------------------------------ bounds and the PodGroup backends


def test_elastic_bounds_reads_the_policy_and_fills_what_is_left_out() -> None:
    def of(policy: Any, replicas: int = 4) -> Any:
        spec = SimpleNamespace(replicas=replicas)
        return SimpleNamespace(spec=SimpleNamespace(elasticPolicy=policy),
                               replica_specs=lambda: [(elastic.ReplicaType.WORKER, spec)])

    assert elastic_bounds(job("rigid", 4)) is None
    assert elastic_bounds(of(SimpleNamespace(minReplicas=2, maxReplicas=6))) == (2, 6)
    assert elastic_bounds(of(SimpleNamespace(minReplicas=2, maxReplicas=None))) == (2, 4)
    assert elastic_bounds(of(SimpleNamespace(minReplicas=0, maxReplicas=1))) == (1, 1)


def test_podgroup_min_member_is_min_workers_plus_the_other_replicas(
        elastic_jobs: dict[str, tuple[int, int]]) -> None:
    from tfjob_operator.reconcile.render import render

    container = {"name": "tensorflow", "image": "tf:1", "resources": {"requests": {"cpu": "1"},
                                                                      "limits": {"nvidia.com/gpu": "1"}}}
    template = {"spec": {"containers": [container]}}
    j = parse_tfjob({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "e", "namespace": "ns"},
                     "spec": {"tfReplicaSpecs": {"Chief": {"replicas": 1, "template": template},
                                                 "Worker": {"replicas": 4, "template": template}}}})
    pods = render(j).pods
    assert base.min_member(j, pods) == 5
    elastic_jobs["e"] = (2, 4)
    assert base.min_member(j, pods) == 3
    assert base.min_resources(j, pods) == {"cpu": "3", "nvidia.com/gpu": "3"}
