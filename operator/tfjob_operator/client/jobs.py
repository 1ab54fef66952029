"""Job helpers for any cluster reachable through a kubeconfig: submit, status, logs, wait.

They go through the operator's one API layer (`tfjob_operator.kube`: the official `kubernetes` client,
`KubeError`, the one retry policy with the CLI's budget), so they work the same against `tfjob local up` and a
real cluster, and an API error is one line naming what failed, the HTTP reason and a hint.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tfjob_operator.api import TFJob, constants
from tfjob_operator.api.apigroups import KUBEFLOW, TFJOB_DEV, ApiGroup, group_of
from tfjob_operator.api.observed import FINISHED_CONDITIONS, owned_by, prior_status
from tfjob_operator.kube import Kube, KubeError, RetryPolicy, api_client, pods_path, tfjob_path, tfjobs_path

#: Exit code of `tfjob wait` when the timeout passes first (the same as coreutils `timeout`).
EXIT_TIMEOUT = 124
#: Exit code of `tfjob wait` when the job ended the other way (e.g. Failed while waiting for Succeeded).
EXIT_OTHER_END = 1

#: Seconds one API request may take before the helper gives up (a blackholed server must not hang it).
REQUEST_TIMEOUT = 30
#: The CLI's budget under the one retry policy: a person waits at most a few seconds for an answer.
CLI_RETRY = RetryPolicy(attempts=3, backoff=0.5, max_backoff=4.0, timeout=REQUEST_TIMEOUT)
#: User agent of the CLI's requests (the operator's own are kube.USER_AGENT).
CLI_USER_AGENT = "tfjob-cli/0.1"


#: The APIs `status`, `wait`, `logs` and `tensorboard` look a job name up in, by `--api`: by default ours first,
#: then Kubeflow's (a job made with Kubeflow's SDK or manifests is found by its name alone, once the operator
#: serves `kubeflow.org/v1`); a name taken in both APIs is ours unless `--api kubeflow.org` says otherwise.
API_CHOICES: dict[str, ApiGroup] = {TFJOB_DEV.group: TFJOB_DEV, KUBEFLOW.group: KUBEFLOW}


def job_ref(group: ApiGroup, name: str) -> str:
    """How a person names the job in kubectl's terms: `tfjob/x`, `tfjobs.kubeflow.org/x`."""
    return f"tfjob/{name}" if group == TFJOB_DEV else f"{group.plural}.{group.group}/{name}"


def _hint(status: int | None, action: str, kind_name: str, namespace: str) -> str:
    if status == 404 and action == "create":
        return f"is the TFJob CRD installed (kubectl apply -f crds/tfjob.yaml), and does namespace {namespace} exist?"
    if status == 404 and kind_name.startswith("tfjobs.kubeflow.org/"):
        return (f"check the name and the namespace (kubectl get tfjobs.kubeflow.org -n {namespace}); is Kubeflow's "
                "TFJob API served (TFJOB_KUBEFLOW_API, tfjob local up --kubeflow)?")
    if status == 404 and action == "find":
        return (f"check the name and the namespace (kubectl get tfjobs -n {namespace}); no kubeflow.org/v1 TFJob "
                "of that name either")
    if status == 404:
        return f"check the name and the namespace (kubectl get tfjobs -n {namespace})"
    if status == 409:
        return f"delete it first (kubectl delete {kind_name} -n {namespace}) or choose another name"
    if status == 401:
        return "check the kubeconfig's credentials, or log in again"
    if status == 403:
        return f"ask for RBAC that allows it (kubectl auth can-i {action} tfjobs -n {namespace})"
    if status == 422:
        return "fix the field it names"
    if status == 429 or (status is not None and status >= 500):
        return "the API server is overloaded or failing; try again shortly"
    return "see the API server's message"


