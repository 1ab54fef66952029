"""List, then watch, one collection through the official client, handing every change to a callback on the event
loop: how the admission loop keeps nodes and pods (of any owner) without listing them per pass.

The list replays the collection as ADDED events (and DELETED for objects gone since the last list); the watch then
resumes from the list's resourceVersion (bookmarks keep it fresh across the server's watch timeouts). A watch the
server refuses with 410 Gone, or any error, costs one relist after a back-off: `relists` counts them (the loop logs
them), so a resync is never silent. The watch blocks, so it runs in its own thread; events reach the callback
through the event loop, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from tfjob_operator.kube import Kube, KubeError

log = logging.getLogger("tfjob_operator.informer")

#: The server ends a watch after this many seconds; it resumes from the last resourceVersion (no list).
WATCH_SECONDS = 240
#: Events decoded but not yet handled by the event loop, at most: when the loop falls behind, the watch thread
#: waits (the server holds the rest) instead of piling decoded objects up in memory.
BACKLOG = 256
#: Seconds before relisting after a watch error (doubling up to RELIST_MAX_SECONDS).
RELIST_BACKOFF_SECONDS = 0.5
RELIST_MAX_SECONDS = 30.0

OnEvent = Callable[[str, Mapping[str, Any]], None]


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of an object between lists (for the DELETED a relist reports): who it is, nothing more."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta}}


class Informer:
    """One collection (`path`, e.g. /api/v1/nodes) kept in step with the server through `on_event(type, obj)`."""

    def __init__(self, kube: Kube, path: str, on_event: OnEvent, *, name: str) -> None:
        self.kube = kube
        self.path = path
        self.on_event = on_event
        self.name = name
        #: Lists after the first (watch expired or failed): each re-reads the whole collection.
        self.relists = 0
        self._keys: dict[str, Mapping[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._response: Any = None
        self._room = threading.BoundedSemaphore(BACKLOG)

    async def start(self) -> None:
        """List (raising KubeError if the server refuses, e.g. 403), deliver it, then watch in a thread."""
        self._loop = asyncio.get_running_loop()
        body = await self.kube.request("GET", self.path)
        version = self._replace(body or {})
        self._thread = threading.Thread(target=self._run, args=(version,), name=f"informer {self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # the thread may be closing it too
                response.shutdown()

    # -------------------------------------------------------- on the event loop

    def _replace(self, body: Mapping[str, Any]) -> str:
        """A full list: ADDED (or MODIFIED) for every item, DELETED for what is gone; the list's resourceVersion."""
        items = list(body.get("items") or [])
        seen = {_key(o): o for o in items}
        for key in [k for k in self._keys if k not in seen]:
            self.on_event("DELETED", self._keys.pop(key))
        for key, obj in seen.items():
            self.on_event("MODIFIED" if key in self._keys else "ADDED", obj)
            self._keys[key] = _identity(obj)
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _deliver(self, event_type: str, obj: Mapping[str, Any]) -> None:
        try:
            key = _key(obj)
            if event_type == "DELETED":
                self._keys.pop(key, None)
            else:
                # Only who it is is kept (for a relist's DELETED): the callback keeps what it needs.
                self._keys[key] = _identity(obj)
            self.on_event(event_type, obj)
        finally:
            self._room.release()

    # -------------------------------------------------------- in the watch thread

    def _run(self, version: str) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._watch(version)
                failures = 0
                continue
            except _Gone:
                log.info("watch of %s expired (410 Gone): listing again", self.path)
            except Exception as exc:  # the server restarted, the connection broke: list again after a pause
                if self._stop.is_set():
                    return
                failures += 1
                log.warning("watch of %s failed (%s): listing again", self.path, exc)
                self._stop.wait(min(RELIST_BACKOFF_SECONDS * 2 ** failures, RELIST_MAX_SECONDS))
            try:
                version = self._relist()
            except (KubeError, RuntimeError) as exc:
                log.warning("listing %s failed (%s); retrying", self.path, exc)
                failures += 1
                self._stop.wait(min(RELIST_BACKOFF_SECONDS * 2 ** failures, RELIST_MAX_SECONDS))

    def _relist(self) -> str:
        body = self.kube.request_sync("GET", self.path)
        self.relists += 1
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(_call(self._replace, body or {}), self._loop).result(RELIST_MAX_SECONDS)

    def _watch(self, version: str) -> str:
        """One watch request, until the server ends it; the last resourceVersion seen."""
        api = self.kube.api
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(WATCH_SECONDS))]
        if version:
            query.append(("resourceVersion", version))
        _, url, headers, _, _ = api.param_serialize("GET", self.path, query_params=query,
                                                     header_params={"Accept": "application/json"},
                                                     auth_settings=["BearerToken"])
        response = api.call_api("GET", url, header_params=headers, _request_timeout=(10, WATCH_SECONDS + 30))
        if response.status == 410:
            raise _Gone
        if not 200 <= response.status < 300:
            raise RuntimeError(f"HTTP {response.status} {response.reason}")
        self._response = response.response
        assert self._loop is not None
        try:
            for line in iter_resp_lines(response.response):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    while not self._room.acquire(timeout=1.0):
                        if self._stop.is_set():
                            return version
                    self._loop.call_soon_threadsafe(self._deliver, kind, obj)
        finally:
            self._response = None
            response.response.release_conn()
        return version


class _Gone(Exception):
    """The server no longer has the history the watch asked for (HTTP 410): list again."""


async def _call(fn: Callable[..., str], *args: Any) -> str:
    return fn(*args)
