"""What `kubelocal.upstream.kueue` installs, read from Kueue's module without starting anything: the layout
`kustomize build config/default` gives (names `kueue-*`, namespace `kueue-system`), and the Service and
EndpointSlice kube-apiserver resolves the webhooks through. Skips, saying what to build, without the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelocal.upstream import kueue


@pytest.fixture(scope="module")
def module() -> Path:
    try:
        return kueue.module_dir()
    except kueue.KueueMissing as exc:
        pytest.skip(f"Kueue is not built: {exc}")


def test_every_webhook_goes_to_the_prefixed_service_and_pod_webhooks_spare_the_system_namespaces(
        module: Path) -> None:
    configs = kueue.webhook_configurations(module)
    assert sorted(c["metadata"]["name"] for c in configs) == ["kueue-mutating-webhook-configuration",
                                                             "kueue-validating-webhook-configuration"]
    hooks = {h["name"]: h for c in configs for h in c["webhooks"]}
    assert {"mtfjob.kb.io", "vtfjob.kb.io", "mpod.kb.io", "mworkload.kb.io"} <= set(hooks)
    assert {(h["clientConfig"]["service"]["name"], h["clientConfig"]["service"]["namespace"])
            for h in hooks.values()} == {(kueue.SERVICE, kueue.NAMESPACE)}
    for name in ("mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "vstatefulset.kb.io"):
        (rule,) = hooks[name]["namespaceSelector"]["matchExpressions"]
        assert rule["operator"] == "NotIn" and set(rule["values"]) == {"kube-system", "kueue-system"}
    assert "namespaceSelector" not in hooks["mtfjob.kb.io"]


def test_the_crds_kueue_injects_its_ca_into_convert_through_its_service(module: Path) -> None:
    crds = {c["metadata"]["name"]: c for c in kueue.crds(module)}
    converted = {name for name, c in crds.items() if (c["spec"].get("conversion") or {}).get("strategy") == "Webhook"}
    # The five Kueue's certificate rotator injects its CA into (pkg/util/cert/cert.go).
    assert converted == {f"{p}.kueue.x-k8s.io" for p in ("localqueues", "clusterqueues", "workloads", "cohorts",
                                                         "multikueueclusters")}
    service = crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert service == {"name": kueue.SERVICE, "namespace": kueue.NAMESPACE, "path": "/convert"}


def test_the_endpoint_slice_names_the_services_port_and_the_configuration_runs_one_unelected_manager() -> None:
    service, endpoints = kueue.service(19443), kueue.endpoint_slice("192.0.2.2", 19443)
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert endpoints["ports"][0]["name"] == service["spec"]["ports"][0]["name"]  # the resolver matches by name
    assert "selector" not in service["spec"] and endpoints["endpoints"][0]["addresses"] == ["192.0.2.2"]
    config = kueue.configuration(webhook_host="192.0.2.2", webhook_port=19443, health_port=18081,
                                 cert_dir=Path("/x/certs"), frameworks=kueue.FRAMEWORKS)
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"] == {"frameworks": ["kubeflow.org/tfjob"]}
    assert config["internalCertManagement"]["webhookServiceName"] == kueue.SERVICE
    assert config["webhook"] == {"host": "192.0.2.2", "port": 19443, "certDir": "/x/certs"}
