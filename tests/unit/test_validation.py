"""Bad TFJobs are refused with a message that names the field and says what to do."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.gang.backends import parse_job


def good() -> dict[str, Any]:
    return {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "tf:1"}]}}}}},
    }


def with_(path: str, value: Any) -> dict[str, Any]:
    """good() with one field set (dotted path; `Worker.template` style keys)."""
    obj = good()
    node = obj
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return obj


TWO_CONTAINERS = {"spec": {"containers": [{"name": "main", "image": "a"}, {"name": "side", "image": "b"}]}}

INVALID = [
    ("bad-name", with_("metadata.name", "MNIST_job"), "metadata.name: 'MNIST_job' is not a DNS-1035 label"),
    ("name-too-long-for-its-pods", with_("metadata.name", "a" * 55),
     f"metadata.name: 55 characters make pod hostname '{'a' * 55}-worker-1' 64 characters long, more than 63 "
     "(shorten the name by 1, or lower replicas)"),
    ("name-too-long-for-a-service", {**with_("metadata.name", "a" * 64), "spec": {"tfReplicaSpecs": {
        "Worker": {"replicas": 0, "template": good()["spec"]["tfReplicaSpecs"]["Worker"]["template"]}}}},
     "metadata.name: 64 characters, more than 63"),
    ("replicas-over-the-limit", with_("spec.tfReplicaSpecs.Worker.replicas", 100_000),
     "spec.tfReplicaSpecs.Worker.replicas: must be ≤ 1000, got 100000"),
    ("replicas-2-to-the-63", with_("spec.tfReplicaSpecs.Worker.replicas", 2**63),  # as a Python client sends it
     "spec.tfReplicaSpecs.Worker.replicas: must be ≤ 1000, got 9223372036854775808"),
    ("replicas-10-to-the-30", with_("spec.tfReplicaSpecs.Worker.replicas", 10**30),
     "spec.tfReplicaSpecs.Worker.replicas: must be ≤ 1000"),
    ("pods-over-the-job-limit", with_("spec.tfReplicaSpecs.PS", {"replicas": 999, "template": good()["spec"][
        "tfReplicaSpecs"]["Worker"]["template"]}), "spec.tfReplicaSpecs: more than 1000 pods in all"),
    ("document-over-the-api-servers-request-limit", with_("spec.tfReplicaSpecs.Worker.template", {"metadata": {
        "annotations": {"blob": "x" * (3 * 2**20)}}, "spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}),
     "(document): larger than 3 MiB as JSON (YAML aliases expanded), the API server's request limit"),
    ("bad-namespace", with_("metadata.namespace", "Bad NS!"), "metadata.namespace: 'Bad NS!' is not a namespace name"),
    ("unknown-gang-backend", with_("metadata.annotations", {"tfjob.dev/gang-backend": "yunikorn"}),
     "metadata.annotations[tfjob.dev/gang-backend]: unknown gang backend 'yunikorn' (choose one of builtin,"),
    ("env-as-mapping", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "env": {"A": "1"}}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env: must be an array, got {'A': '1'}"),
    ("ports-as-number", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": 5}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports: must be an array, got 5"),
    ("container-as-string", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": ["tensorflow"]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0]: must be an object, got 'tensorflow'"),
    ("container-name-as-mapping", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": {"a": 1}, "image": "x"}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name: must be a string"),
    ("image-as-list", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": ["x"]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: must be a string, got ['x']"),
    ("template-metadata-not-a-mapping", with_("spec.tfReplicaSpecs.Worker.template", {"metadata": "x", "spec": {
        "containers": [{"name": "tensorflow", "image": "x"}]}}),
     "spec.tfReplicaSpecs.Worker.template.metadata: must be an object, got 'x'"),
    ("template-labels-not-a-mapping", with_("spec.tfReplicaSpecs.Worker.template", {"metadata": {"labels": [1]},
        "spec": {"containers": [{"name": "tensorflow", "image": "x"}]}}),
     "spec.tfReplicaSpecs.Worker.template.metadata.labels: must be an object, got [1]"),
    ("pod-field-typo", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "imagePullPolicie": "Always"}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0]: unknown field 'imagePullPolicie'"),
    ("port-beyond-int32", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [{"containerPort": 2**40}]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort: 1099511627776 does not fit"),
    ("replicas-true", with_("spec.tfReplicaSpecs.Worker.replicas", True),
     "spec.tfReplicaSpecs.Worker.replicas: must be an integer, got True"),
    ("replicas-string", with_("spec.tfReplicaSpecs.Worker.replicas", "3"),
     "spec.tfReplicaSpecs.Worker.replicas: must be an integer, got '3'"),
    ("suspend-yes", with_("spec.runPolicy", {"suspend": "yes"}), "spec.runPolicy.suspend: must be true or false"),
    ("min-resources-not-a-quantity", with_("spec.runPolicy", {"schedulingPolicy": {"minResources": {"cpu": "lots"}}}),
     "spec.runPolicy.schedulingPolicy.minResources.cpu: 'lots' is not a quantity"),
    ("limit-not-a-quantity", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "resources": {"limits": {"cpu": "lots"}}}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu: 'lots' is not a quantity"),
    ("null-list-item", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [None]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0]: empty item (remove it)"),
    ("spec-a-string", with_("spec", "x"), "spec: Input should be a valid dictionary"),
    ("metadata-not-a-mapping", with_("metadata", "x"), "metadata: Input should be a valid dictionary"),
    ("no-name", with_("metadata.name", ""), "metadata.name: required"),
    ("negative-replicas", with_("spec.tfReplicaSpecs.Worker.replicas", -1),
     "spec.tfReplicaSpecs.Worker.replicas: must be ≥ 0, got -1"),
    ("unknown-restart-policy", with_("spec.tfReplicaSpecs.Worker.restartPolicy", "Sometimes"),
     "spec.tfReplicaSpecs.Worker.restartPolicy: 'Sometimes' is not one of"),
    ("unknown-replica-type", with_("spec.tfReplicaSpecs.Boss", {"replicas": 1}),
     "spec.tfReplicaSpecs.Boss: unknown replica type 'Boss'"),
    ("chief-and-master", with_("spec.tfReplicaSpecs.Master", {"replicas": 1}) | {},
     "spec.tfReplicaSpecs: 'Master' and 'Chief' are the same replica type"),
    ("two-chiefs", with_("spec.tfReplicaSpecs.Chief", {"replicas": 2, "template": good()["spec"]["tfReplicaSpecs"][
        "Worker"]["template"]}), "spec.tfReplicaSpecs.Chief.replicas: at most 1 Chief is allowed, got 2"),
    ("two-evaluators", with_("spec.tfReplicaSpecs.Evaluator", {"replicas": 2, "template": good()["spec"][
        "tfReplicaSpecs"]["Worker"]["template"]}),
     "spec.tfReplicaSpecs.Evaluator.replicas: at most 1 Evaluator is allowed, got 2"),
    ("zero-total", with_("spec.tfReplicaSpecs.Worker.replicas", 0), "spec.tfReplicaSpecs: the job has no pods"),
    ("only-ps", {**good(), "spec": {"tfReplicaSpecs": {"PS": good()["spec"]["tfReplicaSpecs"]["Worker"]}}},
     "spec.tfReplicaSpecs: a job needs a Chief or at least one Worker"),
    ("no-tensorflow-container", with_("spec.tfReplicaSpecs.Worker.template", TWO_CONTAINERS),
     'spec.tfReplicaSpecs.Worker.template.spec.containers: no container named "tensorflow"'),
    ("no-containers", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": []}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers: required"),
    ("no-template-spec", with_("spec.tfReplicaSpecs.Worker.template", {}),
     "spec.tfReplicaSpecs.Worker.template.spec: required"),
    ("no-image", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [{"name": "tensorflow"}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required"),
    ("bad-port", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [{"name": "tfjob-port", "containerPort": 70000}]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports: tfjob-port containerPort must be 1-65535"),
    ("job-port-twice", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [{"name": "tfjob-port", "containerPort": 2222},
                                                       {"name": "tfjob-port", "containerPort": 3333}]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[1].name: tfjob-port is given twice "
     "(ports[0] and ports[1]); keep one"),
    ("job-port-udp", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [{"name": "tfjob-port", "containerPort": 2222,
                                                        "protocol": "UDP"}]}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].protocol: tfjob-port must be TCP "
     "(TensorFlow's gRPC runs over it), got 'UDP'"),
    ("blank-image", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "   "}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required (the image that runs training, "
     "got '   ')"),
    ("image-with-whitespace", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": " tf:2.16\n"}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: ' tf:2.16\\n' must not have leading or "
     "trailing whitespace"),
    ("init-image-with-whitespace", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {
        "initContainers": [{"name": "fetch", "image": "busybox "}],
        "containers": [{"name": "tensorflow", "image": "x"}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.initContainers[0].image: 'busybox ' must not have leading"),
    ("negative-gpu-limit", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "resources": {"limits": {"nvidia.com/gpu": -1}}}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu: -1 is negative "
     "(a quantity must be ≥ 0)"),
    ("negative-memory-request", with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "resources": {"requests": {"memory": "-1Gi"}}}]}}),
     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.requests.memory: '-1Gi' is negative"),
    ("negative-min-resources", with_("spec.runPolicy", {"schedulingPolicy": {"minResources": {"nvidia.com/gpu": -8}}}),
     "spec.runPolicy.schedulingPolicy.minResources.nvidia.com/gpu: -8 is negative"),
    ("min-available-too-big", with_("spec.runPolicy", {"schedulingPolicy": {"minAvailable": 5}}),
     "spec.runPolicy.schedulingPolicy.minAvailable: 5 is more than the job's 2 pods"),
    ("negative-ttl", with_("spec.runPolicy", {"ttlSecondsAfterFinished": -5}),
     "spec.runPolicy.ttlSecondsAfterFinished: must be ≥ 0, got -5"),
    ("zero-deadline", with_("spec.runPolicy", {"activeDeadlineSeconds": 0}),
     "spec.runPolicy.activeDeadlineSeconds: must be ≥ 1, got 0"),
    ("negative-backoff", with_("spec.runPolicy", {"backoffLimit": -1}), "spec.runPolicy.backoffLimit: must be ≥ 0"),
    ("bad-clean-pod-policy", with_("spec.runPolicy", {"cleanPodPolicy": "Some"}),
     "spec.runPolicy.cleanPodPolicy: 'Some' is not one of 'All', 'Running' or 'None'"),
    ("typo-field", with_("spec.runPolicy", {"backofLimit": 3}), "spec.runPolicy.backofLimit: unknown field"),
    ("bad-success-policy", with_("spec.successPolicy", "AnyWorker"), "spec.successPolicy: 'AnyWorker' is not one of"),
    ("dynamic-worker-without-ps", with_("spec.enableDynamicWorker", True),
     "spec.enableDynamicWorker: dynamic workers need PS replicas"),
    ("elastic-min-zero", with_("spec.elasticPolicy", {"minReplicas": 0, "maxReplicas": 4}),
     "spec.elasticPolicy.minReplicas: must be ≥ 1, got 0"),
    ("elastic-min-above-max", with_("spec.elasticPolicy", {"minReplicas": 3, "maxReplicas": 2}),
     "spec.elasticPolicy.minReplicas: 3 must be ≤ maxReplicas (2)"),
    ("elastic-replicas-above-max", with_("spec.elasticPolicy", {"minReplicas": 1, "maxReplicas": 1}),
     "spec.tfReplicaSpecs.Worker.replicas: 2 must lie in spec.elasticPolicy [minReplicas 1, maxReplicas 1]"),
    ("elastic-replicas-below-min", with_("spec.elasticPolicy", {"minReplicas": 3, "maxReplicas": 4}),
     "spec.tfReplicaSpecs.Worker.replicas: 2 must lie in spec.elasticPolicy [minReplicas 3, maxReplicas 4]"),
    ("elastic-missing-max", with_("spec.elasticPolicy", {"minReplicas": 1}),
     "spec.elasticPolicy.maxReplicas: required field is missing"),
    ("elastic-bad-scaling", with_("spec.elasticPolicy", {"minReplicas": 1, "maxReplicas": 2, "scaling": "Linear"}),
     "spec.elasticPolicy.scaling: 'Linear' is not one of"),
    ("elastic-with-ps", {**good(), "spec": {"tfReplicaSpecs": {**good()["spec"]["tfReplicaSpecs"],
                                                               "PS": good()["spec"]["tfReplicaSpecs"]["Worker"]},
                                            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 2}}},
     "spec.elasticPolicy: elastic workers are for MultiWorkerMirroredStrategy jobs"),
    ("missing-replica-specs", {**good(), "spec": {}}, "spec.tfReplicaSpecs: required field is missing"),
    ("wrong-api-version", with_("apiVersion", "batch/v1"), "apiVersion: 'batch/v1' is not supported"),
    ("wrong-kind", with_("kind", "Job"), "kind: 'Job' is not a TFJob"),
    ("bad-schedule-timeout", with_("spec.runPolicy", {"schedulingPolicy": {"scheduleTimeoutSeconds": 0}}),
     "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds: must be ≥ 1"),
]
# chief-and-master needs a Chief too
_CHIEF_AND_MASTER = next(m for i, m, _ in INVALID if i == "chief-and-master")
_CHIEF_AND_MASTER["spec"]["tfReplicaSpecs"]["Chief"] = copy.deepcopy(good()["spec"]["tfReplicaSpecs"]["Worker"])


@pytest.mark.parametrize(("manifest", "expected"), [pytest.param(m, e, id=i) for i, m, e in INVALID])
def test_invalid_tfjob_is_refused_naming_the_field(manifest: dict[str, Any], expected: str) -> None:
    # parse_job: parse_tfjob and the gang backend's name, as the webhook and the CLI read a job.
    with pytest.raises(InvalidSpec) as info:
        parse_job(manifest)
    assert any(message.startswith(expected) for message in info.value.messages), info.value.messages


def _named(name: str, **replicas: int) -> dict[str, Any]:
    template = good()["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    return {**good(), "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {t: {"replicas": n, "template": template} for t, n in replicas.items()}}}


@pytest.mark.parametrize(("name_length", "replicas", "longest"), [
    (54, {"Worker": 1}, "-worker-0"),  # Kubeflow accepts 52-63 character names whose pods fit; so do we
    (55, {"Chief": 1, "PS": 2}, "-chief-0"),
    (55, {"Master": 1}, "-chief-0"),  # pods spell Master as chief
    (52, {"Worker": 1000}, "-worker-999"),
    (51, {"Worker": 2, "Evaluator": 1}, "-evaluator-0"),
])
def test_a_name_is_as_long_as_its_own_pods_hostnames_allow(name_length: int, replicas: dict[str, int],
                                                            longest: str) -> None:
    from tfjob_operator.reconcile.render import pod_names

    job = parse_tfjob(_named("a" * name_length, **replicas))
    assert max(len(n) for n in pod_names(job)) == 63 == name_length + len(longest)
    with pytest.raises(InvalidSpec) as info:
        parse_tfjob(_named("a" * (name_length + 1), **replicas))
    assert info.value.messages == [
        f"metadata.name: {name_length + 1} characters make pod hostname {'a' * (name_length + 1) + longest!r} 64 "
        "characters long, more than 63 (shorten the name by 1, or lower replicas)"]


def test_a_manifest_with_an_empty_namespace_means_the_default_namespace_as_in_kubectl() -> None:
    job = parse_tfjob(with_("metadata.namespace", ""))
    assert job.metadata.namespace is None and job.namespace == "default"


def test_an_image_kube_apiserver_accepts_is_accepted() -> None:
    manifest = with_("spec.tfReplicaSpecs.Worker.template", {"spec": {"containers": [
        {"name": "tensorflow", "image": "registry.example.com:5000/team/tf@sha256:" + "a" * 64,
         "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}],
         "resources": {"limits": {"nvidia.com/gpu": 0, "cpu": "0.5"}}}]}})
    parse_tfjob(manifest)


def test_a_pod_template_has_no_limit_kubernetes_does_not_have() -> None:
    """20 containers and 20 init containers (no cap on a pod's containers in Kubernetes), a 1 MiB annotation
    (a Deployment's template may carry one too), unusual images: all accepted."""
    containers = [{"name": "tensorflow", "image": "tf:1"}] + [
        {"name": f"side{i}", "image": "busybox", "resources": {"limits": {"cpu": "-0"}}} for i in range(19)]
    manifest = with_("spec.tfReplicaSpecs.Worker.template", {
        "metadata": {"annotations": {"blob": "x" * 2**20}},
        "spec": {"containers": containers,
                 "initContainers": [{"name": f"init{i}", "image": "\x1cbusybox"} for i in range(20)]}})
    template = parse_tfjob(manifest).spec.tfReplicaSpecs["Worker"].template  # type: ignore[index]
    assert len(template["spec"]["containers"]) == len(template["spec"]["initContainers"]) == 20


def test_null_fields_of_a_pod_template_mean_unset_as_in_kubernetes() -> None:
    manifest = with_("spec.tfReplicaSpecs.Worker.template", {"metadata": {"labels": None}, "spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": None}]}})
    manifest["metadata"]["labels"] = None
    job = parse_tfjob(manifest)
    template = job.spec.tfReplicaSpecs["Worker"].template  # type: ignore[index]
    assert template["spec"]["containers"][0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert template["metadata"] == {}


def test_all_problems_are_reported_at_once() -> None:
    manifest = with_("spec.tfReplicaSpecs.Worker.replicas", -1)
    manifest["spec"]["runPolicy"] = {"cleanPodPolicy": "x"}
    manifest["metadata"]["annotations"] = {"tfjob.dev/gang-backend": "yunikorn"}
    with pytest.raises(InvalidSpec) as info:
        parse_job(manifest)
    assert len(info.value.messages) == 3


def test_valid_job_gets_default_port_and_policies() -> None:
    job = parse_tfjob(good())
    worker = job.spec.tfReplicaSpecs["Worker"]  # type: ignore[index]
    assert worker.template["spec"]["containers"][0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert worker.restartPolicy == "Never"
    assert job.spec.runPolicy.cleanPodPolicy == "Running"
    assert job.spec.successPolicy == ""


def test_parse_does_not_change_its_input() -> None:
    manifest = good()
    before = copy.deepcopy(manifest)
    parse_tfjob(manifest)
    assert manifest == before


def test_an_elastic_job_and_a_dynamic_worker_ps_job_are_accepted() -> None:
    elastic = with_("spec.elasticPolicy", {"minReplicas": 1, "maxReplicas": 4})
    policy = parse_tfjob(elastic).spec.elasticPolicy
    assert policy is not None
    assert (policy.scaling.value, policy.resizeCooldownSeconds) == ("ConstantGlobalBatch", 300)
    ps_job = {**good(), "apiVersion": "kubeflow.org/v1"}
    ps_job["spec"] = {**ps_job["spec"], "enableDynamicWorker": True,
                      "tfReplicaSpecs": {**ps_job["spec"]["tfReplicaSpecs"], "PS": ps_job["spec"]["tfReplicaSpecs"][
                          "Worker"]}}
    assert parse_tfjob(ps_job).spec.enableDynamicWorker


def test_elastic_policy_is_refused_on_kubeflow_jobs_naming_the_field() -> None:
    manifest = {**with_("spec.elasticPolicy", {"minReplicas": 1, "maxReplicas": 4}), "apiVersion": "kubeflow.org/v1"}
    with pytest.raises(InvalidSpec, match=r"spec.elasticPolicy: only on tfjob.dev/v1"):
        parse_tfjob(manifest)


def runtime_job(args: list[str], lo: int = 2, hi: int = 4, workers: int = 4, chief: bool = False,
                command: list[str] | None = None, scaling: str = "ConstantGlobalBatch") -> dict[str, Any]:
    """An elastic job whose workers run the worker runtime with `args`."""
    manifest = with_("spec.elasticPolicy", {"minReplicas": lo, "maxReplicas": hi, "scaling": scaling})
    specs = manifest["spec"]["tfReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    specs["Worker"]["template"]["spec"]["containers"][0].update(
        command=command if command is not None else ["python", "-m", "tfjob_worker"], args=args)
    if chief:
        specs["Chief"] = copy.deepcopy(specs["Worker"]) | {"replicas": 1}
    return manifest


@pytest.mark.parametrize("args", [
    ["--batch-size-per-replica", "16"], ["--batch-size-per-replica", "10"], ["--batch-size-per-replica=7"],
    [],  # the runtime's default, 32
    ["--batch-size-per-replica", "1"],  # 4 examples: one for each of up to 4 workers
])
def test_an_elastic_job_whose_every_width_gets_examples_is_accepted_whatever_its_batch(args: list[str]) -> None:
    assert parse_tfjob(runtime_job(args)).spec.elasticPolicy is not None


@pytest.mark.parametrize(("manifest", "expected"), [
    (runtime_job(["--batch-size-per-replica", "1"], lo=1, hi=6, workers=3),
     "spec.elasticPolicy.maxReplicas: 6 workers would leave a replica without an example: ConstantGlobalBatch keeps "
     "the global batch at 3 (--batch-size-per-replica 1 x 3 training processes at Worker.replicas) and splits it "
     "over the training processes, 4 at 4 workers; lower maxReplicas to 3, raise --batch-size-per-replica, or set "
     "scaling: ScaleLearningRate"),
    (runtime_job(["--epochs", "5", "--batch-size-per-replica", "1"], lo=1, hi=5, workers=2, chief=True),
     "keeps the global batch at 3 (--batch-size-per-replica 1 x 3 training processes at Worker.replicas) and splits "
     "it over the training processes, 4 at 3 workers; lower maxReplicas to 2"),  # the chief is a training process
])
def test_an_elastic_job_with_a_width_its_global_batch_cannot_feed_is_refused_at_admission(manifest: dict[str, Any],
                                                                                          expected: str) -> None:
    with pytest.raises(InvalidSpec, match=re.escape(expected)):
        parse_tfjob(manifest)


@pytest.mark.parametrize("manifest", [
    runtime_job(["--batch-size-per-replica", "1"], lo=1, hi=6, workers=3, scaling="ScaleLearningRate"),
    runtime_job(["--batch-size-per-replica", "1"], lo=1, hi=6, workers=3, command=["python", "train.py"]),
    runtime_job(["-c", "python -m tfjob_worker --batch-size-per-replica 1"], lo=1, hi=6, workers=3,
                command=["sh"]),  # a shell line: the runtime checks every width itself at start
])
def test_widths_are_checked_at_admission_only_where_the_arguments_say_the_runtimes_batch(
        manifest: dict[str, Any]) -> None:
    assert parse_tfjob(manifest).spec.elasticPolicy is not None
