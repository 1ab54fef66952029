"""`Accept: application/json;as=Table;g=meta.k8s.io;v=v1` rendering: the columns `kubectl get` shows,
from a CRD's additionalPrinterColumns (simple JSONPath) or built-in printers for common kinds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from kubelocal.times import now

from .objects import parse_timestamp
from .registry import ResourceType

_NAME_COL = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace.",
}
_AGE_COL = {
    "name": "Age",
    "type": "string",
    "format": "",
    "priority": 0,
    "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, so ages read exactly as on a real cluster."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        return human_duration((now() - parse_timestamp(ts)).total_seconds())
    except ValueError:
        return "<invalid>"


_TOKEN = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_\-/]+)|\[(?P<index>-?\d+|\*)\]|\[(?P<start>-?\d*):(?P<stop>-?\d*)\]|"""
    r"""\['(?P<quoted>[^']*)'\]|"""
    r"""\[\?\(@\.(?P<fkey>[A-Za-z0-9_.\-]+)\s*==\s*(?:"(?P<fval>[^"]*)"|'(?P<fval2>[^']*)')\)\]"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate the JSONPath subset printer columns use: `.a.b`, `[0]`, `[*]`, `[-1:]` (Kubeflow's State column),
    `['k']`, `[?(@.k=="v")]`."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    path = path.removeprefix("$")
    values = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for v in values:
            if m["name"] is not None or m["quoted"] is not None:
                key = m["name"] if m["name"] is not None else m["quoted"]
                if isinstance(v, dict) and key in v:
                    nxt.append(v[key])
            elif m["index"] is not None:
                if isinstance(v, list):
                    if m["index"] == "*":
                        nxt.extend(v)
                    elif -len(v) <= int(m["index"]) < len(v):
                        nxt.append(v[int(m["index"])])
            elif m["start"] is not None:
                if isinstance(v, list):
                    nxt.extend(v[int(m["start"]) if m["start"] else None : int(m["stop"]) if m["stop"] else None])
            else:
                want = m["fval"] if m["fval"] is not None else m["fval2"]
                items = v if isinstance(v, list) else []
                for item in items:
                    found = jsonpath(item, "." + m["fkey"])
                    if found and str(found[0]) == want:
                        nxt.append(item)
        values = nxt
    return values


def _cell(col_type: str, value: Any) -> Any:
    if value is None:
        return None
    if col_type == "date":
        return age(value) if isinstance(value, str) else "<invalid>"
    if col_type == "integer":
        return value if isinstance(value, int) else None
    if col_type == "number":
        return value if isinstance(value, (int, float)) else None
    if col_type == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _crd_columns(rt: ResourceType) -> list[dict[str, Any]]:
    cols = (rt.crd_version or {}).get("additionalPrinterColumns")
    if cols is None:
        cols = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    return cols


def _pod_status(pod: dict[str, Any]) -> tuple[str, str, str]:
    """(READY, STATUS, RESTARTS) as kubectl's pod printer computes them."""
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    total = len(spec.get("containers") or [])
    reason = status.get("reason") or status.get("phase") or ""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    ready = restarts = 0
    has_running = False
    for cs in reversed(status.get("containerStatuses") or []):
        restarts += cs.get("restartCount") or 0
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif "terminated" in state:
            term = state["terminated"]
            reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
        elif cs.get("ready") and "running" in state:
            has_running = True
            ready += 1
    if reason == "Completed" and has_running:
        reason = "Running"
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return f"{ready}/{total}", reason, str(restarts)


def _job_row(o: dict[str, Any]) -> list[Any]:
    """kubectl's job columns: STATUS (Running/Complete/Failed/Suspended), COMPLETIONS, DURATION."""
    spec, st = o.get("spec") or {}, o.get("status") or {}
    conds = {c.get("type") for c in st.get("conditions") or [] if c.get("status") == "True"}
    status = next((c for c in ("Failed", "Complete", "Suspended") if c in conds), "Running")
    completions = spec.get("completions")
    succeeded = st.get("succeeded", 0)
    done = f"{succeeded}/{completions}" if completions is not None else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    duration = ""
    if st.get("startTime"):
        try:
            started = parse_timestamp(st["startTime"])
            finished = parse_timestamp(st["completionTime"]) if st.get("completionTime") else now()
            duration = human_duration((finished - started).total_seconds())
        except ValueError:
            duration = "<invalid>"
    return [o["metadata"]["name"], status, done, duration, age(o["metadata"].get("creationTimestamp"))]


