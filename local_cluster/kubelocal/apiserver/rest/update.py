"""update and patch: PUT and PATCH of an existing object, and the write path they share (`write_update`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from .. import managedfields, objects, strategy, subresources
from .. import patch as patching
from ..admission import AdmissionRequest, Operation
from ..authorization import ADMIN, UserInfo
from ..codec import is_dry_run
from ..errors import ApiError, conflict, invalid, not_found
from ..registry import ResourceType
from ..schema import core_schema
from ..strategy import CRD_KEY, NS_KEY, POD_KEY
from .context import RestContext

# Set by the server, never by a client: an update keeps the stored values.
KEPT_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "namespace",
    "name",
    "generation",
)


def update(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    name: str,
    body: Any,
    sub: str | None,
    query: Mapping[str, str],
    *,
    user: UserInfo = ADMIN,
    manager: str | None = None,
) -> tuple[dict[str, Any], list[str], bool]:
    """PUT: replace the object; returns (object, warnings, created)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object")
    old = ctx.store.get(rt.key, ns, name)
    body_meta = body.get("metadata") or {}
    if body_meta.get("name") and body_meta["name"] != name:
        raise ApiError(400, f"the name of the object ({body_meta['name']}) does not match the name on the URL ({name})")
    if old is None:
        raise not_found(rt.group, rt.plural, name)
    uid = body_meta.get("uid")
    if uid and uid != old["metadata"]["uid"]:
        why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata']['uid']}"
        raise conflict(rt.group, rt.plural, name, why)
    rv = body_meta.get("resourceVersion")
    if rv:
        if rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.group, rt.plural, name)
    elif rt.is_custom or rt.key == CRD_KEY:
        raise invalid(
            rt.kind,
            rt.group,
            name,
            [("metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0x0: must be specified for an update")],
        )
    new = copy.deepcopy(body)
    strategy.check_type(rt, new)
    strategy.check_decodable(rt, new)
    obj, warnings = write_update(ctx, rt, old, new, sub, query, user=user, manager=manager)
    return obj, warnings, False


def patch(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    name: str,
    raw: bytes,
    ctype: str,
    sub: str | None,
    query: Mapping[str, str],
    *,
    user: UserInfo = ADMIN,
    manager: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """PATCH with a JSON, merge or strategic-merge patch."""
    old = ctx.store.get(rt.key, ns, name)
    if ctype not in (patching.MERGE_PATCH, patching.JSON_PATCH, patching.STRATEGIC_PATCH):
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{patching.JSON_PATCH}, {patching.MERGE_PATCH}, {patching.APPLY_PATCH}"
            + ("" if rt.is_custom else f", {patching.STRATEGIC_PATCH}"),
        )
    if ctype == patching.STRATEGIC_PATCH and rt.is_custom:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            f"{patching.JSON_PATCH}, {patching.MERGE_PATCH}, {patching.APPLY_PATCH}",
        )
    if old is None:
        raise not_found(rt.group, rt.plural, name)
    body = json.loads(raw) if raw.strip() else None
    if body is None:
        raise ApiError(400, "the body of the request was empty")
    current = copy.deepcopy(old)
    if ctype == patching.MERGE_PATCH:
        new = patching.merge_patch(current, body)
    elif ctype == patching.JSON_PATCH:
        new = patching.json_patch(current, body)
    else:
        new = patching.strategic_merge_patch(current, body, core_schema(rt.group, rt.version, rt.kind))
    if not isinstance(new, dict):
        raise ApiError(422, "the patched object is not a JSON object")
    rv = (new.get("metadata") or {}).get("resourceVersion")
    if rv and rv != old["metadata"]["resourceVersion"]:
        raise conflict(rt.group, rt.plural, name)
    uid = (new.get("metadata") or {}).get("uid")
    if uid != old["metadata"]["uid"]:
        shown = json.dumps(uid if isinstance(uid, str) else "")
        raise invalid(
            rt.kind,
            rt.group,
            name,
            [("metadata.uid", "FieldValueInvalid", f"Invalid value: {shown}: field is immutable")],
        )
    if (new.get("metadata") or {}).get("name", name) != name:
        raise ApiError(
            400, f"the name of the object ({new['metadata']['name']}) does not match the name on the URL ({name})"
        )
    strategy.check_type(rt, new)
    strategy.check_decodable(rt, new, patched=True)
    return write_update(ctx, rt, old, new, sub, query, user=user, manager=manager)


