"""Throughput of the tfjob_worker runtime vs a plain hand-written tf-keras script (same model, data, steps).

Prints both figures (examples/s, mean over epochs after the first, which includes tracing), their
ratio (target >= 0.97), and 1 vs 2 workers with MultiWorkerMirroredStrategy on loopback. On a
2-core CPU machine 2 workers are slower than 1: CPU runs prove correctness, not speed.

    python bench/runtime_overhead.py [--epochs 4] [--steps 200] [--batch 32]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLAIN = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf, tf_keras as keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
epochs, steps, batch = (int(a) for a in sys.argv[1:4])
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
x, _, y, _ = train_test_split(x, y, test_size=0.2, random_state=42, stratify=y)
tf.keras.utils.set_random_seed(42)
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=42).repeat().batch(batch, drop_remainder=True)
model = keras.Sequential([keras.layers.Input(shape=(64,)), keras.layers.Dense(128, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
rates = []
class Timer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None): self.t = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None): rates.append(steps * batch / (time.perf_counter() - self.t))
model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[Timer()], verbose=0)
print(json.dumps(rates))
"""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def steady(rates: list[float]) -> float:
    """Mean examples/s over the epochs after the first (the first includes tracing)."""
    return statistics.mean(rates[1:] if len(rates) > 1 else rates)


def plain(epochs: int, steps: int, batch: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, str(epochs), str(steps), str(batch)], capture_output=True, text=True, check=True
    )
    return steady(json.loads(out.stdout.strip().splitlines()[-1]))


def runtime(workers: int, epochs: int, steps: int, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO / "worker_image")}
        args = [
            sys.executable,
            "-m",
            "tfjob_worker",
            "--epochs",
            str(epochs),
            "--steps-per-epoch",
            str(steps),
            "--batch-size-per-replica",
            str(batch),
            "--output-dir",
            f"{tmp}/out",
        ]
        cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(workers)]}
        procs = []
        for index in range(workers):
            if workers > 1:
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            procs.append(subprocess.Popen(args, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        codes = [p.wait(timeout=600) for p in procs]
        if any(codes):
            raise SystemExit(f"runtime with {workers} worker(s) failed: exit codes {codes}")
        history = json.loads(Path(f"{tmp}/out/history.json").read_text())
        return steady([row["examples_per_sec"] for row in history])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, interleaved; medians are reported")
    a = parser.parse_args()
    # Identical runs differ by up to ~10% on a shared 2-core machine, so alternate the two and take medians.
    bases, ours_runs = [], []
    for _ in range(a.repeats):
        bases.append(plain(a.epochs, a.steps, a.batch))
        ours_runs.append(runtime(1, a.epochs, a.steps, a.batch))
    base, ours = statistics.median(bases), statistics.median(ours_runs)
    print(f"model digits-mlp, {a.epochs} epochs x {a.steps} steps, batch {a.batch}/replica, {os.cpu_count()} CPUs")
    print(f"plain tf-keras script : {base:10.1f} examples/s  (median of {a.repeats}: "
          f"{', '.join(f'{b:.0f}' for b in bases)})")
    print(f"tfjob_worker, 1 worker: {ours:10.1f} examples/s  (median of {a.repeats}: "
          f"{', '.join(f'{o:.0f}' for o in ours_runs)})")
    print(f"throughput ratio      : {ours / base:10.3f} (target >= 0.97)")
    two = runtime(2, a.epochs, a.steps, a.batch)
    print(
        f"tfjob_worker, 2 workers (MWMS, RING, global batch {2 * a.batch}): {two:10.1f} examples/s "
        f"({two / ours:.2f}x of 1 worker)"
    )


if __name__ == "__main__":
    main()
