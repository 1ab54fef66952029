"""The resource types the emulator serves: Kubernetes built-ins plus those CRDs register at run time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

#: Field selectors each built-in supports beyond metadata.name/metadata.namespace (as kube-apiserver).
_FIELD_SELECTORS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("events.k8s.io", "events"): (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "type",
        "reportingController",
    ),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "namespaces"): ("status.phase",),
    ("", "secrets"): ("type",),
    ("", "replicationcontrollers"): ("status.replicas",),
    ("batch", "jobs"): ("status.successful",),
}


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives in the URL space and how it behaves."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    #: Only for custom resources: the CRD version entry (schema, printer columns, subresources).
    crd_version: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    crd_name: str | None = None
    preserve_unknown: bool = False
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: (group, plural); all versions of a group share one store."""
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_custom(self) -> bool:
        return self.crd_version is not None

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def field_selectors(self) -> tuple[str, ...]:
        extra = _FIELD_SELECTORS.get(self.key, ())
        if self.crd_version is not None:
            extra = tuple(f["jsonPath"].lstrip(".") for f in self.crd_version.get("selectableFields") or [])
        return ("metadata.name", "metadata.namespace", *extra)

    def discovery(self) -> list[dict[str, Any]]:
        """The APIResource entries for the resource and its subresources."""
        verbs = list(self.verbs)
        entries: list[dict[str, Any]] = [
            {
                "name": self.plural,
                "singularName": self.singular,
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": verbs,
                **({"shortNames": list(self.short_names)} if self.short_names else {}),
                **({"categories": list(self.categories)} if self.categories else {}),
            }
        ]
        for sub in self.subresources:
            sub_kind, sub_verbs = _SUBRESOURCE_SHAPES.get(sub, (self.kind, ["get", "patch", "update"]))
            entry = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": sub_kind,
                "verbs": sub_verbs,
            }
            if sub == "eviction":
                entry.update(group="policy", version="v1")
            if sub == "token":
                entry.update(group="authentication.k8s.io", version="v1")
            entries.append(entry)
        return entries


_SUBRESOURCE_SHAPES: dict[str, tuple[str, list[str]]] = {
    "log": ("Pod", ["get"]),
    "binding": ("Binding", ["create"]),
    "eviction": ("Eviction", ["create"]),
    "finalize": ("Namespace", ["update"]),
    "token": ("TokenRequest", ["create"]),
    "exec": ("PodExecOptions", ["create", "get"]),
    "attach": ("PodAttachOptions", ["create", "get"]),
    "portforward": ("PodPortForwardOptions", ["create", "get"]),
}


def _rt(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    subs: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
) -> ResourceType:
    return ResourceType(group, version, kind, plural, kind.lower(), namespaced, short, cats, subs)


