"""Pure rules kube-apiserver applies to objects: timestamps, names, defaults for pods and services,
generation bumps, and which pod spec changes an update may make."""

from __future__ import annotations

import copy
import datetime as dt
import json
import secrets
import time
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from kubelocal.times import format_time, parse_time

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # as apiserver's generateName suffix alphabet

#: What a pod update may change in spec (the message Kubernetes returns when anything else changed).
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


_last_stamp: tuple[int, str] = (0, "")


def timestamp(moment: dt.datetime | None = None) -> str:
    """RFC 3339 with second precision, as metav1.Time serialises (now's is formatted once a second: every
    write stamps it, and strftime was a visible part of a create)."""
    global _last_stamp
    if moment is not None:
        return format_time(moment)
    second = int(time.time())
    if _last_stamp[0] != second:
        _last_stamp = (second, format_time(dt.datetime.fromtimestamp(second, dt.UTC)))
    return _last_stamp[1]


def parse_timestamp(text: str) -> dt.datetime:
    moment = parse_time(text)
    if moment is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    return moment


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def same_json(a: Any, b: Any) -> bool:
    """Whether two values serialise alike: Python's == first (it tells most writes apart without encoding
    anything), then the canonical JSON, which also tells `1` from `true` and `1.0`."""
    return bool(a == b) and canonical(a) == canonical(b)


def generation_changed(old: dict[str, Any], new: dict[str, Any], *, custom: bool, has_status: bool) -> bool:
    """Whether an update bumps metadata.generation: spec changes for built-ins; for custom resources any
    change outside metadata (and outside status when the CRD has a status subresource)."""
    if not custom:
        return not same_json(old.get("spec"), new.get("spec"))
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if has_status else set())
    strip = lambda o: {k: v for k, v in o.items() if k not in skip}
    return not same_json(strip(old), strip(new))


def _qos_class(spec: dict[str, Any]) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and str(req[r]) != str(lim[r])):
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def canonical_quantity(value: Any) -> Any:
    """Quantities are strings on the wire, as kube-apiserver serialises them (`1` → "1", `0.5` → "500m")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _canonical_quantities(resources: dict[str, Any] | None) -> None:
    for name, value in list((resources or {}).items()):
        resources[name] = canonical_quantity(value)  # type: ignore[index]


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image") or ""
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    c.setdefault("imagePullPolicy", "IfNotPresent" if tagged and not image.endswith(":latest") else "Always")
    res = c.setdefault("resources", {})
    _canonical_quantities(res.get("limits"))
    _canonical_quantities(res.get("requests"))
    limits = res.get("limits") or {}
    if limits:
        requests = res.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)  # requests default to limits
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref is not None:
            field_ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: dict[str, Any]) -> None:
    """The defaults kube-apiserver (and its default admission plugins) fill into a PodSpec."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        _default_container(c)
    _canonical_quantities(spec.get("overhead"))
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def prepare_pod_create(pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
    if spec.get("schedulingGates"):
        # kube-apiserver itself marks gated pods, so `kubectl get` shows SchedulingGated.
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None,
                "lastTransitionTime": None,
            }
        ]


