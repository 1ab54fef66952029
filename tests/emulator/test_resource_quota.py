"""ResourceQuota admission, as kube-apiserver's: a pod that would take the namespace past a quota is refused
with 403 naming the quota and the exceeded resources; admitted pods' usage shows in the quota's status."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import kubernetes
import pytest

from kubelocal.apiserver.plugins.resourcequota import exceeded


def _pod(name: str, cpu: str = "1", gpu: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpu:
        resources["limits"] = {"nvidia.com/gpu": str(gpu)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "local", "resources": resources}]}}


def _quota(hard: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team"}, "spec": {"hard": hard}}


def _refusal(core: Any, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(kubernetes.client.ApiException) as refused:
        core.create_namespaced_pod("default", body)
    return refused.value.status, json.loads(refused.value.body or "{}")["message"]


@pytest.mark.parametrize(("hard", "used", "requested", "over"), [
    ({"pods": 2}, {"pods": 1}, {"pods": 1}, []),
    ({"pods": 2}, {"pods": 2}, {"pods": 1}, ["pods"]),
    ({"requests.cpu": 2, "pods": 9}, {"requests.cpu": Decimal("1.5")}, {"requests.cpu": 1, "pods": 1},
     ["requests.cpu"]),
    ({"requests.nvidia.com/gpu": 1}, {}, {"requests.nvidia.com/gpu": 0, "pods": 1}, []),
    ({"secrets": 1}, {}, {"pods": 1}, []),  # resources pods do not use are not this pod's concern
])
def test_exceeded_names_only_the_resources_a_create_would_take_past_the_quota(hard, used, requested, over) -> None:
    def dec(m: dict[str, Any]) -> dict[str, Decimal]:
        return {k: Decimal(v) for k, v in m.items()}
    assert exceeded(dec(hard), dec(used), dec(requested)) == over


def test_a_pod_past_the_pod_count_is_refused_with_kube_apiservers_message_and_usage_is_recorded(core) -> None:
    core.create_namespaced_resource_quota("default", _quota({"count/pods": "2", "requests.cpu": "8"}))
    core.create_namespaced_pod("default", _pod("a"))
    core.create_namespaced_pod("default", _pod("b"))
    assert core.read_namespaced_resource_quota("team", "default").status.used == {"count/pods": "2",
                                                                                 "requests.cpu": "2"}
    code, message = _refusal(core, _pod("c"))
    assert (code, message) == (403, 'pods "c" is forbidden: exceeded quota: team, requested: count/pods=1, '
                                     "used: count/pods=2, limited: count/pods=2")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["a", "b"]


def test_gpu_and_cpu_requests_count_against_the_quota_and_a_deleted_pod_frees_its_share(core) -> None:
    core.create_namespaced_resource_quota("default", _quota({"requests.nvidia.com/gpu": "2", "cpu": "1500m"}))
    core.create_namespaced_pod("default", _pod("a", cpu="500m", gpu=2))
    code, message = _refusal(core, _pod("b", cpu="1500m", gpu=1))
    assert code == 403 and message.endswith("requested: cpu=1500m,requests.nvidia.com/gpu=1, used: cpu=500m,"
                                            "requests.nvidia.com/gpu=2, limited: cpu=1500m,requests.nvidia.com/gpu=2")
    core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    core.create_namespaced_pod("default", _pod("b", cpu="1500m", gpu=1))
    assert core.read_namespaced_resource_quota("team", "default").status.used == {
        "requests.nvidia.com/gpu": "1", "cpu": "1500m"}
