"""A node lost while jobs train, and a worker kill -9'd in the middle of a checkpoint save: the jobs restart
their gangs and finish, the invariants hold, and the last complete checkpoint is the one the next attempt
resumes from."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from chaos_world import SEED, record, scaled
from operator_harness import REPO, Cluster, Operator, py, replica, wait_for
from test_operator_kills import chaos_cluster, check

__all__ = ["chaos_cluster"]

pytestmark = pytest.mark.timeout(600)

SAVE_THEN_HANG = REPO / "tests" / "worker" / "save_then_hang.py"


def test_jobs_finish_cleanly_when_a_node_is_lost_mid_training(chaos_cluster: Cluster, tmp_path: Path) -> None:
    cluster = chaos_cluster
    rng = random.Random(SEED)
    go = tmp_path / "go"
    # Attempt 0 "trains" until the test says go; a restarted attempt finishes at once.
    code = (f"import os, pathlib, sys, time\nif os.environ['TFJOB_ATTEMPT'] != '0': sys.exit(0)\n"
            f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.1)")
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log").start()
    sizes: dict[str, int] = {}
    try:
        with record(cluster) as rec:
            for _ in range(scaled(4)):
                workers = rng.randint(2, 3)
                name = cluster.submit({"Worker": replica(py(code), workers, resources={})},
                                      cleanPodPolicy=rng.choice(["Running", "All"]))
                sizes[name] = workers
            for name in sizes:
                cluster.wait_state(name, "Running", timeout=60)
            nodes = {p.spec.node_name for name in sizes for p in cluster.pods(name)}
            lost = rng.choice(sorted(nodes))
            cluster.call(cluster.local.kubelet.lose_node(lost))
            rec.fault(f"node {lost} lost")
            hit = [n for n in sizes if any(p.spec.node_name == lost for p in cluster.pods(n))]
            # The jobs that had a pod there restart their gang (NodeLost) on the nodes left.
            for name in hit:
                wait_for(lambda n=name: "NodeLost" in cluster.event_reasons(n), 60, what=f"{name} sees its node lost")
            go.write_text("1")
            check(rec, sizes, f"node {lost} lost under {len(hit)} of {len(sizes)} jobs")
            for name in hit:
                assert (rec.jobs()[name] or {})["status"]["state"] == "Succeeded"
    finally:
        op.stop()


def test_a_worker_killed_during_a_checkpoint_save_loses_no_checkpoint(chaos_cluster: Cluster, tmp_path: Path) -> None:
    """Real TensorFlow: attempt 0 writes epoch-0001, then dies (kill -9) while epoch-0002 is half written;
    attempt 1 must find epoch-0001 as the latest checkpoint, whole, and restore it."""
    cluster = chaos_cluster
    directory = tmp_path / "checkpoints"
    verify = ("import os, sys\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\n"
              "from tfjob_worker import checkpoint\n"
              f"latest = checkpoint.latest({str(directory)!r})\n"
              "assert latest and latest.endswith('epoch-0001/ckpt'), latest\n"
              "weights = tf.Variable(tf.zeros([256, 256]))\n"
              "tf.train.Checkpoint(weights=weights).read(latest).assert_consumed()\n"
              "assert float(tf.reduce_min(weights)) == float(tf.reduce_max(weights)) == 1.0\n"
              "print('resumed from', latest)\n")
    code = ("import os, runpy, sys\n"
            f"if os.environ['TFJOB_ATTEMPT'] == '0':\n    sys.argv = ['save_then_hang', {str(directory)!r}]\n"
            f"    runpy.run_path({str(SAVE_THEN_HANG)!r}, run_name='__main__')\n"
            f"else:\n    exec({verify!r})\n")
    env = [{"name": "PYTHONPATH", "value": str(REPO / "worker_image")}]
    spec = replica(py(code), 1, resources={})
    spec["template"]["spec"]["containers"][0]["env"] = env
    op = Operator(cluster.kubeconfig, tmp_path / "operator.log").start()
    try:
        with record(cluster) as rec:
            name = cluster.submit({"Worker": spec}, cleanPodPolicy="None")
            # The second save is on disk under its temporary name: the process is mid-save.
            wait_for(lambda: directory.is_dir() and any(n.startswith(".tmp-epoch-0002") for n in os.listdir(directory)),
                     120, what="the second checkpoint save in progress")
            (pod,) = cluster.pods(name)
            cluster.call(cluster.local.kubelet.kill_container("default", pod.metadata.name))
            rec.fault("worker kill -9 mid-save")
            check(rec, {name: 1}, "worker kill -9 during a checkpoint save")
            status = (rec.jobs()[name] or {})["status"]
            assert (status["state"], status["restartCount"]) == ("Succeeded", 1)
    finally:
        op.stop()
    saved = os.listdir(directory)
    assert "epoch-0001" in saved and "epoch-0002" not in saved, saved
