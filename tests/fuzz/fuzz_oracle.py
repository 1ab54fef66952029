"""What a Kubernetes API server would say about a TFJob and the objects rendered from it.

Two independent checks: the local API server's own schema code (`kubelocal.apiserver`, the same functions it runs
on every create: the CRD's openAPIV3Schema for the TFJob, the core schemas and field rules for Pods and Services)
and kubernetes-validate's strict schemas for Kubernetes 1.37. The CRD's CEL rules are evaluated by the local API
server's own CEL plugin (cel-python with Kubernetes' list and quantity libraries).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import kubernetes_validate

from kubelocal.apiserver.objects import pod_validation_errors
from kubelocal.apiserver.plugins.cel_rules import violations
from kubelocal.apiserver.schema import check_object, core_schema, validate_metadata
from tfjob_operator.api import crd, kubeyaml
from tfjob_operator.client import cli

KUBERNETES_VERSION = "1.37.0"
_CRD_SCHEMA = crd.generate()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

#: A refusal message names its field: `  <job>: <field>: ...`, the field a dotted path, a document or the file.
FIELD_NAMED = re.compile(
    r"^  (?:\S+: )?(?:\(document(?: \d+)?\)|[A-Za-z_][\w.\[\]/\-]*|/\S+|\(stdin\)): \S")


def tfjob_refusals(doc: Any) -> list[str]:
    """Why the API server (with our CRD) would refuse this TFJob; empty if it stores it: the schema, the metadata
    rules, and the CRD's CEL rules as the local API server evaluates them."""
    if not isinstance(doc, Mapping):
        return ["not an object"]
    body = copy.deepcopy(dict(doc))
    errors = [f"{path}: {message}" for path, _, message in check_object(body, _CRD_SCHEMA, custom=True).errors]
    meta = body.get("metadata")
    if isinstance(meta, dict):
        errors += [f"{p}: {m}" for p, _, m in validate_metadata(meta, name_rule="subdomain")]
    if not errors:  # kube-apiserver runs the rules on an object that passed its schema
        errors += [f"{p}: CEL: {m}" for p, _, m in violations(_CRD_SCHEMA, body)]
    return errors


def object_refusals(obj: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse a rendered Service or Pod; empty if it stores it."""
    errors: list[str] = []
    try:
        kubernetes_validate.validate(dict(obj), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        errors.append(f"kubernetes-validate: {'.'.join(map(str, exc.absolute_path))}: {exc.message[:200]}")
    body = copy.deepcopy(dict(obj))
    schema = core_schema("", "v1", str(obj.get("kind")))
    assert schema is not None, obj.get("kind")
    errors += [f"{p}: {m}" for p, _, m in check_object(body, schema, custom=False).errors]
    rule = "dns1035" if obj.get("kind") == "Service" else "subdomain"
    errors += [f"{p}: {m}" for p, _, m in validate_metadata(body["metadata"], name_rule=rule)]
    if obj.get("kind") == "Pod":
        errors += [f"{p}: {m}" for p, _, m in pod_validation_errors(body)]
        hostname = body["spec"].get("hostname", "")
        if len(hostname) > 63:
            errors.append(f"spec.hostname: {hostname!r} is longer than 63")
    return errors


#: What `tfjob render` makes of a TFJob; objects of other kinds in the file are printed as written, unjudged.
RENDERED_KINDS = ("Service", "Pod")


def rendered_refusals(stdout: str) -> list[str]:
    """Refusals for every object `tfjob render` rendered (read back as kubectl would read its output)."""
    out: list[str] = []
    for obj in kubeyaml.load_all(stdout):
        if obj is not None and obj.get("kind") in RENDERED_KINDS:
            out += [f"{obj['kind']}/{obj['metadata']['name']}: {e}" for e in object_refusals(obj)]
    return out


def input_documents(raw: bytes) -> list[Any]:
    """The TFJobs of a manifest that `tfjob render` accepted (it must have been readable), as kubectl sends them;
    documents of other kinds, which render passes through, are not TFJobs for the API server to judge."""
    docs = [d for d in kubeyaml.load_all(raw.decode()) if d is not None]
    return [d for d in docs if not isinstance(d, dict) or cli.is_tfjob_document(d)]


def refusal_problems(stdout: str, stderr: str) -> list[str]:
    """What is wrong with a refusal: output on stdout, no error header, a message line naming no field."""
    problems = []
    if stdout:
        problems.append(f"stdout is not empty: {stdout[:200]!r}")
    lines = [line for line in stderr.splitlines() if not line.startswith("note: ")]
    if not lines or not lines[0].startswith("error: "):
        problems.append(f"no error header: {stderr[:300]!r}")
    problems += [f"names no field: {line!r}" for line in lines[1:] if not FIELD_NAMED.match(line)]
    if "Traceback" in stderr:
        problems.append("traceback")
    return problems
