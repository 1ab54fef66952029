"""`tfjob migrate`: Kubeflow `kubeflow.org/v1` TFJob manifests → `tfjob.dev/v1`, saying what changed and what
means something else here. Pure: documents in, documents and notes out (the CLI reads files and prints).

The manifest is kept as written (key order, the user's own fields); only what must change does: apiVersion,
replica-type keys (`Master` → `Chief`, any case → canonical), Kubeflow's managedBy value, and what the API
server wrote (status, uid, resourceVersion ...). docs/kubeflow.md explains each difference listed here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator import apigroups, constants
from tfjob_operator.api import REPLICA_TYPE_ALIASES, ReplicaType, RestartPolicy
from tfjob_operator.validation import parse_tfjob

#: Metadata the API server fills in: meaningless in a manifest to apply elsewhere.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                   "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass
class Migrated:
    """One document after migration: the new manifest, what was changed, and what means something else here."""

    doc: dict[str, Any]
    changes: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)


def migrate_document(doc: Mapping[str, Any]) -> Migrated:
    """A TFJob manifest (either API) as `tfjob.dev/v1`; other kinds pass through. Raises InvalidSpec."""
    if doc.get("kind") != constants.KIND:
        return Migrated(copy.deepcopy(dict(doc)), differences=[f"not a TFJob (kind {doc.get('kind')!r}): unchanged"])
    parse_tfjob(doc)  # refuses what the operator would refuse, naming the field
    out = copy.deepcopy(dict(doc))
    result = Migrated(out)
    if out.get("apiVersion") != constants.API_VERSION:
        result.changes.append(f"apiVersion: {out.get('apiVersion')} → {constants.API_VERSION}")
        out["apiVersion"] = constants.API_VERSION
    _metadata(out, result)
    if "status" in out:
        del out["status"]
        result.changes.append("status: removed (the operator writes it)")
    spec = out["spec"]
    spec["tfReplicaSpecs"] = _replica_keys(spec["tfReplicaSpecs"], result)
    _run_policy(spec, result)
    _differences(spec, result)
    return result


def _metadata(out: dict[str, Any], result: Migrated) -> None:
    meta = out.get("metadata") or {}
    dropped = [k for k in SERVER_METADATA if k in meta]
    for key in dropped:
        del meta[key]
    if dropped:
        result.changes.append(f"metadata: removed {', '.join(dropped)} (written by the API server)")


def _replica_keys(specs: Mapping[str, Any], result: Migrated) -> dict[str, Any]:
    renamed: dict[str, Any] = {}
    for key, value in specs.items():
        canonical = REPLICA_TYPE_ALIASES[str(key).lower()].value
        if key != canonical:
            why = " (Kubeflow's Master is the chief)" if str(key).lower() == "master" else ""
            result.changes.append(f"spec.tfReplicaSpecs.{key} → spec.tfReplicaSpecs.{canonical}{why}")
        renamed[canonical] = value
    return renamed


def _run_policy(spec: dict[str, Any], result: Migrated) -> None:
    run_policy = spec.get("runPolicy") or {}
    managed_by = run_policy.get("managedBy")
    if managed_by == apigroups.MANAGED_BY_KUBEFLOW:
        del run_policy["managedBy"]
        result.changes.append(f"spec.runPolicy.managedBy: {managed_by} removed (empty means this operator)")
    elif managed_by == apigroups.MANAGED_BY_MULTIKUEUE:
        result.differences.append(
            f"spec.runPolicy.managedBy: {managed_by} kept: this operator leaves the job to MultiKueue, which "
            "dispatches kubeflow.org/v1 TFJobs; keep the job on kubeflow.org/v1 if MultiKueue must run it")


def _differences(spec: Mapping[str, Any], result: Migrated) -> None:
    run_policy = spec.get("runPolicy") or {}
    note = result.differences.append
    if "cleanPodPolicy" not in run_policy:
        note("spec.runPolicy.cleanPodPolicy: unset means Running (pods still running when the job ends are "
             "deleted, e.g. PS), as Kubeflow's TFJob defaulting does; its API reference says None")
    if run_policy.get("backoffLimit") is not None:
        note(f"spec.runPolicy.backoffLimit {run_policy['backoffLimit']}: counts failure-caused gang restarts plus "
             "in-place container restarts, and fails the job when they exceed it (Kubeflow: when they reach it); "
             "evictions, preemptions and node loss do not count")
    gang_policies = {str(REPLICA_TYPE_ALIASES[str(k).lower()].value): (v or {}).get("restartPolicy")
                     for k, v in spec["tfReplicaSpecs"].items()}
    restarting = sorted(t for t, p in gang_policies.items() if t in (ReplicaType.CHIEF, ReplicaType.WORKER)
                        and p in (RestartPolicy.EXIT_CODE, RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS))
    if restarting:
        note(f"spec.tfReplicaSpecs {'/'.join(restarting)} restartPolicy: a Chief/Worker pod that fails as a whole "
             "(retryable exit code, eviction) restarts the whole gang, which resumes from its checkpoint; Kubeflow "
             "recreates only that pod, whose MultiWorkerMirroredStrategy peers then hang")
    if spec.get("successPolicy") == "AllWorkers" and ReplicaType.CHIEF.value in gang_policies:
        note("spec.successPolicy AllWorkers with a Chief: the chief decides success, as in Kubeflow")
    if run_policy.get("schedulingPolicy"):
        note("spec.runPolicy.schedulingPolicy: honoured by the operator's gang backend (builtin by default; "
             "Volcano, scheduler-plugins or Kueue by setting), not only under Volcano")
    note("pods are labelled tfjob.dev/job-name, tfjob.dev/replica-type, tfjob.dev/replica-index, not "
         "training.kubeflow.org/*: update label selectors (NetworkPolicy, PodMonitor, kubectl -l)")
    note("one headless Service named after the job instead of one per pod: peers are "
         "<job>-<type>-<index>.<job>.<namespace>.svc, as in TF_CONFIG")
