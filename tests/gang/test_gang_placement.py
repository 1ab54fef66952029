"""The pure gang admission: all-or-nothing, best fit, priority/FIFO, reservations, anti-starvation."""

from __future__ import annotations

import random
from decimal import Decimal

import k8s_oracle
import pytest
from gangfixtures import admit, gang, node, pod

from tfjob_operator.gang.cluster import Cluster
from tfjob_operator.gang.placement import AdmissionPolicy
from tfjob_operator.gang.request import GangRequest

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# (case, nodes, bound pods, gang, admitted?, text the reason must contain when not admitted)
FIT_TABLE = [
    ("fits on one node", [node("a", gpu=8)], [], gang("j", 4, gpu=2), True, ""),
    ("fits spread over nodes", [node("a", gpu=4), node("b", gpu=4)], [], gang("j", 2, gpu=4), True, ""),
    (
        "too few gpus in total",
        [node("a", gpu=4), node("b", gpu=2)],
        [],
        gang("j", 2, gpu=4),
        False,
        "needs 8 nvidia.com/gpu on ≤ 2 nodes; largest free 4 (6 free on 2 eligible nodes)",
    ),
    (
        "fragmented: aggregate fits, per node does not",
        [node("a", gpu=8), node("b", gpu=8)],
        [pod("x", gpu=4, node_name="a", phase="Running"), pod("y", gpu=4, node_name="b", phase="Running")],
        gang("j", 1, gpu=8),
        False,
        "needs 8 nvidia.com/gpu on ≤ 1 node; largest free 4 (8 free on 2 eligible nodes)",
    ),
    (
        "terminal pods free their node",
        [node("a", gpu=8)],
        [pod("done", gpu=8, node_name="a", phase="Succeeded")],
        gang("j", 1, gpu=8),
        True,
        "",
    ),
    (
        "cpu is the short resource",
        [node("a", cpu="4"), node("b", cpu="4")],
        [pod("x", cpu="3", node_name="a", phase="Running")],
        gang("j", 2, cpu="3"),
        False,
        "needs 6 cpu on ≤ 2 nodes; largest free 4 (5 free on 2 eligible nodes)",
    ),
    (
        "memory is the short resource",
        [node("a", memory="8Gi")],
        [],
        gang("j", 2, memory="6Gi"),
        False,
        "largest free 8Gi",
    ),
    (
        "millicores add up exactly",
        [node("a", cpu="1")],
        [pod("x", cpu="250m", node_name="a", phase="Running")],
        gang("j", 3, cpu="250m", memory="1Mi"),
        True,
        "",
    ),
    (
        "tainted gpu nodes refuse pods without the toleration",
        [node("a", gpu=8, taints=[GPU_TAINT])],
        [],
        gang("j", 1, gpu=1),
        False,
        "no ready node matches the nodeSelector, node affinity and tolerations of pod j-worker-0",
    ),
    (
        "the toleration lets them in",
        [node("a", gpu=8, taints=[GPU_TAINT])],
        [],
        gang("j", 1, gpu=1, tolerations=[GPU_TOLERATION]),
        True,
        "",
    ),
    (
        "nodeSelector limits the nodes",
        [node("a", gpu=8, labels={"pool": "a100"}), node("b", gpu=8, labels={"pool": "t4"})],
        [],
        gang("j", 3, gpu=4, node_selector={"pool": "a100"}),
        False,
        "needs 12 nvidia.com/gpu on ≤ 3 nodes; largest free 8 (8 free on 1 eligible nodes)",
    ),
    (
        "not-ready nodes are not used",
        [node("a", gpu=8, ready=False)],
        [],
        gang("j", 1, gpu=1),
        False,
        "no ready node matches",
    ),
    (
        "a resource no node offers",
        [node("a")],
        [],
        gang("j", 1, gpu=1),
        False,
        "no node offers nvidia.com/gpu",
    ),
    (
        "a node holding its maxPods takes no more pods, however small",
        [node("a", pods="2")],
        [pod("x", cpu="0", memory="0", node_name="a", phase="Running"),
         pod("y", cpu="0", memory="0", node_name="a", phase="Running")],
        gang("j", 1, cpu="0", memory="0"),
        False,
        "needs 1 pods on ≤ 1 node; largest free 0",
    ),
    (
        "finished pods give their pod slot back",
        [node("a", pods="2")],
        [pod("x", cpu="0", memory="0", node_name="a", phase="Succeeded"),
         pod("y", cpu="0", memory="0", node_name="a", phase="Failed")],
        gang("j", 2, cpu="0", memory="0"),
        True,
        None,
    ),
    (
        "bigger than any node forever",
        [node("a", gpu=4)],
        [],
        gang("j", 1, gpu=8),
        False,
        "cannot fit even on empty nodes",
    ),
]


