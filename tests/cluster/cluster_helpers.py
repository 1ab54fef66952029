"""Helpers for the real-cluster tier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RealCluster:
    core: Any
    custom: Any
    namespace: str
    kubeconfig: str
    worker_image: str

    def example(self, name: str, job_name: str) -> dict[str, Any]:
        """An example manifest pointed at the test's namespace and worker image."""
        manifest = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text())
        manifest["metadata"] = {"name": job_name, "namespace": self.namespace}
        for spec in manifest["spec"]["tfReplicaSpecs"].values():
            for container in spec["template"]["spec"]["containers"]:
                container["image"] = self.worker_image
                container["imagePullPolicy"] = "IfNotPresent"
                container.pop("resources", None)
        return manifest
