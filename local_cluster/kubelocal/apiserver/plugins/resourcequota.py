"""ResourceQuota admission, as kube-apiserver's: a pod whose creation would take its namespace past a quota's
`spec.hard` is refused with 403 "exceeded quota: NAME, requested: ..., used: ..., limited: ..." (only the
exceeded resources listed), and an admitted pod's usage is recorded in every quota's `status.used`.

Usage is counted from the namespace's live (non-terminal) pods at admission, so a finished or deleted pod
frees its share at once: the work kube-controller-manager's quota controller does by recounting."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from ...resources import GPU, Resources, is_terminal, pod_requests, quantities
from ..admission import AdmissionRequest, Operation
from ..errors import ApiError
from ..store import Key, Store

QUOTA_KEY: Key = ("", "resourcequotas")
POD_KEY: Key = ("", "pods")
#: The pod resources this plugin tracks: its count and its requests (kube-apiserver's pod evaluator).
TRACKED = ("pods", "count/pods", "cpu", "requests.cpu", "memory", "requests.memory", f"requests.{GPU}")


def pod_usage(pod: Mapping[str, Any]) -> Resources:
    """What one pod counts against a quota, by quota resource name."""
    requests = pod_requests(pod)
    usage = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for name in ("cpu", "memory"):
        usage[name] = usage[f"requests.{name}"] = requests.get(name, Decimal(0))
    usage[f"requests.{GPU}"] = requests.get(GPU, Decimal(0))
    return usage


def namespace_usage(pods: Iterable[Mapping[str, Any]]) -> Resources:
    total: Resources = {}
    for pod in pods:
        if not is_terminal(pod):
            for name, value in pod_usage(pod).items():
                total[name] = total.get(name, Decimal(0)) + value
    return total


def exceeded(hard: Mapping[str, Decimal], used: Mapping[str, Decimal], requested: Mapping[str, Decimal]) -> list[str]:
    """The quota's resources that `requested` on top of `used` would take past `hard`, sorted."""
    return sorted(name for name in hard if name in TRACKED and requested.get(name, Decimal(0)) > 0
                  and used.get(name, Decimal(0)) + requested[name] > hard[name])


def format_quantity(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def _listing(values: Mapping[str, Decimal], names: Iterable[str]) -> str:
    return ",".join(f"{name}={format_quantity(values.get(name, Decimal(0)))}" for name in names)


class ResourceQuotaAdmission:
    name = "ResourceQuota"

    def __init__(self, store: Store) -> None:
        self._store = store

    def handles(self, request: AdmissionRequest) -> bool:
        return (request.operation is Operation.CREATE and request.rt.key == POD_KEY
                and request.subresource is None and request.obj is not None)

    def validate(self, request: AdmissionRequest) -> None:
        assert request.obj is not None and request.namespace is not None
        quotas = [stored.obj for stored in self._store.items(QUOTA_KEY, request.namespace)]
        if not quotas:
            return
        requested = pod_usage(request.obj)
        used = namespace_usage(stored.obj for stored in self._store.items(POD_KEY, request.namespace))
        for quota in quotas:
            hard = quantities((quota.get("spec") or {}).get("hard"))
            over = exceeded(hard, used, requested)
            if over:
                meta = request.obj.get("metadata") or {}
                name = meta.get("name") or meta.get("generateName") or ""
                raise ApiError(
                    403,
                    f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                    f"requested: {_listing(requested, over)}, used: {_listing(used, over)}, "
                    f"limited: {_listing(hard, over)}",
                    details={"name": name, "kind": "pods"},
                )
        if request.dry_run:
            return
        after = {name: used.get(name, Decimal(0)) + value for name, value in requested.items()}
        for quota in quotas:
            hard_raw = (quota.get("spec") or {}).get("hard") or {}
            status = {"hard": dict(hard_raw),
                      "used": {name: format_quantity(after.get(name, Decimal(0))) for name in hard_raw}}
            if quota.get("status") != status:
                updated = copy.deepcopy(quota)
                updated["status"] = status
                self._store.write(QUOTA_KEY, updated)
