"""Throughput of the tfjob_worker runtime vs the same plain hand-written tf-keras script; and recovery time.

Runs, interleaved in pairs of alternating order (ours, plain, plain, ours, ...) so that the shared machine's load
falls on both alike:
  1. a real step: a small conv net on the digits upscaled to 32x32 (bench/convnet.py; >= 20 ms a step on 2
     cores), 1 worker: median, min and max of examples/s over the repeats, and of the pairwise ratio;
  2. recovery: `tfjob local --kill-worker-after 0` and the split of worker SIGKILL -> resumed training
     (bench/recovery_time.py);
  3. the digits MLP (about 1 ms a step): a run is mostly start-up and the ratio is noise; kept for reference;
  4. 2 workers with MultiWorkerMirroredStrategy on loopback (TF_CONFIG), ours vs the plain script under the
     same strategy, on the conv net;
  5. the per-step cost of the runtime's Keras callbacks (CPU microseconds, measured on the callbacks alone).
Examples/s is the mean over the epochs after the first (which includes tracing), taken over the training steps
alone on both sides (ours leaves out validation and the per-epoch backup, as the plain script has neither).
Wall is a whole run, process start to exit. A SUMMARY line after each stage carries the figures so far; the
last one has them all.

    python bench/runtime_overhead.py [--repeats 5] [--mlp-repeats 1] [--mwms-repeats 2] [--no-recovery] [--plot PNG]
                                     [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import figures

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
#: With --budget: the conv net's pairs stop at this share of it; a later stage runs if about this many conv
#: pairs' wall fits what is left (2 cores: recovery 28 s, the MLP pair 12 s, an MWMS pair 32 s; a conv pair 25 s).
#: 0.45 let a second conv pair crowd out the recovery (a goal) when the first pair was quick (make bench
#: 2026-11-27 01:31: 2 pairs, then 50 s left against the 61 s the recovery was estimated to take).
CONV_SHARE = 0.35
STAGE_PAIRS = {"recovery": 1.4, "mlp": 0.6, "mwms": 1.5}

# The same training as a user would write it without the runtime: same model, data, input pipeline (shuffle,
# repeat, batch, prefetch 2, as tfjob_worker.data builds it), batch and optimizer;
# MultiWorkerMirroredStrategy (RING, as ours picks on CPU) when TF_CONFIG is set. Prints the rank-0 global
# examples/s per epoch, timed from epoch begin to epoch end.
PLAIN = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf, tf_keras as keras
model_name = sys.argv[1]
epochs, steps, batch = (int(a) for a in sys.argv[2:5])
tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
workers = len(tf_config.get("cluster", {}).get("worker", [])) or 1
if workers > 1:
    comm = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
else:
    strategy = tf.distribute.get_strategy()
tf.keras.utils.set_random_seed(42)
if model_name == "conv":
    import convnet
    x, y = convnet.images()
    make_model = convnet.model
else:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x, _, y, _ = train_test_split(x, y, test_size=0.2, random_state=42, stratify=y)
    make_model = lambda: keras.Sequential([keras.layers.Input(shape=(64,)), keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
global_batch = batch * workers
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=42).repeat()
      .batch(global_batch, drop_remainder=True).prefetch(2).with_options(options))
with strategy.scope():
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(0.001 * workers), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
rates = []
class Timer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None): self.t = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None): rates.append(steps * global_batch / (time.perf_counter() - self.t))
model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[Timer()], verbose=0)
if tf_config.get("task", {}).get("index", 0) == 0:
    print(json.dumps(rates))
"""

# The runtime's own callbacks (tfjob_worker.fit_loop) driven the way Model.fit drives them, without a model
# step: what the runtime adds to every training step, in CPU time (robust to a loaded machine).
HOOKS = r"""
import os, sys, tempfile, time, types
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf, tf_keras as keras
from tfjob_worker import fit_loop
from tfjob_worker.reports import Reporter
from tfjob_worker.startup import StartupClock
steps = int(sys.argv[1])
model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
tmp = tempfile.mkdtemp()
reporter = Reporter(fd=None)
reporter.describe(trains=True, rank=0, world_size=1, strategy="DefaultStrategy", collective=None, device_kind="cpu",
                  device_count=1, epochs=1, steps_per_epoch=steps)
job = types.SimpleNamespace(reporter=reporter, cfg=types.SimpleNamespace(log_every_steps=None, epochs=1,
                            checkpoint_every_steps=None), steps_per_epoch=steps, prints=False,
                            backup_dir=tmp + "/backup", tensorboard_dir=tmp + "/tb", startup=StartupClock(time.time()))
recorder = types.SimpleNamespace(epoch_begin=reporter.epoch_begin,
                                 live=lambda n, metrics: reporter.live_rate(n * 32.0, metrics))
callbacks = fit_loop.fit_callbacks(job, keras, recorder, is_ps=False)
cl = keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=False, model=model, verbose=0, epochs=1,
                                  steps=steps)
cl.on_train_begin(); cl.on_epoch_begin(0)
logs = {"loss": tf.constant(1.0), "accuracy": tf.constant(0.5)}
started = time.process_time()
for i in range(steps):
    cl.on_train_batch_begin(i); cl.on_train_batch_end(i, logs)
print((time.process_time() - started) / steps * 1e6)
"""


