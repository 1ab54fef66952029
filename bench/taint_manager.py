"""What a NoExecute-tainted node costs the node lifecycle controller while nothing happens, against how many pods
are cached elsewhere: the process's CPU seconds per wall second over a quiet window.

An API server and the controller alone (no scheduler, no kubelet, whose own work would hide it): N pods bound to
an untainted node, a few on a node with a NoExecute taint they tolerate, then a quiet window. A taint manager that
scans every cached pod on each monitor pass pays for all N; one that looks up the tainted node's pods pays for
those few.

    python bench/taint_manager.py [--pods 4000] [--window 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from kubelocal.apiserver import ApiServerThread
from kubelocal.controllers.node_lifecycle import NodeLifecycleController
from kubelocal.kubeclient import KubeClient
from kubelocal.nodes import make_node


def _pod(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
                     "containers": [{"name": "c", "image": "none", "command": ["true"]}]}}


async def _fill(client: KubeClient, pods: int, on_tainted: int) -> None:
    for node in ("busy", "drained"):
        await client.post("/api/v1/nodes", make_node(node))
    names = [(f"p-{i}", "busy") for i in range(pods)] + [(f"t-{i}", "drained") for i in range(on_tainted)]
    for start in range(0, len(names), 50):
        await asyncio.gather(*(client.post("/api/v1/namespaces/default/pods", _pod(n, node))
                               for n, node in names[start:start + 50]))
    await client.patch("/api/v1/nodes/drained", {"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4000, help="pods cached on the untainted node")
    parser.add_argument("--on-tainted", type=int, default=10, help="pods on the tainted node (all tolerate it)")
    parser.add_argument("--window", type=float, default=10.0, help="quiet seconds measured")
    args = parser.parse_args()
    with ApiServerThread() as api:
        setup = KubeClient(api.url, "bench-setup", max_connections=50)
        api.call(_fill(setup, args.pods, args.on_tainted), timeout=600)
        api.call(setup.close())
        controller = NodeLifecycleController(KubeClient(api.url, "bench-node-lifecycle"), grace=3600.0)
        api.call(controller.start())
        time.sleep(2.0)  # let the first look after the caches filled settle
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(args.window)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        api.call(controller.stop())
        api.call(controller.client.close())
    load = os.getloadavg()[0]
    print(f"pods cached: {args.pods + args.on_tainted} ({args.on_tainted} on the tainted node)")
    print(f"quiet window: {wall:.1f} s; process CPU {cpu * 1000:.0f} ms = {cpu / wall * 1000:.1f} ms per second")
    print(f"SUMMARY pods={args.pods} idle_cpu_ms_per_s={cpu / wall * 1000:.1f} load={load:.2f}")


if __name__ == "__main__":
    main()
