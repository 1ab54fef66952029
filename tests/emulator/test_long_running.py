"""The API server as a long-running process (`tfjob local up`): full garbage collections wait for a quiet
moment, stopping the server gives the collector back as it was, and the record of requests stays bounded."""

import gc
from dataclasses import replace

import pytest
import requests
from polling import wait_for

from kubelocal.apiserver import ApiServerThread
from kubelocal.apiserver.gcpolicy import GcSettings, GcState, full_collection_due

SETTINGS = GcSettings(full_every=1000, idle_after=10, window=1.0, idle_rate=20.0, min_quiet=0.1, max_lag=0.05,
                      max_share=0.02)
READY = GcState(young_collections=10, rate=8.0, quiet_for=0.5, lag=0.0, since_full=100.0, last_full_took=0.5)


@pytest.mark.parametrize(
    ("state", "due"),
    [
        (READY, True),  # enough survived, only heartbeats, none right now, and the last one was long ago
        (replace(READY, young_collections=500, rate=0.0, quiet_for=5.0), True),
        (replace(READY, last_full_took=0.0, since_full=0.0), True),  # the first one
        (replace(READY, young_collections=9), False),  # idle, but too little survived to be worth the walk
        (replace(READY, rate=300.0), False),  # a client at work: it would wait behind the pause
        (replace(READY, quiet_for=0.05), False),  # a request just came: its neighbours may be on their way
        (replace(READY, lag=0.2), False),  # the loop is behind: requests wait unread in its sockets
        (replace(READY, since_full=24.0), False),  # 0.5 s of the last 24.5 s went to it already (> 2 %)
    ],
    ids=["ready", "long-idle", "first", "little-survived", "client-at-work", "request-just-came", "loop-behind",
         "too-often"],
)
def test_a_full_collection_runs_only_when_idle_keeping_up_and_not_too_often(state, due):
    assert full_collection_due(state, SETTINGS) is due


def test_a_quiet_server_runs_the_pending_full_collection_and_gives_the_collector_back_when_stopped():
    before = gc.get_threshold()
    with ApiServerThread() as api:
        api.server.manage_gc(GcSettings(full_every=1000, idle_after=2, window=0.2))  # from another thread
        assert gc.get_threshold() == (before[0], before[1], 1000)
        collector = api.server.idle_gc
        assert collector is not None
        for _ in range(3):
            gc.collect(1)  # survivors move towards the old generation
        wait_for(lambda: collector.full_collections >= 1, timeout=10, what="a full collection while quiet")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_server_with_a_bounded_request_log_keeps_the_latest_requests_only():
    with ApiServerThread() as api:
        api.server.limit_request_log(10)
        with requests.Session() as http:
            for i in range(50):
                http.get(f"{api.url}/api/v1/namespaces/default/configmaps/c{i}", timeout=10)
        names = [r.name for r in api.server.requests]
        assert 10 <= len(names) < 20
        assert names[-1] == "c49" and names == [f"c{i}" for i in range(50 - len(names), 50)]
