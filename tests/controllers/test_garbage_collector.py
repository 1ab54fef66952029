"""The garbage collector beside the API server, seen through the official client."""

from __future__ import annotations

from typing import Any

import kubernetes
from controller_helpers import config_map, owner_ref, read, unique
from polling import wait_for

NS = "default"
Core = kubernetes.client.CoreV1Api


def _make_family(core: Core, *, block: bool = False) -> tuple[str, str]:
    owner = core.create_namespaced_config_map(NS, config_map(unique("owner")))
    child = core.create_namespaced_config_map(NS, config_map(unique("child"), owners=[owner_ref(owner, block=block)]))
    return owner.metadata.name, child.metadata.name


def _cm(core: Core, name: str) -> dict[str, Any] | None:
    return read(core.read_namespaced_config_map, name, NS)


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
