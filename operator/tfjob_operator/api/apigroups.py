"""The two TFJob APIs the operator serves, and which of their jobs are its own. Pure: no I/O.

`tfjob.dev/v1` is ours. `kubeflow.org/v1` is Kubeflow's TFJob, served too when `TFJOB_KUBEFLOW_API` is
`managed` or `all`, so Kubeflow's manifests, scripts and SDK keep working once its training-operator is gone.
Both go through the same pure core (`validation`, `render`, `reconcile`); the group only changes the owner
reference and labels of the pods, who manages a job (`runPolicy.managedBy`), and which status fields are
stored: Kubeflow's CRD prunes anything outside its schema, so for `kubeflow.org/v1` the gang counters live in
annotations instead (`status_for_group`, `counters_from_annotations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from tfjob_operator.api import constants

if TYPE_CHECKING:
    from tfjob_operator.api import TFJob


class KubeflowApi(StrEnum):
    """Whether the operator serves `kubeflow.org/v1` TFJobs (setting `TFJOB_KUBEFLOW_API`)."""

    #: Only `tfjob.dev/v1`.
    OFF = "off"
    #: Also `kubeflow.org/v1` jobs whose `runPolicy.managedBy` is `tfjob.dev/tfjob-operator` (Kubeflow's
    #: controller may still run beside us: it skips them).
    MANAGED = "managed"
    #: Also `kubeflow.org/v1` jobs with no managedBy or Kubeflow's own value (Kubeflow's controller is gone).
    ALL = "all"


@dataclass(frozen=True)
class ApiGroup:
    """One served TFJob API: group, version, plural, and whether it is Kubeflow's."""

    group: str
    version: str
    plural: str
    kubeflow: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


TFJOB_DEV: Final = ApiGroup(constants.GROUP, constants.VERSION, constants.PLURAL, kubeflow=False)
KUBEFLOW: Final = ApiGroup("kubeflow.org", "v1", "tfjobs", kubeflow=True)

#: `runPolicy.managedBy` values: this operator, Kubeflow's training-operator, MultiKueue.
MANAGED_BY_TFJOB: Final = "tfjob.dev/tfjob-operator"
MANAGED_BY_KUBEFLOW: Final = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
KNOWN_MANAGERS: Final = (MANAGED_BY_TFJOB, MANAGED_BY_KUBEFLOW, MANAGED_BY_MULTIKUEUE)

#: Labels Kubeflow's controller puts on its pods; its SDK finds a job's pods by them (`get_job_pod_names`,
#: `get_job_logs`), so `kubeflow.org/v1` jobs' pods carry them too.
KUBEFLOW_LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
KUBEFLOW_LABEL_OPERATOR: Final = "training.kubeflow.org/operator-name"
KUBEFLOW_LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
KUBEFLOW_LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
KUBEFLOW_LABEL_JOB_ROLE: Final = "training.kubeflow.org/job-role"
#: Kubeflow marks the deciding pod (chief, or worker 0 without one) `job-role: master`.
KUBEFLOW_ROLE_MASTER: Final = "master"
KUBEFLOW_OPERATOR_NAME: Final = "tfjob-controller"

#: Annotations holding the gang counters of a `kubeflow.org/v1` job (its CRD has no status field for them):
#: the current attempt (restartCount) and the restarts that count towards backoffLimit.
ANNOTATION_RESTART_COUNT: Final = f"{constants.GROUP}/restart-count"
ANNOTATION_FAILURE_RESTARTS: Final = f"{constants.GROUP}/failure-restarts"

#: Status fields Kubeflow's TFJob CRD keeps (everything else is pruned by the API server).
KUBEFLOW_STATUS_FIELDS: Final = ("conditions", "replicaStatuses", "startTime", "completionTime", "lastReconcileTime")
KUBEFLOW_REPLICA_STATUS_FIELDS: Final = ("active", "succeeded", "failed")


def group_of(obj: Mapping[str, Any]) -> ApiGroup:
    """The API a stored job belongs to, from its apiVersion (ours when absent, as in a manifest)."""
    return KUBEFLOW if obj.get("apiVersion") == KUBEFLOW.api_version else TFJOB_DEV


def served_groups(setting: KubeflowApi) -> tuple[ApiGroup, ...]:
    """The TFJob APIs the operator watches under this setting."""
    return (TFJOB_DEV,) if setting == KubeflowApi.OFF else (TFJOB_DEV, KUBEFLOW)


