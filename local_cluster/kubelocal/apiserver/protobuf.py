"""Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`) for the built-in kinds kubectl,
Helm and client-go write: the `k8s\\x00` + runtime.Unknown envelope around the typed message, decoded to
the same JSON object the JSON path gives, and encoded back for clients that ask for protobuf.

The message descriptors are built once, at first use, from `protobuf_fields` (field numbers) and the
OpenAPI schemas (field types), with the `protobuf` runtime's descriptor pool: no generated code, no protoc.
Go's encoder writes every non-pointer field, so zero values that JSON would omit (`omitempty`) are
dropped again when decoding, except for required fields and the pointer fields where zero means something.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .errors import ApiError
from .protobuf_schema import PACKAGE, message_for, new_message, required_fields, schema_properties

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

KEEP_ZERO = frozenset(
    "replicas parallelism completions backoffLimit activeDeadlineSeconds terminationGracePeriodSeconds "
    "automountServiceAccountToken immutable runAsUser runAsGroup runAsNonRoot fsGroup privileged "
    "allowPrivilegeEscalation readOnlyRootFilesystem suspend ttlSecondsAfterFinished progressDeadlineSeconds "
    "revisionHistoryLimit leaseDurationSeconds leaseTransitions value optional enableServiceLinks hostUsers "
    "setHostnameAsFQDN shareProcessNamespace deletionGracePeriodSeconds gracePeriodSeconds orphanDependents "
    "controller blockOwnerDeletion remainingItemCount priority defaultMode mode expirationSeconds minDomains "
    "backoffLimitPerIndex maxFailedIndexes manualSelector tolerationSeconds healthCheckNodePort "
    "allocateLoadBalancerNodePorts publishNotReadyAddresses ready active succeeded failed terminating "
    "observedGeneration collisionCount".split()
)


class NotEncodable(Exception):
    """This object has something the protobuf tables here do not carry; answer in JSON instead."""


# --- decoding ---------------------------------------------------------------------------------------------


UNSUPPORTED = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json, application/yaml"
)


def decode(raw: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for; 415 for kinds not served in protobuf."""
    if not raw.startswith(MAGIC):
        raise ApiError(400, "the body of the request was not a Kubernetes protobuf object (no k8s\\x00 prefix)")
    envelope = new_message("runtime.Unknown")
    try:
        envelope.ParseFromString(raw[len(MAGIC) :])
    except DecodeError as e:
        raise ApiError(400, f"the body of the request could not be decoded: {e}") from None
    api_version = envelope.typeMeta.apiVersion  # type: ignore[attr-defined]
    kind = envelope.typeMeta.kind  # type: ignore[attr-defined]
    message = message_for(api_version, kind)
    if message is None:
        raise ApiError(415, UNSUPPORTED)
    body = new_message(message)
    try:
        body.ParseFromString(envelope.raw)  # type: ignore[attr-defined]
    except DecodeError as e:
        raise ApiError(400, f"the body of the request could not be decoded: {e}") from None
    return {"kind": kind, "apiVersion": api_version, **_to_json(body, message)}


