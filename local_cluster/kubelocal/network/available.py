"""Whether this machine can give pods a network of their own, and whether it can shape their packets.

The plane asks once at start: with a pod network it renders the cluster's addressing; without one (not root,
not Linux, no namespaces) it keeps the loopback-port fallback.
"""

from __future__ import annotations

import functools
import os
import secrets
import sys

from kubelocal.network import iproute


def pod_network_available() -> tuple[bool, str]:
    """(True, "") if pod namespaces, veths and bridges can be made here; else (False, why not)."""
    if not sys.platform.startswith("linux"):
        return False, f"not Linux ({sys.platform}): network namespaces are a Linux feature"
    if os.geteuid() != 0:
        return False, "not root: creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
    missing = iproute.tools_missing()
    if missing:
        return False, f"missing tools: {', '.join(missing)} (install iproute2 and util-linux)"
    return _probe()


@functools.cache
def _probe() -> tuple[bool, str]:
    """Make a throwaway namespace holding a bridge and a veth, then remove it."""
    probe = f"klprobe-{secrets.token_hex(3)}"
    try:
        iproute.netns_add(probe)
        iproute.ip_batch(
            ["link add kl0 type bridge", "link add vp1 type veth peer name vq1", "link set vp1 master kl0"],
            netns=probe,
        )
    except iproute.NetworkError as exc:
        return False, f"cannot make a namespace with a bridge and a veth: {exc}"
    finally:
        iproute.netns_delete(probe)
    return True, ""


@functools.cache
def netem_available() -> tuple[bool, str]:
    """(True, "") if the kernel has the netem qdisc (packet delay and loss); else (False, why not)."""
    ok, reason = pod_network_available()
    if not ok:
        return ok, reason
    probe = f"klprobe-{secrets.token_hex(3)}"
    try:
        iproute.netns_add(probe)
        iproute.ip("link", "add", "vp1", "type", "veth", "peer", "name", "vq1", netns=probe)
        iproute.tc("qdisc", "add", "dev", "vp1", "root", "netem", "delay", "1ms", netns=probe)
    except iproute.NetworkError as exc:
        return False, f"no netem qdisc in this kernel (CONFIG_NET_SCH_NETEM): {exc}"
    finally:
        iproute.netns_delete(probe)
    return True, ""
