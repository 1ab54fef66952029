"""create: POST of a new object (and PUT-to-create where a kind allows it)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from .. import managedfields, objects, strategy
from ..admission import AdmissionRequest, Operation, stable
from ..authorization import ADMIN, UserInfo
from ..codec import is_dry_run
from ..errors import ApiError, already_exists, invalid
from ..registry import ResourceType
from ..strategy import CRD_KEY, POD_KEY
from .context import RestContext

SYSTEM_FIELDS = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


def create(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    body: Any,
    query: Mapping[str, str],
    *,
    user: UserInfo = ADMIN,
    manager: str | None = None,
    owned: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Store a new object; returns it (as stored, or as it would be for a dry run) and warnings. `owned`: the
    caller gives `body` away (a request body just decoded), so it becomes the stored object without a copy."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object")
    obj = body if owned else copy.deepcopy(body)
    strategy.check_type(rt, obj)
    strategy.check_decodable(rt, obj)
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ApiError(400, "metadata must be an object")
    if rt.namespaced:
        if meta.get("namespace") and meta["namespace"] != ns:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)
    admission = AdmissionRequest(
        Operation.CREATE, rt, ns, meta.get("name") or "", obj, dry_run=is_dry_run(query), options=query, user=user
    )
    ctx.admission.admit(admission)
    obj = admission.obj or obj
    meta = obj["metadata"]
    if not meta.get("name"):
        if meta.get("generateName"):
            # the same in every round of the write (admission.run_admitted), so a webhook judges the stored name
            meta["name"] = stable("name", lambda: objects.generate_name(meta["generateName"]))
        else:
            raise invalid(
                rt.kind,
                rt.group,
                "",
                [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")],
            )
    for key in SYSTEM_FIELDS:
        meta.pop(key, None)
    if rt.has_status and rt.is_custom:
        obj.pop("status", None)  # the status subresource is the only way to write status
    if manager:
        managedfields.record_update(rt, None, obj, manager, None)
    warnings = strategy.validate(rt, obj, query)
    if ctx.store.get(rt.key, meta.get("namespace"), meta["name"]) is not None:
        raise already_exists(rt.group, rt.plural, meta["name"])
    meta["uid"] = stable("uid", lambda: str(uuid.uuid4()))
    meta["creationTimestamp"] = stable("creationTimestamp", objects.timestamp)
    if rt.is_custom or "spec" in obj or rt.key == POD_KEY:
        meta["generation"] = 1
    strategy.prepare_create(rt, obj, ctx.allocate_ip)
    admission.name = meta["name"]
    ctx.admission.validate(admission)
    warnings += admission.warnings
    if admission.dry_run:
        return obj, warnings  # never stored, so no resourceVersion (the field is left out, as real)
    ctx.store.write(rt.key, obj)
    if rt.key == CRD_KEY:
        ctx.install_crd(obj)
    return obj, warnings
