"""The parts of bench/kubeflow_side.py: the measuring client (its own process), the two operators as processes,
Kubeflow's webhook routed to its manager on the host, and the API server's audit log read per operator. Not a
bench of its own."""

from __future__ import annotations

import base64
import collections
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

from kubelocal.upstream.build import UpstreamError
from tfjob_operator.client.local.processes import stop_process

ROOT = Path(__file__).resolve().parents[1]
#: Kubeflow's TFJob CRD as training-operator v1.9.3's module zip carries it (manifests/base/crds); the vendored copy
#: in third_party/crds is the same document (release-1.9), read from the module where Go has it.
KUBEFLOW_CRD_IN_MODULE = "manifests/base/crds/kubeflow.org_tfjobs.yaml"
#: Its manager's --webhook-configuration name (cmd/training-operator.v1/main.go).
KUBEFLOW_WEBHOOK = "validator.training-operator.kubeflow.org"
#: Where its cert rotator waits for the Secret's files (pkg/cert/cert.go: fixed, for the Deployment's volume mount).
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
WORKER_IMAGE = "ghcr.io/tfjob-operator/tfjob-worker:0.1.0"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
NS = "default"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["bench:tfjob-operator", "bench:training-operator"]
- level: None
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def kubeflow_module() -> Path:
    """The pinned module's folder in Go's module cache (`go mod download`: no network once built)."""
    module = ROOT / "upstream" / "training-operator"
    out = subprocess.run(["go", "mod", "download", "-json", "github.com/kubeflow/training-operator"], cwd=module,
                         capture_output=True, text=True, check=False, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if out.returncode != 0:
        raise UpstreamError(f"go mod download of training-operator failed: {out.stderr.strip()[-400:]}")
    return Path(json.loads(out.stdout)["Dir"])


# -- the observer: the measuring client, in its own process (the plane's node agents run in this one) -----------

class Observer:
    """Watches pods and Kubeflow TFJobs; records when each pod (by uid) was first seen and first Running, and when
    each job first had a last condition Succeeded or Failed. Submits and deletes when asked (same clock)."""

    def __init__(self, kubeconfig_path: str) -> None:
        self.api = config.new_client_from_config(kubeconfig_path)
        self.api.user_agent = "kubeflow-side-bench"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.pods: dict[str, tuple[str, float]] = {}  # uid -> (name, first seen)
        self.running: dict[str, float] = {}  # uid -> first seen Running
        self.finished: dict[str, tuple[float, str]] = {}
        self.lock = threading.Lock()
        for kind in ("pods", "tfjobs"):
            threading.Thread(target=self._watch, args=(kind,), daemon=True).start()

    def _watch(self, kind: str) -> None:
        version: str | None = None
        w = watch.Watch()
        while True:
            resume = {"resource_version": version} if version else {}
            try:
                if kind == "pods":
                    stream = w.stream(self.core.list_namespaced_pod, NS, timeout_seconds=30, deserialize=False,
                                      **resume)
                else:
                    stream = w.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                      timeout_seconds=30, deserialize=False, **resume)
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    self._observe(kind, obj)
            except Exception:
                version = None
                time.sleep(0.1)

    def _observe(self, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        meta = obj["metadata"]
        with self.lock:
            if kind == "pods":
                self.pods.setdefault(meta["uid"], (meta["name"], now))
                if (obj.get("status") or {}).get("phase") == "Running":
                    self.running.setdefault(meta["uid"], now)
                return
            conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
            last = conditions[-1]["type"] if conditions else ""
            if last in ("Succeeded", "Failed"):
                self.finished.setdefault(meta["name"], (now, last))

    def submit(self, names: list[str], workers: int, duration: str | None) -> dict[str, float]:
        template: dict[str, Any] = {"spec": {"containers": [
            {"name": "tensorflow", "image": WORKER_IMAGE, "command": ["python", "-c", "pass"]}]}}
        if duration is not None:
            template["metadata"] = {"annotations": {"kubelocal.dev/sim-duration": duration}}
        submitted = {}
        for name in names:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob", "metadata": {"name": name},
                    "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": {"Worker": {
                        "replicas": workers, "restartPolicy": "ExitCode", "template": template}}}}
            submitted[name] = time.monotonic()
            self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
        return submitted

    def delete_pod(self, name: str) -> float:
        at = time.monotonic()
        self.core.delete_namespaced_pod(name, NS)
        return at

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"pods": dict(self.pods), "running": dict(self.running), "finished": dict(self.finished),
                    "now": time.monotonic()}


def observe(kubeconfig_path: str, conn: Connection) -> None:
    """The observer process: answers (method, args) messages with the method's result."""
    obs = Observer(kubeconfig_path)
    conn.send("ready")
    while True:
        method, args = conn.recv()
        if method == "stop":
            return
        try:
            conn.send(("ok", getattr(obs, method)(*args)))
        except client.ApiException as exc:  # the caller raises it, with the API server's message
            try:
                message = json.loads(exc.body or "{}").get("message") or exc.reason
            except ValueError:
                message = exc.reason
            conn.send(("error", f"{method}: HTTP {exc.status}: {message}"))
        except Exception as exc:
            conn.send(("error", f"{method}: {exc}"))


class ObserverProcess:
    def __init__(self, kubeconfig_path: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=observe, args=(str(kubeconfig_path), theirs), daemon=True)
        self.proc.start()
        assert self.conn.recv() == "ready"

    def call(self, method: str, *args: Any) -> Any:
        self.conn.send((method, args))
        status, value = self.conn.recv()
        if status == "error":
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        self.conn.send(("stop", ()))
        self.proc.join(10)


# -- the operators -----------------------------------------------------------------------------------------------

