"""Reading a TFJob from a manifest: schema errors and semantic errors, each naming its field and the fix.

`parse_tfjob` is the one entry point; the CLI, the operator and the admission webhook all use it, so a job
is refused with the same words everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tfjob_operator.api import REPLICA_TYPE_ALIASES, ReplicaType, TFJob, apigroups, constants, limits
from tfjob_operator.api.podschema import GO_SPACE, quantity_problem, template_schema_messages
from tfjob_worker.config import batch_size_flag
from tfjob_worker.scaling import plan_batch

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

ACCEPTED_API_VERSIONS = (constants.API_VERSION, constants.KUBEFLOW_API_VERSION)


class InvalidSpec(ValueError):
    """A TFJob that cannot run; `messages` name each bad field and say what to do."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def short_repr(value: Any) -> str:
    """A value as a refusal quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _friendly(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = error.get("input")
    if kind == "less_than_equal":
        return f"must be ≤ {ctx.get('le')}, got {short_repr(got)}"
    if kind == "extra_forbidden":
        return "unknown field (remove it, or check its spelling)"
    if kind == "enum":
        return f"{got!r} is not one of {ctx.get('expected')}"
    if kind == "greater_than_equal":
        return f"must be ≥ {ctx.get('ge')}, got {short_repr(got)}"
    if kind == "missing":
        return "required field is missing"
    if kind == "int_parsing_size":  # kubectl sends an integer past int64 as a float (kubeyaml)
        return f"must be an integer that fits in 64 bits, got {short_repr(got)}"
    if kind == "value_error":  # our own validators' words (api._json_int ...) are already a sentence
        return str(error["msg"]).removeprefix("Value error, ")
    return f"{error['msg']} (got {short_repr(got)})"


def _schema_messages(exc: ValidationError) -> list[str]:
    messages = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = _friendly(error)
        # An unknown replica-type key is reported on the key itself.
        if "[key]" in loc:
            message = (
                f"unknown replica type {error.get('input')!r} "
                "(use Chief, Master, Worker, PS or Evaluator)"
            )
        messages.append(f"{_path(loc) or '(document)'}: {message}")
    return messages


def training_container_index(template: Mapping[str, Any]) -> int | None:
    """Index of the container that trains: the one named `tensorflow`, or the only one."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    for i, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == constants.DEFAULT_CONTAINER_NAME:
            return i
    return 0 if len(containers) == 1 else None


