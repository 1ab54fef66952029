"""`tfjob migrate`: Kubeflow `kubeflow.org/v1` TFJob manifests → `tfjob.dev/v1`, saying what changed and what
means something else here. Pure: text in, text and notes out (the CLI reads files and prints).

The manifest is kept as written: a document that needs no change comes out byte for byte (a ConfigMap with
its `train.py: |` block), and a TFJob that does is edited in place by a round-trip YAML library (ruamel.yaml),
so its comments, key order, quotes, block scalars and indentation stay. Only what must change does:
apiVersion, replica-type keys (`Master` → `Chief`, any case → canonical), Kubeflow's managedBy value, and what
the API server wrote (status, uid, resourceVersion ...); each is one `changed` note. docs/kubeflow.md explains
each difference listed here.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from tfjob_operator.api import REPLICA_TYPE_ALIASES, ReplicaType, RestartPolicy, apigroups, constants, kubeyaml
from tfjob_operator.api.validation import InvalidSpec, parse_tfjob

#: Metadata the API server fills in: meaningless in a manifest to apply elsewhere.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                   "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass
class Migrated:
    """One document after migration: the new manifest, what was changed, and what means something else here."""

    doc: MutableMapping[str, Any]
    changes: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)


def migrate_document(doc: Mapping[str, Any], out: MutableMapping[str, Any] | None = None) -> Migrated:
    """A TFJob manifest (either API) as `tfjob.dev/v1`; other kinds pass through. Raises InvalidSpec.

    `doc` is read as kubectl reads it; the changes are made to `out` (the same document as a round-trip
    library read it, to keep its comments), or to a copy of `doc`."""
    if doc.get("kind") != constants.KIND:
        return Migrated(copy.deepcopy(dict(doc)), differences=[f"not a TFJob (kind {doc.get('kind')!r}): unchanged"])
    parse_tfjob(doc)  # refuses what the operator would refuse, naming the field
    out = copy.deepcopy(dict(doc)) if out is None else out
    result = Migrated(out)
    if out.get("apiVersion") != constants.API_VERSION:
        result.changes.append(f"apiVersion: {out.get('apiVersion')} → {constants.API_VERSION}")
        out["apiVersion"] = constants.API_VERSION
    _metadata(out, result)
    if "status" in out:
        _delete(out, "status")
        result.changes.append("status: removed (the operator writes it)")
    spec = out["spec"]
    _replica_keys(spec["tfReplicaSpecs"], result)
    _run_policy(spec, result)
    _differences(doc["spec"], result)
    return result


def _delete(mapping: MutableMapping[str, Any], key: str) -> None:
    """Remove a key and its value; the full-line comments that follow it (which ruamel keeps with the last line
    before them) move to the entry before it, so only the comments on the removed lines go with them."""
    keys = list(mapping)
    following = _take_following_comments(mapping, key)
    del mapping[key]
    if not following:
        return
    at = keys.index(key)
    if at > 0:
        _add_following_comments(mapping, keys[at - 1], following)
    elif len(keys) > 1 and hasattr(mapping, "yaml_set_comment_before_after_key"):
        lines = [line.strip().removeprefix("#").removeprefix(" ") for line in following.splitlines() if line.strip()]
        indent = next((len(line) - len(line.lstrip()) for line in following.splitlines() if line.strip()), 0)
        mapping.yaml_set_comment_before_after_key(keys[1], before="\n".join(lines), indent=indent)


def _last_line(mapping: Any, key: Any) -> tuple[Any, Any]:
    """The container and key (or index) of the last line of `mapping[key]`'s entry, where ruamel keeps the
    comments that follow the entry."""
    node, at = mapping, key
    while True:
        value = node[at]
        if isinstance(value, Mapping) and value and hasattr(value, "ca"):
            node, at = value, list(value)[-1]
        elif isinstance(value, list) and value and hasattr(value, "ca"):
            node, at = value, len(value) - 1
        else:
            return node, at


def _comment_slot(node: Any, at: Any) -> tuple[list[Any], int] | None:
    comments = getattr(node, "ca", None)
    if comments is None:
        return None
    slot = comments.items.get(at)
    return (slot, 0 if isinstance(node, list) else 2) if slot else None


def _take_following_comments(mapping: Any, key: str) -> str:
    found = _comment_slot(*_last_line(mapping, key))
    if found is None or found[0][found[1]] is None:
        return ""
    text = str(found[0][found[1]].value)
    return text.split("\n", 1)[1] if "\n" in text else ""  # the first line is the removed line's own comment


def _add_following_comments(mapping: Any, key: str, text: str) -> None:
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    node, at = _last_line(mapping, key)
    found = _comment_slot(node, at)
    if found is not None and found[0][found[1]] is not None:
        token = found[0][found[1]]
        token.value = str(token.value) + text
        return
    slot = node.ca.items.setdefault(at, [None, None] if isinstance(node, list) else [None, None, None, None])
    slot[0 if isinstance(node, list) else 2] = CommentToken("\n" + text, CommentMark(0), None)


def _rename(mapping: MutableMapping[str, Any], old: str, new: str) -> None:
    """Rename a key where it stands, with its comments (a ruamel CommentedMap), or in a plain dict."""
    keys = list(mapping)
    if hasattr(mapping, "insert"):
        value = mapping.pop(old)
        mapping.insert(keys.index(old), new, value)
        comments = getattr(mapping, "ca", None)
        if comments is not None and old in comments.items:
            comments.items[new] = comments.items.pop(old)
        return
    items = [(new if k == old else k, mapping[k]) for k in keys]
    mapping.clear()
    mapping.update(items)


def _metadata(out: MutableMapping[str, Any], result: Migrated) -> None:
    meta = out.get("metadata") or {}
    dropped = [k for k in SERVER_METADATA if k in meta]
    for key in dropped:
        _delete(meta, key)
    if dropped:
        result.changes.append(f"metadata: removed {', '.join(dropped)} (written by the API server)")


def _replica_keys(specs: MutableMapping[str, Any], result: Migrated) -> None:
    for key in list(specs):
        canonical = REPLICA_TYPE_ALIASES[str(key).lower()].value
        if key != canonical:
            why = " (Kubeflow's Master is the chief)" if str(key).lower() == "master" else ""
            result.changes.append(f"spec.tfReplicaSpecs.{key} → spec.tfReplicaSpecs.{canonical}{why}")
            _rename(specs, key, canonical)


def _run_policy(spec: dict[str, Any], result: Migrated) -> None:
    run_policy = spec.get("runPolicy") or {}
    managed_by = run_policy.get("managedBy")
    if managed_by == apigroups.MANAGED_BY_KUBEFLOW:
        _delete(run_policy, "managedBy")
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


@dataclass
class Piece:
    """One document of a file as written: what precedes its content (comments, `---`) and the content."""

    prefix: str
    body: str


def split_documents(text: str) -> list[Piece]:
    """The file's documents as text, in order; joined, they are the file again, byte for byte."""
    pieces: list[Piece] = []
    start = body = 0
    for event in yaml.parse(text):
        if isinstance(event, yaml.DocumentStartEvent):
            body = event.end_mark.index if event.end_mark else body
        elif isinstance(event, yaml.DocumentEndEvent):
            end = event.end_mark.index if event.end_mark else len(text)
            pieces.append(Piece(text[start:body], text[body:end]))
            start = end
    if pieces:
        pieces[-1].body += text[start:]
    return pieces


