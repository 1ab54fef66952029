"""The two control planes a local cluster can run on, behind one switch: `kubelocal` (the default: the Python API
emulator, controllers and scheduler, pip only, up in a second) or `upstream` (etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from their Go modules, `make upstream`). Both give the same
nodes (the process kubelet, simulated nodes), pod network and kubeconfig layout.

`TFJOB_CONTROL_PLANE` chooses where no option does (the tests' tiers, `tfjob local`). Importing this module
imports no plane: the pytest plugin reads the names where the plane's libraries may be missing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubelocal.cluster import LocalCluster, LocalClusterThread
    from kubelocal.upstream.cluster import UpstreamCluster

CONTROL_PLANES = ("kubelocal", "upstream")
DEFAULT = "kubelocal"
ENV = "TFJOB_CONTROL_PLANE"


def choose(name: str | None = None) -> str:
    """The plane asked for, else $TFJOB_CONTROL_PLANE, else kubelocal; ValueError naming the choices."""
    chosen = name or os.environ.get(ENV) or DEFAULT
    if chosen not in CONTROL_PLANES:
        where = "--control-plane" if name else ENV
        raise ValueError(f"{where} {chosen!r}: expected one of {', '.join(CONTROL_PLANES)}")
    return chosen


def cluster(control_plane: str, **kwargs: Any) -> LocalCluster | UpstreamCluster:
    """A cluster (async context manager) on that plane, with `LocalCluster`'s arguments."""
    if control_plane == "upstream":
        from kubelocal.upstream.cluster import UpstreamCluster

        return UpstreamCluster(**kwargs)
    from kubelocal.cluster import LocalCluster

    return LocalCluster(**kwargs)


def cluster_thread(control_plane: str, **kwargs: Any) -> LocalClusterThread:
    """A cluster on that plane running on a background thread (`with ... as c:`)."""
    if control_plane == "upstream":
        from kubelocal.upstream.cluster import UpstreamClusterThread

        return UpstreamClusterThread(**kwargs)
    from kubelocal.cluster import LocalClusterThread

    return LocalClusterThread(**kwargs)
