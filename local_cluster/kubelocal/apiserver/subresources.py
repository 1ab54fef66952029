"""Subresources: status and finalize (what a write to them may change), and the pod ones that are
actions rather than storage: log (streamed from the kubelet), binding (the scheduler), eviction."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from aiohttp import web

from . import objects
from .admission import AdmissionRequest, Operation
from .codec import truthy
from .errors import ApiError, invalid, success_status
from .faults import RECORD, LogSource
from .registry import ResourceType
from .rest.context import RestContext
from .rest.delete import delete


def narrow_to_subresource(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], sub: str | None
) -> dict[str, Any]:
    """A write to /status changes only status, to /finalize only spec.finalizers; a write to the main
    resource of a kind with a status subresource keeps the stored status."""
    if sub == "status":
        new = {**copy.deepcopy(old), "status": new.get("status")}
        if new["status"] is None:
            new.pop("status")
    elif sub == "finalize":
        new = {
            **copy.deepcopy(old),
            "spec": {**(old.get("spec") or {}), "finalizers": (new.get("spec") or {}).get("finalizers") or []},
        }
    elif rt.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    return new


async def pod_log(
    ctx: RestContext, request: web.Request, rt: ResourceType, ns: str | None, name: str, source: LogSource | None
) -> web.StreamResponse:
    """GET pods/{name}/log: the container's output from `source` (the kubelet), optionally followed."""
    pod = ctx.get_stored(rt, ns, name).obj
    query = request.query
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    all_names = names + [c["name"] for c in spec.get("initContainers") or []]
    container = query.get("container")
    if not container:
        if len(names) != 1:
            raise ApiError(
                400, f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
            )
        container = names[0]
    elif container not in all_names:
        raise ApiError(400, f"container {container} is not valid for pod {name}")
    if source is None:
        raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    tail = query.get("tailLines")
    stream = source.stream(
        ns or "",
        name,
        container,
        follow=truthy(query.get("follow")),
        tail_lines=int(tail) if tail not in (None, "") else None,
        previous=truthy(query.get("previous")),
    )
    try:
        first = await stream.__anext__()
    except StopAsyncIteration:
        first = b""
    except KeyError:
        if truthy(query.get("previous")):
            raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found') from None
        raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating') from None
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    request[RECORD](200)
    await send_stream(response, first, stream)
    return response


async def send_stream(response: web.StreamResponse, first: bytes, stream: Any) -> None:
    """Write a prepared log response: the first chunk (read before the status was chosen), then the rest as it
    comes, until the stream ends or the client goes away; the stream is closed either way."""
    try:
        if first:
            await response.write(first)
        async for chunk in stream:
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()


def pod_binding(ctx: RestContext, rt: ResourceType, ns: str | None, name: str, body: Any) -> dict[str, Any]:
    """POST pods/{name}/binding: assign the pod to a node (what the scheduler does)."""
    pod = ctx.get_stored(rt, ns, name).obj
    target = (body or {}).get("target") or {}
    node = target.get("name")
    if not node:
        raise invalid("Binding", "", name, [("target.name", "FieldValueRequired", "Required value")])
    if pod["metadata"].get("deletionTimestamp"):
        raise ApiError(409, f"pod {name} is being deleted, cannot be assigned to a host", reason="Conflict")
    if (pod.get("spec") or {}).get("nodeName"):
        raise ApiError(409, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"', reason="Conflict")
    if (pod.get("spec") or {}).get("schedulingGates"):
        raise ApiError(409, f"pod {name} has non-empty .spec.schedulingGates", reason="Conflict")
    new = copy.deepcopy(pod)
    new["spec"]["nodeName"] = node
    status = new.setdefault("status", {})
    status["conditions"] = objects.set_condition(
        status.get("conditions") or [],
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": objects.timestamp()},
    )
    ctx.store.write(rt.key, new)
    return success_status()


def pod_eviction(ctx: RestContext, rt: ResourceType, ns: str | None, name: str, body: Any) -> dict[str, Any]:
    """POST pods/{name}/eviction, as kube's EvictionREST: the Eviction is admitted (CREATE pods/eviction, so
    webhooks on evictions judge it), then the pod is marked DisruptionTarget and deleted from storage with the
    Eviction's options, without the pod DELETE's admission."""
    pod = ctx.get_stored(rt, ns, name).obj
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", **(body if isinstance(body, dict) else {})}
    eviction["metadata"] = {**(eviction.get("metadata") or {}), "name": name, "namespace": ns}
    admission = AdmissionRequest(Operation.CREATE, rt, ns, name, eviction, subresource="eviction",
                                 kind=("policy", "v1", "Eviction"))
    ctx.admission.admit(admission)
    ctx.admission.validate(admission)
    opts = (admission.obj or eviction).get("deleteOptions") or {}
    if not objects.pod_is_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
        new = copy.deepcopy(pod)
        status = new.setdefault("status", {})
        status["conditions"] = objects.set_condition(
            status.get("conditions") or [],
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
                "lastProbeTime": None,
                "lastTransitionTime": objects.timestamp(),
            },
        )
        ctx.store.write(rt.key, new)
    delete(ctx, rt, ns, name, opts, admit=False)
    return success_status()
