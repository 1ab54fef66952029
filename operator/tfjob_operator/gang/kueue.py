"""Kueue backend: the job's pods form a Kueue plain pod group, admitted as one Workload.

Every pod carries the LocalQueue label, the group name, the group's total count and that the group is never
retried in place (each attempt is a group of its own); Kueue's webhook gates
them (``kueue.x-k8s.io/admission``) until the Workload is admitted. If Kueue preempts the workload it
deletes the pods, and the operator recreates the gang as its next attempt (a new group name, queued again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.gang import base

#: Pod label: the LocalQueue the workload is submitted to.
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
#: Pod label: the pod group (one Workload) the pod belongs to.
LABEL_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
#: Pod annotation: how many pods the group has in total.
ANNOTATION_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
#: Pod annotation: "false" says the group's pods are never replaced within it, so Kueue ends the group (its
#: Workload Finished, its finalizer off the pods) once none of them runs. Each gang attempt is a group of its own
#: whose pods keep their names: without it, Kueue 0.17 kept a preempted group's Workload waiting for replacement
#: pods and its finalizer on the old pods, whose names the next attempt needs (tests/upstream/test_kueue.py).
ANNOTATION_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
#: The scheduling gate Kueue puts on pods until their Workload is admitted.
ADMISSION_GATE = "kueue.x-k8s.io/admission"


def kueue_group_name(job: TFJob, attempt: str) -> str:
    """`<job>-<attempt>` (a label value, ≤ 63 characters): each gang attempt is a new Workload."""
    name = f"{job.name}-{attempt}"
    if len(name) <= constants.MAX_DNS_LABEL:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: constants.MAX_DNS_LABEL - 9].rstrip('-.')}-{digest}"


class KueueBackend(base.GangBackend, base.ChecksJobs, base.ReportsWaits):
    name = "kueue"

    def validate(self, job: TFJob) -> list[str]:
        policy = job.spec.runPolicy.schedulingPolicy
        if policy is None or not policy.queue:
            return [
                "spec.runPolicy.schedulingPolicy.queue: required by the kueue gang backend "
                "(set it to the name of a LocalQueue in the job's namespace)"
            ]
        return []

    def decorate_pod(self, job: TFJob, pod: Mapping[str, Any]) -> dict[str, Any]:
        problems = self.validate(job)
        if problems:
            raise base.GangBackendError(problems[0])
        policy = job.spec.runPolicy.schedulingPolicy
        assert policy is not None and policy.queue  # validate() checked it
        out = self.scheduled_copy(job, pod)
        labels = out["metadata"]["labels"]
        labels[LABEL_QUEUE_NAME] = policy.queue
        labels[LABEL_POD_GROUP_NAME] = kueue_group_name(job, labels.get(constants.LABEL_ATTEMPT, "0"))
        out["metadata"]["annotations"][ANNOTATION_POD_GROUP_TOTAL_COUNT] = str(job.total_replicas())
        out["metadata"]["annotations"][ANNOTATION_RETRIABLE_IN_GROUP] = "false"
        return out

    def queued_reason(self, job: TFJob, pods: Sequence[Mapping[str, Any]]) -> str | None:
        gated = [
            p
            for p in pods
            if any(g.get("name") == ADMISSION_GATE for g in (p.get("spec") or {}).get("schedulingGates") or [])
        ]
        if not gated:
            return None
        policy = job.spec.runPolicy.schedulingPolicy
        queue = policy.queue if policy is not None else None
        return f"waiting for Kueue to admit the workload (LocalQueue {queue}; {len(gated)} of {len(pods)} pods gated)"
