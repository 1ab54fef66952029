"""Protobuf bodies (`application/vnd.kubernetes.protobuf`): what kubectl, Helm and client-go send for
built-in kinds is decoded to the object JSON gives; clients that ask for protobuf get it back."""

from __future__ import annotations

import base64

import kubernetes
import pytest

from kubelocal.apiserver import protobuf, protobuf_schema

pytestmark = pytest.mark.timeout(120)
PB = protobuf.MEDIA_TYPE


def test_kubectl_create_of_built_in_kinds_succeeds_and_reads_back_as_sent(kubectl, core, client):


    for args in (
        ("create", "namespace", "team"),
        ("create", "configmap", "cm", "--from-literal=a=1"),
        ("create", "secret", "generic", "s", "--from-literal=p=hunter2"),
        ("create", "deployment", "web", "--image=nginx", "--replicas=0", "--port=80"),
        ("create", "job", "j", "--image=busybox", "--", "echo", "hi"),
        ("create", "serviceaccount", "sa"),
        ("create", "role", "r", "--verb=get", "--resource=pods"),
        ("create", "service", "clusterip", "svc", "--tcp=80:8080"),
        ("create", "priorityclass", "pc", "--value=10"),
    ):
        assert "created" in kubectl(*args).stdout
    assert core.read_namespace("team").status.phase == "Active"
    assert core.read_namespaced_config_map("cm", "default").data == {"a": "1"}
    assert base64.b64decode(core.read_namespaced_secret("s", "default").data["p"]) == b"hunter2"
    web = kubernetes.client.AppsV1Api(client).read_namespaced_deployment("web", "default")
    assert web.spec.replicas == 0  # a pointer field: zero survives the protobuf round trip
    container = web.spec.template.spec.containers[0]
    assert (container.image, container.ports[0].container_port) == ("nginx", 80)
    job = kubernetes.client.BatchV1Api(client).read_namespaced_job("j", "default")
    assert job.spec.template.spec.containers[0].command == ["echo", "hi"]
    assert core.read_namespaced_service("svc", "default").spec.ports[0].target_port == 8080


def test_a_client_asking_for_protobuf_gets_the_same_object_as_json(http, core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "labels": {"a": "b"}},
                                                  "data": {"k": "v"}})
    as_json = http("GET", "/api/v1/namespaces/default/configmaps/cm").json()
    resp = http("GET", "/api/v1/namespaces/default/configmaps/cm", headers={"Accept": f"{PB}, application/json"})
    assert resp.headers["Content-Type"] == PB and resp.content.startswith(b"k8s\x00")
    assert protobuf.decode(resp.content) == as_json
    listed = http("GET", "/api/v1/namespaces/default/configmaps", headers={"Accept": f"{PB}, application/json"})
    assert [i["metadata"]["name"] for i in protobuf.decode(listed.content)["items"]] == ["cm"]


def test_a_protobuf_write_is_answered_in_json_when_the_client_prefers_json(http):
    body = protobuf.encode({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}})
    resp = http("POST", "/api/v1/namespaces/default/configmaps", body, PB, headers={"Accept": "application/json"})
    assert resp.status_code == 201 and resp.json()["data"] == {"a": "1"}


def test_a_kind_not_served_in_protobuf_is_415(http, widgets):
    envelope = protobuf_schema.new_message("runtime.Unknown")
    envelope.typeMeta.apiVersion, envelope.typeMeta.kind = "emulator.test/v1", "Widget"
    resp = http("POST", "/apis/emulator.test/v1/namespaces/default/widgets",
                protobuf.MAGIC + envelope.SerializeToString(), PB)
    assert resp.status_code == 415
    assert resp.json()["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml"
    )


def test_a_protobuf_field_not_carried_here_is_refused_not_dropped(http, core):
    raw = protobuf.encode({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    envelope = protobuf_schema.new_message("runtime.Unknown")
    envelope.ParseFromString(raw[4:])
    envelope.raw += b"\xa0\x06\x01"  # field 100, varint 1: not a ConfigMap field
    resp = http("POST", "/api/v1/namespaces/default/configmaps", protobuf.MAGIC + envelope.SerializeToString(), PB)
    assert resp.status_code == 415 and "fields [100] of ConfigMap" in resp.json()["message"]
    assert core.list_namespaced_config_map("default").items == []


def test_every_listed_field_is_in_the_kubernetes_schemas():
    protobuf_schema.message_pool()
    assert protobuf_schema.SKIPPED == ["core.v1.PodSpec.workloadRef"]  # added after 1.37; refused if sent