@dataclass
class Runs:
    """Examples/s and wall seconds of each repeat, ours and plain, in run order."""

    ours: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    ours_wall: list[float] = field(default_factory=list)
    plain_wall: list[float] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [o / p for o, p in zip(self.ours, self.plain, strict=False)]


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


def env_for(runtime_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(runtime_path), str(BENCH)])}


def launch(argvs: list[list[str]], env: dict[str, str], workers: int) -> tuple[list[subprocess.Popen[str]], float]:
    """Start one process per worker (TF_CONFIG on loopback when more than one)."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(workers)]}
    procs = []
    started = time.perf_counter()
    for index, argv in enumerate(argvs):
        penv = dict(env)
        if workers > 1:
            penv["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(argv, env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs, started


def finish(procs: list[subprocess.Popen[str]], started: float, what: str) -> tuple[str, float]:
    outs = [p.communicate(timeout=900) for p in procs]
    wall = time.perf_counter() - started
    if any(p.returncode for p in procs):
        errors = "\n".join(err[-2000:] for _, err in outs)
        raise SystemExit(f"{what} failed: exit codes {[p.returncode for p in procs]}\n{errors}")
    return outs[0][0], wall


def plain(model: str, workers: int, epochs: int, steps: int, batch: int, runtime_path: Path) -> tuple[float, float]:
    argv = [sys.executable, "-c", PLAIN, model, str(epochs), str(steps), str(batch)]
    procs, started = launch([argv] * workers, env_for(runtime_path), workers)
    out, wall = finish(procs, started, f"plain script ({model}, {workers} worker(s))")
    return steady(json.loads(out.strip().splitlines()[-1])), wall


def ours(model: str, workers: int, epochs: int, steps: int, batch: int, runtime_path: Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "tfjob_worker", "--epochs", str(epochs), "--steps-per-epoch", str(steps),
                "--batch-size-per-replica", str(batch), "--output-dir", f"{tmp}/out", "--backup-dir", f"{tmp}/backup"]
        if model == "conv":
            argv += ["--model", "convnet:model", "--dataset", "convnet:dataset"]
        procs, started = launch([argv] * workers, env_for(runtime_path), workers)
        _, wall = finish(procs, started, f"tfjob_worker ({model}, {workers} worker(s))")
        history = json.loads(Path(f"{tmp}/out/history.json").read_text())
        return steady([row["examples_per_sec"] for row in history]), wall


def interleaved(model: str, workers: int, repeats: int, epochs: int, steps: int, batch: int,
                runtime_path: Path, until: float = math.inf, at_least: int = 1) -> Runs:
    """Pairs in alternating order (ours then plain, plain then ours, ...): a drift in the machine's load, or the
    second run of a pair finding warmer caches, then falls on both sides alike instead of on one. After
    `at_least` pairs, a pair that would end past `until` (monotonic; judged by the last pair's wall) is not run."""
    runs = Runs()
    for repeat in range(repeats):
        if repeat >= at_least and time.monotonic() + runs.ours_wall[-1] + runs.plain_wall[-1] > until:
            print(f"    {repeat} of {repeats} repeats: the next would overrun the budget", flush=True)
            break
        sides = [(ours, runs.ours, runs.ours_wall), (plain, runs.plain, runs.plain_wall)]
        for run, rates, walls in sides if repeat % 2 == 0 else sides[::-1]:
            rate, wall = run(model, workers, epochs, steps, batch, runtime_path)
            rates.append(rate)
            walls.append(wall)
    return runs


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """`median (min..max)`."""
    return (f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}.."
            f"{fmt.format(max(values))})")


