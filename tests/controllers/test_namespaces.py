"""Namespace lifecycle through the API: new namespaces get the `default` ServiceAccount and the
`kube-root-ca.crt` ConfigMap; a deleted one is Terminating, refuses creates with 403, drains, then goes."""

from __future__ import annotations

import kubernetes
import pytest
from controller_helpers import config_map, read, sleeper, unique
from polling import wait_for

from kubelocal.cluster import LocalClusterThread

Core = kubernetes.client.CoreV1Api


def _namespace(core: Core) -> str:
    name = unique("ns")
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def test_a_new_namespace_gets_the_default_service_account_and_the_cluster_ca(
        core: Core, cluster: LocalClusterThread) -> None:
    ns = _namespace(core)
    wait_for(lambda: read(core.read_namespaced_service_account, "default", ns), what="the default ServiceAccount")
    ca = wait_for(lambda: read(core.read_namespaced_config_map, "kube-root-ca.crt", ns), what="kube-root-ca.crt")
    assert ca["data"]["ca.crt"] == cluster.cluster.ca.cert_pem
    assert ca["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")


def test_a_deleted_default_service_account_comes_back(core: Core) -> None:
    ns = _namespace(core)
    first = wait_for(lambda: read(core.read_namespaced_service_account, "default", ns), what="the default SA")
    core.delete_namespaced_service_account("default", ns)
    again = wait_for(lambda: (sa := read(core.read_namespaced_service_account, "default", ns))
                     and sa["metadata"]["uid"] != first["metadata"]["uid"] and sa, what="a new default SA")
    assert again["metadata"]["name"] == "default"


def test_an_edited_root_ca_config_map_is_restored(core: Core, cluster: LocalClusterThread) -> None:
    ns = _namespace(core)
    wait_for(lambda: read(core.read_namespaced_config_map, "kube-root-ca.crt", ns), what="kube-root-ca.crt")
    core.patch_namespaced_config_map("kube-root-ca.crt", ns, {"data": {"ca.crt": "tampered"}})
    wait_for(lambda: (read(core.read_namespaced_config_map, "kube-root-ca.crt", ns) or {}).get("data", {})
             .get("ca.crt") == cluster.cluster.ca.cert_pem, what="the publisher to restore the CA")


def test_deleting_every_config_map_takes_the_root_ca_too_and_it_comes_back_once(
        core: Core, cluster: LocalClusterThread) -> None:
    """What the official client's e2e `test_watch_configmaps` meets in `default`, on kube-controller-manager as here:
    a delete_collection takes kube-root-ca.crt along; the publisher creates it again, once, with the same CA, and
    then leaves it alone (a watch from before the delete sees no rewrite of it before a later marker)."""
    ns = _namespace(core)
    wait_for(lambda: read(core.read_namespaced_config_map, "kube-root-ca.crt", ns), what="kube-root-ca.crt")
    core.create_namespaced_config_map(ns, config_map("mine"))
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.delete_collection_namespaced_config_map(ns)
    back = wait_for(lambda: read(core.read_namespaced_config_map, "kube-root-ca.crt", ns), what="kube-root-ca.crt back")
    assert back["data"]["ca.crt"] == cluster.cluster.ca.cert_pem
    core.create_namespaced_config_map(ns, config_map("marker"))
    seen: list[tuple[str, str]] = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(core.list_namespaced_config_map, ns, resource_version=since, timeout_seconds=30):
        seen.append((event["type"], event["object"].metadata.name))
        if event["object"].metadata.name == "marker":
            watch.stop()
    assert sorted(seen[:2]) == [("DELETED", "kube-root-ca.crt"), ("DELETED", "mine")], seen
    assert seen[2:] == [("ADDED", "kube-root-ca.crt"), ("ADDED", "marker")], seen


def test_a_deleted_namespace_terminates_refuses_creates_drains_and_goes(core: Core) -> None:
    ns = _namespace(core)
    core.create_namespaced_config_map(ns, config_map("kept-a-moment"))
    wait_for(lambda: read(core.read_namespaced_service_account, "default", ns), what="the default SA to admit pods")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"}, "spec": sleeper()["spec"]}
    core.create_namespaced_pod(ns, pod)
    wait_for(lambda: (read(core.read_namespaced_pod, "sleeper", ns) or {}).get("status", {}).get("phase")
             == "Running", what="the pod to run")
    core.delete_namespace(ns)
    terminating = read(core.read_namespace, ns)
    assert terminating is not None and terminating["status"]["phase"] == "Terminating"
    with pytest.raises(kubernetes.client.ApiException) as refused:
        core.create_namespaced_config_map(ns, config_map("too-late"))
    assert refused.value.status == 403
    assert "is being terminated" in refused.value.body
    wait_for(lambda: read(core.read_namespace, ns) is None, what="the namespace to drain and go")
    assert read(core.read_namespaced_pod, "sleeper", ns) is None