@pytest.mark.parametrize(
    ("nodes", "bound", "request_", "fits", "reason"),
    [row[1:] for row in FIT_TABLE],
    ids=[row[0] for row in FIT_TABLE],
)
def test_gang_is_admitted_only_when_every_pod_fits(nodes, bound, request_, fits, reason):
    result = admit([request_], nodes, bound)
    if fits:
        assert set(result.admitted[request_.key]) == {p["metadata"]["name"] for p in request_.pods}
        assert request_.key not in result.waiting
    else:
        assert result.admitted == {}
        assert reason in result.waiting[request_.key]


def _with_side_containers(rng: random.Random, p: dict) -> dict:
    """Add what makes a pod's request more than its app container: init containers, sidecars, overhead."""
    spec = p["spec"]
    for i in range(rng.randint(0, 2)):
        init = {"name": f"init-{i}", "resources": {"requests": {"cpu": str(rng.randint(1, 8))}}}
        if rng.random() < 0.5:
            init["restartPolicy"] = "Always"  # a sidecar: it runs beside the app containers
        spec.setdefault("initContainers", []).append(init)
    if rng.random() < 0.3:
        spec["overhead"] = {"cpu": "500m"}
    return p


@pytest.mark.parametrize("seed", range(5))
def test_every_admitted_pod_fits_its_node_by_an_independent_oracle(seed):
    """Checked by tests/gang/k8s_oracle.py (the Kubernetes rules written again), not by resources.py."""
    rng = random.Random(seed)
    nodes = [node(f"n{i}", gpu=rng.choice([0, 4, 8]), cpu=str(rng.choice([8, 16, 64])),
                  taints=[GPU_TAINT] if rng.random() < 0.3 else None,
                  labels={"zone": rng.choice(["a", "b"])}) for i in range(12)]
    bound: list[dict] = []
    for i in range(8):  # pods already running, each on a node it fits (by the oracle)
        p = _with_side_containers(rng, pod(f"b{i}", cpu=str(rng.randint(1, 4)), node_name=f"n{rng.randrange(12)}",
                                           phase="Running"))
        home = nodes[int(p["spec"]["nodeName"][1:])]
        neighbours = [b for b in bound if b["spec"]["nodeName"] == p["spec"]["nodeName"]]
        if not k8s_oracle.overcommitted(home, [*neighbours, p]):
            bound.append(p)
    queue = []
    for k in range(30):
        extra = {}
        if rng.random() < 0.3:
            extra["tolerations"] = [GPU_TOLERATION]
        if rng.random() < 0.3:
            extra["node_selector"] = {"zone": rng.choice(["a", "b"])}
        g = gang(f"j{k}", rng.randint(1, 4), gpu=rng.choice([0, 1, 2, 4]), cpu=str(rng.randint(1, 6)), arrival=k,
                 **extra)
        for p in g.pods:
            _with_side_containers(rng, p)
        queue.append(g)
    result = admit(queue, nodes, bound)
    assert result.admitted and result.waiting
    pods = {p["metadata"]["name"]: p for g in queue for p in g.pods}
    on_node: dict[str, list[dict]] = {n["metadata"]["name"]: [] for n in nodes}
    for p in bound:
        on_node[p["spec"]["nodeName"]].append(p)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for placement in result.admitted.values():
        for pod_name, node_name in placement.items():
            assert k8s_oracle.may_run_on(pods[pod_name], by_name[node_name]), (pod_name, node_name)
            on_node[node_name].append(pods[pod_name])
    for node_name, placed in on_node.items():
        assert k8s_oracle.overcommitted(by_name[node_name], placed) == {}, node_name


