"""Volcano backend: a PodGroup ``scheduling.volcano.sh/v1beta1`` and pods scheduled by Volcano.

Pods are created only after Volcano moves the PodGroup out of ``Pending`` (enqueued: the queue has room
for minResources), so a job that cannot start holds no pods at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.gang import base

API_VERSION = "scheduling.volcano.sh/v1beta1"
#: Pod annotation naming the pod's PodGroup (read by Volcano).
ANNOTATION_GROUP_NAME = "scheduling.k8s.io/group-name"
#: Pod annotation naming the task (replica type) inside the Volcano job.
ANNOTATION_TASK_SPEC = "volcano.sh/task-spec"
#: PodGroup phases in which pods may be created.
ADMITTED_PHASES = ("Inqueue", "Running", "Completed", "Unknown")


class VolcanoBackend(base.GangBackend, base.CreatesGroups):
    name = "volcano"
    default_scheduler = "volcano"

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        out = self.scheduled_copy(job, pod)
        out["metadata"]["annotations"][ANNOTATION_GROUP_NAME] = base.group_name(job)
        rtype = out["metadata"]["labels"].get(constants.LABEL_REPLICA_TYPE)
        if rtype:
            out["metadata"]["annotations"][ANNOTATION_TASK_SPEC] = rtype
        return out

    def group_objects(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        spec: dict[str, Any] = {"minMember": base.min_member(job, pods)}
        min_resources = base.min_resources(job, pods)
        if min_resources:
            spec["minResources"] = min_resources
        policy = job.spec.runPolicy.schedulingPolicy
        if policy is not None and policy.queue:
            spec["queue"] = policy.queue
        if base.priority_class(job):
            spec["priorityClassName"] = base.priority_class(job)
        return [base.podgroup(API_VERSION, job, self.options, spec)]

    def ready_to_create_pods(self, job: TFJob, groups_observed: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        group = base.observed_group(job, groups_observed)
        name = base.group_name(job)
        if group is None:
            return False, f"waiting for PodGroup {name} to be created"
        status = group.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase in ADMITTED_PHASES:
            return True, ""
        why = f"Volcano has not enqueued PodGroup {name} (phase {phase})"
        details = [c.get("message") for c in status.get("conditions") or [] if c.get("message")]
        return False, why + (f": {details[-1]}" if details else "")