BUILTINS: tuple[ResourceType, ...] = (
    _rt(
        "",
        "v1",
        "Pod",
        "pods",
        short=("po",),
        subs=("status", "log", "binding", "eviction", "exec", "attach", "portforward"),
        cats=("all",),
    ),
    _rt("", "v1", "Service", "services", short=("svc",), subs=("status",), cats=("all",)),
    _rt("", "v1", "Node", "nodes", namespaced=False, short=("no",), subs=("status",)),
    _rt("", "v1", "Namespace", "namespaces", namespaced=False, short=("ns",), subs=("status", "finalize")),
    _rt("", "v1", "Event", "events", short=("ev",)),
    ResourceType("", "v1", "Binding", "bindings", "binding", True, verbs=("create",)),
    _rt("", "v1", "ConfigMap", "configmaps", short=("cm",)),
    _rt("", "v1", "Secret", "secrets"),
    _rt("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",), subs=("token",)),
    _rt("", "v1", "Endpoints", "endpoints", short=("ep",)),
    _rt("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), subs=("status",)),
    _rt("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False, short=("pv",), subs=("status",)),
    _rt("", "v1", "ResourceQuota", "resourcequotas", short=("quota",), subs=("status",)),
    _rt("", "v1", "LimitRange", "limitranges", short=("limits",)),
    _rt("", "v1", "PodTemplate", "podtemplates"),
    _rt("", "v1", "ReplicationController", "replicationcontrollers", short=("rc",), subs=("status",)),
    _rt("apps", "v1", "Deployment", "deployments", short=("deploy",), subs=("status",), cats=("all",)),
    _rt("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), subs=("status",), cats=("all",)),
    _rt("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), subs=("status",), cats=("all",)),
    _rt("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), subs=("status",), cats=("all",)),
    _rt("apps", "v1", "ControllerRevision", "controllerrevisions"),
    _rt("batch", "v1", "Job", "jobs", subs=("status",), cats=("all",)),
    _rt("batch", "v1", "CronJob", "cronjobs", short=("cj",), subs=("status",), cats=("all",)),
    _rt("events.k8s.io", "v1", "Event", "events", short=("ev",)),
    _rt("coordination.k8s.io", "v1", "Lease", "leases"),
    _rt("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), subs=("status",)),
    _rt("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False, short=("pc",)),
    _rt("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    _rt("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short=("netpol",)),
    _rt("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    ResourceType(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        "apiservice",
        False,
        categories=("api-extensions",),
        subresources=("status",),
    ),
    # Reviews: create-only questions answered from the authorizers, never stored (reviews.py).
    *(
        ResourceType(group, "v1", kind, kind.lower() + "s", kind.lower(), kind.startswith("Local"), verbs=("create",))
        for group, kind in (
            ("authentication.k8s.io", "SelfSubjectReview"),
            ("authorization.k8s.io", "LocalSubjectAccessReview"),
            ("authorization.k8s.io", "SelfSubjectAccessReview"),
            ("authorization.k8s.io", "SelfSubjectRulesReview"),
            ("authorization.k8s.io", "SubjectAccessReview"),
        )
    ),
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        short=("crd", "crds"),
        subs=("status",),
        cats=("api-extensions",),
    ),
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        namespaced=False,
        cats=("api-extensions",),
    ),
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        namespaced=False,
        cats=("api-extensions",),
    ),
)

#: Groups whose preferred version is fixed; listed in discovery in this order (as kube-apiserver does).
BUILTIN_GROUP_ORDER = (
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "batch",
    "policy",
    "rbac.authorization.k8s.io",
    "coordination.k8s.io",
    "scheduling.k8s.io",
    "discovery.k8s.io",
    "networking.k8s.io",
    "apiextensions.k8s.io",
    "admissionregistration.k8s.io",
)


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """Resource types (one per served version) a CustomResourceDefinition declares."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        subs = tuple(k for k in ("status", "scale") if k in (ver.get("subresources") or {}))
        schema = (ver.get("schema") or {}).get("openAPIV3Schema") or {}
        out.append(
            ResourceType(
                group=spec["group"],
                version=ver["name"],
                kind=names["kind"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subs,
                crd_version=ver,
                crd_name=crd["metadata"]["name"],
                preserve_unknown=bool(schema.get("x-kubernetes-preserve-unknown-fields")),
            )
        )
    return out


class Registry:
    """Lookup of served resource types by group/version/plural, by kind, and for discovery."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def add_crd(self, crd: dict[str, Any]) -> None:
        self.remove_crd(crd["metadata"]["name"])
        for rt in from_crd(crd):
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_crd(self, crd_name: str) -> None:
        for key, rt in list(self._types.items()):
            if rt.crd_name == crd_name:
                del self._types[key]

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def by_uid_scope(self, group: str, plural: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.key == (group, plural)]

    def storage_keys(self) -> set[tuple[str, str]]:
        return {rt.key for rt in self._types.values()}

    def groups(self) -> dict[str, list[str]]:
        """Group name → served versions (preferred first), built-in groups first."""
        groups: dict[str, list[str]] = {}
        for g in BUILTIN_GROUP_ORDER:
            groups[g] = []
        for rt in self._types.values():
            if rt.group and rt.version not in groups.setdefault(rt.group, []):
                groups[rt.group].append(rt.version)
        for versions in groups.values():
            versions.sort(key=_version_priority)
        return {g: v for g, v in groups.items() if v}

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, higher numbers first."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)