def test_a_sidecar_that_makes_the_pod_too_big_keeps_the_gang_waiting():
    """4 CPUs: an app container of 3 plus a sidecar of 2 needs 5 (the sidecar keeps running beside it)."""
    g = gang("j", 1, cpu="3")
    g.pods[0]["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always",
                                            "resources": {"requests": {"cpu": "2"}}}]
    assert k8s_oracle.effective_request(g.pods[0])["cpu"] == 5000
    result = admit([g], [node("a", cpu="4")])
    assert result.admitted == {} and "j" in result.waiting


def test_pods_that_request_nothing_spill_to_the_next_node_at_its_pod_limit():
    # Without the pod count every such pod "fits" the first node and the scheduler then refuses it at maxPods.
    nodes = [node("a", pods="3"), node("b", pods="3")]
    bound = [pod(f"x{i}", cpu="0", memory="0", node_name="a", phase="Running") for i in range(2)]
    request_ = gang("j", 4, cpu="0", memory="0")
    placed = admit([request_], nodes, bound).admitted["j"]
    per_node = {n: sorted(p for p, on in placed.items() if on == n) for n in ("a", "b")}
    assert [len(per_node["a"]), len(per_node["b"])] == [1, 3]


def test_best_fit_fills_used_nodes_and_keeps_whole_nodes_free():
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c", gpu=8)]
    bound = [pod("x", gpu=6, node_name="b", phase="Running")]
    small = gang("small", 1, gpu=2, arrival=0)
    big = gang("big", 2, gpu=8, arrival=1)
    result = admit([small, big], nodes, bound)
    assert result.admitted["small"] == {"small-worker-0": "b"}
    assert sorted(result.admitted["big"].values()) == ["a", "c"]


def test_cpu_only_pods_avoid_gpu_nodes():
    nodes = [node("gpu", gpu=8), node("cpu")]
    result = admit([gang("ps", 2, cpu="2")], nodes)
    assert set(result.admitted["ps"].values()) == {"cpu"}


def test_reservations_count_as_used():
    nodes = [node("a", gpu=8)]
    first = admit([gang("j", 1, gpu=8)], nodes)
    assert first.admitted
    held = {"a": {"nvidia.com/gpu": Decimal(6)}}
    result = admit([gang("j", 1, gpu=4)], nodes, reservations=held)
    assert result.admitted == {}
    assert "largest free 2" in result.waiting["j"]


def test_admissions_in_one_pass_do_not_double_book():
    nodes = [node("a", gpu=6)]
    result = admit([gang("one", 4, gpu=1, arrival=0), gang("two", 4, gpu=1, arrival=1)], nodes)
    assert list(result.admitted) == ["one"]
    assert "largest free 2" in result.waiting["two"]


# (case, gangs as (key, workers, gpu, priority, arrival), nodes' gpus, expected admitted keys)
ORDER_TABLE = [
    ("fifo: earlier first", [("late", 1, 4, 0, 2.0), ("early", 1, 4, 0, 1.0)], [4], {"early"}),
    ("priority beats arrival", [("old", 1, 4, 0, 1.0), ("urgent", 1, 4, 5, 9.0)], [4], {"urgent"}),
    ("equal rank breaks ties by key", [("b", 1, 4, 0, 1.0), ("a", 1, 4, 0, 1.0)], [4], {"a"}),
    ("backfill: small job behind a big one starts", [("big", 2, 8, 0, 1.0), ("small", 1, 2, 0, 2.0)], [8], {"small"}),
]


@pytest.mark.parametrize(
    ("specs", "gpus", "expected"), [row[1:] for row in ORDER_TABLE], ids=[row[0] for row in ORDER_TABLE]
)
def test_queue_order_is_priority_then_fifo(specs, gpus, expected):
    queue = [gang(k, w, gpu=g, priority=p, arrival=a) for k, w, g, p, a in specs]
    nodes = [node(f"n{i}", gpu=g) for i, g in enumerate(gpus)]
    assert set(admit(queue, nodes).admitted) == expected


