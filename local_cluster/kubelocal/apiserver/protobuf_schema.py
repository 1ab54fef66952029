"""The protobuf messages of the Kubernetes kinds served in protobuf, built at first use from
`protobuf_fields` (field numbers, carried over from k8s.io/api's generated.proto) and the OpenAPI schemas
(field types: go-to-protobuf names every proto field after its JSON name), with the `protobuf` runtime's
descriptor pool: no generated code, no protoc."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from .protobuf_fields import SPEC
from .schema import core_definitions

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
    ("authentication.k8s.io/v1", "TokenRequest"): "authentication.v1.TokenRequest",
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
_TYPES = {
    "string": FieldDescriptor.TYPE_STRING,
    "boolean": FieldDescriptor.TYPE_BOOL,
    "integer": FieldDescriptor.TYPE_INT64,
    "number": FieldDescriptor.TYPE_DOUBLE,
}


SKIPPED: list[str] = []  # spec fields the 1.37 schemas do not have (filled when the pool is built)


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
def message_pool() -> tuple[descriptor_pool.DescriptorPool, dict[str, str]]:
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


def descriptor(message: str) -> Descriptor:
    return message_pool()[0].FindMessageTypeByName(f"{PACKAGE}.{message.replace('.', '_')}")


def new_message(message: str) -> Message:
    return message_factory.GetMessageClass(descriptor(message))()


def message_for(api_version: str, kind: str) -> str | None:
    """The message for a kind served in protobuf (XList kinds too), else None."""
    if kind.endswith("List") and (api_version, kind[:-4]) in KINDS:
        return KINDS[(api_version, kind[:-4])] + "List"
    return KINDS.get((api_version, kind))


def required_fields(message: str) -> frozenset[str]:
    owner = message_pool()[1].get(message, openapi_name(message)) if message.count(".") == 2 else ""
    return frozenset((core_definitions().get(owner) or {}).get("required") or [])


@functools.cache
def schema_properties(message: str) -> frozenset[str]:
    owner = message_pool()[1].get(message, openapi_name(message)) if message.count(".") == 2 else ""
    return frozenset((core_definitions().get(owner) or {}).get("properties") or {})
