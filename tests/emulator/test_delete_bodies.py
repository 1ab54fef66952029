"""What a DELETE answers, per kind, as kube-apiserver: the deleted object for the kinds whose storage returns
it (`ReturnDeletedObject`), a `Status` for the others, the object itself while something still holds it.
The official client types the answer from kube's OpenAPI, so a wrong body fails to deserialize there."""

from __future__ import annotations

import functools
import inspect
import json
import re
from typing import Any

import kubernetes
import pytest
from emulator_helpers import pod, widget

from kubelocal.apiserver.registry import BUILTINS, ResourceType
from kubelocal.apiserver.rest import delete

pytestmark = pytest.mark.timeout(120)


@functools.cache
def client_delete_answers() -> dict[str, str]:
    """The official client's DELETE answer type per resource path, read from its generated code (which kube's
    OpenAPI typed as the kind when the storage returns the deleted object, as `object` (a Status) otherwise)."""
    answers = {}
    for name, api in inspect.getmembers(kubernetes.client, inspect.isclass):
        if not name.endswith("Api"):
            continue
        for meth, fn in inspect.getmembers(api, inspect.isfunction):
            if meth.startswith("_delete_") and meth.endswith("_serialize") and "collection" not in meth:
                path = re.search(r"resource_path='([^']+)'", inspect.getsource(fn))
                typed = inspect.getsource(getattr(api, meth[1:-len("_serialize")] + "_with_http_info"))
                answer = re.search(r"'200': \"(\w+)\"", typed)
                if path and answer:
                    answers[path.group(1)] = answer.group(1)
    return answers


def item_path(rt: ResourceType) -> str:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    scope = "/namespaces/{namespace}" if rt.namespaced else ""
    return f"{prefix}{scope}/{rt.plural}/{{name}}"


DELETABLE = [rt for rt in BUILTINS if "delete" in rt.verbs]


@pytest.mark.parametrize("rt", DELETABLE, ids=lambda rt: f"{rt.plural}.{rt.group or 'core'}")
def test_a_removed_object_is_answered_with_the_body_the_official_client_is_typed_for(rt: ResourceType):
    expected = client_delete_answers()[item_path(rt)]
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {"name": "x", "uid": "u"}}
    body, code = delete.response(rt, obj, True, {})
    assert (body["kind"], code) == ((rt.kind if expected not in ("object", "V1Status") else "Status"), 200)


# Kinds whose DELETE answers the deleted object (where the rule differs from the Status most kinds answer),
# and a ConfigMap for the contrast: (path, client method, body).
CORE = "/api/v1"
ROWS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("Pod", "namespaces/default/pods", "delete_namespaced_pod", pod("x")),
    ("Service", "namespaces/default/services", "delete_namespaced_service",
     {"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}}),
    ("ServiceAccount", "namespaces/default/serviceaccounts", "delete_namespaced_service_account",
     {"metadata": {"name": "x"}}),
    ("PersistentVolumeClaim", "namespaces/default/persistentvolumeclaims", "delete_namespaced_persistent_volume_claim",
     {"metadata": {"name": "x"},
      "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    ("PersistentVolume", "persistentvolumes", "delete_persistent_volume",
     {"metadata": {"name": "x"},
      "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}}}),
    ("ResourceQuota", "namespaces/default/resourcequotas", "delete_namespaced_resource_quota",
     {"metadata": {"name": "x"}, "spec": {"hard": {"pods": "3"}}}),
    ("PodTemplate", "namespaces/default/podtemplates", "delete_namespaced_pod_template",
     {"metadata": {"name": "x"}, "template": {"spec": {"containers": [{"name": "a", "image": "busybox:1.36"}]}}}),
    ("Status", "namespaces/default/configmaps", "delete_namespaced_config_map", {"metadata": {"name": "x"}}),
]
IDS = [row[1].rsplit("/", 1)[-1] for row in ROWS]


def kind_of(answer: Any) -> str:
    return answer["kind"] if isinstance(answer, dict) else answer.kind


@pytest.mark.parametrize(("kind", "path", "method", "body"), ROWS, ids=IDS)
def test_the_official_client_reads_the_answer_to_its_delete(http, core, kind, path, method, body):
    namespaced = "namespace" in inspect.signature(getattr(core, method)).parameters
    call = getattr(core, method)
    args = ("x", "default") if namespaced else ("x",)
    assert http("POST", f"{CORE}/{path}", body).status_code == 201
    dry = call(*args, dry_run="All")
    deleted = call(*args)
    assert (kind_of(dry), kind_of(deleted)) == (kind, kind)
    if kind != "Status":
        assert (deleted.metadata.name, dry.metadata.uid) == ("x", deleted.metadata.uid)
    assert http("GET", f"{CORE}/{path}/x").status_code == 404


@pytest.mark.parametrize(("kind", "path", "method", "body"), ROWS, ids=IDS)
def test_kubectl_deletes_each_kind_and_receives_its_body(http, kubectl, kind, path, method, body):
    resource = path.rsplit("/", 1)[-1]
    said = f'{resource.removesuffix("s")} "x" deleted' + (" from default namespace" if "namespaces/" in path else "")
    assert http("POST", f"{CORE}/{path}", body).status_code == 201
    raw = json.loads(kubectl("delete", "--raw", f"{CORE}/{path}/x").stdout)
    assert (raw["kind"], raw.get("details", raw.get("metadata", {})).get("name")) == (kind, "x")
    assert http("POST", f"{CORE}/{path}", body).status_code == 201
    out = kubectl("delete", resource, "x", "--dry-run=server").stdout
    assert out.strip() == f"{said} (server dry run)"
    assert kubectl("delete", resource, "x").stdout.strip() == said
    assert http("GET", f"{CORE}/{path}/x").status_code == 404


def test_an_object_held_by_a_finalizer_is_answered_with_itself_marked_for_deletion(http, core):
    http("POST", f"{CORE}/namespaces/default/configmaps", {"metadata": {"name": "x", "finalizers": ["test/hold"]}})
    held = http("DELETE", f"{CORE}/namespaces/default/configmaps/x", {"orphanDependents": False})
    assert (held.status_code, held.json()["kind"]) == (202, "ConfigMap")
    assert held.json()["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("x", "default", {"metadata": {"finalizers": None}})
    assert http("GET", f"{CORE}/namespaces/default/configmaps/x").status_code == 404


def test_a_custom_resource_is_answered_with_itself_to_the_client_and_kubectl(custom, widgets, kubectl):
    path = "/apis/emulator.test/v1/namespaces/default/widgets"
    for how in ("client", "kubectl"):
        custom.create_namespaced_custom_object("emulator.test", "v1", "default", "widgets", widget("w"))
        if how == "client":
            deleted = custom.delete_namespaced_custom_object("emulator.test", "v1", "default", "widgets", "w")
        else:
            deleted = json.loads(kubectl("delete", "--raw", f"{path}/w").stdout)
        assert (deleted["kind"], deleted["metadata"]["name"]) == ("Widget", "w")
