"""Where a trainer that makes no progress is blocked: in its own code, or inside TensorFlow.

In a synchronous gang (MultiWorkerMirroredStrategy) one hung worker stops every other at the next collective, so
all of them stop at the same step, and each one's stall watchdog fires. Step counts cannot tell them apart; where
each one waits can. A worker whose main thread waits in Python code outside TensorFlow (a callback, a signal
handler, a lock), or whose graph waits on a Python function it called (a `py_function`, `numpy_function` or
`Dataset.from_generator`: their code runs on TensorFlow's threads), stopped on its own. A worker whose threads are
all inside TensorFlow's executor waits there: for its peers in a collective, or for TensorFlow's own input
pipeline or device, which this cannot tell apart. The reporter thread (`reports.Reporter`) looks when the trainer
has been idle a while; the stall watchdog says what it saw, and the operator blames the worker stopped in its own
code (docs/worker.md, "Stall watchdog"). Pure over the stacks, except `sample`.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from collections.abc import Mapping, Sequence
from types import FrameType

#: (file, line, function), innermost last, as traceback.extract_stack gives them.
Frame = tuple[str, int, str]
OWN = "own"
TENSORFLOW = "tensorflow"
_STDLIB = tuple(os.path.realpath(p) + os.sep for p in {sysconfig.get_paths()["stdlib"],
                                                       sysconfig.get_paths()["platstdlib"]})
# A Python function the graph calls (py_function, numpy_function, from_generator) runs under this module.
_SCRIPT_OPS = os.path.join("tensorflow", "python", "ops", "script_ops.py")


def _tensorflow(filename: str) -> bool:
    return f"{os.sep}tensorflow{os.sep}" in filename


def _stdlib(filename: str) -> bool:
    if filename.startswith(("<frozen", "<string>")):
        return True
    path = os.path.realpath(filename)
    return path.startswith(_STDLIB) and f"{os.sep}site-packages{os.sep}" not in path


def _innermost_own_or_tf(stack: Sequence[Frame]) -> Frame | None:
    """The innermost frame that is not the standard library's (a wait in threading.py is its caller's wait)."""
    return next((f for f in reversed(stack) if not _stdlib(f[0])), None)


def where(frame: Frame) -> str:
    """`dir/file.py:47 in stall_here`."""
    filename, line, function = frame
    short = os.path.join(os.path.basename(os.path.dirname(filename)), os.path.basename(filename))
    return f"{short}:{line} in {function}"


def classify(stacks: Mapping[int, Sequence[Frame]], main: int) -> tuple[str, str]:
    """(OWN, where) when a Python function the graph called, or the main thread, waits in code outside TensorFlow;
    (TENSORFLOW, "") when the main thread waits inside TensorFlow's executor and nothing of its own runs; ("", "")
    without a main thread."""
    for ident, stack in stacks.items():
        if ident != main and any(f[0].endswith(_SCRIPT_OPS) for f in stack):
            inner = _innermost_own_or_tf(stack)
            if inner is not None and not _tensorflow(inner[0]):
                return OWN, where(inner)
    inner = _innermost_own_or_tf(stacks.get(main, ()))
    if inner is None:
        return "", ""
    return (TENSORFLOW, "") if _tensorflow(inner[0]) else (OWN, where(inner))


def sample() -> tuple[str, str]:
    """`classify` this process's threads now."""
    stacks = {}
    for ident, frame in sys._current_frames().items():
        stack: list[Frame] = []
        current: FrameType | None = frame
        while current is not None:  # no source lines read: this runs in a trainer that may be training
            stack.append((current.f_code.co_filename, current.f_lineno or 0, current.f_code.co_name))
            current = current.f_back
        stacks[ident] = stack[::-1]
    main = threading.main_thread().ident
    return classify(stacks, main if main is not None else -1)
