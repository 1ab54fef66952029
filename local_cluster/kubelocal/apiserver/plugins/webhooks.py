"""Mutating and validating admission webhooks, called as kube-apiserver calls them.

For every write, each webhook of the installed Mutating/ValidatingWebhookConfigurations whose `rules`
(operations, apiGroups, apiVersions, resources with `resource/subresource`, scope), `namespaceSelector`
and `objectSelector` match is sent an `admission.k8s.io/v1` AdmissionReview over HTTPS, verified
against the webhook's `caBundle` (for a `service` reference against the name `<svc>.<ns>.svc`,
reached at the Service's targetPort: on this host when pods share its network, else at a ready endpoint
pod's IP through `dial`, a socket factory of the pod network's plane namespace). `allowed: false` refuses
the write with the webhook's status; a mutating webhook's JSONPatch
is applied; `warnings` reach the client. A webhook that cannot be called (refused, TLS, `timeoutSeconds`)
refuses the write with 500 under `failurePolicy: Fail` (the default) and is skipped under `Ignore`.

A call never stalls the API server (one slow webhook must not hold every other client's request): it is
`admission.awaited`, so a write the handler runs under `admission.run_admitted` stops before it has
changed anything, the call is made off the event loop, and the write runs again with the answer. An
answer is kept per webhook and per version of the stored object it judged, so a write whose object
changed meanwhile asks again (as kube-apiserver re-runs admission when its storage update retries). A
write run outside `run_admitted` calls its webhooks in place, blocking.
"""

from __future__ import annotations

import base64
import copy
import functools
import http.client
import json
import socket
import ssl
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jsonpatch

from ..admission import AdmissionRequest, awaited
from ..errors import ApiError
from ..store import Key, Store
from .labels import selector_matches

MUTATING: Key = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING: Key = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
NS_KEY: Key = ("", "namespaces")
SERVICE_KEY: Key = ("", "services")
POD_KEY: Key = ("", "pods")
WEBHOOK_CONFIG_KINDS = {MUTATING, VALIDATING}
#: The review's uid as sent, and what came back: the AdmissionReview, or why the call failed.
Exchange = tuple[str, "dict[str, Any] | _CallFailed"]


def rule_matches(rule: Mapping[str, Any], request: AdmissionRequest) -> bool:
    """One RuleWithOperations against the request (kube's `webhook/predicates/rules`)."""
    rt = request.rt

    def has(field: str, value: str) -> bool:
        listed = rule.get(field) or []
        return "*" in listed or value in listed

    resource_ok = _resource_matches(rule.get("resources") or [], rt.plural, request.subresource)
    scope = rule.get("scope") or "*"
    scope_ok = scope == "*" or (scope == "Namespaced") == rt.namespaced
    return (has("operations", request.operation.value) and has("apiGroups", rt.group)
            and has("apiVersions", rt.version) and resource_ok and scope_ok)


def _resource_matches(resources: Iterable[str], plural: str, sub: str | None) -> bool:
    """`pods` and `*` match the resource itself; `pods/status`, `pods/*`, `*/status` and `*/*` subresources."""
    for entry in resources:
        if entry == "*/*":
            return True
        res, _, sub_entry = entry.partition("/")
        if res not in ("*", plural):
            continue
        if (not sub_entry and sub is None) or (sub_entry and sub is not None and sub_entry in ("*", sub)):
            return True
    return False


@dataclass(frozen=True)
class Target:
    """Where to send the review: what to connect to, and the name the certificate must carry."""

    connect_host: str
    port: int
    server_name: str
    path: str
    display: str
    dial: Callable[[], socket.socket] | None = None  # an unconnected socket from which connect_host is reachable


