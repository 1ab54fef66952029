"""The worker image, as the local process kubelet gives it to every pod (there is no image locally)."""

from __future__ import annotations

from kubelocal.containers import ImageDefaults
from tfjob_worker import image


def worker_image_defaults() -> ImageDefaults:
    """The worker image's ENV and WORKDIR (tfjob_worker.image, which the Dockerfile's worker stage repeats)."""
    return ImageDefaults(env=dict(image.ENV), workdir=image.WORKDIR)
