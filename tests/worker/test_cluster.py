"""Cluster view from TF_CONFIG and Slurm variables."""

from __future__ import annotations

import json

import pytest

from tfjob_worker import cluster
from tfjob_worker.cluster import ClusterConfigError, expand_hostlist, expand_tasks_per_node, from_slurm, from_tf_config

PODS = {"chief": ["job-chief-0.job:2222"], "worker": ["job-worker-0.job:2222", "job-worker-1.job:2222"],
        "ps": ["job-ps-0.job:2222"], "evaluator": ["job-evaluator-0.job:2222"]}
LOCAL = {"worker": ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]}


def tf_config(cluster_spec: dict[str, list[str]], role: str, index: int) -> str:
    return json.dumps({"cluster": cluster_spec, "task": {"type": role, "index": index}})


@pytest.mark.parametrize(
    ("spec", "role", "index", "rank", "world_size", "local_rank", "local_size", "is_chief"),
    [
        (PODS, "chief", 0, 0, 3, 0, 1, True),
        (PODS, "worker", 0, 1, 3, 0, 1, False),
        (PODS, "worker", 1, 2, 3, 0, 1, False),
        (PODS, "ps", 0, None, 3, 0, 1, False),
        (PODS, "evaluator", 0, None, 3, 0, 1, False),
        (LOCAL, "worker", 0, 0, 3, 0, 3, True),  # no chief: worker 0 is the chief
        (LOCAL, "worker", 2, 2, 3, 2, 3, False),
        ({"worker": ["a:1", "b:1", "a:2"]}, "worker", 2, 2, 3, 1, 2, False),
        ({"worker": ["[::1]:1", "[::1]:2"]}, "worker", 1, 1, 2, 1, 2, False),
    ],
)
def test_tf_config_gives_role_rank_and_local_rank(spec, role, index, rank, world_size, local_rank, local_size,
                                                  is_chief):
    view = from_tf_config(tf_config(spec, role, index))
    assert (view.role, view.index, view.rank, view.world_size) == (role, index, rank, world_size)
    assert (view.local_rank, view.local_size, view.is_chief) == (local_rank, local_size, is_chief)
    assert view.address == spec[role][index]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "TF_CONFIG.cluster must be"),
        (json.dumps({"cluster": LOCAL}), "TF_CONFIG.task must be"),
        (tf_config(LOCAL, "chief", 0), "has no tasks in TF_CONFIG.cluster"),
        (tf_config(LOCAL, "worker", 3), "TF_CONFIG.task.index 3 is out of range: cluster.worker has 3"),
        (tf_config(LOCAL, "worker", -1), "non-negative integer"),
        (tf_config(LOCAL, "master", 0), "'master' is not one of"),
        (tf_config({"worker": ["nohostport"]}, "worker", 0), "list of \"host:port\""),
        (tf_config({"trainer": ["a:1"]}, "trainer", 0), "TF_CONFIG.cluster.trainer: unknown role"),
        (tf_config({"worker": ["a:1"], "ps": ["b:1"]}, "worker", 0), "ps tasks but no chief"),
        (tf_config({"chief": ["a:1", "b:1"]}, "chief", 0), "at most one"),
        (tf_config({"evaluator": ["a:1"]}, "evaluator", 0), "at least one chief or worker"),
    ],
)
def test_malformed_tf_config_is_rejected_with_the_field_named(text, message):
    with pytest.raises(ClusterConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        from_tf_config(text)


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("gpu[01-02,7],cpu1", ["gpu01", "gpu02", "gpu7", "cpu1"]),
        ("a[9-10]-ib", ["a9-ib", "a10-ib"]),
    ],
)
def test_slurm_hostlist_expands(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


def test_slurm_tasks_per_node_expands():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "n[1-2]",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize(
    ("overrides", "rank", "local_rank", "addresses"),
    [
        ({}, 3, 1, ["n1:9000", "n1:9001", "n2:9000", "n2:9001"]),
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, 0, 0, ["n1:9000", "n1:9001", "n2:9000", "n2:9001"]),
        ({"SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_PROCID": "2", "SLURM_LOCALID": "2"}, 2, 2,
         ["n1:9000", "n1:9001", "n1:9002", "n2:9000"]),
        ({"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": ""}, 3, 1,
         ["n1:9000", "n1:9001", "n2:9000", "n2:9001"]),
    ],
)
def test_slurm_variables_give_workers_on_port_base(overrides, rank, local_rank, addresses):
    view = from_slurm({**SLURM, **overrides}, port_base=9000)
    assert (view.rank, view.world_size, view.local_rank, view.source) == (rank, 4, local_rank, "slurm")
    assert view.cluster == {"worker": addresses}
    assert view.is_chief == (rank == 0)
    assert json.loads(view.tf_config())["task"] == {"type": "worker", "index": rank}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLURM_PROCID": "4"}, "SLURM_PROCID 4 is out of range"),
        ({"SLURM_NTASKS": "5"}, "add up to 4, but SLURM_NTASKS is 5"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2"}, "2 node\\(s\\) but tasks-per-node lists 1"),
        ({"SLURM_STEP_NODELIST": ""}, "SLURM_STEP_NODELIST"),
        ({"SLURM_NTASKS": "x"}, "must be integers"),
    ],
)
def test_bad_slurm_variables_are_rejected(overrides, message):
    with pytest.raises(ClusterConfigError, match=message):
        from_slurm({**SLURM, **overrides})


def test_tf_config_wins_over_slurm_and_nothing_means_one_local_chief():
    both = {**SLURM, "TF_CONFIG": tf_config(LOCAL, "worker", 1)}
    assert cluster.from_env(both).source == "tf_config"
    assert cluster.from_env(SLURM, port_base=7000).cluster["worker"][0] == "n1:7000"
    alone = cluster.from_env({})
    assert (alone.rank, alone.world_size, alone.is_chief, alone.source) == (0, 1, True, "none")


def test_horovod_style_helpers_read_the_environment(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config(LOCAL, "worker", 2))
    assert (cluster.rank(), cluster.size(), cluster.local_rank()) == (2, 3, 2)
    monkeypatch.setenv("TF_CONFIG", tf_config(PODS, "ps", 0))
    with pytest.raises(RuntimeError, match="not for 'ps'"):
        cluster.rank()


def test_pure_modules_import_without_tensorflow():
    import subprocess
    import sys

    code = ("import sys; import tfjob_worker, tfjob_worker.cluster, tfjob_worker.exit_codes, "
            "tfjob_worker.scaling, tfjob_worker.strategy_choice, tfjob_worker.devices, tfjob_worker.config, "
            "tfjob_worker.progress, tfjob_worker.checkpoint; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        "PYTHONPATH": ":".join(sys.path)}, timeout=60)
    assert result.returncode == 0, result.stderr
