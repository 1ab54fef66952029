"""What the worker image (Dockerfile, `worker` stage) is called and gives every process: its ENV and its WORKDIR.

One definition, read twice: the Dockerfile's worker stage spells the same values (tests/worker/
test_image_env.py fails when they differ) and `tfjob local` hands them to the process kubelet, so a pod
run on this machine sees the environment it would see in the image (the pod's own `env` still wins).
"""

from __future__ import annotations

#: The worker image's name, tagged with the release (0.1.0): the one the README, the examples, the Dockerfile's
#: build line and the chart's notes give (tests/worker/test_image_env.py finds no other).
REPOSITORY = "ghcr.io/tfjob-operator/tfjob-worker"

#: The image's ENV. TF_USE_LEGACY_KERAS=1: multi-worker `fit` needs tf-keras (Keras 2); Keras 3 fails it
#: under MultiWorkerMirroredStrategy (keras#20585).
ENV: dict[str, str] = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PIP_NO_CACHE_DIR": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "TF_USE_LEGACY_KERAS": "1",
    "TFJOB_OUTPUT_DIR": "/var/tfjob/output",
}

#: The image's final WORKDIR (the process's cwd). Locally it is the pod's own work directory, and paths
#: under it (TFJOB_OUTPUT_DIR above) are mapped there like a volume's.
WORKDIR = "/var/tfjob"
