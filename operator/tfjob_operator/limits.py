"""How big a TFJob may be: the limits, why they are what they are, and the checks that enforce them.

One place for the numbers: the API models (`api.py`) put them in field constraints, the CRD generator
(`crd.py`) writes them as `maximum`, `maxItems`, `maxProperties` and CEL rules so the API server refuses
first, and `validation.parse_tfjob` (used by the CLI, the webhook and the operator) says the same words.

Chosen from what a real cluster holds, not from what the operator could survive:
- Kubernetes is tested up to 5000 nodes and 150 000 pods (SIG Scalability); one TF gang of 1000 pods is
  already the largest MultiWorkerMirrored / PS job people run, and every pod carries the whole TF_CONFIG
  (one address per peer, ~70 bytes each: 70 KB of environment at 1000 pods).
- A pod's hostname is `<job>-<type>-<index>` and must be a DNS label (≤ 63 characters), so a job name is
  as long as its own longest pod hostname allows: 54 characters with one worker, 52 with 1000, 51 with an
  evaluator. Kubeflow accepts such names too; a fixed cap short enough for `-evaluator-0` would refuse them.
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
#: Characters of a pod hostname `<job>-<type>-<index>` (a DNS label), hence of the job name with its pods' suffixes.
MAX_HOSTNAME_LENGTH: Final = 63
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
NAME_TOO_LONG = (f"metadata.name: a pod hostname <name>-<type>-<index> would be longer than {MAX_HOSTNAME_LENGTH} "
                 "characters (shorten the name, or lower replicas)")


def longest_hostname(name: str, replicas: Mapping[str, int]) -> str | None:
    """The longest of the job's pod hostnames `<name>-<type>-<last index>`, from its replica counts by type (as
    pod names spell the type: chief, worker, ps, evaluator); None for a job without pods."""
    hostnames = [f"{name}-{rtype}-{count - 1}" for rtype, count in replicas.items() if count > 0]
    return max(hostnames, key=len) if hostnames else None


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
