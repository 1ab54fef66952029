"""RBAC from evidence: the chart grants exactly what the real operator was seen to use, nothing missing or extra.

The operator runs as a subprocess with the chart's own environment (leader election and the self-signed
webhook on, ports moved to free loopback ones) against the local control plane, beside a standby replica,
and drives TFJobs through success, failure, a gang restart, suspend/resume, user deletion, TTL, an invalid
spec and a deadline. The API server's request log, filtered to the operator's user agents (kopf's, the
official client's and leader election's), gives the permissions it needed (`rbac.permissions`), plus the
`<owner>/finalizers` update that blockOwnerDeletion references need where OwnerReferencesPermissionEnforcement
is on (the emulator does not enforce it). Each gang backend's extra objects are checked the same way, from a
run with that backend.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import rbac
import yaml
from deployhelpers import chart_env, renderer
from kubernetes.client.exceptions import ApiException
from operator_harness import Cluster, Operator, free_port, local_cluster, needs_kubelocal, py, replica, wait_for
from shared_data import CRDS

from tfjob_operator import kube
from tfjob_operator.api import constants
from tfjob_operator.api.crd import KUBEFLOW_CRD_PATH
from tfjob_operator.serving import leader

RELEASE_NS = renderer.NAMESPACE
DATA_CRDS = CRDS
PODGROUP_CRDS = [DATA_CRDS / "scheduling.volcano.sh_podgroups.yaml", DATA_CRDS / "scheduling.x-k8s.io_podgroups.yaml"]
QUICK = py("import time; time.sleep(0.5)")
FOREVER = py("import time; time.sleep(600)")
EXIT_130_THEN_0 = py("import os, sys, time; time.sleep(0.3); "
                     "sys.exit(130 if os.environ['TFJOB_ATTEMPT'] == '0' else 0)")


def operator_agent(user_agent: str) -> bool:
    """Requests the operator process makes: kopf's own client, the official client (kube.py), leader election."""
    return user_agent.startswith("kopf/") or user_agent in (kube.USER_AGENT, leader.USER_AGENT)


#: The lifecycle evidence is gathered under the `none` backend; each backend's additions come from its own run.
BASE: dict[str, Any] = {"gang": {"backend": "none"}}


def chart_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return renderer.render_chart(values or {})


