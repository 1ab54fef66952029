"""Each local pod has a temporary directory of its own, gone with the pod: TMPDIR always, and on the pod network
/tmp itself (the pod's mount namespace), as a container's /tmp is its own. TensorFlow's autograph leaves
`__autograph_generated_file*.py` behind in TMPDIR when a worker ends with os._exit; they must not pile up in the
host's /tmp.

The pod-network case needs root on Linux (CI runs as root) and skips elsewhere with the reason.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from local_helpers import core_api, pod_dict, python_pod, unique
from polling import wait_for

from kubelocal.cluster import LocalClusterThread
from kubelocal.network import pod_network_available

AVAILABLE, WHY_NOT = pod_network_available()

#: Makes a temporary file as TensorFlow's autograph does (tempfile, so TMPDIR), and, given WRITE_TMP, one under
#: the literal /tmp as a program that hard-codes it; says where they went and what its /tmp holds, then waits.
LEAVES_TEMP_FILES = textwrap.dedent("""
    import json, os, tempfile, time
    fd, path = tempfile.mkstemp(prefix="__autograph_generated_file", suffix=".py")
    os.write(fd, b"def tf__f(): pass\\n")
    os.close(fd)
    if os.environ.get("WRITE_TMP"):
        with open("/tmp/written-by-" + os.environ["HOSTNAME"], "w") as f:
            f.write("x")
    print(json.dumps({"tmpdir": tempfile.gettempdir(), "file": path, "tmp": sorted(os.listdir("/tmp"))}), flush=True)
    time.sleep(600)
""")


@pytest.fixture(scope="module", params=[
    pytest.param("off", id="host network"),
    pytest.param("on", id="pod network", marks=pytest.mark.skipif(not AVAILABLE,
                                                                    reason=f"pod network unavailable: {WHY_NOT}")),
])
def plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterThread]:
    with LocalClusterThread(nodes="1x{cpu:8,memory:16Gi}", workdir=tmp_path_factory.mktemp("tmpdirs"),
                            max_grace_seconds=2.0, pod_network=request.param) as c:
        yield c


@pytest.fixture(scope="module")
def api(plane: LocalClusterThread) -> Iterator[kubernetes.client.CoreV1Api]:
    client = core_api(plane.url)
    yield client
    client.api_client.close()


def _start(api: kubernetes.client.CoreV1Api, name: str, write_tmp: bool) -> dict[str, Any]:
    env = [{"name": "WRITE_TMP", "value": "1"}] if write_tmp else []
    api.create_namespaced_pod("default", python_pod(name, LEAVES_TEMP_FILES, container={"env": env}))

    def said() -> dict[str, Any] | None:
        try:
            log = str(api.read_namespaced_pod_log(name, "default"))
        except kubernetes.client.ApiException:
            return None
        lines = [line for line in log.splitlines() if line.startswith("{")]
        return json.loads(lines[0]) if lines else None

    return wait_for(said, 60, what=f"pod {name} to make its temporary files")


def test_each_pod_has_its_own_temporary_directory_removed_with_the_pod(
        plane: LocalClusterThread, api: kubernetes.client.CoreV1Api) -> None:
    networked = plane.network is not None
    first, second = unique("tmp-a"), unique("tmp-b")
    a, b = _start(api, first, networked), _start(api, second, networked)
    # Two pods never share one, and neither is the host's /tmp.
    assert a["tmpdir"] != b["tmpdir"]
    assert "/tmp" not in (a["tmpdir"], b["tmpdir"])
    assert Path(a["file"]).parent == Path(a["tmpdir"]) and Path(a["file"]).is_file()
    assert not list(Path(b["tmpdir"]).glob(Path(a["file"]).name))
    if networked:  # /tmp itself is the pod's: what one pod writes there the other never sees, nor the host
        assert f"written-by-{first}" in a["tmp"] and f"written-by-{second}" not in a["tmp"]
        assert f"written-by-{second}" in b["tmp"] and f"written-by-{first}" not in b["tmp"]
        assert (Path(a["tmpdir"]) / f"written-by-{first}").is_file()
        assert not Path(f"/tmp/written-by-{first}").exists()
    # Deleting a pod removes its temporary files (its processes are gone); the other pod's stay.
    api.delete_namespaced_pod(first, "default")
    wait_for(lambda: pod_dict(api, first) is None, 60, what=f"pod {first} to be deleted")
    wait_for(lambda: not Path(a["tmpdir"]).exists(), 30, what=f"{a['tmpdir']} to be removed with pod {first}")
    assert Path(b["file"]).is_file()
    api.delete_namespaced_pod(second, "default")
    wait_for(lambda: not Path(b["tmpdir"]).exists(), 60, what=f"{b['tmpdir']} to be removed with pod {second}")