def manager_of(obj: Mapping[str, Any]) -> str:
    """`spec.runPolicy.managedBy` as written ("" when absent or not a string)."""
    run_policy = (obj.get("spec") or {}).get("runPolicy") if isinstance(obj.get("spec"), Mapping) else None
    value = run_policy.get("managedBy") if isinstance(run_policy, Mapping) else None
    return value.strip() if isinstance(value, str) else ""


def managed_here(group: ApiGroup, managed_by: str, setting: KubeflowApi) -> bool:
    """Is a job of this API with this managedBy ours to reconcile? Others' jobs (MultiKueue ...) never are.

    `tfjob.dev/v1`: empty, ours, or Kubeflow's value (read as ours: a manifest ported by changing apiVersion
    keeps it), and unknown values too, so the operator can refuse them as InvalidSpec.
    `kubeflow.org/v1`: ours under `managed` and `all`; empty and Kubeflow's value only under `all` (Kubeflow's
    controller is gone); unknown values only under `all`, to refuse them (Kubeflow's webhook would).
    """
    if managed_by == MANAGED_BY_MULTIKUEUE:
        return False
    if not group.kubeflow:
        return True
    if setting == KubeflowApi.OFF:
        return False
    if managed_by == MANAGED_BY_TFJOB:
        return True
    return setting == KubeflowApi.ALL


def managed_by_message(managed_by: str) -> str | None:
    """Why a managedBy value is refused (CLI, webhook and operator say the same); None when it is known."""
    if not managed_by or managed_by in KNOWN_MANAGERS:
        return None
    choices = ", ".join(repr(m) for m in KNOWN_MANAGERS)
    return (f"spec.runPolicy.managedBy: {managed_by!r} is not a controller this operator knows (use one of "
            f"{choices}, or leave it empty for this operator)")


def reads_kubeflow_manager_as_ours(group: ApiGroup, managed_by: str) -> bool:
    """A `tfjob.dev/v1` job naming Kubeflow's controller: managed here, and an Event says so."""
    return not group.kubeflow and managed_by == MANAGED_BY_KUBEFLOW


# ---------------------------------------------------------------- status and counters


def selector(job_name: str, replica_type: str) -> str:
    """The label selector of one replica type's pods, as Kubeflow reports it in replicaStatuses."""
    return f"{constants.LABEL_JOB_NAME}={job_name},{constants.LABEL_REPLICA_TYPE}={replica_type.lower()}"


def status_for_group(group: ApiGroup, job_name: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The status as stored for this API: whole for ours; within Kubeflow's schema for `kubeflow.org/v1`."""
    if not group.kubeflow:
        return dict(status)
    out: dict[str, Any] = {k: status[k] for k in KUBEFLOW_STATUS_FIELDS if status.get(k) is not None}
    out["conditions"] = list(status.get("conditions") or [])
    out["replicaStatuses"] = {
        rtype: {**{k: counts.get(k, 0) for k in KUBEFLOW_REPLICA_STATUS_FIELDS},
                "selector": selector(job_name, rtype),
                "labelSelector": {"matchLabels": {constants.LABEL_JOB_NAME: job_name,
                                                  constants.LABEL_REPLICA_TYPE: rtype.lower()}}}
        for rtype, counts in (status.get("replicaStatuses") or {}).items()
    }
    return out


def replica_counts(stored: Any) -> dict[str, Any]:
    """Kubeflow-shaped replicaStatuses read back as ours: the counts, without Kubeflow's selectors."""
    if not isinstance(stored, Mapping):
        return {}
    return {rtype: {k: v for k, v in counts.items() if k in (*KUBEFLOW_REPLICA_STATUS_FIELDS, "ready")}
            for rtype, counts in stored.items() if isinstance(counts, Mapping)}


def counters_from_annotations(annotations: Mapping[str, str]) -> dict[str, int]:
    """restartCount and failureRestarts of a `kubeflow.org/v1` job, from its annotations (0 when unreadable)."""
    out = {}
    for field, key in (("restartCount", ANNOTATION_RESTART_COUNT), ("failureRestarts", ANNOTATION_FAILURE_RESTARTS)):
        try:
            out[field] = max(int(annotations.get(key, "0")), 0)
        except ValueError:
            out[field] = 0
    return out


def counter_annotations(restart_count: int, failure_restarts: int) -> dict[str, str | None]:
    """The annotations that hold a `kubeflow.org/v1` job's gang counters."""
    return {ANNOTATION_RESTART_COUNT: str(restart_count), ANNOTATION_FAILURE_RESTARTS: str(failure_restarts)}


def owner_reference(job: TFJob) -> dict[str, Any]:
    """Controller reference to the TFJob (of its own API group), so Kubernetes garbage-collects the object with it."""
    return {
        "apiVersion": job.apiVersion,
        "kind": constants.KIND,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