def service_account(objects: list[dict[str, Any]]) -> str:
    (sa,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    return str(sa["metadata"]["name"])


def webhook_service(cluster: Cluster, objects: list[dict[str, Any]]) -> int:
    """The chart's webhook Service, its target one free loopback port: the API server calls the webhooks the
    operator publishes through it, as a cluster does. Every replica serves on that port once it leads."""
    (service,) = [o for o in objects if o["kind"] == "Service" and
                  (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "webhook"]
    name = service["metadata"]["name"]
    try:
        existing = cluster.core.read_namespaced_service(name, RELEASE_NS)
        return int(existing.spec.ports[0].target_port)  # one port for every replica: only the leader serves
    except ApiException as exc:
        if exc.status != 404:
            raise
    port = free_port()
    cluster.core.create_namespaced_service(RELEASE_NS, {
        "metadata": {"name": name, "namespace": RELEASE_NS},
        "spec": {"ports": [{**p, "targetPort": port} for p in service["spec"]["ports"]]}})
    return port


def start_operator(cluster: Cluster, objects: list[dict[str, Any]], pod: str, log: str) -> tuple[Operator, int]:
    """The operator with the chart's environment, ports moved to free loopback ones; and its /healthz port."""
    env = {k: v for k, v in chart_env(objects).items() if isinstance(v, str)}
    health = free_port()
    env.update(TFJOB_POD_NAME=pod, TFJOB_POD_NAMESPACE=RELEASE_NS, TFJOB_LIVENESS_PORT=str(health),
               TFJOB_LIVENESS_HOST="127.0.0.1", TFJOB_METRICS_PORT=str(free_port()), TFJOB_METRICS_HOST="127.0.0.1",
               TFJOB_WEBHOOK_PORT=str(webhook_service(cluster, objects)), TFJOB_WEBHOOK_HOST="127.0.0.1",
               # Short election timings keep the test quick; the chart's own are checked by test_chart.
               TFJOB_LEADER_ELECTION_LEASE_DURATION="3", TFJOB_LEADER_ELECTION_RETRY_PERIOD="0.5")
    return Operator(cluster.kubeconfig, cluster.workdir / log, **env).start(), health


def admission_review(cluster: Cluster, op: Operator, obj: dict[str, Any]) -> dict[str, Any]:
    """POST an AdmissionReview to the operator's validating webhook, trusting the CA it published."""
    config = cluster.local.call(_get(cluster.local.url, "/apis/admissionregistration.k8s.io/v1/"
                                     "validatingwebhookconfigurations/tfjob-operator.tfjob.dev"))
    (hook,) = config["webhooks"]
    context = ssl.create_default_context(cadata=base64.b64decode(hook["clientConfig"]["caBundle"]).decode())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "operation": "CREATE", "object": obj, "namespace": "default", "name": obj["metadata"]["name"],
        "kind": {"group": "tfjob.dev", "version": "v1", "kind": "TFJob"},
        "resource": {"group": "tfjob.dev", "version": "v1", "resource": "tfjobs"},
        "userInfo": {"username": "alice"}, "dryRun": False}}
    request = urllib.request.Request(f"https://127.0.0.1:{op.env['TFJOB_WEBHOOK_PORT']}/validate-tfjob",
                                     json.dumps(review).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        return dict(json.loads(resp.read())["response"])


async def _get(url: str, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url + path) as resp:
        return dict(await resp.json())


def healthz(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return dict(json.loads(resp.read() or b"{}")) if resp.status == 200 else None
    except OSError:
        return None


def _try(call: Any) -> Any:
    """`call()`, or None while the webhook is not up yet (connection refused, configuration not yet written)."""
    try:
        return call()
    except (OSError, KeyError, ValueError):
        return None


def placeholder_pod(cluster: Cluster, name: str) -> None:
    """The operator replica's own pod object (the leader labels it); gated, so nothing runs it."""
    cluster.core.create_namespaced_pod(RELEASE_NS, {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "tfjob-operator"}},
        "spec": {"schedulingGates": [{"name": "example.com/never"}],
                 "containers": [{"name": "operator", "image": "tfjob-operator"}]},
    })


def leader_label(cluster: Cluster, pod: str) -> str | None:
    labels = cluster.core.read_namespaced_pod(pod, RELEASE_NS).metadata.labels or {}
    return labels.get(leader.LEADER_LABEL)


def stop_cleanly(op: Operator) -> None:
    op.stop()
    assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]


