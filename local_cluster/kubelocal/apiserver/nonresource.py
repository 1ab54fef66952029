"""Non-resource URLs: /version, health checks, /metrics, discovery (/api, /apis, ...) and OpenAPI v3."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from . import discovery
from .codec import JSON, json_response
from .errors import ApiError
from .rest.context import RestContext
from .store import dumps


def serve(ctx: RestContext, path: str, host_port: str, metrics: CollectorRegistry) -> web.Response:
    reg = ctx.registry
    if path == "/version":
        return json_response(discovery.version_info())
    if path in ("/healthz", "/readyz", "/livez"):
        return web.Response(text="ok", content_type="text/plain")
    if path == "/metrics":  # as kube-apiserver's: Prometheus text (`kubectl get --raw /metrics`)
        return web.Response(body=generate_latest(metrics), headers={"Content-Type": CONTENT_TYPE_LATEST})
    if path == "/api":
        return json_response(discovery.api_versions(host_port))
    if path == "/apis":
        return json_response(discovery.api_group_list(reg))
    parts = [p for p in path.split("/") if p]
    if len(parts) == 2 and parts[0] == "api":
        doc = discovery.resource_list(reg, "", parts[1])
        if doc:
            return json_response(doc)
    if len(parts) == 2 and parts[0] == "apis":
        doc = discovery.api_group(reg, parts[1])
        if doc:
            return json_response(doc)
    if len(parts) == 3 and parts[0] == "apis":
        doc = discovery.resource_list(reg, parts[1], parts[2])
        if doc:
            return json_response(doc)
    if path == "/openapi/v3":
        return json_response(discovery.openapi_v3_index(reg, ctx.openapi_docs))
    if path.startswith("/openapi/v3/"):
        raw = _openapi_doc(ctx, path.removeprefix("/openapi/v3/"))
        if raw is not None:
            return web.Response(
                body=raw,
                content_type=JSON,
                headers={"Cache-Control": "public, immutable", "Expires": "Thu, 01 Jan 2099 00:00:00 GMT"},
            )
    raise ApiError(404, "the server could not find the requested resource")


def _openapi_doc(ctx: RestContext, key: str) -> bytes | None:
    """One group-version's OpenAPI document, built once and cached until the CRDs change."""
    raw = ctx.openapi_docs.get(key)
    if raw is None:
        segs = key.split("/")
        group, version = (
            ("", segs[1])
            if segs[0] == "api" and len(segs) == 2
            else ((segs[1], segs[2]) if segs[0] == "apis" and len(segs) == 3 else (None, None))
        )
        doc = discovery.openapi_v3_doc(ctx.registry, group or "", version) if version else None
        if doc is not None:
            raw = ctx.openapi_docs[key] = dumps(doc)
    return raw
