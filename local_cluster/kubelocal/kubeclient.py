"""A small asyncio Kubernetes REST client and informer for the scheduler stand-in and the process kubelet.

They talk to the API server over HTTP like any other client (so every request they make is visible
and subject to the server's rules); this module keeps that plumbing out of their logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp
from prometheus_client.core import CounterMetricFamily, Metric

from kubelocal.apiserver.selectors import field_value
from kubelocal.times import format_time

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: status code and the server's Status message."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


class KubeClient:
    """JSON over HTTP to one API server, with a User-Agent naming the component; over HTTPS with `tls` (the CA to
    trust and, for a client certificate, the identity it presents)."""

    def __init__(self, base_url: str, user_agent: str, *, max_connections: int = 32,
                 tls: ssl.SSLContext | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.user_agent = user_agent
        self.tls = tls
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self.tls or True),
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Any:
        """Send one request; the decoded JSON answer, or ApiError."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method, self.base_url + path, data=data, params=params, headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            raw = await resp.read()
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = raw.decode(errors="replace")
            if resp.status >= 300:
                raise ApiError(resp.status, method, path, decoded)
            return decoded

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> Any:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: Any = None) -> Any:
        return await self.request("DELETE", path, body=body)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class SharedDecoder:
    """Decodes watch event lines, once for every informer of this thread that receives the same line.

    The API server encodes an event once for all its watchers, so the controllers, the scheduler and the
    kubelet, each watching pods, receive the same bytes: they get the same decoded object, as client-go's
    shared informers hand one object to every handler. Informers and handlers must not change the objects
    they are given (none does: they read them, and copy before building a write).
    """

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._recent: dict[bytes, Any] = {}

    def decode(self, line: bytes) -> Any:
        decoded = self._recent.get(line)
        if decoded is None:
            decoded = self._recent[line] = json.loads(line)
            if len(self._recent) > self.size:  # forget the oldest: its copies have all arrived by now
                del self._recent[next(iter(self._recent))]
        return decoded


_decoders = threading.local()


def shared_decoder() -> SharedDecoder:
    """The decoder of the calling thread (informers of one event loop share it; no locking needed)."""
    decoder: SharedDecoder | None = getattr(_decoders, "decoder", None)
    if decoder is None:
        decoder = _decoders.decoder = SharedDecoder()
    return decoder


class FieldIndex:
    """The keys of cached objects by the value of one field (client-go's indexer, e.g. pods by `spec.nodeName`).

    The value is the one a field selector compares with (`field_value`, as the API server's own field indexes
    read it), so an index answers what `fieldSelector=PATH=VALUE` would. Keys keep their insertion order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._keys: dict[str, dict[tuple[str, str], None]] = {}

    def update(self, key: tuple[str, str], old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Move one object from its old version's value to its new one's (None: absent)."""
        before = None if old is None else field_value(old, self.path)
        after = None if new is None else field_value(new, self.path)
        if before == after:
            return
        if before is not None:
            keys = self._keys.get(before)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._keys[before]
        if after is not None:
            self._keys.setdefault(after, {})[key] = None

    def keys(self, value: str) -> list[tuple[str, str]]:
        return list(self._keys.get(value, ()))


