"""The thin shell: read the cluster, set up devices and strategy, run the right loop, map failures to exit codes."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from . import cluster, elastic, exit_codes, lifecycle, peers, preemption, progress, reach
from .cluster import ClusterConfigError, ClusterView
from .config import BUILTIN_MODELS, RunConfig, parse_args
from .preemption import Preempted
from .reports import Reporter
from .scaling import CONSTANT_GLOBAL_BATCH, plan_batch
from .stall import StallPolicy
from .startup import StartupClock
from .strategy_choice import StrategyChoice, StrategyChoiceError, choose_strategy


def import_tensorflow(verbose: bool = False) -> tuple[Any, Any]:
    """Import TensorFlow and tf-keras (after prepare_environment has run)."""
    import tensorflow as tf
    import tf_keras as keras

    if not verbose:  # retracing and callback-timing warnings are noise in pod logs
        tf.get_logger().setLevel("ERROR")

    return tf, keras


def build_strategy(tf: Any, choice: StrategyChoice, local_devices: int) -> Any:
    """Construct the chosen tf.distribute strategy (MWMS blocks here until every peer is up)."""
    from .devices import mirrored_device_names

    if choice.kind == "mwms":
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation, choice.collective or "RING")
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if choice.kind == "ps":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    if choice.kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=mirrored_device_names(tf, local_devices))
    if choice.kind == "central-storage":
        return tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=mirrored_device_names(tf, local_devices))
    return tf.distribute.get_strategy()


def load_data_and_model(cfg: RunConfig, view: ClusterView) -> tuple[Any, Any]:
    """(model_fn, Splits) from the built-ins or the user's entry points."""
    from . import data, models

    if cfg.model in BUILTIN_MODELS:
        model_fn = models.BUILTIN[cfg.model]
    else:
        model_fn = models.load_entry_point(cfg.model, "--model")
    if cfg.dataset is None:
        splits = data.digits(cfg.seed, image=cfg.model == "digits-cnn")
    else:
        splits = data.as_splits(models.load_entry_point(cfg.dataset, "--dataset")())
    if cfg.strategy == "independent" and view.world_size > 1:
        splits = data.shard(splits, view.rank or 0, view.world_size)
    return model_fn, splits


