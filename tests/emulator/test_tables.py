"""The JSONPath subset of printer columns, as kube-apiserver evaluates it."""

from kubelocal.apiserver.tables import jsonpath

STATUS = {"status": {"conditions": [{"type": "Created"}, {"type": "Running"}, {"type": "Succeeded"}]}}


def test_a_slice_of_the_last_condition_gives_kubeflows_state_column() -> None:
    assert jsonpath(STATUS, ".status.conditions[-1:].type") == ["Succeeded"]
    assert jsonpath(STATUS, ".status.conditions[0:2].type") == ["Created", "Running"]
    assert jsonpath({"status": {}}, ".status.conditions[-1:].type") == []
