"""What a reconcile decides: the actions the controller carries out, in order, and the status to write first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tfjob_operator.api import JobConditionType, TFJobStatus


@dataclass(frozen=True)
class CreateObject:
    """Create a Service, Pod or gang object; an existing one (409) counts as created."""

    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True)
class DeletePod:
    """Delete a pod of the job (404 counts as deleted); `force` means grace period 0 for a pod stuck Terminating."""

    name: str
    force: bool = False


@dataclass(frozen=True)
class AnnotateJob:
    """Merge these annotations into the TFJob's metadata (None removes one)."""

    annotations: dict[str, str | None]


@dataclass(frozen=True)
class DeleteJob:
    """Delete the TFJob itself (ttlSecondsAfterFinished); its pods and Service go by garbage collection."""

    reason: str


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event on the TFJob. `condition` names the condition that became true, for metrics."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    condition: JobConditionType | None = None


Action = CreateObject | DeletePod | AnnotateJob | DeleteJob | EmitEvent


@dataclass
class Decision:
    """What reconcile decided: the status to write, actions in order, and when to reconcile again at the latest."""

    status: TFJobStatus
    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None
    #: False when the job belongs to another controller (runPolicy.managedBy): write nothing.
    managed: bool = True

    def of_type(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]
