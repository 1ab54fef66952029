"""TFJob → the objects that run it: one headless Service and one Pod per replica. Pure: no I/O.

docs/design.md §4 is the specification: names `<job>-<type>-<i>`, labels, owner reference, hostname/subdomain so
each peer's DNS name exists as soon as it has an IP, and TF_CONFIG in the training container.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api import ReplicaType, RestartPolicy, TFJob, apigroups, constants
from tfjob_operator.api.validation import job_port, training_container_index

LOOPBACK_HOST = "127.0.0.1"


@dataclass(frozen=True)
class RenderOptions:
    """How to address peers and which gang attempt the pods belong to."""

    attempt: int = 0
    #: Cluster DNS domain appended to `<ns>.svc` (e.g. "cluster.local"); None keeps the short form.
    cluster_domain: str | None = None
    #: Local mode: pod name → loopback port. When set, TF_CONFIG addresses are 127.0.0.1:<port>.
    loopback_ports: Mapping[str, int] | None = None


@dataclass
class Rendered:
    service: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)

    def objects(self) -> list[dict[str, Any]]:
        return [self.service, *self.pods]


def pod_name(job_name: str, rtype: ReplicaType, index: int) -> str:
    return f"{job_name}-{rtype.tf_name}-{index}"


def pod_names(job: TFJob) -> list[str]:
    """Every pod name of the job, in TF_CONFIG order."""
    return [pod_name(job.name, rtype, i) for rtype, spec in job.replica_specs() for i in range(spec.replicas)]


def chief_pod_name(job: TFJob) -> str:
    """The pod whose success decides the job: the chief, or worker 0 when there is no chief."""
    rtype = ReplicaType.CHIEF if job.has_chief() else ReplicaType.WORKER
    return pod_name(job.name, rtype, 0)


def selector_labels(job: TFJob) -> dict[str, str]:
    return {constants.LABEL_JOB_NAME: job.name}


def peer_address(job: TFJob, rtype: ReplicaType, index: int, options: RenderOptions) -> str:
    name = pod_name(job.name, rtype, index)
    if options.loopback_ports is not None:
        return f"{LOOPBACK_HOST}:{options.loopback_ports[name]}"
    port = job_port(job.spec.tfReplicaSpecs[rtype].template)
    host = f"{name}.{job.name}.{job.namespace}.svc"
    if options.cluster_domain:
        host += f".{options.cluster_domain}"
    return f"{host}:{port}"


def tf_config(job: TFJob, rtype: ReplicaType, index: int, options: RenderOptions) -> dict[str, Any]:
    """The TF_CONFIG a pod receives: every peer by type, its own task, environment "cloud". Under
    enableDynamicWorker the sparse form Kubeflow renders (under the key `cluster` since its PR #1798; no
    environment): a worker sees every PS and itself as {"<index>": address}, a PS itself only, so workers come and
    go without the others' TF_CONFIG changing. A chief or evaluator sees every PS and itself (Kubeflow gives it
    neither, so it fails at start: its issue #1763)."""
    if job.spec.enableDynamicWorker:
        return {"cluster": _sparse_cluster(job, rtype, index, options), "task": {"type": rtype.tf_name, "index": index}}
    cluster = {
        t.tf_name: [peer_address(job, t, i, options) for i in range(spec.replicas)]
        for t, spec in job.replica_specs()
        if spec.replicas > 0
    }
    return {"cluster": cluster, "task": {"type": rtype.tf_name, "index": index}, "environment": "cloud"}


def _sparse_cluster(job: TFJob, rtype: ReplicaType, index: int, options: RenderOptions) -> dict[str, Any]:
    specs = job.spec.tfReplicaSpecs
    every_ps = [peer_address(job, ReplicaType.PS, i, options)
                for i in range(specs[ReplicaType.PS].replicas if ReplicaType.PS in specs else 0)]  # type: ignore[comparison-overlap]
    own = peer_address(job, rtype, index, options)
    if rtype == ReplicaType.PS:
        return {"worker": {}, "ps": [own]}
    if rtype == ReplicaType.WORKER:
        return {"worker": {str(index): own}, "ps": every_ps}
    return {"worker": {}, "ps": every_ps, rtype.tf_name: [own]}


