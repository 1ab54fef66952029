"""The store's list indexes: a selected list returns what a full scan would, and only that, as objects change."""

from typing import Any

import pytest

from kubelocal.apiserver.selectors import make_predicate
from kubelocal.apiserver.store import Store

PODS = ("", "pods")
FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


def pod(name: str, ns: str = "default", node: str | None = None, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def listed(store: Store, ns: str | None = None, labels: str | None = None, fields: str | None = None) -> list[str]:
    """Names the store walks for this list (before the server re-applies the selector)."""
    selector = make_predicate(labels, fields, FIELDS)
    return [s.obj["metadata"]["name"] for s in store.items(PODS, ns, selector)]


def scanned(store: Store, ns: str | None = None, labels: str | None = None, fields: str | None = None) -> list[str]:
    """Names a full scan would select."""
    selector = make_predicate(labels, fields, FIELDS)
    return [s.obj["metadata"]["name"] for s in store.items(PODS, ns) if selector(s.obj)]


@pytest.fixture
def store() -> Store:
    s = Store()
    for i in range(20):
        s.write(PODS, pod(f"p{i:02d}", ns="a" if i % 2 else "b", node=f"n{i % 3}", job=f"j{i % 4}"))
    return s


@pytest.mark.parametrize(
    ("ns", "labels", "fields"),
    [
        ("a", None, None),
        (None, "job=j1", None),
        (None, "job in (j1,j2)", None),
        ("b", "job=j2", None),
        (None, None, "spec.nodeName=n1"),
        ("a", "job=j3", "spec.nodeName=n0"),
        (None, "job=none", None),
        (None, None, "spec.nodeName="),
    ],
)
def test_an_indexed_list_walks_exactly_the_matching_objects(store: Store, ns: str | None, labels: str | None,
                                                            fields: str | None) -> None:
    assert listed(store, ns, labels, fields) == scanned(store, ns, labels, fields)


def test_indexes_follow_relabels_rebinds_and_deletes(store: Store) -> None:
    assert "p01" in listed(store, fields="spec.nodeName=n1")  # the field index exists from here on
    moved = pod("p01", ns="a", node="n2", job="j9")
    store.write(PODS, moved)
    store.remove(PODS, "a", "p05")
    store.write(PODS, pod("p99", ns="a", node="n1", job="j1"))
    for labels, fields in (("job=j1", None), ("job=j9", None), (None, "spec.nodeName=n1"),
                           (None, "spec.nodeName=n2")):
        assert listed(store, None, labels, fields) == scanned(store, None, labels, fields)
    assert listed(store, labels="job=j9") == ["p01"]
    assert "p05" not in listed(store, "a")


def test_a_selector_the_indexes_cannot_answer_walks_everything_and_the_server_filters(store: Store) -> None:
    assert len(listed(store, labels="job!=j1")) == 20
    assert len(scanned(store, labels="job!=j1")) == 15
