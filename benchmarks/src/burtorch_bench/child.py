"""One benchmark process: one framework, one workload, one configuration.

Run by the harness as ``python -m burtorch_bench.child SPEC_JSON``. Protocol on stdout: lines that
start with ``@@bench `` carry JSON; ``{"event": "first"}`` is written (and flushed) the moment the
first step ends so that the parent can time init from the spawn; the last one is the result.
Anything else a framework prints is ignored.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback

PREFIX = "@@bench "


def emit(obj: dict) -> None:
    sys.stdout.write(PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


def pin(cpu) -> list | None:
    """Pins this process to one core (or a list of cores, for a threaded run) where the OS
    allows; returns the affinity in force."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {int(c) for c in cpu} if isinstance(cpu, list) else {int(cpu)})
        except OSError:
            pass
    return sorted(os.sched_getaffinity(0))


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def warm_up(runner, phase: str, units: int, max_s: float = 1.0) -> float | None:
    """Runs up to ``units`` untimed units (stopping after ``max_s``) in doubling chunks.

    Returns seconds per unit of the last chunk: the steady state, after any JIT work.
    """
    done, start, chunk, per_unit = 0, time.perf_counter(), 1, None
    while done < units and time.perf_counter() - start < max_s:
        step = min(chunk, units - done)
        t = time.perf_counter()
        runner.run(phase, step)
        per_unit = (time.perf_counter() - t) / step
        done += step
        chunk *= 2
    return per_unit


def fit_budget(n: int, per_unit: float, budget_s: float, floor: int = 100) -> int:
    """The paper's count ``n`` if one run fits in the budget, else fewer (2 significant digits).

    The tables say how many units each run measured, and scale per unit, never silently.
    """
    fit = int(budget_s / per_unit)
    if fit >= n:
        return n
    fit = max(fit, min(floor, n))
    digits = len(str(fit)) - 2
    return fit if digits <= 0 else (fit // 10 ** digits) * 10 ** digits


def run(spec: dict) -> dict:
    from . import frameworks as fw
    from .specs import WORKLOADS

    affinity = pin(spec.get("cpu"))
    entry = fw.BY_NAME[spec["entry"]]
    workload, config = spec["workload"], spec["config"]
    base = {"entry": entry.name, "workload": workload, "config": config, "affinity": affinity}
    t0 = time.perf_counter()
    try:
        mod = fw.load(entry)
    except ImportError as exc:
        return {**base, "status": "not installed", "message": f"{exc}; {entry.install}"}
    import_s = time.perf_counter() - t0
    try:
        runner = mod.make_runner(workload, entry.variant, config)
    except fw.Unavailable as exc:
        return {**base, "status": "unavailable", "message": str(exc)}

    times, counts, first_sent = {}, {}, False
    reps, warmup = int(config["reps"]), int(config["warmup"])
    try:
        for phase in WORKLOADS[workload].phases:
            runner.run(phase, 1)
            if not first_sent:
                emit({"event": "first"})
                first_sent = True
                after = getattr(runner, "after_first_step", None)
                if after is not None:
                    after()
            per_unit = warm_up(runner, phase, warmup)
            n = int(config["n"])
            if config.get("budget_s") and per_unit:
                n = fit_budget(int(config["n"]), per_unit, float(config["budget_s"]))
            samples = []
            for _ in range(reps):
                start = time.perf_counter()
                runner.run(phase, n)
                samples.append(time.perf_counter() - start)
            times[phase], counts[phase] = samples, n
        numbers = runner.numbers()
    finally:
        close = getattr(runner, "close", None)
        if close is not None:
            close()
    return {
        **base, "status": "ok", "times": times, "n": counts, "reps": reps, "warmup": warmup,
        "numbers": numbers, "info": getattr(runner, "info", {}),
        "timed_region": runner.timed_region, "import_s": import_s,
        "peak_rss": peak_rss_bytes(), "versions": mod.versions(),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    try:
        result = run(spec)
    except Exception as exc:  # reported as a failed row, never a crash of the whole suite
        result = {"entry": spec.get("entry"), "workload": spec.get("workload"),
                  "config": spec.get("config"), "status": "error",
                  "message": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
