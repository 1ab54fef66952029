"""A counting reverse proxy between a client (the operator) and an API server: requests as seen on the wire.

Every request is forwarded unchanged (watches stream through) and counted by verb × resource, as kube-apiserver's
request metrics name them ("create pods", "patch tfjobs/status", "watch pods"); writes are also kept one by one
(verb, resource, namespace, name, status code, wall time; a create's name from its body), so a bench can say
which object a write touched. The count is the proxy's, not the client's own: what the API server would be
asked, whatever the client thinks it sent.

    WireProxy("http://127.0.0.1:PORT")   (a child process; its `url` is for the client to use)
    for_cluster(cluster)                  (either plane: to kube-apiserver over TLS as the plane's admin)

`GET /_wire/counts` returns {"counts": {...}, "writes": [[verb, resource, ns, name, code, time, reason], ...]}
(reason: a created Event's, or the state a status patch writes, else "");
`POST /_wire/reset` zeroes both. `POST /_wire/hold` ends every watch stream it carries (each ends as a server's
timeout ends it) and holds new watch requests; `POST /_wire/release` (JSON `{"upstream": URL}` optional: forward to
another API server from then on) lets them through: a client cut off from its watches for a while, as behind a
partition or a load balancer moving it to another kube-apiserver. Not a bench of its own: the benches that count
requests run it.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
               "proxy-authenticate", "host", "content-length"}
_WRITES = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def classify(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str, str]:
    """(verb, resource[/subresource], namespace, name) of one request, as kube-apiserver's RequestInfo reads it."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return method.lower(), path, "", ""
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method in _WRITES:
        verb = "deletecollection" if method == "DELETE" and not name else _WRITES[method]
    elif query.get("watch") in ("true", "1"):
        verb = "watch"
    else:
        verb = "get" if name else "list"
    return verb, resource, namespace, name


def _body_fields(body: bytes) -> tuple[str, str]:
    """metadata.name and reason of a write's JSON body ("" for each it lacks): a created Event's reason, or the
    `status.state` a status patch writes."""
    try:
        data = json.loads(body)
        reason = data.get("reason") or (data.get("status") or {}).get("state") or ""
        return str((data.get("metadata") or {}).get("name") or ""), str(reason)
    except (ValueError, AttributeError):
        return "", ""


