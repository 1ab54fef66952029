"""delete and deletecollection: graceful deletion, finalizers, preconditions and propagation policies."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubelocal import times

from .. import objects
from ..admission import AdmissionRequest, Operation
from ..authorization import ADMIN, UserInfo
from ..codec import is_dry_run
from ..errors import ApiError, conflict, details, not_found, success_status
from ..registry import ResourceType
from ..selectors import Selector
from ..store import Key
from ..strategy import CRD_KEY, NS_KEY, POD_KEY, SERVICE_KEY
from .context import RestContext

# Kinds whose REST storage answers a DELETE that removed the object with the object itself, not a Status
# (`ReturnDeletedObject: true` in kube-apiserver's pkg/registry; the OpenAPI, and so the official clients,
# then type the DELETE response as the kind: `delete_namespaced_resource_quota` -> V1ResourceQuota).
# Custom resources do too. Kinds not served here are listed so that serving them later stays right.
RETURNS_DELETED_OBJECT: frozenset[Key] = frozenset(
    {
        POD_KEY,
        SERVICE_KEY,
        ("", "serviceaccounts"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "resourcequotas"),
        ("", "podtemplates"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csidrivers"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "volumeattachments"),
        ("storage.k8s.io", "volumeattributesclasses"),
    }
)


def response(
    rt: ResourceType, obj: dict[str, Any], removed: bool, opts: Mapping[str, Any]
) -> tuple[dict[str, Any], int]:
    """The body and code of a DELETE answer, as kube-apiserver's finalizeDelete and delete handler give them:
    an object still there (finalizers, grace period, a Terminating namespace) is returned as it now is; one
    removed is returned by the kinds that return the deleted object, and as a Status by the others. 202 only
    when the object stays and the caller asked for cascading with `orphanDependents: false`."""
    code = 202 if not removed and opts.get("orphanDependents") is False else 200
    if removed and not (rt.key in RETURNS_DELETED_OBJECT or rt.is_custom):
        meta = obj["metadata"]
        return success_status(details(meta["name"], rt.group, rt.plural, uid=meta["uid"])), code
    return obj, code


def delete_options(query: Mapping[str, str], body: Any) -> dict[str, Any]:
    """DeleteOptions from the body and the query (query parameters win)."""
    opts = dict(body) if isinstance(body, dict) else {}
    if "gracePeriodSeconds" in query:
        opts["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if "propagationPolicy" in query:
        opts["propagationPolicy"] = query["propagationPolicy"]
    if is_dry_run(query):
        opts["dryRun"] = ["All"]
    if "orphanDependents" in opts and "propagationPolicy" not in opts:
        opts["propagationPolicy"] = "Orphan" if opts["orphanDependents"] else "Background"
    policy = opts.get("propagationPolicy")
    if policy not in (None, "Background", "Foreground", "Orphan"):
        raise ApiError(
            422,
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            f'"{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
        )
    return opts


def check_preconditions(rt: ResourceType, old: Mapping[str, Any], opts: Mapping[str, Any]) -> None:
    pre = opts.get("preconditions") or {}
    meta = old["metadata"]
    if pre.get("uid") and pre["uid"] != meta["uid"]:
        why = f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}"
        raise conflict(rt.group, rt.plural, meta["name"], why)
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
        why = (
            f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
            f"ResourceVersion in object meta: {meta['resourceVersion']}"
        )
        raise conflict(rt.group, rt.plural, meta["name"], why)


def delete(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    name: str,
    opts: Mapping[str, Any],
    *,
    user: UserInfo = ADMIN,
    admit: bool = True,
) -> tuple[dict[str, Any], bool]:
    """Delete per Kubernetes rules; returns (object, removed-from-storage). `admit=False` is the storage's
    delete without the admission chain, as kube-apiserver's CRD cleanup and eviction call it."""
    old = ctx.store.get(rt.key, ns, name)
    if old is None:
        raise not_found(rt.group, rt.plural, name)
    check_preconditions(rt, old, opts)
    dry_run = "All" in (opts.get("dryRun") or [])
    if admit:
        admission = AdmissionRequest(
            Operation.DELETE, rt, ns, name, None, old=old, dry_run=dry_run, options=opts, user=user
        )
        ctx.admission.admit(admission)
        ctx.admission.validate(admission)
    meta = old["metadata"]
    policy = opts.get("propagationPolicy") or "Background"
    finalizers = list(meta.get("finalizers") or [])
    grace = grace_period(rt, old, opts)
    if not meta.get("deletionTimestamp"):
        # As kube-apiserver: the finalizers are set whatever the dependents; the garbage collector
        # (a controller beside the server) removes them once it has deleted or orphaned the dependents.
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
    # A dry run answers what the real DELETE would (the removed object, or the object marked for deletion)
    # and stores nothing: the answer's body then follows the same per-kind rule (see `response`).
    finalized_ns = rt.key == NS_KEY and meta.get("deletionTimestamp") and not finalizers \
        and not (old.get("spec") or {}).get("finalizers")
    if finalized_ns or (not finalizers and grace == 0 and rt.key != NS_KEY):
        # the namespace controller has drained and finalized it (namespace), or nothing holds it (the rest)
        if dry_run:
            return old, True
        final = ctx.store.remove(rt.key, ns, name)
        assert final is not None
        return final, True
    new = copy.deepcopy(old)
    nmeta = new["metadata"]
    nmeta["finalizers"] = finalizers
    if not finalizers:
        nmeta.pop("finalizers")
    if rt.key == NS_KEY:
        new.setdefault("status", {})["phase"] = "Terminating"
    current_grace = nmeta.get("deletionGracePeriodSeconds")
    if not nmeta.get("deletionTimestamp") or (current_grace is not None and grace < current_grace):
        moment = times.now() + dt.timedelta(seconds=grace)
        nmeta["deletionTimestamp"] = objects.timestamp(moment)
        nmeta["deletionGracePeriodSeconds"] = grace
    elif current_grace is None:
        nmeta["deletionGracePeriodSeconds"] = grace
    if dry_run:
        return new, False
    if objects.canonical(new) != objects.canonical(old):
        ctx.store.write(rt.key, new)
    if rt.key == CRD_KEY:
        ctx.gc_queue.put_nowait(("crd", name))
    return new, False


