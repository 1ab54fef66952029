"""Parameter-server mode: ps and worker tasks run a TensorFlow server the chief's coordinator drives."""

from __future__ import annotations

import time
from typing import Any

from . import exit_codes, progress
from .cluster import ClusterView
from .peers import reachable
from .reports import Reporter

CHIEF_GONE_SECONDS = 10.0  # the chief's port refusing connections this long means training ended


def run_server(tf: Any, view: ClusterView, reporter: Reporter, verbose: bool, poll: float = 1.0) -> int:
    """Serve until the chief has come and gone; exit 0 then (so ps/worker pods do not run forever)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=view.role, task_index=view.index,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    progress.emit(f"{progress.PREFIX} server role={view.role} index={view.index} target={server.target}", verbose)
    chief = view.chief_address()
    assert chief is not None
    seen_chief = False
    gone_since: float | None = None
    while True:
        if reachable(chief):
            if not seen_chief:
                seen_chief = True
                reporter.done()
            gone_since = None
        elif seen_chief:
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= CHIEF_GONE_SECONDS:
                progress.emit(f"{progress.PREFIX} chief {chief} is gone: server stopping", verbose)
                return exit_codes.SUCCESS
        time.sleep(poll)