class AdmissionWebhooks:
    """Both phases: the mutating webhooks in `admit`, then the validating ones in `validate`."""

    name = "AdmissionWebhooks"

    def __init__(self, store: Store) -> None:
        #: With a pod network: new sockets of its plane namespace; a Service's webhook is then a pod IP.
        self.dial: Callable[[], socket.socket] | None = None
        self._store = store

    def handles(self, request: AdmissionRequest) -> bool:
        # kube-apiserver never sends webhook configurations themselves to webhooks (no lock-out)
        return request.rt.key not in WEBHOOK_CONFIG_KINDS and (
            bool(self._store.items(MUTATING)) or bool(self._store.items(VALIDATING)))

    def admit(self, request: AdmissionRequest) -> None:
        for config, hook in self._hooks(MUTATING, request):
            response = self._call(MUTATING, config, hook, request)
            if response is None:
                continue
            patch = response.get("patch")
            if patch and request.obj is not None:
                ops = json.loads(base64.b64decode(patch))
                request.obj = jsonpatch.apply_patch(request.obj, ops)

    def validate(self, request: AdmissionRequest) -> None:
        for config, hook in self._hooks(VALIDATING, request):
            self._call(VALIDATING, config, hook, request)

    # -- matching -------------------------------------------------------------------------------------

    def _hooks(self, key: Key, request: AdmissionRequest) -> Iterable[tuple[str, dict[str, Any]]]:
        """(configuration name, webhook) of every webhook of this phase that matches the request, in order."""
        configs = sorted((s.obj for s in self._store.items(key)), key=lambda c: c["metadata"]["name"])
        for config in configs:
            for hook in config.get("webhooks") or []:
                if self._matches(hook, request):
                    yield config["metadata"]["name"], hook

    def _matches(self, hook: Mapping[str, Any], request: AdmissionRequest) -> bool:
        if not any(rule_matches(rule, request) for rule in hook.get("rules") or []):
            return False
        obj = request.obj if request.obj is not None else request.old
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        old_labels = ((request.old or {}).get("metadata") or {}).get("labels") or {}
        selector = hook.get("objectSelector")
        old_match = request.old is not None and selector_matches(selector, old_labels)
        if not (selector_matches(selector, labels) or old_match):
            return False
        if request.rt.namespaced and request.namespace:
            space = self._store.get(NS_KEY, None, request.namespace)
            ns_labels = ((space or {}).get("metadata") or {}).get("labels") or {}
            if not selector_matches(hook.get("namespaceSelector"), ns_labels):
                return False
        elif request.rt.key == NS_KEY:
            if not selector_matches(hook.get("namespaceSelector"), labels):
                return False
        return True

    # -- calling --------------------------------------------------------------------------------------

    def _target(self, hook: Mapping[str, Any]) -> Target:
        client = hook.get("clientConfig") or {}
        if client.get("url"):
            url = urlsplit(client["url"])
            host = url.hostname or ""
            return Target(host, url.port or 443, host, url.path or "/", client["url"])
        ref = client.get("service") or {}
        ns, name, port = ref.get("namespace"), ref.get("name"), int(ref.get("port") or 443)
        path = ref.get("path") or "/"
        display = f"https://{name}.{ns}.svc:{port}{path}"
        service = self._store.get(SERVICE_KEY, ns, name or "")
        if service is None:
            raise _CallFailed(f'Post "{display}": service "{ns}/{name}" not found')
        target: Any = port
        for sp in (service.get("spec") or {}).get("ports") or []:
            if int(sp.get("port") or 0) == port:
                target = sp.get("targetPort", port)
        if self.dial is not None:
            ip, pod_port = self._endpoint(service, str(target), display)
            return Target(ip, pod_port, f"{name}.{ns}.svc", path, display, self.dial)
        if isinstance(target, str) and not target.isdigit():
            target = self._endpoint(service, target, display)[1]
        return Target("127.0.0.1", int(target), f"{name}.{ns}.svc", path, display)

    def _endpoint(self, service: Mapping[str, Any], port: str, display: str) -> tuple[str, int]:
        """A ready pod the Service selects (its endpoint): its IP and the targetPort `port` (a number or the
        name of one of its container ports)."""
        meta, selector = service["metadata"], (service.get("spec") or {}).get("selector") or {}
        for stored in self._store.items(POD_KEY, meta.get("namespace")):
            pod = stored.obj
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
                continue
            ip = (pod.get("status") or {}).get("podIP") or ""
            if self.dial is not None and not ip:
                continue
            if port.isdigit():
                return ip, int(port)
            for container in (pod.get("spec") or {}).get("containers") or []:
                for cp in container.get("ports") or []:
                    if cp.get("name") == port:
                        return ip, int(cp["containerPort"])
        raise _CallFailed(f'Post "{display}": no endpoints available for service "{meta.get("name")}"')

    def _call(self, phase: Key, config: str, hook: Mapping[str, Any],
              request: AdmissionRequest) -> dict[str, Any] | None:
        """The webhook's answer (None when skipped under failurePolicy Ignore); raise on refusal. The call is
        `admission.awaited`: off the event loop when the write runs under `run_admitted`."""
        name = hook.get("name") or ""
        if request.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, f'admission webhook "{name}" does not support dry run')
        review = self._review(request)
        try:
            target = self._target(hook)  # reads the store: here, on the event loop
        except _CallFailed as exc:
            return self._judge(hook, review["request"]["uid"], exc)
        # One answer per webhook and per version of the stored object it judged (see the module docstring).
        version = ((request.old or {}).get("metadata") or {}).get("resourceVersion")
        uid, outcome = awaited((phase, config, name, version), functools.partial(_exchange, target, hook, review))
        return self._judge(hook, uid, outcome)

    @staticmethod
    def _judge(hook: Mapping[str, Any], uid: str, outcome: dict[str, Any] | _CallFailed) -> dict[str, Any] | None:
        """What the webhook's answer (or failure) to the review `uid` means for the write."""
        name = hook.get("name") or ""
        if isinstance(outcome, _CallFailed):
            if (hook.get("failurePolicy") or "Fail") == "Ignore":
                return None
            raise ApiError(500, f'Internal error occurred: failed calling webhook "{name}": '
                                f"failed to call webhook: {outcome}") from None
        answer = outcome.get("response") or {}
        if answer.get("uid") != uid and (hook.get("failurePolicy") or "Fail") == "Fail":
            raise ApiError(500, f'Internal error occurred: failed calling webhook "{name}": '
                                "expected response.uid to match the request.uid")
        if not answer.get("allowed"):
            status = answer.get("status") or {}
            message = status.get("message")
            text = (f'admission webhook "{name}" denied the request: {message}' if message
                    else f'admission webhook "{name}" denied the request without explanation')
            raise ApiError(int(status.get("code") or 400), text, reason=status.get("reason"))
        return dict(answer)

    def _review(self, request: AdmissionRequest) -> dict[str, Any]:
        rt = request.rt
        group, version, name = request.kind or (rt.group, rt.version, rt.kind)
        kind = {"group": group, "version": version, "kind": name}
        resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        body: dict[str, Any] = {
            "uid": str(uuid.uuid4()), "kind": kind, "resource": resource, "requestKind": kind,
            "requestResource": resource, "name": request.name, "operation": request.operation.value,
            "userInfo": {"username": request.user.name, "groups": list(request.user.groups)},
            "object": copy.deepcopy(request.obj), "oldObject": copy.deepcopy(request.old),
            "dryRun": request.dry_run, "options": None,
        }
        if request.user.extra:  # a ServiceAccount token's credential id, pod and node
            body["userInfo"]["extra"] = {k: list(v) for k, v in request.user.extra.items()}
        if request.subresource:
            body["subResource"] = request.subresource
        if request.namespace:
            body["namespace"] = request.namespace
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}



