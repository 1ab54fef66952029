"""The TFJob CustomResourceDefinition, generated from the API models (`tfjob crd` prints it).

The pydantic JSON schema is turned into a structural openAPIV3Schema: references inlined, optional fields
made plain (absent means unset), titles dropped, descriptions kept for `kubectl explain`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tfjob_operator.api import TFJobSpec, TFJobStatus, constants, limits

#: The checked-in CRD; a test fails when it differs from `generate()`.
CRD_PATH = Path(__file__).resolve().parents[3] / "crds" / "tfjob.yaml"
#: Kubeflow's published TFJob CRD (`tfjobs.kubeflow.org`), vendored with its source and license in third_party/
#: (deploy/render_manifests.py copies it into the chart, which installs it with kubeflow.installCRD=true).
KUBEFLOW_CRD_PATH = Path(__file__).resolve().parents[3] / "third_party" / "crds" / "kubeflow.org_tfjobs.yaml"

_DROP = {"title", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        types = {o.get("type") for o in options}
        if types == {"integer", "string"}:
            return {**_structural(rest, defs), "x-kubernetes-int-or-string": True}
        if len(options) == 1:
            merged = {**options[0], **rest}
            if merged.get("default", 0) is None:
                merged.pop("default")
            return _structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties" and value is False:
            continue  # structural schemas forbid it beside properties; the API server prunes unknown fields
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        elif key == "propertyNames":
            continue  # not part of structural schemas; keys are checked by the operator's validation
        else:
            out[key] = _structural(value, defs)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    if out.get("type") == "object" and out.get("additionalProperties") is True:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _model_schema(model: type) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")  # type: ignore[attr-defined]
    return dict(_structural(schema, schema.get("$defs", {})))


_REPLICAS = "(has(self.spec.tfReplicaSpecs[k].replicas) ? self.spec.tfReplicaSpecs[k].replicas : 1)"
#: Each replica type's last pod hostname `<name>-<type>-<replicas - 1>` fits in a DNS label. The type is spelt in
#: pod names as the key is, except Master (chief, one shorter; an odd case such as mAster is taken at its own length,
#: which refuses one character early and never admits a name whose pods do not fit). Comparisons, not matches():
#: the API server's cost estimate of a regex over an unbounded key would pass its budget.
_HOSTNAMES_FIT = (
    "!has(self.spec) || !has(self.spec.tfReplicaSpecs) || self.spec.tfReplicaSpecs.all(k, "
    f"{_REPLICAS} < 1 || self.metadata.name.size() + (k == 'Master' || k == 'master' || k == 'MASTER' ? 5 : "
    f"k.size()) + string({_REPLICAS} - 1).size() + 2 <= {limits.MAX_HOSTNAME_LENGTH})"
)


#: A pod's image: set, not blank, no leading or trailing whitespace (kube-apiserver's rules for a pod's containers,
#: whitespace as Go's strings.TrimSpace reads it), in Go's regular expression syntax.
_NOT_SPACE = r"[^\t-\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"  # GO_SPACE
IMAGE_PATTERN = f"^{_NOT_SPACE}([\\s\\S]*{_NOT_SPACE})?$"
#: A resource quantity that is not negative, as kube-apiserver's ParseQuantity reads it: a sign, digits with an
#: optional fraction (either may be empty: "-", "." and "+" are zero), then a decimal SI, binary SI or exponent
#: suffix; "-" only before a zero ("-0" is zero, not negative). The int form is refused below 0 by `minimum`.
QUANTITY_PATTERN = r"^(\+?[0-9]*(\.[0-9]*)?|-0*(\.0*)?)([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]+)?$"
_QUANTITIES: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"x-kubernetes-int-or-string": True, "minimum": 0, "minLength": 1,
                             "pattern": QUANTITY_PATTERN},
}
#: Our own field's quantities (PodGroup minResources) through CEL's quantity library (Kubernetes 1.28+): its map
#: and strings are bounded, which keeps the rule's cost estimate far inside the API server's budget.
MIN_RESOURCES_RULE = {
    # isLessThan, not sign(): sign() is not in the quantity library of the CEL environment a new CRD's rules are
    # compiled in (kube-apiserver 1.37 refuses it there); isLessThan is, since 1.28.
    "rule": "type(self) == string ? isQuantity(self) && !quantity(self).isLessThan(quantity('0')) : self >= 0",
    "message": "must be a quantity ≥ 0 (e.g. 8, 500m, 4Gi)",
}


def _template_schema(described: dict[str, Any]) -> dict[str, Any]:
    """A pod template as the CRD types it: only what its rules read, each as Kubernetes refuses a pod for it, with
    no bound Kubernetes does not have (structural rules, which have no CEL cost: a per-container CEL rule would need
    a cap on containers for the API server's cost estimate). The rest is kept and checked by validation."""
    container = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["image"],
        "properties": {
            "image": {"type": "string", "pattern": IMAGE_PATTERN,
                      "description": "Required: not blank, no leading or trailing whitespace."},
            "resources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                          "properties": {"limits": copy.deepcopy(_QUANTITIES),
                                         "requests": copy.deepcopy(_QUANTITIES)}},
        },
    }
    pod_spec = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"containers": {"type": "array", "items": container},
                       "initContainers": {"type": "array", "items": copy.deepcopy(container)},
                       "overhead": copy.deepcopy(_QUANTITIES)},
    }
    return {**described, "type": "object", "properties": {"spec": pod_spec}}