def report(label: str, runs: Runs, global_batch: int) -> None:
    step_ms = global_batch / statistics.median(runs.plain) * 1000
    print(f"  {label}: {len(runs.ours)} interleaved repeats; plain step {step_ms:.1f} ms")
    print(f"    plain tf-keras script : {spread(runs.plain)} examples/s  [{', '.join(f'{v:.0f}' for v in runs.plain)}]")
    print(f"    tfjob_worker runtime  : {spread(runs.ours)} examples/s  [{', '.join(f'{v:.0f}' for v in runs.ours)}]")
    print(f"    ratio ours/plain      : {spread(runs.ratios, '{:.3f}')} (per pair, median (min..max)); "
          f"ratio of medians {statistics.median(runs.ours) / statistics.median(runs.plain):.3f}, of bests "
          f"{max(runs.ours) / max(runs.plain):.3f} (load only slows a run down: the best is the least disturbed)")
    print(f"    wall per run          : plain {spread(runs.plain_wall, '{:.1f}')} s, "
          f"ours {spread(runs.ours_wall, '{:.1f}')} s (start-up, validation, backups, SavedModel included)")


def hook_cost(runtime_path: Path, steps: int = 20000) -> float:
    out = subprocess.run([sys.executable, "-c", HOOKS, str(steps)], env=env_for(runtime_path), capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def plot(path: Path, conv: Runs, mwms: Runs, split: dict[str, float] | None) -> None:
    """Throughput of each interleaved repeat (ours, plain) and, when measured, the recovery split."""
    fig, (runs_ax, rec_ax) = figures.subplots(1, 2, figsize=(11, 4.2))
    for label, runs, marker in (("conv net, 1 worker", conv, "o"), ("conv net, 2 workers MWMS", mwms, "s")):
        xs = range(1, len(runs.ours) + 1)
        runs_ax.plot(xs, runs.plain, marker + "--", label=f"plain tf-keras, {label}")
        runs_ax.plot(xs, runs.ours, marker + "-", label=f"tfjob_worker, {label}")
    runs_ax.set_xticks(range(1, len(conv.ours) + 1))
    runs_ax.set_xlabel("repeat (ours, then plain, in turn)")
    runs_ax.set_ylabel("examples/s (steady epochs)")
    runs_ax.set_ylim(bottom=0)
    runs_ax.set_title("throughput per repeat")
    runs_ax.legend(fontsize=7)
    runs_ax.grid(alpha=0.3)
    if split is not None:
        import recovery_time

        left = 0.0
        for part in ("recreate", "launch", "tensorflow", "data", "peer_wait", "join", "build", "restore",
                     "first_step"):
            mine = part in recovery_time.OURS
            rec_ax.barh([0], [split[part]], left=left, hatch="//" if mine else None, edgecolor="black",
                         label=f"{part} {split[part]:.2f} s" + (" (ours)" if mine else ""))
            left += split[part]
        rec_ax.set_yticks([])
        rec_ax.set_xlabel("seconds from the worker's SIGKILL")
        rec_ax.set_title(f"recovery: {split['total']:.1f} s to the first resumed step")
        rec_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    figures.save(fig, path,
                 f"runtime_overhead: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"needs a whole number >= 1 (each stage runs at least once), not {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=at_least_one, default=5, help="interleaved runs of each on the conv net")
    parser.add_argument("--epochs", type=at_least_one, default=4)
    parser.add_argument("--steps", type=at_least_one, default=30, help="steps per epoch on the conv net")
    parser.add_argument("--batch", type=at_least_one, default=32, help="batch per replica")
    parser.add_argument("--mlp-repeats", type=at_least_one, default=1)
    parser.add_argument("--mlp-steps", type=at_least_one, default=200)
    parser.add_argument("--mwms-repeats", type=at_least_one, default=2)
    parser.add_argument("--mwms-steps", type=at_least_one, default=15)
    parser.add_argument("--no-recovery", action="store_true", help="skip the tfjob local kill-and-resume run")
    parser.add_argument("--budget", type=float, default=0.0, metavar="SECONDS",
                        help="wall time for the whole bench: fewer repeats (conv net at least 1) and stages skipped "
                        "when the next would overrun it, judged by the conv net's pairs (0: no limit)")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG: throughput per repeat, recovery split")
    parser.add_argument("--runtime", type=Path, default=REPO / "worker_image",
                        help="directory holding the tfjob_worker package to measure (e.g. another checkout's)")
    a = parser.parse_args()
    began = time.monotonic()
    print(f"runtime_overhead: {os.cpu_count()} CPUs, load average {load()}; runtime from {a.runtime}", flush=True)
    figures: list[str] = []

    def summary(*fields: str, final: bool = False) -> None:
        """The figures so far, after each stage: if `make bench` stops this bench at its share, the last
        SUMMARY line still carries every figure measured (the most wanted come first)."""
        figures.extend(fields)
        print(f"SUMMARY{'' if final else ' (so far)'} {' '.join(figures)}", flush=True)

    # With a budget: the conv net's pairs take up to CONV_SHARE of it; each later stage runs if its cost, in conv
    # pairs (STAGE_PAIRS, measured on 2 cores), fits what is left.
    end = began + a.budget if a.budget else math.inf

    def fits(stage: str) -> bool:
        pair = conv.ours_wall[-1] + conv.plain_wall[-1]
        if time.monotonic() + STAGE_PAIRS[stage] * pair <= end:
            return True
        print(f"  {stage}: skipped, {end - time.monotonic():.0f} s of the {a.budget:.0f} s budget left "
              f"(it takes about {STAGE_PAIRS[stage] * pair:.0f} s here)", flush=True)
        return False

    conv = interleaved("conv", 1, a.repeats, a.epochs, a.steps, a.batch, a.runtime,
                       until=began + CONV_SHARE * (end - began), at_least=1)
    report(f"digits32-cnn (bench/convnet.py), 1 worker, {a.epochs} epochs x {a.steps} steps, batch {a.batch}",
           conv, a.batch)
    print(f"    load average {load()}", flush=True)
    summary(f"ratio={statistics.median(conv.ratios):.3f} ratio_min={min(conv.ratios):.3f} "
            f"ratio_max={max(conv.ratios):.3f} ratio_best={max(conv.ours) / max(conv.plain):.3f} "
            f"step_ms={a.batch / statistics.median(conv.plain) * 1000:.1f}")

    split = None
    if not a.no_recovery and fits("recovery"):
        import recovery_time

        split = recovery_time.measure(REPO / "examples" / "mnist-cpu.yaml")
        recovery_time.print_split(split, recovery_time.cold_tf_import())
        print(f"    load average {load()}", flush=True)
        summary(recovery_time.summary_fields(split))

    mlp = mwms = Runs()
    if fits("mlp"):
        mlp = interleaved("mlp", 1, a.mlp_repeats, a.epochs, a.mlp_steps, a.batch, a.runtime, until=end)
        report(f"digits-mlp, 1 worker, {a.epochs} epochs x {a.mlp_steps} steps, batch {a.batch} "
               "(~1 ms steps: start-up-dominated, the ratio is noise)", mlp, a.batch)
        print(f"    load average {load()}", flush=True)
        summary(f"mlp_ratio={statistics.median(mlp.ratios):.3f}")

    if mlp.ours and fits("mwms"):
        mwms = interleaved("conv", 2, a.mwms_repeats, a.epochs, a.mwms_steps, a.batch, a.runtime, until=end - 5)
        report(f"digits32-cnn, 2 workers MultiWorkerMirroredStrategy (RING, loopback), {a.epochs} epochs x "
               f"{a.mwms_steps} steps, global batch {2 * a.batch}", mwms, 2 * a.batch)
        print(f"    load average {load()}", flush=True)
        hooks = hook_cost(a.runtime)
        conv_step, mlp_step = (a.batch / statistics.median(runs.plain) for runs in (conv, mlp))  # seconds
        print(f"  per-step cost of the runtime's Keras callbacks: {hooks:.1f} us CPU per step "
              f"({hooks * 1e-6 / conv_step * 100:.3f}% of a conv-net step, {hooks * 1e-6 / mlp_step * 100:.2f}% of "
              "an MLP step)", flush=True)
    if a.plot is not None:
        plot(a.plot, conv, mwms, split)
        print(f"  plot: {a.plot}")
    print(f"  {time.monotonic() - began:.0f} s in all; load average {load()}")
    summary(*([f"mwms_ratio={statistics.median(mwms.ratios):.3f} hook_us={hooks:.1f}"] if mwms.ours else []),
            final=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # `make bench` stops a bench at its share with SIGINT: the SUMMARY so far stands
        print("  stopped (SIGINT); the last SUMMARY line has the figures measured so far", flush=True)
        sys.exit(130)
