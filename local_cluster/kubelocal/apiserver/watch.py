"""WATCH: a chunked stream of events from a resourceVersion, with bookmarks, initial events and Tables."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from .codec import JSON, truthy
from .errors import ApiError, status_body
from .faults import RECORD
from .registry import ResourceType
from .rest.context import RestContext
from .rest.read import as_version, predicate
from .store import ResourceVersionTooOld, Stored, dumps
from .tables import to_table, wants_table

DEFAULT_WATCH_TIMEOUT = 1800.0
#: Queued by a stream's timer: time for a bookmark, or for the stream's end.
TICK: tuple[str, Stored] = ("TICK", Stored({}))


def bookmark(ctx: RestContext, rt: ResourceType, annotations: dict[str, str]) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(ctx.store.rv)}
    if annotations:
        meta["annotations"] = annotations
    event = {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}}
    return dumps(event) + b"\n"


def watch_timeout(value: str | None) -> float:
    """`timeoutSeconds` as kube-apiserver reads it: a whole number (Go's ParseInt), else a 400 in its words (a
    client sending `300.0` works on no real cluster)."""
    if not value:
        return DEFAULT_WATCH_TIMEOUT
    try:
        return float(int(value, 10))
    except ValueError:
        raise ApiError(400, f'strconv.ParseInt: parsing "{value}": invalid syntax', reason="BadRequest") from None


async def serve_watch(
    ctx: RestContext, request: web.Request, rt: ResourceType, ns: str | None, bookmark_interval: float
) -> web.StreamResponse:
    query = request.query
    pred = predicate(rt, query)
    rv_param = query.get("resourceVersion") or ""
    initial = truthy(query.get("sendInitialEvents"))
    bookmarks = truthy(query.get("allowWatchBookmarks"))
    if initial and not bookmarks:
        raise ApiError(
            422,
            'ListOptions.meta.k8s.io "" is invalid: allowWatchBookmarks: Required value: '
            "allowWatchBookmarks must be set to true when sendInitialEvents is true",
        )
    since: int | None = None
    if rv_param not in ("", "0") and not initial:
        try:
            since = int(rv_param)
        except ValueError:
            raise ApiError(400, f"invalid resource version: {rv_param}") from None
    timeout = watch_timeout(query.get("timeoutSeconds"))
    table = wants_table(request.headers.get("Accept", ""))
    response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    try:
        watcher = ctx.store.watch(rt.key, ns, pred, since)
    except ResourceVersionTooOld as e:
        # kube-apiserver's watch cache answers 200 and then an ERROR event carrying 410 Expired.
        await response.prepare(request)
        request[RECORD](200)
        error = status_body(410, f"too old resource version: {e.requested} ({e.oldest})", "Expired")
        await response.write(dumps({"type": "ERROR", "object": error}) + b"\n")
        await response.write_eof()
        return response
    if initial:
        watcher.queue.put_nowait(("INITIAL_END", Stored({})))
    await response.prepare(request)
    request[RECORD](200)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    first_table = True
    timer: asyncio.TimerHandle | None = None

    def wake() -> None:
        # One timer per stream, not one per event (a burst sends thousands per stream): it queues a TICK
        # that asks for a bookmark, or ends the stream at its deadline.
        nonlocal timer
        watcher.queue.put_nowait(TICK)
        left = deadline - loop.time()
        timer = loop.call_later(min(left, bookmark_interval) if bookmarks else left, wake) if left > 0 else None

    timer = loop.call_later(min(timeout, bookmark_interval) if bookmarks else timeout, wake)
    try:
        while True:
            item = await watcher.queue.get()
            batch = [item]
            while not watcher.queue.empty() and len(batch) < 500:
                batch.append(watcher.queue.get_nowait())
            chunks = []
            closed = ticked = False
            for entry in batch:
                if entry is None:
                    closed = True
                    break
                typ, stored = entry
                if entry is TICK:
                    # Past the deadline the events taken with it are still written: the stream's last bookmark
                    # (below) says the client has seen everything up to now.
                    ticked = True
                elif typ == "INITIAL_END":
                    chunks.append(bookmark(ctx, rt, {"k8s.io/initial-events-end": "true"}))
                elif table:
                    tbl = to_table(
                        rt,
                        [stored.obj],
                        resource_version=stored.obj["metadata"]["resourceVersion"],
                        include_object=query.get("includeObject", "Metadata"),
                        with_columns=first_table,
                    )
                    first_table = False
                    chunks.append(dumps({"type": typ, "object": tbl}) + b"\n")
                else:
                    raw = (
                        stored.raw if stored.obj.get("apiVersion") == rt.api_version else dumps(as_version(rt, stored))
                    )
                    chunks.append(b'{"type":"' + typ.encode() + b'","object":' + raw + b"}\n")
            if ticked and bookmarks and watcher.queue.empty() and loop.time() < deadline:
                # only once every event so far is written: a bookmark's resourceVersion covers them all
                chunks.append(bookmark(ctx, rt, {}))
            if chunks:
                await response.write(b"".join(chunks))
            if ticked and loop.time() >= deadline:
                break
            if closed:
                if watcher.dropped and request.transport is not None:
                    request.transport.abort()
                    return response
                break
        if bookmarks and not ctx.stopping and watcher.queue.empty():
            # Only when every event queued for this stream is written: a bookmark past one not sent would make the
            # client resume after it, and that event would be lost to it (a pod's Running, at 10,000 jobs).
            await response.write(bookmark(ctx, rt, {}))
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        if timer is not None:
            timer.cancel()
        ctx.store.unwatch(rt.key, watcher)
    return response
