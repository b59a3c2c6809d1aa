"""What two cores give a two-thread run right now: their arithmetic, and how fast they hand data
to each other.

- Capacity: a fixed single-precision matrix product (numpy, one BLAS thread, operands in cache:
  bound by multiply-adds) runs in a process pinned to each of the two CPUs, each alone and then
  both at once, three rounds. The capacity is the two processes' speeds at once over the faster
  one's alone (medians). 2 means two whole cores of one speed; near 1 means the two CPUs share
  one physical core's arithmetic (two hyperthreads of one host core, or a host core also running
  another tenant); a CPU slower than the other, alone too, lowers it in between. (Set against
  one CPU alone, as this probe did before, a slow moment of that CPU read as more than 2.)
- Round trip: two threads pinned to the two CPUs hand one cache line back and forth; the time
  of a return trip, in nanoseconds. A threaded step hands its work and its data between the
  cores many times. On a virtual machine it can change several-fold from one minute to the next
  while the capacity stays at 2, and a two-thread step slows with it.

A virtual machine's CPUs can move between such states from one minute to the next, which a
one-thread row does not see and a two-thread row does. `burtorch-bench` measures both before
and after any run with a two-thread row, and the tables print them. The same workers time W4
steps instead of the product for `python -m burtorch_bench.threads --only cpus` and `--only
bound` (rates_by_kind), each CPU alone and then both at once, in rounds.

    python -m burtorch_bench.capacity [--cpus 1,0]
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .harness import THREAD_ENV
from .step_builders import w4_step, w5_step

_SIZE = 192  # three float32 192 x 192 operands: 432 KiB, in L2
_SECONDS = 0.25  # each timed phase of pinned_rates
_ROUNDS, _PROBE_SECONDS = 3, 0.1  # the probe's: three rounds of 0.1 s phases, medians
_CALIBRATE_SECONDS = 0.05  # a worker's first rate, which sizes its counts


def w4_shape(kind: str) -> tuple[int, int, int]:
    """(hidden width, context positions, batch size) of a W4 kind: "w4" is the paper's e = 64 over
    16 positions, 64 samples a step; "w4:E:P:B" is e = E over P positions, B samples (all
    positive)."""
    if kind == "w4":
        return 64, 16, 64
    parts = kind.split(":")
    if len(parts) == 4 and parts[0] == "w4" and all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        return int(parts[1]), int(parts[2]), int(parts[3])
    raise ValueError(f"a W4 kind is w4 or w4:E:P:B with positive E, P and B, got {kind!r}")


def w5_batch(kind: str) -> int:
    """The batch size of a W5 kind, "w5:B" (B positive): the paper's miniature GPT, B sequences a
    step."""
    head, _, batch = kind.partition(":")
    if head == "w5" and batch.isdigit() and int(batch) > 0:
        return int(batch)
    raise ValueError(f"a W5 kind is w5:B with a positive B, got {kind!r}")


def work_kind(text: str) -> str:
    """A worker's kind of work as the command line gives it: "gemm", "w4", "w4:E:P:B" or "w5:B"."""
    if text != "gemm":
        try:
            w5_batch(text) if text.startswith("w5") else w4_shape(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _workload(kind: str) -> Callable[[], Any]:
    """One unit of work: "gemm", a fixed product (numpy, one BLAS thread, operands in cache), or a
    one-thread training step of W4 (a W4 kind, w4_shape) or W5 ("w5:B"), compiled and fused, as
    the `cpus` and `bound` sections of `threads` time them."""
    if kind != "gemm":
        step = w5_step(w5_batch(kind)) if kind.startswith("w5") else w4_step(*w4_shape(kind))
        count = itertools.count()
        return lambda: step(next(count))
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((_SIZE, _SIZE)).astype(np.float32) for _ in range(2))
    out = np.empty_like(a)
    return lambda: np.dot(a, b, out=out)


