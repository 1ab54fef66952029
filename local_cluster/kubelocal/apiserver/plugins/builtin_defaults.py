"""Defaulting of the built-in workload kinds the operator and the chart use (kube's `SetDefaults_*`):
what a client reads back after a create is what a real cluster would return."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import objects
from ..admission import AdmissionRequest, Operation


def default_template_spec(spec: dict[str, Any]) -> None:
    """SetDefaults_PodSpec for a pod template (the pod-only admission defaults come when the pod is made)."""
    pod_spec = copy.deepcopy(spec)
    objects.default_pod_spec(pod_spec)
    for key in ("tolerations", "priority", "preemptionPolicy"):
        if key not in spec:
            pod_spec.pop(key, None)
    spec.clear()
    spec.update(pod_spec)


def _template(obj: dict[str, Any]) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_template_spec(template["spec"])


def default_deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template(obj)


def default_replicaset(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    _template(obj)


def default_job(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("manualSelector"):
        spec.pop("manualSelector", None)
    _template(obj)


def default_service(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    if old is not None:
        # an update that leaves the allocated IPs out keeps them (what `kubectl replace` and Helm rely on)
        old_spec = old.get("spec") or {}
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if not spec.get(key) and old_spec.get(key):
                spec[key] = copy.deepcopy(old_spec[key])


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("apps", "deployments"): default_deployment,
    ("apps", "replicasets"): default_replicaset,
    ("batch", "jobs"): default_job,
}


class BuiltinDefaults:
    name = "BuiltinDefaults"

    def handles(self, request: AdmissionRequest) -> bool:
        return (request.operation in (Operation.CREATE, Operation.UPDATE) and request.subresource is None
                and request.obj is not None
                and (request.rt.key in DEFAULTERS or request.rt.key == ("", "services")))

    def admit(self, request: AdmissionRequest) -> None:
        assert request.obj is not None
        if request.rt.key == ("", "services"):
            default_service(request.obj, request.old)
        else:
            DEFAULTERS[request.rt.key](request.obj)