def _explain(exc: BaseException, action: str, kind_name: str, namespace: str) -> KubeError:
    """One-line KubeError for a failed call, an API exception of a stream, or an unreachable server."""
    what = f"{action} {kind_name}"
    if isinstance(exc, KubeError):
        error = exc
    elif isinstance(exc, ApiException):
        try:
            body: Any = json.loads(exc.body or "{}")
        except (ValueError, TypeError):
            body = str(exc.body or "")[:200]
        error = KubeError(int(exc.status or 0), "", "", body, reason=str(exc.reason or ""))
    else:
        error = KubeError(0, "", "", str(getattr(exc, "reason", None) or exc))
    if error.status == 0:
        return error.explained(what, "is the cluster up? check --kubeconfig and --context")
    return error.explained(what, _hint(error.status, action, kind_name, namespace))


@dataclass
class Clients:
    api: client.ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    namespace: str
    kube: Kube


def connect(kubeconfig: str | None = None, namespace: str | None = None, context: str | None = None) -> Clients:
    """Clients from a kubeconfig (or KUBECONFIG / ~/.kube/config, or in-cluster), with its namespace."""
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        default_ns = (active.get("context") or {}).get("namespace", "default")
    except (config.ConfigException, OSError, ValueError) as exc:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            reason = str(exc).splitlines()[0][:160]
            raise KubeError(0, "", "", None, what="", detail=f"no usable kubeconfig ({reason})",
                            hint="pass --kubeconfig, set KUBECONFIG, or start a cluster with `tfjob local up`",
                            ) from None
        default_ns = "default"
    api = api_client(configuration, user_agent=CLI_USER_AGENT)
    return Clients(api, client.CoreV1Api(api), client.CustomObjectsApi(api), namespace or default_ns,
                   Kube(api, CLI_RETRY))


def submit(clients: Clients, job: TFJob) -> dict[str, Any]:
    """Create the TFJob (already validated); returns what the API server stored."""
    body = job.model_dump(mode="json", exclude_none=True, exclude={"status"})
    body["metadata"] = {k: v for k, v in body["metadata"].items() if v not in ({}, None)}
    body["metadata"]["namespace"] = job.metadata.namespace or clients.namespace
    namespace = body["metadata"]["namespace"]
    try:
        result = clients.kube.request_sync("POST", tfjobs_path(namespace), body)
    except KubeError as exc:
        raise _explain(exc, "create", f"tfjob/{job.name}", namespace) from None
    return dict(result)


def create_object(clients: Clients, obj: dict[str, Any]) -> dict[str, Any]:
    """Create an object of any kind the API server serves (a ConfigMap beside a TFJob in one file), found by
    discovery as kubectl finds it; returns what the API server stored."""
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    meta = obj.get("metadata") or {}
    what = f"{kind.lower()}/{meta.get('name') or meta.get('generateName')}"
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    try:
        served = clients.kube.request_sync("GET", base)
    except KubeError as exc:
        if exc.status != 404:
            raise _explain(exc, "create", what, clients.namespace) from None
        served = {}
    resource = next((r for r in served.get("resources") or [] if r.get("kind") == kind and "/" not in r["name"]), None)
    if resource is None:
        raise KubeError(404, "GET", base, None, what=f"create {what}",
                        detail=f"the API server serves no {kind} in {api_version}",
                        hint="install what serves it (its CRD) first, or remove it from the file")
    namespace = str(meta.get("namespace") or clients.namespace)
    path = f"{base}/namespaces/{namespace}/{resource['name']}" if resource.get("namespaced") else \
        f"{base}/{resource['name']}"
    try:
        return dict(clients.kube.request_sync("POST", path, obj))
    except KubeError as exc:
        raise exc.explained(f"create {what}", "fix the field it names" if exc.status == 422 else None) from None


