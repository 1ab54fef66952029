"""Harness for the operator integration tests: the real operator (`python -m tfjob_operator operator`,
a subprocess) against the local control plane.

The process kubelet runs each pod's command as a local process, so pods here are small real programs
(`python -c "import sys; sys.exit(3)"`). Settings are shortened through TFJOB_* so the tier stays fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from polling import wait_for
from ports import free_port

from kubelocal import planes
from kubelocal.cluster import LocalClusterThread, install_crds
from kubelocal.containers import ImageDefaults
from kubelocal.controllers import ControllerSettings
from kubelocal.kubeclient import KubeClient
from kubelocal.pytest_plugin import usable_control_plane
from tfjob_operator.api.crd import CRD_PATH, KUBEFLOW_CRD_PATH
from tfjob_operator.client.local.processes import stop_process

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
KUBECTL = Path(sys.executable).parent / "kubectl"
NS = "default"


def py(code: str) -> list[str]:
    """A container command running a Python snippet (the kubelet maps `python` to this interpreter)."""
    return ["python", "-c", code]


def replica(command: list[str], replicas: int = 1, policy: str = "ExitCode", **template_spec: Any) -> dict[str, Any]:
    container = {"name": "tensorflow", "image": "local", "command": command}
    return {"replicas": replicas, "restartPolicy": policy,
            "template": {"spec": {"containers": [container], **template_spec}}}


class Operator:
    """The operator as a subprocess; SIGKILL-able and restartable with the same settings."""

    def __init__(self, kubeconfig: Path, log_path: Path, command: list[str] | None = None, **settings: str) -> None:
        self.command = command or [sys.executable, "-m", "tfjob_operator", "operator"]
        # No TFJOB_ADDRESSING: the operator follows the plane (loopback on these planes, which have no pod network).
        inherited = {k: v for k, v in os.environ.items() if k != "TFJOB_ADDRESSING"}
        self.env = {**inherited, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
                    "TFJOB_METRICS_PORT": "0", "TFJOB_LIVENESS_PORT": "0",
                    "TFJOB_TERMINATING_TIMEOUT": "2", "TFJOB_RESYNC_SECONDS": "5", "TFJOB_RETRY_BACKOFF": "0.1",
                    "TFJOB_RETRY_MAX_BACKOFF": "1", **settings}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command, env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def kill(self) -> None:
        """SIGKILL: no clean-up, no last writes (what a crash or an OOM kill looks like)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Cluster:
    """What a test needs: the control plane, the official client, kubectl, and job helpers."""

    def __init__(self, local: LocalClusterThread, kubeconfig: Path, workdir: Path, plane: str = "kubelocal") -> None:
        self.local = local
        #: The control plane under the test: `kubelocal` or `upstream` (kubelocal.planes).
        self.plane = plane
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        api = config.new_client_from_config(str(kubeconfig))
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def submit(self, replica_specs: dict[str, Any], name: str | None = None, *, group: str = "tfjob.dev",
               success_policy: str | None = None, **run_policy: Any) -> str:
        """Create a TFJob (Kubeflow's with group="kubeflow.org") in the default namespace; its name."""
        name = name or f"j{uuid.uuid4().hex[:8]}"
        spec: dict[str, Any] = {"tfReplicaSpecs": replica_specs, "runPolicy": run_policy}
        if success_policy is not None:
            spec["successPolicy"] = success_policy
        body = {"apiVersion": f"{group}/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
        self.custom.create_namespaced_custom_object(group, "v1", NS, "tfjobs", body)
        return name

    def job(self, name: str, group: str = "tfjob.dev") -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(group, "v1", NS, "tfjobs", name)  # type: ignore
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str, group: str = "tfjob.dev") -> dict[str, Any]:
        return (self.job(name, group) or {}).get("status") or {}

    def condition(self, name: str, ctype: str, group: str = "tfjob.dev") -> dict[str, Any] | None:
        return next((c for c in self.status(name, group).get("conditions") or [] if c["type"] == ctype), None)

    def patch_spec(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object("tfjob.dev", "v1", NS, "tfjobs", name, {"spec": patch})

    def pods(self, name: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(NS, label_selector=f"tfjob.dev/job-name={name}").items)

    def pod_phases(self, name: str) -> dict[str, str]:
        return {p.metadata.name: p.status.phase for p in self.pods(name)}

    def events(self, name: str) -> list[tuple[str, str]]:
        items = self.core.list_namespaced_event(NS).items
        return [(e.reason, e.message) for e in items if e.involved_object.name == name
                and e.involved_object.kind == "TFJob"]

    def event_reasons(self, name: str) -> list[str]:
        return [reason for reason, _ in self.events(name)]

    def wait_events(self, name: str, *reasons: str, timeout: float = 15.0) -> list[tuple[str, str]]:
        """The job's Events once every reason named is among them (or any, if none is named). The operator posts
        a decision's Events after the status it announces, as kube's recorders do, so a test that has just seen
        the status must wait for them, bounded."""
        return wait_for(lambda: (events := self.events(name)) and set(reasons) <= {r for r, _ in events} and events,
                        timeout, what=f"{name} Events {sorted(reasons) or 'any'}")

    def wait_state(self, name: str, state: str, timeout: float = 40.0) -> dict[str, Any]:
        return wait_for(lambda: (s := self.status(name)).get("state") == state and s, timeout,
                        what=f"{name} state {state}")

    def kubectl(self, *args: str) -> str:
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                                text=True, timeout=30, check=True)
        return result.stdout

    def call(self, coro: Any) -> Any:
        return self.local.call(coro)

    def kubelocal_only(self, what: str) -> None:
        """Skip the test on the upstream plane, which lacks `what` (a part of kubelocal's API server or controllers
        that kube-apiserver and kube-controller-manager do not have)."""
        if self.plane != "kubelocal":
            pytest.skip(f"needs kubelocal's {what}; the {self.plane} plane has none")

    @property
    def apiserver(self) -> Any:
        """kubelocal's API server: its request log (`requests`), fault injection (`faults`) and store. On the
        upstream plane the test skips, saying so: kube-apiserver records and injects nothing a test can read."""
        self.kubelocal_only(REQUEST_LOG)
        return self.local.apiserver

    @property
    def controllers(self) -> Any:
        """kubelocal's controllers (to stop or lag one); the test skips on the upstream plane."""
        self.kubelocal_only("controllers (stopped or lagged one by one)")
        return self.local.controllers

    @contextlib.contextmanager
    def service_accounts_paused(self) -> Iterator[None]:
        """No namespace gets its `default` ServiceAccount while the block runs: kubelocal's ServiceAccount
        controller stopped, or on upstream kube-controller-manager (which runs it) down and then restarted."""
        if self.plane == "upstream":
            plane = self.local.cluster.plane
            self._on_plane(plane.end("kube-controller-manager"))
            try:
                yield
            finally:
                self._on_plane(plane.restart("kube-controller-manager"))
            return
        accounts = next(c for c in self.local.controllers.controllers if c.name == "serviceaccount-controller")
        self.local.call(self.local.cluster.on_components(accounts.stop()))
        try:
            yield
        finally:
            self.local.call(self.local.cluster.on_components(accounts.start()))

    def _on_plane(self, coro: Any) -> None:
        """Await an upstream plane's coroutine on the loop that started its processes."""
        self.local.call(self.local.cluster._on_plane_loop(coro), timeout=120)

    def client(self, user_agent: str) -> KubeClient:
        """A kubelocal KubeClient on the plane's API server, with the admin's credentials on upstream; close it."""
        tls = self.local.cluster.plane.tls() if self.plane == "upstream" else None
        return KubeClient(self.local.url, user_agent, tls=tls)

    def install_crds(self, paths: list[Path]) -> None:
        tls = self.local.cluster.plane.tls() if self.plane == "upstream" else None
        self.call(install_crds(self.local.url, paths, tls=tls))


