"""The kubelet API a node serves to kube-apiserver (the real one, on the upstream plane): it proxies `kubectl logs`,
`exec`, `attach` and `port-forward` here, as it does to every node's kubelet on port 10250.

kube-apiserver dials the node's InternalIP at `status.daemonEndpoints.kubeletEndpoint.port` over TLS, checks this
server's certificate against the cluster CA (`--kubelet-certificate-authority`) and presents its own client
certificate (`--kubelet-client-certificate`), which this server requires. The node declares
`ExtendWebSocketsToKubelet` (`status.declaredFeatures`), so kube-apiserver passes a WebSocket exec or attach
through as the client sent it rather than translating it to SPDY; the handlers are kubelocal's API server's own
(`kubelocal.apiserver.remotecommand`, `portforward`), the paths and query names the kubelet's:

| path | what |
|---|---|
| `GET /containerLogs/{ns}/{pod}/{container}?follow&previous&tailLines` | a container's log |
| `GET|POST /exec/{ns}/{pod}/{container}?command=…&input&output&error&tty` | a command in the container |
| `GET|POST /attach/{ns}/{pod}/{container}?…` | the running container's output |
| `GET|POST /portForward/{ns}/{pod}?port=…` | the pod's ports |

kubelocal's own API server does not call this: it asks the kubelet in-process (`set_log_source`).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web
from multidict import MultiDict

from kubelocal import containers as ct
from kubelocal.apiserver import portforward, portforward_ws, remotecommand
from kubelocal.apiserver.codec import truthy
from kubelocal.apiserver.errors import ApiError
from kubelocal.apiserver.faults import RECORD
from kubelocal.apiserver.subresources import send_stream

#: The features this kubelet API serves as the real kubelet's does (sorted: the API server checks the order).
DECLARED_FEATURES = ["ExtendWebSocketsToKubelet"]
#: The client allowed in: kube-apiserver's identity towards kubelets (kubeadm's name for it).
APISERVER_CLIENT = "kube-apiserver-kubelet-client"


class PodSource(Protocol):
    """What the server asks the kubelet: a pod it runs, a container's log, a container's process environment."""

    def pod_object(self, namespace: str, pod: str) -> Mapping[str, Any]: ...

    def stream(self, namespace: str, pod: str, container: str | None, *, follow: bool,
               tail_lines: int | None, previous: bool) -> AsyncIterator[bytes]: ...

    def exec_spec(self, namespace: str, pod: str, container: str | None) -> ct.ProcessSpec: ...

    def pod_address(self, namespace: str, pod: str) -> portforward_ws.PodAddress: ...


def _status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "code": code}, status=code)


def _client_allowed(request: web.Request) -> bool:
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    subject = dict(item for rdn in (peer or {}).get("subject", ()) for item in rdn)
    return subject.get("commonName") == APISERVER_CLIENT


class KubeletServer:
    """The kubelet API of one node (or of every node of one agent), served on a socket given to `start`."""

    def __init__(self, source: PodSource, tls: ssl.SSLContext) -> None:
        self.source = source
        self.tls = tls
        self.app = web.Application(middlewares=[self._guard])
        self.app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        for verb in ("GET", "POST"):
            self.app.router.add_route(verb, "/exec/{namespace}/{pod}/{container}", self._exec)
            self.app.router.add_route(verb, "/attach/{namespace}/{pod}/{container}", self._attach)
            self.app.router.add_route(verb, "/portForward/{namespace}/{pod}", self._port_forward)
        self.app.router.add_get("/healthz", self._healthz)
        self._runner: web.AppRunner | None = None

    @staticmethod
    def context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
        """A server context with this serving certificate, requiring a client certificate signed by the CA."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca_file)
        context.load_cert_chain(cert_file, key_file)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def start(self, sock: socket.socket) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, ssl_context=self.tls).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if not _client_allowed(request):
            return _status(403, f"Forbidden: only {APISERVER_CLIENT} may use this kubelet's API")
        request[RECORD] = lambda status: None  # kubelocal's handlers report each response's status here
        try:
            return await handler(request)
        except ApiError as exc:
            return _status(exc.code, exc.message)

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    def _pod(self, request: web.Request) -> Mapping[str, Any]:
        info = request.match_info
        try:
            return self.source.pod_object(info["namespace"], info["pod"])
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0]), reason="NotFound") from None

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        info, query = request.match_info, request.query
        self._pod(request)
        tail = query.get("tailLines")
        stream = self.source.stream(info["namespace"], info["pod"], info["container"],
                                    follow=truthy(query.get("follow")),
                                    tail_lines=int(tail) if tail not in (None, "") else None,
                                    previous=truthy(query.get("previous")))
        try:
            first = await stream.__anext__()
        except StopAsyncIteration:
            first = b""
        except KeyError as exc:
            raise ApiError(400, str(exc.args[0]), reason="BadRequest") from None
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await send_stream(response, first, stream)
        return response

    @staticmethod
    def _as_pods_api(request: web.Request) -> web.Request:
        """The request with the pods API's query names (the kubelet's `input`, `output`, `error` are the API's
        `stdin`, `stdout`, `stderr`) and the container of the path."""
        query: MultiDict[str] = MultiDict()
        names = {"input": "stdin", "output": "stdout", "error": "stderr", "port": "ports"}
        for key, value in request.query.items():
            query.add(names.get(key, key), value)
        if "container" in request.match_info:
            query["container"] = request.match_info["container"]
        return request.clone(rel_url=request.rel_url.with_query(query))

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        return await remotecommand.serve_exec(self._as_pods_api(request), pod, self.source)

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        return await remotecommand.serve_attach(self._as_pods_api(request), pod, self.source)

    async def _port_forward(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        info = request.match_info
        address = self.source.pod_address(info["namespace"], info["pod"])
        return await portforward.serve(self._as_pods_api(request), pod, address)