def get_job(clients: Clients, name: str, api: ApiGroup | None = None) -> dict[str, Any]:
    """The job named `name` in API `api`; with none, in ours, else in Kubeflow's (see API_CHOICES)."""
    namespace = clients.namespace
    if api is not None:
        try:
            return dict(clients.kube.request_sync("GET", tfjob_path(namespace, name, group=api)))
        except KubeError as exc:
            raise _explain(exc, "get", job_ref(api, name), namespace) from None
    try:
        return dict(clients.kube.request_sync("GET", tfjob_path(namespace, name)))
    except KubeError as exc:
        if exc.status != 404:
            raise _explain(exc, "get", job_ref(TFJOB_DEV, name), namespace) from None
        ours = exc
    try:
        return dict(clients.kube.request_sync("GET", tfjob_path(namespace, name, group=KUBEFLOW)))
    except KubeError as exc:
        if exc.status not in (403, 404):  # not served, or not ours to read: the answer is our API's 404
            raise _explain(exc, "get", job_ref(KUBEFLOW, name), namespace) from None
    raise ours.explained(f"get {job_ref(TFJOB_DEV, name)}", _hint(404, "find", "tfjob", namespace)) from None


def job_pods(clients: Clients, name: str, uid: str | None = None) -> list[dict[str, Any]]:
    """The job's pods by its job-name label; with the job's uid, only those it controls (the same name may be
    taken in both TFJob APIs)."""
    try:
        pods = clients.kube.request_sync("GET", pods_path(clients.namespace),
                                         query=[("labelSelector", f"{constants.LABEL_JOB_NAME}={name}")])
    except KubeError as exc:
        raise _explain(exc, "list", f"pods of tfjob/{name}", clients.namespace) from None
    out: list[dict[str, Any]] = [p for p in (pods or {}).get("items") or [] if owned_by(p, name, uid)]
    return sorted(out, key=lambda p: p["metadata"]["name"])


def job_events(clients: Clients, name: str) -> list[dict[str, Any]]:
    """The Events about the job (as `kubectl describe tfjob NAME` lists them), oldest first."""
    try:
        events = clients.kube.request_sync("GET", f"/api/v1/namespaces/{clients.namespace}/events",
                                           query=[("fieldSelector", f"involvedObject.name={name}")])
    except KubeError as exc:
        raise _explain(exc, "list", f"events of tfjob/{name}", clients.namespace) from None
    out = [e for e in (events or {}).get("items") or []
           if (e.get("involvedObject") or {}).get("kind") == constants.KIND]
    return sorted(out, key=_event_order)


def _event_order(event: dict[str, Any]) -> tuple[str, int]:
    """By time, then (Events of one second) by resourceVersion, which grows with each write on this API server."""
    version = str(event["metadata"].get("resourceVersion") or "0")
    return event.get("lastTimestamp") or event.get("firstTimestamp") or "", int(version) if version.isdigit() else 0


def true_conditions(job: dict[str, Any]) -> list[str]:
    return [c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]


def progress_text(status: dict[str, Any]) -> str | None:
    """The chief's progress as the operator last read it: `epoch 2/6 step 45, 1766.0 examples/s, ...`."""
    progress = status.get("progress") or {}
    if not progress.get("summary"):
        return None
    parts = [progress["summary"]]
    if progress["summary"] == "done" and progress.get("epoch"):
        epochs = progress.get("epochs") or "?"
        parts[0] = f"done (last read: epoch {progress['epoch']}/{epochs} step {progress.get('step')})"
    if progress.get("examplesPerSecond") is not None:
        # one decimal whatever JSON number came back: kube-apiserver (Go's float64) writes 512.0 as `512`
        parts.append(f"{float(progress['examplesPerSecond']):.1f} examples/s")
    if progress.get("lastCheckpointTime"):
        parts.append(f"last checkpoint {progress['lastCheckpointTime']}")
    if progress.get("updatedAt"):
        parts.append(f"read {progress['updatedAt']}")
    return ", ".join(parts)


