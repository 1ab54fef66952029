"""Helpers for the end-to-end tier: example manifests as a user copies them, applied through the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException
from operator_harness import Cluster

from tfjob_operator.client.local.claims import claim

REPO = Path(__file__).resolve().parents[2]


def example(name: str, **changes: Any) -> dict[str, Any]:
    """An example manifest as a user would copy it, with `changes` applied to its spec."""
    manifest = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
    manifest["spec"].update(changes)
    return manifest


def with_epochs(manifest: dict[str, Any], epochs: int) -> dict[str, Any]:
    """`manifest` (mnist-cpu's shape) training `epochs` epochs: for tests of a mechanism, not of the accuracy the
    example reaches (test_local_training's test_mnist_example_trains_to_high_accuracy_... shows that)."""
    args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--epochs") + 1] = str(epochs)
    return manifest


def with_hold(manifest: dict[str, Any], hold: str) -> dict[str, Any]:
    """`manifest` whose workers hold at a training step until SIGTERM (TFJOB_FAULT_HOLD_AT_STEP, docs/worker.md):
    a fault injected after that step lands there, however fast the machine runs."""
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [*(container.get("env") or []), {"name": "TFJOB_FAULT_HOLD_AT_STEP", "value": hold}]
    return manifest


def held_example(name: str, directory: Path, hold: str) -> Path:
    """examples/NAME.yaml with `with_hold`, written into `directory` for `tfjob local`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(with_hold(example(name), hold)))
    return path


def apply(cluster: Cluster, manifest: dict[str, Any]) -> str:
    """Create the TFJob, after the claims its pods mount, as a user does on a cluster (`kubectl apply -f
    examples/claims/tfjob-shared.yaml`): kube-scheduler keeps a pod whose claim is missing Pending."""
    for spec in manifest["spec"]["tfReplicaSpecs"].values():
        for volume in spec["template"]["spec"].get("volumes") or []:
            if name := (volume.get("persistentVolumeClaim") or {}).get("claimName"):
                try:
                    cluster.core.create_namespaced_persistent_volume_claim("default", claim(name))
                except ApiException as exc:
                    if exc.status != 409:
                        raise
    cluster.custom.create_namespaced_custom_object("tfjob.dev", "v1", "default", "tfjobs", manifest)
    return str(manifest["metadata"]["name"])