def _duplicate_type_messages(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec")
    specs = spec.get("tfReplicaSpecs") if isinstance(spec, Mapping) else None
    if not isinstance(specs, Mapping):
        return []
    seen: dict[ReplicaType, str] = {}
    messages = []
    for key in specs:
        rtype = REPLICA_TYPE_ALIASES.get(str(key).lower())
        if rtype is None:
            continue
        if rtype in seen:
            messages.append(
                f"spec.tfReplicaSpecs: {seen[rtype]!r} and {key!r} are the same replica type "
                f"({rtype.value}); keep one"
            )
        seen[rtype] = str(key)
    return messages


def semantic_messages(job: TFJob) -> list[str]:
    """What the schema cannot say: names, counts, containers and ports that would make a job unrunnable."""
    messages: list[str] = []
    name = job.metadata.name
    if not name:
        messages.append("metadata.name: required (give the job a name)")
    elif not _DNS_1035.match(name):
        messages.append(
            f"metadata.name: {short_repr(name)} is not a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter, ending with a letter or digit)"
        )
    messages.extend(_name_length_messages(job))
    namespace = job.metadata.namespace
    if namespace is not None and (len(namespace) > constants.MAX_DNS_LABEL or not _DNS_1123_LABEL.match(namespace)):
        messages.append(
            f"metadata.namespace: {short_repr(namespace)} is not a namespace name (lowercase letters, digits and '-', "
            f"at most {constants.MAX_DNS_LABEL} characters)"
        )
    total = job.total_replicas()
    if total > limits.MAX_REPLICAS_PER_JOB:
        messages.append(limits.TOO_MANY_PODS)
    for rtype, spec in job.replica_specs():
        field = f"spec.tfReplicaSpecs.{rtype.value}"
        if rtype in (ReplicaType.CHIEF, ReplicaType.EVALUATOR) and spec.replicas > 1:
            messages.append(f"{field}.replicas: at most 1 {rtype.value} is allowed, got {spec.replicas}")
        messages.extend(_template_messages(f"{field}.template", spec.template))
    if total == 0:
        messages.append("spec.tfReplicaSpecs: the job has no pods (set replicas ≥ 1 on Worker or Chief)")
    elif not any(
        rtype in (ReplicaType.CHIEF, ReplicaType.WORKER) and spec.replicas > 0 for rtype, spec in job.replica_specs()
    ):
        messages.append("spec.tfReplicaSpecs: a job needs a Chief or at least one Worker to train and decide success")
    sched = job.spec.runPolicy.schedulingPolicy
    min_resources = (sched.minResources or {}) if sched else {}
    if len(min_resources) > limits.MAX_MIN_RESOURCES:
        messages.append(f"spec.runPolicy.schedulingPolicy.minResources: {len(min_resources)} resources, more than "
                        f"{limits.MAX_MIN_RESOURCES} (name the ones the gang needs)")
    for resource, quantity in min_resources.items():
        if isinstance(quantity, str) and len(quantity) > limits.MAX_QUANTITY_LENGTH:
            messages.append(f"spec.runPolicy.schedulingPolicy.minResources.{resource}: {short_repr(quantity)} is "
                            f"longer than {limits.MAX_QUANTITY_LENGTH} characters")
        elif problem := quantity_problem(quantity):
            messages.append(f"spec.runPolicy.schedulingPolicy.minResources.{resource}: {problem}")
    if sched and sched.minAvailable is not None and sched.minAvailable > total:
        messages.append(
            f"spec.runPolicy.schedulingPolicy.minAvailable: {sched.minAvailable} is more than the job's "
            f"{total} pods (lower it, or add replicas)"
        )
    messages.extend(_elastic_messages(job))
    if job.spec.successPolicy == "AllWorkers" and ReplicaType.WORKER not in job.spec.tfReplicaSpecs:
        messages.append("spec.successPolicy: AllWorkers needs a Worker replica type")
    managed_by = apigroups.managed_by_message((job.spec.runPolicy.managedBy or "").strip())
    if managed_by:
        messages.append(managed_by)
    return messages


def _elastic_messages(job: TFJob) -> list[str]:
    """spec.elasticPolicy (MultiWorkerMirroredStrategy workers, tfjob.dev/v1) and Kubeflow's enableDynamicWorker
    (ParameterServerStrategy workers): each only where its strategy applies."""
    specs = job.spec.tfReplicaSpecs
    has_ps = ReplicaType.PS in specs and specs[ReplicaType.PS].replicas > 0
    messages = []
    if job.spec.enableDynamicWorker and not has_ps:
        messages.append("spec.enableDynamicWorker: dynamic workers need PS replicas (ParameterServerStrategy); "
                        "for MultiWorkerMirroredStrategy use spec.elasticPolicy on tfjob.dev/v1, or remove it")
    policy = job.spec.elasticPolicy
    if policy is None:
        return messages
    field = "spec.elasticPolicy"
    if job.apiVersion != constants.API_VERSION:
        messages.append(f"{field}: only on {constants.API_VERSION} (kubeflow.org/v1 has enableDynamicWorker)")
    if has_ps:
        messages.append(f"{field}: elastic workers are for MultiWorkerMirroredStrategy jobs; a job with PS "
                        "replicas cannot have it (remove the PS, or use enableDynamicWorker on kubeflow.org/v1)")
    if job.spec.enableDynamicWorker:
        messages.append(f"{field}: cannot be combined with spec.enableDynamicWorker (keep one)")
    workers = specs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in specs else 0
    if policy.minReplicas > policy.maxReplicas:
        messages.append(f"{field}.minReplicas: {policy.minReplicas} must be ≤ maxReplicas ({policy.maxReplicas})")
    elif not policy.minReplicas <= workers <= policy.maxReplicas:
        messages.append(f"spec.tfReplicaSpecs.Worker.replicas: {workers} must lie in spec.elasticPolicy "
                        f"[minReplicas {policy.minReplicas}, maxReplicas {policy.maxReplicas}] (the initial width)")
    else:
        messages.extend(_elastic_width_messages(job, workers))
    return messages


def runtime_args(template: Mapping[str, Any]) -> list[str] | None:
    """The arguments the worker runtime (`python -m tfjob_worker`) gets in this pod template, or None when its
    training container runs something else (or a shell line, which only the runtime itself reads)."""
    index = training_container_index(template)
    if index is None:
        return None
    container = template["spec"]["containers"][index]
    tokens = [str(t) for t in [*(container.get("command") or []), *(container.get("args") or [])]]
    return tokens[tokens.index("tfjob_worker") + 1:] if "tfjob_worker" in tokens else None


def _elastic_width_messages(job: TFJob, workers: int) -> list[str]:
    """Every width in [minReplicas, maxReplicas] must train (the runtime's batch plan, `tfjob_worker.scaling`),
    where the Worker's arguments say its batch; otherwise the runtime checks the same at start."""
    policy = job.spec.elasticPolicy
    assert policy is not None
    args = runtime_args(job.spec.tfReplicaSpecs[ReplicaType.WORKER].template)
    per_replica = batch_size_flag(args) if args is not None else None
    if per_replica is None:
        return []
    chief = 1 if job.has_chief() else 0  # the runtime counts training processes: the chief is one
    for width in range(policy.minReplicas, policy.maxReplicas + 1):
        try:
            plan_batch(policy.scaling.value, per_replica, 1.0, width + chief, workers + chief)
        except ValueError:
            reference = workers + chief
            return [f"spec.elasticPolicy.maxReplicas: {policy.maxReplicas} workers would leave a replica without an "
                    f"example: {policy.scaling.value} keeps the global batch at {per_replica * reference} "
                    f"(--batch-size-per-replica {per_replica} x {reference} training processes at Worker.replicas) "
                    f"and splits it over the training processes, {width + chief} at {width} workers; lower "
                    f"maxReplicas to {per_replica * reference - chief}, raise --batch-size-per-replica, or set "
                    "scaling: ScaleLearningRate"]
    return []


def _name_length_messages(job: TFJob) -> list[str]:
    """The name is limited by the job's own pods: each hostname `<name>-<type>-<index>` is a DNS label."""
    name = job.metadata.name
    hostname = limits.longest_hostname(name, {rtype.tf_name: spec.replicas for rtype, spec in job.replica_specs()})
    if hostname is not None and len(hostname) > limits.MAX_HOSTNAME_LENGTH:
        return [f"metadata.name: {len(name)} characters make pod hostname {hostname!r} {len(hostname)} characters "
                f"long, more than {limits.MAX_HOSTNAME_LENGTH} (shorten the name by "
                f"{len(hostname) - limits.MAX_HOSTNAME_LENGTH}, or lower replicas)"]
    if len(name) > constants.MAX_DNS_LABEL:  # the job's headless Service is named after it
        return [f"metadata.name: {len(name)} characters, more than {constants.MAX_DNS_LABEL} (shorten the name)"]
    return []


def _template_messages(field: str, template: Mapping[str, Any]) -> list[str]:
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return [f"{field}.spec: required (give the pod template a spec with a container named tensorflow)"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [f"{field}.spec.containers: required (add a container named tensorflow)"]
    schema_errors = template_schema_messages(field, template)
    if schema_errors:
        return schema_errors  # the checks below read fields whose types these say are wrong
    index = training_container_index(template)
    if index is None:
        names = [c.get("name") for c in containers if isinstance(c, Mapping)]
        return [
            f'{field}.spec.containers: no container named "tensorflow" among {names} '
            "(add one, or name the training container tensorflow)"
        ]
    messages = []
    for i, container in enumerate(containers):
        if not isinstance(container, Mapping) or not container.get("name"):
            messages.append(f"{field}.spec.containers[{i}].name: required")
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            messages.extend(_image_messages(f"{field}.spec.{key}[{i}].image", container.get("image")))
    messages.extend(_job_port_messages(f"{field}.spec.containers[{index}].ports", containers[index].get("ports")))
    return messages


def _image_messages(field: str, image: Any) -> list[str]:
    # kube-apiserver refuses a pod whose image is empty, or has leading or trailing whitespace (the CRD too).
    if not image or not str(image).strip(GO_SPACE):
        got = f", got {short_repr(image)}" if image else ""
        return [f"{field}: required (the image that runs training{got})"]
    if str(image).strip(GO_SPACE) != image:
        return [f"{field}: {short_repr(image)} must not have leading or trailing whitespace"]
    return []


def _job_port_messages(field: str, ports: Any) -> list[str]:
    """The tfjob-port is the one port TF_CONFIG names: one number, 1-65535, over TCP (TensorFlow's gRPC)."""
    messages = []
    first: int | None = None
    for i, port in enumerate(ports or []):
        if not isinstance(port, Mapping) or port.get("name") != constants.DEFAULT_PORT_NAME:
            continue
        value = port.get("containerPort")
        if not isinstance(value, int) or not 1 <= value <= 65535:
            messages.append(f"{field}: {constants.DEFAULT_PORT_NAME} containerPort must be 1-65535, got {value!r}")
        protocol = port.get("protocol", "TCP")
        if protocol != "TCP":
            messages.append(f"{field}[{i}].protocol: {constants.DEFAULT_PORT_NAME} must be TCP (TensorFlow's gRPC "
                            f"runs over it), got {short_repr(protocol)}")
        if first is not None:
            messages.append(f"{field}[{i}].name: {constants.DEFAULT_PORT_NAME} is given twice (ports[{first}] and "
                            f"ports[{i}]); keep one, the port TF_CONFIG names")
        else:
            first = i
    return messages


def parse_tfjob(obj: Mapping[str, Any]) -> TFJob:
    """Validate a TFJob manifest (ours or Kubeflow's) and return the model, status left out; raise InvalidSpec.

    The model keeps the manifest's apiVersion: pods of a `kubeflow.org/v1` job point at that job."""
    if not isinstance(obj, Mapping):
        raise InvalidSpec(["(document): a TFJob must be a YAML mapping"])
    size = limits.size_messages(obj)
    if size:
        raise InvalidSpec(size)  # before anything reads it: a huge or alias-bombed document is not expanded
    messages: list[str] = []
    api_version = obj.get("apiVersion", constants.API_VERSION)
    if api_version not in ACCEPTED_API_VERSIONS:
        messages.append(f"apiVersion: {short_repr(api_version)} is not supported (use {constants.API_VERSION})")
    if obj.get("kind", constants.KIND) != constants.KIND:
        messages.append(f"kind: {short_repr(obj.get('kind'))} is not a TFJob")
    messages.extend(_duplicate_type_messages(obj))
    # Status is the operator's own output: it is not the user's to get wrong, so it is not read here.
    body = {k: v for k, v in obj.items() if k != "status"}
    body["apiVersion"] = api_version if api_version in ACCEPTED_API_VERSIONS else constants.API_VERSION
    try:
        job = TFJob.model_validate(body)
    except ValidationError as exc:
        raise InvalidSpec(messages + _schema_messages(exc)) from None
    messages.extend(semantic_messages(job))
    if messages:
        raise InvalidSpec(messages)
    return apply_defaults(job)


def apply_defaults(job: TFJob) -> TFJob:
    """Defaults the schema cannot express: the tensorflow container gets port 2222 named tfjob-port."""
    job = job.model_copy(deep=True)
    for _, spec in job.replica_specs():
        index = training_container_index(spec.template)
        if index is None:
            continue
        container = spec.template["spec"]["containers"][index]
        ports = container.setdefault("ports", [])
        if not any(p.get("name") == constants.DEFAULT_PORT_NAME for p in ports):
            ports.append({"name": constants.DEFAULT_PORT_NAME, "containerPort": constants.DEFAULT_PORT})
    return job


def job_port(template: Mapping[str, Any]) -> int:
    """The tfjob-port of a replica type's training container (2222 when absent)."""
    index = training_container_index(template)
    if index is not None:
        for port in template["spec"]["containers"][index].get("ports") or []:
            if port.get("name") == constants.DEFAULT_PORT_NAME:
                return int(port["containerPort"])
    return constants.DEFAULT_PORT
