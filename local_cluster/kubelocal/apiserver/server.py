"""The API server: wires storage, admission, authorization and the request handler into an aiohttp app.

Where things are (the layout of kube-apiserver, in small):
  handler.py        request handling: RequestInfo, authorization, routing a verb to its storage
  codec.py          request and response bodies
  authentication.py who a request is: a ServiceAccount token's account, else the local admin
  tokens.py         ServiceAccount tokens: TokenRequest, verification
  authorization.py  the Authorizer extension point (RBAC for identified callers, then AlwaysAllow)
  admission.py      the admission chain extension point (mutating, then validating plugins)
  strategy.py       per-kind create/update rules, schema validation, pruning, defaults
  rest/             REST storage per verb family: read (get/list), create, update (put/patch), delete
  watch.py          watch streams
  subresources.py   status, finalize, pods/log, pods/binding, pods/eviction
  crd_cleanup.py    the CRD cleanup finalizer (garbage collection and namespaces: kubelocal.controllers)
  nonresource.py    /version, health, discovery, OpenAPI
  store.py          the etcd stand-in: objects, resourceVersions, event history
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import uuid
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from . import objects
from .admission import AdmissionChain, NamespaceLifecycle
from .authorization import AlwaysAllow, Authorizer
from .crd_cleanup import CrdCleanup
from .faults import FaultInjector, LogSource, RequestRecord
from .gcpolicy import GcSettings, IdleCollector
from .handler import RequestHandler
from .plugins import AdmissionWebhooks, BuiltinDefaults, BuiltinValidation, CelValidationRules, ResourceQuotaAdmission
from .rbac import RBACAuthorizer
from .registry import Registry
from .remotecommand import ExecSource
from .rest.context import RestContext
from .store import Store
from .strategy import NS_KEY
from .tokens import ServiceAccountTokens

log = logging.getLogger(__name__)


class ApiServer:
    """A Kubernetes API server in one asyncio process: real HTTP, in-memory storage; ServiceAccount bearer
    tokens authenticate (authentication.py), a request without credentials is the local admin.

    Extension points: `admission.register(plugin)` (see admission.py) and `authorizers` (see
    authorization.py; the first authorizer with an opinion decides).
    """

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 0, watch_cache_size: int = 1000, bookmark_interval: float = 5.0
    ) -> None:
        self.host = host
        self.port = port
        self.url = ""
        self.store = Store(history_size=watch_cache_size)
        self.registry = Registry()
        self.admission = AdmissionChain()
        self.admission.register(NamespaceLifecycle(self.store))
        self.admission.register(BuiltinDefaults())
        self.admission.register(BuiltinValidation())
        self.admission.register(CelValidationRules())
        self.webhooks = AdmissionWebhooks(self.store)
        self.admission.register(self.webhooks)
        self.admission.register(ResourceQuotaAdmission(self.store))  # last, as kube-apiserver orders them
        self.authorizers: list[Authorizer] = [RBACAuthorizer(self.store), AlwaysAllow()]
        #: ServiceAccount tokens: the TokenRequest API issues them, bearer authentication verifies them.
        self.tokens = ServiceAccountTokens(self.store)
        self.faults = FaultInjector()
        self.faults._drop_watches = self._drop_watches
        self.faults._expire_watches = lambda: self._drop_watches(compact=True)
        self.requests: list[RequestRecord] = []
        self.ctx = RestContext(self.store, self.registry, self.admission)
        self.crd_cleanup = CrdCleanup(self.ctx)
        self.handler = RequestHandler(
            self.ctx,
            faults=self.faults,
            requests=self.requests,
            authorizers=self.authorizers,
            tokens=self.tokens,
            host_port=lambda: f"{self.host}:{self.port}",
            bookmark_interval=bookmark_interval,
        )
        self._runner: web.AppRunner | None = None
        self._gc_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.idle_gc: IdleCollector | None = None
        self.store.listeners.append(self.crd_cleanup.on_event)
        for ns in ("default", "kube-system"):
            self._seed_namespace(ns)

    def _seed_namespace(self, name: str) -> None:
        self.store.write(
            NS_KEY,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": objects.timestamp(),
                    "labels": {"kubernetes.io/metadata.name": name},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )

    async def start(self) -> None:
        """Bind the listener; afterwards `.url` is the base URL clients use."""
        self._loop = asyncio.get_running_loop()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handler.handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        self.port = sock.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        self._gc_task = asyncio.create_task(self.crd_cleanup.run(), name="apiserver-crd-cleanup")

    async def serve_socket(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> str:
        """Also serve on an already bound listening socket (one inside the pod network's namespace; TLS for pods);
        its base URL."""
        return await self._add_site(lambda runner: web.SockSite(runner, sock, ssl_context=ssl_context),
                                    ssl_context is not None)

    async def listen_tls(self, context: ssl.SSLContext, *, sock: socket.socket | None = None,
                         host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve HTTPS too, on `sock` (e.g. one in the pod network's namespace) or on host:port; its base URL.
        Clients such as kubectl send bearer tokens only over TLS."""
        if sock is not None:
            return await self.serve_socket(sock, context)
        return await self._add_site(lambda runner: web.TCPSite(runner, host, port, ssl_context=context), True)

    async def _add_site(self, make: Callable[[web.AppRunner], web.BaseSite], tls: bool) -> str:
        if self._runner is None:
            raise RuntimeError("start the API server before adding a listener")
        site = make(self._runner)
        await site.start()
        server = site._server
        assert server is not None
        bound_host, bound_port = server.sockets[0].getsockname()[:2]  # type: ignore[attr-defined]
        return f"{'https' if tls else 'http'}://{bound_host}:{bound_port}"

    def limit_request_log(self, keep: int) -> None:
        """Keep only about the latest `keep` records in `.requests` (for a server that runs for hours; tests
        that read the record leave it whole)."""
        self.handler.requests_limit = keep

    def manage_gc(self, settings: GcSettings = GcSettings()) -> None:
        """Take over the process's garbage collector (gcpolicy.py): for a process that serves for a long
        time, called once start-up is done (`tfjob local up`, `tfjob local`), from any thread; `stop()`
        gives it back."""
        if self._loop is None:
            raise RuntimeError("start the API server before it manages the garbage collector")

        def take_over() -> None:
            if self.idle_gc is None:
                activity = lambda: (self.handler.last_activity, self.handler.started_requests)
                self.idle_gc = IdleCollector(activity, settings)
                self.idle_gc.start()

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            take_over()
        else:  # the collector's task lives on the server's loop
            asyncio.run_coroutine_threadsafe(_call(take_over), self._loop).result(30)

    async def stop(self) -> None:
        """Close every watch stream and the listener."""
        self.ctx.stopping = True
        if self.idle_gc is not None:
            await self.idle_gc.stop()
            self.idle_gc = None
        for _, watcher in self.store.all_watchers():
            watcher.close()
        if self._gc_task:
            self._gc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gc_task
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    @property
    def metrics(self) -> CollectorRegistry:
        """The registry /metrics serves: register a collector (an object with `collect()`) to show its figures."""
        return self.handler.metrics

    def set_log_source(self, source: LogSource | None) -> None:
        """Serve pods/{name}/log from `source` (the kubelet)."""
        self.handler.log_source = source

    def set_exec_source(self, source: ExecSource | None) -> None:
        """Run pods/{name}/exec commands in the container environments `source` (the kubelet) knows."""
        self.handler.exec_source = source

    def _drop_watches(self, *, compact: bool = False) -> int:
        watchers = self.store.all_watchers()

        def drop() -> None:
            if compact:
                self.store.compact()
            for _, watcher in watchers:
                watcher.close(drop=True)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is None or running is self._loop:
            drop()
        else:  # called from a test thread: asyncio queues are not thread-safe
            self._loop.call_soon_threadsafe(drop)
        return len(watchers)


async def _call(function: Callable[[], None]) -> None:
    function()