def _builtin(rt: ResourceType) -> tuple[list[dict[str, Any]], Any] | None:
    def col(name: str, priority: int = 0, typ: str = "string") -> dict[str, Any]:
        return {"name": name, "type": typ, "format": "", "description": name, "priority": priority}

    if rt.key == ("", "pods"):

        def pod_row(o: dict[str, Any]) -> list[Any]:
            ready, status, restarts = _pod_status(o)
            st = o.get("status") or {}
            return [
                o["metadata"]["name"],
                ready,
                status,
                int(restarts),
                age(o["metadata"].get("creationTimestamp")),
                st.get("podIP") or "<none>",
                (o.get("spec") or {}).get("nodeName") or "<none>",
                st.get("nominatedNodeName") or "<none>",
                "<none>",
            ]

        return (
            [
                _NAME_COL,
                col("Ready"),
                col("Status"),
                col("Restarts", typ="integer"),
                _AGE_COL,
                col("IP", 1),
                col("Node", 1),
                col("Nominated Node", 1),
                col("Readiness Gates", 1),
            ],
            pod_row,
        )
    if rt.key == ("", "nodes"):

        def node_row(o: dict[str, Any]) -> list[Any]:
            conds = {c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or []}
            state = {"True": "Ready", "False": "NotReady"}.get(conds.get("Ready") or "", "Unknown")
            if (o.get("spec") or {}).get("unschedulable"):
                state += ",SchedulingDisabled"
            roles = sorted(
                k.split("/", 1)[1]
                for k in (o["metadata"].get("labels") or {})
                if k.startswith("node-role.kubernetes.io/")
            ) or ["<none>"]
            info = (o.get("status") or {}).get("nodeInfo") or {}
            return [
                o["metadata"]["name"],
                state,
                ",".join(roles),
                age(o["metadata"].get("creationTimestamp")),
                info.get("kubeletVersion") or "",
            ]

        return ([_NAME_COL, col("Status"), col("Roles"), _AGE_COL, col("Version")], node_row)
    if rt.key == ("", "services"):

        def svc_row(o: dict[str, Any]) -> list[Any]:
            spec = o.get("spec") or {}
            ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or "<none>"
            return [
                o["metadata"]["name"],
                spec.get("type", "ClusterIP"),
                spec.get("clusterIP") or "<none>",
                "<none>",
                ports,
                age(o["metadata"].get("creationTimestamp")),
            ]

        return ([_NAME_COL, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), _AGE_COL], svc_row)
    if rt.key == ("", "namespaces"):
        return (
            [_NAME_COL, col("Status"), _AGE_COL],
            lambda o: [
                o["metadata"]["name"],
                (o.get("status") or {}).get("phase", ""),
                age(o["metadata"].get("creationTimestamp")),
            ],
        )
    if rt.key == ("", "configmaps"):
        return (
            [_NAME_COL, col("Data", typ="integer"), _AGE_COL],
            lambda o: [
                o["metadata"]["name"],
                len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                age(o["metadata"].get("creationTimestamp")),
            ],
        )
    if rt.key == ("apps", "deployments"):

        def deploy_row(o: dict[str, Any]) -> list[Any]:
            st, wanted = o.get("status") or {}, (o.get("spec") or {}).get("replicas", 1)
            return [o["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{wanted}", int(st.get("updatedReplicas", 0)),
                    int(st.get("availableReplicas", 0)), age(o["metadata"].get("creationTimestamp"))]

        return ([_NAME_COL, col("Ready"), col("Up-to-date", typ="integer"), col("Available", typ="integer"),
                 _AGE_COL], deploy_row)
    if rt.key == ("apps", "replicasets"):

        def rs_row(o: dict[str, Any]) -> list[Any]:
            st = o.get("status") or {}
            return [o["metadata"]["name"], int((o.get("spec") or {}).get("replicas", 1)), int(st.get("replicas", 0)),
                    int(st.get("readyReplicas", 0)), age(o["metadata"].get("creationTimestamp"))]

        return ([_NAME_COL, col("Desired", typ="integer"), col("Current", typ="integer"),
                 col("Ready", typ="integer"), _AGE_COL], rs_row)
    if rt.key == ("batch", "jobs"):
        return ([_NAME_COL, col("Status"), col("Completions"), col("Duration"), _AGE_COL], _job_row)
    if rt.key == ("", "serviceaccounts"):
        return ([_NAME_COL, col("Secrets", typ="integer"), _AGE_COL],
                lambda o: [o["metadata"]["name"], len(o.get("secrets") or []),
                           age(o["metadata"].get("creationTimestamp"))])
    if rt.key == ("", "events"):

        def ev_row(o: dict[str, Any]) -> list[Any]:
            inv = o.get("involvedObject") or {}
            last = o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")
            return [
                age(last),
                o.get("type", ""),
                o.get("reason", ""),
                f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}",
                o.get("message", ""),
            ]

        return ([col("Last Seen"), col("Type"), col("Reason"), col("Object"), col("Message")], ev_row)
    if rt.key == ("apiregistration.k8s.io", "apiservices"):

        def apiservice_row(o: dict[str, Any]) -> list[Any]:
            svc = (o.get("spec") or {}).get("service")
            cond: dict[str, Any] = next(
                (c for c in (o.get("status") or {}).get("conditions") or [] if c["type"] == "Available"), {}
            )
            available = cond.get("status", "Unknown") + (
                f" ({cond['reason']})" if cond.get("status") == "False" else ""
            )
            where = f"{svc['namespace']}/{svc['name']}" if svc else "Local"
            return [o["metadata"]["name"], where, available, age(o["metadata"].get("creationTimestamp"))]

        return ([_NAME_COL, col("Service"), col("Available"), _AGE_COL], apiservice_row)
    return None


def to_table(
    rt: ResourceType,
    objs: Iterable[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    with_columns: bool = True,
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `objs` for `rt`."""
    if rt.is_custom:
        specs = _crd_columns(rt)
        columns = [_NAME_COL] + [
            {
                "name": c["name"],
                "type": c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": c.get("priority", 0),
            }
            for c in specs
        ]

        def row_of(o: dict[str, Any]) -> list[Any]:
            cells: list[Any] = [o["metadata"]["name"]]
            for c in specs:
                found = jsonpath(o, c.get("jsonPath", ""))
                cells.append(_cell(c.get("type", "string"), found[0]) if found else None)
            return cells
    else:
        printer = _builtin(rt)
        if printer is None:
            columns = [_NAME_COL, _AGE_COL]

            def row_of(o: dict[str, Any]) -> list[Any]:
                return [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]
        else:
            columns, row_of = printer
    rows = []
    for o in objs:
        row: dict[str, Any] = {"cells": row_of(o)}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
        rows.append(row)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows}
    table["columnDefinitions"] = columns if with_columns else None
    return table


def wants_table(accept: str) -> bool:
    return any("as=Table" in part.replace(" ", "") for part in accept.split(","))
