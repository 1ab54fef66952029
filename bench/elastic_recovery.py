"""Capacity loss -> an elastic gang training again at the narrower width, split by where the time goes.

Runs `tfjob local examples/mnist-elastic.yaml --lose-node-after 0` on 4 local nodes (one worker each; the real
local control plane, operator and worker runtime): the node of one worker is lost right after the chief's first
epoch. `tfjob local` notes the loss, the operator's restart (the gang's Restarting condition: Resized 4 -> 3), and
the resumed chief's `[tfjob] ready` line, and splits the time from the loss to the first step at 3 workers into
  - detection: node lost -> the operator restarts the gang (the peers exit 'peer lost' at once; the operator
    waits for the cause, the node found lost after the node monitor grace tfjob local uses, 6 s),
  - restart: the gang restarted -> the new chief's process started (pods deleted, created at 3, admitted, run;
    0 when it is under tfjob local's 0.5 s poll tick: the survivors had exited already),
  - TF start: that process -> its first step, less the restore (TensorFlow import, peers, model build),
  - restore: the backup read (model, optimizer, progress) and the input made.
It stops `tfjob local` once training runs again (the rest of the job is not measured).

    python bench/elastic_recovery.py [--manifest examples/mnist-elastic.yaml]

Also the timeline from the loss, each step in seconds since it: the node found NotReady (the node monitor grace),
the gang restarted (the operator saw the lost node's pod evicted), the new, narrower gang Running, its first step.
Ends with `SUMMARY not_ready_s=... restarted_s=... running_s=... first_step_s=... detection_s=... restart_s=...
tf_start_s=... restore_s=... total_s=... width=3 load=...` (load: the 1-minute load average at the end).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = "4x{cpu:1,memory:2Gi}"
RECOVERY = re.compile(r"training again ([\d.]+)s after the loss \(detection ([\d.]+)s, restart ([\d.]+)s, "
                      r"TF start ([\d.]+)s, restore ([\d.]+)s\)")
RESIZED = re.compile(r"Resized: (\d+) → (\d+) workers")
TIMELINE = re.compile(r"timeline from the loss: (.*)$")
MARK = re.compile(r"(node NotReady|gang restarted|new gang Running|first step) \+([\d.]+)s")
KEYS = {"node NotReady": "not_ready_s", "gang restarted": "restarted_s", "new gang Running": "running_s",
        "first step": "first_step_s"}


def measure(manifest: Path, timeout: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="elastic-recovery-") as work:
        cmd = [sys.executable, "-m", "tfjob_operator", "local", str(manifest), "--plain", "--nodes", NODES,
               "--workdir", work, "--lose-node-after", "0", "--timeout", str(timeout)]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        width, found, marks = 0, None, {}
        deadline = time.monotonic() + timeout
        try:
            for line in proc.stdout:
                print(line, end="", flush=True)
                if m := RESIZED.search(line):
                    width = int(m.group(2))
                if m := RECOVERY.search(line):
                    found = [float(v) for v in m.groups()]
                if m := TIMELINE.search(line):
                    marks = {KEYS[what]: float(at) for what, at in MARK.findall(m.group(1))}
                    break
                if time.monotonic() > deadline:
                    break
        finally:
            proc.send_signal(signal.SIGINT)  # tfjob local stops the operator and every pod
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if found is None:
            raise SystemExit("training never ran again after the node loss (see the output above)")
        total, detection, restart, tf_start, restore = found
        return {**marks, "detection_s": detection, "restart_s": restart, "tf_start_s": tf_start,
                "restore_s": restore, "total_s": total, "width": width}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, default=REPO / "examples" / "mnist-elastic.yaml")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    started = time.monotonic()
    figures = measure(args.manifest, args.timeout)
    figures["run_s"] = time.monotonic() - started
    figures["load"] = os.getloadavg()[0]
    print("SUMMARY " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
