"""The trainer → supervisor reports, the stall rule, and the /metrics they become (no TensorFlow)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tfjob_worker import config
from tfjob_worker.metrics import Identity, ReportCollector
from tfjob_worker.reports import STEP_BUCKETS, LineReader, Report, Reporter
from tfjob_worker.stall import StallPolicy, stall_reason

TRAINING = Report(started=True, trains=True, steps=40, epoch=2, global_step=40)
FIRST_STEP_PENDING = Report(started=True, trains=True, steps=0)
PS_SERVER = Report(started=True, trains=False)
STARTING = Report(started=False, trains=True)
FINISHING = Report(started=True, trains=True, steps=60, epoch=3, global_step=60, finishing=True)

STALL_RULES = [
    # policy,                       report,             now, started_at, progress_at, stalled?
    (StallPolicy(0),                TRAINING,           999, 0, 0,   False),  # off by default
    (StallPolicy(30),               TRAINING,           129, 0, 100, False),
    (StallPolicy(30),               TRAINING,           130, 0, 100, True),
    (StallPolicy(30),               STARTING,           999, None, None, False),  # the start-up timeout's job
    (StallPolicy(30),               PS_SERVER,          999, 0, 0,   False),  # runs no steps: never stalls
    (StallPolicy(30, 600),          FIRST_STEP_PENDING, 599, 0, 0,   False),  # compiling / restoring
    (StallPolicy(30, 600),          FIRST_STEP_PENDING, 600, 0, 0,   True),
    (StallPolicy(900, 600),         FIRST_STEP_PENDING, 899, 0, 0,   False),  # grace is at least the timeout
    (StallPolicy(30),               None,               999, 0, 0,   False),
    (StallPolicy(30),               FINISHING,          999, 0, 0,   False),  # evaluating and exporting: no steps
]


@pytest.mark.parametrize(("policy", "report", "now", "started_at", "progress_at", "stalled"), STALL_RULES)
def test_stall_rule(policy, report, now, started_at, progress_at, stalled):
    assert (stall_reason(policy, report, now, started_at, progress_at) is not None) is stalled


def test_stall_reason_says_how_long_and_where_it_stopped():
    reason = stall_reason(StallPolicy(30), TRAINING, 131, 0, 100)
    assert reason == "no training progress for 31s (stall timeout 30s; last at epoch 2 step 40)"


def test_reports_survive_being_split_across_pipe_reads_and_only_the_newest_counts():
    reader = LineReader()
    first, second = Report(steps=1).to_line(), Report(steps=2).to_line()
    assert reader.feed(first[:10]) is None
    assert reader.feed(first[10:] + second[:5]) == Report(steps=1)
    assert reader.feed(second[5:] + b"not json\n") == Report(steps=2)


def test_reporter_counts_steps_epochs_and_checkpoints_across_a_resume():
    reporter = Reporter(fd=None, clock=lambda: 1000.0)
    reporter.describe(trains=True, rank=0, world_size=2, strategy="MWMS", collective="RING", device_kind="cpu",
                      device_count=1, epochs=3, steps_per_epoch=10)
    reporter.done()
    reporter.epoch_begin(2)  # resumed: epoch 1 ran before the restart
    for step in (1, 2, 3):
        reporter.step_end(step)
    reporter.checkpoint_saved()
    r = reporter.report
    assert (r.started, r.steps, r.global_step, r.epoch, r.last_checkpoint) == (True, 3, 13, 2, 1000.0)
    assert sum(r.step_buckets) == 2  # the first step of an epoch is not timed
    reporter.epoch_end({"loss": 0.5, "examples_per_sec": 100.0}, 100.0)
    assert (r.global_step, r.metrics, r.examples_per_sec) == (20, {"loss": 0.5}, 100.0)


def _families(report: Report) -> dict[str, list]:
    collector = ReportCollector(Identity("mnist", "worker", "0"), stall_timeout=60)
    collector.update(report)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_metrics_carry_job_replica_labels_and_nothing_per_step():
    buckets = [0] * (len(STEP_BUCKETS) + 1)
    buckets[3], buckets[-1] = 5, 1  # five steps of 25-50 ms, one over a minute
    report = Report(started=True, trains=True, rank=0, world_size=4, collective="NCCL", device_kind="gpu",
                    device_count=2, steps=6, epoch=1, epochs=3, metrics={"loss": 0.3, "accuracy": 0.9},
                    step_buckets=buckets, step_seconds_sum=62.0, last_checkpoint=1.5e9)
    families = _families(report)
    for samples in families.values():
        for sample in samples:
            assert {"tfjob": "mnist", "replica_type": "worker", "replica_index": "0"}.items() <= sample.labels.items()
    assert {s.labels["metric"]: s.value for s in families["tfjob_worker_metric"]} == {"loss": 0.3, "accuracy": 0.9}
    histogram = {s.labels.get("le"): s.value for s in families["tfjob_worker_step_seconds"]
                 if s.name.endswith("_bucket")}
    assert (histogram["0.025"], histogram["0.05"], histogram["60.0"], histogram["+Inf"]) == (0, 5, 5, 6)
    assert families["tfjob_worker_steps"][0].value == 6
    assert families["tfjob_worker_info"][0].labels["collective"] == "NCCL"
    assert families["tfjob_worker_devices"][0].value == 2
    assert families["tfjob_worker_last_checkpoint_timestamp_seconds"][0].value == 1.5e9


def test_stall_timeout_and_metrics_port_come_from_the_environment_and_flags_win():
    env = {"TFJOB_STALL_TIMEOUT_SECONDS": "120", "TFJOB_WORKER_METRICS_PORT": "9464"}
    cfg = config.parse_args([], env=env)
    assert (cfg.stall_timeout, cfg.first_step_grace, cfg.metrics_port) == (120.0, 600.0, 9464)
    assert config.parse_args(["--stall-timeout", "0"], env=env).stall_timeout == 0
    assert config.parse_args([], env={}).stall_timeout == 0  # off by default


def test_a_bad_stall_timeout_in_the_environment_is_a_usage_error_naming_the_variable(capsys):
    with pytest.raises(SystemExit) as exit_info:
        config.parse_args([], env={"TFJOB_STALL_TIMEOUT_SECONDS": "soon"})
    assert exit_info.value.code == 2
    assert "TFJOB_STALL_TIMEOUT_SECONDS='soon': expected a number >= 0" in capsys.readouterr().err
