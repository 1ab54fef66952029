"""Network faults on one pod's link: cut and heal it, or delay and drop its packets (tc netem, or the
in-process relay of `relay.py` on kernels without netem).

A cut takes the bridge end of the pod's veth down: the pod keeps its address and its sockets, and every
packet to or from it is lost, as when a node drops off a real network (peers see timeouts, not resets).
Netem shapes both directions: the pod's `eth0` for what it sends, the bridge end for what it receives,
so a delay of D adds 2·D to a round trip between this pod and any other.
"""

from __future__ import annotations

from kubelocal.network import iproute
from kubelocal.network.available import netem_available
from kubelocal.network.podnet import BRIDGE, PodAttachment, PodNetwork
from kubelocal.network.relay import Relay, packet_socket


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


def shape(
    network: PodNetwork,
    pod: PodAttachment,
    *,
    delay_ms: float = 0.0,
    loss_percent: float = 0.0,
    netem: bool | None = None,
) -> None:
    """Delay each packet to and from the pod by `delay_ms` and drop `loss_percent` of them (replaces any earlier).

    With `netem` None the kernel's netem qdisc is used where it exists, else the in-process relay.
    """
    if delay_ms < 0:
        raise ValueError(f"delay_ms {delay_ms}: must be >= 0")
    if not 0 <= loss_percent <= 100:
        raise ValueError(f"loss_percent {loss_percent}: must be between 0 and 100")
    if netem is None:
        netem = netem_available()[0]
    elif netem and not netem_available()[0]:
        raise iproute.NetworkError(f"cannot shape pod {pod.namespace}/{pod.name}'s packets: {netem_available()[1]}")
    network.undo(pod.uid, "shape")
    if netem:
        _shape_with_netem(network, pod, delay_ms, loss_percent)
    else:
        _shape_with_relay(network, pod, delay_ms, loss_percent)


def unshape(network: PodNetwork, pod: PodAttachment) -> None:
    """Remove the delay and loss `shape` set; a pod without them is left as it is."""
    network.undo(pod.uid, "shape")


def _shape_with_netem(network: PodNetwork, pod: PodAttachment, delay_ms: float, loss_percent: float) -> None:
    params = ["delay", f"{delay_ms:g}ms", "loss", f"{loss_percent:g}%"]
    iproute.tc("qdisc", "replace", "dev", "eth0", "root", "netem", *params, netns=pod.netns)
    iproute.tc("qdisc", "replace", "dev", pod.host_veth, "root", "netem", *params, netns=network.netns)

    def undo() -> None:
        iproute.tc("qdisc", "del", "dev", "eth0", "root", netns=pod.netns, check=False)
        iproute.tc("qdisc", "del", "dev", pod.host_veth, "root", netns=network.netns, check=False)

    network.on_undo(pod.uid, "shape", undo)


def _shape_with_relay(network: PodNetwork, pod: PodAttachment, delay_ms: float, loss_percent: float) -> None:
    """Put the relay between the pod's veth end (taken off the bridge) and a new veth pair on the bridge."""
    number = pod.host_veth.removeprefix("vp")
    inner, outer = f"vd{number}", f"vb{number}"
    # No ARP on the relayed ends: the plane's own stack must not answer for the gateway through them.
    iproute.ip_batch(
        [
            f"link add {inner} type veth peer name {outer}",
            f"link set {inner} arp off",
            f"link set {pod.host_veth} arp off",
            f"link set {outer} master {BRIDGE}",
            f"link set {outer} up",
            f"link set {inner} up",
        ],
        netns=network.netns,
    )
    try:
        pod_side = packet_socket(network.plane_socket("packet"), pod.host_veth)
        bridge_side = packet_socket(network.plane_socket("packet"), inner)
    except Exception:
        iproute.ip("link", "del", inner, netns=network.netns, check=False)
        raise
    relay = Relay(pod_side, bridge_side, delay=delay_ms / 1000, loss=loss_percent / 100).start()
    iproute.ip("link", "set", pod.host_veth, "nomaster", netns=network.netns)

    def undo() -> None:
        relay.stop()
        iproute.ip("link", "set", pod.host_veth, "master", BRIDGE, netns=network.netns, check=False)
        iproute.ip("link", "del", inner, netns=network.netns, check=False)

    network.on_undo(pod.uid, "shape", undo)
