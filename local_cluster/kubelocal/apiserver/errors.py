"""Kubernetes `Status` error bodies, raised as exceptions by the emulator and turned into HTTP responses."""

from __future__ import annotations

import json
from typing import Any

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


#: metav1.Status's fields in its Go struct's order, the order kube-apiserver writes them in.
STATUS_FIELDS = ("kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code")


def is_status(body: Any) -> bool:
    return isinstance(body, dict) and body.get("kind") == "Status"


def status_json(body: dict[str, Any]) -> bytes:
    """A Status as kube-apiserver writes it: fields in the struct's order, compact, ending with a newline
    (Go's json.Encoder). Clients compare this text: the official client puts it into its errors."""
    ordered = {k: body[k] for k in STATUS_FIELDS if k in body}
    ordered.update((k, v) for k, v in body.items() if k not in ordered)
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class ApiError(Exception):
    """An API failure carrying the HTTP code and the Kubernetes Status reason, message and details."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        """The `Status` object Kubernetes sends for this failure."""
        return status_body(self.code, self.message, self.reason, self.details)


def status_body(code: int, message: str, reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failure `Status` object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `Status` object of a successful delete or subresource call."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    return body


def resource_label(group: str, plural: str) -> str:
    """How Kubernetes names a resource in messages: `pods`, `tfjobs.tfjob.dev`."""
    return f"{plural}.{group}" if group else plural


def details(name: str, group: str, kind: str, **more: Any) -> dict[str, Any]:
    """StatusDetails as Go serialises them: empty fields are left out (`omitempty`)."""
    out = {"name": name, "group": group, "kind": kind, **more}
    return {k: v for k, v in out.items() if v not in ("", None)}


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(404, f'{resource_label(group, plural)} "{name}" not found', details=details(name, group, plural))


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{resource_label(group, plural)} "{name}" already exists',
        reason="AlreadyExists",
        details=details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str | None = None) -> ApiError:
    """409 Conflict: a stale resourceVersion, or `why` (a failed precondition)."""
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource_label(group, plural)} "{name}": {why}',
        reason="Conflict",
        details=details(name, group, plural),
    )


def expired(message: str) -> ApiError:
    """410 Expired (NewResourceExpired): no details."""
    return ApiError(410, message, reason="Expired")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """504 from the watch cache when a client asks for a resourceVersion the server has not reached."""
    return ApiError(
        504,
        f"Timeout: Too large resource version: {requested}, current: {current}",
        reason="Timeout",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; causes are (field, cause type, message) like `spec.replicas`, `FieldValueRequired`."""
    qualified = f"{kind}.{group}" if group else kind
    joined = ", ".join(f"{field}: {msg}" for field, _, msg in causes)
    if len(causes) > 1:
        joined = "[" + joined + "]"
    return ApiError(
        422,
        f'{qualified} "{name}" is invalid: {joined}',
        details=details(
            name, group, kind, causes=[{"reason": typ, "message": msg, "field": field} for field, typ, msg in causes]
        ),
    )
