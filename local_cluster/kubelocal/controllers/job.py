"""The Job controller: runs pods from the template until `completions` succeed or more than
`backoffLimit` fail, then sets the `Complete` or `Failed` condition (what `kubectl wait` and Helm
hooks wait for). Pods are labelled as kube does (`batch.kubernetes.io/job-name`, `controller-uid`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from kubelocal import times
from kubelocal.kubeclient import KubeClient

from .pods import Expectations, is_active, is_ready, owned_pods, pod_from_template
from .runtime import Controller, ignore_missing

JOB_PATH = "/apis/batch/v1/jobs"


@dataclass(frozen=True)
class JobCounts:
    active: int
    succeeded: int
    failed: int


@dataclass(frozen=True)
class JobDecision:
    """What the controller does next: start `create` pods, or finish with a condition."""

    create: int = 0
    finished: tuple[str, str, str] | None = None  # (condition type, reason, message)


def decide(spec: Mapping[str, Any], counts: JobCounts) -> JobDecision:
    """The Job's rules over its pod counts (parallelism, completions, backoffLimit)."""
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    backoff_limit = int(spec.get("backoffLimit", 6))
    if counts.failed > backoff_limit:
        return JobDecision(finished=("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    if completions is None:
        # work-queue style: done once any pod succeeded and none is still running
        if counts.succeeded and not counts.active:
            return JobDecision(finished=("Complete", "CompletionsReached", "Reached expected number of succeeded pods"))
        return JobDecision(create=0 if counts.succeeded else max(parallelism - counts.active, 0))
    if counts.succeeded >= int(completions):
        return JobDecision(finished=("Complete", "CompletionsReached", "Reached expected number of succeeded pods"))
    wanted = min(parallelism, int(completions) - counts.succeeded)
    return JobDecision(create=max(wanted - counts.active, 0))


def finished_condition(job: Mapping[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


class JobController(Controller):
    name = "job-controller"

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.jobs = self.watch(JOB_PATH, self._on_job)
        self.pods = self.watch("/api/v1/pods", self.enqueue_controller("Job"))
        self.expectations = Expectations()

    def _on_job(self, kind: str, job: dict[str, Any]) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if kind == "DELETED":
            self.expectations.forget(key)
        self.queue.add(key)

    async def started(self) -> None:
        self.enqueue_all(self.jobs)

    async def sync(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        ns, name = key
        job = self.jobs.cache.get((ns, name))
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        uid = job["metadata"]["uid"]
        pods = owned_pods(self.pods.cache.values(), uid)
        unseen, _ = self.expectations.settle(key, pods)
        active = [p for p in pods if is_active(p)]
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        counts = JobCounts(len(active) + unseen, phases.count("Succeeded"), phases.count("Failed"))
        base = f"/api/v1/namespaces/{ns}/pods"
        done = finished_condition(job)
        decision = JobDecision() if done else decide(job.get("spec") or {}, counts)
        if done or decision.finished:
            for pod in active:
                await ignore_missing(self.client.delete(f"{base}/{pod['metadata']['name']}"))
        else:
            labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                      "controller-uid": uid, "job-name": name}
            for _ in range(decision.create):
                created = await self.client.post(base, pod_from_template(job["spec"]["template"], job, labels=labels))
                self.expectations.created(key, created["metadata"]["name"])
        await self._write_status(job, counts, sum(1 for p in active if is_ready(p)), decision)

    async def _write_status(self, job: dict[str, Any], counts: JobCounts, ready: int, decision: JobDecision) -> None:
        old = job.get("status") or {}
        now = times.format_time()
        status: dict[str, Any] = {"startTime": old.get("startTime") or now, "active": counts.active,
                                  "succeeded": counts.succeeded, "failed": counts.failed, "ready": ready}
        conditions = list(old.get("conditions") or [])
        if decision.finished and not finished_condition(job):
            ctype, reason, message = decision.finished
            conditions.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                               "lastProbeTime": now, "lastTransitionTime": now})
            if ctype == "Complete":
                status["completionTime"] = now
            status["active"] = 0
        if conditions:
            status["conditions"] = conditions
        if all(old.get(k) == v for k, v in status.items()):
            return
        meta = job["metadata"]
        await ignore_missing(self.client.patch(
            f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status", {"status": status}))