def generate() -> dict[str, Any]:
    """The CRD object for tfjobs.tfjob.dev."""
    spec_schema = _model_schema(TFJobSpec)
    replica = spec_schema["properties"]["tfReplicaSpecs"]["additionalProperties"]
    replica["properties"]["template"] = _template_schema(replica["properties"]["template"])
    scheduling = spec_schema["properties"]["runPolicy"]["properties"]["schedulingPolicy"]
    min_resources = scheduling["properties"]["minResources"]
    min_resources["maxProperties"] = limits.MAX_MIN_RESOURCES
    min_resources["additionalProperties"] = {**min_resources["additionalProperties"],
                                             "maxLength": limits.MAX_QUANTITY_LENGTH,
                                             "x-kubernetes-validations": [MIN_RESOURCES_RULE]}
    # runPolicy defaults to {} so that its own field defaults (cleanPodPolicy: Running) apply when it is absent.
    spec_schema["properties"]["runPolicy"]["default"] = {}
    status_schema = _model_schema(TFJobStatus)
    spec_schema["description"] = "Desired state of the TFJob: replica types, run policy, success policy."
    status_schema["description"] = "Observed state of the TFJob, written by the operator."
    open_api = {
        "type": "object",
        "description": "A distributed TensorFlow training job, gang-scheduled, restarted as a whole.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "required": ["spec"],
        # A root rule reads metadata.name: the name limit keeps every pod hostname a DNS label.
        "x-kubernetes-validations": [{"rule": _HOSTNAMES_FIT, "message": limits.NAME_TOO_LONG.split(": ", 1)[1]}],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{constants.PLURAL}.{constants.GROUP}"},
        "spec": {
            "group": constants.GROUP,
            "names": {
                "kind": constants.KIND,
                "listKind": f"{constants.KIND}List",
                "plural": constants.PLURAL,
                "singular": constants.SINGULAR,
                "shortNames": list(constants.SHORT_NAMES),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": constants.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Workers", "type": "string", "jsonPath": ".status.workers",
                         "description": "Ready pods / all pods of the gang"},
                        {"name": "Elastic", "type": "string", "jsonPath": ".status.elastic.summary",
                         "description": "Elastic workers: current / max (min), e.g. 3/4 (min 2)", "priority": 1},
                        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restartCount"},
                        {"name": "Progress", "type": "string", "jsonPath": ".status.progress.summary",
                         "description": "The chief's epoch and step"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


def to_yaml() -> str:
    header = "# Generated by `tfjob crd` from tfjob_operator/api/models.py. Do not edit by hand.\n"
    return header + yaml.safe_dump(generate(), sort_keys=False, width=110)
