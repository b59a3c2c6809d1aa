"""How hard the generative tests (the stateful model test and the API fuzzer) search.

Every profile but ``long`` is deterministic (``derandomize``, no example database, fixed seeds),
so a run sees the same examples every time and a failure reproduces by rerunning. The default
is the quickstart's: a short search, so that the README's test command stays well under a
minute on two cores. ``BURTORCH_FUZZ=ci`` (what CI runs) searches three to six times as long;
``BURTORCH_FUZZ=long`` searches for new failures: random seeds, many more examples and longer
runs; a failure prints the hypothesis reproduction blob.

    BURTORCH_FUZZ=long python -m pytest -q tests/test_stateful.py tests/test_api_fuzz.py
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("BURTORCH_FUZZ", "").strip().lower()
if PROFILE not in ("", "ci", "long"):
    raise ValueError(f"BURTORCH_FUZZ must be ci or long (or unset), not {PROFILE!r}")
LONG = PROFILE == "long"
CI = PROFILE == "ci"

# Stateful test: examples (independent runs of the machine) and steps per example.
STATEFUL_EXAMPLES = 3000 if LONG else 120 if CI else 40
STATEFUL_STEPS = 100 if LONG else 40

# API fuzzer: child processes, and calls each child makes.
FUZZ_BATCHES = 40 if LONG else 6 if CI else 2
FUZZ_CALLS_PER_BATCH = 3000 if LONG else 600 if CI else 300
# A batch that takes longer than this is a hang (the child is killed and the test fails).
FUZZ_BATCH_TIMEOUT = 600 if LONG else 120

# API fuzzer under each mode and inside traced functions: batches per context (no_grad, anomaly, trace).
FUZZ_CONTEXT_BATCHES = 10 if LONG else 2 if CI else 1

# CLI fuzzer (tests/test_cli_fuzz.py): command lines run in-process per command.
CLI_FUZZ_RUNS = 2000 if LONG else 120 if CI else 30
# Reliability fuzzers (tests/test_reliability_fuzz.py): hostile draws per op (/ 20) and thread rounds.
MODE_FUZZ_PROGRAMS = 3000 if LONG else 300 if CI else 60
THREAD_STRESS_ROUNDS = 400 if LONG else 60 if CI else 15
# Seeds: fixed unless searching (long), where every run explores new cases.
FUZZ_SEED = int.from_bytes(os.urandom(4), "little") if LONG else 20260


def stateful_settings() -> settings:
    return settings(
        max_examples=STATEFUL_EXAMPLES,
        stateful_step_count=STATEFUL_STEPS,
        deadline=None,
        derandomize=not LONG,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
