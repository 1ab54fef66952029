"""Request handling: parse the URL into RequestInfo, record and fault-inject, authorize, route each
verb to its REST storage or subresource, and turn failures into `Status` bodies."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from . import (
    apply,
    nonresource,
    objects,
    options,
    portforward,
    portforward_ws,
    protobuf,
    remotecommand,
    reviews,
    subresources,
    tokens,
)
from . import patch as patching
from .admission import run_admitted
from .authentication import authenticate
from .authorization import Attributes, Authorizer, Decision, UserInfo, authorize, forbidden
from .codec import json_response, object_response, read_body, read_body_or_none, warning_headers
from .errors import ApiError, already_exists, status_body
from .faults import RECORD, FaultInjector, LogSource, RequestRecord
from .registry import ResourceType
from .requestinfo import RequestInfo, parse_request
from .rest import create, delete, read, update
from .rest.context import RestContext
from .store import dumps
from .strategy import NS_KEY
from .tables import to_table, wants_table
from .watch import serve_watch

log = logging.getLogger(__name__)

#: Pod subresources that stream a session (exec, attach, port-forward) rather than read or write an object.
STREAMING = ("exec", "attach", "portforward")


class RequestHandler:
    """The aiohttp handler for every path."""

    def __init__(
        self,
        ctx: RestContext,
        *,
        faults: FaultInjector,
        requests: list[RequestRecord],
        authorizers: list[Authorizer],
        tokens: tokens.ServiceAccountTokens,
        host_port: Callable[[], str],
        bookmark_interval: float,
    ) -> None:
        self.ctx = ctx
        self.faults = faults
        self.requests = requests
        #: Keep at most about this many records (None: all, as tests read them); a server that runs for hours
        #: must not grow by one record per request forever.
        self.requests_limit: int | None = None
        self.authorizers = authorizers
        #: Signs and verifies ServiceAccount tokens (bearer authentication, the TokenRequest API).
        self.tokens = tokens
        self.host_port = host_port
        self.bookmark_interval = bookmark_interval
        self.log_source: LogSource | None = None
        self.exec_source: remotecommand.ExecSource | None = None
        #: What /metrics serves: the components beside the server register their collectors here.
        self.metrics = CollectorRegistry(auto_describe=False)
        self.started = objects.timestamp()
        #: time.monotonic() when a request last started or finished (watch streams only when they open or end).
        self.last_activity = time.monotonic()
        #: Requests started so far (the idle collector measures the request rate with it).
        self.started_requests = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.last_activity = time.monotonic()
        self.started_requests += 1
        try:
            return await self._handle(request)
        finally:
            self.last_activity = time.monotonic()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        info = parse_request(request.method, request.path, request.query)
        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            if recorded:
                return
            recorded = True
            self.requests.append(
                RequestRecord(
                    method=request.method,
                    verb=info.verb,
                    group=info.group,
                    version=info.version,
                    resource=info.resource,
                    subresource=info.subresource,
                    namespace=info.namespace,
                    name=info.name,
                    user_agent=request.headers.get("User-Agent", ""),
                    status_code=status,
                    path=request.path_qs,
                )
            )
            limit = self.requests_limit
            if limit is not None and len(self.requests) >= 2 * limit:
                del self.requests[:-limit]  # in halves: amortised O(1) per request

        request[RECORD] = record
        try:
            agent = request.headers.get("User-Agent", "")
            delay = self.faults.take_delay(request.method, request.path_qs, agent)
            if delay:
                await asyncio.sleep(delay)
            fail = self.faults.take_failure(request.method, request.path_qs, agent)
            if fail is not None:
                raise ApiError(
                    fail,
                    f"injected fault: HTTP {fail} for {request.method} {request.path}",
                    details={"retryAfterSeconds": 1} if fail == 429 else None,
                )
            response = await self._route(request, info)
        except ApiError as e:
            headers = {"Retry-After": "1"} if e.code == 429 else None
            response = json_response(e.status(), e.code, headers)
        except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
            response = json_response(
                status_body(400, f"the body of the request could not be decoded: {e}", "BadRequest"), 400
            )
        except (ConnectionResetError, asyncio.CancelledError):
            record(499)
            raise
        except Exception as e:  # a bug in the emulator must be visible, as a 500 with the cause
            log.exception("emulator failure on %s %s", request.method, request.path_qs)
            response = json_response(status_body(500, f"emulator error: {e!r}", "InternalError"), 500)
        record(response.status)
        return response

    def _authorize(self, request: web.Request, info: RequestInfo, user: UserInfo) -> None:
        attrs = Attributes.of(info, user, request.path)
        decision, reason = authorize(self.authorizers, attrs)
        if decision is not Decision.ALLOW:
            raise forbidden(attrs, reason)
        if attrs.verb == "get" and attrs.resource == "pods" and attrs.subresource in STREAMING:
            # A WebSocket upgrade is a GET, yet it runs something: kube-apiserver 1.35+
            # (AuthorizePodWebsocketUpgradeCreatePermission) also requires `create`, as for SPDY's POST.
            attrs = dataclasses.replace(attrs, verb="create")
            decision, reason = authorize(self.authorizers, attrs)
            if decision is not Decision.ALLOW:
                raise forbidden(attrs, reason)

    async def _route(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        ctx = self.ctx
        user = authenticate(request.headers, self.tokens, self.authorizers)
        self._authorize(request, info, user)
        path = request.path.rstrip("/") or "/"
        if not info.is_resource:
            return nonresource.serve(ctx, path, self.host_port(), self.metrics)
        assert info.group is not None and info.version is not None and info.resource is not None
        rt = ctx.registry.get(info.group, info.version, info.resource)
        if rt is None:
            raise ApiError(
                404,
                "the server could not find the requested resource",
                details={"group": info.group, "kind": info.resource},
            )
        ns = None if rt.key == NS_KEY else (info.namespace if rt.namespaced else None)
        list_ns = info.namespace if rt.namespaced else None
        if rt.namespaced and info.namespace is None and info.verb not in ("list", "watch", "deletecollection"):
            raise ApiError(404, "the server could not find the requested resource")
        method, query = request.method, request.query
        name, sub = info.url_name, info.subresource
        # Who owns what this request writes (managedFields): fieldManager, else the client's user agent.
        manager = query.get("fieldManager") or request.headers.get("User-Agent", "").split("/")[0] or "unknown"
        if rt.key in reviews.REVIEWS and method == "POST" and name is None:
            body = await read_body(request)
            return object_response(request, reviews.review(ctx.store, self.authorizers, user, rt.plural, body, ns), 201)
        if rt.key == reviews.API_SERVICES and info.verb != "watch":
            # Local APIServices (one per served group-version) are made on the fly; those clients add are stored.
            local = reviews.local_api_service(ctx.registry, self.started, name) if name else None
            if method in ("GET", "HEAD") and name is None:
                added = [s.obj for s in ctx.store.items(rt.key)]
                return self._list_json(
                    request, rt, reviews.api_service_list(ctx.registry, self.started, ctx.store.rv, added))
            if method in ("GET", "HEAD") and local is not None:
                return object_response(request, local)
            if method == "POST" and name is None:
                body = await read_body(request)
                wanted = ((body.get("metadata") if isinstance(body, dict) else None) or {}).get("name")
                if isinstance(wanted, str) and reviews.local_api_service(ctx.registry, self.started, wanted):
                    raise already_exists(rt.group, rt.plural, wanted)
            elif local is not None:
                raise ApiError(405, f"the server does not allow this method on a Local APIService: {method}")
        if rt.key in reviews.REVIEWS:
            raise ApiError(405, f"the server does not allow this method on the requested resource: {method}")
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "the server could not find the requested resource")
        if rt.key == ("", "bindings") and method == "POST":
            body = await read_body(request)
            pods = ctx.registry.get("", "v1", "pods")
            assert pods is not None
            target = ((body or {}).get("metadata") or {}).get("name") or ""
            return json_response(await run_admitted(lambda: subresources.pod_binding(ctx, pods, ns, target, body)), 201)
        if name is None:
            if method in ("GET", "HEAD"):
                if info.verb == "watch":
                    return await serve_watch(ctx, request, rt, list_ns, self.bookmark_interval)
                options.validate_list(query)
                await read.wait_until_fresh(ctx, read.requested_resource_version(query))
                return self._list_response(request, rt, read.list_page(ctx, rt, list_ns, query))
            if method == "POST":
                options.validate_write(query, "CreateOptions")
                body = await read_body(request)
                body_now = [body]

                async def decode_again() -> None:  # create consumes its body (owned): a new round decodes it anew
                    body_now[0] = await read_body(request)

                obj, warnings = await run_admitted(
                    lambda: create.create(ctx, rt, ns, body_now[0], query, user=user, manager=manager, owned=True),
                    again=decode_again)
                return self._written(request, rt, obj, 201, warning_headers(warnings))
            if method == "DELETE":
                opts = await self._delete_options(request)
                pred = read.predicate(rt, query)
                done: dict[str, dict[str, Any]] = {}  # kept across the rounds of run_admitted
                deleted = await run_admitted(
                    lambda: delete.delete_collection(ctx, rt, list_ns, pred, opts, user=user, deleted=done))
                return json_response(
                    {
                        "kind": f"{rt.kind}List",
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(ctx.store.rv)},
                        "items": deleted,
                    }
                )
            raise ApiError(405, f"the server does not allow this method on the requested resource: {method}")
        if sub in STREAMING:
            pod = read.get(ctx, rt, ns, name).obj
            if sub == "exec":
                return await remotecommand.serve_exec(request, pod, self.exec_source)
            if sub == "attach":
                return await remotecommand.serve_attach(request, pod, self.log_source)
            return await portforward.serve(request, pod, self._pod_address(ns, name))
        if sub == "log":
            return await subresources.pod_log(ctx, request, rt, ns, name, self.log_source)
        if sub == "binding":
            body = await read_body(request)
            return json_response(await run_admitted(lambda: subresources.pod_binding(ctx, rt, ns, name, body)), 201)
        if sub == "token":
            if method != "POST":
                raise ApiError(405, f"the server does not allow this method on the requested resource: {method}")
            assert ns is not None
            body = await read_body(request)
            return object_response(request, tokens.token_request(self.tokens, ns, name, body), 201)
        if sub == "eviction":
            body = await read_body(request)
            return json_response(await run_admitted(lambda: subresources.pod_eviction(ctx, rt, ns, name, body)), 201)
        if method in ("GET", "HEAD"):
            stored = read.get(ctx, rt, ns, name)
            if wants_table(request.headers.get("Accept", "")):
                table = to_table(
                    rt,
                    [stored.obj],
                    resource_version=str(ctx.store.rv),
                    include_object=query.get("includeObject", "Metadata"),
                )
                return json_response(table)
            return object_response(request, read.as_version(rt, stored))
        if method == "PUT":
            options.validate_write(query, "UpdateOptions")
            body = await read_body(request)
            obj, warnings, created = await run_admitted(
                lambda: update.update(ctx, rt, ns, name, body, sub, query, user=user, manager=manager))
            return self._written(request, rt, obj, 201 if created else 200, warning_headers(warnings))
        if method == "PATCH":
            raw, ctype = await request.read(), (request.content_type or "").lower()
            options.validate_write(query, "PatchOptions", apply=ctype == patching.APPLY_PATCH, patch=True)
            if ctype == patching.APPLY_PATCH:
                obj, warnings, created = await run_admitted(
                    lambda: apply.apply(ctx, rt, ns, name, raw, sub, query, user=user))
                return self._written(request, rt, obj, 201 if created else 200, warning_headers(warnings))
            obj, warnings = await run_admitted(
                lambda: update.patch(ctx, rt, ns, name, raw, ctype, sub, query, user=user, manager=manager))
            return self._written(request, rt, obj, 200, warning_headers(warnings))
        if method == "DELETE":
            opts = await self._delete_options(request)
            obj, removed = await run_admitted(lambda: delete.delete(ctx, rt, ns, name, opts, user=user))
            return object_response(request, *delete.response(rt, obj, removed, opts))
        raise ApiError(405, f"the server does not allow this method on the requested resource: {method}")

    def _pod_address(self, ns: str | None, name: str) -> portforward_ws.PodAddress:
        """Where the kubelet running the pod reaches its ports: the pod's own IP on the pod network, dialled from
        the plane's namespace (a pod there has a loopback of its own); this host's loopback without a network."""
        if self.exec_source is not None:
            with contextlib.suppress(KeyError):  # not running: dialling the loopback fails as kubelet's dial would
                return self.exec_source.pod_address(ns or "", name)
        return portforward_ws.PodAddress()

    def _written(
        self, request: web.Request, rt: ResourceType, obj: dict[str, Any], status: int,
        headers: dict[str, str] | None,
    ) -> web.Response:
        """The response to a write: the store's own encoding when `obj` is what the store now holds, so one
        encoding serves this response and every watch stream (a dry run, protobuf or another version encode)."""
        meta = obj.get("metadata") or {}
        stored = self.ctx.store.get_stored(rt.key, meta.get("namespace"), meta.get("name") or "")
        if stored is None or stored.obj is not obj or protobuf.wants_protobuf(request.headers.get("Accept", "")):
            return object_response(request, obj, status, headers)
        return json_response(stored.raw, status, headers)

    @staticmethod
    async def _delete_options(request: web.Request) -> dict[str, Any]:
        body = await read_body_or_none(request)
        body_dry_run = (body.get("dryRun") or []) if isinstance(body, dict) else []
        options.validate_delete(request.query, body_dry_run)
        return delete.delete_options(request.query, body)

    @staticmethod
    def _list_json(request: web.Request, rt: ResourceType, listed: dict[str, Any]) -> web.Response:
        if wants_table(request.headers.get("Accept", "")):
            meta = listed["metadata"]
            return json_response(to_table(rt, listed["items"], resource_version=meta["resourceVersion"],
                                          include_object=request.query.get("includeObject", "Metadata")))
        return json_response(listed)

    def _list_response(self, request: web.Request, rt: ResourceType, page: read.Page) -> web.Response:
        if wants_table(request.headers.get("Accept", "")):
            table = to_table(
                rt,
                [s.obj for s in page.items],
                resource_version=page.resource_version,
                include_object=request.query.get("includeObject", "Metadata"),
                continue_token=page.continue_token,
            )
            return json_response(table)
        meta: dict[str, Any] = {"resourceVersion": page.resource_version}
        if page.continue_token:
            meta["continue"] = page.continue_token
            meta["remainingItemCount"] = page.remaining
        if protobuf.wants_protobuf(request.headers.get("Accept", "")):
            items = [s.obj if s.obj.get("apiVersion") == rt.api_version else read.as_version(rt, s) for s in page.items]
            listed = {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}
            return object_response(request, listed)
        head = dumps({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta})
        raws = [
            s.raw if s.obj.get("apiVersion") == rt.api_version else dumps(read.as_version(rt, s)) for s in page.items
        ]
        return web.Response(body=head[:-1] + b',"items":[' + b",".join(raws) + b"]}", content_type="application/json")