def _indents(body: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indentation as this document writes its first block mapping and sequence
    nested in a mapping, for ruamel to write the same; ruamel's defaults where it has none."""
    found: dict[str, int] = {}
    stack = [yaml.compose(body)]
    while stack and len(found) < 3:
        node = stack.pop(0)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                column = key.start_mark.column
                if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
                    found.setdefault("mapping", value.value[0][0].start_mark.column - column)
                elif isinstance(value, yaml.SequenceNode) and not value.flow_style and value.value:
                    found.setdefault("offset", value.start_mark.column - column)
                    found.setdefault("sequence", value.value[0].start_mark.column - column)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return found.get("mapping", 2), found.get("sequence", 2), found.get("offset", 0)


def round_trip(body: str, edit: Any) -> str:
    """`body` (one document) read by ruamel.yaml, changed by `edit(document)`, written back with its comments,
    quotes, block scalars and indentation; the leading and trailing blank text kept as it was."""
    from ruamel.yaml import YAML

    lead = body[:len(body) - len(body.lstrip())]
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.allow_duplicate_keys = True
    rt.width = 4096  # never re-wrap a long line
    mapping, sequence, offset = _indents(body)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    document = rt.load(body)
    edit(document)
    out = io.StringIO()
    rt.dump(document, out)
    return lead + out.getvalue()


def migrate_file(text: str, docs: list[Any], names: list[str]) -> tuple[str, list[str], list[str]]:
    """(the file's text migrated, the notes, the problems): each TFJob that needs a change edited in place, every
    other document as it was written. `docs` are the file's documents as kubectl reads them, named by `names`."""
    from ruamel.yaml.error import YAMLError as RoundTripError

    out: list[str] = []
    notes: list[str] = []
    problems: list[str] = []
    for doc, piece, name in zip(docs, split_documents(text), names, strict=True):
        if doc is not None and not isinstance(doc, dict):
            problems.append(f"{name}: a document must be a YAML mapping")
            continue
        body = piece.body
        try:
            migrated = migrate_document(doc) if doc is not None else Migrated({})
            if migrated.changes:
                try:
                    body = round_trip(piece.body, lambda d, doc=doc: migrate_document(doc, d))
                except RoundTripError as exc:  # written anew: the changes still hold, the comments do not
                    body = kubeyaml.dump_all([migrated.doc])
                    migrated.changes.append(f"comments and layout not kept ({str(exc).splitlines()[0]})")
        except InvalidSpec as exc:
            problems.extend(f"{name}: {m}" for m in exc.messages)
            continue
        out.append(piece.prefix + body)
        notes.extend(f"{name}: changed: {c}" for c in migrated.changes)
        notes.extend(f"{name}: differs: {d}" for d in migrated.differences)
    return "".join(out), notes, problems
