"""Generated TFJob documents for the fuzz tier: a valid job, then mutated the ways people and tools get it wrong.

`documents()` draws YAML bytes: mostly a valid-ish TFJob with a few mutations (wrong types, nulls, huge numbers,
deep nesting, unknown fields, removed fields), sometimes a whole-document mishap (a list or scalar as the document,
the same job twice, YAML aliases, bytes that are not UTF-8, a truncated file).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import strategies as st

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True)

#: Values that are wrong somewhere (or everywhere): each exercised where a field expects something else.
NASTY: list[Any] = [
    None, "", " ", "x" * 300, "Bad NS!", "UPPER", "-leading", "ünïcödé", "\t", "a:b", "${VAR}", "0x1F",
    0, -1, 1, 2, 65536, 2**31, 2**63, 10**30, -(2**63) - 1, 1.5, float("inf"), True, False,
    [], {}, [None], [1, 2], ["x"], {"a": 1}, {"name": {"a": 1}}, {"": ""},
]


@st.composite
def valid_job(draw: st.DrawFn) -> dict[str, Any]:
    """A TFJob `tfjob render` accepts: a worker group, maybe a chief and PS, small real pod templates."""
    def template() -> dict[str, Any]:
        container: dict[str, Any] = {"name": "tensorflow", "image": draw(st.sampled_from(["tf:1", "python:3.11"])),
                                     "command": ["python", "-c", "pass"]}
        if draw(st.booleans()):
            container["env"] = [{"name": "A", "value": draw(st.sampled_from(["1", "x"]))}]
        if draw(st.booleans()):
            container["ports"] = [{"name": "tfjob-port", "containerPort": draw(st.integers(1024, 65535))}]
        if draw(st.booleans()):
            container["resources"] = {"limits": {"cpu": draw(st.sampled_from([1, "500m", "2"]))}}
        out: dict[str, Any] = {"spec": {"containers": [container]}}
        if draw(st.booleans()):
            out["metadata"] = {"labels": {"team": draw(NAMES)}}
        return out

    specs: dict[str, Any] = {"Worker": {"replicas": draw(st.integers(1, 3)), "template": template()}}
    if draw(st.booleans()):
        specs["Chief"] = {"replicas": 1, "template": template()}
    if draw(st.booleans()):
        specs["PS"] = {"replicas": draw(st.integers(1, 2)), "template": template()}
    job: dict[str, Any] = {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": draw(NAMES)},
                           "spec": {"tfReplicaSpecs": specs}}
    if draw(st.booleans()):
        job["spec"]["runPolicy"] = {"backoffLimit": draw(st.integers(0, 5)),
                                    "cleanPodPolicy": draw(st.sampled_from(["All", "Running", "None"]))}
    return job


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*at, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _delete(doc: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return doc


def _deep(depth: int) -> Any:
    node: Any = "x"
    for _ in range(depth):
        node = [node]
    return node


@st.composite
def mutated_job(draw: st.DrawFn) -> Any:
    """A valid job with 0-3 mutations at random places."""
    doc: Any = draw(valid_job())
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["nasty", "nasty", "nasty", "delete", "unknown", "deep", "text"]))
        if kind == "nasty":
            doc = _set(doc, path, copy.deepcopy(draw(st.sampled_from(NASTY))))
        elif kind == "delete":
            doc = _delete(doc, path)
        elif kind == "unknown" and isinstance(_get(doc, path), dict):
            _get(doc, path)[draw(st.sampled_from(["typo", "imagee", "replica", "metdata"]))] = 1
        elif kind == "deep":
            doc = _set(doc, path, _deep(draw(st.sampled_from([10, 40, 80]))))
        elif kind == "text":
            doc = _set(doc, path, draw(st.text(max_size=20)))
    return doc


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _dump(docs: list[Any]) -> bytes:
    # allow_unicode keeps surrogates out of the way: YAML cannot encode lone surrogates, so they are escaped.
    text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=False, width=1 << 20)
    return text.encode()


ALIAS_BOMB = (b"apiVersion: tfjob.dev/v1\nkind: TFJob\nmetadata:\n  name: bomb\n"
              b"  labels: {a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]}\n"
              + b"".join(f"  x{i}: &x{i} [{', '.join(['*a' if i == 0 else f'*x{i - 1}'] * 9)}]\n".encode()
                         for i in range(8))
              + b"spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 1\n      template: *x7\n")


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """The bytes of one manifest file."""
    kind = draw(st.sampled_from(["job"] * 12 + ["two", "same-twice", "list", "scalar", "aliases", "bomb",
                                                 "not-utf8", "truncated", "empty", "brackets"]))
    job = draw(mutated_job())
    if kind == "job":
        return _dump([job])
    if kind == "two":
        return _dump([job, draw(mutated_job())])
    if kind == "same-twice":
        return _dump([job, copy.deepcopy(job)])
    if kind == "list":
        return _dump([[job]])
    if kind == "scalar":
        return _dump([draw(st.sampled_from(NASTY[1:]))])
    if kind == "aliases":  # one object used twice: PyYAML writes an anchor and an alias
        shared = {"name": "tensorflow", "image": "tf:1"}
        job = job if isinstance(job, dict) else draw(valid_job())
        return _dump([{**job, "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {
            "containers": [shared]}}}, "Chief": {"replicas": 1, "template": {"spec": {"containers": [shared]}}}}}}])
    if kind == "bomb":
        return ALIAS_BOMB
    if kind == "not-utf8":
        raw = _dump([job])
        cut = draw(st.integers(0, len(raw)))
        return raw[:cut] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80abc"])) + raw[cut:]
    if kind == "truncated":
        raw = _dump([job])
        return raw[: draw(st.integers(0, len(raw)))]
    if kind == "brackets":  # deeper than PyYAML's recursive reader goes
        depth = draw(st.sampled_from([100, 1000, 5000]))
        return b"spec: " + b"[" * depth + b"]" * depth + b"\n"
    return b""
