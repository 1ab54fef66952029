"""A Kubernetes API emulator (real HTTP, asyncio) for tests and `tfjob local`; see docs/emulator.md.

async with-style:  server = ApiServer(); await server.start(); ...; await server.stop()
sync:              with ApiServerThread() as api: kubernetes client against api.url
"""

from .faults import FaultInjector, LogSource, RequestRecord
from .server import ApiServer
from .thread import ApiServerThread, write_kubeconfig

__all__ = ["ApiServer", "ApiServerThread", "FaultInjector", "LogSource", "RequestRecord", "write_kubeconfig"]