def _format_time(seconds: int, nanos: int, micro: bool) -> str:
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC) + dt.timedelta(microseconds=nanos // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _special_to_json(msg: Message, kind: str) -> Any:
    if kind in ("meta_v1_Time", "meta_v1_MicroTime"):
        seconds, nanos = msg.seconds, msg.nanos  # type: ignore[attr-defined]
        return None if seconds == 0 and nanos == 0 else _format_time(seconds, nanos, kind == "meta_v1_MicroTime")
    if kind == "resource_Quantity":
        return msg.string  # type: ignore[attr-defined]
    if kind == "intstr_IntOrString":
        return msg.strVal if msg.type == 1 else msg.intVal  # type: ignore[attr-defined]
    if kind == "meta_v1_FieldsV1":
        return json.loads(msg.Raw) if msg.Raw else {}  # type: ignore[attr-defined]
    if kind == "runtime_RawExtension":
        return json.loads(msg.raw) if msg.raw else None  # type: ignore[attr-defined]
    return _NOT_SPECIAL


_NOT_SPECIAL = object()


def _value_to_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _to_json(value, field.message_type.full_name.removeprefix(PACKAGE + ".").replace("_", ".", 2))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _to_json(msg: Message, message: str) -> Any:
    name = msg.DESCRIPTOR.name
    special = _special_to_json(msg, name)
    if special is not _NOT_SPECIAL:
        return special
    if len(UnknownFieldSet(msg)):
        numbers = sorted({f.field_number for f in UnknownFieldSet(msg)})
        raise ApiError(
            415,
            f"the protobuf body sets fields {numbers} of {message.split('.')[-1]}, which the local API server does "
            "not decode yet; send this object as JSON (content type application/json)",
        )
    required = required_fields(message)
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value_to_json(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value_to_json(field, v) for v in value]
        else:
            converted = _value_to_json(field, value)
            inline = field.type == FieldDescriptor.TYPE_MESSAGE and field.name not in schema_properties(message)
            if inline and isinstance(converted, dict):
                out.update(converted)
                continue
            if converted is None:
                continue
            if (
                converted in ("", 0, False)
                and not isinstance(converted, dict)
                and field.name not in required
                and field.name not in KEEP_ZERO
            ):
                continue
            out[field.name] = converted
    return out


# --- encoding ---------------------------------------------------------------------------------------------

_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _parse_time(text: str) -> tuple[int, int]:
    match = _RFC3339.match(text)
    if not match:
        raise NotEncodable(f"time {text!r}")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    moment = dt.datetime.fromisoformat(match.group(1) + zone)
    fraction = match.group(2) or ".0"
    return int(moment.timestamp()), int(float(fraction) * 1e9)


def _fill(msg: Message, value: Any) -> None:
    name = msg.DESCRIPTOR.name
    if name in ("meta_v1_Time", "meta_v1_MicroTime"):
        msg.seconds, msg.nanos = _parse_time(value)  # type: ignore[attr-defined]
    elif name == "resource_Quantity":
        msg.string = str(value)  # type: ignore[attr-defined]
    elif name == "intstr_IntOrString":
        if isinstance(value, str):
            msg.type, msg.strVal = 1, value  # type: ignore[attr-defined]
        else:
            msg.type, msg.intVal = 0, int(value)  # type: ignore[attr-defined]
    elif name == "meta_v1_FieldsV1":
        msg.Raw = json.dumps(value, separators=(",", ":")).encode()  # type: ignore[attr-defined]
    elif name == "runtime_RawExtension":
        msg.raw = json.dumps(value, separators=(",", ":")).encode()  # type: ignore[attr-defined]
    else:
        _fill_object(msg, value)


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value)
    return value


def _fill_object(msg: Message, obj: Mapping[str, Any]) -> None:
    if not isinstance(obj, Mapping):
        raise NotEncodable(f"{msg.DESCRIPTOR.name}: not an object")
    msg.SetInParent()  # Go writes non-pointer structs even when empty (`strategy: {}`)
    fields = msg.DESCRIPTOR.fields_by_name
    inlines = [
        f
        for f in msg.DESCRIPTOR.fields
        if f.type == FieldDescriptor.TYPE_MESSAGE
        and not f.message_type.GetOptions().map_entry
        and f.name not in obj
        and f.name not in schema_properties(_message_name(msg.DESCRIPTOR))
    ]
    for key, value in obj.items():
        field = fields.get(key)
        if value is None or (field is None and key in ("apiVersion", "kind")):
            continue
        if field is None:
            target = next((f for f in inlines if key in f.message_type.fields_by_name), None)
            if target is None:
                raise NotEncodable(f"{msg.DESCRIPTOR.name}.{key}")
            _fill_object(getattr(msg, target.name), {key: value})
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            container = getattr(msg, key)
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(container[k], v)
                else:
                    container[k] = _scalar(value_field, v)
        elif field.is_repeated:
            container = getattr(msg, key)
            for item in value:
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(container.add(), item)
                else:
                    container.append(_scalar(field, item))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            _fill(getattr(msg, key), value)
        else:
            try:
                setattr(msg, key, _scalar(field, value))
            except (TypeError, ValueError) as e:
                raise NotEncodable(f"{key}: {e}") from None


def _message_name(descriptor: Descriptor) -> str:
    return descriptor.name.replace("_", ".", 2)


def encode(obj: Mapping[str, Any]) -> bytes:
    """`obj` in the protobuf envelope; NotEncodable when its kind or a field is not carried here."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    message = message_for(api_version, kind)
    if message is None:
        raise NotEncodable(f"{api_version}/{kind}")
    body = new_message(message)
    _fill_object(body, obj)
    envelope = new_message("runtime.Unknown")
    envelope.typeMeta.apiVersion = api_version  # type: ignore[attr-defined]
    envelope.typeMeta.kind = kind  # type: ignore[attr-defined]
    envelope.raw = body.SerializeToString()  # type: ignore[attr-defined]
    return MAGIC + envelope.SerializeToString()


def wants_protobuf(accept: str) -> bool:
    """Whether the client's most preferred media type is protobuf (client-go: protobuf, then JSON)."""
    first = accept.split(",")[0].split(";")[0].strip().lower()
    return first == MEDIA_TYPE
