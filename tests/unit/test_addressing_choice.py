"""The operator's addressing follows the plane it runs against (`tfjob_operator.serving.addressing`): what a plane
publishes in kube-public/pod-addressing, or dns on a cluster; a TFJOB_ADDRESSING that contradicts it is refused,
saying what to change."""

from __future__ import annotations

import pytest

from kubelocal import published
from tfjob_operator.controller.settings import Addressing
from tfjob_operator.serving import addressing
from tfjob_operator.serving.addressing import AddressingMismatch, Published, decide, parse_published

DNS, LOOPBACK = Addressing.DNS, Addressing.LOOPBACK
LOOPBACK_PLANE = Published(LOOPBACK, "pods share this machine's network (pod network off)")
DNS_PLANE = Published(DNS, "pod network")


@pytest.mark.parametrize(("given", "plane", "chosen"), [
    pytest.param(None, None, DNS, id="a cluster (nothing published): dns"),
    pytest.param(DNS, None, DNS, id="dns given on a cluster"),
    pytest.param(None, LOOPBACK_PLANE, LOOPBACK, id="unset on a plane without a pod network: loopback"),
    pytest.param(None, DNS_PLANE, DNS, id="unset on a plane with a pod network: dns"),
    pytest.param(LOOPBACK, LOOPBACK_PLANE, LOOPBACK, id="given and agreeing"),
])
def test_the_operator_follows_the_plane(given: Addressing | None, plane: Published | None, chosen: Addressing) -> None:
    assert decide(given, plane) == chosen


@pytest.mark.parametrize(("given", "plane", "says"), [
    pytest.param(DNS, LOOPBACK_PLANE, "TFJOB_ADDRESSING=dns, but the plane at http://p:1 says its pods use loopback "
                 "addressing (kube-public/pod-addressing: pods share this machine's network", id="dns on loopback"),
    pytest.param(LOOPBACK, DNS_PLANE, "TFJOB_ADDRESSING=loopback, but the plane at http://p:1 says its pods use dns",
                 id="loopback on a pod network"),
    pytest.param(LOOPBACK, None, "TFJOB_ADDRESSING=loopback, but http://p:1 publishes no kube-public/pod-addressing, "
                 "so it is a cluster", id="loopback on a cluster"),
])
def test_a_setting_that_contradicts_the_plane_is_refused_saying_what_to_change(
        given: Addressing, plane: Published | None, says: str) -> None:
    with pytest.raises(AddressingMismatch) as refused:
        decide(given, plane, "http://p:1")
    assert says in str(refused.value)
    assert "unset TFJOB_ADDRESSING" in str(refused.value)


def test_what_a_plane_publishes_is_what_the_operator_reads() -> None:
    """The one contract between kubelocal.published (the writer) and tfjob_operator.serving.addressing (the reader)."""
    assert f"/api/v1/namespaces/{published.NAMESPACE}/configmaps/{published.NAME}" == addressing.PUBLISHED_PATH
    assert parse_published(published.addressing_data(False, "pod network off")).addressing == LOOPBACK
    assert parse_published(published.addressing_data(True, "")).addressing == DNS


def test_a_published_value_the_operator_does_not_know_is_refused_naming_the_key() -> None:
    with pytest.raises(AddressingMismatch, match=r"kube-public/pod-addressing: data.addressing 'ipv6' is not one of "
                       r"dns, loopback"):
        parse_published({"addressing": "ipv6"})
