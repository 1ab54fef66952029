"""get and list: reading objects, with selectors and `limit`/`continue` pages."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ApiError, expired, too_large_resource_version
from ..registry import ResourceType
from ..selectors import Selector, make_predicate
from ..store import ResourceVersionTooOld, Stored
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


def predicate(rt: ResourceType, query: Mapping[str, str]) -> Selector:
    return make_predicate(query.get("labelSelector"), query.get("fieldSelector"), rt.field_selectors, rt.is_custom)


def get(ctx: RestContext, rt: ResourceType, ns: str | None, name: str) -> Stored:
    return ctx.get_stored(rt, ns, name)


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)
LIST_EXPIRED = "The resourceVersion for the provided list is too old."
BLOCK_TIMEOUT = 3.0  # how long the watch cache waits for a resourceVersion it has not reached


def requested_resource_version(query: Mapping[str, str]) -> int:
    """The resourceVersion a LIST must reach (0: any); call after options.validate_list."""
    rv = query.get("resourceVersion", "")
    return int(rv) if rv and not query.get("continue") else 0


async def wait_until_fresh(ctx: RestContext, rv: int) -> None:
    """As the watch cache: wait up to 3 s for a resourceVersion the store has not reached, then 504."""
    if rv <= ctx.store.rv:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BLOCK_TIMEOUT
    while ctx.store.rv < rv and loop.time() < deadline:
        await asyncio.sleep(0.05)
    if ctx.store.rv < rv:
        raise too_large_resource_version(rv, ctx.store.rv)


def _exact(query: Mapping[str, str]) -> bool:
    """Exact: asked for, or the legacy rule (a limit with a non-zero resourceVersion and no match)."""
    match, rv = query.get("resourceVersionMatch", ""), query.get("resourceVersion", "")
    if match == "Exact":
        return True
    return not match and rv not in ("", "0") and int(query.get("limit") or 0) > 0


def list_page(ctx: RestContext, rt: ResourceType, ns: str | None, query: Mapping[str, str]) -> Page:
    """One page of a LIST. The first page is read at the current resourceVersion (or the one asked for
    with resourceVersionMatch=Exact); later pages are read at the first page's, so pages are consistent: from the
    store's snapshot of the first page (kept 5 minutes, as etcd's revisions until compaction), else from the
    watch history while it reaches back."""
    pred = predicate(rt, query)
    cont = query.get("continue")
    after: tuple[str, str] | None = None
    at: int | None = None
    if cont:
        try:
            token = json.loads(base64.urlsafe_b64decode(cont.encode()))
            after = (token["ns"] or "", token["name"])
            at = int(token["rv"])
        except (ValueError, KeyError, TypeError) as e:
            raise ApiError(400, f"continue key is not valid: {e}") from None
    elif _exact(query):
        at = int(query["resourceVersion"])
    limit = int(query.get("limit") or 0)
    if at is None and limit > 0 and pred.only_equalities():
        # The indexes answer the selector exactly: the page and the count, without testing or sorting all
        # (a client polling `limit=1` for remainingItemCount must not cost what the collection holds).
        page, selected = ctx.store.first(rt.key, ns, pred, limit)
        if selected > len(page):
            ctx.store.snapshot(rt.key)
        return _page(page, ctx.store.rv, selected - len(page))
    if at is None:
        snapshot = list(ctx.store.items(rt.key, ns, pred))  # indexes narrow a selected list
        rv = ctx.store.rv
    else:
        try:
            snapshot = ctx.store.items_at(rt.key, at, ns, after)
        except ResourceVersionTooOld:
            raise expired(CONTINUE_EXPIRED if cont else LIST_EXPIRED) from None
        rv = at
    items = [s for s in snapshot if pred(s.obj)]
    start = 0
    if after is not None:
        while (
            start < len(items)
            and ((items[start].obj["metadata"].get("namespace") or ""), items[start].obj["metadata"]["name"]) <= after
        ):
            start += 1
    page = items[start : start + limit] if limit > 0 else items[start:]
    remaining = len(items) - start - len(page) if limit > 0 else 0
    if at is None and remaining > 0:
        ctx.store.snapshot(rt.key)
    elif cont and remaining == 0:
        ctx.store.list_done(rt.key, rv)
    return _page(page, rv, remaining)


def _page(page: list[Stored], rv: int, remaining: int) -> Page:
    """A page read at `rv`, with a continue token when `remaining` objects follow it."""
    next_token = None
    if remaining > 0:
        last = page[-1].obj["metadata"]
        next_token = base64.urlsafe_b64encode(
            json.dumps({"rv": str(rv), "ns": last.get("namespace"), "name": last["name"]}).encode()
        ).decode()
    return Page(page, str(rv), next_token, remaining if next_token else 0)
