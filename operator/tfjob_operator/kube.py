"""The few API calls the operator makes, idempotent and retried. HTTP through the official `kubernetes` client.

Create tolerates 409 AlreadyExists (names are deterministic, so "exists" means "done"); delete tolerates 404;
429, 5xx and connection errors are retried with exponential back-off. Calls run in a worker thread so the
kopf event loop never blocks on the network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tfjob_operator import apigroups, constants
from tfjob_operator.times import format_time

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = f"{constants.OPERATOR_COMPONENT}/0.1"
RETRYABLE = frozenset({429, 500, 502, 503, 504})


#: A pod refused because its namespace's `default` ServiceAccount does not exist yet: the cluster creates
#: it moments after the namespace (kube-controller-manager), so a job submitted at once meets this refusal.
_DEFAULT_ACCOUNT_PENDING = re.compile(
    r'error looking up service account [^/\s]+/default: serviceaccount "default" not found')


def refusal_is_permanent(status: int, message: str) -> bool:
    """Whether the API server's refusal of a create can only be fixed by the user (the job then fails), as
    opposed to a state the cluster is about to leave (retried with back-off like an outage)."""
    if not 400 <= status < 500 or status == 429:
        return False
    return not (status == 403 and _DEFAULT_ACCOUNT_PENDING.search(message))


class KubeError(Exception):
    """An API call that failed for good: status code, method, path and the server's message."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        self.status = status
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        self.message = str(message or "")
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    backoff: float = 0.5
    max_backoff: float = 10.0
    timeout: float = 30.0

    def delay(self, attempt: int) -> float:
        base = min(self.backoff * (2 ** attempt), self.max_backoff)
        return base * (0.5 + random.random() / 2)  # jitter, so many jobs do not retry in lockstep


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient for the cluster: in-cluster service account if present, else the kubeconfig."""
    configuration = k8s.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    # The operator runs many calls in parallel (one per pod of a gang); the default pool holds 4.
    configuration.connection_pool_maxsize = 32
    api = k8s.ApiClient(configuration)
    api.user_agent = USER_AGENT
    return api


def pods_path(namespace: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def tfjob_path(namespace: str, name: str, subresource: str | None = None, *,
               group: apigroups.ApiGroup = apigroups.TFJOB_DEV) -> str:
    path = f"/apis/{group.api_version}/namespaces/{namespace}/{group.plural}/{name}"
    return path + (f"/{subresource}" if subresource else "")


def collection_path(obj: Mapping[str, Any]) -> str:
    """Collection URL of a namespaced object from its apiVersion and kind (Pod → /api/v1/.../pods)."""
    api_version = str(obj["apiVersion"])
    namespace = obj["metadata"]["namespace"]
    plural = str(obj["kind"]).lower() + "s"
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


class Kube:
    """The operator's API calls. Every method is safe to repeat."""

    def __init__(self, api: k8s.ApiClient, retry: RetryPolicy | None = None) -> None:
        self.api = api
        self.retry = retry or RetryPolicy()

    def _call(self, method: str, path: str, body: Any, content_type: str, query: list[tuple[str, str]]) -> tuple[
            int, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=self.retry.timeout)
        raw = response.read()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return response.status, decoded

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                      query: list[tuple[str, str]] | None = None, ok: frozenset[int] = frozenset()) -> Any:
        """One call with retries; the decoded body, or None when the status is in `ok` (e.g. 409, 404)."""
        for attempt in range(self.retry.attempts):
            try:
                status, decoded = await asyncio.to_thread(self._call, method, path, body, content_type, query or [])
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt + 1 == self.retry.attempts:
                    raise KubeError(0, method, path, str(exc)) from exc
                log.warning("%s %s: %s; retrying", method, path, exc)
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if 200 <= status < 300:
                return decoded
            if status in ok:
                return None
            if status in RETRYABLE and attempt + 1 < self.retry.attempts:
                log.warning("%s %s: HTTP %s; retrying", method, path, status)
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            raise KubeError(status, method, path, decoded)
        raise AssertionError("unreachable")

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

    async def get(self, path: str) -> dict[str, Any] | None:
        result = await self.request("GET", path, ok=frozenset({404}))
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
