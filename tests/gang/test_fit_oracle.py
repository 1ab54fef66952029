"""A pod's effective request, by hand from the Kubernetes rules: the independent oracle (k8s_oracle) and the
operator's `resources.pod_requests` must both give the figures written here. Sidecar init containers
(`restartPolicy: Always`) keep running beside the app containers, so they add to them."""

from __future__ import annotations

from typing import Any

import k8s_oracle
import pytest

from tfjob_operator.gang import resources


def c(name: str, cpu: str | None = None, memory: str | None = None, *, limits_only: bool = False,
      sidecar: bool = False) -> dict[str, Any]:
    amounts = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {"name": name, "resources": {("limits" if limits_only else "requests"): amounts}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(containers: list[dict[str, Any]], inits: list[dict[str, Any]] | None = None,
        overhead: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "initContainers": inits or []}
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec}


GI = 2**30

# (case, pod, millicores, memory bytes)
TABLE = [
    ("one app container", pod([c("a", "1", "1Gi")]), 1000, GI),
    ("app containers add up", pod([c("a", "1", "1Gi"), c("b", "500m", "2Gi")]), 1500, 3 * GI),
    ("a larger init container sets the request", pod([c("a", "1", "1Gi")], [c("i", "2", "512Mi")]), 2000, GI),
    ("a sidecar adds to the app containers", pod([c("a", "1", "2Gi")], [c("s", "500m", "1Gi", sidecar=True)]),
     1500, 3 * GI),
    ("an init container runs beside the sidecars started before it",
     pod([c("a", "1")], [c("s", "1", sidecar=True), c("i", "2")]), 3000, 0),
    ("an init container before the sidecar runs alone",
     pod([c("a", "1")], [c("i", "3"), c("s", "1", sidecar=True)]), 3000, 0),
    ("sidecars after the init phase still count while the app runs",
     pod([c("a", "2")], [c("i", "3"), c("s", "2", sidecar=True)]), 4000, 0),
    ("limits only: the request is the limit", pod([c("a", "2", "1Gi", limits_only=True)]), 2000, GI),
    ("pod overhead is added", pod([c("a", "1")], overhead={"cpu": "250m"}), 1250, 0),
]


@pytest.mark.parametrize(("pod_", "millicores", "memory"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_effective_pod_request_follows_the_kubernetes_rules(pod_: dict[str, Any], millicores: int,
                                                            memory: int) -> None:
    oracle = k8s_oracle.effective_request(pod_)
    assert (oracle.get("cpu", 0), oracle.get("memory", 0)) == (millicores, memory)
    ours = resources.pod_requests(pod_)
    assert (ours.get("cpu", 0) * 1000, ours.get("memory", 0)) == (millicores, memory)
