"""What every REST verb shares: the store, the resource registry and the admission chain."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from ..admission import AdmissionChain
from ..errors import not_found
from ..registry import Registry, ResourceType
from ..store import Key, Store, Stored


@dataclass
class RestContext:
    store: Store
    registry: Registry
    admission: AdmissionChain
    # work for the CRD cleanup finalizer (deletes only enqueue, crd_cleanup runs them in order)
    gc_queue: asyncio.Queue[tuple[Any, ...]] = field(default_factory=asyncio.Queue)
    openapi_docs: dict[str, bytes] = field(default_factory=dict)
    next_ip: int = int(ipaddress.IPv4Address("10.96.0.10"))
    stopping: bool = False

    def get_stored(self, rt: ResourceType, ns: str | None, name: str) -> Stored:
        stored = self.store.get_stored(rt.key, ns, name)
        if stored is None:
            raise not_found(rt.group, rt.plural, name)
        return stored

    def rt_for_key(self, key: Key) -> ResourceType | None:
        types = self.registry.by_uid_scope(*key)
        return types[0] if types else None

    def allocate_ip(self) -> str:
        """The next Service cluster IP."""
        self.next_ip += 1
        return str(ipaddress.IPv4Address(self.next_ip))

    def install_crd(self, crd: dict[str, Any]) -> None:
        self.registry.add_crd(crd)
        self.openapi_docs.clear()