@dataclass
class Evidence:
    cluster: Cluster
    needed: set[rbac.Permission] = field(default_factory=set)
    owned_objects: list[dict[str, Any]] = field(default_factory=list)

    def take(self, start: int, end: int | None = None) -> set[rbac.Permission]:
        records = [r for r in self.cluster.apiserver.requests[start:end] if operator_agent(r.user_agent)]
        return rbac.permissions(records)

    def sample_owned(self, name: str) -> None:
        """Objects the operator created for a job, as the API returns them (their owner references matter)."""
        serialize = self.cluster.core.api_client.sanitize_for_serialization
        pods = [serialize(p) for p in self.cluster.pods(name)]
        service = serialize(self.cluster.core.read_namespaced_service(name, "default"))
        self.owned_objects += [*pods[:1], service]

    def implied(self) -> set[rbac.Permission]:
        return {p for obj in self.owned_objects for p in rbac.owner_reference_permissions(obj)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with local_cluster(tmp_path_factory.mktemp("rbac")) as c:
        c.install_crds([*PODGROUP_CRDS, KUBEFLOW_CRD_PATH])
        c.core.create_namespace({"metadata": {"name": RELEASE_NS}})
        yield c


@pytest.fixture(scope="module")
def evidence(cluster: Cluster) -> Evidence:
    """Two replicas with the chart's environment drive every lifecycle path; then the standby takes over."""
    objects = chart_objects(BASE)
    for pod in ("tfjob-operator-0", "tfjob-operator-1"):
        placeholder_pod(cluster, pod)
    found = Evidence(cluster)
    start = len(cluster.apiserver.requests)
    first, first_health = start_operator(cluster, objects, "tfjob-operator-0", "operator-0.log")
    try:
        wait_for(lambda: leader_label(cluster, "tfjob-operator-0") == "true", 30, what="replica 0 leads")
        second, second_health = start_operator(cluster, objects, "tfjob-operator-1", "operator-1.log")
        try:
            # The standby answers its probe while it waits, and does not act.
            assert wait_for(lambda: healthz(second_health), 20, what="the standby's /healthz")["state"] == "standby"
            assert healthz(first_health) is not None  # kopf's endpoint on the leader
            assert leader_label(cluster, "tfjob-operator-1") is None
            # The leader serves the validating webhook it published, with the operator's own words.
            bad = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "bad", "namespace": "default"},
                   "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
                       {"name": "main", "image": "x"}, {"name": "side", "image": "y"}]}}}}}}
            answer = wait_for(lambda: _try(lambda: admission_review(cluster, first, bad)), 20, what="the webhook")
            assert answer["allowed"] is False and "no container named" in answer["status"]["message"]
            # ... and the API server calls it through the chart's Service: the bad job is refused at submit.
            with pytest.raises(ApiException) as refused:
                cluster.submit({"Worker": {"replicas": 1, **bad["spec"]["tfReplicaSpecs"]["Worker"]}})
            assert refused.value.status == 422 and "no container named" in str(refused.value.body)

            jobs = {
                "ok-ttl": cluster.submit({"Worker": replica(QUICK, 2)}, ttlSecondsAfterFinished=1),
                "exit-1": cluster.submit({"Worker": replica(py("import sys; sys.exit(1)"), 1)}),
                "restart": cluster.submit({"Worker": replica(EXIT_130_THEN_0, 2)}),
                "suspend": cluster.submit({"Worker": replica(FOREVER, 2)}),
                "deadline": cluster.submit({"Worker": replica(FOREVER, 1)}, activeDeadlineSeconds=2),
            }
            cluster.wait_state(jobs["suspend"], "Running")
            found.sample_owned(jobs["suspend"])
            # (A resize of the running gang is refused by the CRD's rule: the operator never patches a tfjob.dev job.)
            cluster.patch_spec(jobs["suspend"], {"runPolicy": {"suspend": True}})
            cluster.wait_state(jobs["suspend"], "Suspended")
            wait_for(lambda: not cluster.pods(jobs["suspend"]), 20, what="suspended pods deleted")
            cluster.patch_spec(jobs["suspend"], {"runPolicy": {"suspend": False}})
            cluster.wait_state(jobs["suspend"], "Running")
            cluster.kubectl("delete", "tfj", jobs["suspend"], "--wait=false")
            assert cluster.wait_state(jobs["restart"], "Succeeded")["restartCount"] == 1
            cluster.wait_state(jobs["exit-1"], "Failed")
            cluster.wait_state(jobs["deadline"], "Failed")
            wait_for(lambda: cluster.job(jobs["ok-ttl"]) is None, 30, what="the job deleted by its TTL")
            for name in ("restart", "exit-1", "deadline"):
                cluster.wait_events(jobs[name])

            started = "tfjob operator started"  # logged by kopf's startup handler
            assert started in first.log() and started not in second.log()  # the standby never started kopf
            stop_cleanly(first)  # releases the Lease: the standby takes over at once
            wait_for(lambda: leader_label(cluster, "tfjob-operator-1") == "true", 20, what="replica 1 takes over")
            after = cluster.submit({"Worker": replica(QUICK, 1)})
            cluster.wait_state(after, "Succeeded")
        finally:
            second.stop()
        assert second.proc is not None and second.proc.returncode == 0, second.log()[-3000:]
    finally:
        first.stop()
    found.needed = found.take(start) | found.implied()
    return found


def any_job(needed: set[rbac.Permission]) -> set[rbac.Permission]:
    """Needs in the jobs' namespace widened to any namespace and name: the operator acts on any job it sees."""
    return {p if p.namespace == RELEASE_NS or p.namespace is None else
            rbac.Permission(p.group, p.resource, p.verb, None, None) for p in needed}


