"""How big a TFJob may be: the limits, why they are what they are, and the checks that enforce them.

One place for the numbers: the API models (`api.py`) put them in field constraints, the CRD generator
(`crd.py`) writes them as `maximum`, `maxItems`, `maxProperties` and CEL rules so the API server refuses
first, and `validation.parse_tfjob` (used by the CLI, the webhook and the operator) says the same words.

Chosen from what a real cluster holds, not from what the operator could survive:
- Kubernetes is tested up to 5000 nodes and 150 000 pods (SIG Scalability); one TF gang of 1000 pods is
  already the largest MultiWorkerMirrored / PS job people run, and every pod carries the whole TF_CONFIG
  (one address per peer, ~70 bytes each: 70 KB of environment at 1000 pods).
- A pod's hostname is `<job>-<type>-<index>` and must be a DNS label (≤ 63 characters). The longest suffix
  is `-evaluator-0` (12) or `-worker-999` (11), so a job name of at most 51 characters always fits.
- etcd stores an object of at most 1.5 MiB, and every pod copies its template and TF_CONFIG; a spec of at
  most 256 KiB leaves room for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Pods of one replica type (Chief and Evaluator have their own limit of 1).
MAX_REPLICAS_PER_TYPE: Final = 1000
#: Pods of one job, all types together.
MAX_REPLICAS_PER_JOB: Final = 1000
#: Characters of a job name: the longest pod hostname `<name>-evaluator-0` / `<name>-worker-999` fits in 63.
MAX_JOB_NAME_LENGTH: Final = 51
#: Containers (and, separately, init containers) in one pod template.
MAX_CONTAINERS: Final = 16
#: Bytes of the job's spec as JSON (YAML aliases expanded).
MAX_SPEC_BYTES: Final = 256 * 1024
#: Nesting depth of the whole document (a real pod template needs about 15).
MAX_DEPTH: Final = 64
#: Values (mapping entries, list items, scalars) in the whole document, YAML aliases expanded.
MAX_VALUES: Final = 100_000


#: The words for the limits no single field constraint can say; the CRD's CEL rules carry the same.
TOO_MANY_PODS = (f"spec.tfReplicaSpecs: more than {MAX_REPLICAS_PER_JOB} pods in all, the limit per job "
                 "(lower replicas, or split the work into several jobs)")
NAME_TOO_LONG = (f"metadata.name: longer than {MAX_JOB_NAME_LENGTH} characters, the limit that keeps every pod "
                 "hostname <name>-<type>-<index> within 63 (shorten the name)")


def size_messages(obj: Any) -> list[str]:
    """Refuse a document that is too deep or whose spec is too big, without expanding it: YAML aliases can
    share one node many times, so the walk stops as soon as a limit is passed (an alias bomb costs little)."""
    budget = MAX_SPEC_BYTES
    stack: list[tuple[Any, int, bool]] = [(obj, 0, False)]
    values = 0
    while stack:
        node, depth, in_spec = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return [f"(document): more than {MAX_VALUES} values (YAML aliases expanded); is it a TFJob?"]
        if depth > MAX_DEPTH:
            return [f"(document): nested more than {MAX_DEPTH} levels deep (a TFJob needs about 15)"]
        if isinstance(node, Mapping):
            children = list(node.items())
            if depth == 0:
                children = [(k, v) for k, v in children if k != "status"]  # the operator's output, not the user's
            for key, value in children:
                stack.append((value, depth + 1, in_spec or (depth == 0 and key == "spec")))
                budget -= (len(str(key)) + 4) if in_spec else 0
        elif isinstance(node, list):
            stack.extend((v, depth + 1, in_spec) for v in node)
            budget -= (len(node) + 2) if in_spec else 0
        elif in_spec:
            budget -= len(node) + 2 if isinstance(node, str) else 8
        if budget < 0:
            return [f"spec: larger than {MAX_SPEC_BYTES // 1024} KiB as JSON (YAML aliases expanded); "
                    "move data into a ConfigMap or the image"]
    return []