def _worker(cpu: int, kind: str, calibrate: float = _CALIBRATE_SECONDS) -> int:
    """Pinned to `cpu`: calibrate, say 'ready' with the rate and the CPUs it may run on, then for
    each count read from stdin time that many units of work and print the seconds, until stdin
    closes."""
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {cpu})
        except (OSError, ValueError) as exc:
            print(f"cannot pin to CPU {cpu}: {exc}", flush=True)
            return 1
    work = _workload(kind)
    for _ in range(3):  # the first units trace and allocate
        work()
    t0 = time.perf_counter()
    calib = 0
    while time.perf_counter() - t0 < calibrate:
        work()
        calib += 1
    pinned = ",".join(map(str, sorted(os.sched_getaffinity(0)))) if hasattr(os, "sched_getaffinity") else str(cpu)
    print(f"ready {calib / (time.perf_counter() - t0):.6g} {pinned}", flush=True)
    for line in sys.stdin:
        n = int(line)
        t0 = time.perf_counter()
        for _ in range(n):
            work()
        print(f"{time.perf_counter() - t0:.9g}", flush=True)
    return 0


def _start(cpus: list[int], kind: str = "gemm") -> tuple[list[subprocess.Popen], list[float]]:
    """A worker pinned to each of `cpus`, all started at once (a W4 worker takes most of a second to
    trace its step), and the rates they calibrated. If one does not start, none is left running."""
    procs = [subprocess.Popen([sys.executable, "-m", "burtorch_bench.capacity", "--worker", str(c), "--work", kind,
                               "--calibrate", str(_CALIBRATE_SECONDS)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **THREAD_ENV}) for c in cpus]
    rates = []
    for proc, cpu in zip(procs, cpus):
        assert proc.stdout is not None
        first = proc.stdout.readline()
        line = first.split()
        if len(line) != 3 or line[0] != "ready" or line[2] != str(cpu):  # it runs where it was put, alone
            for p in procs:
                p.kill()
                p.wait()
            raise RuntimeError(f"the capacity probe's worker did not start on CPU {cpu} "
                               f"({first.strip() or 'no output'})")
        rates.append(float(line[1]))
    return procs, rates


def _release(procs: list) -> None:
    """Ends the workers (their stdin closes: they exit)."""
    for p in procs:
        try:
            p.stdin.close()
        except BrokenPipeError:  # it stopped on its own
            pass
        p.wait()


def _run(procs: list, counts: list[int]) -> list[float]:
    """Seconds each worker took for its count, all started together (each waits on its stdin)."""
    try:
        for p, n in zip(procs, counts):
            p.stdin.write(f"{n}\n")
            p.stdin.flush()
        lines = [p.stdout.readline() for p in procs]
    except BrokenPipeError:
        lines = []
    if len(lines) < len(procs) or not all(lines):
        raise RuntimeError("a capacity probe's worker stopped before it timed its count")
    return [float(line) for line in lines]


def pinned_rates(cpus: list[int], kind: str, rounds: int,
                 seconds: float | None = None) -> dict[str, list[list[float]]]:
    """Units of `kind` work per second in one worker process pinned to each of `cpus`: in each of
    `rounds` rounds, each worker alone, then all at once. {"alone": [the rates of the worker on
    cpus[0], ...], "together": [...]}. Each worker's count takes it about `seconds` (default
    _SECONDS) alone, so that at once the workers run side by side."""
    return rates_by_kind(cpus, {kind: ("alone", "together")}, rounds, seconds)[kind]


def rates_by_kind(cpus: list[int], phases: dict[str, tuple[str, ...]], rounds: int,
                  seconds: float | None = None) -> dict[str, dict[str, list[list[float]]]]:
    """pinned_rates for several kinds of work, a worker per kind on each CPU, each kind timed only
    in its phases ("alone", "together"): {kind: {phase: [rates on cpus[0]], ...}}. The kinds take
    turns within each round, so that a drift of the CPUs' speed over the run reaches them alike."""
    if any(phase not in ("alone", "together") for wanted in phases.values() for phase in wanted):
        raise ValueError(f"phases are 'alone' and 'together', got {phases}")
    started: dict[str, list[subprocess.Popen]] = {}
    try:
        counts = {}
        for kind in phases:
            started[kind], calibrated = _start(cpus, kind)
            counts[kind] = [max(3, int(rate * (_SECONDS if seconds is None else seconds))) for rate in calibrated]
        rates: dict[str, dict[str, list[list[float]]]] = {
            kind: {phase: [[] for _ in cpus] for phase in wanted} for kind, wanted in phases.items()}
        for _ in range(rounds):
            for kind, wanted in phases.items():
                procs, n = started[kind], counts[kind]
                if "alone" in wanted:
                    for i in range(len(cpus)):
                        (t,) = _run([procs[i]], [n[i]])
                        rates[kind]["alone"][i].append(n[i] / t)
                if "together" in wanted:
                    for i, t in enumerate(_run(procs, n)):
                        rates[kind]["together"][i].append(n[i] / t)
    finally:
        for procs in started.values():
            _release(procs)
    return rates


