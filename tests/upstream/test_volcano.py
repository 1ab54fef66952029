"""The `volcano` gang backend under Volcano's real scheduler: vc-scheduler v1.14.1 (`upstream/volcano`, built only when
named: `python -m kubelocal.upstream.build volcano`) beside the upstream plane, with Volcano's CRDs from its module.
Skips, saying how to build it, when it is not built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from polling import wait_for

from kubelocal.upstream.build import COMPONENTS, UpstreamError, binaries
from kubelocal.upstream.cluster import UpstreamClusterThread
from tfjob_operator.api.crd import CRD_PATH
from tfjob_operator.client.local.processes import stop_process

VC_GROUP, VC_VERSION = "scheduling.volcano.sh", "v1beta1"


@pytest.fixture(scope="module")
def vc_scheduler(upstream_binaries: dict[str, Path]) -> Path:
    try:
        return binaries("volcano")["vc-scheduler"]
    except UpstreamError as exc:
        pytest.skip(f"{exc} (or run `python -m kubelocal.upstream.build volcano`)")


def volcano_crds() -> list[Path]:
    """Volcano's CRDs as its v1.14.1 module ships them (Go's module cache holds it once vc-scheduler is built)."""
    out = subprocess.run(["go", "mod", "download", "-json", "volcano.sh/volcano"], cwd=COMPONENTS["volcano"].module,
                         capture_output=True, text=True, check=False, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if out.returncode != 0:
        pytest.skip(f"Volcano's module is not in Go's module cache: {out.stderr.strip()[-300:]}")
    return sorted((Path(json.loads(out.stdout)["Dir"]) / "installer/helm/chart/volcano/crd/bases").glob("*.yaml"))


@pytest.fixture(scope="module")
def volcano_plane(upstream_binaries: dict[str, Path], vc_scheduler: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, client.ApiClient]]:
    """The plane with 2 simulated nodes, Volcano's CRDs, an open `default` Queue (vc-controller-manager opens it in
    a cluster), vc-scheduler and the operator with the volcano backend."""
    workdir = tmp_path_factory.mktemp("volcano")
    with UpstreamClusterThread(workdir=workdir / "plane", nodes="2x{cpu:8,memory:32Gi,sim:true}", pod_network="off",
                               crds=(CRD_PATH, *volcano_crds()), max_grace_seconds=1.0,
                               binaries=upstream_binaries) as plane:
        kubeconfig = workdir / "kubeconfig"
        plane.write_kubeconfig(kubeconfig)
        api = config.new_client_from_config(str(kubeconfig))
        custom = client.CustomObjectsApi(api)
        custom.create_cluster_custom_object(VC_GROUP, VC_VERSION, "queues", {
            "apiVersion": f"{VC_GROUP}/{VC_VERSION}", "kind": "Queue", "metadata": {"name": "default"},
            "spec": {"weight": 1, "reclaimable": True}})
        custom.patch_cluster_custom_object_status(VC_GROUP, VC_VERSION, "queues", "default",
                                                  {"status": {"state": "Open"}})
        with (workdir / "vc-scheduler.log").open("wb") as vlog, (workdir / "operator.log").open("wb") as olog:
            vc = subprocess.Popen([str(vc_scheduler), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
                                   "--listen-address=127.0.0.1:0", "--healthz-address=127.0.0.1:0"],
                                  stdout=vlog, stderr=subprocess.STDOUT, start_new_session=True)
            operator = subprocess.Popen(
                [sys.executable, "-m", "tfjob_operator", "operator"],
                env={**os.environ, "KUBECONFIG": str(kubeconfig), "TFJOB_METRICS_PORT": "0",
                     "TFJOB_LIVENESS_PORT": "0", "TFJOB_GANG_BACKEND": "volcano"},
                stdout=olog, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                yield workdir, api
            finally:
                stop_process(operator, 10)
                stop_process(vc, 10)


def test_the_volcano_backends_podgroup_is_admitted_and_its_pods_bound_by_vc_scheduler(
        volcano_plane: tuple[Path, client.ApiClient]) -> None:
    workdir, api = volcano_plane
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    template = {"metadata": {"annotations": {"kubelocal.dev/sim-duration": "5"}},
                "spec": {"containers": [{"name": "tensorflow", "image": "ghcr.io/tfjob-operator/tfjob-worker:0.1.0",
                                         "command": ["python", "-c", "pass"],
                                         "resources": {"requests": {"cpu": "1"}}}]}}
    custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", {
        "apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "vc"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4, "restartPolicy": "ExitCode", "template": template}}}})

    def state() -> str | None:
        job = custom.get_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", "vc")
        return (job.get("status") or {}).get("state") if (job.get("status") or {}).get("state") in (
            "Succeeded", "Failed") else None

    logs = f"(logs in {workdir})"
    assert wait_for(state, timeout=120, interval=0.5, what=f"the job to end {logs}") == "Succeeded"
    group = custom.get_namespaced_custom_object(VC_GROUP, VC_VERSION, "default", "podgroups", "vc")
    assert group["spec"]["minMember"] == 4
    # Workers still running when worker 0 ends the job are deleted then (cleanPodPolicy Running): the pods left
    # may be fewer than 4, the Scheduled Events of all 4 stay.
    pods = [p for p in core.list_namespaced_pod("default").items if p.metadata.name.startswith("vc-worker-")]
    assert pods and {p.spec.scheduler_name for p in pods} == {"volcano"}
    bound_by = {e.involved_object.name for e in core.list_namespaced_event("default").items
                if e.reason == "Scheduled" and "volcano" in (e.source.component or "", e.reporting_component or "")}
    assert bound_by >= {f"vc-worker-{i}" for i in range(4)}, f"pods vc-scheduler bound: {sorted(bound_by)} {logs}"
