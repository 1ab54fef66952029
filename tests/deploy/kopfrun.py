"""Running kopf (as the operator does) against the local API emulator, for the deploy tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf

from tfjob_operator.api import crd


async def install_crd(url: str) -> None:
    """Create the TFJob CRD on the emulator and wait until it serves tfjobs."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                json=crd.generate()) as resp:
            assert resp.status in (200, 201, 409), await resp.text()
        for _ in range(100):
            async with session.get(f"{url}/apis/tfjob.dev/v1") as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("the emulator never served tfjob.dev/v1")


@contextlib.asynccontextmanager
async def running_kopf(url: str, registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings,
                       **kwargs: Any) -> AsyncIterator[None]:
    """kopf.operator with `registry` logged in to `url`; stopped and awaited on exit."""

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url, insecure=True)

    settings.posting.enabled = False
    settings.scanning.disabled = True
    ready, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(kopf.operator(
        registry=registry, settings=settings, clusterwide=True, standalone=True,
        ready_flag=ready, stop_flag=stop, **kwargs,
    ))
    done, _ = await asyncio.wait([task, asyncio.create_task(ready.wait())], timeout=30,
                                 return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises what stopped kopf at start-up
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=30)
