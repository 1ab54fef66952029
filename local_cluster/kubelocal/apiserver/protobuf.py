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
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .errors import ApiError
from .protobuf_fields import SPEC
from .schema import core_definitions

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
PACKAGE = "kubelocal.k8s"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"

# apiVersion/kind -> message, for the kinds served in protobuf (their lists are built alongside).
KINDS: dict[tuple[str, str], str] = {
    **{
        ("v1", k): f"core.v1.{k}"
        for k in ("Namespace", "ConfigMap", "Secret", "ServiceAccount", "Service", "Endpoints", "Pod", "Event")
    },
    ("apps/v1", "Deployment"): "apps.v1.Deployment",
    ("apps/v1", "ReplicaSet"): "apps.v1.ReplicaSet",
    ("batch/v1", "Job"): "batch.v1.Job",
    **{
        ("rbac.authorization.k8s.io/v1", k): f"rbac.v1.{k}"
        for k in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    },
    ("coordination.k8s.io/v1", "Lease"): "coordination.v1.Lease",
    ("scheduling.k8s.io/v1", "PriorityClass"): "scheduling.v1.PriorityClass",
    **{
        ("authorization.k8s.io/v1", k): f"authorization.v1.{k}"
        for k in (
            "SelfSubjectAccessReview",
            "SubjectAccessReview",
            "LocalSubjectAccessReview",
            "SelfSubjectRulesReview",
        )
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "authentication.v1.SelfSubjectReview",
    ("v1", "Status"): "meta.v1.Status",
    ("meta.k8s.io/v1", "Status"): "meta.v1.Status",
    ("v1", "DeleteOptions"): "meta.v1.DeleteOptions",
    ("meta.k8s.io/v1", "DeleteOptions"): "meta.v1.DeleteOptions",
}

# Scalar wrapper types: (message, JSON shape) for the OpenAPI definitions that are messages in proto.
TIME, MICRO_TIME = f"{META}.Time", f"{META}.MicroTime"
SPECIAL = {
    TIME: "meta.v1.Time",
    MICRO_TIME: "meta.v1.MicroTime",
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "resource.Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr.IntOrString",
    f"{META}.FieldsV1": "meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "runtime.RawExtension",
}
FIXED: dict[str, list[tuple[str, int, int]]] = {  # message -> (field, number, proto type)
    "meta.v1.Time": [("seconds", 1, FieldDescriptor.TYPE_INT64), ("nanos", 2, FieldDescriptor.TYPE_INT32)],
    "meta.v1.MicroTime": [("seconds", 1, FieldDescriptor.TYPE_INT64), ("nanos", 2, FieldDescriptor.TYPE_INT32)],
    "resource.Quantity": [("string", 1, FieldDescriptor.TYPE_STRING)],
    "intstr.IntOrString": [
        ("type", 1, FieldDescriptor.TYPE_INT64),
        ("intVal", 2, FieldDescriptor.TYPE_INT32),
        ("strVal", 3, FieldDescriptor.TYPE_STRING),
    ],
    "meta.v1.FieldsV1": [("Raw", 1, FieldDescriptor.TYPE_BYTES)],
    "runtime.RawExtension": [("raw", 1, FieldDescriptor.TYPE_BYTES)],
    "runtime.TypeMeta": [("apiVersion", 1, FieldDescriptor.TYPE_STRING), ("kind", 2, FieldDescriptor.TYPE_STRING)],
}
# Pointer fields in Go: present on the wire only when set, so a zero there is meaningful and kept.
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
_TYPES = {
    "string": FieldDescriptor.TYPE_STRING,
    "boolean": FieldDescriptor.TYPE_BOOL,
    "integer": FieldDescriptor.TYPE_INT64,
    "number": FieldDescriptor.TYPE_DOUBLE,
}


SKIPPED: list[str] = []  # spec fields the 1.37 schemas do not have (filled when the pool is built)


class NotEncodable(Exception):
    """This object has something the protobuf tables here do not carry; answer in JSON instead."""


def openapi_name(message: str) -> str:
    group, version, name = message.split(".")
    return f"{META}.{name}" if group == "meta" else f"io.k8s.api.{group}.{version}.{name}"


def _parse_spec() -> dict[str, list[tuple[str, int, str | None]]]:
    """message -> [(json field, number, inline message or None)]."""
    out: dict[str, list[tuple[str, int, str | None]]] = {}
    lines: list[str] = []
    for line in SPEC.strip().splitlines():
        if line.startswith(" "):
            lines[-1] += line
        else:
            lines.append(line)
    for line in lines:
        name, _, tokens = line.partition(":")
        fields = out.setdefault(name.rstrip("+"), []) if name.endswith("+") else out.setdefault(name, [])
        number = fields[-1][1] if fields else 0
        for token in tokens.split():
            if token.startswith("="):
                fields.extend(out[token[1:]])
                continue
            inline = None
            if token.startswith("^"):
                token = token[1:]
                token, _, explicit = token.partition("@")
                group_version = ".".join(name.split(".")[:2])
                inline = f"{group_version}.{explicit or token[0].upper() + token[1:]}"
            token, _, num = token.partition(":")
            number = int(num) if num else number + 1
            fields.append((token, number, inline))
    return out


def _unwrap(prop: Mapping[str, Any]) -> Mapping[str, Any]:
    all_of = prop.get("allOf")
    return all_of[0] if isinstance(all_of, list) and len(all_of) == 1 else prop


def _type(prop: Mapping[str, Any]) -> str:
    """The JSON type; the schemas here write nullable ones as ["object", "null"]."""
    typ = prop.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), None)
    return str(typ)


