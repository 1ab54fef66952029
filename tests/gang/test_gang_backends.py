"""Gang backends: choice per job, pod decorations, PodGroups (checked against the real CRD schemas)."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from gangfixtures import admit, bound_pods, in_flight_reservations, plan_pass
from shared_data import CRDS

from tfjob_operator.api import constants
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.client import cli
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.gang import backends, builtin, kueue, none, queue, scheduler_plugins, volcano
from tfjob_operator.gang.backends import backend_for, backend_names, parse_job, register, registry
from tfjob_operator.gang.base import (
    ANNOTATION_GANG_DOMAIN,
    ChecksJobs,
    CreatesGroups,
    GangBackend,
    GangBackendError,
    GangOptions,
    ReleasedByOperator,
    ReportsWaits,
    apply_backend,
)
from tfjob_operator.gang.explain import GangWait, WaitKind
from tfjob_operator.gang.placement import AdmissionPolicy
from tfjob_operator.reconcile.render import render


def manifest(
    workers: int = 2, gpu: int = 1, policy: dict[str, Any] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    container = {
        "name": "tensorflow",
        "image": "tf:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpu)}, "requests": {"cpu": "2", "memory": "4Gi"}},
    }
    spec: dict[str, Any] = {
        "tfReplicaSpecs": {
            "Chief": {"replicas": 1, "template": {"spec": {"containers": [copy.deepcopy(container)]}}},
            "Worker": {"replicas": workers, "template": {"spec": {"containers": [copy.deepcopy(container)]}}},
        }
    }
    if policy is not None:
        spec["runPolicy"] = {"schedulingPolicy": policy}
    return {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "team-a", "uid": "uid-1", "annotations": annotations or {}},
        "spec": spec,
    }


def job_and_pods(**kwargs: Any):
    job = parse_tfjob(manifest(**kwargs))
    return job, render(job).pods


def test_every_backend_is_registered():
    assert backend_names() == ["builtin", "kueue", "none", "scheduler-plugins", "volcano"]


# (backend, the capabilities it has)
CAPABILITY_TABLE = [
    ("builtin", {ReportsWaits, ReleasedByOperator}),
    ("kueue", {ChecksJobs, ReportsWaits}),
    ("none", set()),
    ("scheduler-plugins", {CreatesGroups, ReportsWaits}),
    ("volcano", {CreatesGroups}),
]


@pytest.mark.parametrize(("name", "capabilities"), CAPABILITY_TABLE, ids=[r[0] for r in CAPABILITY_TABLE])
def test_each_backend_is_a_gang_backend_with_exactly_its_capabilities(name, capabilities):
    backend = backend_for(parse_tfjob(manifest()), name)
    assert isinstance(backend, GangBackend)
    assert {c for c in (ChecksJobs, CreatesGroups, ReportsWaits, ReleasedByOperator) if isinstance(backend, c)} == (
        capabilities
    )


def test_a_second_backend_of_a_registered_name_is_refused_and_the_first_kept():
    class AnotherVolcano(volcano.VolcanoBackend):
        name = "volcano"

    with pytest.raises(ValueError, match="gang backend 'volcano' is registered already \\(VolcanoBackend\\)"):
        register(AnotherVolcano)
    assert registry()["volcano"] is volcano.VolcanoBackend


def test_a_backend_without_a_name_is_refused():
    class Nameless(GangBackend):
        def decorate_pod(self, job, pod):
            return dict(pod)

    before = backend_names()
    with pytest.raises(ValueError, match="set the class attribute `name`"):
        register(Nameless)
    assert backend_names() == before


def test_a_registered_backend_is_chosen_by_its_name(monkeypatch):
    class Plain(none.NoGangBackend):
        name = "plain-for-this-test"

    monkeypatch.setattr(backends, "_BACKENDS", dict(registry()))
    register(Plain)
    job = parse_tfjob(manifest())
    assert isinstance(backend_for(job, "plain-for-this-test"), Plain)
    assert "plain-for-this-test" in backend_names()


REPO = Path(__file__).resolve().parents[2]


def test_the_settings_the_chart_and_the_cli_offer_exactly_the_registered_backends(monkeypatch):
    names = set(backend_names())
    for name in names:
        monkeypatch.setenv("TFJOB_GANG_BACKEND", name)
        assert OperatorSettings().gang_backend == name
    monkeypatch.setenv("TFJOB_GANG_BACKEND", "slurm")
    with pytest.raises(ValueError, match=re.escape(backends.unknown_backend("TFJOB_GANG_BACKEND", "slurm"))):
        OperatorSettings()
    # The chart's schema is written from the registry by `python deploy/render_manifests.py`.
    schema = json.loads((REPO / "deploy/helm/tfjob-operator/values.schema.json").read_text())
    gang = schema["properties"]["gang"]["properties"]
    assert set(gang["backend"]["enum"]) == names
    assert set(gang["additionalBackends"]["items"]["enum"]) == names
    (action,) = [a for a in cli.build_parser()._subparsers._group_actions[0].choices["render"]._actions
                 if "--gang" in a.option_strings]
    assert all(name in action.help for name in names)


# (backend, the scheduler its pods go to when the operator names none: None is the template's or the default)
SCHEDULER_TABLE = [
    ("builtin", None),
    ("kueue", None),
    ("none", None),
    ("scheduler-plugins", "scheduler-plugins-scheduler"),
    ("volcano", "volcano"),
]


@pytest.mark.parametrize(("name", "scheduler"), SCHEDULER_TABLE, ids=[r[0] for r in SCHEDULER_TABLE])
def test_each_backends_pods_go_to_its_own_scheduler_unless_the_operator_names_one(name, scheduler):
    job, pods = job_and_pods(policy={"queue": "q"})
    assert registry()[name].default_scheduler == scheduler
    assert {p["spec"].get("schedulerName") for p in apply_backend(backend_for(job, name), job, pods).pods} == {
        scheduler}
    named = apply_backend(backend_for(job, name, GangOptions(scheduler_name="my-sched")), job, pods)
    assert {p["spec"]["schedulerName"] for p in named.pods} == {"my-sched"}


def test_the_docs_backends_table_lists_exactly_the_registered_backends():
    text = (REPO / "docs/gang.md").read_text().split("## Choosing a backend", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z-]+)`.*$", text, flags=re.M)}
    assert set(rows) == set(backend_names()), "docs/gang.md's 'Choosing a backend' table: one row per backend"
    for name, cls in registry().items():
        if cls.default_scheduler:
            assert f"`schedulerName: {cls.default_scheduler}`" in rows[name], f"docs/gang.md: {name}'s scheduler"


# (case, annotations, default, expected backend name)
CHOICE_TABLE = [
    ("operator default", {}, "builtin", "builtin"),
    ("annotation overrides the default", {constants.ANNOTATION_GANG_BACKEND: "volcano"}, "builtin", "volcano"),
    ("whitespace is ignored", {constants.ANNOTATION_GANG_BACKEND: " kueue "}, "none", "kueue"),
    ("default none", {}, "none", "none"),
]


@pytest.mark.parametrize(
    ("annotations", "default", "expected"), [r[1:] for r in CHOICE_TABLE], ids=[r[0] for r in CHOICE_TABLE]
)
def test_backend_is_chosen_per_job(annotations, default, expected):
    job = parse_tfjob(manifest(annotations=annotations))
    assert backend_for(job, default).name == expected


# (case, where the queue label is, backend annotation, default, expected backend)
KUEUE_TABLE = [
    ("label on the job: builtin steps aside", "job", None, "builtin", "none"),
    ("label on a pod template: builtin steps aside", "template", None, "builtin", "none"),
    ("builtin named by the job still steps aside", "job", "builtin", "none", "none"),
    ("the kueue backend itself is kept", "job", "kueue", "builtin", "kueue"),
    ("volcano is the job's choice", "template", "volcano", "builtin", "volcano"),
    ("no label: builtin gates", None, None, "builtin", "builtin"),
]


@pytest.mark.parametrize(("where", "annotated", "default", "expected"), [r[1:] for r in KUEUE_TABLE],
                         ids=[r[0] for r in KUEUE_TABLE])
def test_the_builtin_gang_steps_aside_for_a_job_kueue_manages(where, annotated, default, expected):
    obj = manifest(annotations={constants.ANNOTATION_GANG_BACKEND: annotated} if annotated else None,
                   policy={"queue": "team-q"})
    if where == "job":
        obj["metadata"]["labels"] = {kueue.LABEL_QUEUE_NAME: "team-q"}
    elif where == "template":
        obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {kueue.LABEL_QUEUE_NAME: "q"}}
    job = parse_tfjob(obj)
    backend = backend_for(job, default)
    assert backend.name == expected
    if expected == "none":
        # Not gated a second time after Kueue's admission.
        assert all(not builtin.is_gated(backend.decorate_pod(job, p)) for p in render(job).pods)
        assert "Kueue admits the job" in backends.chosen_backend_name(job, default)[1]


def test_unknown_backend_is_refused_when_the_job_is_read_naming_the_field_and_the_choices():
    with pytest.raises(InvalidSpec) as err:
        parse_job(manifest(annotations={constants.ANNOTATION_GANG_BACKEND: "slurm"}))
    assert str(err.value) == (
        f"metadata.annotations[{constants.ANNOTATION_GANG_BACKEND}]: unknown gang backend 'slurm' "
        "(choose one of builtin, kueue, none, scheduler-plugins, volcano)"
    )


def test_the_docs_quote_the_refusal_the_operator_writes():
    refusal = backends.unknown_backend(backends.ANNOTATION_SOURCE, "slurm")
    assert f"\n{refusal}\n" in (REPO / "docs/gang.md").read_text()


def test_unknown_default_names_the_setting():
    job = parse_tfjob(manifest())
    with pytest.raises(GangBackendError, match="operator setting TFJOB_GANG_BACKEND: unknown gang backend 'x'"):
        backend_for(job, "x")


def _gates(pod):
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def test_builtin_gates_every_pod_and_keeps_other_gates():
    job, pods = job_and_pods()
    pods[0]["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    before = copy.deepcopy(pods)
    out = apply_backend(backend_for(job, "builtin"), job, pods)
    assert out.groups == []
    assert [_gates(p) for p in out.pods] == [["example.com/other", constants.GANG_SCHEDULING_GATE]] + [
        [constants.GANG_SCHEDULING_GATE]
    ] * 2
    assert all("schedulerName" not in p["spec"] for p in out.pods)
    assert pods == before  # decoration copies


def test_builtin_uses_the_charts_priority_class_unless_the_job_names_one():
    job, pods = job_and_pods()
    backend = backend_for(job, "builtin", GangOptions(builtin_priority_class="tfjob-gang"))
    assert backend.decorate_pod(job, pods[0])["spec"]["priorityClassName"] == "tfjob-gang"
    job2, pods2 = job_and_pods(policy={"priorityClass": "team-high"})
    assert backend.decorate_pod(job2, pods2[0])["spec"]["priorityClassName"] == "team-high"


def test_volcano_decorations_and_podgroup():
    job, pods = job_and_pods(policy={"queue": "research", "priorityClass": "high"})
    out = apply_backend(backend_for(job, "volcano"), job, pods)
    for pod in out.pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"][volcano.ANNOTATION_GROUP_NAME] == "mnist"
        assert pod["spec"]["priorityClassName"] == "high"
    assert [p["metadata"]["annotations"][volcano.ANNOTATION_TASK_SPEC] for p in out.pods] == [
        "chief",
        "worker",
        "worker",
    ]
    (group,) = out.groups
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1" and group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "mnist" and group["metadata"]["namespace"] == "team-a"
    assert group["metadata"]["ownerReferences"][0] == {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "name": "mnist",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert group["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "6", "memory": str(12 * 2**30), "nvidia.com/gpu": "3"},
        "queue": "research",
        "priorityClassName": "high",
    }


def test_min_available_and_min_resources_come_from_the_scheduling_policy():
    job, pods = job_and_pods(workers=4, policy={"minAvailable": 3, "minResources": {"nvidia.com/gpu": 3}})
    (group,) = backend_for(job, "volcano").group_objects(job, pods)
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minResources"] == {"nvidia.com/gpu": "3"}
    job, pods = job_and_pods(workers=4, policy={"minAvailable": 2})
    (group,) = backend_for(job, "scheduler-plugins").group_objects(job, pods)
    assert group["spec"]["minResources"] == {"cpu": "4", "memory": str(8 * 2**30), "nvidia.com/gpu": "2"}


def test_scheduler_plugins_decorations_and_podgroup():
    job, pods = job_and_pods(policy={"scheduleTimeoutSeconds": 120})
    options = GangOptions(scheduler_name="coscheduler")
    out = apply_backend(backend_for(job, "scheduler-plugins", options), job, pods)
    assert {p["spec"]["schedulerName"] for p in out.pods} == {"coscheduler"}
    assert {p["metadata"]["labels"][scheduler_plugins.LABEL_POD_GROUP] for p in out.pods} == {"mnist"}
    (group,) = out.groups
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"]["minMember"] == 3 and group["spec"]["scheduleTimeoutSeconds"] == 120
    default = backend_for(job, "scheduler-plugins").group_objects(*job_and_pods())
    assert default[0]["spec"]["scheduleTimeoutSeconds"] == 300


def test_kueue_labels_every_pod_with_queue_group_and_total():
    job, pods = job_and_pods(policy={"queue": "team-a-queue"})
    out = apply_backend(backend_for(job, "kueue"), job, pods)
    assert out.groups == []
    for pod in out.pods:
        assert pod["metadata"]["labels"][kueue.LABEL_QUEUE_NAME] == "team-a-queue"
        assert pod["metadata"]["labels"][kueue.LABEL_POD_GROUP_NAME] == "mnist-0"
        assert pod["metadata"]["annotations"][kueue.ANNOTATION_POD_GROUP_TOTAL_COUNT] == "3"
        # each attempt is a group of its own: Kueue may end it once its pods stopped (never wait for replacements)
        assert pod["metadata"]["annotations"][kueue.ANNOTATION_RETRIABLE_IN_GROUP] == "false"


def test_kueue_gives_each_gang_attempt_its_own_group_within_63_characters():
    job, pods = job_and_pods(policy={"queue": "q"})
    pods[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] = "4"
    decorated = backend_for(job, "kueue").decorate_pod(job, pods[0])
    assert decorated["metadata"]["labels"][kueue.LABEL_POD_GROUP_NAME] == "mnist-4"
    long_name = parse_tfjob({**manifest(), "metadata": {"name": "x" * 50, "namespace": "n"}})
    a, b = kueue.kueue_group_name(long_name, "12345678901234"), kueue.kueue_group_name(long_name, "12345678901235")
    assert len(a) <= 63 and len(b) <= 63 and a != b


def test_kueue_without_a_queue_is_refused_naming_the_field():
    job, pods = job_and_pods()
    backend = backend_for(job, "kueue")
    assert backend.validate(job) == [
        "spec.runPolicy.schedulingPolicy.queue: required by the kueue gang backend "
        "(set it to the name of a LocalQueue in the job's namespace)"
    ]
    with pytest.raises(GangBackendError, match=r"schedulingPolicy\.queue"):
        backend.decorate_pod(job, pods[0])


def test_none_only_passes_the_priority_class():
    job, pods = job_and_pods(policy={"priorityClass": "p"})
    out = apply_backend(backend_for(job, "none"), job, pods)
    assert out.groups == []
    assert [p["spec"]["priorityClassName"] for p in out.pods] == ["p"] * 3
    assert all(not _gates(p) and "schedulerName" not in p["spec"] for p in out.pods)


def test_only_builtin_uses_the_admission_loop():
    job = parse_tfjob(manifest())
    assert {n: isinstance(backend_for(job, n), ReleasedByOperator) for n in backend_names()} == {
        "builtin": True,
        "kueue": False,
        "none": False,
        "scheduler-plugins": False,
        "volcano": False,
    }


def _group(phase: str | None, name: str = "mnist", message: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if message:
        status["conditions"] = [{"type": "Unschedulable", "message": message}]
    return {"metadata": {"name": name, "namespace": "team-a"}, "status": status}


# (case, backend, observed groups, ready?, reason)
READY_TABLE = [
    ("volcano: group not seen yet", "volcano", [], False, "waiting for PodGroup mnist to be created"),
    ("volcano: another job's group", "volcano", [_group("Running", "other")], False, "to be created"),
    (
        "volcano: no status yet",
        "volcano",
        [_group(None)],
        False,
        "Volcano has not enqueued PodGroup mnist (phase Pending)",
    ),
    (
        "volcano: pending with a message",
        "volcano",
        [_group("Pending", message="queue research is full")],
        False,
        "(phase Pending): queue research is full",
    ),
    ("volcano: inqueue", "volcano", [_group("Inqueue")], True, ""),
    ("volcano: running", "volcano", [_group("Running")], True, ""),
    ("scheduler-plugins: group not seen", "scheduler-plugins", [], False, "waiting for PodGroup mnist to be created"),
    ("scheduler-plugins: group exists", "scheduler-plugins", [_group("Pending")], True, ""),
    ("builtin: always", "builtin", [], True, ""),
    ("kueue: always", "kueue", [], True, ""),
    ("none: always", "none", [], True, ""),
]


@pytest.mark.parametrize(
    ("name", "groups", "ready", "reason"), [r[1:] for r in READY_TABLE], ids=[r[0] for r in READY_TABLE]
)
def test_pods_are_created_only_when_the_backend_is_ready(name, groups, ready, reason):
    job = parse_tfjob(manifest(policy={"queue": "q"}))
    backend = backend_for(job, name)
    ok, why = backend.ready_to_create_pods(job, groups) if isinstance(backend, CreatesGroups) else (True, "")
    assert ok is ready
    assert reason in why


def _with_gates(pod, *gates):
    out = copy.deepcopy(pod)
    out["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return out


def _queued_reason(job, name, pods):
    backend = backend_for(job, name)
    return backend.queued_reason(job, pods) if isinstance(backend, ReportsWaits) else None


def test_queued_reasons_follow_the_gates_and_bindings():
    job, pods = job_and_pods(policy={"queue": "q"})
    gated = [_with_gates(p, constants.GANG_SCHEDULING_GATE) for p in pods]
    assert _queued_reason(job, "builtin", gated) == "waiting for gang admission (3 of 3 pods gated)"
    assert _queued_reason(job, "builtin", pods) is None
    kueue_gated = [_with_gates(p, kueue.ADMISSION_GATE) for p in pods[:2]] + pods[2:]
    assert _queued_reason(job, "kueue", kueue_gated) == (
        "waiting for Kueue to admit the workload (LocalQueue q; 2 of 3 pods gated)"
    )
    assert _queued_reason(job, "kueue", pods) is None
    bound = [{**p, "spec": {**p["spec"], "nodeName": "n1"}} for p in pods]
    assert _queued_reason(job, "scheduler-plugins", bound) is None
    waiting = _queued_reason(job, "scheduler-plugins", [*bound[:1], *pods[1:]])
    assert waiting.startswith("2 of 3 pods waiting for the Coscheduling plugin")
    assert _queued_reason(job, "none", pods) is None


# The real CRD schemas, read from the shared data (never copied into the repo).


def _crd_schema(filename: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((CRDS / filename).read_text()) if d]
    (crd,) = docs
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return version["schema"]["openAPIV3Schema"]


SCHEMAS = {
    "volcano": ("scheduling.volcano.sh_podgroups.yaml", volcano.API_VERSION),
    "scheduler-plugins": ("scheduling.x-k8s.io_podgroups.yaml", scheduler_plugins.API_VERSION),
}


@pytest.mark.parametrize(
    "policy",
    [None, {"queue": "research", "priorityClass": "high", "minAvailable": 2, "scheduleTimeoutSeconds": 60}],
    ids=["defaults", "every scheduling field"],
)
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_rendered_podgroups_are_valid_against_the_published_crd(name, policy):
    filename, api_version = SCHEMAS[name]
    job, pods = job_and_pods(policy=policy)
    (group,) = backend_for(job, name).group_objects(job, pods)
    assert group["apiVersion"] == api_version
    jsonschema.validate(group, _crd_schema(filename))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_crd_check_rejects_a_malformed_podgroup(name):
    job, pods = job_and_pods()
    (group,) = backend_for(job, name).group_objects(job, pods)
    schema = _crd_schema(SCHEMAS[name][0])
    for broken in ({"minMember": "three"}, {"minResources": {"cpu": "two cores"}}):
        bad = {**group, "spec": {**group["spec"], **broken}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# The built-in backend's pure helpers.


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_release_patch_pins_the_pod_and_removes_only_our_gate():
    _job, pods = job_and_pods()
    pod = _with_gates(pods[0], "example.com/other", constants.GANG_SCHEDULING_GATE)
    pod["spec"]["nodeSelector"] = {"pool": "a100"}
    released = _merge_patch(pod, builtin.release_patch(pod, "gpu-7", NOW))
    assert released["spec"]["nodeSelector"] == {"pool": "a100", "kubernetes.io/hostname": "gpu-7"}
    assert _gates(released) == ["example.com/other"]
    assert released["metadata"]["annotations"][builtin.ANNOTATION_RELEASED_AT] == "2026-01-02T03:04:05Z"
    only_ours = _merge_patch(pods[1], builtin.release_patch(_with_gates(pods[1], constants.GANG_SCHEDULING_GATE), "n"))
    assert "schedulingGates" not in only_ours["spec"]


def test_release_refuses_a_node_that_contradicts_the_template():
    _job, pods = job_and_pods()
    pods[0]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    with pytest.raises(ValueError, match=r"spec.nodeSelector\[kubernetes.io/hostname\] is 'n1'"):
        builtin.release_patch(pods[0], "n2")


def _released(pod, node=None, at=NOW, phase="Pending"):
    out = _merge_patch(pod, builtin.release_patch(_with_gates(pod, constants.GANG_SCHEDULING_GATE), "n1", at))
    if node:
        out["spec"]["nodeName"] = node
    out["status"] = {"phase": phase}
    return out


def test_in_flight_reservations_are_released_but_unbound_pods():
    _job, pods = job_and_pods(gpu=2)
    waiting = _released(pods[0])
    bound = _released(pods[1], node="n1", phase="Running")
    gated = _with_gates(pods[2], constants.GANG_SCHEDULING_GATE)
    held = in_flight_reservations([waiting, bound, gated])
    # A released pod holds its requests and one of the node's pod slots.
    assert held == {
        "n1": {"cpu": Decimal(2), "memory": Decimal(4 * 2**30), "nvidia.com/gpu": Decimal(2), "pods": Decimal(1)}
    }
    assert bound_pods([waiting, bound, gated]) == [bound]


# (case, pod states as (bound?, released seconds before now or None), timeout, timed out?)
TIMEOUT_TABLE = [
    ("not released yet", [(False, None), (False, None)], 300, False),
    ("released recently", [(True, 10), (False, 10)], 300, False),
    ("released too long ago, one unbound", [(True, 400), (False, 400)], 300, True),
    ("exactly at the timeout", [(False, 300)], 300, True),
    ("all bound long ago", [(True, 4000), (True, 4000)], 300, False),
    ("the job's own timeout", [(False, 90)], 60, True),
]


@pytest.mark.parametrize(
    ("states", "timeout", "expected"), [r[1:] for r in TIMEOUT_TABLE], ids=[r[0] for r in TIMEOUT_TABLE]
)
def test_watchdog_times_out_gangs_not_fully_scheduled(states, timeout, expected):
    _job, pods = job_and_pods(workers=len(states) - 1)
    observed = []
    for pod, (bound, ago) in zip(pods, states, strict=True):
        if ago is None:
            observed.append(_with_gates(pod, constants.GANG_SCHEDULING_GATE))
        else:
            observed.append(_released(pod, node="n1" if bound else None, at=NOW - timedelta(seconds=ago)))
    assert builtin.schedule_timed_out(observed, NOW, timeout) is expected


@pytest.mark.parametrize(("timeouts", "seconds"), [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (30, 600)])
def test_backoff_doubles_up_to_ten_minutes(timeouts, seconds):
    assert builtin.backoff_seconds(timeouts) == seconds


def test_gang_request_holds_the_gated_pods_and_the_domain():
    job, pods = job_and_pods(annotations={ANNOTATION_GANG_DOMAIN: "example.com/rack"})
    observed = [_with_gates(pods[0], constants.GANG_SCHEDULING_GATE), _released(pods[1]), pods[2]]
    request = queue.gang_request(job, observed, priority=7, arrival=12.5)
    assert request.key == "team-a/mnist"
    assert [p["metadata"]["name"] for p in request.pods] == ["mnist-chief-0"]
    assert (request.priority, request.arrival, request.domain_label) == (7, 12.5, "example.com/rack")


def test_builtin_gated_pods_are_admitted_by_the_placement_core():
    job, pods = job_and_pods(gpu=4)
    gated = [builtin.BuiltinBackend().decorate_pod(job, p) for p in pods]
    nodes = [
        {
            "metadata": {"name": f"g{i}", "labels": {}},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}},
        }
        for i in range(2)
    ]
    result = admit([queue.gang_request(job, gated)], nodes)
    placement = result.admitted["team-a/mnist"]
    assert sorted(placement) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    assert sorted(placement.values()) == ["g0", "g0", "g1"]


# One pass of the builtin admission loop, end to end over plain objects.


def _gpu_nodes(*gpus: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(g)}},
        }
        for i, g in enumerate(gpus)
    ]


def _queued_gang(name: str, workers: int, arrival: float, policy: dict[str, Any] | None = None):
    body = manifest(workers=workers, policy=policy)
    del body["spec"]["tfReplicaSpecs"]["Chief"]
    body["metadata"]["name"] = name
    job = parse_tfjob(body)
    backend = builtin.BuiltinBackend()
    pods = [backend.decorate_pod(job, p) for p in render(job).pods]
    for p in pods:
        p["status"] = {"phase": "Pending"}
    return queue.QueuedGang(job, pods, arrival=arrival)


def _apply(gang: queue.QueuedGang, plan: queue.PassPlan, phase: str = "Running") -> queue.QueuedGang:
    """The pods after the release PATCHes and kube-scheduler binding them."""
    by_pod = {r.pod: r for r in plan.releases}
    pods = []
    for pod in gang.pods:
        release = by_pod.get(pod["metadata"]["name"])
        if release is not None:
            pod = _merge_patch(pod, release.patch)
            pod["spec"]["nodeName"] = release.node
            pod["status"] = {"phase": phase}
        pods.append(pod)
    return queue.QueuedGang(gang.job, pods, arrival=gang.arrival)


def test_pass_admits_one_four_gpu_gang_of_two_on_six_gpus_then_the_other_when_it_ends():
    nodes = _gpu_nodes(4, 2)
    first, second = _queued_gang("first", 4, 1.0), _queued_gang("second", 4, 2.0)
    plan = plan_pass([first, second], nodes, [*first.pods, *second.pods], now=NOW)
    assert plan.admitted == ["team-a/first"]
    assert sorted(r.pod for r in plan.releases) == [f"first-worker-{i}" for i in range(4)]
    assert plan.queued == {
        "team-a/second": "needs 4 nvidia.com/gpu on ≤ 4 nodes; largest free 2 (2 free on 2 eligible nodes)"
    }
    running = _apply(first, plan)
    again = plan_pass(
        [running, second], nodes, [*running.pods, *second.pods], now=NOW, passes_waited=plan.passes_waited
    )
    assert again.releases == [] and again.passes_waited == {"team-a/second": 2}
    done = _apply(first, plan, phase="Succeeded")
    last = plan_pass([done, second], nodes, [*done.pods, *second.pods], now=NOW)
    assert last.admitted == ["team-a/second"] and len(last.releases) == 4


def test_pass_counts_released_but_unbound_pods_as_taken():
    nodes = _gpu_nodes(4)
    first, second = _queued_gang("first", 4, 1.0), _queued_gang("second", 1, 2.0)
    plan = plan_pass([first], nodes, first.pods, now=NOW)
    released = [_merge_patch(p, r.patch) for p, r in zip(first.pods, plan.releases, strict=True)]
    pending = queue.QueuedGang(first.job, released)
    later = plan_pass([pending, second], nodes, [*released, *second.pods], now=NOW)
    assert later.releases == [] and "largest free 0" in later.queued["team-a/second"]


def test_pass_never_admits_a_half_created_gang():
    gang = _queued_gang("j", 4, 1.0)
    half = queue.QueuedGang(gang.job, gang.pods[:2])
    plan = plan_pass([half], _gpu_nodes(8), half.pods, now=NOW)
    assert plan.releases == []
    assert plan.queued == {"team-a/j": "waiting for all 4 pods of the gang to be created (2 so far)"}


def test_pass_times_out_a_released_gang_and_respects_the_backoff():
    gang = _queued_gang("j", 2, 1.0, policy={"scheduleTimeoutSeconds": 60})
    plan = plan_pass([gang], _gpu_nodes(8), gang.pods, now=NOW)
    released = [_merge_patch(p, r.patch) for p, r in zip(gang.pods, plan.releases, strict=True)]
    stuck = queue.QueuedGang(
        gang.job, [released[0] | {"spec": {**released[0]["spec"], "nodeName": "n0"}}, released[1]]
    )
    assert plan_pass([stuck], _gpu_nodes(8), stuck.pods, now=NOW + timedelta(seconds=59)).timed_out == []
    late = plan_pass([stuck], _gpu_nodes(8), stuck.pods, now=NOW + timedelta(seconds=60))
    assert late.timed_out == ["team-a/j"] and late.releases == []
    # Recreated gated; not admitted before its back-off ends, admitted after.
    retry_at = NOW + timedelta(seconds=120)
    early = plan_pass(
        [gang], _gpu_nodes(8), gang.pods, now=NOW + timedelta(seconds=61), not_before={"team-a/j": retry_at}
    )
    assert early.releases == [] and early.queued["team-a/j"].startswith("requeued after a schedule timeout")
    ready = plan_pass([gang], _gpu_nodes(8), gang.pods, now=retry_at, not_before={"team-a/j": retry_at})
    assert ready.admitted == ["team-a/j"]


def test_each_wait_says_what_kind_it_is_and_only_a_gang_still_being_created_is_not_shown():
    created = _queued_gang("creating", 4, 1.0)
    half = queue.QueuedGang(created.job, created.pods[:2])
    backing_off = _queued_gang("backoff", 1, 2.0)
    fits, short = _queued_gang("fits", 6, 3.0), _queued_gang("short", 4, 4.0)
    huge = _queued_gang("huge", 9, 5.0)
    gangs = [half, backing_off, fits, short, huge]
    plan = plan_pass(gangs, _gpu_nodes(8), [p for g in gangs for p in g.pods], now=NOW,
                     not_before={"team-a/backoff": NOW + timedelta(seconds=10)})
    assert plan.admitted == ["team-a/fits"]
    assert {key: (wait.kind, wait.shown) for key, wait in plan.waits.items()} == {
        "team-a/creating": (WaitKind.CREATING, False),
        "team-a/backoff": (WaitKind.BACKOFF, True),
        "team-a/short": (WaitKind.NO_ROOM, True),
        "team-a/huge": (WaitKind.NEVER_FITS, True),
    }
    behind = _queued_gang("behind", 1, 6.0)
    strict = plan_pass([fits, short, behind], _gpu_nodes(8), [*fits.pods, *short.pods, *behind.pods], now=NOW,
                       policy=AdmissionPolicy(backfill=False))
    assert strict.admitted == ["team-a/fits"]
    assert strict.waits["team-a/behind"] == GangWait(WaitKind.NO_ROOM, "waiting behind team-a/short (strict FIFO)")


def test_gpu_seconds_are_counted_only_while_a_gang_is_not_fully_running():
    gang = _queued_gang("j", 2, 1.0)
    plan = plan_pass([gang], _gpu_nodes(8), gang.pods, now=NOW)
    running = _apply(gang, plan)
    half = queue.QueuedGang(gang.job, [running.pods[0], gang.pods[1]])
    assert builtin.held_gpu_seconds(half.pods, 10) == Decimal(10)  # one bound 1-GPU pod, its peer not yet
    assert builtin.held_gpu_seconds(running.pods, 10) == Decimal(0)
    assert builtin.held_gpu_seconds(gang.pods, 10) == Decimal(0)  # nothing bound, nothing held
