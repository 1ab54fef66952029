"""Which resource types the API server serves, read through its discovery API (as the garbage collector
and the namespace controller of kube-controller-manager do, so custom resources are included)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubelocal.kubeclient import KubeClient

#: Events are never owners and rarely dependents; watching them would cost more than everything else.
SKIPPED = frozenset({("", "events"), ("events.k8s.io", "events")})


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection (or of one object when `name` is given)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        return f"{root}/{name}" if name else root


def parse_resource_list(group: str, version: str, body: Mapping[str, Any]) -> list[ApiResource]:
    """The top-level resources (no subresources) of one APIResourceList."""
    found = []
    for res in body.get("resources") or []:
        if "/" in res["name"]:
            continue
        found.append(ApiResource(group, version, res["kind"], res["name"], bool(res.get("namespaced")),
                                 frozenset(res.get("verbs") or ())))
    return found


async def discover(client: KubeClient) -> list[ApiResource]:
    """Every resource type at its group's preferred version."""
    found = parse_resource_list("", "v1", await client.get("/api/v1"))
    groups = await client.get("/apis")
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("version")
        if not preferred:
            continue
        body = await client.get(f"/apis/{group['name']}/{preferred}")
        found += parse_resource_list(group["name"], preferred, body)
    return found


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def by_kind(resources: list[ApiResource]) -> dict[tuple[str, str], ApiResource]:
    """(group, kind) → resource, for resolving ownerReferences (whatever version they name)."""
    return {(r.group, r.kind): r for r in resources}
