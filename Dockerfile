# syntax=docker/dockerfile:1
# Targets: `operator` (no TensorFlow) and `worker` (the training runtime).
#   docker build --target operator -t tfjob-operator:0.1.0 .

FROM python:3.11.11-slim AS operator
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY worker_image/ worker_image/
COPY crds/ crds/
# The base install only: kopf, kubernetes, pydantic... no TensorFlow (that is the worker extra).
RUN pip install . && rm -rf /src/build
WORKDIR /
# Non-root, matching the chart's runAsUser; the root filesystem is mounted read-only, /tmp is an emptyDir.
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["tfjob"]
CMD ["operator"]