def write_update(
    ctx: RestContext,
    rt: ResourceType,
    old: dict[str, Any],
    new: dict[str, Any],
    sub: str | None,
    query: Mapping[str, str],
    *,
    user: UserInfo = ADMIN,
    manager: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The shared tail of PUT, PATCH and the server's own writes: admission, subresource rules,
    immutable fields, validation, generation, then storage."""
    old_meta = old["metadata"]
    admission = AdmissionRequest(
        Operation.UPDATE,
        rt,
        old_meta.get("namespace"),
        old_meta["name"],
        new,
        old=old,
        subresource=sub,
        dry_run=is_dry_run(query),
        options=query,
        user=user,
    )
    ctx.admission.admit(admission)
    new = subresources.narrow_to_subresource(rt, old, admission.obj or new, sub)
    meta = new.setdefault("metadata", {})
    for key in KEPT_METADATA:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    meta.pop("resourceVersion", None)
    # A client may set managedFields itself (kubectl does, moving client-side-apply ownership to server-side
    # apply): a changed list is taken as sent, as kube-apiserver does; otherwise the write is recorded.
    supplied = "managedFields" in meta and meta["managedFields"] != old_meta.get("managedFields")
    if supplied and not meta["managedFields"]:
        meta.pop("managedFields")
    elif manager and not supplied:  # server-side apply and the server's own writes set managedFields themselves
        managedfields.record_update(rt, old, new, manager, sub)
    if old_meta.get("deletionTimestamp"):
        added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            raise invalid(
                rt.kind,
                rt.group,
                meta["name"],
                [
                    (
                        "metadata.finalizers",
                        "FieldValueForbidden",
                        "Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {json.dumps(sorted(added))}",
                    )
                ],
            )
    if rt.key == POD_KEY and sub is None:
        errors = objects.pod_update_errors(old, new)
        if errors:
            raise invalid(rt.kind, rt.group, meta["name"], errors)
        objects.default_pod_spec(new.setdefault("spec", {}))
    # A status write carries the stored spec (narrow_to_subresource): a pod's status updates need not walk it.
    warnings = strategy.validate(rt, new, query, settled=frozenset({"spec"}) if sub == "status" else frozenset())
    # A status write keeps everything else as stored (narrow_to_subresource): its generation cannot change.
    if sub != "status" and "generation" in old_meta and objects.generation_changed(
        old, new, custom=rt.is_custom, has_status=rt.has_status
    ):
        meta["generation"] = old_meta["generation"] + 1
    if rt.key == CRD_KEY:
        strategy.crd_status(new)
    admission.obj = new
    ctx.admission.validate(admission)
    warnings += admission.warnings
    unversioned = ({**new, "metadata": {**meta, "resourceVersion": None}},
                   {**old, "metadata": {**old_meta, "resourceVersion": None}})
    if objects.same_json(*unversioned):
        return old, warnings  # a no-op write keeps the resourceVersion, as etcd-backed storage does
    if admission.dry_run:
        meta["resourceVersion"] = old_meta["resourceVersion"]  # as the stored object's, never a new one
        return new, warnings
    if (
        meta.get("deletionTimestamp")
        and not meta.get("finalizers")
        and rt.key != NS_KEY
        and meta.get("deletionGracePeriodSeconds", 0) == 0
    ):
        # The write that empties the finalizers of a deleted object removes it (no MODIFIED event).
        ctx.store.remove(rt.key, meta.get("namespace"), meta["name"])
        return new, warnings
    ctx.store.write(rt.key, new)
    if rt.key == CRD_KEY:
        ctx.install_crd(new)
    return new, warnings
