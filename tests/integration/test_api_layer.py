"""The one API access layer (`tfjob_operator.kube`) against a real HTTP API server (the local control plane's):
what is retried (429 after its Retry-After, 5xx when repeating is safe, connection errors), what is not (a POST
that could create twice), and the one error type every caller sees. The operator, the CLI job helpers and
leader election all go through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from operator_harness import free_port

from kubelocal.apiserver.thread import ApiServerThread
from tfjob_operator.dispatch import reconcile_started
from tfjob_operator.kube import MERGE_PATCH, Kube, KubeError, RetryPolicy, api_client, pods_path
from tfjob_operator.serving import leader

QUICK = RetryPolicy(attempts=3, backoff=0.01, max_backoff=1.5, timeout=5.0)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
def server() -> Iterator[ApiServerThread]:
    with ApiServerThread() as api:
        yield api


def served(api: ApiServerThread, method: str, path: str) -> list[int]:
    """Status codes the server answered to this method and path, in order."""
    return [r.status_code for r in api.server.requests if r.method == method and r.path.split("?")[0] == path]


def test_throttled_request_is_retried_after_the_servers_retry_after(server: ApiServerThread) -> None:
    kube = Kube(api_client(server.url), QUICK)
    server.server.faults.fail("GET", r"/pods$", 429)
    assert kube.request_sync("GET", pods_path("default")) is not None
    assert served(server, "GET", pods_path("default")) == [429, 200]


def test_server_error_on_a_read_is_retried(server: ApiServerThread) -> None:
    kube = Kube(api_client(server.url), QUICK)
    server.server.faults.fail("GET", r"/pods$", 503, count=2)
    assert kube.request_sync("GET", pods_path("default")) is not None
    assert served(server, "GET", pods_path("default")) == [503, 503, 200]


def test_a_create_that_could_happen_twice_is_not_repeated_on_a_server_error(server: ApiServerThread) -> None:
    kube = Kube(api_client(server.url), QUICK)
    server.server.faults.fail("POST", r"/pods$", 500)
    with pytest.raises(KubeError) as caught:
        kube.request_sync("POST", pods_path("default"), POD)
    assert caught.value.status == 500 and str(caught.value).startswith("POST /api/v1/namespaces/default/pods: "
                                                                        "HTTP 500 Internal Server Error")
    assert served(server, "POST", pods_path("default")) == [500]


def test_a_create_whose_conflict_means_done_is_repeated_on_a_server_error(server: ApiServerThread) -> None:
    kube = Kube(api_client(server.url), QUICK)
    server.server.faults.fail("POST", r"/pods$", 500)
    assert asyncio.run(kube.create(POD)) is True
    assert served(server, "POST", pods_path("default")) == [500, 201]


def test_errors_that_retrying_cannot_fix_are_raised_at_once(server: ApiServerThread) -> None:
    kube = Kube(api_client(server.url), QUICK)
    with pytest.raises(KubeError) as caught:
        kube.request_sync("GET", "/api/v1/namespaces/default/pods/missing")
    assert caught.value.status == 404 and "HTTP 404 Not Found" in str(caught.value)
    assert served(server, "GET", "/api/v1/namespaces/default/pods/missing") == [404]


def test_an_unreachable_server_is_one_error_after_the_policys_attempts() -> None:
    kube = Kube(api_client(f"http://127.0.0.1:{free_port()}"), QUICK)
    with pytest.raises(KubeError) as caught:
        kube.request_sync("GET", pods_path("default"))
    assert caught.value.status == 0
    assert str(caught.value).startswith("GET /api/v1/namespaces/default/pods: cannot reach the API server (")


def test_the_retry_policy_waits_what_the_server_asks_within_its_ceiling() -> None:
    policy = RetryPolicy(backoff=0.01, max_backoff=5.0)
    assert policy.delay(0, retry_after=1.0) >= 1.0
    assert policy.delay(0, retry_after=60.0) == 5.0
    assert policy.delay(10) <= 5.0


async def test_leader_election_calls_go_through_the_same_layer(server: ApiServerThread) -> None:
    lease_api = leader.LeaseApi(server.url)
    server.server.faults.fail("GET", r"/leases/l$", 503)
    assert await lease_api.get("default", "l") is None  # retried past the 503; then 404: no Lease yet
    assert served(server, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l") == [503, 404]
    assert {r.user_agent for r in server.server.requests if "leases" in r.path} == {leader.USER_AGENT}
    lease_api.base_url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(KubeError):
        await lease_api.get("default", "l")
    await lease_api.close()


def test_queued_creates_overtake_releases_and_events_earliest_reconcile_first(server: ApiServerThread) -> None:
    """Under a burst every call waits for a thread: the creates a submitted job waits for overtake what can wait
    a moment (a gang release queued just before them, an Event); a reconcile's creates go before those of one
    started later."""
    api = api_client(server.url)
    api.configuration.connection_pool_maxsize = 1  # one thread: the order of the queue is the order served
    kube = Kube(api, QUICK)
    asyncio.run(kube.create(POD))
    server.server.faults.delay("GET", r"/pods$", 0.5)  # holds the thread while the others queue

    def pod(name: str) -> dict[str, Any]:
        return {**POD, "metadata": {"name": name, "namespace": "default"}}

    async def in_reconcile(age: float, call: Awaitable[Any]) -> Any:
        reconcile_started.set(time.monotonic() - age)
        return await call

    async def burst() -> None:
        started = server.server.handler.started_requests
        busy = asyncio.ensure_future(kube.request("GET", pods_path("default")))
        while server.server.handler.started_requests == started:  # until the GET has the thread (for 0.5 s)
            await asyncio.sleep(0.01)
        await asyncio.gather(
            busy,
            kube.post_event(pod("p"), "Normal", "Created", "created"),
            kube.request("PATCH", pods_path("default", "p"), {"metadata": {"labels": {"released": "yes"}}},
                         content_type=MERGE_PATCH),
            in_reconcile(0, kube.create(pod("later"))),
            in_reconcile(1, kube.create(pod("earlier"))),
        )

    asyncio.run(burst())
    after = [(r.method, r.resource, r.name) for r in server.server.requests if r.method != "GET"][1:]
    assert after == [("POST", "pods", None), ("POST", "pods", None), ("PATCH", "pods", "p"), ("POST", "events", None)]
    stored = kube.request_sync("GET", pods_path("default"))["items"]
    versions = {p["metadata"]["name"]: int(p["metadata"]["resourceVersion"]) for p in stored}
    assert versions["earlier"] < versions["later"]