@dataclass
class Operator:
    key: str  # SUMMARY prefix
    user: str  # its certificate's user, as the audit log names it
    argv: list[str]
    env: dict[str, str]
    log: Path
    webhook_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env={**os.environ, **self.env}, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 15)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operators(logs: Path, kubeconfigs: dict[str, Path], kubeflow_bin: Path, qps: int, gang: str, threads: int = 1
              ) -> list[Operator]:
    ours = Operator("ours", "bench:tfjob-operator", [sys.executable, "-m", "tfjob_operator", "operator"],
                    {"KUBECONFIG": str(kubeconfigs["tfjob-operator"]), "TFJOB_KUBEFLOW_API": "all",
                     "TFJOB_METRICS_PORT": "0", "TFJOB_LIVENESS_PORT": "0", "TFJOB_LOG_LEVEL": "WARNING",
                     "TFJOB_GANG_BACKEND": gang}, logs / "tfjob-operator.log")
    port = free_port()
    theirs = Operator("kubeflow", "bench:training-operator",
                      [str(kubeflow_bin), f"--kubeconfig={kubeconfigs['training-operator']}", "--enable-scheme=tfjob",
                       "--metrics-bind-address=0", "--health-probe-bind-address=0",
                       f"--webhook-server-port={port}", f"--kube-api-qps={qps}",
                       f"--kube-api-burst={max(30, qps * 3 // 2)}",
                       f"--controller-threads={threads}"],
                      {"MY_POD_NAMESPACE": "kubeflow"}, logs / "training-operator.log", webhook_port=port)
    return [ours, theirs]


# -- Kubeflow's validating webhook, routed to the manager on the host ----------------------------------------------

def kubeflow_webhook(admin: client.ApiClient, module: Path, port: int, address: str) -> None:
    """Kubeflow's TFJob validating webhook (its manifests' entry, named as its kustomization names it) behind a
    selector-less Service `training-operator` in `kubeflow` and an EndpointSlice at this machine's address: the
    API server (aggregator routing) dials the manager on the host. Its cert rotator fills the Secret and the CA
    bundle, and starts the controller only once it has (without the configuration it never does)."""
    core = client.CoreV1Api(admin)
    core.create_namespaced_service("kubeflow", {"metadata": {"name": "training-operator"}, "spec": {"ports": [
        {"name": "webhook-server", "port": 443, "protocol": "TCP", "targetPort": port}]}})
    client.DiscoveryV1Api(admin).create_namespaced_endpoint_slice("kubeflow", {
        "metadata": {"name": "training-operator-host", "labels": {"kubernetes.io/service-name": "training-operator"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "webhook-server", "port": port, "protocol": "TCP"}]})
    docs = yaml.safe_load_all((module / "manifests/base/webhook/manifests.yaml").read_text())
    (config_doc,) = [d for d in docs if d and d.get("kind") == "ValidatingWebhookConfiguration"]
    (tfjob,) = [w for w in config_doc["webhooks"] if w["name"].startswith("validator.tfjob.")]
    tfjob["clientConfig"]["service"].update(name="training-operator", namespace="kubeflow")
    client.AdmissionregistrationV1Api(admin).create_validating_webhook_configuration({
        "metadata": {"name": KUBEFLOW_WEBHOOK}, "webhooks": [tfjob]})


def mount_webhook_secret(admin: client.ApiClient, timeout: float = 120.0) -> None:
    """What the kubelet's Secret volume does for the manager's pod in Kubeflow's Deployment: once its cert rotator
    has filled the Secret, its tls.crt and tls.key are files in CERT_DIR (the rotator waits for them there; its
    path is fixed, the webhook server's default is the same under /tmp)."""
    core = client.CoreV1Api(admin)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = core.read_namespaced_secret("training-operator-webhook-cert", "kubeflow").data or {}
        if data.get("tls.crt") and data.get("tls.key"):
            CERT_DIR.mkdir(parents=True, exist_ok=True)
            for key in ("tls.crt", "tls.key", "ca.crt"):
                if key in data:
                    (CERT_DIR / key).write_bytes(base64.b64decode(data[key]))
            return
        time.sleep(0.2)
    raise TimeoutError(f"training-operator did not fill its webhook Secret within {timeout:.0f} s")


def remove_kubeflow_webhook(admin: client.ApiClient) -> None:
    """While it stays, every TFJob create is sent to a webhook nobody serves (failurePolicy Fail)."""
    client.AdmissionregistrationV1Api(admin).delete_validating_webhook_configuration(KUBEFLOW_WEBHOOK)


# -- the audit log -----------------------------------------------------------------------------------------------

def audit_events(path: Path, user: str, since: float, until: float) -> list[dict[str, Any]]:
    """The user's completed requests received in [since, until) (wall-clock seconds)."""
    found = []
    with path.open() as f:
        for line in f:
            event = json.loads(line)
            if event.get("user", {}).get("username") != user or event.get("stage") != "ResponseComplete":
                continue
            at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if since <= at < until:
                found.append(event)
    return found


def by_verb(events: list[dict[str, Any]]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for e in events:
        ref = e.get("objectRef") or {}
        if not ref.get("resource"):  # discovery, /version: the path
            counts[f"{e['verb']} {e.get('requestURI', '?').split('?')[0]}"] += 1
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        counts[f"{e['verb']} {resource}"] += 1
    return counts


def refused(events: list[dict[str, Any]]) -> collections.Counter[str]:
    """The requests answered with an error, by verb, resource and status code (a create that met 409 or 504)."""
    counts: collections.Counter[str] = collections.Counter()
    for e in events:
        code = (e.get("responseStatus") or {}).get("code", 0)
        if code >= 300:
            counts[f"{e['verb']} {(e.get('objectRef') or {}).get('resource', '?')} {code}"] += 1
    return counts
