"""Command-line flags -> RunConfig. Pure (argparse only)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .stall import DEFAULT_FIRST_STEP_GRACE
from .strategy_choice import COLLECTIVES, STRATEGIES

BUILTIN_MODELS = ("digits-mlp", "digits-cnn")
#: Environment variables the operator sets from the TFJob (flags win over them).
STALL_TIMEOUT_ENV = "TFJOB_STALL_TIMEOUT_SECONDS"
FIRST_STEP_GRACE_ENV = "TFJOB_FIRST_STEP_GRACE_SECONDS"
METRICS_PORT_ENV = "TFJOB_WORKER_METRICS_PORT"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs to know, parsed once from flags and environment."""

    model: str
    dataset: str | None
    optimizer: str
    loss: str
    epochs: int
    steps_per_epoch: int | None
    batch_size_per_replica: int
    learning_rate: float
    warmup_epochs: float
    strategy: str
    collective: str
    custom_loop: bool
    output_dir: str
    backup_dir: str
    checkpoint_every_steps: int | None
    startup_timeout: float
    virtual_devices: int
    verbose: bool
    seed: int
    slurm_port_base: int | None
    evaluator_poll_seconds: float
    log_every_steps: int | None
    stall_timeout: float
    first_step_grace: float
    metrics_port: int


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port 0-65535, got {value}")
    return value


def _entry_point_or_builtin(text: str) -> str:
    if text in BUILTIN_MODELS or ":" in text:
        return text
    raise argparse.ArgumentTypeError(f"expected {' or '.join(BUILTIN_MODELS)} or module:function, got {text!r}")


