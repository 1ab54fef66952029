"""`tfjob operator`: run the kopf handlers of `tfjob_operator.serving.handlers` with settings from `TFJOB_*`.

With `TFJOB_LEADER_ELECTION=true` a replica first waits for the Lease (answering `/healthz` and `/metrics`
meanwhile, so a standby passes its probes and its scrape target is up), then runs kopf while it holds it, and
exits 1 if it loses it. With
`TFJOB_WEBHOOK_ENABLED=true` kopf also serves the admission webhooks (`tfjob_operator.serving.webhook`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import kopf
import prometheus_client
from aiohttp import web

from tfjob_operator.api.apigroups import TFJOB_DEV, ApiGroup, KubeflowApi, served_groups
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.kube import Kube, KubeError, RetryPolicy, load_api_client
from tfjob_operator.serving import addressing, leader, webhook

log = logging.getLogger(__name__)

Main = Callable[[], Coroutine[Any, Any, None]]


#: glibc's mallopt parameter for the number of heap arenas (malloc.h: M_ARENA_MAX).
M_ARENA_MAX = -8
#: Heap arenas for the operator's process: the main one and one for every thread besides.
OPERATOR_ARENAS = 2


def limit_malloc_arenas(arenas: int = OPERATOR_ARENAS) -> bool:
    """Cap glibc's heap arenas, as MALLOC_ARENA_MAX does (a MALLOC_ARENA_MAX in the environment wins). glibc gives
    a thread that allocates while another holds an arena an arena of its own, up to 8 per core, and each keeps
    what was freed in it: the operator's API threads decode list pages and pods (tens of threads), so the freed
    pages stay spread over a dozen arenas. Measured at 10,000 jobs: a restart's peak RSS went from 317-320 to
    309-311 MiB. Called before any thread starts; False where there is no glibc (musl, macOS) or it refuses."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return mallopt is not None and mallopt(M_ARENA_MAX, arenas) == 1


def kopf_arguments(settings: OperatorSettings) -> dict[str, object]:
    """Arguments of `kopf.operator` that follow from the settings: scope and liveness endpoint. Never kopf
    peering: leader election (`leader`) picks the one acting replica."""
    liveness = (f"http://{settings.liveness_host}:{settings.liveness_port}/healthz"
                if settings.liveness_port else None)
    return {
        "clusterwide": settings.clusterwide,
        "namespaces": list(settings.namespaces),
        "standalone": True,
        "liveness_endpoint": liveness,
    }


def pod_namespace(settings: OperatorSettings) -> str:
    """This replica's namespace: the setting, else the service account's, else `default` (outside a cluster)."""
    if settings.pod_namespace:
        return settings.pod_namespace
    path = leader.SERVICE_ACCOUNT_DIR / "namespace"
    with contextlib.suppress(OSError):
        return path.read_text().strip() or "default"
    return "default"


def webhook_options(settings: OperatorSettings) -> webhook.WebhookOptions:
    """Where the admission server listens and how it is reached, from the TFJOB_WEBHOOK_* settings."""
    return webhook.WebhookOptions(
        port=settings.webhook_port,
        addr=settings.webhook_host,
        service_name=settings.webhook_service_name,
        service_namespace=pod_namespace(settings) if settings.webhook_service_name else None,
        cert_dir=Path(settings.webhook_cert_dir) if settings.webhook_cert_dir else None,
        config_name=settings.webhook_config_name,
    )


def election_config(settings: OperatorSettings) -> leader.LeaderElectionConfig:
    """The Lease this replica competes for; its identity is the pod name (else host and pid)."""
    identity = settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"
    return leader.LeaderElectionConfig(
        namespace=pod_namespace(settings),
        lease_name=settings.leader_election_lease_name,
        identity=identity,
        lease_duration=settings.leader_election_lease_duration,
        renew_deadline=settings.renew_deadline,
        retry_period=settings.leader_election_retry_period,
        # Only the webhook Service selects the leader label; without a webhook the pod is left alone.
        pod_name=settings.pod_name if settings.webhook_enabled else None,
    )


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    """kopf's settings that must be in place before it starts (the startup handler tunes the rest)."""
    configured = kopf.OperatorSettings()
    # The operator knows its resources; scanning CRDs and namespaces would need cluster-wide RBAC it has no use for.
    configured.scanning.disabled = True
    if settings.webhook_enabled:
        webhook.configure_admission(configured, webhook_options(settings))
    return configured


