# syntax=docker/dockerfile:1
# Targets: `operator` (no TensorFlow) and `worker` (the training runtime).
#   docker build --target operator -t ghcr.io/tfjob-operator/tfjob-operator:0.1.0 .

FROM python:3.11.11-slim AS operator
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY worker_image/ worker_image/
COPY crds/ crds/
# The base install only: the operator and its own dependencies (kopf, kubernetes, pydantic...); no TensorFlow (the
# extra `worker`), no local control plane (local_cluster/ is not copied; the extra `local` is not installed).
RUN pip install . && rm -rf /src/build
WORKDIR /
# Non-root, matching the chart's runAsUser; the root filesystem is mounted read-only, /tmp is an emptyDir.
USER 65532:65532
EXPOSE 8080 9090 9443
ENTRYPOINT ["tfjob"]
CMD ["operator"]

# The training runtime TFJob pods run: `python -m tfjob_worker [flags]` (see docs/worker.md).
#   docker build --target worker -t ghcr.io/tfjob-operator/tfjob-worker:0.1.0 .
FROM tensorflow/tensorflow:2.21.0-gpu AS worker
# ENV and the last WORKDIR are tfjob_worker/image.py's (`tfjob local` gives them to every pod; a test ties
# the two). TF_USE_LEGACY_KERAS=1: multi-worker fit needs tf-keras (Keras 2); Keras 3 fails it (keras#20585).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_USE_LEGACY_KERAS=1 TFJOB_OUTPUT_DIR=/var/tfjob/output
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY worker_image/ worker_image/
# The worker extra pins tensorflow==2.21.0 (already in the base image, so pip keeps it), tf-keras,
# tensorboard and scikit-learn (the offline digits example).
RUN pip install ".[worker]" && rm -rf /src/build \
    && python -c "import tf_keras, tfjob_worker.exit_codes"
RUN useradd --uid 1000 --create-home --shell /usr/sbin/nologin tfjob \
    && mkdir -p /var/tfjob/output && chown -R 1000:1000 /var/tfjob
WORKDIR /var/tfjob
USER 1000:1000
ENTRYPOINT ["python", "-m", "tfjob_worker"]
CMD ["--model", "digits-mlp", "--epochs", "5"]
