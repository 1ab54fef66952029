"""pods/portforward: not served yet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .errors import ApiError


async def serve(request: web.Request, pod: Mapping[str, Any]) -> web.StreamResponse:
    raise ApiError(400, "pods/portforward is not served by this API server", reason="BadRequest")