def test_strict_fifo_starts_nothing_behind_a_waiting_gang():
    queue = [gang("big", 2, gpu=8, arrival=1), gang("small", 1, gpu=2, arrival=2)]
    busy = [pod("x", gpu=4, node_name="b", phase="Running")]
    result = admit(queue, [node("a", gpu=8), node("b", gpu=8)], busy, policy=AdmissionPolicy(backfill=False))
    assert result.admitted == {}
    assert result.waiting["small"] == "waiting behind big (strict FIFO)"


def test_strict_fifo_does_not_block_on_a_gang_that_can_never_fit():
    queue = [gang("huge", 1, gpu=16, arrival=1), gang("small", 1, gpu=2, arrival=2)]
    result = admit(queue, [node("a", gpu=8)], policy=AdmissionPolicy(backfill=False))
    assert set(result.admitted) == {"small"}


DOMAIN = "example.com/nvlink-island"


def test_domain_keeps_every_pod_in_one_label_value():
    nodes = [
        node("a1", gpu=8, labels={DOMAIN: "a"}),
        node("a2", gpu=8, labels={DOMAIN: "a"}),
        node("b1", gpu=8, labels={DOMAIN: "b"}),
        node("b2", gpu=8, labels={DOMAIN: "b"}),
    ]
    bound = [pod("x", gpu=4, node_name="a1", phase="Running"), pod("y", gpu=4, node_name="b2", phase="Running")]
    # 12 GPUs are free in each island but only 8+4: four 4-GPU pods need 16 GPUs across islands.
    spread = admit([gang("j", 4, gpu=4, domain_label=DOMAIN)], nodes, bound)
    assert spread.admitted == {}
    assert f"one value of node label {DOMAIN}" in spread.waiting["j"]
    ok = admit([gang("j", 3, gpu=4, domain_label=DOMAIN)], nodes, bound)
    islands = {n[0] for n in ok.admitted["j"].values()}
    assert len(islands) == 1


def test_domain_prefers_the_fullest_island_that_fits():
    nodes = [node("a1", gpu=8, labels={DOMAIN: "a"}), node("b1", gpu=8, labels={DOMAIN: "b"})]
    bound = [pod("x", gpu=6, node_name="b1", phase="Running")]
    result = admit([gang("j", 1, gpu=2, domain_label=DOMAIN)], nodes, bound)
    assert result.admitted["j"] == {"j-worker-0": "b1"}


def test_domain_ignores_nodes_without_the_label():
    result = admit([gang("j", 1, gpu=1, domain_label=DOMAIN)], [node("plain", gpu=8)])
    assert result.admitted == {}
    assert "cannot fit even on empty nodes" in result.waiting["j"]


def test_mixed_gang_places_each_replica_type():
    ps = pod("j-ps-0", cpu="4")
    workers = tuple(pod(f"j-worker-{i}", gpu=4, cpu="2") for i in range(2))
    request = GangRequest("j", (ps, *workers))
    result = admit([request], [node("g1", gpu=4), node("g2", gpu=4), node("c1", cpu="8")])
    assert result.admitted["j"] == {"j-worker-0": "g1", "j-worker-1": "g2", "j-ps-0": "c1"}


def test_a_later_replica_type_sees_what_earlier_ones_of_its_gang_took():
    """a has 6 GPUs free, b 3: the 4-GPU chief goes to a; then a has room for one 2-GPU worker (and is the best
    fit for it, 0 left), not three, so the other worker goes to b."""
    chief = pod("j-chief-0", gpu=4)
    workers = tuple(pod(f"j-worker-{i}", gpu=2) for i in range(2))
    bound = [pod("x", gpu=2, node_name="a", phase="Running"), pod("y", gpu=5, node_name="b", phase="Running")]
    result = admit([GangRequest("j", (chief, *workers))], [node("a", gpu=8), node("b", gpu=8)], bound)
    assert result.admitted["j"] == {"j-chief-0": "a", "j-worker-0": "a", "j-worker-1": "b"}


def test_nodes_that_report_no_pod_count_do_not_hide_what_is_short():
    """A node without `pods` in its allocatable (a bare test node) takes any number of pods. Two of them once
    summed to more than an int64 holds, wrapped round to 0 free pods, and the reason blamed pods instead of the
    GPUs the gang cannot get."""
    nodes = [node("a", gpu=4), node("b", gpu=4)]
    for n in nodes:
        del n["status"]["allocatable"]["pods"]
    result = admit([gang("j", 3, gpu=3)], nodes)
    assert result.waiting["j"].startswith(
        "needs 9 nvidia.com/gpu on ≤ 3 nodes; largest free 4 (8 free on 2 eligible nodes)"
    ), result.waiting["j"]


