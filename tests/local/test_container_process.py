"""How a container spec becomes a local process: env, fieldRefs, expansion, volumes, command."""

import base64
import sys
from pathlib import Path
from typing import Any

import pytest

from kubelocal.containers import (
    ContainerConfigError,
    ImageDefaults,
    Refs,
    container_env,
    container_mounts,
    expand,
    probe_port,
    process_spec,
    rewrite_paths,
    volume_files,
    volume_host_paths,
)

NO_REFS = Refs(configmaps={}, secrets={})


def a_pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-worker-0", "namespace": "team", "uid": "u-1",
                     "labels": {"tfjob.dev/replica-type": "worker"}, "annotations": {"note": "hi"}},
        "spec": {"nodeName": "node-0", "containers": [{"name": "tensorflow"}], **spec},
    }


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("$(A)/x", {"A": "1"}, "1/x"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(A)", {"A": "1"}, "$(A)"),
        ("$$", {}, "$"),
        ("cost $5", {}, "cost $5"),
        ("$(A", {"A": "1"}, "$(A"),
        ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
    ],
)
def test_dollar_paren_expansion_follows_kubernetes(text: str, env: dict[str, str], expected: str) -> None:
    assert expand(text, env) == expected


@pytest.mark.parametrize(
    ("field_path", "expected"),
    [
        ("metadata.name", "job-worker-0"),
        ("metadata.namespace", "team"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['tfjob.dev/replica-type']", "worker"),
        ("metadata.annotations['note']", "hi"),
        ("metadata.labels['absent']", ""),
        ("spec.nodeName", "node-0"),
        ("status.podIP", "127.0.0.1"),
        ("status.hostIP", "127.0.0.1"),
    ],
)
def test_field_refs_resolve_from_the_pod(field_path: str, expected: str) -> None:
    container = {"name": "c", "env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]}
    assert container_env(a_pod(), container, NO_REFS) == {"V": expected}


def test_unsupported_field_ref_is_a_config_error() -> None:
    container = {"name": "c", "env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}
    with pytest.raises(ContainerConfigError, match=r"fieldRef 'spec\.bogus' is not supported"):
        container_env(a_pod(), container, NO_REFS)


def test_env_later_entries_see_earlier_ones_and_override_env_from() -> None:
    refs = Refs(configmaps={"cfg": {"data": {"A": "from-cm", "B": "b"}}},
                secrets={"s": {"data": {"TOKEN": base64.b64encode(b"t0k").decode()}}})
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "s"}, "prefix": "S_"}],
        "env": [
            {"name": "A", "value": "own"},
            {"name": "C", "value": "$(A)-$(B)"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
            {"name": "O", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        ],
    }
    assert container_env(a_pod(), container, refs) == {"A": "own", "B": "b", "S_TOKEN": "t0k", "C": "own-b", "K": "b"}


def test_missing_configmap_key_names_what_is_missing() -> None:
    refs = Refs(configmaps={"cfg": {"data": {}}}, secrets={})
    container = {"name": "c", "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x"}}}]}
    with pytest.raises(ContainerConfigError, match="couldn't find key x in ConfigMap team/cfg"):
        container_env(a_pod(), container, refs)


def test_resource_field_ref_reads_limits_with_divisor() -> None:
    container = {"name": "c", "resources": {"limits": {"memory": "2Gi"}},
                 "env": [{"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                           "divisor": "1Mi"}}}]}
    assert container_env(a_pod(), container, NO_REFS) == {"M": "2048"}


def test_volume_mapping_per_kind(tmp_path: Path) -> None:
    pod = a_pod(volumes=[
        {"name": "scratch", "emptyDir": {}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "shared"}},
        {"name": "host", "hostPath": {"path": "/var/data"}},
    ])
    pod_dir = tmp_path / "pods" / "p"
    assert volume_host_paths(pod, pod_dir, tmp_path) == {
        "scratch": pod_dir / "volumes" / "scratch",
        "ckpt": tmp_path / "volumes" / "team" / "shared",
        "host": Path("/var/data"),
    }


def test_configmap_volume_becomes_files() -> None:
    refs = Refs(configmaps={"cfg": {"data": {"a.json": "{}", "b": "2"}}}, secrets={})
    volume = {"name": "v", "configMap": {"name": "cfg", "items": [{"key": "b", "path": "sub/b.txt"}]}}
    assert volume_files(a_pod(), volume, refs) == {"sub/b.txt": "2"}
    assert volume_files(a_pod(), {"name": "e", "emptyDir": {}}, refs) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ckpt", "/H/ckpt"),
        ("/ckpt/backup", "/H/ckpt/backup"),
        ("--dir=/ckpt/x", "--dir=/H/ckpt/x"),
        ("/ckpt2/x", "/ckpt2/x"),
        ("/data/ckpt", "/data/ckpt"),
        ('{"dir": "/ckpt/m"}', '{"dir": "/H/ckpt/m"}'),
        ("/ckpt/models/out", "/H/models/out"),
        ("a:/ckpt:/ckpt/models", "a:/H/ckpt:/H/models"),
    ],
)
def test_mount_paths_are_rewritten_as_whole_path_components(text: str, expected: str) -> None:
    mounts = [("/ckpt", Path("/H/ckpt")), ("/ckpt/models", Path("/H/models"))]
    assert rewrite_paths(text, mounts) == expected