def _exchange(target: Target, hook: Mapping[str, Any], review: Mapping[str, Any]) -> Exchange:
    """The review's uid and the webhook's answer to it, or why it could not be had (never raises)."""
    try:
        return review["request"]["uid"], _send(target, hook, review)
    except _CallFailed as exc:
        return review["request"]["uid"], exc


def _send(target: Target, hook: Mapping[str, Any], review: Mapping[str, Any]) -> dict[str, Any]:
    """POST the review to the webhook and read its AdmissionReview; blocking, and touching no server state, so
    it may run on a worker thread."""
    timeout = float(hook.get("timeoutSeconds") or 10)
    ca = (hook.get("clientConfig") or {}).get("caBundle")
    context = ssl.create_default_context()
    if ca:
        context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
    raw = json.dumps(review).encode()
    try:
        if target.dial is None:
            sock = socket.create_connection((target.connect_host, target.port), timeout=timeout)
        else:
            sock = target.dial()
            sock.settimeout(timeout)
            try:
                sock.connect((target.connect_host, target.port))
            except OSError:
                sock.close()
                raise
        tls = context.wrap_socket(sock, server_hostname=target.server_name)
        conn = http.client.HTTPConnection(target.server_name, target.port, timeout=timeout)
        conn.sock = tls
        try:
            conn.request("POST", f"{target.path}?timeout={int(timeout)}s", body=raw,
                         headers={"Content-Type": "application/json", "Accept": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
    except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
        raise _CallFailed(f'Post "{target.display}": {exc}') from None
    if resp.status != 200:
        raise _CallFailed(f'Post "{target.display}": HTTP {resp.status}')
    try:
        decoded = json.loads(data)
    except ValueError as exc:
        raise _CallFailed(f'Post "{target.display}": the response is not an AdmissionReview ({exc})') from None
    if not isinstance(decoded, dict):
        raise _CallFailed(f'Post "{target.display}": the response is not an AdmissionReview')
    return decoded


class _CallFailed(Exception):
    """The webhook could not be called or gave no usable answer (failurePolicy decides)."""
