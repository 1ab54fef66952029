"""The restricted Pod Security Standard (Kubernetes v1.30+ "restricted" level) as checks on a pod spec.

Returns human-readable violations; empty means the pod would be admitted by a namespace enforcing `restricted`.
"""

from __future__ import annotations

from typing import Any

_ALLOWED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}
_ALLOWED_CAPABILITIES_ADD = {"NET_BIND_SERVICE"}
_ALLOWED_SECCOMP = {"RuntimeDefault", "Localhost"}


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Every way `pod_spec` breaks the restricted profile (plus readOnlyRootFilesystem, which we also require)."""
    out: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(field):
            out.append(f"spec.{field} must be unset or false")
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _ALLOWED_VOLUME_TYPES:
            out.append(f"volume {volume.get('name')}: type {sorted(kinds - _ALLOWED_VOLUME_TYPES)} is not allowed")
    pod_sc = pod_spec.get("securityContext") or {}
    containers = [
        ("containers", c) for c in pod_spec.get("containers") or []
    ] + [("initContainers", c) for c in pod_spec.get("initContainers") or []]
    if not containers:
        out.append("pod has no containers")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in _ALLOWED_SECCOMP:
        out.append(f"spec.securityContext.seccompProfile.type {pod_seccomp!r} is not allowed")
    for kind, c in containers:
        where = f"{kind}[{c.get('name')}]"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{where}: privileged must be false")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities.drop must include ALL")
        extra = set(caps.get("add") or []) - _ALLOWED_CAPABILITIES_ADD
        if extra:
            out.append(f"{where}: capabilities.add {sorted(extra)} is not allowed")
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{where}: runAsNonRoot must be true (container or pod)")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{where}: runAsUser must not be 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in _ALLOWED_SECCOMP:
            out.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost (container or pod)")
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(f"{where}: readOnlyRootFilesystem must be true")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{where}: hostPort {port['hostPort']} is not allowed")
    return out
