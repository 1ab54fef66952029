"""`tfjob operator`: run the kopf handlers of `tfjob_operator.handlers` with settings from `TFJOB_*`."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import kopf

from tfjob_operator.settings import OperatorSettings


def kopf_arguments(settings: OperatorSettings) -> dict[str, object]:
    """Arguments of `kopf.operator` that follow from the settings: scope, peering, liveness endpoint."""
    liveness = (f"http://{settings.liveness_host}:{settings.liveness_port}/healthz"
                if settings.liveness_port else None)
    return {
        "clusterwide": settings.clusterwide,
        "namespaces": list(settings.namespaces),
        "standalone": settings.standalone,
        "priority": settings.priority,
        "peering_name": None if settings.standalone else settings.peering_name,
        "liveness_endpoint": liveness,
    }


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def run_operator(settings: OperatorSettings | None = None, *, stop_flag: threading.Event | None = None) -> int:
    """Run the operator until SIGINT/SIGTERM (or `stop_flag`); 0 on a clean stop."""
    settings = settings or OperatorSettings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import tfjob_operator.handlers  # noqa: F401  (registers the handlers with kopf's default registry)

    if settings.liveness_port and not _port_free(settings.liveness_host, settings.liveness_port):
        # A second operator on one machine (tfjob local beside another) must still run; only the probe is lost.
        logging.getLogger(__name__).warning("liveness port %s is taken: running without /healthz",
                                            settings.liveness_port)
        settings = settings.model_copy(update={"liveness_port": 0})
    memo = kopf.Memo(settings=settings)
    asyncio.run(kopf.operator(memo=memo, stop_flag=stop_flag, **kopf_arguments(settings)))  # type: ignore[arg-type]
    return 0