def run(cfg: RunConfig, view: ClusterView, startup: StartupClock | None = None) -> int:
    """Train (or serve, or evaluate) as this task's role says; returns the exit code."""
    from .custom_loop import run_custom_loop
    from .devices import configure_devices
    from .evaluator import run_evaluator
    from .fit_loop import run_fit
    from .servers import run_server
    from .training import Job

    startup = startup or StartupClock.from_env()
    independent = cfg.strategy == "independent"
    tf, keras = import_tensorflow(cfg.verbose)
    gpus, local_devices = configure_devices(tf, view.local_rank, view.local_size, cfg.virtual_devices)
    startup.mark("tensorflow")
    if independent:
        choice = StrategyChoice(kind="independent")
    elif view.role == "evaluator":
        choice = StrategyChoice(kind="default")
    else:
        choice = choose_strategy(cfg.strategy, cfg.collective, view, gpus, local_devices)
    for warning in choice.warnings:
        progress.error(f"warning: {warning}")
    reporter = Reporter()
    if choice.kind == "ps" and view.role in ("ps", "worker"):
        return run_server(tf, view, reporter, cfg.verbose)
    tf.keras.utils.set_random_seed(cfg.seed + (view.rank or 0 if independent else 0))
    model_fn, splits = load_data_and_model(cfg, view)
    startup.mark("data")
    if view.role == "evaluator":
        reporter.done()  # the evaluator waits for checkpoints, not for peers
    leader = view.chief_address()
    if choice.kind == "mwms" and leader is not None and leader != view.address:
        peers.wait_reachable(leader)  # TensorFlow's own retry would wait up to 1 s after the leader is up
    strategy = build_strategy(tf, choice, local_devices)
    startup.mark("peers")
    replicas = 1 if choice.kind in ("ps", "independent", "default") else int(strategy.num_replicas_in_sync)
    output_dir, backup_dir = cfg.output_dir, cfg.backup_dir
    writes_outputs = view.is_chief or independent
    if independent and (view.rank or 0) > 0:  # rank 0 keeps the top-level layout; others nest theirs
        output_dir = os.path.join(cfg.output_dir, "ranks", str(view.rank))
        backup_dir = os.path.join(cfg.backup_dir, "ranks", str(view.rank))
    if choice.kind in ("mwms", "mirrored", "default") and view.role != "evaluator":  # may resume at another width
        batch = elastic.plan(os.environ, backup_dir, cfg.batch_size_per_replica, cfg.learning_rate, replicas,
                             view.world_size)
        if writes_outputs:
            elastic.record_reference(backup_dir, batch.reference)
    else:
        batch = plan_batch(CONSTANT_GLOBAL_BATCH, cfg.batch_size_per_replica, cfg.learning_rate, replicas, replicas)
    global_batch = batch.global_batch
    steps = elastic.epoch_steps(splits.num_train, batch, cfg.steps_per_epoch)
    # ParameterServerStrategy's chief has no per-step hooks (only epoch ends): the stall watchdog stays off there.
    reporter.describe(trains=view.role != "evaluator" and choice.kind != "ps", rank=view.rank,
                      world_size=view.world_size,
                      strategy=choice.class_name, collective=choice.collective,
                      device_kind="gpu" if gpus else "cpu", device_count=local_devices,
                      epochs=cfg.epochs, steps_per_epoch=steps)
    if choice.kind != "ps":  # MWMS's constructor returns only once every peer has joined
        reporter.done()
    job = Job(
        cfg=cfg, view=view, choice=choice, strategy=strategy, model_fn=model_fn, splits=splits,
        global_batch=global_batch,
        steps_per_epoch=steps,
        base_lr=cfg.learning_rate, target_lr=batch.learning_rate, batch=batch,
        reporter=reporter, writes_outputs=writes_outputs, output_dir=output_dir, backup_dir=backup_dir,
        prints=(view.is_chief or view.role == "evaluator") or cfg.verbose, startup=startup,
    )
    try:
        if view.role == "evaluator":
            run_evaluator(job, tf, keras)
            return exit_codes.SUCCESS
        progress.emit(progress.format_start(view.role, view.index, view.world_size, choice.class_name,
                                            choice.collective, global_batch, job.target_lr), job.prints)
        (run_custom_loop if cfg.custom_loop else run_fit)(job, tf, keras)
        if writes_outputs:  # the job is done: a new run in this directory starts from its own width
            elastic.forget_reference(backup_dir)
    finally:
        job.cleanup()
    return exit_codes.SUCCESS


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tfjob_worker`: never returns normally; exits with a code from exit_codes."""
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args(args)  # exits 2 on a usage error
    if os.environ.get(lifecycle.CHILD_ENV) != "1":
        try:  # an elastic job learns now, not at its first resize, that a width it may run at cannot train
            elastic.check_widths(os.environ, cfg.batch_size_per_replica, cfg.learning_rate)
        except ValueError as exc:
            progress.error(f"{exc}")
            lifecycle.exit_now(exit_codes.USER_ERROR)
        stall = StallPolicy(timeout=cfg.stall_timeout, first_step_grace=cfg.first_step_grace)
        # Peers this pod can never reach are said within seconds (reach), not after the start-up timeout.
        check = reach.start_check() if cfg.strategy != "independent" else None
        lifecycle.exit_now(lifecycle.supervise(args, cfg.startup_timeout, stall, cfg.metrics_port, check))
    startup = StartupClock.from_env()
    startup.mark("launch")
    lifecycle.die_with_supervisor()
    lifecycle.dump_stacks_on_sigusr1()
    lifecycle.hang_on_sigusr2()
    lifecycle.prepare_environment(os.environ, cfg.verbose)
    try:
        preemption.process_signal()  # SIGTERM exits at once until a training loop takes it over
        view = cluster.from_env(port_base=cfg.slurm_port_base)
        if view.source == "slurm":  # TensorFlow's resolvers read TF_CONFIG
            os.environ["TF_CONFIG"] = view.tf_config()
        if cfg.strategy == "independent":  # each rank on its own: TensorFlow must not see the cluster
            os.environ.pop("TF_CONFIG", None)
        code = run(cfg, view, startup)
    except Preempted as exc:  # every worker agreed to stop after the same step (and saved if it fitted)
        code = exit_codes.PREEMPTED
        progress.error(f"{exc}; exit {code}, retryable: the gang resumes from the last backup")
    except (ClusterConfigError, StrategyChoiceError, ValueError, TypeError) as exc:
        code = exit_codes.classify_exception(exc)
        progress.error(f"{exc}")
        if cfg.verbose or code != exit_codes.USER_ERROR:
            traceback.print_exc()
    except BaseException as exc:
        code = exit_codes.classify_exception(exc)
        if code == exit_codes.PEER_LOST:
            progress.error(f"lost a peer ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                           f"exit {code}, retryable: the gang restarts and resumes from the backup")
        else:
            progress.error(f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
    lifecycle.exit_now(code)
    return code  # not reached
