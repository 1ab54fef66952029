"""get and list: reading objects, with selectors and `limit`/`continue` pages."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ApiError
from ..registry import ResourceType
from ..selectors import make_predicate
from ..store import Stored
from .context import RestContext


@dataclass
class Page:
    """One page of a LIST: the items, the list's resourceVersion, and how to get the rest."""

    items: list[Stored]
    resource_version: str
    continue_token: str | None = None
    remaining: int = 0


def as_version(rt: ResourceType, stored: Stored) -> bytes | dict[str, Any]:
    """Custom resources are stored once per group; reading another served version relabels apiVersion."""
    if stored.obj.get("apiVersion") == rt.api_version:
        return stored.raw
    return {**stored.obj, "apiVersion": rt.api_version}


def predicate(rt: ResourceType, query: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
    return make_predicate(query.get("labelSelector"), query.get("fieldSelector"), rt.field_selectors, rt.is_custom)


def get(ctx: RestContext, rt: ResourceType, ns: str | None, name: str) -> Stored:
    return ctx.get_stored(rt, ns, name)


def list_page(ctx: RestContext, rt: ResourceType, ns: str | None, query: Mapping[str, str]) -> Page:
    pred = predicate(rt, query)
    items = [s for s in ctx.store.items(rt.key, ns) if pred(s.obj)]
    rv = str(ctx.store.rv)
    start = 0
    cont = query.get("continue")
    if cont:
        try:
            token = json.loads(base64.urlsafe_b64decode(cont.encode()))
            after = (token["ns"] or "", token["name"])
            rv = token["rv"]
        except (ValueError, KeyError, TypeError) as e:
            raise ApiError(400, f"continue key is not valid: {e}") from None
        while (
            start < len(items)
            and ((items[start].obj["metadata"].get("namespace") or ""), items[start].obj["metadata"]["name"]) <= after
        ):
            start += 1
    limit = int(query.get("limit") or 0)
    page = items[start : start + limit] if limit > 0 else items[start:]
    next_token = None
    remaining = len(items) - start - len(page)
    if limit > 0 and remaining > 0:
        last = page[-1].obj["metadata"]
        next_token = base64.urlsafe_b64encode(
            json.dumps({"rv": rv, "ns": last.get("namespace"), "name": last["name"]}).encode()
        ).decode()
    return Page(page, rv, next_token, remaining if next_token else 0)