def _entry_point(text: str) -> str:
    if ":" not in text:
        raise argparse.ArgumentTypeError(f"expected module:function, got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `python -m tfjob_worker`."""
    p = argparse.ArgumentParser(
        prog="python -m tfjob_worker",
        description="Train a tf-keras model on the cluster described by TF_CONFIG (or Slurm variables).",
        epilog="Exit codes: 0 ok; 1 user/config error; 2 usage; 143 SIGTERM; 200 peer lost; 201 start-up timeout; "
               "202 stalled.",
    )
    p.add_argument("--model", type=_entry_point_or_builtin, default="digits-mlp",
                   help="digits-mlp, digits-cnn, or module:function returning an uncompiled tf_keras model")
    p.add_argument("--dataset", type=_entry_point, default=None,
                   help="module:function returning a Splits of numpy arrays or tf.data datasets "
                        "(default: digits for the built-in models)")
    p.add_argument("--optimizer", default="adam", help="tf_keras optimizer name, or module:function (default adam)")
    p.add_argument("--loss", default="sparse_categorical_crossentropy",
                   help="tf_keras loss name, or module:function (default sparse_categorical_crossentropy)")
    p.add_argument("--epochs", type=_positive_int, default=5)
    p.add_argument("--steps-per-epoch", type=_positive_int, default=None,
                   help="default: training examples // global batch")
    p.add_argument("--batch-size-per-replica", type=_positive_int, default=32)
    p.add_argument("--learning-rate", type=float, default=0.001,
                   help="base LR for one replica; scaled linearly by the replicas in sync")
    p.add_argument("--warmup-epochs", type=_non_negative_float, default=0.0,
                   help="ramp the LR from the base to the scaled value over this many epochs")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto")
    p.add_argument("--collective", choices=COLLECTIVES, default="auto",
                   help="MWMS communication: NCCL when GPUs are visible, RING otherwise (auto)")
    p.add_argument("--custom-loop", action="store_true", help="train with strategy.run instead of model.fit")
    p.add_argument("--output-dir", default=None,
                   help="where the chief writes results (default: $TFJOB_OUTPUT_DIR, else ./tfjob-output)")
    p.add_argument("--backup-dir", default=None,
                   help="BackupAndRestore directory shared by all workers (default <output-dir>/backup)")
    p.add_argument("--checkpoint-every-steps", type=_positive_int, default=None,
                   help="back up every N steps (default: once per epoch)")
    p.add_argument("--startup-timeout", type=_non_negative_float, default=300.0,
                   help="seconds to wait for all peers before exiting 201 (0 = wait forever)")
    p.add_argument("--virtual-devices", type=_positive_int, default=1,
                   help="split the first device into N logical devices (to test multi-device code on one)")
    p.add_argument("--verbose", action="store_true", help="progress from every worker and TensorFlow's logs")
    p.add_argument("--seed", type=int, default=42, help="seed for data split, shuffling and initial weights")
    p.add_argument("--slurm-port-base", type=int, default=None,
                   help="first port for Slurm-launched tasks (default $TFJOB_SLURM_PORT_BASE or 8888)")
    p.add_argument("--evaluator-poll-seconds", type=_non_negative_float, default=2.0,
                   help="evaluator role: how often to look for a new chief checkpoint")
    p.add_argument("--log-every-steps", type=_positive_int, default=None,
                   help="also print a step line every N steps (off by default: a per-step hook costs "
                        "throughput on small models)")
    p.add_argument("--stall-timeout", type=_non_negative_float, default=None,
                   help="exit 202 (retryable) when training makes no progress this many seconds "
                        "(default $TFJOB_STALL_TIMEOUT_SECONDS, else 0 = off)")
    p.add_argument("--first-step-grace", type=_non_negative_float, default=None,
                   help="allowance for the first step after start-up: compilation, restore "
                        f"(default $TFJOB_FIRST_STEP_GRACE_SECONDS, else {DEFAULT_FIRST_STEP_GRACE:g})")
    p.add_argument("--metrics-port", type=_port, default=None,
                   help=f"serve Prometheus /metrics on this port (default ${METRICS_PORT_ENV}, else 0 = off)")
    return p


def batch_size_flag(argv: Sequence[str]) -> int | None:
    """--batch-size-per-replica as `python -m tfjob_worker ARGV` would read it (its default when absent), or None
    when ARGV would not parse it (argparse then says so at start). For the operator, which checks an elastic
    job's widths against its container's arguments at admission."""
    value: str | None = None
    for i, token in enumerate(argv):
        if token == "--batch-size-per-replica" and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith("--batch-size-per-replica="):
            value = token.partition("=")[2]
    if value is None:
        return int(build_parser().get_default("batch_size_per_replica"))
    try:
        return _positive_int(value)
    except (ValueError, argparse.ArgumentTypeError):
        return None


def _env_number(env: Mapping[str, str], name: str, default: float, parse: type = float) -> float:
    """A number from the environment; a bad value is a usage error naming the variable."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = parse(text)
    except ValueError:
        value = -1
    if value < 0:
        build_parser().error(f"environment variable {name}={text!r}: expected a number >= 0")
    return float(value)


def parse_args(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> RunConfig:
    """Parse flags (exits 2 on a usage error, as argparse does) and fill defaults from env."""
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    output_dir = os.path.abspath(args.output_dir or env.get("TFJOB_OUTPUT_DIR") or "./tfjob-output")
    backup_dir = os.path.abspath(args.backup_dir or os.path.join(output_dir, "backup"))
    if args.dataset is None and args.model not in BUILTIN_MODELS:
        build_parser().error("--dataset module:function is required with a user --model")
    return RunConfig(
        model=args.model,
        dataset=args.dataset,
        optimizer=args.optimizer,
        loss=args.loss,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        batch_size_per_replica=args.batch_size_per_replica,
        learning_rate=args.learning_rate,
        warmup_epochs=args.warmup_epochs,
        strategy=args.strategy,
        collective=args.collective,
        custom_loop=args.custom_loop,
        output_dir=output_dir,
        backup_dir=backup_dir,
        checkpoint_every_steps=args.checkpoint_every_steps,
        startup_timeout=args.startup_timeout,
        virtual_devices=args.virtual_devices,
        verbose=args.verbose,
        seed=args.seed,
        slurm_port_base=args.slurm_port_base,
        evaluator_poll_seconds=args.evaluator_poll_seconds,
        log_every_steps=args.log_every_steps,
        stall_timeout=args.stall_timeout if args.stall_timeout is not None
        else _env_number(env, STALL_TIMEOUT_ENV, 0.0),
        first_step_grace=args.first_step_grace if args.first_step_grace is not None
        else _env_number(env, FIRST_STEP_GRACE_ENV, DEFAULT_FIRST_STEP_GRACE),
        metrics_port=args.metrics_port if args.metrics_port is not None
        else int(_env_number(env, METRICS_PORT_ENV, 0, int)),
    )
