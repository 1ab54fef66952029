"""Where the local kubelet can hold containers to their memory limit (kubelet/cgroups.py), on cgroup trees made
in a temporary directory: v1, v2, and the machines where it cannot, which it must say. The kernel's part (a
container over its limit OOM-killed) is tests/local/test_kubelet_pods.py, on this machine's cgroups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubelocal.kubelet.cgroups import MemoryCgroups, memory_limit, read_counter


def tree(tmp_path: Path, *files: str) -> Path:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


def test_cgroup_v1_limits_each_container_under_the_kubelet_s_own_cgroup(tmp_path: Path) -> None:
    root = tree(tmp_path, "memory/session/a/memory.limit_in_bytes")
    found = MemoryCgroups.detect(root, "4:memory:/session/a\n2:cpu:/\n0::/\n")
    assert found.enforced and found.version == 1 and found.base is not None
    assert found.base.parent == root / "memory" / "session" / "a"
    assert found.why.startswith("enforced by the kernel: cgroup v1 memory controller")
    cgroup = found.create("uid_tensorflow_0", 1 << 30)
    assert cgroup is not None and (cgroup.path / "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert cgroup.wrap(["python", "-m", "x"])[-3:] == ["python", "-m", "x"]
    (cgroup.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert cgroup.oom_kills() == 1


def test_cgroup_v2_enables_the_memory_controller_and_counts_oom_kills_in_memory_events(tmp_path: Path) -> None:
    root = tree(tmp_path, "cgroup.controllers", "user.slice/plane/cgroup.subtree_control")
    found = MemoryCgroups.detect(root, "0::/user.slice/plane\n")
    assert found.enforced and found.version == 2
    assert (root / "user.slice/plane/cgroup.subtree_control").read_text() == "+memory"
    cgroup = found.create("uid_tensorflow_1", 512 << 20)
    assert cgroup is not None and (cgroup.path / "memory.max").read_text() == str(512 << 20)
    (cgroup.path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert cgroup.oom_kills() == 1


@pytest.mark.parametrize(("files", "proc", "why"), [
    pytest.param((), "0::/\n", "not enforced: no cgroup memory controller under", id="no-memory-controller"),
    pytest.param(("cgroup.controllers",), "0::/gone\n", "not enforced: cgroup v2, but the memory controller cannot "
                 "be enabled for the children of", id="v2-own-cgroup-not-delegated"),
    pytest.param(("memory/tasks",), "4:memory:/not/there\n", "not enforced: cgroup v1 memory controller, but",
                 id="v1-not-writable"),
])
def test_where_limits_cannot_be_enforced_the_kubelet_says_why(tmp_path: Path, files: tuple[str, ...], proc: str,
                                                              why: str) -> None:
    found = MemoryCgroups.detect(tree(tmp_path, *files), proc)
    assert not found.enforced and found.why.startswith(why), found.why
    assert found.create("uid_c_0", 1 << 20) is None


def test_the_cgroups_of_a_kubelet_that_died_are_removed_by_the_next(tmp_path: Path) -> None:
    root = tree(tmp_path, "memory/s/memory.limit_in_bytes")
    dead = root / "memory" / "s" / "kubelocal-999999999-0123abcd"
    (dead / "uid_c_0").mkdir(parents=True)
    mine = root / "memory" / "s" / f"kubelocal-{os.getpid()}-0123abcd"
    mine.mkdir()
    found = MemoryCgroups.detect(root, "4:memory:/s\n")
    assert not dead.exists() and mine.exists() and found.base is not None and found.base.exists()
    assert found.close() and not found.base.exists()


@pytest.mark.parametrize(("container", "limit"), [
    ({"resources": {"limits": {"memory": "1Gi"}}}, 1 << 30),
    ({"resources": {"limits": {"memory": "512M"}, "requests": {"memory": "1Ki"}}}, 512 * 10**6),
    ({"resources": {"requests": {"memory": "1Gi"}}}, None),
    ({"resources": {"limits": {"cpu": "2"}}}, None),
    ({}, None),
])
def test_the_limit_is_resources_limits_memory(container: dict[str, object], limit: int | None) -> None:
    assert memory_limit(container) == limit


def test_a_flat_keyed_counter_is_read_by_its_key() -> None:
    assert read_counter("oom 3\noom_kill 2\n", "oom_kill") == 2 and read_counter("", "oom_kill") == 0
