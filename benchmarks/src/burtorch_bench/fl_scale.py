"""Federated runs at scale: rounds per second of the serial, processes x2 and Ray x2 executors on
the makemore MLP per client, the executors' per-round overhead on a tiny model, and the peak
memory of 1,000 clients of the default problem. About half a minute on a 2-core host.

    python -m burtorch_bench.fl_scale [--clients 64] [--rounds 10] [--repeats 5] [--ray-1] [--json out.json]

Every configuration's federation starts once (start-up, spawning workers or starting Ray, is
reported on its own; Ray starts once for all its rows); then the repeats go round the
configurations in turn, ``rounds`` rounds each, so that a change of the host's load falls on every
row alike, and the median over the repeats is printed with the 1-minute load average before and
after. Speed-ups mean something on an idle host only; beside each row, the CPU time per round of
the driver, of each worker and of Ray's daemons says where a round goes on any host. Memory is
measured from the OS in a child process (peak RSS), next to the same child doing nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any


def _names_problem(clients: int, hidden: int, max_samples: int, data=None):
    from burtorch.data.corpus import default_words, read_words
    from burtorch.data.locate import find_data_file
    from burtorch.fl.names import NamesProblem

    path = find_data_file("names.txt", data)
    words = read_words(str(path)) if path else default_words()
    return NamesProblem(words, clients, hidden=hidden, max_samples=max_samples, split="iid", seed=0,
                        source=str(path) if path else "embedded words")


def _cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far (schedstat: nanoseconds, unlike the ticks of
    /proc/PID/stat); 0 where unreadable (not Linux, or the process ended)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        pass
    return total / 1e9


def _tree_cpu() -> dict[int, float]:
    """CPU seconds of this process's descendants (worker processes, Ray's daemons and actors)."""
    from .fl_tree_memory import _children

    kids, todo, out = _children(), list(_children().get(os.getpid(), [])), {}
    while todo:
        pid = todo.pop()
        out[pid] = _cpu_seconds(pid)
        todo.extend(kids.get(pid, []))
    return out


def _worker_pids(fed) -> list[int]:
    ex = fed.executor
    if hasattr(ex, "procs"):
        return [p.pid for p in ex.procs]
    if hasattr(ex, "placements"):
        return [pid for pid, _ in ex.placements()]
    return []


def time_interleaved(problem, make_method, configs, rounds: int, repeats: int) -> list[dict]:
    """Each (executor, workers) federation started once; then ``repeats`` passes, each running
    ``rounds`` rounds on every configuration in turn. Medians over the passes, of the wall time,
    of the CPU time per round of the driver, of each worker and of the rest of the process tree
    (Ray's daemons), and of each worker's wall time inside its clients' rounds (the executor's
    busy_seconds): the round's timeline. CPU time, unlike wall time, says where a round's work
    goes even on a busy host (what the driver or Ray's daemons spend while the workers compute is
    taken from them when the workers use every core)."""
    import contextlib

    from burtorch.fl import Federation

    with contextlib.ExitStack() as stack:
        if any(ex == "ray" for ex, _ in configs):
            from burtorch.fl.ray_executor import session

            stack.enter_context(session(max(w or 1 for ex, w in configs if ex == "ray")))
        feds, startup = [], []
        for executor, workers in configs:
            t0 = time.perf_counter()
            fed = stack.enter_context(Federation(problem, make_method(), executor=executor, workers=workers, seed=1,
                                                 eval_every=0))
            startup.append(time.perf_counter() - t0)
            feds.append(fed)
        workers_of = [_worker_pids(fed) for fed in feds]
        per_round: list[list[float]] = [[] for _ in configs]
        cpu: list[list[tuple[float, list[float], float, list[float]]]] = [[] for _ in configs]
        # wall time per round inside executor.run (sending, the workers' rounds, the replies)
        in_executor: list[list[float]] = [[] for _ in configs]
        me = os.getpid()
        for _ in range(repeats):
            for i, fed in enumerate(feds):
                b0 = fed.executor.busy_seconds()
                c0 = _tree_cpu()
                d0 = _cpu_seconds(me)
                t0 = time.perf_counter()
                fed.run(rounds)
                per_round[i].append((time.perf_counter() - t0) / rounds)
                in_executor[i].append(sum(r["seconds"] for r in fed.records[-rounds:]) / rounds)
                d1 = _cpu_seconds(me)
                c1 = _tree_cpu()
                b1 = fed.executor.busy_seconds()
                spent = {p: c1[p] - c0.get(p, 0.0) for p in c1}
                mine = [spent.get(p, 0.0) / rounds for p in workers_of[i]]
                rest = sum(v for p, v in spent.items() if p not in workers_of[i]) / rounds
                busy = [(b - a) / rounds for a, b in zip(b0, b1)]
                cpu[i].append(((d1 - d0) / rounds, mine, rest, busy))
        finals = [fed.x.tobytes() for fed in feds]
    rows = []
    for (executor, workers), times, up, final, use, inside in zip(configs, per_round, startup, finals, cpu,
                                                                   in_executor):
        med = statistics.median(times)
        n_workers, n_busy = len(use[0][1]), len(use[0][3])
        rows.append({"executor": executor, "workers": workers, "s_per_round": med, "rounds_per_s": 1.0 / med,
                     "startup_s": up, "all_s_per_round": times, "final": final,
                     "cpu_driver_s_per_round": statistics.median(u[0] for u in use),
                     "cpu_workers_s_per_round": [statistics.median(u[1][w] for u in use) for w in range(n_workers)],
                     "cpu_rest_s_per_round": statistics.median(u[2] for u in use),
                     "busy_s_per_round": [statistics.median(u[3][w] for u in use) for w in range(n_busy)],
                     # per pass: the round's wall time in the executor beyond the slowest worker's
                     # time in its clients' rounds (messaging), and outside the executor (the
                     # server's step: absorbing the replies, the next point, the record)
                     "messaging_s_per_round": statistics.median(e - max(u[3]) for e, u in zip(inside, use)),
                     "server_s_per_round": statistics.median(t - e for t, e in zip(times, inside))})
    return rows


def _cpu_text(row: dict) -> str:
    workers = row["cpu_workers_s_per_round"]
    text = f"driver {row['cpu_driver_s_per_round'] * 1e3:.2f}"
    if workers:
        text += ", workers " + " + ".join(f"{w * 1e3:.2f}" for w in workers)
    if row["executor"] == "ray":
        text += f", Ray's daemons {row['cpu_rest_s_per_round'] * 1e3:.2f}"
    busy = " + ".join(f"{b * 1e3:.2f}" for b in row["busy_s_per_round"])
    return (text + f" ms; wall time in the clients' rounds {busy} ms, messaging "
            f"{row['messaging_s_per_round'] * 1e3:.2f} ms, server step {row['server_s_per_round'] * 1e3:.2f} ms")


def peak_rss_mb(code: str) -> float:
    """The child's own peak RSS (VmHWM: unlike ru_maxrss it does not carry the parent's peak over exec)."""
    probe = "\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    out = subprocess.run([sys.executable, "-c", code + probe], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024.0


MEMORY_RUN = """
from burtorch import fl
from burtorch.fl.logistic import synthetic
problem = synthetic({clients}, {clients} * 50, 30, seed=0)
with fl.Federation(problem, fl.EF21(None, fl.TopK(30, 1)), seed=0) as fed:
    fed.run(3)
    resident = fed.executor.group.resident_bytes()