def assert_exact(objects: list[dict[str, Any]], needed: set[rbac.Permission]) -> None:
    granted = rbac.grants(objects, service_account(objects), RELEASE_NS)
    result = rbac.compare(granted, needed)
    # On failure, the rules the evidence calls for (by namespace; None is the ClusterRole), to fix the chart with.
    wanted = yaml.safe_dump(rbac.minimal_rules(any_job(needed)), sort_keys=False)
    assert result.missing == [], f"the chart lacks permissions the operator used: {result.missing}\n{wanted}"
    assert result.extra == [], f"the chart grants what the operator never used: {result.extra}\n{wanted}"
    assert result.redundant == [], f"granted twice: {result.redundant}\n{wanted}"
    assert rbac.wildcard_or_secret_rules(objects) == []


@needs_kubelocal("API server's request log (the operator's requests are the evidence)")
@pytest.mark.timeout(300)
def test_chart_grants_exactly_what_the_operator_used(evidence: Evidence) -> None:
    kinds = {(p.group, p.resource) for p in evidence.needed}
    # The evidence covers every path the rules exist for: a test that saw little would prove little.
    assert {("tfjob.dev", "tfjobs"), ("tfjob.dev", "tfjobs/status"), ("", "pods"), ("", "services"), ("", "events"),
            ("coordination.k8s.io", "leases"), ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            ("tfjob.dev", "tfjobs/finalizers")} <= kinds
    assert_exact(chart_objects(BASE), evidence.needed)


@needs_kubelocal("API server's request log (the operator's requests are the evidence)")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["none", "builtin"])
def test_namespaced_chart_grants_exactly_the_same_within_the_watched_namespace(
        evidence: Evidence, cluster: Cluster, backend: str) -> None:
    """Watching `default` only, the operator lists and watches there; a Role there must meet every need."""
    objects = chart_objects({"watchNamespaces": ["default"], "gang": {"backend": backend}})
    start = len(cluster.apiserver.requests)
    op, _ = start_operator(cluster, objects, "tfjob-operator-0", f"operator-namespaced-{backend}.log")
    try:
        name = cluster.submit({"Worker": replica(QUICK, 1)}, ttlSecondsAfterFinished=1)
        wait_for(lambda: cluster.job(name) is None, 40, what="the job run and deleted by its TTL")
    finally:
        op.stop()
    assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]
    used = evidence.take(start)
    cross_namespace = {(p.group, p.resource, p.verb) for p in used
                       if p.namespace is None and p.group != "admissionregistration.k8s.io"}
    # Only the admission loop reads across namespaces: it watches node capacity and every pod that uses some of it.
    assert cross_namespace == ({("", "nodes", "list"), ("", "nodes", "watch"), ("", "pods", "list"),
                                ("", "pods", "watch")} if backend == "builtin" else set())
    # The cluster-wide needs of the full run, as they are when only `default` is watched.
    scoped = {rbac.Permission(p.group, p.resource, p.verb, "default", p.name) if p.namespace is None
              and p.group != "admissionregistration.k8s.io" else p for p in evidence.needed}
    assert_exact(objects, scoped | used)


PODGROUP_BACKENDS = {"volcano": ("scheduling.volcano.sh", "v1beta1"), "scheduler-plugins": ("scheduling.x-k8s.io",
                                                                                         "v1alpha1")}