def render_service(job: TFJob) -> dict[str, Any]:
    ports = sorted({job_port(spec.template) for _, spec in job.replica_specs()})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": selector_labels(job),
            "ownerReferences": [apigroups.owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(job),
            "ports": [
                {"name": constants.DEFAULT_PORT_NAME if i == 0 else f"{constants.DEFAULT_PORT_NAME}-{i}",
                 "port": p, "targetPort": p, "protocol": "TCP"}
                for i, p in enumerate(ports)
            ],
        },
    }


def _pod_restart_policy(policy: str) -> str:
    # ExitCode is decided by the operator from the exit code, so the kubelet must not restart in place.
    return "Never" if policy == RestartPolicy.EXIT_CODE else str(RestartPolicy(policy).value)


def _set_env(container: dict[str, Any], values: Mapping[str, str]) -> None:
    env = [e for e in container.get("env") or [] if e.get("name") not in values]
    env.extend({"name": k, "value": v} for k, v in values.items())
    container["env"] = env


def kubeflow_labels(job: TFJob, rtype: ReplicaType, index: int) -> dict[str, str]:
    """The labels Kubeflow's controller puts on a pod (its SDK selects a job's pods by them)."""
    labels = {
        apigroups.KUBEFLOW_LABEL_JOB_NAME: job.name,
        apigroups.KUBEFLOW_LABEL_OPERATOR: apigroups.KUBEFLOW_OPERATOR_NAME,
        apigroups.KUBEFLOW_LABEL_REPLICA_TYPE: rtype.tf_name,
        apigroups.KUBEFLOW_LABEL_REPLICA_INDEX: str(index),
    }
    if pod_name(job.name, rtype, index) == chief_pod_name(job):
        labels[apigroups.KUBEFLOW_LABEL_JOB_ROLE] = apigroups.KUBEFLOW_ROLE_MASTER
    return labels


def metrics_port(job: TFJob, name: str, template: Mapping[str, Any], container_index: int,
                 options: RenderOptions) -> int:
    """The training container's metrics port: its own loopback port in local mode, else the declared
    `tfjob-metrics` port, else DEFAULT_METRICS_PORT."""
    if options.loopback_ports is not None:
        return options.loopback_ports.get(name + constants.LOOPBACK_METRICS_SUFFIX, 0)
    container = ((template.get("spec") or {}).get("containers") or [])[container_index]
    for port in container.get("ports") or []:
        if port.get("name") == constants.METRICS_PORT_NAME and isinstance(port.get("containerPort"), int):
            return int(port["containerPort"])
    return constants.DEFAULT_METRICS_PORT


