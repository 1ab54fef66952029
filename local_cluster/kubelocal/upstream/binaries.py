"""Where the upstream plane's binaries are: the pinned build's (`kubelocal.upstream.build`, `make upstream`), or the
folder `$TFJOB_UPSTREAM_BIN` names (the build's own override).

`find()` returns the four paths or raises `BinariesMissing`, whose message says what to run; the tests of the
upstream tier skip with that message. `UpstreamError` (the build's) is what every failure of the upstream plane
raises: a message for the user, shown without a traceback.
"""

from __future__ import annotations

from pathlib import Path

from kubelocal.upstream.build import UpstreamError, binaries

__all__ = ["NAMES", "BinariesMissing", "UpstreamError", "find"]

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class BinariesMissing(UpstreamError):
    """The upstream binaries are not built; the message says how to build them."""


def find() -> dict[str, Path]:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, by name; BinariesMissing if not built."""
    try:
        found = binaries("k8s")
    except UpstreamError as exc:
        raise BinariesMissing(str(exc)) from None
    return {name: found[name] for name in NAMES}
