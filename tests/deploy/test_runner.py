"""The runner waits for the TFJob API before starting kopf (which discovers resources only once)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kopfrun import install_crd

from kubelocal.apiserver.thread import ApiServerThread, write_kubeconfig
from tfjob_operator import runner
from tfjob_operator.kube import Kube, RetryPolicy, load_api_client
from tfjob_operator.runner import OPERATOR_ARENAS


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


#: In a fresh interpreter: optionally cap the arenas, then 8 threads that each allocate (beyond pymalloc's small
#: objects) while the others hold theirs; prints the heaps glibc's malloc_info reports.
ARENAS = """
import ctypes, sys, tempfile, threading
from tfjob_operator.runner import limit_malloc_arenas
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