async def wait_for_tfjob_api(kube: Kube, group: ApiGroup = TFJOB_DEV, *, interval: float = 1.0,
                             report_every: float = 30.0) -> None:
    """Return once the API server serves this group's TFJobs: kopf discovers resources once at start (CRD scanning
    is off), so a CRD installed after the operator would otherwise never be served. While waiting it says why,
    at once and then every `report_every` seconds."""
    path = f"/apis/{group.api_version}"
    waited = 0.0
    while True:
        problem: KubeError | None = None
        try:
            found = await kube.get(path)
        except KubeError as exc:
            found, problem = None, exc
            log.debug("discovery %s: %s", path, exc)
        if any(r.get("name") == group.plural for r in (found or {}).get("resources") or []):
            return
        if waited % report_every < interval:
            log.warning("waiting for the API server to serve %s/%s: %s", path, group.plural,
                        why_not_served(kube, group, problem))
        await asyncio.sleep(interval)
        waited += interval


def why_not_served(kube: Kube, group: ApiGroup, problem: KubeError | None) -> str:
    """Why the API server does not serve the TFJob API yet, and what to do: an unreachable server is called
    unreachable; only a 404 (the group is not there, or has no TFJobs) asks whether the CRD is installed."""
    server = str(getattr(kube.api.configuration, "host", "") or "the API server")
    if problem is not None and problem.status == 0:
        return (f"{server} is unreachable ({problem.message or 'no answer'}); is the cluster up? check the "
                "server address in KUBECONFIG")
    if problem is not None and problem.status in (401, 403):
        return (f"{server} refuses discovery (HTTP {problem.status}{': ' + problem.message if problem.message else ''})"
                "; check the credentials of the kubeconfig or the ServiceAccount")
    if problem is not None and problem.status != 404:
        return f"{server} answers HTTP {problem.status}{': ' + problem.message if problem.message else ''}"
    crd = ("third_party/crds/kubeflow.org_tfjobs.yaml, or the chart's kubeflow.installCRD=true" if group.kubeflow
           else "crds/tfjob.yaml")
    return f"{server} does not serve it; is the TFJob CRD installed? kubectl apply -f {crd}"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def serve_standby_health(host: str, port: int) -> web.AppRunner:
    """`/healthz` for a replica waiting for the Lease (kopf serves it once this replica leads)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"leader": False, "state": "standby"})

    return await _serve(host, port, "/healthz", healthz)


async def serve_standby_metrics(host: str, port: int) -> web.AppRunner:
    """`/metrics` for a replica waiting for the Lease: process metrics only, so its scrape target is up."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=prometheus_client.generate_latest(), headers={
            "Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    return await _serve(host, port, "/metrics", metrics)


async def _serve(host: str, port: int, path: str, handler: Any) -> web.AppRunner:
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner


async def run_elected(settings: OperatorSettings, main: Main, *, api: leader.LeaseApi | None = None,
                      stop_flag: threading.Event | None = None, warm: Main | None = None) -> None:
    """Wait for the Lease, then run `main` while holding it; return on SIGINT/SIGTERM (or `stop_flag`).

    `warm`, when given, runs from the start, leading or not (a warm standby, as controller-runtime's managers
    start their caches before the election): it serves the health and metrics endpoints itself, and the
    replica returns when it ends.

    Raises `leader.LeadershipLost` when the Lease could not be renewed: the caller must exit.
    """
    api = api or leader.LeaseApi.connect()
    config = election_config(settings)
    standby: list[web.AppRunner] = []
    if settings.liveness_port and warm is None:
        standby.append(await serve_standby_health(settings.liveness_host, settings.liveness_port))
    if settings.metrics_port and settings.metrics_port != settings.liveness_port and warm is None:
        try:
            standby.append(await serve_standby_metrics(settings.metrics_host, settings.metrics_port))
        except OSError as exc:  # as when leading: a taken metrics port costs the metrics, not the operator
            log.warning("standby metrics endpoint not started on port %s: %s", settings.metrics_port, exc)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)  # kopf installs its own once it runs

    async def close_standby() -> None:
        while standby:
            await standby.pop().cleanup()

    async def lead() -> None:
        await close_standby()  # kopf's liveness endpoint and the operator's /metrics take the ports over
        await main()

    async def watch_stop_flag() -> None:
        while stop_flag is not None and not stop_flag.is_set():
            await asyncio.sleep(0.2)
        if stop_flag is not None:
            stop.set()

    try:
        if config.pod_name:
            # A restarted ex-leader keeps its pod (and label): drop it so the webhook Service skips this standby.
            await api.label_pod(config.namespace, config.pod_name, None)
        elected = asyncio.create_task(leader.run_as_leader(api, config, lead), name="leader election")
        stopper = asyncio.create_task(stop.wait(), name="stop signal")
        flag = asyncio.create_task(watch_stop_flag(), name="stop flag")
        warming = asyncio.create_task(warm(), name="warm standby") if warm is not None else None
        try:
            await asyncio.wait({elected, stopper, *([warming] if warming else [])},
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stopper, flag):
                task.cancel()
            if not elected.done():
                elected.cancel()  # standby: stop waiting; leader: kopf stops and the Lease is released
            if warming is not None and not warming.done():
                warming.cancel()
            results: list[BaseException | None] = list(await asyncio.gather(
                elected, *([warming] if warming else []), return_exceptions=True))
        if isinstance(results[0], leader.LeadershipLost):
            raise results[0]
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await close_standby()
        await api.close()


