"""What the builtin admission loop (`gang.admission`) needs from the operator that runs it: a few API calls, the
parsed jobs and the pod index, settings, and a way to ask for a reconcile. The controller is the host in the
operator; tests use a fake.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from tfjob_operator.api.observed import JobView
from tfjob_operator.gang.base import GangOptions
from tfjob_operator.gang.queue import JobKey
from tfjob_operator.metrics import Metrics


class AdmissionApi(Protocol):
    """The API calls the loop makes (`tfjob_operator.kube.Kube` provides them)."""

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = ...,
                      query: list[tuple[str, str]] | None = None) -> Any: ...

    async def get(self, path: str) -> dict[str, Any] | None: ...

    async def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool: ...

    async def post_event(self, job: Mapping[str, Any], event_type: str, reason: str, message: str) -> None: ...


class AdmissionSettings(Protocol):
    """The operator settings the loop reads (`tfjob_operator.controller.settings.OperatorSettings` has them)."""

    @property
    def gang_backend(self) -> str:
        """The default gang backend's name (a job's annotation wins)."""

    @property
    def retry_backoff(self) -> float: ...
    @property
    def retry_max_backoff(self) -> float: ...


class AdmissionHost(Protocol):
    """What the loop reads (parsed jobs, the pod index, settings) and the one thing it calls back (`trigger`).

    The controller (`tfjob_operator.controller.JobController`) is the host in the operator; tests use a fake.
    """

    @property
    def pods(self) -> Mapping[JobKey, Any]:
        """The operator's index of TFJob pods by job (`pod_index`): (namespace, name) → the job's pods."""

    @property
    def kube(self) -> AdmissionApi: ...
    @property
    def settings(self) -> AdmissionSettings: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def gang_options(self) -> GangOptions: ...

    def view(self, key: JobKey) -> JobView | None:
        """The job, parsed once per version (the same view reconcile reads); None when it is gone."""

    def trigger(self, key: JobKey) -> None:
        """Reconcile this job soon (its Queued reason changed)."""

    def watch_cluster(self) -> Awaitable[None]:
        """Watch every node and every pod (any namespace the operator may read) once, handing each event to the
        loop's `node_event` and `pod_event`: the current objects before it completes, then each change as it
        happens. Asked again after a failure, it tries again."""

    @property
    def cluster_listed(self) -> bool:
        """Whether those watches have delivered their first lists (the kept capacity is the cluster's)."""
