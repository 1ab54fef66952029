"""`make bench`'s runner: figures from each bench's SUMMARY line judged against the goals, and benches that fail
or outlive their share reported as such (sample outputs and tiny stand-in bench scripts; no timings asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import run_all
from run_all import Bench, Figure, Goal, Outcome

pytestmark = pytest.mark.timeout(120)

OPERATOR_SWEEP = """\
operator_scale: 100 TFJobs x 4 workers (pods exit 0 at once), local control plane, 2 CPUs
  submit -> all pods created: p50 0.63s  p99 2.59s  (100 jobs)
sweep: N TFJobs x 4 workers   created p50/p99 s
SUMMARY workers=4 jobs100_created_p99=0.80s jobs100_requests_per_job=15.9 jobs100_requests_floor=14 \
jobs1000_created_p99=7.10s jobs1000_requests_per_job=13.2 jobs1000_requests_floor=14 jobs1000_peak_rss_mib=162 \
jobs1000_succeeded=89/1000 jobs100_created_floor=0.50s jobs1000_created_floor=6.0s
"""
# local_scale's line mixes prose goals into its figures; the parser keeps the key=value pairs only.
LOCAL_SCALE = """\
local_scale: 2 CPUs
SUMMARY pods=10000 first_bucket=5.00ms last_bucket=7.90ms ratio=1.58 (goal <=1.2; cpu ratio 2.11) total=49.0s \
(goal <=10s) get_p99_burst_250x4=42.5ms (goal <=50ms) goals NOT met
"""
CRASHED = """\
Traceback (most recent call last):
  File "bench/gang_replay.py", line 1, in <module>