def _ref(prop: Mapping[str, Any]) -> str | None:
    ref = _unwrap(prop).get("$ref")
    return str(ref).rsplit("/", 1)[-1] if ref else None


class _Builder:
    """Builds one FileDescriptorProto holding every message the spec and the schemas reach."""

    def __init__(self) -> None:
        self.spec = _parse_spec()
        self.defs = core_definitions()
        self.file = descriptor_pb2.FileDescriptorProto(name="kubelocal_k8s.proto", package=PACKAGE, syntax="proto2")
        self.done: set[str] = set()
        self.owner: dict[str, str] = {}  # inlined message -> the OpenAPI definition holding its fields
        self.skipped: list[str] = []

    def message_for_ref(self, ref: str) -> str:
        if ref in SPECIAL:
            return self.build(SPECIAL[ref])
        group_version_name = ref.removeprefix("io.k8s.api.").replace(f"{META}.", "meta.v1.")
        return self.build(group_version_name)

    def build(self, message: str) -> str:
        full = f"{PACKAGE}.{message.replace('.', '_')}"
        if message in self.done:
            return full
        self.done.add(message)
        proto = self.file.message_type.add(name=message.replace(".", "_"))
        if message in FIXED:
            for field, number, typ in FIXED[message]:
                proto.field.add(
                    name=field, json_name=field, number=number, type=typ, label=FieldDescriptor.LABEL_OPTIONAL
                )
            return full
        definition = self.defs.get(self.owner.get(message, openapi_name(message))) or {}
        props = definition.get("properties") or {}
        for field, number, inline in self.spec.get(message, []):
            if inline:
                self.owner.setdefault(inline, self.owner.get(message, openapi_name(message)))
                self._add(proto, field, number, FieldDescriptor.TYPE_MESSAGE, self.build(inline), repeated=False)
                continue
            if field not in props:  # newer than the 1.37 schemas: not carried (a body setting it is refused)
                self.skipped.append(f"{message}.{field}")
                continue
            self._add_from_schema(proto, field, number, props[field])
        return full

    def _scalar_or_message(self, prop: Mapping[str, Any]) -> tuple[int, str | None]:
        ref = _ref(prop)
        if ref:
            return FieldDescriptor.TYPE_MESSAGE, self.message_for_ref(ref)
        prop = _unwrap(prop)
        if prop.get("format") == "byte":
            return FieldDescriptor.TYPE_BYTES, None
        return _TYPES.get(_type(prop), FieldDescriptor.TYPE_STRING), None

    def _add_from_schema(self, proto: descriptor_pb2.DescriptorProto, field: str, number: int, prop: Any) -> None:
        prop = _unwrap(prop)
        if _type(prop) == "array":
            typ, type_name = self._scalar_or_message(prop.get("items") or {})
            self._add(proto, field, number, typ, type_name, repeated=True)
        elif _type(prop) == "object" and isinstance(prop.get("additionalProperties"), dict):
            typ, type_name = self._scalar_or_message(prop["additionalProperties"])
            entry = proto.nested_type.add(name=field[0].upper() + field[1:] + "Entry")
            entry.options.map_entry = True
            entry.field.add(
                name="key", number=1, type=FieldDescriptor.TYPE_STRING, label=FieldDescriptor.LABEL_OPTIONAL
            )
            value = entry.field.add(name="value", number=2, type=typ, label=FieldDescriptor.LABEL_OPTIONAL)
            if type_name:
                value.type_name = "." + type_name
            self._add(
                proto,
                field,
                number,
                FieldDescriptor.TYPE_MESSAGE,
                f"{PACKAGE}.{proto.name}.{entry.name}",
                repeated=True,
            )
        else:
            typ, type_name = self._scalar_or_message(prop)
            self._add(proto, field, number, typ, type_name, repeated=False)

    @staticmethod
    def _add(
        proto: descriptor_pb2.DescriptorProto,
        field: str,
        number: int,
        typ: int,
        type_name: str | None,
        *,
        repeated: bool,
    ) -> None:
        label = FieldDescriptor.LABEL_REPEATED if repeated else FieldDescriptor.LABEL_OPTIONAL
        added = proto.field.add(name=field, json_name=field, number=number, type=typ, label=label)
        if type_name:
            added.type_name = "." + type_name