def pod_validation_errors(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The PodSpec rules beyond the schema that a user hits most: containers, names, images, resource quantities."""
    errors: list[tuple[str, str, str]] = []
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        errors.append(("spec.containers", "FieldValueRequired", "Required value"))
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            name = c.get("name") or ""
            if name in seen:
                errors.append((f"spec.{kind}[{i}].name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            seen.add(name)
            image = c.get("image")
            if not image:
                errors.append((f"spec.{kind}[{i}].image", "FieldValueRequired", "Required value"))
            elif isinstance(image, str) and image.strip() != image:
                errors.append((f"spec.{kind}[{i}].image", "FieldValueInvalid",
                               f"Invalid value: {json.dumps(image)}: must not have leading or trailing whitespace"))
            for field in ("limits", "requests"):
                errors += _negative_quantities(f"spec.{kind}[{i}].resources.{field}",
                                               (c.get("resources") or {}).get(field))
    errors += _negative_quantities("spec.overhead", spec.get("overhead"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        errors.append(
            (
                "spec.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"',
            )
        )
    return errors


def _negative_quantities(path: str, quantities: Any) -> list[tuple[str, str, str]]:
    # As kube-apiserver's ValidateNonnegativeQuantity; a value that is no quantity at all is the decoder's to refuse.
    errors = []
    for name, value in (quantities or {}).items() if isinstance(quantities, dict) else ():
        try:
            negative = parse_quantity(value) < 0
        except (ValueError, TypeError, ArithmeticError):
            continue
        if negative:
            errors.append((f"{path}[{name}]", "FieldValueInvalid",
                           f"Invalid value: {json.dumps(str(value))}: must be greater than or equal to 0"))
    return errors


def pod_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Pod spec is immutable except images, deadline, added tolerations, removed scheduling gates and,
    while the pod is still gated, node selector and affinity (Kubernetes ≥1.30)."""
    if old.get("spec") == new.get("spec"):  # a metadata write (labels, finalizers): the spec is as stored
        return []
    old_spec = dict(old.get("spec") or {})  # read, and only its top-level keys popped
    new_spec = copy.deepcopy(new.get("spec") or {})
    default_pod_spec(new_spec)
    errors = []
    old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
    new_gates = [g.get("name") for g in new_spec.get("schedulingGates") or []]
    for gate in new_gates:
        if gate not in old_gates:
            errors.append(
                (
                    "spec.schedulingGates",
                    "FieldValueForbidden",
                    f"Forbidden: only deletion is allowed, but found new scheduling gate '{gate}'",
                )
            )
    gated = bool(old_gates)
    for kind in ("containers", "initContainers"):
        old_cs, new_cs = old_spec.get(kind) or [], new_spec.get(kind) or []
        if len(old_cs) == len(new_cs):
            for oc, nc in zip(old_cs, new_cs, strict=True):
                nc["image"] = oc.get("image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        new_spec.pop(key, None)
        old_spec.pop(key, None)
    old_tols = canonical_list((old.get("spec") or {}).get("tolerations"))
    new_tols = canonical_list((new.get("spec") or {}).get("tolerations"))
    if not set(old_tols) <= set(new_tols) and (new.get("spec") or {}).get("tolerations") is not None:
        errors.append(("spec.tolerations", "FieldValueForbidden", "Forbidden: existing toleration can not be modified"))
    if gated:
        for key in ("nodeSelector", "affinity"):
            if key == "nodeSelector":
                for k, v in (old_spec.get(key) or {}).items():
                    if (new_spec.get(key) or {}).get(k) != v:
                        errors.append(
                            (
                                "spec.nodeSelector",
                                "FieldValueInvalid",
                                "Invalid value: only additions to spec.nodeSelector are allowed",
                            )
                        )
            new_spec.pop(key, None)
            old_spec.pop(key, None)
    if canonical(old_spec) != canonical(new_spec):
        errors.append(("spec", "FieldValueForbidden", f"Forbidden: {POD_UPDATE_FORBIDDEN}"))
    return errors


def canonical_list(items: list[Any] | None) -> list[str]:
    return [canonical(i) for i in items or []]


def pod_is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def set_condition(conditions: list[dict[str, Any]], cond: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace the condition of the same type (keeping lastTransitionTime when status is unchanged)."""
    out = []
    replaced = False
    for c in conditions:
        if c.get("type") == cond["type"]:
            if c.get("status") == cond.get("status") and c.get("lastTransitionTime"):
                cond = {**cond, "lastTransitionTime": c["lastTransitionTime"]}
            out.append(cond)
            replaced = True
        else:
            out.append(c)
    if not replaced:
        out.append(cond)
    return out


def prepare_service_create(svc: dict[str, Any], allocate_ip: Any) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if not spec.get("clusterIP"):
        spec["clusterIP"] = allocate_ip()
    if spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    else:
        spec.setdefault("clusterIPs", ["None"])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    svc.setdefault("status", {"loadBalancer": {}})
