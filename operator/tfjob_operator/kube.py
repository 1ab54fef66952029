"""The one way tfjob_operator talks to the Kubernetes API besides kopf: the operator's own calls (`Kube`), the
CLI job helpers (`jobs`) and leader election (`leader`) all go through this module.

Why the official `kubernetes` client rather than an async one: every part already needed it (kubeconfig and
in-cluster credentials, exec plugins, client certificates, service-account tokens the kubelet rotates, CA
handling, and the watches and log streams of the CLI), so one library holds the one authentication path. Its
calls block, so async callers (the operator, leader election) run them in worker threads (`request`) and the
CLI calls them directly (`request_sync`). kopf keeps its own client for its watches; the local control
plane's client (`kubelocal.kubeclient`) belongs to the emulator.

One error type, :class:`KubeError` (status 0: the server could not be reached), and one retry policy,
:class:`RetryPolicy`, the same for every caller (each sets its budget): 429 is retried after the
`Retry-After` the server asks for (up to the policy's ceiling), as are connection errors; 500/502/503/504
and a connection lost mid-request are retried only when repeating the call is safe (every method but POST,
and a POST whose 409 counts as done, as the operator's creates with deterministic names). urllib3's own
retries are off so that nothing retries twice. Create tolerates 409 AlreadyExists; delete tolerates 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tfjob_operator.api import apigroups, constants
from tfjob_operator.api.times import format_time
from tfjob_operator.dispatch import PriorityThreadPool, request_key

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: Connections (and threads waiting on them) the operator's calls may use at once.
POOL_SIZE = 32
USER_AGENT = f"{constants.OPERATOR_COMPONENT}/0.1"
#: Statuses worth another try: throttled (429) or the server failing for now (5xx).
RETRYABLE = frozenset({429, 500, 502, 503, 504})
#: The request never reached the server: safe to repeat whatever the method.
_NOT_SENT = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError, ConnectionRefusedError)


#: A pod refused because its namespace's `default` ServiceAccount does not exist yet: the cluster creates
#: it moments after the namespace (kube-controller-manager), so a job submitted at once meets this refusal.
_DEFAULT_ACCOUNT_PENDING = re.compile(
    r'error looking up service account [^/\s]+/default: serviceaccount "default" not found')


#: The authorizer's refusal (RBAC, or any other): kube-apiserver's `forbiddenMessage` wording.
_NOT_AUTHORIZED = re.compile(
    r'User "(?P<user>[^"]+)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]+)")?')


def refusal_is_permanent(status: int, message: str) -> bool:
    """Whether the API server's refusal of a create can only be fixed by the user (the job then fails), as
    opposed to a state the cluster is about to leave (retried with back-off like an outage). The operator's
    own missing permission is neither: its job waits, saying so (`not_authorized`), until an admin grants it."""
    if not 400 <= status < 500 or status == 429:
        return False
    if status == 403 and not_authorized(status, message) is not None:
        return False
    return not (status == 403 and _DEFAULT_ACCOUNT_PENDING.search(message))


def not_authorized(status: int, message: str) -> str | None:
    """For a 403 from the authorizer (not from admission: a quota, PodSecurity): what the operator may not do and
    what to do about it, in one line, e.g. "forbidden: the operator (system:serviceaccount:ns:sa) cannot create
    pods in namespace team: its ServiceAccount lacks 'create' on 'pods'; add it to the chart's ClusterRole
    (or the namespace's Role): re-applying the chart restores its rules (...)". None for any other refusal."""
    found = _NOT_AUTHORIZED.search(message) if status == 403 else None
    if found is None:
        return None
    verb, resource, group, namespace = found["verb"], found["resource"], found["group"], found["namespace"]
    where = f"in namespace {namespace}" if namespace else "at the cluster scope"
    api_group = f" (API group {group})" if group else ""
    return (f"forbidden: the operator ({found['user']}) cannot {verb} {resource} {where}: its ServiceAccount lacks "
            f"'{verb}' on '{resource}'{api_group}; add it to the chart's ClusterRole (or the namespace's Role): "
            "re-applying the chart restores its rules (Helm 4: `helm upgrade --force-conflicts` if another tool "
            "edited them)")


class KubeError(Exception):
    """An API call that failed for good: its HTTP status (0 when the server could not be reached), the reason
    phrase, the server's message, and what was being done. One line; `hint` (after a semicolon) says what to
    do, when known."""

    def __init__(self, status: int, method: str, path: str, body: Any, *, reason: str = "",
                 what: str | None = None, hint: str | None = None, detail: str | None = None) -> None:
        self.status, self.method, self.path, self.reason, self.body = status, method, path, reason, body
        self.message = str(body.get("message") or "") if isinstance(body, dict) else str(body or "")[:300]
        self.what = f"{method} {path}" if what is None else what
        self.hint, self.detail = hint, detail
        #: For the authorizer's 403: what the operator may not do, and what to do (`not_authorized`).
        self.not_authorized = not_authorized(status, self.message)
        if detail is None:
            if status == 0:
                first = self.message.splitlines()[0][:160] if self.message else "no answer"
                detail = f"cannot reach the API server ({first})"
            else:
                detail = f"HTTP {status}" + (f" {reason}" if reason else "") + (
                    f": {self.message}" if self.message else "")
        text = f"{self.what}: {detail}" if self.what else detail
        super().__init__(text + (f"; {hint}" if hint else ""))

    def explained(self, what: str, hint: str | None) -> KubeError:
        """The same error, saying what a person was doing and what to do about it (the CLI's one line)."""
        return KubeError(self.status, self.method, self.path, self.body, reason=self.reason, what=what, hint=hint,
                         detail=self.detail)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry (see the module docstring for what is retried)."""

    attempts: int = 6
    backoff: float = 0.5
    max_backoff: float = 10.0
    #: Seconds one request may take.
    timeout: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Exponential back-off with jitter (so many jobs do not retry in lockstep), at least what the server
        asked for in Retry-After, never more than max_backoff."""
        base = min(self.backoff * (2 ** attempt), self.max_backoff)
        wait = base * (0.5 + random.random() / 2)
        return min(max(wait, retry_after or 0.0), self.max_backoff)


def load_api_client(kubeconfig: str | None = None, context: str | None = None, *,
                    user_agent: str = USER_AGENT) -> k8s.ApiClient:
    """An ApiClient for the cluster: in-cluster service account if present, else the kubeconfig."""
    configuration = k8s.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return api_client(configuration, user_agent=user_agent)


def api_client(configuration: k8s.Configuration | str, *, user_agent: str = USER_AGENT) -> k8s.ApiClient:
    """An ApiClient from a configuration (or a plain server URL, as on the local control plane)."""
    if isinstance(configuration, str):
        url, configuration = configuration, k8s.Configuration()
        configuration.host = url
    # The operator runs many calls in parallel (one per pod of a gang); the default pool holds 4.
    configuration.connection_pool_maxsize = POOL_SIZE
    configuration.retries = False  # RetryPolicy is the one retry
    api = k8s.ApiClient(configuration)
    api.user_agent = user_agent
    return api


def pods_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def tfjobs_path(namespace: str, *, group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> str:
    return f"/apis/{group.api_version}/namespaces/{namespace}/{group.plural}"


def tfjob_path(namespace: str, name: str, subresource: str | None = None, *,
               group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> str:
    path = f"{tfjobs_path(namespace, group=group)}/{name}"
    return path + (f"/{subresource}" if subresource else "")


def collection_path(obj: Mapping[str, Any]) -> str:
    """Collection URL of a namespaced object from its apiVersion and kind (Pod → /api/v1/.../pods)."""
    api_version = str(obj["apiVersion"])
    namespace = obj["metadata"]["namespace"]
    plural = str(obj["kind"]).lower() + "s"
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


@dataclass(frozen=True)
class _Outcome:
    """One attempt's result under the retry policy: a value, a wait before the next attempt, or an error."""

    value: Any = None
    retry_in: float | None = None
    error: KubeError | None = None


class Kube:
    """API calls with the one retry policy and error type. The operator's calls below are safe to repeat."""

    def __init__(self, api: k8s.ApiClient, retry: RetryPolicy | None = None) -> None:
        self.api = api
        self.retry = retry or RetryPolicy()
        self._executor: PriorityThreadPool | None = None

    def _threads(self) -> PriorityThreadPool:
        """The threads that wait on the network: their own pool (one per pooled connection), so CPU work that
        async callers send to the default executor never queues behind a burst of slow requests. Its queue runs
        the earliest deadline first: a reconcile's creates by its start, other calls a moment later
        (`tfjob_operator.dispatch`)."""
        if self._executor is None:
            size = int(getattr(self.api.configuration, "connection_pool_maxsize", None) or POOL_SIZE)
            self._executor = PriorityThreadPool(size, "tfjob-api")
        return self._executor

    def _call(self, method: str, path: str, body: Any, content_type: str, query: list[tuple[str, str]],
              timeout: float | None = None) -> tuple[int, str, Any, Mapping[str, str]]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=self.retry.timeout if timeout is None else timeout)
        raw = response.read()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return response.status, str(response.reason or ""), decoded, response.headers or {}

    def _attempt(self, attempt: int, method: str, path: str, body: Any, content_type: str,
                 query: list[tuple[str, str]], ok: frozenset[int], timeout: float | None = None) -> _Outcome:
        last = attempt + 1 >= self.retry.attempts
        # Repeating a POST could create twice, unless "already exists" counts as done for the caller.
        repeatable = method != "POST" or 409 in ok
        try:
            status, reason, decoded, headers = self._call(method, path, body, content_type, query, timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = getattr(exc, "reason", None) if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            if last or not (repeatable or isinstance(cause, _NOT_SENT)):
                return _Outcome(error=KubeError(0, method, path, str(cause or exc)))
            log.warning("%s %s: %s; retrying", method, path, cause or exc)
            return _Outcome(retry_in=self.retry.delay(attempt))
        if 200 <= status < 300:
            return _Outcome(value=decoded)
        if status in ok:
            return _Outcome()
        if status in RETRYABLE and not last and (status == 429 or repeatable):
            log.warning("%s %s: HTTP %s; retrying", method, path, status)
            return _Outcome(retry_in=self.retry.delay(attempt, _seconds(headers.get("Retry-After"))))
        return _Outcome(error=KubeError(status, method, path, decoded, reason=reason))

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                      query: list[tuple[str, str]] | None = None, ok: frozenset[int] = frozenset(),
                      timeout: float | None = None) -> Any:
        """One call with retries, in a worker thread; the decoded body, or None when the status is in `ok`.
        `timeout`: seconds each attempt may take, instead of the policy's."""
        key = request_key(method, path)
        for attempt in range(self.retry.attempts):
            outcome = await asyncio.wrap_future(self._threads().submit_ordered(
                key, self._attempt, attempt, method, path, body, content_type, query or [], ok, timeout))
            if outcome.error is not None:
                raise outcome.error
            if outcome.retry_in is None:
                return outcome.value
            await asyncio.sleep(outcome.retry_in)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def request_sync(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                     query: list[tuple[str, str]] | None = None, ok: frozenset[int] = frozenset()) -> Any:
        """:meth:`request` for synchronous callers (the CLI)."""
        for attempt in range(self.retry.attempts):
            outcome = self._attempt(attempt, method, path, body, content_type, query or [], ok)
            if outcome.error is not None:
                raise outcome.error
            if outcome.retry_in is None:
                return outcome.value
            time.sleep(outcome.retry_in)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create an object; False if it already existed (409)."""
        created = await self.request("POST", collection_path(obj), dict(obj), ok=frozenset({409}))
        return created is not None

    async def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool:
        """Delete a pod (grace period 0 when forced); False if it was already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if force:
            body["gracePeriodSeconds"] = 0  # type: ignore[assignment]
        gone = await self.request("DELETE", pods_path(namespace, name), body, ok=frozenset({404}))
        return gone is not None

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any], *,
                           group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> dict[str, Any] | None:
        """Merge-patch the TFJob's status subresource; None if the job is gone."""
        result = await self.request("PATCH", tfjob_path(namespace, name, "status", group=group),
                                    {"status": dict(status)}, content_type=MERGE_PATCH, ok=frozenset({404}))
        return result if isinstance(result, dict) else None

    async def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str | None], *,
                           group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> None:
        await self.request("PATCH", tfjob_path(namespace, name, group=group),
                           {"metadata": {"annotations": dict(annotations)}}, content_type=MERGE_PATCH,
                           ok=frozenset({404}))

    async def delete_job(self, namespace: str, name: str, uid: str | None, *,
                         group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> None:
        """Delete the TFJob (only this incarnation: the uid precondition spares a new job of the same name)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        await self.request("DELETE", tfjob_path(namespace, name, group=group), body, ok=frozenset({404, 409}))

    async def get(self, path: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        result = await self.request("GET", path, ok=frozenset({404}), timeout=timeout)
        return result if isinstance(result, dict) else None

    async def post_event(self, job: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event on the TFJob, as `kubectl describe tfjob` and `kubectl get events` show them."""
        meta = job["metadata"]
        now = datetime.now(UTC)
        stamp = format_time(now)
        namespace = meta.get("namespace") or "default"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {"apiVersion": apigroups.group_of(job).api_version, "kind": constants.KIND,
                               "name": meta["name"], "namespace": namespace, "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": constants.OPERATOR_COMPONENT},
            "reportingComponent": constants.OPERATOR_COMPONENT,
            "reportingInstance": constants.OPERATOR_COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self.request("POST", f"/api/v1/namespaces/{namespace}/events", event, ok=frozenset({409}))


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds); None when absent or a date."""
    try:
        return float(value) if value else None
    except ValueError:
        return None
