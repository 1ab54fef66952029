"""The images, as the local process kubelet gives them to pods (there is no image locally).

- The worker image's ENV and WORKDIR are every pod's defaults (tfjob_worker.image, which the
  Dockerfile's worker stage repeats).
- The operator image (the chart's `image.repository`) maps to this installation's `tfjob` command: its
  ENTRYPOINT, as the Dockerfile's operator stage sets it, so the chart's Deployment (`args: [operator]`)
  runs `tfjob operator` on the process kubelet.
"""

from __future__ import annotations

import sys

from kubelocal.containers import ImageDefaults
from tfjob_worker import image

#: The chart's default `image.repository` (deploy/helm/tfjob-operator/values.yaml; a test keeps them equal).
OPERATOR_IMAGE = "ghcr.io/tfjob-operator/tfjob-operator"


def worker_image_defaults() -> ImageDefaults:
    """The worker image's ENV and WORKDIR (tfjob_worker.image, which the Dockerfile's worker stage repeats)."""
    return ImageDefaults(env=dict(image.ENV), workdir=image.WORKDIR)


def local_images() -> dict[str, ImageDefaults]:
    """Image repository → what it gives locally: the operator image's ENTRYPOINT is the installed `tfjob`."""
    return {OPERATOR_IMAGE: ImageDefaults(env=dict(image.ENV), entrypoint=(sys.executable, "-m", "tfjob_operator"))}
