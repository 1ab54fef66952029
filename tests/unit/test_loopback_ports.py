"""Loopback ports for `tfjob local` (tfjob_operator.controller.ports): recorded ports kept, new ones never promised
twice."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tfjob_operator.api import constants
from tfjob_operator.controller import ports as ports_module
from tfjob_operator.controller.ports import LoopbackPorts, parse_ports


def body(ports: dict[str, int] | None = None) -> dict[str, Any]:
    annotations = {constants.ANNOTATION_LOOPBACK_PORTS: json.dumps(ports)} if ports else {}
    return {"metadata": {"annotations": annotations}}


def test_recorded_ports_are_kept_and_only_missing_pods_get_new_ones() -> None:
    allocator = LoopbackPorts(lambda: [])
    metrics = constants.LOOPBACK_METRICS_SUFFIX
    ports = allocator.for_job(body({"j-worker-0": 41000, f"j-worker-0{metrics}": 41001}), ["j-worker-0", "j-worker-1"])
    assert ports["j-worker-0"] == 41000 and ports[f"j-worker-0{metrics}"] == 41001
    assert set(ports) == {"j-worker-0", f"j-worker-0{metrics}", "j-worker-1", f"j-worker-1{metrics}"}
    assert len(set(ports.values())) == 4


def test_new_ports_avoid_those_promised_to_other_jobs_and_pods_and_to_each_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[int] = []
    avoided: list[set[int]] = []
    free = iter(range(50000, 50010))

    def fake_free_port(avoid: set[int]) -> int:
        avoided.append(set(avoid))
        return next(free)

    def stores() -> list[list[dict[str, Any]]]:
        scans.append(1)
        return [[body({"other-worker-0": 41000})], [body({"pod-of-another-job": 41001})]]

    monkeypatch.setattr(ports_module, "free_port", fake_free_port)
    allocator = LoopbackPorts(stores)
    allocator.for_job(body(), ["a-worker-0"])
    allocator.for_job(body(), ["b-worker-0"])
    assert avoided[0] == {41000, 41001}
    assert avoided[-1] == {41000, 41001, 50000, 50001, 50002}  # and every port handed out since
    assert len(scans) == 1  # the stores are read once; later jobs cost no scan


def test_an_unreadable_ports_annotation_reads_as_none() -> None:
    assert parse_ports("not json") == {} and parse_ports("[1, 2]") == {} and parse_ports(None) == {}


def test_with_nearly_every_port_promised_the_one_left_is_found():
    """Thousands of pods each promised a port (2,000 jobs x 4 pods x 2 ports): the kernel's picks run in sequence
    through promised ports, so the search goes on through the whole range instead of giving up."""
    low, high = ports_module.PORT_RANGE
    left = next(port for port in range(high, low, -1) if _bindable(port))
    avoid = set(range(1024, 65536)) - {left}
    assert ports_module.free_port(avoid) == left


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
