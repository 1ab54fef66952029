"""What reconcile needs beside the job and its pods: cluster settings and what the gang backend says."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api import TFJob, apigroups
from tfjob_operator.reconcile.render import Rendered


def _identity(job: TFJob, pod: dict[str, Any]) -> dict[str, Any]:
    return pod


@dataclass(frozen=True)
class GangView:
    """What the gang backend says about this job (the seam for gang scheduling; `none` allows everything)."""

    #: Adds the backend's gates, labels, annotations, schedulerName to a rendered pod. Must be pure.
    decorate_pod: Callable[[TFJob, dict[str, Any]], dict[str, Any]] = _identity
    #: Objects the backend needs before the pods (e.g. a PodGroup), from the rendered pods. Must be pure.
    group_objects: Callable[[TFJob, list[dict[str, Any]]], list[dict[str, Any]]] = lambda job, pods: []
    #: May the pods be created now? (Volcano: only once the PodGroup left Pending.)
    ready_to_create_pods: bool = True
    #: Group objects the backend needs that were not found (created even while pods may not be yet).
    missing_groups: tuple[dict[str, Any], ...] = ()
    #: While pods may not be created: look again after this many seconds (group objects are not watched).
    recheck_after: float | None = None
    #: Why the gang waits, shown on the Queued condition; None when it does not wait.
    queued_reason: str | None = None
    #: Why the job cannot run under its backend (unknown backend name, missing queue ...): fails it as InvalidSpec.
    problems: tuple[str, ...] = ()
    #: Elastic jobs: the widest Worker width in [minReplicas, maxReplicas] whose gang fits now, counting what this
    #: job's own pods hold as its own (so a running gang can see room to widen). None: unknown (the backend
    #: cannot say, the job is not elastic, or not even min fits): the width is kept.
    fits_workers: int | None = None
    #: Nodes marked for removal (taints in `observe.NODE_REMOVAL_TAINTS`): an elastic gang on one restarts, narrower
    #: if need be, before the node goes. Pods cannot see their node's taints; the backend that reads nodes can.
    leaving_nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReconcileOptions:
    """The operator's settings and what the controller found out for this reconcile."""

    cluster_domain: str | None = None
    #: Loopback addressing: pod name → port. Must hold every pod name of the job when set.
    loopback_ports: Mapping[str, int] | None = None
    #: Seconds past a pod's deletion deadline after which it is force-deleted.
    terminating_timeout: float = 60.0
    #: The cluster's node-monitor-grace-period (TFJOB_NODE_MONITOR_GRACE): when a lost node is found lost.
    node_monitor_grace: float = 50.0
    gang: GangView = GangView()
    #: The API server refused to create a pod for a reason retrying cannot fix (e.g. 422): fails the job.
    pod_create_error: str | None = None
    #: The authorizer refused one of the operator's requests for this job (`kube.not_authorized`): the job waits.
    not_authorized: str | None = None
    #: Which `kubeflow.org/v1` jobs are ours (TFJOB_KUBEFLOW_API); `tfjob.dev/v1` jobs are ours unless another
    #: controller manages them.
    kubeflow_api: apigroups.KubeflowApi = apigroups.KubeflowApi.OFF
    #: The job as its gang runs (:func:`effective_job`) rendered for the current attempt with the options above:
    #: the controller renders once and shares it with the gang view. None: reconcile renders it when needed.
    rendered: Rendered | None = None
    #: Pods deleted with a cause on them, as last seen (`PodIndex.last_words`): name → body. A gang pod missing
    #: from the current attempt restarts the gang with the cause it carried, not as PodDeleted.
    departed: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