def grace_period(rt: ResourceType, obj: dict[str, Any], opts: Mapping[str, Any]) -> int:
    """Pods bound to a node get a grace period (the kubelet confirms); everything else goes at once."""
    if rt.key != POD_KEY:
        return 0
    if not (obj.get("spec") or {}).get("nodeName") or objects.pod_is_terminal(obj):
        return 0
    requested = opts.get("gracePeriodSeconds")
    if requested is None:
        requested = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    return max(int(requested), 0)


def delete_collection(
    ctx: RestContext,
    rt: ResourceType,
    ns: str | None,
    pred: Selector,
    opts: Mapping[str, Any],
    *,
    user: UserInfo = ADMIN,
    deleted: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Delete every selected object; ones that cannot be deleted are skipped, as kube-apiserver does.
    `deleted` (by uid) keeps what this request deleted when it runs again (`admission.run_admitted`: a webhook
    call between two objects), so none is deleted twice and the answer lists them all."""
    done: dict[str, dict[str, Any]] = {} if deleted is None else deleted
    for stored in list(ctx.store.items(rt.key, ns, pred)):
        if pred(stored.obj) and stored.obj["metadata"]["uid"] not in done:
            m = stored.obj["metadata"]
            with contextlib.suppress(ApiError):
                obj, _ = delete(ctx, rt, m.get("namespace"), m["name"], opts, user=user)
                done[m["uid"]] = obj
    return list(done.values())
