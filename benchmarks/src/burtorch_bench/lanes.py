"""Many small evaluations: the paper's W1 (Figure 1) and W2 (Figure 2) graphs with gradients over
N inputs through a recorded program's .map, whose samples replay in SIMD lanes (natively: the
program compiled to one fused loop, burtorch.native), against the lanes' interpreter, the same
program replayed one sample at a time (lanes off: .map before lane replay) and JAX's
jit(vmap(value_and_grad)), FP64, one core.

    taskset -c 0 python -m burtorch_bench.lanes [--n1 100000] [--n2 20000] [--reps 15]
                                                [--peers one-core|default]

The warm-up runs .map as a user does until it starts compiling the program in the background,
then waits for the compile (a cache hit loads at once), so the .map rows time the default path
once native code is ready; the header of each graph says whether native code ran (no compiler:
the interpreter, and why). Rows per graph: burtorch .map allocating its outputs (as JAX does),
.map(out=...) writing into arrays the caller passes and reuses, the same with native programs off
(bt.set_native_programs(False): the lanes' interpreter, record by record), the one-sample replay,
JAX, and the traffic floor: the
cheapest pass that reads X (N x 2 doubles) once and writes the outputs once, with the dtypes and
shapes .map writes (values N, grads N x 2, float64) into arrays reused as out= reuses them:
np.copyto(grads, X) then values.fill(0), two numpy calls timed like every other row (numpy
stores ordinarily: where the arrays are out of cache each output line is read before it is
written, which a pass with streaming stores, as .map's for outputs of a megabyte and more,
skips: with the arrays out of cache, a streaming pass would go a little lower). Each
repetition runs every row once, in turn (the order rotating from one repetition to the next), so
all rows see the same load; medians of --reps after a warm-up. The ratios are what to read: on a
shared host the single figures move with the load.

One core, configured as a careful user would (--peers one-core, the default): JAX's CPU client
dispatches each call to a worker thread and waits for it, and on one core that thread competes
with the caller (and, spinning after its work, with the next row); jax_cpu_enable_async_dispatch
off runs the computation on the calling thread. XLA_FLAGS gets --xla_cpu_multi_thread_eigen=false
(Eigen's own pool off); the often-quoted `intra_op_parallelism_threads=1` is no XLA flag (XLA
ignores it without the dashes and refuses it with them), so it is not set. No row uses PyTorch;
if something loaded it, one-core sets its threads to 1. --peers default leaves the peers as
installed. Each row also reports the CPU time the process's other threads used per call (from
/proc/self/task/*/schedstat): a row whose helpers run beside it on the one core shows it there.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np


def _burtorch_rows(expr, X):
    import burtorch as bt
    from burtorch import _core, native

    f = bt.value_and_grad(expr, argnums=(0, 1), dtype=bt.float64)
    f.map(X[:2])  # the trace
    values, grads = np.empty(len(X)), np.empty((len(X), 2))
    # The warm-up: .map as a user calls it, until it has mapped the lanes that start its native
    # compile in the background, then a wait for that compile (a cache hit loads at once); with
    # fewer samples than that in all (a short test run), compiled at once instead.
    for _ in range(-(-native.NATIVE_AFTER // len(X))):
        f.map(X)
    status = native._wait(f)[-1]
    if status == "not started" and native.native_programs_enabled():
        status = bt.compile_native(f)[-1]

    def lanes():
        return f.map(X)

    def lanes_out():
        return f.map(X, out=(values, grads))

    def interpreter_out():
        native.set_native_programs(False)
        try:
            return f.map(X, out=(values, grads))
        finally:
            native.set_native_programs(True)

    def one():
        _core.set_lanes_enabled(False)
        try:
            return f.map(X)
        finally:
            _core.set_lanes_enabled(True)

    return status, [("burtorch .map (lanes)", lanes), ("burtorch .map(out=) (lanes)", lanes_out),
                    ("burtorch .map(out=) interpreter", interpreter_out), ("burtorch .map one-sample", one)]


ONE_CORE_XLA_FLAG = "--xla_cpu_multi_thread_eigen=false"


def configure_peers(mode: str) -> list[str]:
    """Sets the peers up for `mode` before JAX is imported; returns the lines the header prints."""
    lines = []
    if mode == "one-core":
        flags = os.environ.get("XLA_FLAGS", "")
        if ONE_CORE_XLA_FLAG.split("=")[0] not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {ONE_CORE_XLA_FLAG}".strip()
    lines.append(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    torch = sys.modules.get("torch")  # no row uses it; if something loaded it, its pool is idle
    if torch is None:
        lines.append("torch not loaded")
    else:
        if mode == "one-core":
            torch.set_num_threads(1)
        lines.append(f"torch loaded: {torch.get_num_threads()} threads")
    try:
        import jax
    except ImportError as exc:
        return lines + [f"jax not installed ({exc.name}): its rows are left out"]
    if mode == "one-core":
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    lines.append(f"jax {jax.__version__}: async dispatch "
                 f"{'on' if jax.config.read('jax_cpu_enable_async_dispatch') else 'off'}")
    return lines


def _jax_row(expr, X):
    import jax

    jax.config.update("jax_enable_x64", True)
    f = jax.jit(jax.vmap(jax.value_and_grad(expr, argnums=(0, 1))))
    a, b = jax.device_put(np.ascontiguousarray(X[:, 0])), jax.device_put(np.ascontiguousarray(X[:, 1]))

    def once():
        v, (ga, gb) = jax.block_until_ready(f(a, b))
        return v, np.stack([np.asarray(ga), np.asarray(gb)], axis=1)

    once()  # compile
    return [("jax jit(vmap(value_and_grad))", once)]


def others_cpu_ns() -> int | None:
    """CPU time (ns) the process's threads other than this one have used so far, or None where
    /proc has no schedstat (not Linux)."""
    me = threading.get_native_id()
    total = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            if int(tid) != me:
                with open(f"/proc/self/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
    except OSError:
        return None
    return total


def _floor_row(X):
    grads, values = np.empty_like(X), np.empty(len(X))

    def once():
        np.copyto(grads, X)
        values.fill(0.0)
        return None

    return [("traffic floor (numpy pass)", once)]


def _w2(a, b):
    from burtorch.paper_graphs import w2_expr

    return w2_expr(a, b)[-1]


def _w2_jax(a, b):
    import jax

    from burtorch.paper_graphs import w2_expr

    return w2_expr(a, b, relu=jax.nn.relu)[-1]


def bench(name, expr, jax_expr, n, reps, seed=0):
    from burtorch.paper_graphs import w1_expr  # noqa: F401  (the graphs' one definition)

    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    status, rows = _burtorch_rows(expr, X)
    try:
        rows += _jax_row(jax_expr, X)
    except ImportError as exc:
        print(f"  jax not installed ({exc.name}): its row is left out")
    rows += _floor_row(X)
    ref_v, ref_g = rows[0][1]()
    for label, fn in rows[1:]:  # every row computes the same numbers (the floor computes none)
        out = fn()
        if out is not None:
            np.testing.assert_allclose(out[0], ref_v, rtol=1e-9, atol=1e-9, err_msg=label)
            np.testing.assert_allclose(out[1], ref_g, rtol=1e-9, atol=1e-9, err_msg=label)
    times = {label: [] for label, _ in rows}
    others = {label: 0 for label, _ in rows}
    for rep in range(reps):
        # the order rotates per repetition: whichever row runs first in a round ran faster
        # on the shared host, whatever it was
        for label, fn in rows[rep % len(rows):] + rows[:rep % len(rows)]:
            c = others_cpu_ns()
            t = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t)
            if c is not None:
                others[label] += others_cpu_ns() - c
    med = {label: statistics.median(ts) for label, ts in times.items()}
    lanes_out = med["burtorch .map(out=) (lanes)"]
    floor = med["traffic floor (numpy pass)"]
    print(f"{name}: N = {n:,} inputs, value and 2 grads each, FP64; medians of {reps}; "
          f"native code: {'ran' if status == 'native' else 'did not run (' + status + ')'}")
    print(f"  {'row':<32} {'median ms':>10} {'min':>8} {'x lanes(out=)':>14} {'x floor':>8} {'others ms':>10}")
    for label, ts in times.items():
        print(f"  {label:<32} {1e3 * med[label]:>10.3f} {1e3 * min(ts):>8.3f} {med[label] / lanes_out:>14.2f}"
              f" {med[label] / floor:>8.2f} {1e-6 * others[label] / reps:>10.3f}")
    return med


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.lanes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=100_000, help="W1 inputs")
    ap.add_argument("--n2", type=int, default=20_000, help="W2 inputs")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--peers", choices=("one-core", "default"), default="one-core",
                    help="one-core: JAX set up for one core (see above); default: as installed")
    args = ap.parse_args(argv)
    if args.n1 < 2 or args.n2 < 2 or args.reps < 1:
        ap.error("--n1 and --n2 must be at least 2, --reps at least 1")
    peers = configure_peers(args.peers)
    from burtorch import _core
    from burtorch.paper_graphs import w1_expr

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(f"lane width: {_core.lane_width(_core.float64)} FP64 / {_core.lane_width(_core.float32)} FP32 "
          f"({_core.simd}); cores {cores}" + ("" if cores and len(cores) == 1 else
                                             " (pin to one core, taskset -c 0, for one-core figures)"))
    print(f"peers: {args.peers}; " + "; ".join(peers))
    print("floor: np.copyto(grads, X) + values.fill(0): reads X once, writes values and grads once")
    bench("W1", w1_expr, w1_expr, args.n1, args.reps)
    bench("W2", _w2, _w2_jax, args.n2, args.reps)


if __name__ == "__main__":
    main()
