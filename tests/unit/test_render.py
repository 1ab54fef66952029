"""The renderer, case by case: the objects a TFJob becomes (docs/design.md §4)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tfjob_operator.api import constants
from tfjob_operator.api.validation import parse_tfjob
from tfjob_operator.reconcile.render import RenderOptions, render


def container(name: str = "tensorflow", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "tf:1", **extra}


def replica(n: int, policy: str = "ExitCode", **template: Any) -> dict[str, Any]:
    spec = template.pop("spec", {"containers": [container()]})
    return {"replicas": n, "restartPolicy": policy, "template": {**template, "spec": spec}}


def job(replicas: dict[str, Any], name: str = "j", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
        "spec": {"tfReplicaSpecs": replicas, **spec},
    }


def env_of(pod: dict[str, Any], name: str) -> str | None:
    for c in pod["spec"]["containers"]:
        for e in c.get("env", []):
            if e["name"] == name:
                return e["value"]
    return None


def tf_configs(manifest: dict[str, Any], options: RenderOptions | None = None) -> dict[str, str | None]:
    return {p["metadata"]["name"]: env_of(p, "TF_CONFIG") for p in render(parse_tfjob(manifest), options).pods}


def tfc(cluster: dict[str, list[str]], rtype: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": rtype, "index": index}, "environment": "cloud"})


W2 = {"worker": ["j-worker-0.j.ns.svc:2222", "j-worker-1.j.ns.svc:2222"]}
CHIEF_W2 = {"chief": ["j-chief-0.j.ns.svc:2222"], **W2}
PS_CASE = {**CHIEF_W2, "ps": ["j-ps-0.j.ns.svc:2222"]}
EVAL_CASE = {**W2, "evaluator": ["j-evaluator-0.j.ns.svc:2222"]}

TF_CONFIG_CASES = [
    pytest.param(
        job({"Worker": replica(2)}), None,
        {"j-worker-0": tfc(W2, "worker", 0), "j-worker-1": tfc(W2, "worker", 1)},
        id="worker-only",
    ),
    pytest.param(
        job({"Chief": replica(1), "Worker": replica(2)}), None,
        {"j-chief-0": tfc(CHIEF_W2, "chief", 0), "j-worker-0": tfc(CHIEF_W2, "worker", 0),
         "j-worker-1": tfc(CHIEF_W2, "worker", 1)},
        id="chief-and-workers",
    ),
    pytest.param(
        job({"Master": replica(1), "Worker": replica(2)}), None,
        {"j-chief-0": tfc(CHIEF_W2, "chief", 0), "j-worker-0": tfc(CHIEF_W2, "worker", 0),
         "j-worker-1": tfc(CHIEF_W2, "worker", 1)},
        id="kubeflow-master-is-chief",
    ),
    pytest.param(
        job({"PS": replica(1), "Worker": replica(2), "Chief": replica(1)}), None,
        {"j-chief-0": tfc(PS_CASE, "chief", 0), "j-worker-0": tfc(PS_CASE, "worker", 0),
         "j-worker-1": tfc(PS_CASE, "worker", 1), "j-ps-0": tfc(PS_CASE, "ps", 0)},
        id="ps-strategy-canonical-order",
    ),
    pytest.param(
        job({"Worker": replica(2), "Evaluator": replica(1)}), None,
        {"j-worker-0": tfc(EVAL_CASE, "worker", 0), "j-worker-1": tfc(EVAL_CASE, "worker", 1),
         "j-evaluator-0": tfc(EVAL_CASE, "evaluator", 0)},
        id="evaluator-included",
    ),
    pytest.param(
        job({"worker": replica(2)}), RenderOptions(cluster_domain="cluster.local"),
        {f"j-worker-{i}": tfc({"worker": ["j-worker-0.j.ns.svc.cluster.local:2222",
                                          "j-worker-1.j.ns.svc.cluster.local:2222"]}, "worker", i)
         for i in range(2)},
        id="cluster-domain-suffix",
    ),
    pytest.param(
        job({"Worker": replica(2, spec={"containers": [container(ports=[{"name": "tfjob-port",
                                                                           "containerPort": 3333}])]})}),
        None,
        {f"j-worker-{i}": tfc({"worker": ["j-worker-0.j.ns.svc:3333", "j-worker-1.j.ns.svc:3333"]},
                              "worker", i) for i in range(2)},
        id="custom-port",
    ),
    pytest.param(job({"Worker": replica(1)}), None, {"j-worker-0": None}, id="single-pod-no-tf-config"),
    pytest.param(job({"Chief": replica(1), "Worker": replica(0)}), None, {"j-chief-0": None},
                 id="zero-workers-single-chief"),
    pytest.param(
        job({"Worker": replica(2)}), RenderOptions(loopback_ports={"j-worker-0": 41000, "j-worker-1": 41001}),
        {"j-worker-0": tfc({"worker": ["127.0.0.1:41000", "127.0.0.1:41001"]}, "worker", 0),
         "j-worker-1": tfc({"worker": ["127.0.0.1:41000", "127.0.0.1:41001"]}, "worker", 1)},
        id="loopback-mode",
    ),
    pytest.param(
        job({"WORKER": replica(2)}), None,
        {"j-worker-0": tfc(W2, "worker", 0), "j-worker-1": tfc(W2, "worker", 1)},
        id="replica-type-any-case",
    ),
]


@pytest.mark.parametrize(("manifest", "options", "expected"), TF_CONFIG_CASES)
def test_tf_config_per_pod(manifest: dict[str, Any], options: RenderOptions | None,
                           expected: dict[str, str | None]) -> None:
    assert tf_configs(manifest, options) == expected


def test_worker_pod_is_rendered_whole() -> None:
    manifest = job({"Worker": replica(2, metadata={"labels": {"team": "vision"}, "annotations": {"a": "b"}},
                                      spec={"containers": [container(env=[{"name": "X", "value": "1"}])],
                                            "nodeSelector": {"pool": "gpu"}})})
    pod = render(parse_tfjob(manifest), RenderOptions(attempt=3)).pods[1]
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "j-worker-1",
            "namespace": "ns",
            "labels": {"team": "vision", "tfjob.dev/job-name": "j", "tfjob.dev/replica-type": "worker",
                       "tfjob.dev/replica-index": "1", "tfjob.dev/attempt": "3"},
            "annotations": {"a": "b"},
            "ownerReferences": [{"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "name": "j", "uid": "u-1",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [{
                "name": "tensorflow", "image": "tf:1",
                "env": [{"name": "X", "value": "1"},
                        {"name": "TF_CONFIG", "value": tfc(W2, "worker", 1)},
                        {"name": "TFJOB_NAME", "value": "j"},
                        {"name": "TFJOB_ATTEMPT", "value": "3"},
                        {"name": "TFJOB_WORKER_METRICS_PORT", "value": "9464"},
                        {"name": "TFJOB_TERMINATION_GRACE_SECONDS", "value": "30"},
                        {"name": "TFJOB_TERMINATION_MESSAGE_PATH", "value": "/dev/termination-log"}],
                "ports": [{"name": "tfjob-port", "containerPort": 2222},
                          {"name": "tfjob-metrics", "containerPort": 9464, "protocol": "TCP"}],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            "nodeSelector": {"pool": "gpu"},
            "hostname": "j-worker-1",
            "subdomain": "j",
            "restartPolicy": "Never",
        },
    }


def _training_container(manifest: dict[str, Any], options: RenderOptions | None = None, pod: int = 0) -> Any:
    return render(parse_tfjob(manifest), options).pods[pod]["spec"]["containers"][0]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize(
    ("manifest", "options", "port"),
    [
        pytest.param(job({"Worker": replica(2)}), None, 9464, id="default"),
        pytest.param(job({"Worker": replica(1, spec={"containers": [container(
            ports=[{"name": "tfjob-metrics", "containerPort": 8000}])]})}), None, 8000, id="declared"),
        pytest.param(job({"Worker": replica(2)}),
                     RenderOptions(loopback_ports={"j-worker-0": 41000, "j-worker-1": 41001,
                                                   "j-worker-0/metrics": 41002, "j-worker-1/metrics": 41003}),
                     41002, id="loopback-own-port"),
    ],
)
def test_training_container_serves_metrics_on_the_named_port(manifest: dict[str, Any],
                                                              options: RenderOptions | None, port: int) -> None:
    container = _training_container(manifest, options)
    assert [p["containerPort"] for p in container["ports"] if p["name"] == "tfjob-metrics"] == [port]
    assert _env(container)["TFJOB_WORKER_METRICS_PORT"] == str(port)


def test_stall_timeout_reaches_the_worker_runtime_only_when_set() -> None:
    manifest = job({"Worker": replica(2)})
    assert "TFJOB_STALL_TIMEOUT_SECONDS" not in _env(_training_container(manifest))
    manifest["spec"]["runPolicy"] = {"stallTimeoutSeconds": 300}
    assert _env(_training_container(manifest, pod=1))["TFJOB_STALL_TIMEOUT_SECONDS"] == "300"


def test_headless_service_is_rendered_whole() -> None:
    service = render(parse_tfjob(job({"Worker": replica(2)}))).service
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"tfjob.dev/job-name": "j"},
                     "ownerReferences": [{"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "name": "j", "uid": "u-1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"tfjob.dev/job-name": "j"},
                 "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222, "protocol": "TCP"}]},
    }


@pytest.mark.parametrize(
    ("replicas", "chief_pod"),
    [
        pytest.param({"Chief": replica(1), "Worker": replica(2)}, "j-chief-0", id="chief-decides"),
        pytest.param({"Worker": replica(3), "PS": replica(1)}, "j-worker-0", id="worker-0-without-chief"),
    ],
)
def test_job_role_label_marks_the_deciding_pod(replicas: dict[str, Any], chief_pod: str) -> None:
    pods = render(parse_tfjob(job(replicas))).pods
    marked = [p["metadata"]["name"] for p in pods if p["metadata"]["labels"].get("tfjob.dev/job-role") == "chief"]
    assert marked == [chief_pod]


@pytest.mark.parametrize(
    ("policy", "pod_policy"),
    [("ExitCode", "Never"), ("Never", "Never"), ("OnFailure", "OnFailure"), ("Always", "Always")],
)
def test_pod_restart_policy_follows_replica_policy(policy: str, pod_policy: str) -> None:
    pods = render(parse_tfjob(job({"Worker": replica(2, policy)}))).pods
    assert {p["spec"]["restartPolicy"] for p in pods} == {pod_policy}


@pytest.mark.parametrize(
    ("user_policy", "rendered"),
    [
        pytest.param(None, "FallbackToLogsOnError", id="unset-log-tail-on-failure"),
        pytest.param("File", "File", id="user-choice-kept"),
        pytest.param("FallbackToLogsOnError", "FallbackToLogsOnError", id="same-as-default"),
    ],
)
def test_training_container_reports_its_log_tail_on_failure_unless_told_otherwise(user_policy: str | None,
                                                                                 rendered: str) -> None:
    extra = {"terminationMessagePolicy": user_policy} if user_policy else {}
    spec = {"containers": [container("sidecar"), container("tensorflow", **extra)]}
    sidecar, tf = render(parse_tfjob(job({"Worker": replica(2, spec=spec)}))).pods[0]["spec"]["containers"]
    assert (tf["terminationMessagePolicy"], "terminationMessagePolicy" in sidecar) == (rendered, False)


def test_the_worker_runtime_is_told_where_its_termination_message_goes() -> None:
    spec = {"containers": [container("tensorflow", terminationMessagePath="/ckpt/last-figures")]}
    tf = render(parse_tfjob(job({"Worker": replica(1, spec=spec)}))).pods[0]["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in tf["env"]}["TFJOB_TERMINATION_MESSAGE_PATH"] == "/ckpt/last-figures"


def test_tf_config_goes_to_the_tensorflow_container_only() -> None:
    spec = {"containers": [container("sidecar"), container("tensorflow")]}
    pod = render(parse_tfjob(job({"Worker": replica(2, spec=spec)}))).pods[0]
    sidecar, tf = pod["spec"]["containers"]
    assert "env" not in sidecar
    assert [e["name"] for e in tf["env"]] == ["TF_CONFIG", "TFJOB_NAME", "TFJOB_ATTEMPT", "TFJOB_WORKER_METRICS_PORT",
                                              "TFJOB_TERMINATION_GRACE_SECONDS", "TFJOB_TERMINATION_MESSAGE_PATH"]


def test_user_tf_config_is_replaced_not_duplicated() -> None:
    spec = {"containers": [container(env=[{"name": "TF_CONFIG", "value": "{}"}])]}
    pod = render(parse_tfjob(job({"Worker": replica(2, spec=spec)}))).pods[0]
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.count("TF_CONFIG") == 1 and env_of(pod, "TF_CONFIG") == tfc(W2, "worker", 0)


def test_namespace_defaults_to_default() -> None:
    manifest = job({"Worker": replica(2)})
    del manifest["metadata"]["namespace"]
    rendered = render(parse_tfjob(manifest))
    assert {o["metadata"]["namespace"] for o in rendered.objects()} == {"default"}
    assert "j-worker-0.j.default.svc:2222" in env_of(rendered.pods[0], "TF_CONFIG")  # type: ignore[operator]


# ---------------------------------------------------------------- enableDynamicWorker (Kubeflow's cases)


def _dynamic(replicas: dict[str, Any]) -> dict[str, Any]:
    return {**job(replicas, enableDynamicWorker=True), "apiVersion": "kubeflow.org/v1"}


def _svc(name: str) -> str:
    return f"j-{name}.j.ns.svc:2222"


def test_dynamic_workers_get_kubeflows_sparse_tf_config() -> None:
    """Kubeflow's TestConvertClusterSpecToSparseClusterSpec (2 PS, 2 workers): a worker sees every PS and itself
    by index, a PS itself only; the key is `cluster` (Kubeflow PR #1798), no environment."""
    configs = {name: json.loads(value or "") for name, value in tf_configs(_dynamic(
        {"PS": replica(2), "Worker": replica(2)})).items()}
    assert configs["j-worker-0"] == {"cluster": {"worker": {"0": _svc("worker-0")},
                                                 "ps": [_svc("ps-0"), _svc("ps-1")]},
                                     "task": {"type": "worker", "index": 0}}
    assert configs["j-worker-1"]["cluster"]["worker"] == {"1": _svc("worker-1")}
    assert configs["j-ps-0"] == {"cluster": {"worker": {}, "ps": [_svc("ps-0")]}, "task": {"type": "ps", "index": 0}}


def test_a_dynamic_workers_chief_sees_the_ps_and_itself() -> None:
    """Kubeflow's chief gets an empty cluster and fails at start (its issue #1763); here it sees the PS and itself."""
    chief = json.loads(tf_configs(_dynamic({"Chief": replica(1), "PS": replica(1), "Worker": replica(2)}))
                       ["j-chief-0"] or "")
    assert chief["cluster"] == {"worker": {}, "ps": [_svc("ps-0")], "chief": [_svc("chief-0")]}


def test_a_worker_added_later_leaves_the_others_tf_config_unchanged() -> None:
    before = tf_configs(_dynamic({"PS": replica(1), "Worker": replica(2)}))
    after = tf_configs(_dynamic({"PS": replica(1), "Worker": replica(3)}))
    assert {k: after[k] for k in before} == before


# ---------------------------------------------------------------- elastic jobs


def test_an_elastic_job_tells_the_runtime_its_scaling_and_base_width() -> None:
    manifest = job({"Worker": replica(4)}, elasticPolicy={"minReplicas": 2, "maxReplicas": 4,
                                                         "scaling": "ScaleLearningRate"})
    env = _env(_training_container(manifest))
    assert (env["TFJOB_ELASTIC_SCALING"], env["TFJOB_ELASTIC_REFERENCE_WORKERS"]) == ("ScaleLearningRate", "4")
    assert (env["TFJOB_ELASTIC_MIN_WORKERS"], env["TFJOB_ELASTIC_MAX_WORKERS"]) == ("2", "4")  # checked at start
    assert "TFJOB_ELASTIC_SCALING" not in _env(_training_container(job({"Worker": replica(2)})))


def test_an_elastic_jobs_reference_width_counts_its_chief_as_the_runtime_counts_training_processes() -> None:
    manifest = job({"Chief": replica(1), "Worker": replica(3)}, elasticPolicy={"minReplicas": 1, "maxReplicas": 3})
    env = _env(_training_container(manifest))
    assert (env["TFJOB_ELASTIC_REFERENCE_WORKERS"], env["TFJOB_ELASTIC_MIN_WORKERS"],
            env["TFJOB_ELASTIC_MAX_WORKERS"]) == ("4", "2", "4")


def test_the_operator_sets_the_variables_the_worker_runtime_reads() -> None:
    from tfjob_worker import preemption, scaling

    assert constants.ENV_ELASTIC_SCALING == scaling.SCALING_ENV
    assert constants.ENV_ELASTIC_REFERENCE_WORKERS == scaling.REFERENCE_WORKERS_ENV
    assert (constants.ENV_ELASTIC_MIN_WORKERS, constants.ENV_ELASTIC_MAX_WORKERS) == (scaling.MIN_WORKERS_ENV,
                                                                                      scaling.MAX_WORKERS_ENV)
    assert constants.ENV_TERMINATION_GRACE_SECONDS == preemption.GRACE_ENV


def test_an_elastic_job_renders_pods_and_tf_config_at_the_current_width_keeping_its_base() -> None:
    from tfjob_operator.api import ElasticStatus, TFJobStatus
    from tfjob_operator.reconcile import effective_job

    parsed = parse_tfjob(job({"Worker": replica(4)}, elasticPolicy={"minReplicas": 2, "maxReplicas": 4}))
    status = TFJobStatus(elastic=ElasticStatus(currentReplicas=3, minReplicas=2, maxReplicas=4, baseReplicas=4))
    pods = render(effective_job(parsed, status)[0]).pods
    assert [p["metadata"]["name"] for p in pods] == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert len(json.loads(env_of(pods[2], "TF_CONFIG") or "")["cluster"]["worker"]) == 3
    assert env_of(pods[0], "TFJOB_ELASTIC_REFERENCE_WORKERS") == "4"
    assert env_of(pods[0], "TFJOB_ELASTIC_SCALING") == "ConstantGlobalBatch"


def test_the_runtime_is_told_the_pods_termination_grace() -> None:
    manifest = job({"Worker": replica(1, spec={"containers": [container()], "terminationGracePeriodSeconds": 90})})
    assert _env(_training_container(manifest))["TFJOB_TERMINATION_GRACE_SECONDS"] == "90"
