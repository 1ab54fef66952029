"""`tfjob local up`: the local control plane alone (no operator), serving until interrupted."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from kubelocal import planes
from kubelocal.cluster import LocalCluster
from kubelocal.nodes import NodeSpecError, describe_nodes
from kubelocal.published import NAME, NAMESPACE
from kubelocal.upstream.binaries import UpstreamError
from kubelocal.upstream.cluster import UpstreamCluster
from tfjob_operator.api.crd import CRD_PATH, KUBEFLOW_CRD_PATH
from tfjob_operator.client.local.image import local_images, worker_image_defaults

EXIT_USAGE = 2
REQUEST_LOG = 10_000  # requests `tfjob local up` remembers (the test hook; nothing reads it here)
PUBLISHED = f"{NAMESPACE}/{NAME}"


def run_local_up(port: int, kubeconfig: Path, nodes: str | None, workdir: Path, *, kubeflow: bool = False,
                 sim_speed: float = 1.0, pod_network: str = "auto", control_plane: str = "kubelocal") -> int:
    """Start a local cluster on the chosen control plane with the TFJob CRD (and Kubeflow's, with `kubeflow`), write
    a kubeconfig for it, serve until SIGINT/SIGTERM."""
    crds = (CRD_PATH, KUBEFLOW_CRD_PATH) if kubeflow else (CRD_PATH,)
    if not sim_speed > 0:
        print(f"error: --sim-speed {sim_speed:g}: must be a positive number (simulated seconds per wall second)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        cluster = planes.cluster(control_plane, nodes=nodes, workdir=workdir, port=port, crds=crds,
                                 image=worker_image_defaults(), images=local_images(), sim_speed=sim_speed,
                                 pod_network=pod_network)
    except (NodeSpecError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UpstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_serve(cluster, Path(kubeconfig)))


async def _serve(cluster: LocalCluster | UpstreamCluster, kubeconfig: Path) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await cluster.start()
        except OSError as exc:
            print(f"error: cannot start the API server on port {cluster.port}: {exc.strerror or exc} "
                  "(choose another with --port, or 0 for any free port)", file=sys.stderr)
            return 1
        except UpstreamError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if isinstance(cluster, LocalCluster):
            # a long-running server: full collections off the request path, and a bounded record of requests
            cluster.apiserver.manage_gc()
            cluster.apiserver.limit_request_log(REQUEST_LOG)
        try:
            kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            cluster.write_kubeconfig(kubeconfig)
            print(_banner(cluster, kubeconfig), flush=True)
            await stop.wait()
            print("stopping: ending every pod process and the API server", flush=True)
        finally:
            await cluster.stop()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0


def _banner(cluster: LocalCluster | UpstreamCluster, kubeconfig: Path) -> str:
    nodes = "\n".join("  " + line for line in describe_nodes(cluster.nodes).splitlines())
    network = cluster.network
    # The operator follows the plane's addressing (kube-public/pod-addressing): no setting to keep in step. On the
    # pod network it runs in the plane's namespace, as `tfjob local` runs it, to read the chief's /metrics at pod
    # IPs (from this machine's own namespace no pod IP is reachable).
    operator = f"nsenter --net={network.netns_path} tfjob operator" if network else "tfjob operator"
    parts = ("(API emulator, controllers, scheduler stand-in, process kubelet)" if isinstance(cluster, LocalCluster)
             else "(etcd, kube-apiserver, kube-controller-manager, kube-scheduler; process kubelet)")
    return (
        f"Local Kubernetes control plane at {cluster.url} {parts}\n"
        f"Nodes:\n{nodes}\n"
        + "".join(f"TFJob CRD installed from {path}\n" for path in cluster.crds) +
        f"Pods run as processes on this machine; their files live under {cluster.workdir}\n"
        + (f"Pod network: each pod has its own IP (10.244.0.0/16) and cluster DNS (10.96.0.10); in-cluster "
           f"clients reach the API at https://10.96.0.1:443 ({network.net.netns})\n" if network
           else f"No pod network ({cluster.pod_network_reason}): pods share this machine's network\n") +
        f"Memory limits (resources.limits.memory): {cluster.kubelet.memory.why}\n"
        f"Pods address each other by {'dns' if network else 'loopback'} (published in {PUBLISHED}; the operator "
        "follows it, TFJOB_ADDRESSING unset)\n"
        f"Kubeconfig written to {kubeconfig}; use it with:\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        f"  kubectl get nodes\n"
        f"  {operator} &   # the operator, on this machine\n"
        + ("  python examples/helm_local.py install       # or the chart's operator, as a pod\n" if network
           else "") +
        ("" if isinstance(cluster, LocalCluster) else
         "  kubectl apply -f examples/claims/tfjob-shared.yaml   # the claim the examples mount\n") +
        "  kubectl apply -f examples/mnist-cpu.yaml\n"
        "Press Ctrl-C to stop."
    )
