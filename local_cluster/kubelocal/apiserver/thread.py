"""Running the emulator from synchronous code: a background-thread event loop, and a kubeconfig file."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml

from .server import ApiServer

T = TypeVar("T")


class ApiServerThread:
    """Context manager: an ApiServer on its own event loop in a daemon thread (for sync tests and kubectl)."""

    def __init__(self, **apiserver_kwargs: Any) -> None:
        self._kwargs = apiserver_kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="apiserver", daemon=True)
        self.server: ApiServer
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60) -> T:
        """Run a coroutine on the server's loop and return its result."""
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def __enter__(self) -> ApiServerThread:
        self._thread.start()

        async def make() -> ApiServer:
            server = ApiServer(**self._kwargs)
            await server.start()
            return server

        self.server = self.call(make())
        self.url = self.server.url
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.call(self.server.stop(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()


def write_kubeconfig(path: str | Path, url: str, *, namespace: str = "default", context: str = "tfjob-local") -> None:
    """Write a kubeconfig pointing kubectl and clients at `url` (plain HTTP, no credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