def test_passes_waited_counts_up_and_forgets_admitted_gangs():
    nodes = [node("a", gpu=8)]
    first = admit([gang("big", 2, gpu=8)], nodes)
    again = admit([gang("big", 2, gpu=8)], nodes, passes_waited=first.passes_waited)
    assert again.passes_waited == {"big": 2}
    done = admit([gang("big", 1, gpu=8)], nodes, passes_waited=again.passes_waited)
    assert done.passes_waited == {}


class _Sim:
    """Tiny event loop: runs admitted gangs for a fixed number of passes, then frees their pods."""

    def __init__(self, nodes, policy):
        self.nodes, self.policy = nodes, policy
        self.running: dict[str, tuple[int, list[dict]]] = {}
        self.waited: dict[str, int] = {}
        self.started: dict[str, int] = {}

    def step(self, t: int, queue: list[GangRequest], runtime: int) -> list[GangRequest]:
        for key, (end, _) in list(self.running.items()):
            if end <= t:
                del self.running[key]
        bound = [p for _, pods in self.running.values() for p in pods]
        result = admit(queue, self.nodes, bound, policy=self.policy, passes_waited=self.waited)
        self.waited = result.passes_waited
        left = []
        for g in queue:
            placement = result.admitted.get(g.key)
            if placement is None:
                left.append(g)
                continue
            pods = [{**p, "spec": {**p["spec"], "nodeName": placement[p["metadata"]["name"]]}} for p in g.pods]
            self.running[g.key] = (t + runtime, pods)
            self.started[g.key] = t
        return left


@pytest.mark.parametrize(
    ("policy", "big_starts"),
    [(AdmissionPolicy(starvation_passes=3), True), (AdmissionPolicy(starvation_passes=10**9), False)],
    ids=["with anti-starvation the big gang starts", "without it small gangs starve it forever"],
)
def test_stream_of_small_gangs_does_not_starve_a_big_one(policy, big_starts):
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    sim = _Sim(nodes, policy)
    # Small 4-GPU jobs arrive every pass and each runs 2 passes, so the cluster never empties on its own.
    queue = [gang("small-0", 1, gpu=4, arrival=0), gang("small-1", 1, gpu=4, arrival=0.5)]
    queue.append(gang("big", 2, gpu=8, arrival=1))
    for t in range(1, 60):
        queue.append(gang(f"small-{t + 1}", 1, gpu=4, arrival=t + 1))
        queue = sim.step(t, queue, runtime=2)
    assert ("big" in sim.started) is big_starts
    if big_starts:
        assert sim.started["big"] <= 3 + 2 + 2  # waited N passes, then at most one small runtime to drain


def test_reservation_reports_the_held_nodes_and_lets_small_gangs_use_the_rest():
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c", gpu=8)]
    bound = [pod("x", gpu=2, node_name="a", phase="Running"), pod("y", gpu=2, node_name="b", phase="Running")]
    queue = [gang("big", 3, gpu=8, arrival=1), gang("small", 1, gpu=8, arrival=2), gang("tiny", 1, gpu=1, arrival=3)]
    quiet = admit(queue, nodes, bound, policy=AdmissionPolicy(starvation_passes=5))
    assert set(quiet.admitted) == {"small", "tiny"}  # before the threshold, backfill as usual
    held = admit(queue, nodes, bound, policy=AdmissionPolicy(starvation_passes=5), passes_waited={"big": 5})
    assert held.reserved_for == "big"
    assert set(held.held) == {"a", "b", "c"}
    assert held.admitted == {}  # every node is needed by big, so nothing else may start
    assert "capacity is held for big" in held.waiting["small"]
    assert "capacity reserved on 3 node(s) after waiting 5 passes" in held.waiting["big"]


