"""The chaos tier's record and invariants: every pod and TFJob event the API server emits, and the properties
that must hold over all of them whatever was broken meanwhile.

The record is the API server's own event stream (a store listener: what feeds every watch), not a watch of
ours: the faults under test drop and expire watches, and the record must not have holes. The invariants are
pure functions over that record, so a failure names the job, pod and attempt.

Seeded: TFJOB_CHAOS_SEED (default 15) picks the moments and faults; TFJOB_CHAOS_SCALE (default 1) multiplies
kills, faults and jobs for longer runs (CI runs scale 1, about 3 minutes for the whole tier).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch
from operator_harness import Cluster

from tfjob_operator.api import constants

SEED = int(os.environ.get("TFJOB_CHAOS_SEED", "15"))
SCALE = float(os.environ.get("TFJOB_CHAOS_SCALE", "1"))
FINISHED = ("Succeeded", "Failed")


def scaled(n: int) -> int:
    return max(1, round(n * SCALE))


@dataclass(frozen=True)
class Seen:
    """One event as the API server emitted it (stored objects are never mutated, so no copy is needed)."""

    at: float  # time.monotonic()
    resource: str  # "pods" or "tfjobs"
    type: str  # ADDED, MODIFIED, DELETED
    obj: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def labels(self) -> Mapping[str, str]:
        return self.obj["metadata"].get("labels") or {}


@dataclass
class Record:
    """Every pod and TFJob event since `record` began, and when each fault was injected."""

    events: list[Seen] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seen: Seen) -> None:
        with self._lock:
            self.events.append(seen)

    def fault(self, what: str) -> None:
        with self._lock:
            self.faults.append((time.monotonic(), what))

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.events)

    def jobs(self) -> dict[str, Mapping[str, Any] | None]:
        """Each job's latest object (None once deleted)."""
        latest: dict[str, Mapping[str, Any] | None] = {}
        for e in self.snapshot():
            if e.resource == "tfjobs":
                latest[e.name] = None if e.type == "DELETED" else e.obj
        return latest

    def pods(self) -> dict[str, Mapping[str, Any]]:
        """Pods that exist now, by name."""
        live: dict[str, Mapping[str, Any]] = {}
        for e in self.snapshot():
            if e.resource == "pods":
                if e.type == "DELETED":
                    live.pop(e.name, None)
                else:
                    live[e.name] = e.obj
        return live


@contextmanager
def record(cluster: Cluster) -> Iterator[Record]:
    """Record every pod and TFJob event of the cluster's API server while the block runs: kubelocal's store
    listener, or on the upstream plane a watch of each from the resourceVersion of a list (kube-apiserver's watch
    cache is what feeds every watch there; these tests inject no API faults on that plane, so no watch of ours
    is dropped)."""
    rec = Record()
    if cluster.plane != "kubelocal":
        with _watched(cluster, rec):
            yield rec
        return
    store = cluster.apiserver.store

    def listen(key: tuple[str, str], event: Any) -> None:
        if key in (("", "pods"), (constants.GROUP, constants.PLURAL)):
            rec.add(Seen(time.monotonic(), key[1], event.type, event.new.obj))

    store.listeners.append(listen)
    try:
        yield rec
    finally:
        store.listeners.remove(listen)


@contextmanager
def _watched(cluster: Cluster, rec: Record) -> Iterator[None]:
    """A thread per resource watching the default namespace into `rec`, each from its list's resourceVersion."""
    stop = threading.Event()
    pods = (cluster.core.list_namespaced_pod, ("default",), "pods")
    jobs = (cluster.custom.list_namespaced_custom_object,
            (constants.GROUP, constants.VERSION, "default", constants.PLURAL), constants.PLURAL)
    started = []
    for lister, args, resource in (pods, jobs):
        listed = lister(*args, _preload_content=False)
        rv = json.loads(listed.data)["metadata"]["resourceVersion"]
        thread = threading.Thread(target=_watch, args=(lister, args, resource, rv, rec, stop), daemon=True,
                                  name=f"chaos-record-{resource}")
        thread.start()
        started.append(thread)
    try:
        yield
    finally:
        stop.set()
        for thread in started:
            thread.join(10)


def _watch(lister: Any, args: tuple[Any, ...], resource: str, rv: str, rec: Record, stop: threading.Event) -> None:
    while not stop.is_set():
        w = watch.Watch()
        for event in w.stream(lister, *args, resource_version=rv, timeout_seconds=2):
            obj = event["raw_object"]
            rv = obj["metadata"]["resourceVersion"]
            rec.add(Seen(time.monotonic(), resource, event["type"], obj))
            if stop.is_set():
                w.stop()