#: Tests lose nodes on purpose and want it noticed in seconds (a cluster's default is 50 s).
TEST_CONTROLLERS = ControllerSettings(node_monitor_grace=4.0)


REQUEST_LOG = "API server (its request log, fault injection and store)"


def needs_kubelocal(what: str = REQUEST_LOG) -> pytest.MarkDecorator:
    """Mark a test (or `pytestmark` a module) needing kubelocal's `what`: on the upstream plane it skips, saying
    so, before any cluster starts (kube-apiserver records and injects nothing a test can read)."""
    plane = planes.choose()
    return pytest.mark.skipif(plane != "kubelocal", reason=f"needs kubelocal's {what}; the {plane} plane has none")


def control_plane() -> str:
    """The plane the tiers run on: $TFJOB_CONTROL_PLANE (the pytest plugin's switch), else kubelocal. On upstream,
    the test skips, saying to run `make upstream`, when the binaries are not built."""
    return usable_control_plane()


@contextlib.contextmanager
def local_cluster(tmp: Path, nodes: str | None = None, image: ImageDefaults = ImageDefaults(),
                  controllers: ControllerSettings | None = None, kubeflow_crd: bool = False) -> Iterator[Cluster]:
    """A local control plane with the TFJob CRD (and Kubeflow's, with `kubeflow_crd`), on the plane
    `control_plane()` chooses; `image` stands in for the pods' image (ENV, WORKDIR), `controllers` tunes the
    controllers beside the API server (the node lifecycle's grace and toleration cap on both planes; the garbage
    collector's lag on kubelocal alone)."""
    crds = (CRD_PATH, KUBEFLOW_CRD_PATH) if kubeflow_crd else (CRD_PATH,)
    plane = control_plane()
    with planes.cluster_thread(plane, workdir=tmp, nodes=nodes, max_grace_seconds=1.0, crds=crds,
                               image=image, controllers=controllers or TEST_CONTROLLERS) as local:
        kubeconfig = tmp / "kubeconfig"
        local.write_kubeconfig(kubeconfig)
        yield Cluster(local, kubeconfig, tmp, plane)


@contextlib.contextmanager
def running_operator(cluster: Cluster, **settings: str) -> Iterator[Operator]:
    """The operator for a module's tests, its metrics and liveness on free loopback ports; it must exit cleanly."""
    op = Operator(cluster.kubeconfig, cluster.workdir / "operator.log",
                  TFJOB_METRICS_PORT=str(free_port()), TFJOB_METRICS_HOST="127.0.0.1",
                  TFJOB_LIVENESS_PORT=str(free_port()), TFJOB_LIVENESS_HOST="127.0.0.1", **settings).start()
    yield op
    op.stop()
    if op.proc is not None:
        assert op.proc.returncode in (0, -signal.SIGTERM), op.log()[-3000:]


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local control plane for a test module (import this fixture into a conftest or test module); a module
    that sets `KUBEFLOW_CRD = True` gets Kubeflow's CRD installed too."""
    name = request.module.__name__.rpartition(".")[2]
    with local_cluster(tmp_path_factory.mktemp(name), kubeflow_crd=getattr(request.module, "KUBEFLOW_CRD", False)) as c:
        yield c


@pytest.fixture(scope="module")
def operator(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Operator]:
    """One operator for the module's tests (each test uses its own job names), with the module's
    `OPERATOR_SETTINGS` (TFJOB_* variables) if it has them."""
    with running_operator(cluster, **getattr(request.module, "OPERATOR_SETTINGS", {})) as op:
        yield op