FileNotFoundError: [Errno 2] No such file or directory: 'trace.csv'
"""

FIGURES = (
    Figure("operator_scale", "jobs100_created_p99", "100x4 created p99", Goal("<=", 1.0, "s")),
    Figure("operator_scale", "jobs1000_created_p99", "1000x4 created p99", Goal("<=", 5.0, "s")),
    Figure("operator_scale", "jobs1000_requests_per_job", "1000x4 requests/job", Goal("<=", "jobs1000_requests_floor")),
    Figure("operator_scale", "jobs1000_peak_rss_mib", "1000x4 RSS", Goal("<", 200.0)),
    Figure("operator_scale", "jobs1000_succeeded", "1000x4 Succeeded", Goal("all")),
    Figure("operator_scale", "jobs250_created_p99", "250x4 created p99"),
    Figure("operator_scale", "jobs100_requests_per_job", "100x4 requests/job"),
    Figure("operator_scale", "jobs100_created_p99", "100x4 created p99 vs floor",
           Goal("<=", 1.5, floor="jobs100_created_floor")),
    Figure("operator_scale", "jobs1000_created_p99", "1000x4 created p99 vs floor",
           Goal("<=", 1.5, floor="jobs1000_created_floor")),
    Figure("operator_scale", "jobs250_created_p99", "250x4 created p99 vs floor",
           Goal("<=", 1.5, floor="jobs250_floor")),
    Figure("local_scale", "total", "10,000 creates vs floor", Goal("<=", 1.5, floor="total_floor")),
    Figure("local_scale", "total", "10,000 creates", Goal("<=", 10.0, "s")),
    Figure("local_scale", "get_p99_burst_*", "GET p99 burst", Goal("<=", 0.05, "s")),
    Figure("gang_replay", "admission_pass_g8", "admission pass", Goal("<=", 50.0, "ms")),
    Figure("runtime_overhead", "ratio", "runtime ratio", Goal(">=", 0.98)),
)


def outcomes() -> dict[str, Outcome]:
    return {
        "operator_scale": Outcome("operator_scale", 300, 1, share=330, summary=run_all.parse_summary(OPERATOR_SWEEP)),
        "local_scale": Outcome("local_scale", 90, 0, share=150, summary=run_all.parse_summary(LOCAL_SCALE)),
        "gang_replay": Outcome("gang_replay", 2, 1, share=150, summary=run_all.parse_summary(CRASHED)),
        "runtime_overhead": Outcome("runtime_overhead", 240, -9, timed_out=True, share=240),
    }


def rows_by_label() -> dict[str, run_all.Row]:
    return {r.label: r for r in run_all.table(outcomes(), FIGURES)}


def test_summary_keeps_the_key_value_figures_of_the_last_summary_line():
    assert run_all.parse_summary("SUMMARY a=1\nmore output\nSUMMARY a=2 b=3ms\n") == {"a": "2", "b": "3ms"}
    summary = run_all.parse_summary(LOCAL_SCALE)
    assert summary["ratio"] == "1.58"
    assert summary["total"] == "49.0s"
    assert "goal" not in summary
    assert run_all.parse_summary(CRASHED) == {}


@pytest.mark.parametrize(
    "label, value, goal, verdict",
    [
        ("100x4 created p99", "0.80s", "<= 1 s", "met; bench failed (exit 1)"),
        ("1000x4 created p99", "7.10s", "<= 5 s", "NOT met; bench failed (exit 1)"),
        ("1000x4 requests/job", "13.2", "<= 14", "met; bench failed (exit 1)"),
        ("1000x4 RSS", "162", "< 200", "met; bench failed (exit 1)"),
        ("1000x4 Succeeded", "89/1000", "all", "NOT met; bench failed (exit 1)"),
        ("250x4 created p99", "-", "-", "failed (exit 1)"),
        ("100x4 requests/job", "15.9", "-", "-; bench failed (exit 1)"),
        ("10,000 creates", "49.0s", "<= 10 s", "NOT met"),
        # A time judged as a ratio to the floor the bench measured in the same run: the row shows both.
        ("100x4 created p99 vs floor", "0.80s = 1.60 x floor", "<= 1.5 x floor (0.50s)",
         "NOT met; bench failed (exit 1)"),
        ("1000x4 created p99 vs floor", "7.10s = 1.18 x floor", "<= 1.5 x floor (6.0s)", "met; bench failed (exit 1)"),
        ("250x4 created p99 vs floor", "-", "<= 1.5 x floor (?)", "failed (exit 1)"),
        ("10,000 creates vs floor", "49.0s", "<= 1.5 x floor (?)", "no total_floor in its SUMMARY"),
        ("GET p99 burst", "42.5ms", "<= 0.05 s", "met"),
        ("admission pass", "-", "<= 50 ms", "failed (exit 1)"),
        ("runtime ratio", "-", ">= 0.98", "exceeded its share of 240 s (stopped)"),
    ],
)
def test_each_figure_is_judged_against_its_goal_or_says_why_it_has_none(label, value, goal, verdict):
    row = rows_by_label()[label]
    assert (row.value, row.goal, row.verdict) == (value, goal, verdict)


def test_a_figure_missing_from_a_bench_that_ran_is_named():
    ran = {"local_scale": Outcome("local_scale", 90, 0, share=150, summary={"total": "9.0s"})}
    (row,) = run_all.table(ran, [Figure("local_scale", "ratio", "ratio", Goal("<=", 1.2))])
    assert row.verdict == "no ratio in its SUMMARY"


def test_a_floor_in_other_units_or_a_zero_floor_gives_no_ratio():
    assert run_all.floor_ratio("1.2s", "400ms") == pytest.approx(3.0)
    assert run_all.floor_ratio("12.0h", "10.0h") == pytest.approx(1.2)
    assert run_all.floor_ratio("1.2s", "3 MiB") is None
    assert run_all.floor_ratio("1.2s", "0s") is None
    assert run_all.floor_ratio("n/a", "1s") is None


def test_the_summary_table_lists_every_figure_and_how_each_bench_ran():
    text = run_all.render(run_all.table(outcomes(), FIGURES), list(outcomes().values()), "header line")
    assert text.startswith("header line\n")
    assert "| 1000x4 created p99 | 7.10s | <= 5 s | NOT met; bench failed (exit 1) |" in text
    assert "| gang_replay | 2 | 150 | failed (exit 1) |" in text
    assert "| runtime_overhead | 240 | 240 | exceeded its share of 240 s (stopped) |" in text


STAND_INS = {
    "good": "print('figures', flush=True)\nprint('SUMMARY speed=3.5ms')\n",
    "broken": "import sys\nprint('half the figures', flush=True)\nsys.exit('trace file missing')\n",
    "stuck": "import time\nprint('SUMMARY partial=1', flush=True)\ntime.sleep(600)\n",
}


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    for name, code in STAND_INS.items():
        (tmp_path / f"{name}.py").write_text(code)
    (tmp_path / "results").mkdir()
    return tmp_path


def test_runner_keeps_each_bench_output_and_goes_on_after_a_failure_or_an_overrun(stand_ins: Path):
    results = stand_ins / "results"
    echoed: list[str] = []
    ran = {
        b.name: run_all.run(b, results, echoed.append, script_dir=stand_ins)
        for b in (Bench("broken", (), 60, ""), Bench("stuck", (), 1, ""), Bench("good", (), 60, ""))
    }
    assert ran["broken"].status() == "failed (exit 1)"
    assert "trace file missing" in (results / "broken.txt").read_text()
    assert ran["stuck"].timed_out
    assert ran["stuck"].status() == "exceeded its share of 1 s (stopped)"
    assert ran["stuck"].summary == {"partial": "1"}
    assert ran["good"].ok
    assert ran["good"].summary == {"speed": "3.5ms"}
    assert "figures\n" in echoed
    assert "SUMMARY speed=3.5ms" in (results / "good.txt").read_text()


def test_make_bench_runs_every_benchmark_script_in_bench():
    scripts = {p.stem for p in Path(run_all.BENCH_DIR).glob("*.py") if '__name__ == "__main__"' in p.read_text()}
    run = {b.name for b in run_all.BENCHES} | set(run_all.RUN_BY) | set(run_all.RUN_ALONE)
    assert scripts - {"run_all"} <= run
    assert {f.bench for f in run_all.FIGURES} <= {b.name for b in run_all.BENCHES}