class Informer:
    """Lists then watches a collection, keeps a cache, and calls handler(event_type, obj) per change.

    Re-lists on 410 Gone (synthesising DELETED for objects that vanished meanwhile) and resumes the
    watch from the last seen resourceVersion after a dropped connection. Watch events are decoded through
    the thread's SharedDecoder: cached objects are shared with the other informers, and read-only.
    `index_fields` name fields to index the cache by (`by_field`), kept current before the handler runs.
    """

    def __init__(
        self,
        client: KubeClient,
        path: str,
        handler: Callable[[str, dict[str, Any]], None],
        *,
        params: Mapping[str, str] | None = None,
        index_fields: tuple[str, ...] = (),
        watch_timeout: int = 300,
        retry_delay: float = 0.2,
    ) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.params = dict(params or {})
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.indexes = {path: FieldIndex(path) for path in index_fields}
        self.synced = asyncio.Event()
        self._resource_version = ""

    async def run(self) -> None:
        """Forever: list, then watch; cancel the task to stop."""
        while True:
            try:
                if not self._resource_version:
                    await self._relist()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except _Gone:
                self._resource_version = ""
            except (TimeoutError, aiohttp.ClientError, ApiError, ValueError) as exc:
                log.debug("informer %s: %s; retrying", self.path, exc)
                await asyncio.sleep(self.retry_delay)

    async def _relist(self) -> None:
        listing = await self.client.get(self.path, self.params)
        fresh = {}
        for item in listing.get("items") or []:
            fresh[object_key(item)] = item
        for key, old in list(self.cache.items()):
            if key not in fresh:
                self._store(key, None)
                self.handler("DELETED", old)
        for key, obj in fresh.items():
            previous = self._store(key, obj)
            if previous is None:
                self.handler("ADDED", obj)
            elif (previous.get("metadata") or {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.handler("MODIFIED", obj)
        self._resource_version = (listing.get("metadata") or {}).get("resourceVersion") or ""
        self.synced.set()

    async def _watch(self) -> None:
        params = {
            **self.params,
            "watch": "true",
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=self.watch_timeout + 30)
        async with self.client.session.get(self.client.base_url + self.path, params=params, timeout=timeout) as resp:
            if resp.status == 410:
                raise _Gone()
            if resp.status >= 300:
                raise ApiError(resp.status, "WATCH", self.path, await resp.text())
            buffer = b""
            decoder = shared_decoder()
            async for chunk in resp.content.iter_any():
                # One split per chunk: a burst arrives as one large chunk of many events.
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        self._on_line(decoder.decode(line))

    def _on_line(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise ApiError(int(obj.get("code") or 500), "WATCH", self.path, obj)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._resource_version = rv
        if kind == "BOOKMARK":
            return
        self._store(object_key(obj), None if kind == "DELETED" else obj)
        self.handler(str(kind), obj)

    def _store(self, key: tuple[str, str], obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """Put (None: remove) one object in the cache and its indexes; the version it replaces."""
        old = self.cache.pop(key, None) if obj is None else self.cache.get(key)
        if obj is not None:
            self.cache[key] = obj
        for index in self.indexes.values():
            index.update(key, old, obj)
        return old

    def by_field(self, path: str, value: str) -> list[dict[str, Any]]:
        """The cached objects whose field (one of `index_fields`) has this value, without a scan."""
        return [self.cache[key] for key in self.indexes[path].keys(value)]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for the event at most `timeout` seconds; True if it was set.

    Not `asyncio.wait_for`: on Python 3.11 it can swallow a cancellation that races with the inner
    wait finishing, which left a stopping loop running forever.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False


def now_rfc3339() -> str:
    return format_time()


async def post_event(client: KubeClient, obj: Mapping[str, Any], kind: str, reason: str, message: str, *,
                     component: str, host: str | None = None) -> None:
    """Record a core/v1 Event about a namespaced object; failures are ignored, as components do."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    now = now_rfc3339()
    source = {"component": component, **({"host": host} if host else {})}
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": ns},
        "involvedObject": {"apiVersion": obj.get("apiVersion") or "v1", "kind": obj.get("kind") or "Pod",
                           "name": meta.get("name"), "namespace": ns, "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": kind, "source": source,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component, "reportingInstance": host or component,
    }
    with contextlib.suppress(ApiError, OSError, asyncio.TimeoutError):
        await client.post(f"/api/v1/namespaces/{ns}/events", event)


class EventRecorder:
    """Records Events in the background, as client-go's event broadcaster does: the component never waits for
    one; at most `workers` posts are in flight, and while `max_queued` wait, new ones are dropped.

    Dropped Events are counted (`dropped`, and `kubelocal_events_dropped_total` for a metrics registry this is
    registered with) and reported on stderr (a WARNING): at the first drop, then at most once per `log_interval`
    seconds while dropping goes on, with the count since the last report. client-go logs each drop; a burst of
    thousands would flood the terminal the person is watching."""

    def __init__(self, client: KubeClient, component: str, *, workers: int = 4, max_queued: int = 1000,
                 log_interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.component = component
        self.workers = workers
        self.max_queued = max_queued
        self.log_interval = log_interval
        self.clock = clock
        self.dropped = 0
        self._unreported = 0
        self._next_report = float("-inf")
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], str, str, str, str | None]] = asyncio.Queue(max_queued)
        self._tasks: list[asyncio.Task[None]] = []

    def record(self, obj: Mapping[str, Any], kind: str, reason: str, message: str, *, host: str | None = None) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._post(), name=f"{self.component}-events")
                           for _ in range(self.workers)]
        try:
            self._queue.put_nowait((obj, kind, reason, message, host))
        except asyncio.QueueFull:
            self._drop()

    def _drop(self) -> None:
        self.dropped += 1
        self._unreported += 1
        now = self.clock()
        if now >= self._next_report:
            log.warning("%s: dropped %d Event(s) since the last report, %d in all: %d were already waiting "
                        "to be posted", self.component, self._unreported, self.dropped, self.max_queued)
            self._unreported = 0
            self._next_report = now + self.log_interval

    def collect(self) -> Iterator[Metric]:
        """The dropped count as a Prometheus counter (prometheus_client's custom-collector protocol)."""
        family = CounterMetricFamily("kubelocal_events_dropped", "Events a component dropped because too many "
                                     "were waiting to be posted.", labels=["component"])
        family.add_metric([self.component], self.dropped)
        yield family

    async def _post(self) -> None:
        while True:
            obj, kind, reason, message, host = await self._queue.get()
            await post_event(self.client, obj, kind, reason, message, component=self.component, host=host)

    async def close(self) -> None:
        """Stop posting; Events still queued are dropped (the component is going away)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


class _Gone(Exception):
    """The server no longer keeps the resourceVersion we resume from: list again."""