# ---------------------------------------------------------------- invariants (pure)


def _replica_key(pod: Mapping[str, Any]) -> tuple[str, str, str, str]:
    labels = pod["metadata"].get("labels") or {}
    return (labels.get(constants.LABEL_JOB_NAME, "?"), labels.get(constants.LABEL_REPLICA_TYPE, "?"),
            labels.get(constants.LABEL_REPLICA_INDEX, "?"), labels.get(constants.LABEL_ATTEMPT, "?"))


def duplicate_pods(events: Iterable[Seen]) -> list[str]:
    """Never two pods for one replica and attempt: each (job, type, index, attempt) was created once (one uid).
    (The chaos jobs restart whole gangs, so a replica never gets a second pod within one attempt.)"""
    uids: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for e in events:
        if e.resource == "pods" and e.type == "ADDED":
            uids[_replica_key(e.obj)].add(str(e.obj["metadata"]["uid"]))
    return [f"{'/'.join(k)}: {len(v)} pods" for k, v in sorted(uids.items()) if len(v) > 1]


def partial_gangs(events: Iterable[Seen], sizes: Mapping[str, int]) -> list[str]:
    """Never a partially bound gang: every attempt of a job that had one pod bound to a node had all its pods
    bound (the builtin backend releases a gang whole, so a crash mid-release must be finished by the next
    operator)."""
    bound: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in events:
        if e.resource == "pods" and (e.obj.get("spec") or {}).get("nodeName"):
            job, _, _, attempt = _replica_key(e.obj)
            bound[(job, attempt)].add(e.name)
    return [f"{job} attempt {attempt}: {len(names)} of {sizes[job]} pods bound ({sorted(names)})"
            for (job, attempt), names in sorted(bound.items()) if job in sizes and len(names) != sizes[job]]


def unconverged(jobs: Mapping[str, Mapping[str, Any] | None], names: Iterable[str]) -> list[str]:
    """Every job converges: Succeeded, or Failed with a reason (a job deleted by its TTL had finished)."""
    out = []
    for name in names:
        obj = jobs.get(name)
        if obj is None:
            continue
        status = obj.get("status") or {}
        state = status.get("state")
        if state not in FINISHED:
            out.append(f"{name}: {state or 'no state'}")
        elif state == "Failed":
            failed: Mapping[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
            if not failed.get("reason"):
                out.append(f"{name}: Failed without a reason")
    return out


def leaked_pods(jobs: Mapping[str, Mapping[str, Any] | None], pods: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """No pod outlives its job's cleanPodPolicy once the job finished: All leaves none, Running leaves none
    running or pending, None keeps them; a deleted job leaves none (garbage collection)."""
    out = []
    for name, pod in sorted(pods.items()):
        job_name = (pod["metadata"].get("labels") or {}).get(constants.LABEL_JOB_NAME)
        if job_name is None or job_name not in jobs:
            continue
        job = jobs[job_name]
        if job is None:
            out.append(f"{name}: its job was deleted")
            continue
        if ((job.get("status") or {}).get("state")) not in FINISHED:
            continue
        policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "Running"
        phase = (pod.get("status") or {}).get("phase")
        if policy == "All" or (policy == "Running" and phase in ("Pending", "Running", None)):
            out.append(f"{name}: {phase} under cleanPodPolicy {policy}")
    return out


def finished_at(events: Iterable[Seen], name: str) -> float | None:
    """When the job first reached Succeeded or Failed in the record."""
    for e in events:
        if e.resource == "tfjobs" and e.name == name and ((e.obj.get("status") or {}).get("state")) in FINISHED:
            return e.at
    return None


def converge_seconds(rec: Record, names: Iterable[str]) -> float:
    """Seconds from the last fault to the last job finishing (0 when every job finished before it)."""
    last_fault = max((at for at, _ in rec.faults), default=0.0)
    events = rec.snapshot()
    ends = [t for n in names if (t := finished_at(events, n)) is not None]
    return max(0.0, max(ends, default=last_fault) - last_fault)


def report(title: str, rec: Record, names: list[str], checks: Mapping[str, list[str]]) -> str:
    """The run's figures, one line (the tier prints it; docs/testing.md quotes it)."""
    held = sum(1 for v in checks.values() if not v)
    return (f"chaos {title}: seed {SEED}, {len(rec.faults)} faults, {len(names)} jobs, {len(rec.events)} events "
            f"recorded, invariants held {held}/{len(checks)}, converged {converge_seconds(rec, names):.1f} s "
            "after the last fault")
