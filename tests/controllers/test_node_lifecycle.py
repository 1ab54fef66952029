"""The node lifecycle controller's taint manager, through the API: a NoExecute taint evicts the pods that do
not tolerate it (marked DisruptionTarget), and spares those that do."""

from __future__ import annotations

from typing import Any

import kubernetes
from controller_helpers import read, sleeper, unique
from polling import wait_for

NS = "default"
Core = kubernetes.client.CoreV1Api
ON_LOSSY: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": "lossy"},
                            "tolerations": [{"key": "lossy", "operator": "Exists", "effect": "NoSchedule"}]}


def _pod(name: str, *tolerations: dict[str, Any]) -> dict[str, Any]:
    spec = {**sleeper()["spec"], **ON_LOSSY}
    # ignores SIGTERM, so it stays Terminating for its 1 s grace period and its conditions can be read
    spec["containers"] = [{**spec["containers"][0], "command": [
        "python", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]}]
    spec["tolerations"] = [*ON_LOSSY["tolerations"], *tolerations]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _phase(core: Core, name: str) -> str | None:
    return ((read(core.read_namespaced_pod, name, NS) or {}).get("status") or {}).get("phase")


def test_a_noexecute_taint_evicts_pods_that_do_not_tolerate_it(core: Core) -> None:
    plain, tolerant = unique("plain"), unique("tolerant")
    core.create_namespaced_pod(NS, _pod(plain))
    core.create_namespaced_pod(NS, _pod(tolerant, {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}))
    for name in (plain, tolerant):
        wait_for(lambda name=name: _phase(core, name) == "Running", what=f"{name} to run on the lossy node")
    node = core.read_node("lossy")
    taints = [t.to_dict() for t in node.spec.taints or []]
    core.patch_node("lossy", {"spec": {"taints": [*taints, {"key": "maintenance", "effect": "NoExecute"}]}})
    try:
        evicted = wait_for(lambda: (p := read(core.read_namespaced_pod, plain, NS)) and
                           p["metadata"].get("deletionTimestamp") and p, what="the taint manager to delete the pod")
        reasons = {c["type"]: c.get("reason") for c in evicted["status"].get("conditions") or []}
        assert reasons.get("DisruptionTarget") == "DeletionByTaintManager"
        wait_for(lambda: read(core.read_namespaced_pod, plain, NS) is None, what="the evicted pod to go")
        tolerated = read(core.read_namespaced_pod, tolerant, NS)
        assert tolerated is not None and not tolerated["metadata"].get("deletionTimestamp")
    finally:
        core.patch_node("lossy", {"spec": {"taints": [{k: v for k, v in t.items() if v is not None}
                                                      for t in taints]}})
        core.delete_namespaced_pod(tolerant, NS, grace_period_seconds=0)