def measure(cpus: list[int]) -> dict:
    """{"cpus", "alone_per_s", "together_per_s", "capacity", "round_trip_ns"}: products per second
    of a worker pinned to each of the two CPUs, medians of _ROUNDS rounds of each alone and then
    both at once, and the capacity, their sum at once over the faster one alone; then a cache
    line's return trip between the two CPUs (None when they are one)."""
    if len(cpus) < 2:
        raise ValueError("the capacity probe needs two CPUs")
    rates = pinned_rates(cpus[:2], "gemm", _ROUNDS, _PROBE_SECONDS)
    alone, together = ([statistics.median(r) for r in rates[k]] for k in ("alone", "together"))
    from burtorch import _core

    round_trip = _core._line_round_trip_ns(cpus[0], cpus[1], 20_000) if cpus[0] != cpus[1] else None
    return {"cpus": list(cpus[:2]), "alone_per_s": alone, "together_per_s": together,
            "capacity": sum(together) / max(alone), "round_trip_ns": round_trip}


def describe(probe: dict) -> str:
    """One line for tables and logs."""
    cap = probe.get("capacity")
    if cap is None:
        return f"two-core capacity: not measured ({probe.get('error', 'no probe')})"
    rt = probe.get("round_trip_ns")
    return (f"two-core capacity {cap:.2f} (CPUs {probe['cpus'][0]} and {probe['cpus'][1]}: "
            "2 = two whole cores, near 1 = one core's arithmetic shared)"
            + (f", a cache line's round trip between them {rt:.0f} ns" if rt else ""))


def around_runs(meta: dict | None) -> str:
    """The line of a results document's probes before and after its runs, or ''."""
    probes = (meta or {}).get("two_core_capacity")
    if not probes:
        return ""
    parts = []
    for when in ("before", "after"):
        p = probes.get(when) or {}
        if p.get("capacity") is None:
            parts.append(f"{when}: -")
            continue
        rt = p.get("round_trip_ns")
        parts.append(f"{when} the runs {p['capacity']:.2f}" + (f" and {rt:.0f} ns" if rt else ""))
    cpus = (probes.get("before") or {}).get("cpus") or (probes.get("after") or {}).get("cpus") or ["?", "?"]
    return (f"Two cores (`python -m burtorch_bench.capacity`, CPUs {cpus[0]} and {cpus[1]}), capacity and a "
            "cache line's round trip: " + ", ".join(parts) + ". Capacity 2 = two whole cores, near 1 = one "
            "core's arithmetic shared; the longer the round trip, the more a two-thread step pays for "
            "handing work and data between the cores.")


def probe_or_error(cpus: list[int]) -> dict:
    """measure(), or {"cpus", "capacity": None, "error"}: a probe that fails never stops a run."""
    try:
        return measure(cpus)
    except (OSError, RuntimeError, ValueError) as exc:
        return {"cpus": list(cpus), "capacity": None, "error": str(exc)}


def _two_cpus(text: str) -> list[int]:
    try:
        cpus = [int(c) for c in text.split(",")]
    except ValueError:
        cpus = []
    if len(cpus) != 2 or min(cpus) < 0:
        raise argparse.ArgumentTypeError(f"expected two CPU numbers such as 1,0, got {text!r}")
    return cpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.capacity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpus", type=_two_cpus, default=None,
                    help="two CPUs, e.g. 1,0 (default: the last two this process may use)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=work_kind, default="gemm", help=argparse.SUPPRESS)
    ap.add_argument("--calibrate", type=float, default=_CALIBRATE_SECONDS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        return _worker(args.worker, args.work, args.calibrate)
    cpus = args.cpus
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0), reverse=True)[:2] if hasattr(os, "sched_getaffinity") else []
        if len(cpus) < 2:
            print("this process may use one CPU: nothing to measure", file=sys.stderr)
            return 1
    try:
        print(describe(measure(cpus)))
    except (OSError, RuntimeError) as exc:  # a CPU this process may not use: its worker cannot pin itself
        print(f"capacity: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