def _declare_metrics_port(container: dict[str, Any], port: int) -> None:
    ports = [p for p in container.get("ports") or [] if p.get("name") != constants.METRICS_PORT_NAME]
    ports.append({"name": constants.METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"})
    container["ports"] = ports


def render_pod(job: TFJob, rtype: ReplicaType, index: int, options: RenderOptions) -> dict[str, Any]:
    spec = job.spec.tfReplicaSpecs[rtype]
    template = copy.deepcopy(spec.template)
    meta = template.get("metadata") or {}
    name = pod_name(job.name, rtype, index)
    labels = {
        **(meta.get("labels") or {}),
        constants.LABEL_JOB_NAME: job.name,
        constants.LABEL_REPLICA_TYPE: rtype.tf_name,
        constants.LABEL_REPLICA_INDEX: str(index),
        constants.LABEL_ATTEMPT: str(options.attempt),
    }
    if name == chief_pod_name(job):
        labels[constants.LABEL_JOB_ROLE] = constants.ROLE_CHIEF
    if apigroups.group_of({"apiVersion": job.apiVersion}).kubeflow:
        labels.update(kubeflow_labels(job, rtype, index))
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [apigroups.owner_reference(job)],
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    pod_spec = template.get("spec") or {}
    pod_spec["hostname"] = name
    pod_spec["subdomain"] = job.name
    pod_spec["restartPolicy"] = _pod_restart_policy(spec.restartPolicy)
    if job.spec.elasticPolicy is not None and rtype in (ReplicaType.CHIEF, ReplicaType.WORKER):
        _tolerate_node_loss(pod_spec)
    container_index = training_container_index(template)
    if container_index is not None:
        env = {constants.ENV_JOB_NAME: job.name, constants.ENV_ATTEMPT: str(options.attempt)}
        if job.total_replicas() > 1:
            env = {constants.ENV_TF_CONFIG: json.dumps(tf_config(job, rtype, index, options)), **env}
        container = pod_spec["containers"][container_index]
        port = metrics_port(job, name, template, container_index, options)
        if port:  # the worker runtime serves /metrics there (a PodMonitor scrapes it, the operator reads progress)
            env[constants.ENV_WORKER_METRICS_PORT] = str(port)
            _declare_metrics_port(container, port)
        if job.spec.runPolicy.stallTimeoutSeconds:
            env[constants.ENV_STALL_TIMEOUT] = str(job.spec.runPolicy.stallTimeoutSeconds)
        env.update(_elastic_env(job))
        grace = pod_spec.get("terminationGracePeriodSeconds")
        env[constants.ENV_TERMINATION_GRACE_SECONDS] = str(
            grace if isinstance(grace, int) else constants.KUBE_DEFAULT_TERMINATION_GRACE_SECONDS)
        env[constants.ENV_TERMINATION_MESSAGE_PATH] = container.get("terminationMessagePath") or "/dev/termination-log"
        _set_env(container, env)
        # A failed run's log tail becomes its termination message, so the job's Failed condition can say why.
        container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _tolerate_node_loss(pod_spec: dict[str, Any]) -> None:
    """An elastic gang pod is evicted as soon as its node is found lost (constants.NODE_UNREACHABLE_TAINT), so the
    gang shrinks then, not 300 s later; a toleration of that taint in the template is kept as written."""
    tolerations = pod_spec.get("tolerations") or []
    if any(t.get("effect") in (None, "", "NoExecute") and (t.get("key") == constants.NODE_UNREACHABLE_TAINT
                                                            or (not t.get("key") and t.get("operator") == "Exists"))
           for t in tolerations):
        return
    pod_spec["tolerations"] = [*tolerations, {"key": constants.NODE_UNREACHABLE_TAINT, "operator": "Exists",
                                              "effect": "NoExecute",
                                              "tolerationSeconds": constants.NODE_LOSS_TOLERATION_SECONDS}]


def _elastic_env(job: TFJob) -> dict[str, str]:
    """An elastic job's scaling policy, the width its batch and learning rate were written for (the training
    processes, chief + workers, it started with: its Worker.replicas as the status records, the spec's before it
    started), and the narrowest and widest widths it may run at. The worker runtime reads them
    (tfjob_worker.scaling) and checks every width at start."""
    policy = job.spec.elasticPolicy
    if policy is None:
        return {}
    recorded = job.status.elastic.baseReplicas if job.status and job.status.elastic else None
    specs = job.spec.tfReplicaSpecs
    base = recorded or (specs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in specs else 0)  # type: ignore[comparison-overlap]
    chief = 1 if job.has_chief() else 0
    return {constants.ENV_ELASTIC_SCALING: policy.scaling.value,
            constants.ENV_ELASTIC_REFERENCE_WORKERS: str(base + chief),
            constants.ENV_ELASTIC_MIN_WORKERS: str(policy.minReplicas + chief),
            constants.ENV_ELASTIC_MAX_WORKERS: str(policy.maxReplicas + chief)}


def render(job: TFJob, options: RenderOptions | None = None) -> Rendered:
    """Every object the job needs, Service first, pods in TF_CONFIG order."""
    options = options or RenderOptions()
    pods = [
        render_pod(job, rtype, i, options) for rtype, spec in job.replica_specs() for i in range(spec.replicas)
    ]
    return Rendered(service=render_service(job), pods=pods)