def run_operator(settings: OperatorSettings | None = None, *, stop_flag: threading.Event | None = None) -> int:
    """Run the operator until SIGINT/SIGTERM (or `stop_flag`); 0 on a clean stop, 1 when leadership was lost."""
    settings = settings or OperatorSettings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import tfjob_operator.serving.handlers  # registers the handlers with kopf's default registry

    if settings.kubeflow_api != KubeflowApi.OFF:
        tfjob_operator.serving.handlers.register_kubeflow_api()

    if settings.webhook_enabled:
        webhook.register(failure_policy=settings.webhook_failure_policy, kubeflow_api=settings.kubeflow_api)
    if settings.liveness_port and not _port_free(settings.liveness_host, settings.liveness_port):
        # A second operator on one machine (tfjob local beside another) must still run; only the probe is lost.
        log.warning("liveness port %s is taken: running without /healthz", settings.liveness_port)
        settings = settings.model_copy(update={"liveness_port": 0})
    memo = kopf.Memo(settings=settings)
    configured = kopf_settings(settings)

    async def main() -> None:
        api = load_api_client()
        try:
            for group in served_groups(settings.kubeflow_api):
                await wait_for_tfjob_api(Kube(api, RetryPolicy(attempts=1, timeout=settings.request_timeout)), group)
            # TF_CONFIG's addressing follows the plane (AddressingMismatch when TFJOB_ADDRESSING contradicts it).
            chosen = await addressing.resolve(Kube(api, RetryPolicy(timeout=settings.request_timeout)),
                                              settings.addressing)
            memo.settings = settings.model_copy(update={"addressing": chosen})
            memo.addressing_resolved = True
        finally:
            api.close()
        await kopf.operator(memo=memo, settings=configured, stop_flag=stop_flag,  # type: ignore[arg-type]
                            **kopf_arguments(settings))  # type: ignore[arg-type]

    if not settings.leader_election:
        try:
            asyncio.run(main())
        except addressing.AddressingMismatch as exc:
            return refuse(exc)
        return 0
    # A warm standby: kopf and the controller's watches run from the start, and the controller acts once this
    # replica holds the Lease (a failover then needs no list of every job and pod). Not while the webhook makes
    # its own certificate: kopf's managed mode writes it into the webhook configurations, which only the replica
    # the webhook Service selects (the leader) may do; that standby waits cold, starting kopf once it leads.
    warm = not (settings.webhook_enabled and not settings.webhook_cert_dir)
    memo.leading = asyncio.Event() if warm else None
    if warm:  # kopf runs outside the election and takes SIGTERM itself: its cleanup sets this flag
        stop_flag = memo.stopping = stop_flag or threading.Event()

    async def lead() -> None:
        memo.leading.set()
        await asyncio.Event().wait()  # until cancelled: the Lease is lost, or the replica stops

    try:
        asyncio.run(run_elected(settings, lead, stop_flag=stop_flag, warm=main) if warm
                    else run_elected(settings, main, stop_flag=stop_flag))
    except leader.LeadershipLost as exc:
        log.error("leader election: %s; exiting so that only the new leader acts", exc)
        return 1
    except addressing.AddressingMismatch as exc:
        return refuse(exc)
    return 0


def refuse(exc: addressing.AddressingMismatch) -> int:
    """A setting that contradicts the plane: one line on stderr saying what to change, exit 2 (as a bad setting)."""
    print(f"tfjob operator: {exc}", file=sys.stderr, flush=True)
    return 2
