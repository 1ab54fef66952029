"""The gang backends this operator ships, registered by name, and how a job picks one.

Registration is explicit (:func:`register`, one line per backend below) and refuses a second backend of a name
already taken, so a typo or a copy-pasted class cannot silently replace another.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob, short_repr
from tfjob_operator.gang.base import GangBackend, GangBackendError, GangOptions, ReleasedByOperator
from tfjob_operator.gang.builtin import BuiltinBackend
from tfjob_operator.gang.kueue import LABEL_QUEUE_NAME, KueueBackend
from tfjob_operator.gang.none import NoGangBackend
from tfjob_operator.gang.scheduler_plugins import SchedulerPluginsBackend
from tfjob_operator.gang.volcano import VolcanoBackend

_BACKENDS: dict[str, type[GangBackend]] = {}
#: Where a backend name comes from, as refusals name it.
ANNOTATION_SOURCE = f"metadata.annotations[{constants.ANNOTATION_GANG_BACKEND}]"
SETTING_SOURCE = "operator setting TFJOB_GANG_BACKEND"


def register(cls: type[GangBackend]) -> type[GangBackend]:
    """Make ``cls`` selectable by its ``name``; a name already registered is refused (ValueError)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"gang backend {cls.__qualname__}: set the class attribute `name` (what users write)")
    taken = _BACKENDS.get(name)
    if taken is not None:
        raise ValueError(f"gang backend {name!r} is registered already ({taken.__qualname__}); "
                         f"{cls.__qualname__} needs another name")
    _BACKENDS[name] = cls
    return cls


register(BuiltinBackend)
register(VolcanoBackend)
register(SchedulerPluginsBackend)
register(KueueBackend)
register(NoGangBackend)


def registry() -> Mapping[str, type[GangBackend]]:
    """Every registered backend class by name (read-only)."""
    return MappingProxyType(_BACKENDS)


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def unknown_backend(source: str, name: str) -> str:
    """The refusal of a backend name that is not registered, naming where it was written (an annotation, the
    setting, `--gang`) and the choices: the one wording the webhook, the CLI, the settings and a reconcile use."""
    return f"{source}: unknown gang backend {short_repr(name)} (choose one of {', '.join(backend_names())})"


def choice_messages(obj: Mapping[str, Any]) -> list[str]:
    """The refusal of a TFJob (a raw object) whose tfjob.dev/gang-backend annotation names no registered backend;
    empty when it names one or none."""
    annotations = (obj.get("metadata") or {}).get("annotations") if isinstance(obj.get("metadata"), Mapping) else None
    annotated = annotations.get(constants.ANNOTATION_GANG_BACKEND) if isinstance(annotations, Mapping) else None
    if not isinstance(annotated, str) or annotated.strip() in _BACKENDS:
        return []
    return [unknown_backend(ANNOTATION_SOURCE, annotated)]


def parse_job(obj: Mapping[str, Any]) -> TFJob:
    """`validation.parse_tfjob`, and a gang backend annotation that names a registered backend: the TFJob as the
    operator will run it (the webhook and the CLI refuse what a reconcile would fail). InvalidSpec lists every
    problem."""
    messages = choice_messages(obj)
    try:
        job = parse_tfjob(obj)
    except InvalidSpec as exc:
        raise InvalidSpec([*exc.messages, *messages]) from None
    if messages:
        raise InvalidSpec(messages)
    return job


def released_by_operator(name: str) -> bool:
    """Whether the backend registered as ``name`` is released by the operator's own admission loop."""
    cls = _BACKENDS.get(name)
    return cls is not None and issubclass(cls, ReleasedByOperator)


def kueue_managed(job: TFJob) -> bool:
    """The job carries Kueue's queue label (on itself or a pod template): Kueue admits it and gates its pods."""
    if LABEL_QUEUE_NAME in job.metadata.labels:
        return True
    return any(LABEL_QUEUE_NAME in (((spec.template or {}).get("metadata") or {}).get("labels") or {})
               for _, spec in job.replica_specs())


def chosen_backend_name(job: TFJob, default_name: str) -> tuple[str, str]:
    """(backend name, where it came from): the job's annotation, else the operator's default. The builtin gang
    steps aside (`none`) for a job Kueue manages: Kueue admits the whole job, a second gate would only delay it."""
    annotated = job.metadata.annotations.get(constants.ANNOTATION_GANG_BACKEND)
    if annotated:
        name, source = annotated.strip(), ANNOTATION_SOURCE
    else:
        name, source = str(default_name), SETTING_SOURCE
    if name == BuiltinBackend.name and kueue_managed(job):
        return NoGangBackend.name, f"label {LABEL_QUEUE_NAME}: Kueue admits the job ({source} said {name})"
    return name, source


def backend_for(job: TFJob, default_name: str, options: GangOptions | None = None) -> GangBackend:
    """The job's gang backend: its annotation's if any, else ``default_name``.

    Raises GangBackendError naming the field when the name is unknown.
    """
    name, source = chosen_backend_name(job, default_name)
    cls = _BACKENDS.get(name)
    if cls is None:
        raise GangBackendError(unknown_backend(source, name))
    return cls(options)
