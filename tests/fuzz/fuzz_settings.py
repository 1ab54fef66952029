"""Fuzz tier settings: a fixed seed and a modest number of examples in CI; more on demand.

    TFJOB_FUZZ_EXAMPLES=2000 pytest tests/fuzz          # more generated documents per test (default 200)
    TFJOB_FUZZ_SEED=7 pytest tests/fuzz                  # another fixed sequence
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Generated documents per in-process test; the subprocess and operator tests take a fraction of it.
EXAMPLES = int(os.environ.get("TFJOB_FUZZ_EXAMPLES", "200"))
SEED = int(os.environ.get("TFJOB_FUZZ_SEED", "20261124"))

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # timings are noisy on a shared machine; hangs are caught by subprocess and test timeouts
    database=None,  # a fixed seed, not examples remembered from earlier runs, decides what runs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    print_blob=True,
)
