"""The API fuzzer: batches of random calls to every public callable of burtorch (fuzz_targets.py)
with arguments from a wide space (fuzz_world.py), each batch in a child process
(api_fuzz_child.py) so that a crash or a hang fails a test instead of killing pytest.

A batch fails on: the child dying (a signal, a sanitizer report), the child running past its
time limit, a call raising an exception of an unexpected type, a known result computed wrongly,
or a call changing what it had no business touching. The failure names the call.

Seeds are fixed unless BURTORCH_FUZZ=long; BURTORCH_FUZZ=ci (CI) runs more and longer batches
than the default, and long many more from fresh seeds (printed, and BURTORCH_FUZZ_SEED=N replays
one). BURTORCH_FUZZ_REPORT=file.jsonl collects the
per-area counts of every batch; `python tests/test_api_fuzz.py summary file.jsonl` tables them.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzz_profile import FUZZ_BATCH_TIMEOUT, FUZZ_BATCHES, FUZZ_CALLS_PER_BATCH, FUZZ_CONTEXT_BATCHES, LONG

MODE_CONTEXTS = ("no_grad", "anomaly", "trace")

pytest.importorskip("hypothesis")

HERE = Path(__file__).resolve().parent
CHILD = HERE / "api_fuzz_child.py"
# A child that has not logged its first call by then (imports done) is hung in its start-up.
START_SECONDS = 60
FIRST_SEED = int(os.environ.get("BURTORCH_FUZZ_SEED", random.SystemRandom().randrange(2**31) if LONG else 1000))


def last_call(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
    return lines[-1] if lines else "(before the first call)"


def run_batch(seed: int, calls: int, where: Path, self_test: str | None = None, timeout: float = FUZZ_BATCH_TIMEOUT,
              context: str = "plain"):
    """(outcome, detail): ('ok', report), ('crash', text) or ('hang', text).

    `timeout` counts from the child's first logged call, so that a slow start (a slow host, a
    sanitizer's runtime) is never taken for a hang and a hang is caught soon after it begins; a
    child that logs nothing within START_SECONDS hangs too."""
    log, report = where / "calls.log", where / "report.json"
    cmd = [sys.executable, str(CHILD), "--seed", str(seed), "--calls", str(calls), "--log", str(log),
           "--report", str(report), "--context", context] + (["--self-test", self_test] if self_test else [])
    child = subprocess.Popen(cmd, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    began, working = time.monotonic(), None
    while True:
        try:  # communicate() may be retried after a timeout without losing output
            _, stderr = child.communicate(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if working is None and log.exists() and log.stat().st_size:
                working = now
            if now > (working + timeout if working is not None else began + START_SECONDS):
                child.kill()
                _, stderr = child.communicate()
                limit = f"{timeout} s after its first call" if working is not None else f"{START_SECONDS} s"
                return "hang", f"no end after {limit}; last call: {last_call(log)}\n{stderr[-3000:]}"
    if child.returncode != 0 or not report.exists():
        return "crash", (f"exit status {child.returncode}; last call: {last_call(log)}\n"
                         f"{stderr[-4000:]}")
    return "ok", json.loads(report.read_text())


def findings_of(report: dict) -> list:
    return [f"[{area}] {f['call']}\n    {f['finding'] or ''}\n    {'; '.join(f['after'])}"
            for area, stats in report["areas"].items() for f in stats["findings"]]


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """Every batch started at once, as many running side by side as there are cores (each is a
    child process), the harness's own hang and crash checks first: key -> a future of its
    run_batch outcome (keys: the batch numbers, "hang", "crash"). Each test waits for its own."""
    from concurrent.futures import ThreadPoolExecutor

    # The hang self-test's limit counts from its logged hang, so it can be short.
    jobs = {"hang": (1, 10, "hang", 0.3, "plain"), "crash": (1, 10, "crash", FUZZ_BATCH_TIMEOUT, "plain")}
    jobs.update({b: (FIRST_SEED + b, FUZZ_CALLS_PER_BATCH, None, FUZZ_BATCH_TIMEOUT, "plain")
                 for b in range(FUZZ_BATCHES)})
    # the same search under each mode and inside traced functions (issue 41)
    jobs.update({(c, b): (FIRST_SEED + 500 + b, FUZZ_CALLS_PER_BATCH, None, FUZZ_BATCH_TIMEOUT, c)
                 for c in MODE_CONTEXTS for b in range(FUZZ_CONTEXT_BATCHES)})
    with ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)))) as pool:
        yield {key: pool.submit(run_batch, seed, calls, tmp_path_factory.mktemp(f"batch-{key}"), self_test, timeout,
                                context)
               for key, (seed, calls, self_test, timeout, context) in jobs.items()}


@pytest.mark.parametrize("batch", range(FUZZ_BATCHES))
def test_random_calls_raise_clean_errors_or_return_right_results(batch, batches):
    seed = FIRST_SEED + batch
    outcome, detail = batches[batch].result()
    assert outcome == "ok", f"batch with seed {seed} (BURTORCH_FUZZ_SEED={seed} replays it): {outcome}: {detail}"
    if os.environ.get("BURTORCH_FUZZ_REPORT"):
        with open(os.environ["BURTORCH_FUZZ_REPORT"], "a") as f:
            f.write(json.dumps(detail) + "\n")
    found = findings_of(detail)
    assert not found, f"seed {seed}: {len(found)} findings:\n" + "\n".join(found[:20])
    for area, stats in detail["areas"].items():  # every call ended one way: a result, a clean error or a finding
        assert stats["calls"] == stats["results"] + sum(stats["clean"].values()) + sum(
            1 for f in stats["findings"] if f["finding"] and not f["finding"].startswith("wrong result")), area


@pytest.mark.parametrize("context, batch", [(c, b) for c in MODE_CONTEXTS for b in range(FUZZ_CONTEXT_BATCHES)])
def test_random_calls_under_each_mode_and_inside_traces(context, batch, batches):
    """The same oracle with every call made under no_grad, under detect_anomaly, or inside a
    function being traced (where TraceError is a clean answer)."""
    seed = FIRST_SEED + 500 + batch
    outcome, detail = batches[(context, batch)].result()
    assert outcome == "ok", f"{context} batch with seed {seed}: {outcome}: {detail}"
    found = findings_of(detail)
    assert not found, f"{context}, seed {seed}: {len(found)} findings:\n" + "\n".join(found[:20])


# ---------------------------------------------------------------- the harness itself can fail
def test_a_crashing_batch_is_reported_with_its_last_call(batches):
    outcome, detail = batches["crash"].result()
    assert outcome == "crash" and "self-test: crash" in detail


def test_a_hanging_batch_is_reported(batches):
    outcome, detail = batches["hang"].result()
    assert outcome == "hang" and "self-test: hang" in detail


def test_a_batch_that_never_starts_its_calls_is_a_hang(tmp_path, monkeypatch):
    # No child logs its first call within 0.01 s of starting (imports alone take longer).
    monkeypatch.setattr(sys.modules[__name__], "START_SECONDS", 0.01)
    outcome, detail = run_batch(1, 10, tmp_path)
    assert outcome == "hang" and "no end after 0.01 s" in detail and "(before the first call)" in detail


def test_the_oracle_tells_clean_errors_from_findings():
    import burtorch as bt
    from api_fuzz_child import agrees, classify

    assert classify(TypeError("x"), False) is None and classify(bt.StaleValueError("x"), False) is None
    assert classify(RuntimeError("arenas were exited in another order than entered"), False) is None
    assert classify(RuntimeError("std::out_of_range"), False) is not None
    assert classify(SystemError("error return without exception set"), False) is not None
    assert classify(AttributeError("'float' object has no attribute 'grad'"), False) is not None
    assert classify(AttributeError("attribute 'index' of 'burtorch.Value' objects is not writable"), True) is None
    assert classify(ZeroDivisionError("x"), False, "x / zero") is None
    assert classify(ZeroDivisionError("float division by zero"), False, "nn.Linear") is not None
    assert agrees(float("nan"), float("nan")) and not agrees(1.0, 1.0 + 1e-9) and not agrees(float("inf"), 1e308)


def test_every_public_callable_is_a_target():
    import inspect

    import burtorch as bt
    from fuzz_targets import all_targets

    names = {t.name for t in all_targets()}
    public = {n for n in dir(bt) if not n.startswith("_") and callable(getattr(bt, n))
              and not inspect.ismodule(getattr(bt, n))}
    assert {f"bt.{n}" for n in public} <= names
    areas = {t.area for t in all_targets()}
    assert areas == {"core", "Value", "Vector", "Arena", "nn", "optim", "io", "tools"}


def test_every_template_names_a_target_and_known_arguments():
    from fuzz_targets import all_targets
    from fuzz_world import ARGUMENTS, TEMPLATES

    names = {t.name for t in all_targets()}
    known = {n for n, _ in ARGUMENTS}
    assert set(TEMPLATES) <= names
    assert all(a in known for args in TEMPLATES.values() for a in args)


# ---------------------------------------------------------------- counts for the README
def summary(path: str) -> str:
    """A table of probes per area over the batch reports collected in `path` (JSON lines)."""
    rows: dict = {}
    batches = 0
    for line in open(path):
        batches += 1
        for area, s in json.loads(line)["areas"].items():
            r = rows.setdefault(area, {"calls": 0, "results": 0, "checked": 0, "clean": 0, "findings": 0})
            r["calls"] += s["calls"]
            r["results"] += s["results"]
            r["checked"] += s["checked"]
            r["clean"] += sum(s["clean"].values())
            r["findings"] += len(s["findings"])
    keys = ("calls", "results", "checked", "clean", "findings")
    out = [f"{batches} batches", "| area | calls | results | results checked against Python math | clean exceptions "
           "| findings |", "|---|---|---|---|---|---|"]
    total = {k: sum(r[k] for r in rows.values()) for k in keys}
    for area, r in sorted(rows.items()) + [("all", total)]:
        out.append("| " + " | ".join([area] + [str(r[k]) for k in keys]) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        print(summary(sys.argv[2]))
    else:
        sys.exit("usage: python tests/test_api_fuzz.py summary REPORT.jsonl")
