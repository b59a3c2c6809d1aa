"""One thread against two, side by side in one process: single range records at the sizes of the
W4/W5 steps (where the split thresholds come from), then whole training steps (grad_oracle + SGD)
of W4 and W5: chunked, compiled per sample, and compiled per chunk (chunks of about 64 rows and at
most b / threads samples, so that each thread replays its own: specs.replay_chunk); and W4's
SGD.fused_step, eager and compiled (one graph of the batch, its records split across threads).
Each line alternates the two counts run by run and prints medians, the speed-up and the CPU time per wall
time of the two-thread runs (near 2 when both threads work; other processes on the machine lower
it, so the header prints the load average).

    python -m burtorch_bench.threads [--reps 15] [--only ops|steps|cpus|bound|records|stores]

The `cpus` section times one thread's W4 step (e = 64, b = 64, compiled fused) in a process pinned
to each of two CPUs, each alone and then both at once. On a virtual machine one vCPU can run slower
than the other for a while, and a one-thread row then reads slower or faster by the CPU it landed
on; and the steps both CPUs run at once, over those one runs alone, bound what two threads can gain.

The `bound` section runs, in the same way, a whole training step alone on each CPU, then a step of
half of it on both CPUs at once: W4 (b = 64; e = 64, 128 and 512) with half its hidden units, half
its context positions or half its samples, and W5 (b = 8 and 64) with half its samples. With
nothing shared, no split of the step into those halves can gain more on this host.

The `records` section splits W4's compiled fused step (b = 64; e = 64 and 128) by record with
bt.record_times(), on one thread and on two: which records the second thread shortens, and how
much of the step lies outside records (Python, the batch's ids, the replay's setup).

The `stores` section times the two-thread W4 step with the SGD step's streaming stores against
plain ones, split by the state of the CPUs' link (the round trip of a cache line between them).

Speed figures are meaningful only on an otherwise idle machine; a spinning helper that the OS
time-slices against another process makes a parallel region start late.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from burtorch.cli.arguments import positive_int

from .specs import random_w4_batches, random_w5_batches, replay_chunk
from .step_builders import w4_step


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def side_by_side(step, reps: int, per_run: int) -> tuple[float, float, float]:
    """(median ms at 1 thread, median ms at 2, CPU / wall at 2), runs alternating."""
    import burtorch as bt

    times: dict[int, list[float]] = {1: [], 2: []}
    load: list[float] = []
    for t in (1, 2):
        bt.set_num_threads(t)
        for _ in range(3):
            step(t)
    for _ in range(reps):
        for t in (1, 2):
            bt.set_num_threads(t)
            c0, w0 = _cpu(), time.perf_counter()
            for _ in range(per_run):
                step(t)
            wall = time.perf_counter() - w0
            times[t].append(wall / per_run)
            if t == 2:
                load.append((_cpu() - c0) / wall)
    m1, m2 = statistics.median(times[1]) * 1e3, statistics.median(times[2]) * 1e3
    return m1, m2, statistics.median(load)


def _header(what: str, unit: str) -> None:
    print(f"{what:<34} {'1 thread ' + unit:>12} {'2 threads ' + unit:>13} {'speed-up':>9} {'cpu/wall':>9}")


def ops(reps: int) -> None:
    import numpy as np

    import burtorch as bt

    rng = np.random.default_rng(0)

    def leaves(*shape):
        return bt.leaves(rng.uniform(-1, 1, shape).astype(np.float32), shape=shape, dtype=bt.float32)

    _header("record (forward + backward)", "us")
    cases: list[tuple[str, Callable[[], Any]]] = []
    for rows, n_in, n_out in ((64, 1024, 1024), (64, 1024, 128), (64, 1024, 64), (1, 1024, 1024), (512, 24, 96),
                              (512, 96, 24), (64, 24, 96), (8, 24, 96)):
        x, W, b = leaves(rows, n_in), leaves(n_out, n_in), leaves(n_out)
        cases.append((f"linear {rows}x{n_in} -> {n_out}", partial(bt.linear, x, W, b)))
    for seqs in (64, 8):
        qkv = leaves(seqs * 8, 72)
        cases.append((f"multi_head_attention {seqs} x 8 x 72",
                      partial(bt.multi_head_attention, qkv, 6, True, sequences=seqs)))
    for rows in (512, 64):
        x, g, beta = leaves(rows, 24), leaves(24), leaves(24)
        cases.append((f"layer_norm {rows} x 24", partial(bt.layer_norm, x, g, beta)))
        z = leaves(rows, 65)
        cases.append((f"cross_entropy {rows} x 65", partial(bt.cross_entropy, z, [i % 65 for i in range(rows)])))
    for n in (64 * 1024, 512 * 96, 64 * 128):
        v = leaves(n)
        cases.append((f"tanh over {n}", v.tanh))
    cp = bt.current_arena(bt.float32).checkpoint()
    for name, make in cases:
        def step(_t, make=make):
            y = make()
            (bt.vsum(y) if isinstance(y, bt.Vector) else y).backward()
            bt.rewind(cp)

        m1, m2, load = side_by_side(step, reps, 20)
        print(f"{name:<34} {1e3 * m1:>12.1f} {1e3 * m2:>13.1f} {m1 / m2:>8.2f}x {load:>9.2f}", flush=True)


def steps(reps: int) -> None:
    import burtorch as bt
    from burtorch import nn
    from burtorch.optim import SGD

    _header("training step (oracle + SGD, or SGD.fused_step)", "ms")
    r = random.Random(0)
    w4_b64 = [("W4", e, 64, mode) for e in (64, 128, 512, 1024)
              for mode in ("chunk", "compiled-chunk", "fused", "compiled-fused")]
    for workload, e, b, mode in (*w4_b64, ("W4", 1024, 1, "eager"), ("W4", 1024, 1, "fused"),
                                 ("W5", 0, 8, "chunk"), ("W5", 0, 8, "compiled"),
                                 ("W5", 0, 64, "chunk"), ("W5", 0, 64, "compiled"), ("W5", 0, 64, "compiled-chunk")):
        bt.manual_seed(0)
        model: Any
        batches: list[Any]
        if workload == "W4":
            model = nn.MakemoreMLP.paper(hidden=e, vocab=27, dtype=bt.float32)
            batches = random_w4_batches(r, b)
        else:
            model = nn.MiniGPT.paper(vocab=65, dtype=bt.float32)
            batches = random_w5_batches(r, b)
        opt = SGD(model.parameters(), lr=0.01)
        # compiled-chunk: chunks of about 64 rows, at most b / t samples, so each of t threads replays its own
        kw = {"chunk": min(b, 64)} if mode == "chunk" else ({"compile": True} if mode == "compiled" else {})
        cursor = [0]

        kind = "mlp" if workload == "W4" else "gpt"

        def step(t, model=model, opt=opt, batches=batches, kw=kw, cursor=cursor, mode=mode, b=b, kind=kind):
            cursor[0] += 1
            batch = batches[cursor[0] % len(batches)]
            if mode in ("fused", "compiled-fused"):  # one graph, the SGD update inside the sweep (SGD.fused_step)
                opt.fused_step(model, batch, chunk=min(b, 64), threads=t, compile=mode == "compiled-fused")
                return
            extra = {"compile": True, "chunk": replay_chunk(kind, b, t)} if mode == "compiled-chunk" else kw
            bt.grad_oracle(model, batch, threads=t, **extra)
            opt.step()

        m1, m2, load = side_by_side(step, reps, 4)
        name = f"{workload} {f'e={e} ' if e else ''}b={b} {mode}"
        print(f"{name:<34} {m1:>12.3f} {m2:>13.3f} {m1 / m2:>8.2f}x {load:>9.2f}", flush=True)


def cpus_section(reps: int) -> None:
    """One-thread W4 steps in a process pinned to each CPU (capacity.pinned_rates), each alone and
    then both at once: what both CPUs do at once over one alone, with nothing shared between them
    (no data, no waiting), is the most a two-thread step can gain over one thread on either."""
    from .capacity import pinned_rates

    cpus = sorted(os.sched_getaffinity(0))[:2]
    rates = pinned_rates(cpus, "w4", reps)
    alone, both = ([statistics.median(r) for r in rates[k]] for k in ("alone", "together"))
    a, b = (1e3 / r for r in alone)
    print(f"one thread, W4 e=64 b=64 compiled fused step (ms), a process pinned to each CPU, medians of {reps} "
          "rounds (each alone, then both at once):")
    print(f"alone: CPU {cpus[0]} {a:.4f}  CPU {cpus[1]} {b:.4f}  slower / faster {max(a, b) / min(a, b):.2f}")
    print(f"at once: CPU {cpus[0]} {1e3 / both[0]:.4f}  CPU {cpus[1]} {1e3 / both[1]:.4f}")
    print(f"steps at once / steps alone on the faster CPU {sum(both) / max(alone):.2f}, "
          f"on the slower {sum(both) / min(alone):.2f}", flush=True)


def bound_section(reps: int, embeds: tuple[int, ...] = (64, 128, 512), w5_batches: tuple[int, ...] = (8, 64)) -> None:
    """The most that splitting a training step between two cores could gain on this host. Each
    thread of a split step runs its half, and waits for the other; what neither half can split
    (the Python around the call, W4's cross-entropy and table step) runs on one of them. A
    one-thread step of a half in a process of its own on each CPU, both at once, does the same
    with nothing handed between the cores. W4 (b = 64): half the hidden units (a split by output
    units, as `lookup_linear` splits its record), half the context positions, or half the batch
    (a chunk per thread); W5: half the batch (W5's two-thread rows give each thread its chunks).
    Against the whole step alone on each CPU (capacity.rates_by_kind, rounds interleaved), per
    CPU and for the pair: the faster CPU's whole step over the slower CPU's half."""
    from . import capacity

    cpus = sorted(os.sched_getaffinity(0))[:2]
    print(f"one-thread training steps (ms) in a process pinned to each CPU, medians of {reps} rounds: the "
          "whole step alone, then a half of it on both CPUs at once; whole / half per CPU, and for the pair")
    print(f"{'split':<30} {f'CPU {cpus[0]}: whole':>14} {'half':>8} {'bound':>6} {f'CPU {cpus[1]}: whole':>14} "
          f"{'half':>8} {'bound':>6} {'pair':>6}")
    cases = [(f"W4 e={e}", f"w4:{e}:16:64", {"units": f"w4:{max(1, e // 2)}:16:64", "positions": f"w4:{e}:8:64",
                                             "samples": f"w4:{e}:16:32"}) for e in embeds]
    cases += [(f"W5 b={b}", f"w5:{b}", {"samples": f"w5:{max(1, b // 2)}"}) for b in w5_batches]
    for title, whole, halves in cases:
        rates = capacity.rates_by_kind(cpus, {whole: ("alone",), **{kind: ("together",) for kind in halves.values()}},
                                       reps)
        alone = [1e3 / statistics.median(r) for r in rates[whole]["alone"]]
        for name, kind in halves.items():
            half = [1e3 / statistics.median(r) for r in rates[kind]["together"]]
            cells = " ".join(f"{a:>14.4f} {h:>8.4f} {a / h:>5.2f}x" for a, h in zip(alone, half))
            print(f"{f'{title}: half the {name}':<30} {cells} {min(alone) / max(half):>5.2f}x", flush=True)


def record_runs(step: Callable[[int], None], reps: int, per_run: int) -> dict[int, dict[str, list[float]]]:
    """{threads: {row: [µs per step, one per run]}} for 1 and 2 threads alternating run by run:
    a row per record (op and direction) timed by bt.record_times(), then "outside records" and
    "wall"."""
    import burtorch as bt

    for t in (1, 2):
        for _ in range(3):
            step(t)
    runs: dict[int, dict[str, list[float]]] = {1: {}, 2: {}}
    for _ in range(reps):
        for t in (1, 2):
            with bt.record_times() as rt:
                for _ in range(per_run):
                    step(t)
            rows = {f"{r.op} {r.direction}": r.seconds for r in rt.rows}
            rows.update({"outside records": rt.outside, "wall": rt.wall})
            for name, seconds in rows.items():
                runs[t].setdefault(name, []).append(1e6 * seconds / per_run)
    return runs


def records_section(reps: int, embeds: tuple[int, ...] = (64, 128), per_run: int = 20) -> None:
    """Where W4's compiled fused step (b = 64, one chunk) spends its time on one thread and on
    two: each record's µs per step (bt.record_times()), the rest of the step outside records,
    and the whole; medians over runs, the two counts alternating run by run."""
    print(f"W4 b=64 compiled fused step, µs per step by record, medians of {reps} alternating runs of {per_run} steps")
    print(f"{'record':<34} {'1 thread us':>12} {'2 threads us':>13} {'speed-up':>9}")
    for e in embeds:
        steps = {t: w4_step(e, threads=t) for t in (1, 2)}
        cursor = [0]

        def step(t: int, steps: dict = steps, cursor: list[int] = cursor) -> None:
            cursor[0] += 1
            steps[t](cursor[0])

        runs = record_runs(step, reps, per_run)
        one = {name: statistics.median(v) for name, v in runs[1].items()}
        two = {name: statistics.median(v) for name, v in runs[2].items()}
        last = ("outside records", "wall")
        names = sorted((n for n in one.keys() | two.keys() if n not in last), key=lambda n: -one.get(n, 0.0))
        for name in (*names, *last):
            a, b = one.get(name, 0.0), two.get(name, 0.0)
            ratio = f"{a / b:>8.2f}x" if b > 0 else f"{'-':>9}"
            print(f"{f'e={e} {name}':<34} {a:>12.2f} {b:>13.2f} {ratio}", flush=True)


# Round trips (ns) at or above which a run counts as made while moving data between the CPUs is
# slow: between the fast and the slow state a virtual machine's two vCPUs move between
# (capacity.py), so that each run falls clearly on one side.
SLOW_ROUND_TRIP_NS = 150.0


def _store_runs(model: Any, batches: list[Any], reps: int, cpus: list[int], per_run: int = 6) -> dict:
    """{streaming: [(round trip ns, ms per step)]}: rounds of runs of the two-thread step (compiled
    chunks of 32, then SGD.step()), plain then streaming stores, each round probed first."""
    import burtorch as bt
    from burtorch import _core
    from burtorch.optim import SGD

    opt = SGD(model.parameters(), lr=0.01)

    def step(k: int) -> None:
        bt.grad_oracle(model, batches[k % len(batches)], compile=True, chunk=32, threads=2)
        opt.step()

    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    try:
        for i in range(reps + 2):
            trip = _core._line_round_trip_ns(cpus[0], cpus[1], 2000)  # the state of this round
            for streaming in (False, True):
                _core._set_split_step_streaming(streaming)
                step(i)  # the first step after a switch (or after the probe's threads) is not timed
                w0 = time.perf_counter()
                for k in range(per_run):
                    step(i + k)
                if i >= 2:  # the first two rounds warm up (traces, workspaces, pages)
                    runs[streaming].append((trip, (time.perf_counter() - w0) / per_run * 1e3))
    finally:
        _core._set_split_step_streaming(True)
    return runs


def stores(reps: int) -> None:
    """The two-thread W4 step (compiled chunks, one per thread, then SGD.step()) with the step's
    new weights written by streaming stores (the default for a step split across threads) and by
    plain ones, runs alternating. Each round of runs first times a cache line's round trip
    between the two CPUs, and the medians are split by it: the plain stores wait for the other
    core to give up its copy of every line of the weights, which costs far more in the slow state."""
    import burtorch as bt
    from burtorch import nn

    cpus = sorted(os.sched_getaffinity(0))[:2]
    print(f"{'W4 b=64, 2 threads, step stores':<34} {'round trip':>12} {'runs':>5} {'plain ms':>9} "
          f"{'streaming ms':>13} {'plain/streaming':>16}")
    r = random.Random(0)
    bt.set_num_threads(2)
    for e in (64, 128, 512, 1024):
        bt.manual_seed(0)
        model = nn.MakemoreMLP.paper(hidden=e, vocab=27, dtype=bt.float32)
        batches = random_w4_batches(r, 64)
        runs = _store_runs(model, batches, reps, cpus)
        for slow in (False, True):
            plain = [ms for trip, ms in runs[False] if (trip >= SLOW_ROUND_TRIP_NS) == slow]
            stream = [ms for trip, ms in runs[True] if (trip >= SLOW_ROUND_TRIP_NS) == slow]
            state = f"{'>=' if slow else '<'} {SLOW_ROUND_TRIP_NS:.0f} ns"
            if not plain or not stream:
                print(f"{f'e={e}':<34} {state:>12} {len(plain) + len(stream):>5} {'-':>9} {'-':>13} {'-':>16}")
                continue
            p, s = statistics.median(plain), statistics.median(stream)
            print(f"{f'e={e}':<34} {state:>12} {len(plain) + len(stream):>5} {p:>9.3f} {s:>13.3f} {p / s:>15.2f}x",
                  flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.threads", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=positive_int, default=15, help="alternating runs per line (median reported)")
    ap.add_argument("--only", choices=("ops", "steps", "cpus", "bound", "records", "stores"))
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    import burtorch as bt

    if bt._core._allowed_cores() < 2:
        print("this process may use one core: nothing to compare", file=sys.stderr)
        return 1
    print(f"# one vs two threads, medians of {args.reps} alternating runs; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; build: {bt.build_info}")
    if args.only in (None, "ops"):
        ops(args.reps)
    if args.only in (None, "steps"):
        steps(args.reps)
    if args.only in (None, "cpus"):
        cpus_section(args.reps)
    if args.only in (None, "bound"):
        bound_section(args.reps)
    if args.only in (None, "records"):
        records_section(args.reps)
    if args.only in (None, "stores"):
        stores(args.reps)
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