@functools.cache
def _pool() -> tuple[descriptor_pool.DescriptorPool, dict[str, str]]:
    builder = _Builder()
    for message in sorted(set(KINDS.values())):
        builder.build(message)
    # XList wrappers (ListMeta metadata = 1, repeated items = 2), and the envelope itself.
    list_meta = builder.build("meta.v1.ListMeta")
    for message in sorted({m for m in KINDS.values() if m.split(".")[0] != "meta"}):
        proto = builder.file.message_type.add(name=message.replace(".", "_") + "List")
        _Builder._add(proto, "metadata", 1, FieldDescriptor.TYPE_MESSAGE, list_meta, repeated=False)
        _Builder._add(
            proto, "items", 2, FieldDescriptor.TYPE_MESSAGE, f"{PACKAGE}.{message.replace('.', '_')}", repeated=False
        )
        proto.field[-1].label = FieldDescriptor.LABEL_REPEATED
    type_meta = builder.build("runtime.TypeMeta")
    unknown = builder.file.message_type.add(name="runtime_Unknown")
    _Builder._add(unknown, "typeMeta", 1, FieldDescriptor.TYPE_MESSAGE, type_meta, repeated=False)
    _Builder._add(unknown, "raw", 2, FieldDescriptor.TYPE_BYTES, None, repeated=False)
    _Builder._add(unknown, "contentEncoding", 3, FieldDescriptor.TYPE_STRING, None, repeated=False)
    _Builder._add(unknown, "contentType", 4, FieldDescriptor.TYPE_STRING, None, repeated=False)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(builder.file)
    SKIPPED[:] = builder.skipped
    return pool, dict(builder.owner)


def _descriptor(message: str) -> Descriptor:
    return _pool()[0].FindMessageTypeByName(f"{PACKAGE}.{message.replace('.', '_')}")


def _new(message: str) -> Message:
    return message_factory.GetMessageClass(_descriptor(message))()


def message_for(api_version: str, kind: str) -> str | None:
    """The message for a kind served in protobuf (XList kinds too), else None."""
    if kind.endswith("List") and (api_version, kind[:-4]) in KINDS:
        return KINDS[(api_version, kind[:-4])] + "List"
    return KINDS.get((api_version, kind))


# --- decoding ---------------------------------------------------------------------------------------------


UNSUPPORTED = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json, application/yaml"
)


def decode(raw: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for; 415 for kinds not served in protobuf."""
    if not raw.startswith(MAGIC):
        raise ApiError(400, "the body of the request was not a Kubernetes protobuf object (no k8s\\x00 prefix)")
    envelope = _new("runtime.Unknown")
    try:
        envelope.ParseFromString(raw[len(MAGIC) :])
    except DecodeError as e:
        raise ApiError(400, f"the body of the request could not be decoded: {e}") from None
    api_version = envelope.typeMeta.apiVersion  # type: ignore[attr-defined]
    kind = envelope.typeMeta.kind  # type: ignore[attr-defined]
    message = message_for(api_version, kind)
    if message is None:
        raise ApiError(415, UNSUPPORTED)
    body = _new(message)
    try:
        body.ParseFromString(envelope.raw)  # type: ignore[attr-defined]
    except DecodeError as e:
        raise ApiError(400, f"the body of the request could not be decoded: {e}") from None
    return {"kind": kind, "apiVersion": api_version, **_to_json(body, message)}


def _required(message: str) -> frozenset[str]:
    owner = _pool()[1].get(message, openapi_name(message)) if message.count(".") == 2 else ""
    return frozenset((core_definitions().get(owner) or {}).get("required") or [])


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
    required = _required(message)
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value_to_json(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value_to_json(field, v) for v in value]
        else:
            converted = _value_to_json(field, value)
            inline = field.type == FieldDescriptor.TYPE_MESSAGE and field.name not in _props(message)
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


@functools.cache
def _props(message: str) -> frozenset[str]:
    owner = _pool()[1].get(message, openapi_name(message)) if message.count(".") == 2 else ""
    return frozenset((core_definitions().get(owner) or {}).get("properties") or {})


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
        and f.name not in _props(_message_name(msg.DESCRIPTOR))
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
    body = _new(message)
    _fill_object(body, obj)
    envelope = _new("runtime.Unknown")
    envelope.typeMeta.apiVersion = api_version  # type: ignore[attr-defined]
    envelope.typeMeta.kind = kind  # type: ignore[attr-defined]
    envelope.raw = body.SerializeToString()  # type: ignore[attr-defined]
    return MAGIC + envelope.SerializeToString()


def wants_protobuf(accept: str) -> bool:
    """Whether the client's most preferred media type is protobuf (client-go: protobuf, then JSON)."""
    first = accept.split(",")[0].split(";")[0].strip().lower()
    return first == MEDIA_TYPE
