"""Object metadata, CRUD errors, status subresource, finalizers and garbage collection, via the official client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
from emulator_helpers import pod, widget
from kubernetes.client import ApiException

from kubelocal.apiserver import objects

pytestmark = pytest.mark.timeout(60)

G, V = "emulator.test", "v1"


def gone(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except ApiException as e:
        return e.status == 404
    return False


def test_create_sets_uid_resource_version_generation_and_creation_timestamp(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation is None  # no spec, no generation (as for real ConfigMaps)


def test_resource_version_is_global_and_increasing(core, custom, widgets):
    a = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    w = custom.create_namespaced_custom_object(G, V, "default", "widgets", widget("w"))
    b = core.patch_namespaced_config_map("a", "default", {"data": {"x": "y"}})
    assert int(a.metadata.resource_version) < int(w["metadata"]["resourceVersion"]) < int(b.metadata.resource_version)


def test_generate_name_appends_a_random_suffix(core):
    made = core.create_namespaced_config_map("default", {"metadata": {"generateName": "job-"}})
    assert made.metadata.name.startswith("job-") and len(made.metadata.name) == len("job-") + 5


def test_generation_bumps_on_spec_changes_only(custom, widgets):
    w = custom.create_namespaced_custom_object(G, V, "default", "widgets", widget("w"))
    assert w["metadata"]["generation"] == 1
    w = custom.patch_namespaced_custom_object(G, V, "default", "widgets", "w", {"metadata": {"labels": {"a": "b"}}})
    assert w["metadata"]["generation"] == 1
    w = custom.patch_namespaced_custom_object_status(G, V, "default", "widgets", "w", {"status": {"phase": "Up"}})
    assert w["metadata"]["generation"] == 1
    w = custom.patch_namespaced_custom_object(G, V, "default", "widgets", "w", {"spec": {"replicas": 5}})
    assert w["metadata"]["generation"] == 2


def test_duplicate_create_is_409_already_exists(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    assert err.value.status == 409 and '"reason":"AlreadyExists"' in err.value.body


@pytest.mark.parametrize("container", [
    {"name": {"a": 1}, "image": "busybox"},
    {"name": "main", "image": ["busybox"]},
    "main",
])
def test_pod_with_wrongly_typed_container_is_422_invalid_not_500(http, container):
    # Sent raw: the typed client would refuse these bodies itself before any request.
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}
    response = http("POST", "/api/v1/namespaces/default/pods", body)
    assert (response.status_code, response.json()["reason"]) == (422, "Invalid"), response.text


def test_update_with_stale_resource_version_is_409_conflict(core):
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", "default", {"data": {"x": "1"}})
    stale = {"metadata": {"name": "a", "resourceVersion": first.metadata.resource_version}, "data": {"x": "2"}}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("a", "default", stale)
    assert err.value.status == 409 and '"reason":"Conflict"' in err.value.body


def test_replacing_custom_resource_without_resource_version_is_422(custom, widgets):
    custom.create_namespaced_custom_object(G, V, "default", "widgets", widget("w"))
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object(G, V, "default", "widgets", "w", widget("w", size="large"))
    assert err.value.status == 422 and "must be specified for an update" in err.value.body


def test_missing_object_is_404_with_status_body(core):
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("nope", "default")
    assert err.value.status == 404
    assert '"kind":"Status"' in err.value.body and 'configmaps \\"nope\\" not found' in err.value.body


def test_create_in_missing_namespace_is_404(core):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("ghost", {"metadata": {"name": "a"}})
    assert err.value.status == 404 and 'namespaces \\"ghost\\" not found' in err.value.body


def test_delete_collection_honours_label_selector(core):
    for name, team in [("a", "x"), ("b", "x"), ("c", "y")]:
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"team": team}}})
    core.delete_collection_namespaced_config_map("default", label_selector="team=x")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["c"]


def test_main_resource_ignores_status_and_status_subresource_ignores_spec(custom, widgets):
    created = widget("w")
    created["status"] = {"phase": "Sneaky"}
    w = custom.create_namespaced_custom_object(G, V, "default", "widgets", created)
    assert "status" not in w
    w = custom.patch_namespaced_custom_object(G, V, "default", "widgets", "w", {"status": {"phase": "X"}})
    assert "status" not in w
    w = custom.patch_namespaced_custom_object_status(
        G, V, "default", "widgets", "w", {"spec": {"size": "large"}, "status": {"phase": "Up"}}
    )
    assert w["status"] == {"phase": "Up"} and w["spec"]["size"] == "small"


def test_finalizers_keep_a_deleted_object_until_they_are_removed(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "a", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("a", "default")
    held = core.read_namespaced_config_map("a", "default")
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("a", "default", {"metadata": {"finalizers": ["x/y", "new/one"]}})
    assert err.value.status == 422
    core.patch_namespaced_config_map("a", "default", {"metadata": {"finalizers": None}})
    assert gone(lambda: core.read_namespaced_config_map("a", "default"))


def test_bound_pod_deletion_is_graceful_until_the_kubelet_confirms(core):
    core.create_namespaced_pod("default", pod("p", nodeName="node-a"))
    core.delete_namespaced_pod("p", "default")
    terminating = core.read_namespaced_pod("p", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)  # what the kubelet sends
    assert gone(lambda: core.read_namespaced_pod("p", "default"))


@pytest.mark.parametrize("extra", [{}, {"nodeName": "node-a", "phase": "Succeeded"}], ids=["unbound", "terminal"])
def test_unbound_or_terminal_pod_is_deleted_at_once(core, extra):
    body = pod("p", **({"nodeName": extra["nodeName"]} if "nodeName" in extra else {}))
    core.create_namespaced_pod("default", body)
    if "phase" in extra:
        core.patch_namespaced_pod_status("p", "default", {"status": {"phase": extra["phase"]}})
    core.delete_namespaced_pod("p", "default")
    assert gone(lambda: core.read_namespaced_pod("p", "default"))


def owned(name: str, owner: dict[str, Any] | Any, *, block: bool = False, finalizers: list[str] | None = None) -> dict:
    meta = owner["metadata"] if isinstance(owner, dict) else owner.metadata.to_dict()
    return {
        "metadata": {
            "name": name,
            "finalizers": finalizers or [],
            "ownerReferences": [
                {
                    "apiVersion": "emulator.test/v1",
                    "kind": "Widget",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": block,
                }
            ],
        }
    }


def test_a_bare_api_server_leaves_dependents_to_the_garbage_collector(core, custom, widgets):
    """Garbage collection is a controller beside the server (tests/controllers), not part of it."""
    w = custom.create_namespaced_custom_object(G, V, "default", "widgets", widget("w"))
    core.create_namespaced_config_map("default", owned("child", w))
    custom.delete_namespaced_custom_object(G, V, "default", "widgets", "w")
    assert gone(lambda: custom.get_namespaced_custom_object(G, V, "default", "widgets", "w"))
    assert core.read_namespaced_config_map("child", "default").metadata.owner_references[0].uid == w["metadata"]["uid"]


@pytest.mark.parametrize(("policy", "finalizer"), [("Foreground", "foregroundDeletion"), ("Orphan", "orphan")])
def test_foreground_and_orphan_deletion_set_the_collectors_finalizer(custom, widgets, policy, finalizer):
    custom.create_namespaced_custom_object(G, V, "default", "widgets", widget("w"))
    custom.delete_namespaced_custom_object(G, V, "default", "widgets", "w", propagation_policy=policy)
    owner = custom.get_namespaced_custom_object(G, V, "default", "widgets", "w")
    assert owner["metadata"]["finalizers"] == [finalizer] and owner["metadata"]["deletionTimestamp"]


def test_a_deleted_namespace_terminates_refuses_creates_and_goes_once_finalized(core):
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map("team", {"metadata": {"name": "a"}})
    core.delete_namespace("team")
    assert core.read_namespace("team").status.phase == "Terminating"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("team", {"metadata": {"name": "b"}})
    assert err.value.status == 403
    # what the namespace controller does once the namespace is empty: finalize, then delete again
    core.delete_namespaced_config_map("a", "team")
    space = core.read_namespace("team")
    space.spec.finalizers = []
    core.replace_namespace_finalize("team", space)
    core.delete_namespace("team")
    assert gone(lambda: core.read_namespace("team"))


def test_events_are_served_in_core_and_events_k8s_io(core, client):
    ref = {"kind": "Widget", "name": "w", "namespace": "default", "uid": "u1", "apiVersion": "emulator.test/v1"}
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "w-"},
            "involvedObject": ref,
            "reason": "Made",
            "message": "hi",
            "type": "Normal",
        },
    )
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "x-"},
            "reason": "Other",
            "type": "Normal",
            "involvedObject": {**ref, "name": "x", "uid": "u2"},
        },
    )
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=w,involvedObject.kind=Widget")
    assert [e.reason for e in found.items] == ["Made"]
    events_v1 = kubernetes.client.EventsV1Api(client)
    events_v1.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "n1"},
            "eventTime": "2026-01-01T00:00:00.123456Z",  # MicroTime: Go needs 6 fraction digits
            "reportingController": "c",
            "reportingInstance": "i",
            "action": "Do",
            "reason": "R",
            "type": "Normal",
            "regarding": ref,
        },
    )
    assert [e.reason for e in events_v1.list_namespaced_event("default").items] == ["R"]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"x": 1, "y": [1, {"z": "s"}]}, {"y": [1, {"z": "s"}], "x": 1}, True),  # key order is not a change
        ({"x": 1}, {"x": True}, False),  # Python's == says equal; the JSON (and the client) does not
        ({"x": 1}, {"x": 1.0}, False),
        ({"x": [1, 2]}, {"x": [2, 1]}, False),
        (None, None, True),
    ],
    ids=["key-order", "int-vs-bool", "int-vs-float", "list-order", "none"],
)
def test_a_write_is_a_no_op_only_when_the_json_is_the_same(a, b, same):
    assert objects.same_json(a, b) is same
