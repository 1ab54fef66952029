"""How the operator names a job in its own tables: `(namespace, name)`, the key of kopf's TFJob index, the pod
index, the work queue and the status cache."""

from __future__ import annotations

JobKey = tuple[str, str]
