"""scheduler-plugins backend: a PodGroup ``scheduling.x-k8s.io/v1alpha1`` for the Coscheduling plugin.

The secondary scheduler (``schedulerName`` from the operator options) holds every pod of the group at
Permit until minMember pods can be bound, and gives up after scheduleTimeoutSeconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfjob_operator.api import TFJob
from tfjob_operator.gang import base

API_VERSION = "scheduling.x-k8s.io/v1alpha1"
#: Pod label naming the pod's PodGroup (read by the Coscheduling plugin).
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"


class SchedulerPluginsBackend(base.GangBackend, base.CreatesGroups, base.ReportsWaits):
    name = "scheduler-plugins"
    default_scheduler = "scheduler-plugins-scheduler"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = self.scheduled_copy(job, pod)
        out["metadata"]["labels"][LABEL_POD_GROUP] = base.group_name(job)
        return out

    def group_objects(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        spec: dict[str, Any] = {
            "minMember": base.min_member(job, pods),
            "scheduleTimeoutSeconds": base.schedule_timeout_seconds(job, self.options),
        }
        min_resources = base.min_resources(job, pods)
        if min_resources:
            spec["minResources"] = min_resources
        return [base.podgroup(API_VERSION, job, self.options, spec)]

    def ready_to_create_pods(self, job: TFJob, groups_observed: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        # The plugin rejects pods whose PodGroup it cannot find, so the group must exist first.
        if base.observed_group(job, groups_observed) is None:
            return False, f"waiting for PodGroup {base.group_name(job)} to be created"
        return True, ""

    def queued_reason(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> str | None:
        waiting = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
        if not pods or not waiting:
            return None
        return (
            f"{len(waiting)} of {len(pods)} pods waiting for the Coscheduling plugin "
            f"(PodGroup {base.group_name(job)}, scheduler {self.scheduler_name})"
        )
