"""Request and response bodies: decoding what a client sent, encoding what the server answers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml
from aiohttp import web

from . import protobuf
from .errors import ApiError, is_status, status_json
from .store import dumps

JSON = "application/json"


def truthy(value: str | None) -> bool:
    return value in ("1", "true", "True")


def is_dry_run(query: Mapping[str, str]) -> bool:
    """Whether the request is a dry run (its values are checked by options.validate_*)."""
    return "dryRun" in query


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON body; a Status is written as kube-apiserver writes it (errors.status_json)."""
    raw = body if isinstance(body, bytes) else status_json(body) if is_status(body) else dumps(body)
    return web.Response(body=raw, status=status, content_type=JSON, headers=headers)


def object_response(
    request: web.Request, body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An object in the client's preferred encoding: protobuf when it asks first for protobuf and the kind
    is carried in protobuf here (as kube-apiserver, which answers custom resources in JSON), else JSON."""
    if protobuf.wants_protobuf(request.headers.get("Accept", "")):
        obj = json.loads(body) if isinstance(body, bytes) else body
        try:
            raw = protobuf.encode(obj)
        except protobuf.NotEncodable:
            pass
        else:
            return web.Response(body=raw, status=status, content_type=protobuf.MEDIA_TYPE, headers=headers)
    return json_response(body, status, headers)


def warning_headers(warnings: list[str]) -> dict[str, str] | None:
    """The `Warning: 299 - "..."` header kubectl and client-go print."""
    if not warnings:
        return None
    return {"Warning": ", ".join(f"299 - {json.dumps(w)}" for w in warnings)}


def decode(raw: bytes, ctype: str) -> Any:
    if "protobuf" in ctype:
        return protobuf.decode(raw)
    if "yaml" in ctype:
        return yaml.safe_load(raw)
    return json.loads(raw)


async def read_body(request: web.Request) -> Any:
    """The decoded body; an empty one is a 400."""
    raw = await request.read()
    if not raw:
        raise ApiError(400, "the body of the request was empty")
    return decode(raw, (request.content_type or "").lower())


async def read_body_or_none(request: web.Request) -> Any:
    raw = await request.read()
    return decode(raw, (request.content_type or "").lower()) if raw.strip() else None
