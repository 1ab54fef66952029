"""The garbage collector beside the API server, seen through the official client: deletion propagates
after the DELETE call returns (background, foreground, orphan), as on a real cluster."""

from __future__ import annotations

from typing import Any

import kubernetes
from controller_helpers import GC_DELAY, config_map, owner_ref, read, sleeper, unique
from polling import wait_for

NS = "default"
Core = kubernetes.client.CoreV1Api


def _make_family(core: Core, *, block: bool = False) -> tuple[str, str]:
    owner = core.create_namespaced_config_map(NS, config_map(unique("owner")))
    child = core.create_namespaced_config_map(NS, config_map(unique("child"), owners=[owner_ref(owner, block=block)]))
    return owner.metadata.name, child.metadata.name


def _cm(core: Core, name: str) -> dict[str, Any] | None:
    return read(core.read_namespaced_config_map, name, NS)


def test_background_deletion_returns_before_dependents_are_collected(core: Core) -> None:
    owner, child = _make_family(core)
    core.delete_namespaced_config_map(owner, NS, propagation_policy="Background")
    assert _cm(core, owner) is None
    assert _cm(core, child) is not None, f"the dependent vanished inside the DELETE call (gc delay {GC_DELAY}s)"
    wait_for(lambda: _cm(core, child) is None, what="the garbage collector to delete the dependent")


def test_foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone(core: Core) -> None:
    owner, child = _make_family(core, block=True)
    core.delete_namespaced_config_map(owner, NS, propagation_policy="Foreground")
    waiting = _cm(core, owner)
    assert waiting is not None and waiting["metadata"].get("deletionTimestamp")
    assert "foregroundDeletion" in waiting["metadata"]["finalizers"]
    gone_first = wait_for(lambda: _cm(core, child) is None and "child gone", what="the dependent to be deleted")
    assert gone_first
    wait_for(lambda: _cm(core, owner) is None, what="the owner to go once its dependent is gone")


def test_orphan_deletion_leaves_dependents_without_the_owner_reference(core: Core) -> None:
    owner, child = _make_family(core)
    core.delete_namespaced_config_map(owner, NS, propagation_policy="Orphan")
    wait_for(lambda: _cm(core, owner) is None, what="the owner to be deleted after orphaning")
    left = _cm(core, child)
    assert left is not None
    assert not left["metadata"].get("ownerReferences")


def test_a_dependent_created_for_a_missing_owner_is_collected(core: Core) -> None:
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "name": "never-existed",
             "uid": "00000000-0000-0000-0000-000000000000"}
    child = core.create_namespaced_config_map(NS, config_map(unique("dangling"), owners=[ghost])).metadata.name
    wait_for(lambda: _cm(core, child) is None, what="the dependent of a missing owner to be collected")


def test_a_dependent_with_a_surviving_owner_only_loses_the_dead_reference(core: Core) -> None:
    first = core.create_namespaced_config_map(NS, config_map(unique("first")))
    second = core.create_namespaced_config_map(NS, config_map(unique("second")))
    child = core.create_namespaced_config_map(
        NS, config_map(unique("shared"), owners=[owner_ref(first), owner_ref(second)])).metadata.name
    core.delete_namespaced_config_map(first.metadata.name, NS)

    def only_second() -> list[str] | None:
        obj = _cm(core, child)
        refs = [r["name"] for r in (obj or {}).get("metadata", {}).get("ownerReferences") or []]
        return refs if refs == [second.metadata.name] else None

    wait_for(only_second, what="the reference to the deleted owner to be dropped")
    assert _cm(core, child) is not None


def test_pods_of_a_deleted_replicaset_terminate_after_the_delete_returns(
        core: Core, apps: kubernetes.client.AppsV1Api) -> None:
    name = unique("rs")
    template = sleeper()
    template["metadata"]["labels"] = {"rs": name}
    apps.create_namespaced_replica_set(NS, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
                                            "spec": {"replicas": 2, "selector": {"matchLabels": {"rs": name}},
                                                     "template": template}})

    def pods() -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=f"rs={name}").items]

    wait_for(lambda: len(pods()) == 2, what="the ReplicaSet's two pods")
    apps.delete_namespaced_replica_set(name, NS)
    assert len(pods()) == 2, "pods must outlive their owner's DELETE call"
    wait_for(lambda: not pods(), what="the pods to be collected and to terminate")
