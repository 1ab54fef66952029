"""Which addressing the operator renders TF_CONFIG with: the one the plane it runs against publishes.

A local control plane (`tfjob local up`, `tfjob local`) says how its pods reach each other in the ConfigMap
`kube-public/pod-addressing` (`data.addressing`: `dns` on a pod network, `loopback` where pods share the
machine's network), readable by every caller as kubeadm's `cluster-info` is. A cluster has no such ConfigMap
(a 404, or a 403 where RBAC does not share it): its pods use its DNS. So there is nothing to keep in step by
hand: `TFJOB_ADDRESSING` may be left unset; set, it must agree with the plane, or the operator refuses to start
and says what to change (an operator rendering names nothing resolves would leave every job hanging until the
workers' start-up timeout).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tfjob_operator.controller.settings import Addressing
from tfjob_operator.kube import Kube, KubeError

log = logging.getLogger(__name__)

#: Where a plane publishes its pods' addressing (kubelocal.published writes it).
PUBLISHED_NAMESPACE = "kube-public"
PUBLISHED_NAME = "pod-addressing"
PUBLISHED_PATH = f"/api/v1/namespaces/{PUBLISHED_NAMESPACE}/configmaps/{PUBLISHED_NAME}"
PUBLISHED_REF = f"{PUBLISHED_NAMESPACE}/{PUBLISHED_NAME}"


class AddressingMismatch(ValueError):
    """TFJOB_ADDRESSING contradicts the plane (or the plane's ConfigMap is unreadable as addressing)."""


@dataclass(frozen=True)
class Published:
    """What the plane says: its pods' addressing, and why in words."""

    addressing: Addressing
    detail: str = ""


def parse_published(data: dict[str, str] | None) -> Published:
    """The ConfigMap's data; AddressingMismatch naming the key when it holds no known addressing."""
    value = (data or {}).get("addressing", "")
    try:
        addressing = Addressing(value)
    except ValueError:
        raise AddressingMismatch(
            f"{PUBLISHED_REF}: data.addressing {value!r} is not one of "
            f"{', '.join(a.value for a in Addressing)}; the plane that wrote it is not one this operator knows "
            "(set TFJOB_ADDRESSING explicitly only after fixing or deleting that ConfigMap)") from None
    return Published(addressing, (data or {}).get("detail", ""))


async def read_published(kube: Kube) -> Published | None:
    """The plane's published addressing; None on a cluster (no such ConfigMap, or not readable by us)."""
    try:
        found = await kube.get(PUBLISHED_PATH)
    except KubeError as exc:
        if exc.status in (401, 403):
            return None  # a cluster whose RBAC does not share it: no plane of ours publishes there
        raise
    return None if found is None else parse_published(found.get("data"))


def decide(given: Addressing | None, published: Published | None, server: str = "the API server") -> Addressing:
    """The addressing to render: the plane's (a cluster's: dns), or the given one when it agrees; a given one that
    contradicts it raises AddressingMismatch saying what to change."""
    if published is None:
        if given == Addressing.LOOPBACK:
            raise AddressingMismatch(
                f"TFJOB_ADDRESSING=loopback, but {server} publishes no {PUBLISHED_REF}, so it is a cluster whose "
                "pods reach each other by cluster DNS, never at 127.0.0.1 ports (every job would hang until its "
                "workers' start-up timeout); unset TFJOB_ADDRESSING: the operator follows the plane it runs against "
                "(a `tfjob local up --pod-network off` plane publishes loopback itself)")
        return Addressing.DNS
    if given is not None and given != published.addressing:
        raise AddressingMismatch(
            f"TFJOB_ADDRESSING={given.value}, but the plane at {server} says its pods use "
            f"{published.addressing.value} addressing ({PUBLISHED_REF}: {published.detail or 'no detail'}); with "
            f"{given.value} TF_CONFIG would name peers no pod can reach, and every job would hang until its "
            "workers' start-up timeout; unset TFJOB_ADDRESSING: the operator follows the plane")
    return published.addressing


async def resolve(kube: Kube, given: Addressing | None) -> Addressing:
    """Read what the plane publishes and decide (AddressingMismatch when `given` contradicts it); logs the choice."""
    server = str(getattr(kube.api.configuration, "host", "") or "the API server")
    published = await read_published(kube)
    addressing = decide(given, published, server)
    if published is None:
        log.info("addressing: dns (%s publishes no %s: a cluster, whose pods use its DNS)", server, PUBLISHED_REF)
    else:
        log.info("addressing: %s, as the plane publishes (%s: %s)", addressing.value, PUBLISHED_REF,
                 published.detail)
    return addressing