def gang_gated(pod: Any) -> bool:
    """The builtin backend's scheduling gate is still on the pod (its gang not yet released)."""
    return any(g.name == constants.GANG_SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def drive_backend_job(cluster: Cluster, backend: str) -> str:
    """One job under `backend` until its pods are created (they need that backend's scheduler to run)."""
    policy = {"schedulingPolicy": {"queue": "team-queue"}} if backend == "kueue" else {}
    name = cluster.submit({"Worker": replica(QUICK, 2)}, **policy)

    def progressed() -> bool:
        if backend == "volcano":
            group, version = PODGROUP_BACKENDS[backend]
            items = cluster.custom.list_namespaced_custom_object(group, version, "default", "podgroups")["items"]
            if items and not (items[0].get("status") or {}).get("phase"):
                # What Volcano does once the queue has room; the operator then creates the pods.
                cluster.custom.patch_namespaced_custom_object(group, version, "default", "podgroups", name,
                                                              {"status": {"phase": "Inqueue"}})
        pods = cluster.pods(name)
        if backend == "builtin":
            # Created is not enough: the rights under test are used when the admission loop releases the gang
            # (one patch per pod takes the gate out). Deleting the job before that, as a loaded machine may,
            # left the evidence without a single pod patch in the jobs' namespace.
            return len(pods) == 2 and not any(gang_gated(p) for p in pods)
        return len(pods) == 2

    wait_for(progressed, 30, what=f"{backend}: pods created" + (" and released" if backend == "builtin" else ""))
    cluster.kubectl("delete", "tfj", name, "--wait=false")
    wait_for(lambda: cluster.job(name) is None, 30, what="the job deleted")
    return name


@needs_kubelocal("API server's request log (the operator's requests are the evidence)")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["volcano", "scheduler-plugins", "builtin", "kueue"])
def test_each_gang_backend_adds_exactly_the_rights_its_objects_need(
        evidence: Evidence, cluster: Cluster, backend: str) -> None:
    objects = chart_objects({"gang": {"backend": backend}})
    start = len(cluster.apiserver.requests)
    op, _ = start_operator(cluster, objects, "tfjob-operator-0", f"operator-{backend}.log")
    try:
        drive_backend_job(cluster, backend)
    finally:
        op.stop()
    assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]
    used = evidence.take(start)
    group_verbs = {p.verb for p in used if p.resource == "podgroups"}
    # PodGroups: created before the pods, read back by name, garbage-collected with the job.
    assert group_verbs == ({"create", "get"} if backend in PODGROUP_BACKENDS else set())
    assert_exact(objects, evidence.needed | used)


@needs_kubelocal("API server's request log (the operator's requests are the evidence)")
@pytest.mark.timeout(300)
def test_serving_kubeflow_tfjobs_adds_exactly_the_kubeflow_org_rights_they_need(
        evidence: Evidence, cluster: Cluster) -> None:
    """kubeflow.api all: the same lifecycle on kubeflow.org/v1 jobs needs the same verbs on kubeflow.org, no more
    (the chart with kubeflow.api off grants none of them: test_chart_grants_exactly_what_the_operator_used)."""
    values = {**BASE, "kubeflow": {"api": "all"}}
    objects = chart_objects(values)
    start = len(cluster.apiserver.requests)
    op, _ = start_operator(cluster, objects, "tfjob-operator-0", "operator-kubeflow.log")
    owned = Evidence(cluster)
    try:
        quick = cluster.submit({"Worker": replica(QUICK, 2)}, group="kubeflow.org", ttlSecondsAfterFinished=1)
        restart = cluster.submit({"Worker": replica(EXIT_130_THEN_0, 2)}, group="kubeflow.org")
        wait_for(lambda: len(cluster.pods(restart)) == 2, 30, what="the kubeflow.org job's pods")
        owned.sample_owned(restart)
        wait_for(lambda: cluster.job(quick, "kubeflow.org") is None, 40, what="the job deleted by its TTL")
        wait_for(lambda: (cluster.status(restart, "kubeflow.org").get("conditions") or [{}])[-1].get("type")
                 == "Succeeded", 40, what="the restarted kubeflow.org job succeeded")
    finally:
        op.stop()
    assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]
    used = evidence.take(start) | owned.implied()
    assert {("kubeflow.org", r) for r in ("tfjobs", "tfjobs/status", "tfjobs/finalizers")} <= {
        (p.group, p.resource) for p in used}
    assert_exact(objects, evidence.needed | used)


def test_operator_agents_are_recognised() -> None:
    assert operator_agent("kopf/1.45.2") and operator_agent(kube.USER_AGENT) and operator_agent(leader.USER_AGENT)
    assert not operator_agent("tfjob-local-kubelet") and not operator_agent("OpenAPI-Generator/37.0.2/python")
