"""Peers a pod can never reach are said within seconds (`tfjob_worker.reach`), while the races of a gang start
(a peer still starting, its DNS record not yet published) are left to the start-up timeout.

The rules are pure and tabled here; `tests/e2e/test_addressing.py` runs them in real pods on the local planes."""

from __future__ import annotations

import json

import pytest

from tfjob_worker import exit_codes
from tfjob_worker.cluster import from_tf_config
from tfjob_worker.reach import DNS_GRACE, DNS_SILENT, DnsWatch, ReachCheck, cluster_anchor, loopback_verdict

TWO_LOOPBACK = from_tf_config(json.dumps({"cluster": {"worker": ["127.0.0.1:4100", "127.0.0.1:4101"]},
                                          "task": {"type": "worker", "index": 1}}))
TWO_DNS = from_tf_config(json.dumps({"cluster": {"worker": ["j-worker-0.j.default.svc:2222",
                                                            "j-worker-1.j.default.svc:2222"]},
                                     "task": {"type": "worker", "index": 1}}))


@pytest.mark.parametrize(("host", "anchor"), [
    ("j-worker-0.j.default.svc", "kubernetes.default.svc"),
    ("j-worker-0.j.default.svc.cluster.local", "kubernetes.default.svc.cluster.local"),
    ("j-worker-0.j.default.svc.k8s.example", "kubernetes.default.svc.k8s.example"),
    ("10.244.0.5", None),
    ("trainer-a.example.com", None),
    ("localhost", None),
])
def test_a_cluster_service_name_is_judged_by_the_name_every_cluster_dns_answers(host: str, anchor: str | None) -> None:
    assert cluster_anchor(host) == anchor


def test_loopback_peers_from_a_pod_with_a_network_namespace_of_its_own_are_never_reachable() -> None:
    verdict = loopback_verdict(TWO_LOOPBACK, own_netns=4026532001, launcher_netns=4026531992)
    assert verdict is not None and verdict.code == exit_codes.USER_ERROR
    assert "TF_CONFIG names worker-0 at 127.0.0.1:4100, a loopback address" in verdict.message
    assert "unset TFJOB_ADDRESSING" in verdict.message


@pytest.mark.parametrize(("own", "launcher"), [
    pytest.param(4026531992, 4026531992, id="the launcher's namespace: pods share the machine's loopback"),
    pytest.param(4026532001, None, id="no visible launcher (a container): nothing said"),
    pytest.param(None, None, id="no /proc"),
])
def test_loopback_peers_on_a_shared_loopback_are_left_alone(own: int | None, launcher: int | None) -> None:
    assert loopback_verdict(TWO_LOOPBACK, own, launcher) is None


def test_a_pod_with_no_cluster_dns_is_told_after_the_grace_naming_the_address() -> None:
    watch = DnsWatch("worker-0", "j-worker-0.j.default.svc:2222", "kubernetes.default.svc", started=100.0)
    assert watch.observe(100.0, "unknown", "Name or service not known") is None
    assert watch.observe(100.0 + DNS_GRACE - 0.1, "unknown") is None
    verdict = watch.observe(100.0 + DNS_GRACE, "unknown")
    assert verdict is not None and verdict.code == exit_codes.USER_ERROR
    assert verdict.message.startswith("cannot reach peers: TF_CONFIG names worker-0 at j-worker-0.j.default.svc:2222, "
                                      "a cluster DNS name, but this pod has no cluster DNS: kubernetes.default.svc")
    assert "(Name or service not known)" in verdict.message and "unset TFJOB_ADDRESSING" in verdict.message


def test_an_answer_in_between_starts_the_grace_over_and_silence_is_retryable() -> None:
    watch = DnsWatch("worker-0", "j-worker-0.j.default.svc:2222", "kubernetes.default.svc", started=0.0)
    watch.observe(0.0, "unknown")
    assert watch.observe(DNS_GRACE - 1, "silent", "Temporary failure in name resolution") is None
    assert watch.observe(DNS_GRACE + 1, "unknown") is None  # the run of "no such name" starts again here
    silent = watch.observe(DNS_SILENT, "silent")
    assert silent is not None and silent.code == exit_codes.STARTUP_TIMEOUT
    assert exit_codes.is_retryable(silent.code) and "no DNS server has answered" in silent.message


def test_a_cluster_dns_that_knows_the_api_service_is_never_judged_by_peers_not_yet_published() -> None:
    """The gang-start race: peers' names may not resolve for a while; the cluster's own name does, so the check
    ends at once and leaves the peers to the start-up timeout."""
    asked: list[str] = []

    def resolve(name: str) -> tuple[str, str]:
        asked.append(name)
        return ("ok", "") if name == "kubernetes.default.svc" else ("unknown", "Name or service not known")

    check = ReachCheck(TWO_DNS, resolve=resolve)
    check.run()
    assert check.verdict is None and asked == ["kubernetes.default.svc"]
