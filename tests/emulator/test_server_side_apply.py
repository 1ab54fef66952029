"""Server-side apply: every kind (built-in and custom) can be applied, the manager owns what it applied,
another manager's field set to a different value is a 409 naming both, `force` takes it over."""

from __future__ import annotations

import json

import pytest
import yaml
from emulator_helpers import HERE

pytestmark = pytest.mark.timeout(120)
REPO = HERE.parents[1]
APPLY = "application/apply-patch+yaml"
CM = "/api/v1/namespaces/default/configmaps"
CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}},
          "data": {"x": "1", "y": "2"}}


def apply(http, body, manager="alice", force=False, path=f"{CM}/c"):
    query = f"?fieldManager={manager}" + ("&force=true" if force else "")
    return http("PATCH", path + query, json.dumps(body), APPLY)


def owners(obj) -> dict[str, str]:
    return {e["manager"]: e["operation"] for e in obj["metadata"]["managedFields"]}


def test_apply_creates_then_the_manager_owns_exactly_what_it_applied(http):
    created = apply(http, CONFIG)
    assert created.status_code == 201 and owners(created.json()) == {"alice": "Apply"}
    fields = created.json()["metadata"]["managedFields"][0]["fieldsV1"]
    assert fields == {"f:data": {"f:x": {}, "f:y": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
    smaller = {**CONFIG, "data": {"x": "1"}, "metadata": {"name": "c"}}
    after = apply(http, smaller).json()
    assert after["data"] == {"x": "1"} and "labels" not in after["metadata"]  # dropped fields are removed


def test_a_field_another_manager_set_differently_is_a_409_naming_it_and_force_takes_it(http):
    apply(http, CONFIG)
    resp = apply(http, {**CONFIG, "data": {"x": "9", "y": "2"}}, manager="bob")
    assert resp.status_code == 409
    status = resp.json()
    assert status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.x'
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.x"}]
    same_values = apply(http, CONFIG, manager="bob")
    assert same_values.status_code == 200 and owners(same_values.json()) == {"alice": "Apply", "bob": "Apply"}
    forced = apply(http, {**CONFIG, "data": {"x": "9", "y": "2"}}, manager="bob", force=True).json()
    assert forced["data"]["x"] == "9"
    alice = next(e for e in forced["metadata"]["managedFields"] if e["manager"] == "alice")
    assert "f:x" not in alice["fieldsV1"]["f:data"]


def test_an_update_by_another_client_owns_the_fields_it_changed(http, core):
    apply(http, CONFIG)
    core.patch_namespaced_config_map("c", "default", {"data": {"y": "3"}}, field_manager="editor")
    resp = apply(http, CONFIG)
    assert resp.status_code == 409
    assert resp.json()["message"].startswith('Apply failed with 1 conflict: conflict with "editor" using v1 at ')
    assert resp.json()["message"].endswith(": .data.y")


def test_an_updating_manager_owns_what_it_wrote_before_and_now_and_its_entry_time_moves(http, core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"x": "1"}}, field_manager="w")
    first = core.patch_namespaced_config_map("c", "default", {"data": {"x": "2"}}, field_manager="w")
    (entry,) = [e for e in first.metadata.managed_fields if e.manager == "w"]
    assert set(entry.fields_v1["f:data"]) - {"."} == {"f:x"}
    again = core.patch_namespaced_config_map("c", "default", {"data": {"x": "3"}}, field_manager="w")
    (same,) = [e for e in again.metadata.managed_fields if e.manager == "w"]
    assert same.fields_v1 == entry.fields_v1 and same.time >= entry.time
    more = core.patch_namespaced_config_map("c", "default", {"data": {"y": "1"}}, field_manager="w")
    (grown,) = [e for e in more.metadata.managed_fields if e.manager == "w"]
    assert set(grown.fields_v1["f:data"]) - {"."} == {"f:x", "f:y"}


def test_keyed_lists_merge_by_key_across_managers(http):
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
               "metadata": {"labels": {"app": "d"}},
               "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}
    path = "/apis/apps/v1/namespaces/default/deployments/d"
    assert apply(http, dep, path=path).status_code == 201
    sidecar = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {
        "spec": {"containers": [{"name": "side", "image": "envoy"}]}}}}
    merged = apply(http, sidecar, manager="mesh", path=path).json()
    assert [c["name"] for c in merged["spec"]["template"]["spec"]["containers"]] == ["main", "side"]


