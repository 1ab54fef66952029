"""The runner waits for the TFJob API before starting kopf (which discovers resources only once)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kopfrun import install_crd
from polling import wait_for
from ports import free_port

from kubelocal.apiserver.thread import ApiServerThread, write_kubeconfig
from tfjob_operator.client.local.processes import stop_process
from tfjob_operator.kube import Kube, RetryPolicy, load_api_client
from tfjob_operator.serving import runner
from tfjob_operator.serving.runner import OPERATOR_ARENAS


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


def _operator_says(kubeconfig: Path, log: Path, what: str) -> str:
    """Start `tfjob operator` as a user would, and the line it logs about serving the TFJob API (bounded)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "TFJOB_METRICS_PORT": "0", "TFJOB_LIVENESS_PORT": "0",
           "TFJOB_REQUEST_TIMEOUT": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tfjob_operator", "operator"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return wait_for(lambda: next((line for line in log.read_text().splitlines()
                                      if "waiting for the API server" in line), None), 30, what=what)
    finally:
        stop_process(proc, 10)


@pytest.fixture
def listening_but_silent() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung or blackholed API server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("server", ["refused", "silent"])
def test_an_operator_pointed_at_a_dead_api_server_says_it_is_unreachable(
        tmp_path: Path, server: str, request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue("listening_but_silent") if server == "silent" else free_port()
    write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    line = _operator_says(tmp_path / "kubeconfig", tmp_path / "operator.log", "the operator to say why it waits")
    assert f"http://127.0.0.1:{port} is unreachable" in line
    assert ("Connection refused" if server == "refused" else "timed out") in line
    assert "CRD" not in line


@pytest.mark.timeout(90)
def test_an_operator_on_a_cluster_without_the_crd_asks_for_it(tmp_path: Path) -> None:
    with ApiServerThread() as api:
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        line = _operator_says(tmp_path / "kubeconfig", tmp_path / "operator.log", "the operator to ask for the CRD")
    assert "is the TFJob CRD installed? kubectl apply -f crds/tfjob.yaml" in line
    assert "unreachable" not in line


#: In a fresh interpreter: optionally cap the arenas, then 8 threads that each allocate (beyond pymalloc's small
#: objects) while the others hold theirs; prints the heaps glibc's malloc_info reports.
ARENAS = """
import ctypes, sys, tempfile, threading
from tfjob_operator.serving.runner import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "cap" else None)
start, hold = threading.Barrier(8), threading.Barrier(8)
def work():
    start.wait()
    block = bytearray(1 << 20)
    hold.wait()
    del block
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile() as out:
    stream = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    print(open(out.name).read().count("<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
@pytest.mark.parametrize(("mode", "env", "capped", "most"), [
    pytest.param("cap", {}, "True", OPERATOR_ARENAS, id="capped"),
    pytest.param("cap", {"MALLOC_ARENA_MAX": "4"}, "False", 4, id="the environment's own cap wins"),
])
def test_the_operators_process_keeps_its_threads_in_few_heap_arenas(mode: str, env: dict[str, str], capped: str,
                                                                    most: int) -> None:
    uncapped = subprocess.run([sys.executable, "-c", ARENAS, "no"], capture_output=True, text=True, check=True)
    run = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    said, heaps = run.stdout.split()
    assert said == capped
    assert int(heaps) <= most < int(uncapped.stdout.split()[1])