def test_reservation_leaves_capacity_the_head_cannot_use():
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c")]
    bound = [pod("x", gpu=2, node_name="a", phase="Running")]
    queue = [gang("big", 2, gpu=8, arrival=1), gang("cpu-job", 1, cpu="4", arrival=2), gang("gpu", 1, gpu=1, arrival=3)]
    result = admit(queue, nodes, bound, policy=AdmissionPolicy(starvation_passes=0))
    assert result.reserved_for == "big"
    assert set(result.admitted) == {"cpu-job"}  # cpus are free for others; gpus on a and b are held


def test_gang_that_can_never_fit_holds_no_capacity():
    queue = [gang("huge", 1, gpu=16, arrival=1), gang("small", 1, gpu=2, arrival=2)]
    result = admit(queue, [node("a", gpu=8)], policy=AdmissionPolicy(starvation_passes=0), passes_waited={"huge": 9})
    assert result.reserved_for is None
    assert set(result.admitted) == {"small"}


def test_cluster_does_not_change_during_a_pass():
    cluster = Cluster.from_objects([node("a", gpu=8)])
    from tfjob_operator.gang.placement import admit_in

    before = cluster.free.tolist()
    assert admit_in(cluster, [gang("j", 1, gpu=8)]).admitted
    assert cluster.free.tolist() == before


def test_pods_without_names_are_refused_with_a_clear_error():
    nameless = {"metadata": {}, "spec": {"containers": [{"name": "tensorflow"}]}}
    with pytest.raises(ValueError, match=r"metadata\.name"):
        admit([GangRequest("j", (nameless,))], [node("a")])


@pytest.mark.parametrize("seed", range(4))
def test_what_a_pass_keeps_between_admissions_equals_a_fresh_look_at_the_capacity_left(seed):
    """A pass keeps each best-fit order and waiting-reason summary current by re-keying only the rows a commit
    changed; after every commit they must equal ones computed afresh from the free capacity left (over-committed
    nodes, nodes of different sizes, a node subset and one label value included)."""
    import numpy as np

    from tfjob_operator.gang.caches import BestFit, PassCapacity

    rng = random.Random(seed)
    nodes = [node(f"n{i:02d}", gpu=rng.choice([0, 4, 8]), cpu=str(rng.choice([8, 16, 96])),
                  memory=rng.choice(["64Gi", "768Gi"]), labels={"rack": rng.choice(["r0", "r1"])},
                  taints=[GPU_TAINT] if rng.random() < 0.3 else None) for i in range(40)]
    bound = [pod(f"b{i}", gpu=rng.choice([0, 2, 12]), cpu=rng.choice(["1", "20"]),
                 node_name=f"n{rng.randrange(40):02d}", phase="Running")
             for i in range(60)]  # some nodes start over-committed
    cluster = Cluster.from_objects(nodes, bound)
    work = PassCapacity(cluster)
    classes = [c for g in (gang("a", 1, gpu=1, cpu="2"), gang("b", 1, cpu="500m", memory="3Gi"),
                           gang("c", 1, gpu=4, cpu="8", tolerations=[GPU_TOLERATION])) for c in g.classes]
    racks = cluster.domains("rack")
    views = [(c, group, domain) for c in classes for group, domain in ((None, ""), (racks["r1"], "rack=r1"))]
    for _ in range(60):
        touched = np.array(sorted(rng.sample(range(40), rng.randint(1, 3))), np.int64)
        # Up to 3/8 of each node's allocatable per commit: nodes fill up, then go over-committed.
        amounts = np.array([cluster.alloc[n] * rng.choice([0, 1, 3]) // 8 for n in touched.tolist()], np.int64)
        work.commit((touched, amounts))
        for cls, group, domain in views:
            req = cluster.requests(cls)
            assert req is not None
            kept = work.best_fit(cls, group, domain, req)
            fresh = BestFit(cluster, work.avail, cluster.allowed(cls, group), *req, len(work.changes))
            assert (kept.order, kept.room, kept.total) == (fresh.order, fresh.room, fresh.total)
            allowed = cluster.eligible(cls)
            largest, total = work.summary(cls, allowed, "")
            rows = work.avail[allowed]
            assert largest == rows.max(axis=0).tolist()
            assert total == np.clip(rows, 0, None).sum(axis=0).tolist()
