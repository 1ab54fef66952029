"""HA: two operator instances on one control plane; only the Lease holder ever creates pods."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kopfrun import install_crd
from operator_harness import Operator, wait_for
from ports import free_port

from kubelocal.apiserver.thread import ApiServerThread, write_kubeconfig
from tfjob_operator.controller.settings import OperatorSettings
from tfjob_operator.serving import leader, runner

NS = "default"


def config(identity: str, **kw: Any) -> leader.LeaderElectionConfig:
    return leader.LeaderElectionConfig(namespace=NS, lease_name="tfjob-operator", identity=identity,
                                       lease_duration=1.0, renew_deadline=0.8, retry_period=0.1, **kw)


def acting(url: str, identity: str, created: asyncio.Event) -> Any:
    """An 'operator' that creates a pod every 50 ms for as long as it runs (user agent = its identity)."""

    async def main() -> None:
        async with aiohttp.ClientSession(headers={"User-Agent": identity}) as session:
            for i in range(10_000):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{identity}-{i}"},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
                async with session.post(f"{url}/api/v1/namespaces/{NS}/pods", json=pod) as resp:
                    assert resp.status == 201, await resp.text()
                created.set()
                await asyncio.sleep(0.05)

    return main


@pytest.mark.parametrize(
    ("lease", "identity", "seen_for", "expected"),
    [
        (None, "a", 0, "create"),
        ({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}, "a", 0, "renew"),
        ({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}}, "a", 14.9, "wait"),
        ({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}}, "a", 15, "take"),
        ({"spec": {"holderIdentity": None, "leaseDurationSeconds": 15}}, "a", 0, "take"),
    ],
)
def test_lease_decision(lease: Any, identity: str, seen_for: float, expected: str) -> None:
    assert leader.decide(lease, identity, seen_for=seen_for, duration=15) == expected


@pytest.mark.timeout(60)
async def test_two_instances_never_both_create_pods_and_the_standby_takes_over() -> None:
    with ApiServerThread() as api:
        a_created, b_created = asyncio.Event(), asyncio.Event()
        api_a, api_b = leader.LeaseApi(api.url), leader.LeaseApi(api.url)
        a = asyncio.create_task(leader.run_as_leader(api_a, config("op-a"), acting(api.url, "op-a", a_created)))
        await asyncio.wait_for(a_created.wait(), 10)
        b = asyncio.create_task(leader.run_as_leader(api_b, config("op-b"), acting(api.url, "op-b", b_created)))
        await asyncio.sleep(1.5)  # well past a lease duration: b must stay a standby while a renews
        assert not b_created.is_set()
        api_a.base_url = "http://127.0.0.1:9"  # a crash or partition: a cannot release the lease
        a.cancel()  # so b takes over only after the lease expires
        with contextlib.suppress(asyncio.CancelledError):
            await a
        stopped = asyncio.get_running_loop().time()
        await asyncio.wait_for(b_created.wait(), 10)
        takeover = asyncio.get_running_loop().time() - stopped
        b.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await b
        await api_a.close()
        await api_b.close()

        creations = [(r.user_agent, i) for i, r in enumerate(api.server.requests)
                     if r.verb == "create" and r.resource == "pods"]
        by_a = [i for ua, i in creations if ua == "op-a"]
        by_b = [i for ua, i in creations if ua == "op-b"]
        assert by_a and by_b
        assert max(by_a) < min(by_b)  # never interleaved: one acting instance at a time
        assert takeover >= 0.5  # the standby respected the lease
        lease = [r for r in api.server.requests if r.resource == "leases"]
        assert {r.user_agent for r in lease} == {"tfjob-operator/leader-election"}


@pytest.mark.timeout(60)
async def test_clean_shutdown_releases_the_lease_and_the_leader_labels_its_pod() -> None:
    with ApiServerThread() as api:
        async with aiohttp.ClientSession() as session:
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-0"},
                   "spec": {"containers": [{"name": "c", "image": "op"}]}}
            async with session.post(f"{api.url}/api/v1/namespaces/{NS}/pods", json=pod) as resp:
                assert resp.status == 201
            lease_api = leader.LeaseApi(api.url)

            async def main() -> None:
                async with session.get(f"{api.url}/api/v1/namespaces/{NS}/pods/operator-0") as resp:
                    labels = (await resp.json())["metadata"]["labels"]
                assert labels[leader.LEADER_LABEL] == "true"

            await leader.run_as_leader(lease_api, config("op-a", pod_name="operator-0"), main)
            lease = await lease_api.get(NS, "tfjob-operator")
            assert lease is not None and lease["spec"].get("holderIdentity") is None
            other = leader.LeaderElector(lease_api, config("op-b"))
            assert await other.try_acquire_or_renew()  # taken at once, no waiting for expiry
            await lease_api.close()


async def _healthz(port: int) -> dict[str, Any] | None:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as resp:
            return dict(await resp.json()) if resp.status == 200 else None
    except aiohttp.ClientError:
        return None


async def _until(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if value := await predicate():
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {predicate}")


def _elected_settings(port: int, metrics_port: int = 0) -> OperatorSettings:
    return OperatorSettings(leader_election=True, pod_namespace=NS, leader_election_lease_duration=1.5,
                            leader_election_retry_period=0.1, liveness_port=port, liveness_host="127.0.0.1",
                            metrics_port=metrics_port, metrics_host="127.0.0.1")


async def _metrics(port: int) -> str | None:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            return await resp.text() if resp.status == 200 else None
    except aiohttp.ClientError:
        return None


async def _held_by_another(url: str) -> leader.LeaderElector:
    other = leader.LeaderElector(leader.LeaseApi(url), leader.LeaderElectionConfig(
        namespace=NS, lease_name="tfjob-operator", identity="other", lease_duration=30))
    assert await other.try_acquire_or_renew()
    return other


@pytest.mark.timeout(60)
async def test_a_leader_whose_renewals_are_answered_late_but_within_the_deadline_keeps_leading() -> None:
    """A busy API server (the local plane at 10,000 jobs) answered Lease writes in 6 s: past a 5 s request
    timeout, whose retry went to the back of its queue, but within the 10 s renew deadline, as client-go counts."""
    with ApiServerThread() as api:
        api_a = leader.LeaseApi(api.url)
        a_config = leader.LeaderElectionConfig(namespace=NS, lease_name="tfjob-operator", identity="op-a",
                                               lease_duration=15, renew_deadline=10, retry_period=1)
        acted = asyncio.Event()

        async def main() -> None:
            acted.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(leader.run_as_leader(api_a, a_config, main))
        await asyncio.wait_for(acted.wait(), 10)
        api.server.faults.delay("PUT", r"/leases/tfjob-operator$", 6.0, count=2)

        async def renewed_three_times() -> bool:
            return sum(r.verb == "update" and r.resource == "leases" for r in api.server.requests) >= 3

        await _until(renewed_three_times, timeout=30)
        assert not task.done(), task  # still leading: two renewals 6 s late, a third on time
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        lease = await api_a.get(NS, "tfjob-operator")
        assert lease is not None and lease["spec"]["holderIdentity"] is None  # released on the way out
        await api_a.close()


@pytest.mark.timeout(60)
async def test_runner_standby_answers_healthz_then_leads_and_exits_when_it_cannot_renew() -> None:
    with ApiServerThread() as api:
        other = await _held_by_another(api.url)
        port, started = free_port(), asyncio.Event()

        async def main() -> None:
            started.set()
            await asyncio.Event().wait()

        lease_api, metrics_port = leader.LeaseApi(api.url), free_port()
        task = asyncio.create_task(runner.run_elected(_elected_settings(port, metrics_port), main, api=lease_api))
        assert (await _until(lambda: _healthz(port)))["state"] == "standby"  # the probe passes while it waits
        assert "process_" in (await _metrics(metrics_port) or "")  # and its scrape target is up
        assert not started.is_set()
        await other.release()
        await other.api.close()
        await asyncio.wait_for(started.wait(), 10)
        # The standby endpoints are closed: kopf's /healthz and the operator's /metrics take the ports over.
        assert await _healthz(port) is None and await _metrics(metrics_port) is None
        lease_api.base_url = "http://127.0.0.1:9"  # the API server is unreachable: renewals fail
        with pytest.raises(leader.LeadershipLost):
            await asyncio.wait_for(task, 10)


@pytest.mark.timeout(60)
async def test_runner_standby_stops_cleanly_on_request_without_ever_leading() -> None:
    with ApiServerThread() as api:
        other = await _held_by_another(api.url)
        port, stop = free_port(), threading.Event()

        async def main() -> None:
            raise AssertionError("a standby must not act")

        task = asyncio.create_task(runner.run_elected(_elected_settings(port), main, api=leader.LeaseApi(api.url),
                                                      stop_flag=stop))
        await _until(lambda: _healthz(port))
        stop.set()
        await asyncio.wait_for(task, 10)
        assert await _healthz(port) is None
        lease = await other.api.get(NS, "tfjob-operator")
        assert lease is not None and lease["spec"]["holderIdentity"] == "other"
        await other.api.close()


@pytest.mark.timeout(90)
def test_operator_process_that_cannot_renew_its_lease_exits_with_status_1(tmp_path: Path) -> None:
    with ApiServerThread() as api:
        asyncio.run(install_crd(api.url))
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        op = Operator(tmp_path / "kubeconfig", tmp_path / "operator.log", TFJOB_LEADER_ELECTION="true",
                      TFJOB_POD_NAME="op-0", TFJOB_POD_NAMESPACE=NS, TFJOB_LEADER_ELECTION_LEASE_DURATION="1.5",
                      TFJOB_LEADER_ELECTION_RETRY_PERIOD="0.1").start()
        try:
            wait_for(lambda: "tfjob operator started" in op.log(), 30, what="the operator leads")
            api.server.faults.fail("*", r"/leases/tfjob-operator$", 503, count=10**6)  # renewals fail from now on
            assert op.proc is not None and op.proc.wait(20) == 1, op.log()[-3000:]
            assert "could not renew Lease tfjob-operator" in op.log()
        finally:
            op.stop()


@pytest.mark.timeout(90)
def test_a_warm_operator_process_releases_its_lease_on_sigterm_so_a_standby_takes_over_at_once(tmp_path: Path) -> None:
    """The warm standby runs kopf outside the election and kopf takes SIGTERM itself: the Lease must still be
    released at once (kopf alone would cancel the election's renewals after 5 s, and the Lease would be left
    to expire: a restart's successor waited 15 s)."""
    with ApiServerThread() as api:
        asyncio.run(install_crd(api.url))
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        op = Operator(tmp_path / "kubeconfig", tmp_path / "operator.log", TFJOB_LEADER_ELECTION="true",
                      TFJOB_POD_NAMESPACE=NS).start()
        try:
            wait_for(lambda: "leading:" in op.log(), 30, what="the operator leads")
            op.stop()
            assert op.proc is not None and op.proc.returncode == 0, op.log()[-3000:]

            async def holder() -> str | None:
                lease_api = leader.LeaseApi(api.url)
                try:
                    lease = await lease_api.get(NS, "tfjob-operator")
                finally:
                    await lease_api.close()
                return (lease or {}).get("spec", {}).get("holderIdentity")

            assert asyncio.run(holder()) is None
        finally:
            op.stop()