def test_applying_what_another_manager_created_with_equal_values_shares_the_fields(client):
    """The official client's create_from_yaml, then the same file with apply=True: kube-apiserver compares
    values field by field (a keyed list element conflicts only by being added or removed, not because the
    live one carries defaults), so equal values are no conflict and the applier becomes a co-owner."""
    from kubernetes import utils
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient

    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
               "metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "nginx", "image": "nginx:1.15.4",
                                        "ports": [{"containerPort": 80}]}]}}}}
    utils.create_from_dict(client, dep)
    applied = utils.create_from_dict(client, dep, apply=True)[0]
    assert {e.manager: e.operation for e in applied.metadata.managedFields} == {
        "OpenAPI-Generator": "Update", "python-client": "Apply"}
    other = json.loads(json.dumps(dep))
    other["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.16"
    deployments = DynamicClient(client).resources.get(api_version="apps/v1", kind="Deployment")
    with pytest.raises(ApiException) as failed:
        deployments.server_side_apply(body=other, field_manager="someone-else")
    message = json.loads(failed.value.body)["message"]
    assert message.startswith("Apply failed with 2 conflicts: ")
    assert '- .spec.template.spec.containers[name="nginx"].image' in message and "replicas" not in message


def test_custom_resources_can_be_applied(http, widgets):
    widget = {"apiVersion": "emulator.test/v1", "kind": "Widget", "metadata": {"name": "w"},
              "spec": {"size": "small", "replicas": 1}}
    path = "/apis/emulator.test/v1/namespaces/default/widgets/w"
    assert apply(http, widget, path=path).status_code == 201
    bigger = apply(http, {**widget, "spec": {"size": "large", "replicas": 1}}, path=path).json()
    assert bigger["spec"]["size"] == "large"


def test_apply_without_a_field_manager_is_422(http):
    resp = http("PATCH", f"{CM}/c", json.dumps(CONFIG), APPLY)
    assert resp.status_code == 422
    assert "fieldManager: Required value: is required for apply patch" in resp.json()["message"]


def test_kubectl_apply_server_side_of_the_operator_manifests_works_and_is_idempotent(kubectl):
    manifests = REPO / "deploy" / "manifests" / "tfjob-operator.yaml"
    first = kubectl("apply", "--server-side", "-f", str(manifests)).stdout
    assert first.count("serverside-applied") == len([d for d in yaml.safe_load_all(manifests.read_text()) if d])
    again = kubectl("apply", "--server-side", "-f", str(manifests)).stdout
    assert "serverside-applied" in again
    kubectl("apply", "--server-side", "-f", str(REPO / "examples" / "mnist-cpu.yaml"))


def test_client_side_apply_still_works_and_server_side_apply_can_follow_it(kubectl):
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: '1'}\n"
    assert "created" in kubectl("apply", "-f", "-", stdin=cm).stdout
    assert "configured" in kubectl("apply", "-f", "-", stdin=cm.replace("'1'", "'2'")).stdout
    clash = kubectl("apply", "--server-side", "-f", "-", stdin=cm.replace("'1'", "'3'"), check=False)
    assert clash.returncode != 0 and 'conflict with "kubectl-client-side-apply" using v1' in clash.stderr
    forced = kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=cm.replace("'1'", "'3'"))
    assert "serverside-applied" in forced.stdout
    assert kubectl("get", "configmap", "cm", "-o", "jsonpath={.data.a}").stdout == "3"


def test_helm_4_install_with_its_defaults_deploys_the_chart(api, tmp_path, core):
    import helm_python as helm

    from kubelocal.apiserver import write_kubeconfig

    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, api.url)
    with helm.Config(kubeconfig_path=config, namespace="tfjob-system") as cluster, \
            helm.Chart.load(REPO / "deploy" / "helm" / "tfjob-operator") as chart:
        cluster.install(chart, "tfjob", namespace="tfjob-system", create_namespace=True, timeout=60)
        assert [(r["name"], r["status"]) for r in cluster.list()] == [("tfjob", "deployed")]
    applied = {(r.method, r.resource) for r in api.server.requests if r.method in ("PATCH", "POST")}
    assert ("PATCH", "deployments") in applied and ("POST", "secrets") in applied  # SSA, protobuf release Secret
    release = core.list_namespaced_secret("tfjob-system", label_selector="owner=helm").items
    assert [s.metadata.labels["status"] for s in release] == ["deployed"]