def elastic_text(status: dict[str, Any]) -> str | None:
    """An elastic job's width: `3/4 workers (min 2), 2 resizes, last 2026-01-01T12:00:30Z`."""
    elastic = status.get("elastic") or {}
    if not elastic.get("currentReplicas"):
        return None
    resizes = elastic.get("resizes") or 0
    text = (f"{elastic['currentReplicas']}/{elastic.get('maxReplicas')} workers (min {elastic.get('minReplicas')}), "
            f"{resizes} resize{'' if resizes == 1 else 's'}")
    if elastic.get("lastResizeTime"):
        text += f", last {elastic['lastResizeTime']}"
    if elastic.get("widerSince"):
        text += f"; room for more since {elastic['widerSince']}"
    return text


def describe(job: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """`tfjob status` text: state, conditions with reasons, then one line per pod. A `kubeflow.org/v1` job says
    so; its CRD keeps no state, workers or counters in the status: they are read as the operator keeps them
    (the last true condition, the pods, the annotations)."""
    status = job.get("status") or {}
    group = group_of(job)
    true = [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"]
    state = status.get("state") or (true[-1] if true else "Pending")
    workers = status.get("workers") or _workers_from_pods(job, pods)
    api = "" if group == TFJOB_DEV else f" ({group.api_version})"
    lines = [
        f"TFJob {job['metadata']['namespace']}/{job['metadata']['name']}{api}: {state}"
        f"  workers {workers}  restarts {prior_status(job).restartCount}",
    ]
    elastic = elastic_text(status)
    if elastic:
        lines.append(f"elastic: {elastic}")
    progress = progress_text(status)
    if progress:
        lines.append(f"progress: {progress}")
    lines.append("conditions:")
    for cond in status.get("conditions") or []:
        lines.append(f"  {cond['type']:<11} {cond['status']:<6} {cond.get('reason') or '':<22} "
                     f"{cond.get('message') or ''}".rstrip())
    lines.append("pods:")
    for pod in pods:
        lines.append("  " + pod_line(pod))
    if not pods:
        lines.append("  (none)")
    return "\n".join(lines)


def _workers_from_pods(job: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """Running/total worker pods, as the `workers` status field says it (for a job whose status has none)."""
    spec = ((job.get("spec") or {}).get("tfReplicaSpecs") or {}).get("Worker") or {}
    total = spec.get("replicas", 1) if isinstance(spec, dict) else None
    if not isinstance(total, int):
        return "-"
    running = sum(1 for p in pods if (p["metadata"].get("labels") or {}).get(constants.LABEL_REPLICA_TYPE) == "worker"
                  and (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))
    return f"{running}/{total}"


def pod_fields(pod: dict[str, Any]) -> dict[str, str]:
    """What a person wants to see of a pod: name, phase, gang attempt, restarts, last exit."""
    meta, st = pod["metadata"], pod.get("status") or {}
    restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses") or [])
    phase = "Terminating" if meta.get("deletionTimestamp") else (st.get("phase") or "Pending")
    detail = ""
    for c in st.get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated")
        if term:
            detail = f"exit {term.get('exitCode')}" + (f" ({term['reason']})" if term.get("reason") else "")
    if not detail and st.get("reason"):
        detail = st["reason"]
    attempt = meta.get("labels", {}).get(constants.LABEL_ATTEMPT, "0")
    return {"name": meta["name"], "phase": phase, "attempt": attempt, "restarts": str(restarts), "exit": detail}


def pod_line(pod: dict[str, Any]) -> str:
    f = pod_fields(pod)
    return (f"{f['name']:<32} {f['phase']:<12} attempt {f['attempt']:<3} restarts {f['restarts']:<3} "
            f"{f['exit']}").rstrip()


def pick_pod(clients: Clients, name: str, replica: str | None, api: ApiGroup | None = None) -> str:
    """The pod for `--replica worker-1` (newest attempt), or the chief / worker 0 when none is given, of the job
    found as `get_job` finds it."""
    job = get_job(clients, name, api)
    pods = job_pods(clients, name, job["metadata"].get("uid"))
    if replica:
        wanted = f"{name}-{replica.lower()}"
        matches = [p for p in pods if p["metadata"]["name"] == wanted]
        if not matches:
            have = ", ".join(p["metadata"]["name"].removeprefix(name + "-") for p in pods) or "none"
            raise LookupError(f"no pod {wanted} (replicas of {name}: {have})")
        return wanted
    chiefs = [p for p in pods if p["metadata"]["labels"].get(constants.LABEL_JOB_ROLE) == constants.ROLE_CHIEF]
    if not chiefs:
        raise LookupError(f"TFJob {name} has no chief pod right now (is it suspended, queued or finished?)")
    return str(chiefs[0]["metadata"]["name"])


def stream_logs(clients: Clients, pod: str, follow: bool, out: TextIO = sys.stdout) -> None:
    """Copy a pod's log to `out` as it arrives (line by line, flushed)."""
    try:
        resp: Any = clients.core.read_namespaced_pod_log(pod, clients.namespace, follow=follow,
                                                         _preload_content=False)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        raise _explain(exc, "read the log of", f"pod/{pod}", clients.namespace) from None
    try:
        for chunk in resp.stream(1024):
            out.write(chunk.decode(errors="replace"))
            out.flush()
    finally:
        resp.release_conn()


def wait_for(clients: Clients, name: str, wanted: str, timeout: float,
             api: ApiGroup | None = None) -> tuple[int, str]:
    """Watch the job (found as `get_job` finds it) until condition `wanted` is true (exit 0), it ends otherwise
    (1), or time runs out (124)."""
    wanted = wanted.capitalize()
    deadline = time.monotonic() + timeout
    ref = job_ref(api or TFJOB_DEV, name)
    for job in _watch_job(clients, name, deadline, api):
        ref = job_ref(group_of(job), name)
        conds = true_conditions(job)
        if wanted in conds:
            return 0, f"{ref} condition met: {wanted}"
        ended = [c for c in conds if c in FINISHED_CONDITIONS]
        if ended:  # finished, and not the way we wait for
            message = next((c.get("message") for c in job["status"]["conditions"] if c["type"] == ended[-1]), "")
            return EXIT_OTHER_END, f"{ref} is {ended[-1]}, not {wanted}: {message}"
    return EXIT_TIMEOUT, f"timed out after {timeout:g}s waiting for {ref} to be {wanted}"


def _watch_job(clients: Clients, name: str, deadline: float, api: ApiGroup | None) -> Iterator[dict[str, Any]]:
    """The job now, then every change, until the deadline; restarts the watch when the server closes it."""
    job = get_job(clients, name, api)
    group = group_of(job)  # found: the watch stays on that API
    ref = job_ref(group, name)
    yield job
    version = job["metadata"]["resourceVersion"]
    while (left := deadline - time.monotonic()) > 0:
        stream = watch.Watch()
        try:
            for event in stream.stream(
                clients.custom.list_namespaced_custom_object, group.group, group.version,
                clients.namespace, group.plural, field_selector=f"metadata.name={name}",
                resource_version=version, timeout_seconds=max(1, int(min(left, 60))),
            ):
                if event["type"] == "DELETED":
                    raise KubeError(404, "WATCH", tfjob_path(clients.namespace, name, group=group), None,
                                    what=f"watch {ref}", detail="the job was deleted while waiting")
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                yield obj
                if time.monotonic() >= deadline:
                    return
        except urllib3.exceptions.HTTPError as exc:
            raise _explain(exc, "watch", ref, clients.namespace) from None
        except ApiException as exc:
            if exc.status != 410:
                raise _explain(exc, "watch", ref, clients.namespace) from None
            job = get_job(clients, name, group)  # our version is too old: start again from now
            version = job["metadata"]["resourceVersion"]
            yield job
        finally:
            stream.stop()