def serve(upstream: str, port: int, tls: tuple[str, str, str] | None = None) -> None:
    """Serve plain HTTP on `port`, forwarding to `upstream` (over TLS with `tls` = CA, client certificate, key)."""
    import asyncio
    import contextlib
    import ssl

    from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

    counts: collections.Counter[str] = collections.Counter()
    writes: list[list[Any]] = []
    target = {"url": upstream}
    held: list[asyncio.Event] = []  # while there is one, watch requests wait for it
    streams: set[Any] = set()  # the upstream responses of the watches being streamed

    async def wire_hold(_: web.Request) -> web.Response:
        if not held:
            held.append(asyncio.Event())
        ended = list(streams)
        for stream in ended:
            stream.close()
        return web.json_response({"ended": len(ended)})

    async def wire_release(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        target["url"] = str(body.get("upstream") or target["url"]).rstrip("/")
        while held:
            held.pop().set()
        return web.json_response({"upstream": target["url"]})

    async def wire_counts(_: web.Request) -> web.Response:
        return web.json_response({"counts": dict(counts), "writes": writes})

    async def wire_reset(_: web.Request) -> web.Response:
        counts.clear()
        writes.clear()
        return web.json_response({})

    async def forward(request: web.Request) -> web.StreamResponse:
        session: ClientSession = request.app["session"]
        verb, resource, namespace, name = classify(request.method, request.path, dict(request.query))
        counts[f"{verb} {resource}"] += 1
        received = time.time()  # a client killed later cannot have sent it after its death
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        if verb == "watch" and held:
            await held[-1].wait()
        try:
            upstream_response = await session.request(request.method, target["url"] + request.path_qs,
                                                      headers=headers, data=body or None, allow_redirects=False)
        except (OSError, ClientError):
            # The API server is not there: the client sees what it would see without the proxy, a closed connection.
            if request.transport is not None:
                request.transport.close()
            raise
        if verb == "watch":
            streams.add(upstream_response)
        async with upstream_response:
            if request.method in _WRITES:
                body_name, reason = _body_fields(body) if request.method in ("POST", "PATCH") else ("", "")
                writes.append([verb, resource, namespace, name or body_name, upstream_response.status, received,
                               reason])
            response = web.StreamResponse(status=upstream_response.status, reason=upstream_response.reason)
            for k, v in upstream_response.headers.items():
                if k.lower() not in HOP_HEADERS:
                    response.headers[k] = v
            await response.prepare(request)
            try:
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # the client went away (a watch it closed, a killed operator)
                pass
            except ClientError:  # a watch ended by /_wire/hold: end it for the client too
                with contextlib.suppress(ConnectionResetError):
                    await response.write_eof()
            finally:
                streams.discard(upstream_response)
            return response

    async def main() -> None:
        # A client that goes away mid-response (a watch it closed, a killed operator) is no error of the proxy's.
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        app = web.Application(client_max_size=64 * 2**20)
        context: ssl.SSLContext | bool = False
        if tls is not None:
            context = ssl.create_default_context(cafile=tls[0])
            context.load_cert_chain(tls[1], tls[2])
        app["session"] = ClientSession(connector=TCPConnector(limit=0, ssl=context), timeout=ClientTimeout(total=None),
                                       auto_decompress=False)
        app.router.add_get("/_wire/counts", wire_counts)
        app.router.add_post("/_wire/reset", wire_reset)
        app.router.add_post("/_wire/hold", wire_hold)
        app.router.add_post("/_wire/release", wire_release)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on http://127.0.0.1:{bound}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class WireProxy:
    """The proxy as a child process (its own GIL: it must not slow the plane it measures): `url` for clients."""

    def __init__(self, upstream: str, tls: tuple[Path, Path, Path] | None = None) -> None:
        """`tls`: the CA, client certificate and key to reach an https `upstream` with."""
        start = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
                 "from wire_proxy import main; sys.exit(main(sys.argv[1:]))")
        extra = ["--tls", *map(str, tls)] if tls else []
        self.proc = subprocess.Popen([sys.executable, "-c", start, "--upstream", upstream, *extra],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"wire proxy did not start: {line!r}")
        self.url = line.split()[-1]

    def read(self) -> tuple[collections.Counter[str], list[list[Any]]]:
        """The counts by "verb resource" and the writes so far."""
        with urllib.request.urlopen(self.url + "/_wire/counts", timeout=60) as response:
            data = json.load(response)
        return collections.Counter(data["counts"]), data["writes"]

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/_wire/reset", method="POST"), timeout=30).close()

    def hold(self) -> int:
        """End every watch stream it carries and hold new watch requests; how many it ended."""
        return int(self._post("/_wire/hold")["ended"])

    def release(self, upstream: str | None = None) -> None:
        """Let the held watches through, to `upstream` (and every request after them) when given."""
        self._post("/_wire/release", {"upstream": upstream} if upstream else None)

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            result: dict[str, Any] = json.load(response)
        return result

    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> WireProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def for_cluster(cluster: Any) -> WireProxy:
    """A proxy in front of either plane's API server (a `LocalClusterThread` or `UpstreamClusterThread`): the
    upstream plane's kube-apiserver is reached over TLS as its admin (`system:masters`), kubelocal's over HTTP.
    The client of the proxy (the operator) speaks plain HTTP to it on both."""
    plane = getattr(cluster.cluster, "plane", None)
    if plane is None:
        return WireProxy(cluster.url)
    pki = plane.layout.pki
    return WireProxy(cluster.url, tls=(pki / "ca.crt", pki / "admin.crt", pki / "admin.key"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the API server's URL (http://127.0.0.1:PORT)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", nargs=3, metavar=("CA", "CERT", "KEY"), help="reach an https upstream with these")
    args = parser.parse_args(argv)
    serve(args.upstream.rstrip("/"), args.port, tuple(args.tls) if args.tls else None)
    return 0

