"""List, then watch, one collection through the official client, handing every change to a callback on the event
loop: how the admission loop keeps nodes and pods (of any owner) without listing them per pass.

The list replays the collection as ADDED events (and DELETED for objects gone since the last list), in pages of
PAGE_SIZE (limit/continue, as client-go's reflector: thousands of pods are never one response decoded at once); the
watch then resumes from the list's resourceVersion (bookmarks keep it fresh across the server's watch timeouts).
A broken watch connection resumes from the last resourceVersion after a back-off, as client-go's reflector does;
only a watch the server refuses with 410 Gone (or a resume that fails too) costs a relist: `relists` counts them
(the loop logs them), so a resync is never silent. A relist delivers only what changed since the objects were
last seen (MODIFIED for another resourceVersion, as client-go's controllers skip an update whose resourceVersion
did not move): at ten thousand objects an expired watch costs one paged list, not ten thousand callbacks.
The watch blocks, so it runs in its own thread; events reach
the callback through the event loop, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes.watch.watch import iter_resp_lines

from tfjob_operator.kube import Kube, KubeError

log = logging.getLogger("tfjob_operator.controller.informer")

#: The server ends a watch after this many seconds; it resumes from the last resourceVersion (no list).
WATCH_SECONDS = 240
#: Events decoded but not yet handled by the event loop, at most: when the loop falls behind, the watch thread
#: waits (the server holds the rest) instead of piling decoded objects up in memory.
BACKLOG = 256
#: Objects per list page (client-go's reflector pages by 500 too).
PAGE_SIZE = 500
#: Seconds before relisting after a watch error (doubling up to RELIST_MAX_SECONDS).
RELIST_BACKOFF_SECONDS = 0.5
RELIST_MAX_SECONDS = 30.0

OnEvent = Callable[[str, Mapping[str, Any]], None]
T = TypeVar("T")


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of an object between lists: who it is (for the DELETED a relist reports) and its
    resourceVersion (a relist skips what did not change), nothing more."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "resourceVersion") if k in meta}}


def _version(obj: Mapping[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


class Informer:
    """One collection (`path`, e.g. /api/v1/nodes) kept in step with the server through `on_event(type, obj)`."""

    def __init__(self, kube: Kube, path: str, on_event: OnEvent, *, name: str, page_size: int = PAGE_SIZE,
                 selector: str = "") -> None:
        self.kube = kube
        self.path = path
        #: A label selector (e.g. "tfjob.dev/job-name": only TFJob pods), for the list and the watch alike.
        self.selector = selector
        self.on_event = on_event
        self.name = name
        self.page_size = page_size
        #: Lists after the first (watch expired or failed): each re-reads the whole collection.
        self.relists = 0
        self._keys: dict[str, Mapping[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._response: Any = None
        self._room = threading.BoundedSemaphore(BACKLOG)
        #: Whether the last watch request was answered with a stream (a break then resumes, not relists).
        self._streamed = False

    async def start(self) -> None:
        """List (raising KubeError if the server refuses, e.g. 403), deliver it, then watch in a thread."""
        self._loop = asyncio.get_running_loop()
        version = await asyncio.to_thread(self._list)
        self._thread = threading.Thread(target=self._run, args=(version,), name=f"informer {self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # the thread may be closing it too
                response.shutdown()

    # -------------------------------------------------------- on the event loop

    def _page(self, token: str) -> list[tuple[str, str]]:
        return [*self._selected(), ("limit", str(self.page_size)), *([("continue", token)] if token else [])]

    def _selected(self) -> list[tuple[str, str]]:
        return [("labelSelector", self.selector)] if self.selector else []

    def _deliver_page(self, body: Mapping[str, Any], seen: set[str]) -> None:
        """One page of a list: ADDED for every new item, MODIFIED for one whose resourceVersion moved, nothing for
        the rest; `seen` collects their keys."""
        for obj in body.get("items") or []:
            key = _key(obj)
            seen.add(key)
            known = self._keys.get(key)
            if known is not None and _version(known) == _version(obj) and _version(obj):
                continue
            self.on_event("MODIFIED" if known is not None else "ADDED", obj)
            self._keys[key] = _identity(obj)

    def _end_list(self, last_page: Mapping[str, Any], seen: set[str]) -> str:
        """After a list's last page: DELETED for what is gone; the list's resourceVersion (every page has it)."""
        for key in [k for k in self._keys if k not in seen]:
            self.on_event("DELETED", self._keys.pop(key))
        return str((last_page.get("metadata") or {}).get("resourceVersion") or "")

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
            self._streamed = False
            try:
                version = self._watch(version)
                failures = 0
                continue
            except _Gone:
                log.info("watch of %s expired (410 Gone): listing again", self.path)
            except Exception as exc:  # the connection broke, the server restarted: resume, else list again
                if self._stop.is_set():
                    return
                failures += 1
                self._stop.wait(min(RELIST_BACKOFF_SECONDS * 2 ** failures, RELIST_MAX_SECONDS))
                if self._streamed and version:
                    log.info("watch of %s broke (%s): resuming from resourceVersion %s", self.path, exc, version)
                    continue
                log.warning("watch of %s failed (%s): listing again", self.path, exc)
            try:
                version = self._relist()
            except (KubeError, RuntimeError) as exc:
                log.warning("listing %s failed (%s); retrying", self.path, exc)
                failures += 1
                self._stop.wait(min(RELIST_BACKOFF_SECONDS * 2 ** failures, RELIST_MAX_SECONDS))

    def _relist(self) -> str:
        version = self._list()
        self.relists += 1
        return version

    def _list(self) -> str:
        """One list, page by page, off the event loop, each page delivered on it; the list's resourceVersion (an
        expired continue token, 410, fails the list: the caller lists again)."""
        assert self._loop is not None
        seen: set[str] = set()
        token = ""
        while True:
            body = _stripped_list(self.kube.request_sync("GET", self.path, query=self._page(token)))
            asyncio.run_coroutine_threadsafe(_call(self._deliver_page, body, seen), self._loop).result(
                RELIST_MAX_SECONDS)
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                break
        return str(asyncio.run_coroutine_threadsafe(_call(self._end_list, body, seen), self._loop).result(
            RELIST_MAX_SECONDS))

    def _watch(self, version: str) -> str:
        """One watch request, until the server ends it; the last resourceVersion seen."""
        api = self.kube.api
        query = [*self._selected(), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(WATCH_SECONDS))]
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
        self._streamed = True
        assert self._loop is not None
        try:
            for line in iter_resp_lines(response.response):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), _stripped(event.get("object") or {})
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


def _stripped(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without metadata.managedFields (no callback reads them; a third of a pod), dropped in the watch
    thread so that events waiting for the event loop do not hold them."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _stripped_list(body: Any) -> dict[str, Any]:
    body = body if isinstance(body, dict) else {}
    for obj in body.get("items") or []:
        _stripped(obj)
    return body


class _Gone(Exception):
    """The server no longer has the history the watch asked for (HTTP 410): list again."""


async def _call(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)
