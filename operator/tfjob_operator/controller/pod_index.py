"""The operator's index of TFJob pods by job: (namespace, job name) → the latest kept body of each of its pods,
fed by the pod watch (`informer`).

The controller, the admission loop and the progress poller read it; nothing else keeps pods. It replaces a kopf
index over a second watch of the same pods: under the builtin gang backend one watch of every pod now feeds both
this index and the admission loop's free capacity (each pod event decoded once, not twice), and events waiting
for the event loop are bounded (the informer's backlog) instead of queued per pod inside kopf, each with its full
body. Bodies are kept as `observed.as_kept` keeps them: private, compact, never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tfjob_operator.api import constants
from tfjob_operator.api.keys import JobKey
from tfjob_operator.api.observed import as_kept
from tfjob_operator.reconcile.observe import observe_pod


class PodStore:
    """One job's pods, iterated as bodies (as the job index's stores are): the latest of each pod, by name."""

    __slots__ = ("_by_name",)

    def __init__(self) -> None:
        self._by_name: dict[str, Mapping[str, Any]] = {}

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def put(self, name: str, body: Mapping[str, Any]) -> None:
        self._by_name[name] = body

    def drop(self, name: str) -> None:
        self._by_name.pop(name, None)


def job_of(pod: Mapping[str, Any]) -> JobKey | None:
    """The job a pod belongs to, from its job-name label; None for a pod that is not a TFJob's."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME)
    return (meta.get("namespace") or "default", str(name)) if name else None


class PodIndex(Mapping[JobKey, PodStore]):
    """TFJob pods by job, kept in step with watch events (`apply`)."""

    def __init__(self) -> None:
        self._stores: dict[JobKey, PodStore] = {}
        self._last_words: dict[JobKey, dict[str, Mapping[str, Any]]] = {}

    def __getitem__(self, key: JobKey) -> PodStore:
        return self._stores[key]

    def __iter__(self) -> Iterator[JobKey]:
        return iter(list(self._stores))

    def __len__(self) -> int:
        return len(self._stores)

    def apply(self, key: JobKey, event_type: str, pod: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of a pod of job `key`."""
        name = str((pod.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            store = self._stores.get(key)
            if store is not None:
                store.drop(name)
                if not store:
                    del self._stores[key]
            if observe_pod(pod).disruption is not None:
                self._last_words.setdefault(key, {})[name] = as_kept(pod)
            return
        self._stores.setdefault(key, PodStore()).put(name, as_kept(pod))
        words = self._last_words.get(key)
        if words is not None and words.pop(name, None) is not None and not words:
            del self._last_words[key]

    def last_words(self, key: JobKey) -> Mapping[str, Mapping[str, Any]]:
        """Pods of job `key` deleted with a cause on them (a DisruptionTarget or Kueue's TerminationTarget, an
        eviction, a lost node): name → the last body seen, until a pod of that name comes again. A reconcile that
        runs only once such a pod is gone (a busy operator; a pod that exits at once on SIGTERM) still records
        why it went (PodPreempted), not only that it is missing (PodDeleted)."""
        return self._last_words.get(key) or {}

    def forget(self, key: JobKey) -> None:
        """The job is gone: its pods' last words with it (its pods, if any are left, stay until deleted)."""
        self._last_words.pop(key, None)
