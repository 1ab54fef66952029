"""A counting reverse proxy between a client (the operator) and an API server: requests as seen on the wire.

Every request is forwarded unchanged (watches stream through) and counted by verb × resource, as kube-apiserver's
request metrics name them ("create pods", "patch tfjobs/status", "watch pods"); writes are also kept one by one
(verb, resource, namespace, name, status code, wall time; a create's name from its body), so a bench can say
which object a write touched. The count is the proxy's, not the client's own: what the API server would be
asked, whatever the client thinks it sent.

    WireProxy("http://127.0.0.1:PORT")   (a child process; its `url` is for the client to use)

`GET /_wire/counts` returns {"counts": {...}, "writes": [[verb, resource, ns, name, code, time, reason], ...]}
(reason: a created Event's, or the state a status patch writes, else "");
`POST /_wire/reset` zeroes both. Not a bench of its own: the benches that count requests run it.
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


def serve(upstream: str, port: int) -> None:
    import asyncio

    from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

    counts: collections.Counter[str] = collections.Counter()
    writes: list[list[Any]] = []

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
        async with session.request(request.method, upstream + request.path_qs, headers=headers,
                                   data=body or None, allow_redirects=False) as upstream_response:
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
            return response

    async def main() -> None:
        # A client that goes away mid-response (a watch it closed, a killed operator) is no error of the proxy's.
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        app = web.Application(client_max_size=64 * 2**20)
        app["session"] = ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None),
                                       auto_decompress=False)
        app.router.add_get("/_wire/counts", wire_counts)
        app.router.add_post("/_wire/reset", wire_reset)
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

    def __init__(self, upstream: str) -> None:
        start = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
                 "from wire_proxy import main; sys.exit(main(sys.argv[1:]))")
        self.proc = subprocess.Popen([sys.executable, "-c", start, "--upstream", upstream],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the API server's URL (http://127.0.0.1:PORT)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.upstream.rstrip("/"), args.port)
    return 0

