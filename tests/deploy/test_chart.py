"""The Helm chart, rendered and linted by the real Helm engine, against Kubernetes' schemas and the restricted PSS."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from deployhelpers import ROOT, renderer
from pss_restricted import restricted_violations

from tfjob_operator.api import crd
from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.reconcile.render import render as render_job

KUBE_VERSION = "1.37.0"
# Kinds of optional integrations whose schemas kubernetes-validate does not carry.
THIRD_PARTY_KINDS = {"Issuer", "Certificate", "ServiceMonitor", "PodMonitor"}

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "builtin": {"gang": {"backend": "builtin"}},
    "volcano": {"gang": {"backend": "volcano"}},
    "scheduler-plugins": {"gang": {"backend": "scheduler-plugins"}},
    "kueue": {"gang": {"backend": "kueue"}},
    "none": {"gang": {"backend": "none"}},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "namespaced-volcano": {"watchNamespaces": ["team-a"], "gang": {"backend": "volcano"}},
    "ha-cert-manager": {
        "replicas": 3,
        "webhook": {"certManager": {"enabled": True}, "failurePolicy": "Ignore"},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "priorityClass": {"create": True},
    },
    "no-webhook-no-election": {"webhook": {"enabled": False}, "leaderElection": {"enabled": False}},
    "observability": {"metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
                      "grafanaDashboard": {"enabled": True}},
}


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def env_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, renderer.render_chart(CASES[request.param])


@pytest.mark.parametrize("case", sorted(CASES))
def test_chart_lints_without_errors_or_warnings(case: str) -> None:
    report = helm.lint(renderer.CHART_DIR, CASES[case], strict=True, namespace="tfjob-system",
                       kube_version="v1.37.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == []


def test_every_rendered_object_is_valid_against_kubernetes_schemas(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    case, objects = rendered
    assert objects, case
    for obj in objects:
        if obj["kind"] in THIRD_PARTY_KINDS:
            continue
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_operator_pod_meets_the_restricted_pod_security_standard(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    (deployment,) = by_kind(objects, "Deployment")
    assert restricted_violations(deployment["spec"]["template"]["spec"]) == []


_COMPLIANT = renderer.render_chart()
_POD = next(o for o in _COMPLIANT if o["kind"] == "Deployment")["spec"]["template"]["spec"]


def _breaking(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(_POD)
    node: Any = spec
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return spec


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("hostNetwork", True, "hostNetwork"),
        ("hostPID", True, "hostPID"),
        ("volumes", [{"name": "h", "hostPath": {"path": "/"}}], "hostPath"),
        ("containers.0.securityContext.privileged", True, "privileged"),
        ("containers.0.securityContext.allowPrivilegeEscalation", None, "allowPrivilegeEscalation"),
        ("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}, "drop must include ALL"),
        ("containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}, "SYS_ADMIN"),
        ("containers.0.securityContext.runAsNonRoot", False, "runAsNonRoot"),
        ("containers.0.securityContext.readOnlyRootFilesystem", False, "readOnlyRootFilesystem"),
        ("containers.0.securityContext.seccompProfile", {"type": "Unconfined"}, "seccompProfile"),
        ("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "hostPort"),
    ],
)
def test_restricted_check_catches_each_violation(path: str, value: Any, needle: str) -> None:
    spec = _breaking(path, value)
    if path.startswith("containers.0.securityContext.seccompProfile"):
        spec["securityContext"].pop("seccompProfile")
    assert any(needle in v for v in restricted_violations(spec))


def test_rbac_has_no_wildcards_and_no_secrets(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    case, objects = rendered
    rules = [r for o in objects if o["kind"] in ("ClusterRole", "Role") for r in o["rules"]]
    assert rules, case
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(key, []), (case, rule)
        assert "secrets" not in rule["resources"], (case, rule)
        assert "nonResourceURLs" not in rule


@pytest.mark.parametrize(
    ("backend", "podgroup_group", "admission_loop"),
    [
        ("builtin", None, True),
        ("volcano", "scheduling.volcano.sh", False),
        ("scheduler-plugins", "scheduling.x-k8s.io", False),
        ("kueue", None, False),
        ("none", None, False),
    ],
)
def test_gang_backend_is_passed_on_and_grants_only_its_objects(
    backend: str, podgroup_group: str | None, admission_loop: bool
) -> None:
    objects = renderer.render_chart({"gang": {"backend": backend}})
    env = env_of(objects)
    assert env["TFJOB_GANG_BACKEND"] == backend
    # Each backend's own scheduler is the operator's to know (`GangBackend.default_scheduler`), not the chart's.
    assert env["TFJOB_SCHEDULER_NAME"] == ""
    (role,) = by_kind(objects, "ClusterRole")
    groups = {g for r in role["rules"] for g in r["apiGroups"] if "podgroups" in r["resources"]}
    assert groups == ({podgroup_group} if podgroup_group else set())
    # The builtin admission loop reads nodes and patches pods to release them; no other backend does.
    assert any("nodes" in r["resources"] for r in role["rules"]) == admission_loop
    (pods,) = [r for r in role["rules"] if r["resources"] == ["pods"]]
    assert ("patch" in pods["verbs"]) == admission_loop


def test_explicit_scheduler_name_wins_and_additional_backends_get_rbac() -> None:
    objects = renderer.render_chart(
        {"gang": {"backend": "kueue", "schedulerName": "my-sched", "additionalBackends": ["volcano"]}}
    )
    assert env_of(objects)["TFJOB_SCHEDULER_NAME"] == "my-sched"
    (role,) = by_kind(objects, "ClusterRole")
    assert any("scheduling.volcano.sh" in r["apiGroups"] for r in role["rules"])


def test_namespaced_mode_gives_one_role_per_namespace_and_no_cluster_wide_job_access() -> None:
    objects = renderer.render_chart({"watchNamespaces": ["team-a", "team-b"]})
    roles = {o["metadata"]["namespace"]: o for o in by_kind(objects, "Role") if "leader" not in o["metadata"]["name"]}
    assert set(roles) == {"team-a", "team-b"}
    bindings = {o["metadata"]["namespace"] for o in by_kind(objects, "RoleBinding")}
    assert {"team-a", "team-b", "tfjob-system"} <= bindings
    assert any("tfjobs" in r["resources"] for r in roles["team-a"]["rules"])
    (cluster_role,) = by_kind(objects, "ClusterRole")
    cluster_resources = {res for r in cluster_role["rules"] for res in r["resources"]}
    assert cluster_resources.isdisjoint({"tfjobs", "services", "events"})
    # Cluster-wide, pods are only listed and watched: the builtin admission loop's view of node capacity.
    assert [r["verbs"] for r in cluster_role["rules"] if "pods" in r["resources"]] == [["list", "watch"]]
    assert env_of(objects)["TFJOB_NAMESPACES"] == "team-a,team-b"


def test_namespaced_mode_without_cluster_scoped_needs_renders_no_cluster_role() -> None:
    objects = renderer.render_chart(
        {"watchNamespaces": ["team-a"], "gang": {"backend": "kueue"}, "webhook": {"certManager": {"enabled": True}}}
    )
    assert by_kind(objects, "ClusterRole") == [] and by_kind(objects, "ClusterRoleBinding") == []


def test_cert_manager_mode_mounts_the_certificate_and_lets_cert_manager_inject_the_ca() -> None:
    objects = renderer.render_chart({"webhook": {"certManager": {"enabled": True}, "failurePolicy": "Ignore"}})
    (cert,) = by_kind(objects, "Certificate")
    (service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-webhook")]
    assert f"{service['metadata']['name']}.tfjob-system.svc" in cert["spec"]["dnsNames"]
    (deployment,) = by_kind(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-certs"]["secret"]["secretName"] == cert["spec"]["secretName"]
    for kind, path in (("ValidatingWebhookConfiguration", "/validate-tfjob"),
                       ("MutatingWebhookConfiguration", "/mutate-tfjob")):
        (config,) = by_kind(objects, kind)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"tfjob-system/{cert['metadata']['name']}"
        )
        (hook,) = config["webhooks"]
        assert hook["failurePolicy"] == "Ignore"
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"], "namespace": "tfjob-system", "port": 443, "path": path,
        }
        assert hook["rules"][0]["resources"] == ["tfjobs"]
    # cert-manager mode needs no webhook-configuration rights: the chart owns those objects.
    (role,) = by_kind(objects, "ClusterRole")
    assert not any(r["apiGroups"] == ["admissionregistration.k8s.io"] for r in role["rules"])
    assert env_of(objects)["TFJOB_WEBHOOK_CERT_DIR"] == "/etc/tfjob-operator/webhook-certs"


def test_self_signed_mode_lets_the_operator_patch_only_its_own_webhook_configurations() -> None:
    objects = renderer.render_chart()
    name = env_of(objects)["TFJOB_WEBHOOK_CONFIG_NAME"]
    configs = by_kind(objects, "ValidatingWebhookConfiguration") + by_kind(objects, "MutatingWebhookConfiguration")
    assert [c["metadata"]["name"] for c in configs] == [name, name]
    assert all("webhooks" not in c for c in configs)  # filled in by the operator at start
    (role,) = by_kind(objects, "ClusterRole")
    admission = "admissionregistration.k8s.io"
    patch_rules = [r for r in role["rules"] if "patch" in r["verbs"] and admission in r["apiGroups"]]
    assert patch_rules and all(r["resourceNames"] == [name] for r in patch_rules)


def test_webhook_service_routes_only_to_the_elected_leader() -> None:
    objects = renderer.render_chart({"replicas": 2})
    (service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-webhook")]
    assert service["spec"]["selector"]["tfjob.dev/operator-leader"] == "true"


def test_probes_use_kopf_liveness_endpoint_on_the_configured_port() -> None:
    objects = renderer.render_chart({"health": {"port": 9000}})
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 9000
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert env_of(objects)["TFJOB_LIVENESS_PORT"] == "9000"


def test_priority_class_for_gangs_never_preempts() -> None:
    assert by_kind(renderer.render_chart(), "PriorityClass") == []
    (pc,) = by_kind(renderer.render_chart({"priorityClass": {"create": True, "value": 500}}), "PriorityClass")
    assert pc["preemptionPolicy"] == "Never" and pc["value"] == 500


def test_service_monitor_selects_the_metrics_service() -> None:
    objects = renderer.render_chart({"metrics": {"serviceMonitor": {"enabled": True}}})
    (monitor,) = by_kind(objects, "ServiceMonitor")
    (metrics,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == metrics["spec"]["ports"][0]["name"]


def test_pod_monitor_scrapes_the_metrics_port_the_operator_declares_on_tfjob_pods() -> None:
    (monitor,) = by_kind(renderer.render_chart({"metrics": {"podMonitor": {"enabled": True}}}), "PodMonitor")
    job = parse_tfjob({"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "j", "namespace": "ns"},
                       "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
                           {"name": "tensorflow", "image": "tf"}]}}}}}})
    for pod in render_job(job).pods:
        labels = pod["metadata"]["labels"]
        for rule in monitor["spec"]["selector"]["matchExpressions"]:
            assert rule["operator"] == "Exists" and rule["key"] in labels
        (container,) = pod["spec"]["containers"]
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in container["ports"]}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (namespaced,) = by_kind(renderer.render_chart({"metrics": {"podMonitor": {"enabled": True}},
                                                   "watchNamespaces": ["team-a"]}), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def _exported_metric_names() -> set[str]:
    """Every series name the worker runtime and the operator can export (as Prometheus stores them)."""
    from prometheus_client import CollectorRegistry

    from tfjob_operator.metrics import Metrics
    from tfjob_worker.metrics import Identity, ReportCollector
    from tfjob_worker.reports import Report

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    worker = CollectorRegistry(auto_describe=False)
    collector = ReportCollector(Identity("j", "worker", "0"), 0)
    collector.update(Report(examples_per_sec=1.0, metrics={"loss": 1.0}, last_checkpoint=1.0, last_progress=1.0,
                            rank=0))
    worker.register(collector)
    names = set()
    for registry in (worker, Metrics().registry):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in suffixes.get(family.type, [""])}
    return names


def test_grafana_dashboard_is_a_labelled_configmap_querying_only_metrics_we_export() -> None:
    values = {"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}
    (config_map,) = by_kind(renderer.render_chart(values), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    kubernetes_validate.validate(config_map, KUBE_VERSION, strict=True)
    (text,) = config_map["data"].values()
    dashboard = json.loads(text)
    assert dashboard["uid"] and dashboard["title"]
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 10
    used = {name for q in queries for name in re.findall(r"\btfjob_[a-z_]+", q)}
    assert used and used <= _exported_metric_names(), used - _exported_metric_names()
    assert {p["datasource"]["uid"] for p in dashboard["panels"] if p["type"] != "row"} == {"${datasource}"}
    # the TFJob's name is the `tfjob` label; `job` is Prometheus's scrape job
    assert not any(re.search(r"[{,(]\s*job\b", q) for q in queries)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"metrics": {"podMonitor": {"interval": "often"}}}, "/metrics/podMonitor/interval"),
        ({"grafanaDashboard": {"label": {}}}, "label"),
        ({"gang": {"backend": "slurm"}}, "/gang/backend"),
        ({"webhook": {"failurePolicy": "Maybe"}}, "/webhook/failurePolicy"),
        ({"webhook": {"timeoutSeconds": 60}}, "/webhook/timeoutSeconds"),
        ({"replicas": -1}, "/replicas"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"logLevel": "chatty"}, "/logLevel"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"typo": 1}, "typo"),
    ],
)
def test_values_schema_refuses_bad_values_naming_the_key(values: dict[str, Any], needle: str) -> None:
    with helm.Chart.load(renderer.CHART_DIR) as chart, pytest.raises(helm.HelmValuesError, match=needle):
        chart.validate_schema(values)


def test_chart_crd_is_byte_identical_to_the_generated_crd() -> None:
    with helm.Chart.load(renderer.CHART_DIR) as chart:
        (entry,) = chart.crds
    assert entry["data"] == crd.CRD_PATH.read_text()
    assert renderer.CHART_CRD.read_bytes() == crd.CRD_PATH.read_bytes()


def test_plain_manifests_docs_table_and_chart_crd_are_up_to_date() -> None:
    stale = [str(p.relative_to(ROOT)) for p, text in renderer.outputs().items()
             if not p.exists() or p.read_text() != text]
    assert stale == [], "run: python deploy/render_manifests.py"


def test_plain_manifests_install_namespace_crd_then_operator() -> None:
    docs = [d for d in yaml.safe_load_all(renderer.MANIFESTS.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert kinds.index("ServiceAccount") < kinds.index("Deployment")
    assert docs[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
