"""How big a TFJob may be: the limits, why they are what they are, and the checks that enforce them.

One place for the numbers: the API models (`api.py`) put them in field constraints, the CRD generator
(`crd.py`) writes them as `maximum`, `maxProperties` and CEL rules so the API server refuses first, and
`validation.parse_tfjob` (used by the CLI, the webhook and the operator) says the same words.

A pod template is limited only as Kubernetes limits a pod (no cap on containers, resources or sizes of its
own); the TFJob's own fields have the limits below:
- Kubernetes is tested up to 5000 nodes and 150 000 pods (SIG Scalability); one TF gang of 1000 pods is
  already the largest MultiWorkerMirrored / PS job people run, and every pod carries the whole TF_CONFIG
  (one address per peer, ~70 bytes each: 70 KB of environment at 1000 pods).
- A pod's hostname is `<job>-<type>-<index>` and must be a DNS label (≤ 63 characters), so a job name is
  as long as its own longest pod hostname allows: 54 characters with one worker, 52 with 1000, 51 with an
  evaluator. Kubeflow accepts such names too; a fixed cap short enough for `-evaluator-0` would refuse them.
- Hostile input is bounded as the API server bounds it: a document of at most 3 MiB as JSON (kube-apiserver's
  request limit, YAML aliases expanded, so an alias bomb is refused without being expanded), nested at most 64
  levels (the deepest valid TFJob is about 20; Kubernetes' decoders stop at 10 000, Python's recursion sooner).
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
#: Resources named in spec.runPolicy.schedulingPolicy.minResources (our field; a PodGroup names a handful), and
#: the characters of each quantity there: bounds for the CRD's CEL rule on them (the API server's cost estimate).
MAX_MIN_RESOURCES: Final = 64
MAX_QUANTITY_LENGTH: Final = 64
#: Bytes of the whole document as JSON (YAML aliases expanded): kube-apiserver's request body limit (3 MiB).
MAX_OBJECT_BYTES: Final = 3 * 1024 * 1024
#: Nesting depth of the whole document (a real pod template needs about 15).
MAX_DEPTH: Final = 64


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
    """Refuse a document that is too deep or too big, without expanding it: YAML aliases can share one node many
    times, so the walk stops as soon as a limit is passed (an alias bomb costs little). Every value costs at least
    one byte of the budget, so the walk is bounded by it."""
    budget = MAX_OBJECT_BYTES
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return [f"(document): nested more than {MAX_DEPTH} levels deep (a TFJob needs about 15)"]
        if isinstance(node, Mapping):
            children = list(node.items())
            if depth == 0:
                children = [(k, v) for k, v in children if k != "status"]  # the operator's output, not the user's
            budget -= 2
            for key, value in children:
                stack.append((value, depth + 1))
                budget -= len(str(key)) + 4
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
            budget -= len(node) + 2
        else:
            budget -= len(node) + 2 if isinstance(node, str) else 8
        if budget < 0:
            return [f"(document): larger than {MAX_OBJECT_BYTES // 2**20} MiB as JSON (YAML aliases expanded), the "
                    "API server's request limit; move data into a ConfigMap or the image"]
    return []
