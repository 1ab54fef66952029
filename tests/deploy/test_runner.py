"""The runner waits for the TFJob API before starting kopf (which discovers resources only once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kopfrun import install_crd

from kubelocal.apiserver.thread import ApiServerThread, write_kubeconfig
from tfjob_operator import runner
from tfjob_operator.kube import Kube, RetryPolicy, load_api_client


@pytest.mark.timeout(60)
async def test_operator_waits_until_the_tfjob_crd_is_served(tmp_path: Path) -> None:
    with ApiServerThread() as api:
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        client = load_api_client(str(tmp_path / "kubeconfig"))
        waiting = asyncio.create_task(runner.wait_for_tfjob_api(Kube(client, RetryPolicy(attempts=1)),
                                                                interval=0.05))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # no CRD yet: kopf would find nothing to serve
        await install_crd(api.url)
        await asyncio.wait_for(waiting, 10)
        client.close()
