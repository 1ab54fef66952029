"""Network faults on one pod's link: cut and heal it, or delay and drop its packets (tc netem).

A cut takes the bridge end of the pod's veth down: the pod keeps its address and its sockets, and every
packet to or from it is lost, as when a node drops off a real network (peers see timeouts, not resets).
Netem shapes both directions: the pod's `eth0` for what it sends, the bridge end for what it receives,
so a delay of D adds 2·D to a round trip between this pod and any other.
"""

from __future__ import annotations

from kubelocal.network import iproute
from kubelocal.network.available import netem_available
from kubelocal.network.podnet import PodAttachment, PodNetwork


def cut(network: PodNetwork, pod: PodAttachment) -> None:
    """Partition the pod: nothing reaches it or leaves it until `heal`."""
    iproute.ip("link", "set", pod.host_veth, "down", netns=network.netns)


def heal(network: PodNetwork, pod: PodAttachment) -> None:
    """Undo `cut`: the pod's link carries packets again."""
    iproute.ip("link", "set", pod.host_veth, "up", netns=network.netns)


def is_cut(network: PodNetwork, pod: PodAttachment) -> bool:
    """Whether the pod's link is cut."""
    (link,) = iproute.ip_json("link", "show", "dev", pod.host_veth, netns=network.netns)
    return "UP" not in link.get("flags", [])


def shape(network: PodNetwork, pod: PodAttachment, *, delay_ms: float = 0.0, loss_percent: float = 0.0) -> None:
    """Delay each packet to and from the pod by `delay_ms` and drop `loss_percent` of them (replaces any earlier)."""
    if delay_ms < 0:
        raise ValueError(f"delay_ms {delay_ms}: must be >= 0")
    if not 0 <= loss_percent <= 100:
        raise ValueError(f"loss_percent {loss_percent}: must be between 0 and 100")
    ok, reason = netem_available()
    if not ok:
        raise iproute.NetworkError(f"cannot shape pod {pod.namespace}/{pod.name}'s packets: {reason}")
    params = ["delay", f"{delay_ms:g}ms", "loss", f"{loss_percent:g}%"]
    iproute.tc("qdisc", "replace", "dev", "eth0", "root", "netem", *params, netns=pod.netns)
    iproute.tc("qdisc", "replace", "dev", pod.host_veth, "root", "netem", *params, netns=network.netns)


def unshape(network: PodNetwork, pod: PodAttachment) -> None:
    """Remove the delay and loss `shape` set; a pod without them is left as it is."""
    iproute.tc("qdisc", "del", "dev", "eth0", "root", netns=pod.netns, check=False)
    iproute.tc("qdisc", "del", "dev", pod.host_veth, "root", netns=network.netns, check=False)