print(resident)
"""
MEMORY_BASE = "import numpy, burtorch, burtorch.fl, burtorch.fl.logistic"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.fl_scale", description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10, help="rounds per configuration per repeat")
    ap.add_argument("--hidden", type=int, default=64, help="hidden width e of the makemore MLP")
    ap.add_argument("--max-samples", type=int, default=256, help="samples per client")
    ap.add_argument("--k", type=int, default=100, help="TopK's k")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ray-1", action="store_true", help="also a Ray row with one worker")
    ap.add_argument("--memory-clients", type=int, default=1000)
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray rows")
    ap.add_argument("--json", default=None)
    ap.add_argument("--data", metavar="PATH", default=None,
                    help="names.txt or a directory holding it (default: $BURTORCH_DATA, else the embedded words)")
    args = ap.parse_args(argv)

    import burtorch as bt
    from burtorch.fl import EF21, TopK

    # Workers run their clients on one thread each (one core per worker), so the serial
    # executor's clients run on one thread too: the rows then compare executors by workers,
    # not by how many cores a single process's records split across.
    bt.set_num_threads(1)
    results: dict[str, Any] = {"settings": vars(args), "mlp": [], "tiny": []}
    problem = _names_problem(args.clients, args.hidden, args.max_samples, args.data)
    d = len(problem.initial_point(1))
    make = lambda: EF21(0.1, TopK(d, args.k))  # noqa: E731
    # speed-ups mean something on an idle host only: the load is printed beside them, before and after
    results["load_average"] = {"before": os.getloadavg()[0]}
    print(f"makemore MLP e={args.hidden} ({d:,} parameters) on {args.clients} clients x {args.max_samples} samples, "
          f"EF21 + Top{args.k}, {args.rounds} rounds, medians of {args.repeats} "
          f"(load average {results['load_average']['before']:.2f} on {os.cpu_count()} CPUs)")
    configs = [("serial", None), ("processes", 2)]
    try:
        import ray  # noqa: F401
        if not args.no_ray:
            configs += [("ray", 1)] * args.ray_1 + [("ray", 2)]
    except ImportError:
        print("  (ray not installed: pip install \"burtorch[fl]\" for the Ray rows)")
    results["mlp"] = time_interleaved(problem, make, configs, args.rounds, args.repeats)
    serial = results["mlp"][0]
    for row in results["mlp"]:
        same = row["final"] == serial["final"]
        print(f"  {row['executor']:>9} x{row['workers'] or 1}: {row['rounds_per_s']:7.2f} rounds/s "
              f"({row['s_per_round'] * 1e3:8.1f} ms/round, {serial['s_per_round'] / row['s_per_round']:4.2f}x serial, "
              f"start-up {row['startup_s']:.2f} s, iterates {'equal to' if same else 'DIFFERENT from'} serial)")
        print(f"  {'':>12} CPU per round: {_cpu_text(row)}")
    if len(results["mlp"]) > 1:
        print("  (ideal with W workers: serial/W per round. A round's wall time beyond its slowest worker's time in "
              "the clients' rounds is messaging (inside the executor's run: sending the round, the replies) and the "
              "server's step (outside it), whose CPU runs while the workers wait; a "
              "worker's time in the clients' rounds above serial/W is what running beside the other worker, or "
              "other processes of a busy host, costs it; above its CPU time, what it waited for a core)")
    results["load_average"]["after"] = os.getloadavg()[0]
    print(f"  load average after the rows: {results['load_average']['after']:.2f} (speed-ups mean something on "
          "an idle host only)")

    from burtorch.fl.logistic import synthetic

    tiny = synthetic(args.clients, args.clients * 10, 5, seed=0)
    make_tiny = lambda: EF21(0.1, TopK(5, 1))  # noqa: E731
    print(f"tiny model (d=5, {args.clients} clients x 10 samples), {args.rounds * 5} rounds: the executors' own cost")
    results["tiny"] = time_interleaved(tiny, make_tiny, configs, args.rounds * 5, args.repeats)
    base = results["tiny"][0]["s_per_round"]
    for row in results["tiny"]:
        print(f"  {row['executor']:>9} x{row['workers'] or 1}: {row['s_per_round'] * 1e3:7.2f} ms/round "
              f"(overhead over serial {(row['s_per_round'] - base) * 1e3:+7.2f} ms/round; CPU {_cpu_text(row)})")

    n = args.memory_clients
    run_mb = peak_rss_mb(MEMORY_RUN.format(clients=n))
    resident_mb = int(subprocess.run([sys.executable, "-c", MEMORY_RUN.format(clients=n)], capture_output=True,
                                     text=True, check=True).stdout.split()[-1]) / 2 ** 20
    base_mb = peak_rss_mb(MEMORY_BASE)
    results["memory"] = {"clients": n, "peak_rss_mb": run_mb, "imports_only_mb": base_mb,
                         "method_vectors_mb": resident_mb}
    print(f"memory: {n:,} clients of the default problem (EF21, serial): peak RSS {run_mb:.1f} MB "
          f"(the same imports alone: {base_mb:.1f} MB; the clients' EF21 vectors: {resident_mb:.2f} MB)")
    for part in ("mlp", "tiny"):
        for row in results[part]:
            row.pop("final")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
