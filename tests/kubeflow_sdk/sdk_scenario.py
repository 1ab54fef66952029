"""Kubeflow's training SDK (`kubeflow-training` 1.9, TrainingClient) driving a TFJob, as a notebook would.

Runs in its own virtualenv (the SDK pins kubernetes<36; the project's is newer): `make kubeflow-sdk-venv`,
then `.venv-kubeflow-sdk/bin/python tests/kubeflow_sdk/sdk_scenario.py KUBECONFIG NAME`. Prints one JSON
object with what each SDK call returned; tests/kubeflow_sdk/test_kubeflow_sdk.py asserts on it.
"""

import json
import sys
import time

from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    TrainingClient,
)
from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

SCRIPT = ("import json, os; c = json.loads(os.environ['TF_CONFIG']); "
          "print('hello from', c['task']['type'], c['task']['index'], 'of', len(c['cluster']['worker']))")


def main(kubeconfig: str, name: str) -> None:
    client = TrainingClient(config_file=kubeconfig, namespace="default", job_kind="TFJob")
    container = V1Container(name="tensorflow", image="tensorflow/tensorflow:2.21.0", command=["python", "-c", SCRIPT])
    job = KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=V1ObjectMeta(name=name),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            tf_replica_specs={"Worker": KubeflowOrgV1ReplicaSpec(
                replicas=2, restart_policy="Never",
                template=V1PodTemplateSpec(spec=V1PodSpec(containers=[container])))},
        ),
    )
    client.create_job(job)
    finished = client.wait_for_job_conditions(name, expected_conditions={"Succeeded"}, wait_timeout=120,
                                              polling_interval=1)
    got = client.get_job(name)
    conditions = client.get_job_conditions(name)
    logs, _ = client.get_job_logs(name)  # the master pod: worker 0 without a chief
    # Worker 0 decides success; worker 1 may still be finishing (cleanPodPolicy None keeps it): wait for it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
            p.status.phase not in ("Succeeded", "Failed") for p in client.get_job_pods(name, is_master=False)):
        time.sleep(0.2)
    all_logs, _ = client.get_job_logs(name, is_master=False)
    result = {
        "waited_kind": finished.kind,
        "get_job": {"name": got.metadata.name, "api_version": got.api_version,
                    "replica_statuses": {k: {"succeeded": v.succeeded, "active": v.active}
                                         for k, v in (got.status.replica_statuses or {}).items()},
                    "start_time": str(got.status.start_time), "completion_time": str(got.status.completion_time)},
        "conditions": [(c.type, c.status, c.reason) for c in conditions],
        "is_job_succeeded": client.is_job_succeeded(name),
        "is_job_failed": client.is_job_failed(name),
        "pod_names": sorted(client.get_job_pod_names(name, is_master=False)),
        "master_pod_names": client.get_job_pod_names(name, is_master=True),
        "master_logs": logs,
        "all_logs": all_logs,
    }
    client.delete_job(name)
    try:
        client.get_job(name)
        result["deleted"] = False
    except Exception as exc:  # the SDK wraps the 404 in its own error types
        result["deleted"] = "not found" in str(exc).lower() or "404" in str(exc)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