def test_volume_mount_naming_no_volume_is_an_error() -> None:
    with pytest.raises(ContainerConfigError, match="volumeMount 'ghost' names no volume"):
        container_mounts({"name": "c", "volumeMounts": [{"name": "ghost", "mountPath": "/x"}]}, {})


def test_process_runs_python_with_this_interpreter_in_the_pod_dir(tmp_path: Path) -> None:
    container = {"name": "tensorflow", "command": ["python3", "-m", "train"],
                 "args": ["--out=/ckpt/m", "--name=$(POD)"], "workingDir": "/workspace"}
    env = {"POD": "job-worker-0", "SAVE": "/ckpt/saved"}
    spec = process_spec(a_pod(), container, env, [("/ckpt", tmp_path / "ckpt")], tmp_path / "work")
    assert spec.argv == [sys.executable, "-m", "train", f"--out={tmp_path}/ckpt/m", "--name=job-worker-0"]
    assert spec.env["SAVE"] == f"{tmp_path}/ckpt/saved"
    assert spec.env["HOSTNAME"] == "job-worker-0"
    assert spec.cwd == tmp_path / "work"  # /workspace is not a volume here


def test_a_container_without_command_cannot_run_locally(tmp_path: Path) -> None:
    with pytest.raises(ContainerConfigError, match="no command or args"):
        process_spec(a_pod(), {"name": "c", "image": "busybox"}, {}, [], tmp_path)


def test_probe_ports_are_numbers_or_container_port_names() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}
    assert (probe_port(container, 9000), probe_port(container, "9000"), probe_port(container, "http")) == (
        9000, 9000, 8080)
    with pytest.raises(ContainerConfigError, match="probe port 'grpc' names no container port"):
        probe_port(container, "grpc")


def test_exec_probe_commands_run_in_the_container_context(tmp_path: Path) -> None:
    spec = process_spec(a_pod(), {"name": "c", "command": ["sleep", "1"]}, {"DIR": "/ckpt"},
                        [("/ckpt", tmp_path)], tmp_path)
    assert spec.command(["python3", "-c", "$(DIR)/x"]) == [sys.executable, "-c", f"{tmp_path}/x"]


IMAGE = ImageDefaults(env={"TF_USE_LEGACY_KERAS": "1", "OUT": "/var/app/output", "MODE": "image"},
                      workdir="/var/app")


def test_the_image_env_is_a_default_the_pods_own_env_overrides(tmp_path: Path) -> None:
    container = {"name": "tensorflow", "command": ["python", "train.py"]}
    spec = process_spec(a_pod(), container, {"MODE": "pod"}, [], tmp_path / "work", IMAGE)
    assert (spec.env["TF_USE_LEGACY_KERAS"], spec.env["MODE"]) == ("1", "pod")


def test_paths_under_the_image_workdir_are_the_pods_work_directory(tmp_path: Path) -> None:
    container = {"name": "tensorflow", "command": ["python", "/var/app/train.py"], "workingDir": "/var/app"}
    spec = process_spec(a_pod(), container, {}, [("/var/app/output", tmp_path / "pvc")], tmp_path / "work", IMAGE)
    assert spec.argv[1] == f"{tmp_path}/work/train.py"
    assert spec.cwd == tmp_path / "work"
    assert spec.env["OUT"] == f"{tmp_path}/pvc"  # a volume mounted inside the workdir still wins


def test_the_termination_message_path_is_a_file_of_the_pod_unless_it_lies_in_a_volume(tmp_path: Path) -> None:
    default = process_spec(a_pod(), {"name": "c", "command": ["sh", "-c", "echo hi > /dev/termination-log"]},
                           {}, [], tmp_path / "work")
    assert default.termination_file == tmp_path / "termination" / "c"
    assert default.argv[-1] == f"echo hi > {tmp_path}/termination/c"
    in_volume = process_spec(a_pod(), {"name": "c", "command": ["true"], "terminationMessagePath": "/ckpt/why"},
                             {}, [("/ckpt", tmp_path / "ckpt")], tmp_path / "work")
    assert in_volume.termination_file == tmp_path / "ckpt" / "why"
