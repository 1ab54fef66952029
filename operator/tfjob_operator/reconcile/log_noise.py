"""The one list of log lines that never say why a TensorFlow process failed: start-up noise of TensorFlow, CUDA
and XLA, and log lines below error severity.

Every CPU-only worker prints some of these at start (`failed call to cuInit` is an *error* line of a CUDA build that
finds no GPU), so the last line of a log tail is often one of them. `diagnosis` skips them when it picks the line
that says why; `tests/unit/test_log_noise.py` holds a table of real lines (captured from a CPU-only worker start
and from TensorFlow's issue tracker for GPU builds) that each entry must match, and real errors none may match.
Pure; no imports from the rest of the operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A line of TensorFlow's native logging (absl, or glog in older builds): severity I/W/E/F, then either the
#: `MMDD hh:mm:ss.uuuuuu thread` of absl or nothing (older builds put a date first), then `file.cc:NN] text`.
NATIVE_LOG = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?:? )?(?P<severity>[IWEF])"
                        r"(?:\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+)?\s+(?P<source>[\w./+-]+:\d+)\] (?P<text>.*)$")
#: A line of Python's logging in TensorFlow's or absl's format: `WARNING:tensorflow:...`, `INFO:absl:...`.
PY_LOG = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL|FATAL):(?:tensorflow|absl|root):")


@dataclass(frozen=True)
class Noise:
    """One kind of line that never says why: its name and a pattern searched in the (stripped) line."""

    name: str
    pattern: re.Pattern[str]


#: Start-up lines of TensorFlow, CUDA and XLA; one entry each, whatever the severity they are logged at.
STARTUP: tuple[Noise, ...] = (
    Noise("absl-before-init", re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called "
                                         r"are written to STDERR$")),
    Noise("cuinit", re.compile(r"failed call to cuInit")),
    Noise("cuda-drivers-missing", re.compile(r"Could not find cuda drivers on your machine|"
                                             r"kernel driver does not appear to be running on this host")),
    Noise("cuda-factory-registration", re.compile(r"Unable to register cu(?:DNN|FFT|BLAS) factory")),
    Noise("computation-placer", re.compile(r"computation placer already registered")),
    Noise("tensorrt-missing", re.compile(r"TF-TRT Warning: Could not find TensorRT")),
    Noise("onednn", re.compile(r"oneDNN custom operations are on")),
    Noise("cpu-feature-guard", re.compile(r"This TensorFlow binary is optimized to use available CPU instructions|"
                                          r"^To enable the following instructions: .*rebuild TensorFlow with the "
                                          r"appropriate compiler flags\.$")),
    Noise("numa-node", re.compile(r"NUMA node read from SysFS had negative value|could not open file to read NUMA")),
    # The coordination service's "Example stragglers:" info line goes on with bare task names.
    Noise("coordination-stragglers", re.compile(r"^/job:\w+/replica:\d+/task:\d+$")),
)


def severity(line: str) -> str | None:
    """I, W, E or F for a native log line; the level's first letter for a TensorFlow/absl Python log line;
    else None (the line is the program's own)."""
    line = line.strip()
    native = NATIVE_LOG.match(line)
    if native:
        return native["severity"]
    logged = PY_LOG.match(line)
    return logged["level"][0] if logged else None


def noise(line: str) -> Noise | None:
    """The entry a line is noise under, or None for a line that may say why."""
    line = line.strip()
    hit = next((n for n in STARTUP if n.pattern.search(line)), None)
    if hit is not None:
        return hit
    level = severity(line)
    if level in ("I", "W", "D"):  # info, warning, debug: logged below error, so never the cause of a failure
        return BELOW_ERROR
    return None


#: Any native or TensorFlow/absl Python log line below error severity.
BELOW_ERROR = Noise("below-error-severity", NATIVE_LOG)
