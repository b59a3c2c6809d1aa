"""Per-sample gradients (the N x d matrix DP-SGD and gradient-noise studies need): W4's MLP at
e = 64 (d = 69,083), N = 1,024 samples, FP32, one core.

    taskset -c 0 python -m burtorch_bench.per_sample [--n 1024] [--hidden 64] [--reps 7]
    taskset -c 0 python -m burtorch_bench.per_sample --hidden 4 --against OTHER_PYTHON [--rounds 6]

Rows: burtorch's per_sample_grads (recorded program, rows written straight into one numpy
buffer) allocating a fresh (N, d) output per call like the peers do, and the same writing into an
output passed as out= and reused across calls (no fresh pages to fault in); that again with the
rows' stores forced to ordinary or to non-temporal (streaming) stores (out= picks one by the
output's size against the last-level cache), and with each row made but not stored
(burtorch-out-discard: the compute alone, G left as it was, while a row fits the
second-level cache: each row is made whole in a buffer); that again with the lanes switched off
(bt.set_lanes_enabled(False): each sample replayed into its frame and its row copied out, the
path before rows were written by their records); an eager burtorch loop (build, backward, copy
the grads out, rewind); torch.func.vmap(torch.func.grad(...)) and jax.jit(jax.vmap(jax.grad(...)))
where installed (their per-parameter arrays concatenated into the same (N, d) layout); and two
plain writes of a reused (N, d) array with nothing computed: numpy's fill with a constant and a
copy of one row into every row (memcpy per row, which on x86 uses `rep movsb`: ordinary stores
that need not read the lines first). The write floor printed under the table is the faster of
those two medians: what any code must at least spend to hand the matrix out. A third write,
write-stream, fills it with non-temporal stores (what a streamed out= spends on its stores alone);
under the table, the streamed out= is set against that and the compute alone. Every framework
starts from the same weights and batch; each row's gradients are cross-checked against
burtorch's. Each repetition runs every row in turn (the order rotating from one repetition to the
next), so all rows see the same load; in its turn a row is called --inner times back to back (the
median of those counts), so it runs in the caches its own previous call left, as in a loop;
medians of --reps after one warm-up. On a shared host read the ratios.

--against OTHER_PYTHON times the out= call in this interpreter and in another one (say a venv
with an older burtorch) as separate processes, alternating (--rounds each, --calls calls per
process after a warm-up, each process's median), and prints both medians of those medians,
their ratio, and whether the two G's SHA-256 match (the same bits from both builds).

W4's per-sample program has range records (gather, linear, tanh, cross-entropy): with the lanes
on, the records that reach the parameters write their parts of each row themselves, once; the
forward and the activations' backward run the one-sample kernels (the output layer's forward
across its units, the same operations), so every row is bitwise the one-sample replay's
(docs/guides/programs.md). The "x lanes-off" column is each row's time over the lanes-off row's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _setup(n, hidden, seed=0):
    from .specs import MLP_BLOCK, MLP_EMBED_DIM

    rng = np.random.default_rng(seed)
    V = 27
    p = {"C": rng.normal(size=(V, MLP_EMBED_DIM)).astype(np.float32),
         "W1": (rng.normal(size=(hidden, MLP_BLOCK * MLP_EMBED_DIM)) * 0.05).astype(np.float32),
         "b1": (rng.normal(size=hidden) * 0.01).astype(np.float32),
         "W2": (rng.normal(size=(V, hidden)) * 0.1).astype(np.float32),
         "b2": np.zeros(V, np.float32)}
    X = rng.integers(0, V, size=(n, MLP_BLOCK))
    Y = rng.integers(0, V, size=n)
    return p, X, Y, V


def _burtorch_model(p, V, hidden):
    import burtorch as bt
    from burtorch.nn import MakemoreMLP

    m = MakemoreMLP.paper(hidden=hidden, vocab=V, dtype=bt.float32)
    state = m.state_dict()
    for name, key in (("embed.weight", "C"), ("fc1.weight", "W1"), ("fc1.bias", "b1"),
                      ("fc2.weight", "W2"), ("fc2.bias", "b2")):
        state[name].set_data(p[key].reshape(-1).tolist())
    return m


def _flat_torch(grads):
    return np.concatenate([grads[k].reshape(len(grads[k]), -1) for k in ("C", "W1", "b1", "W2", "b2")], axis=1)


def run_burtorch_compiled(p, X, Y, V, hidden):
    import burtorch as bt

    m = _burtorch_model(p, V, hidden)
    batch = [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]
    bt.per_sample_grads(m, batch[:2])  # the trace

    def once():
        return bt.per_sample_grads(m, batch)[0]
    return once


def run_burtorch_compiled_out(p, X, Y, V, hidden):
    import burtorch as bt

    m = _burtorch_model(p, V, hidden)
    batch = [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]
    out = bt.per_sample_grads(m, batch)[0]  # the trace, and the buffer every call reuses

    def once():
        return bt.per_sample_grads(m, batch, out=out)[0]
    return once


def _run_out_stores(how):
    def make(p, X, Y, V, hidden):
        import burtorch as bt

        m = _burtorch_model(p, V, hidden)
        batch = [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]
        out = bt.per_sample_grads(m, batch)[0]

        def once():
            old = bt._core._set_rows_store(how)
            try:
                return bt.per_sample_grads(m, batch, out=out)[0]
            finally:
                bt._core._set_rows_store(old)
        return once
    return make


def run_burtorch_out_lanes_off(p, X, Y, V, hidden):
    import burtorch as bt

    m = _burtorch_model(p, V, hidden)
    batch = [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]
    out = bt.per_sample_grads(m, batch)[0]

    def once():
        bt.set_lanes_enabled(False)
        try:
            return bt.per_sample_grads(m, batch, out=out)[0]
        finally:
            bt.set_lanes_enabled(True)
    return once


def run_burtorch_eager(p, X, Y, V, hidden):
    m = _burtorch_model(p, V, hidden)
    pv = m.parameter_vector()
    grads = pv.numpy("grads")
    arena = pv.arena
    batch = [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]

    def once():
        out = np.empty((len(batch), pv.size), np.float32)
        cp = arena.checkpoint()
        for i, s in enumerate(batch):
            pv.zero_grad()
            m.loss(*s).backward()
            out[i] = grads
            arena.rewind(cp)
        return out
    return once


def run_torch(p, X, Y, V, hidden):
    import torch
    from torch.func import grad, vmap

    torch.set_num_threads(1)
    tp = {k: torch.tensor(v) for k, v in p.items()}
    Xt, Yt = torch.tensor(X), torch.tensor(Y)

    def loss(params, x, y):
        h = torch.tanh(params["C"][x].reshape(-1) @ params["W1"].T + params["b1"])
        logits = h @ params["W2"].T + params["b2"]
        return torch.nn.functional.cross_entropy(logits[None], y[None])
    f = vmap(grad(loss), in_dims=(None, 0, 0))

    def once():
        g = f(tp, Xt, Yt)
        return _flat_torch({k: v.numpy() for k, v in g.items()})
    return once


def run_jax(p, X, Y, V, hidden):
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax
    import jax.numpy as jnp

    jp = {k: jnp.asarray(v) for k, v in p.items()}
    Xj, Yj = jnp.asarray(X), jnp.asarray(Y)

    def loss(params, x, y):
        h = jnp.tanh(params["C"][x].reshape(-1) @ params["W1"].T + params["b1"])
        logits = h @ params["W2"].T + params["b2"]
        return jax.nn.logsumexp(logits) - logits[y]
    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))

    def once():
        g = f(jp, Xj, Yj)
        return _flat_torch({k: np.asarray(v) for k, v in jax.block_until_ready(g).items()})
    return once


def _floor_arrays(p, X):
    out = np.empty((len(X), sum(v.size for v in p.values())), np.float32)
    out.fill(1.0)  # faulted in once, as a reused out= is
    return out


def run_write_fill(p, X, Y, V, hidden):
    out = _floor_arrays(p, X)

    def once():
        out.fill(1.5)  # numpy's store loop (a fill with zero would be glibc's memset)
    return once


def run_write_stream(p, X, Y, V, hidden):
    import burtorch as bt

    out = _floor_arrays(p, X)

    def once():
        bt._core._stream_fill(out, 1.5)  # non-temporal stores, as a streamed out= is written
    return once


def run_write_row_copy(p, X, Y, V, hidden):
    out = _floor_arrays(p, X)
    row = np.full(out.shape[1], 1.5, np.float32)

    def once():
        np.copyto(out, row)  # one row broadcast: a memcpy per row
    return once


FLOOR_ROWS = ("write-fill", "write-row-copy")
# rows that compute nothing to compare, or store nothing: no check of their output
UNCHECKED = FLOOR_ROWS + ("write-stream", "burtorch-out-discard")
ROWS = (("burtorch-compiled", run_burtorch_compiled), ("burtorch-compiled-out", run_burtorch_compiled_out),
        ("burtorch-out-plain", _run_out_stores("plain")), ("burtorch-out-stream", _run_out_stores("stream")),
        ("burtorch-out-discard", _run_out_stores("discard")),
        ("burtorch-out-lanes-off", run_burtorch_out_lanes_off),
        ("burtorch-eager-loop", run_burtorch_eager),
        ("torch-func-vmap-grad", run_torch), ("jax-jit-vmap-grad", run_jax),
        ("write-fill", run_write_fill), ("write-row-copy", run_write_row_copy), ("write-stream", run_write_stream))

# One process of --against: W4's weights and batch from the .npz the parent wrote (_setup's, the
# same bits in both interpreters), per_sample_grads into a reused out= timed after a warm-up;
# prints its median and G's SHA-256 as JSON. Numpy and burtorch only, so that it runs in a venv
# without this package.
_CHILD = r"""
import hashlib, json, statistics, sys, time
import numpy as np
import burtorch as bt
from burtorch.nn import MakemoreMLP
data = np.load(sys.argv[1])
calls, warm = map(int, sys.argv[2:4])
W2 = data["W2"]
m = MakemoreMLP.paper(hidden=W2.shape[1], vocab=W2.shape[0], dtype=bt.float32)
state = m.state_dict()
for name, key in (("embed.weight", "C"), ("fc1.weight", "W1"), ("fc1.bias", "b1"), ("fc2.weight", "W2"),
                  ("fc2.bias", "b2")):
    state[name].set_data(data[key].reshape(-1).tolist())
batch = [(x, int(y)) for x, y in zip(data["X"].tolist(), data["Y"].tolist())]
G = bt.per_sample_grads(m, batch)[0]
for _ in range(warm):
    bt.per_sample_grads(m, batch, out=G)
times = []
for _ in range(calls):
    t = time.perf_counter()
    bt.per_sample_grads(m, batch, out=G)
    times.append(time.perf_counter() - t)
print(json.dumps({"ms": 1e3 * statistics.median(times), "sha256": hashlib.sha256(G.tobytes()).hexdigest(),
                  "burtorch": bt.__file__}))
"""


def _child(python, data, args):
    argv = [python, "-c", _CHILD, data, str(args.calls), str(args.warmup)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except OSError as exc:
        raise SystemExit(f"per_sample --against: {python} failed to start: {exc}") from None
    if done.returncode != 0:
        raise SystemExit(f"per_sample --against: {python} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def against(args):
    """This interpreter's burtorch against OTHER's, as alternating processes (the order flipping
    each round, so neither always runs right after the other)."""
    pythons = {"this": sys.executable, "other": args.against}
    runs = {"this": [], "other": []}
    shas = {}
    p, X, Y, _ = _setup(args.n, args.hidden)
    with tempfile.TemporaryDirectory(prefix="per_sample_against_") as tmp:
        data = os.path.join(tmp, "w4.npz")
        np.savez(data, X=X, Y=Y, **p)
        print(f"per_sample_grads(out=G): W4 MLP e={args.hidden}, N={args.n:,}, FP32; per process: {args.warmup} "
              f"warm-up calls, median of {args.calls}; {args.rounds} rounds, alternating")
        for r in range(args.rounds):
            for who in (("this", "other") if r % 2 == 0 else ("other", "this")):
                res = _child(pythons[who], data, args)
                runs[who].append(res["ms"])
                shas.setdefault(who, set()).add(res["sha256"])
                print(f"  round {r + 1}: {who:<5} {res['ms']:8.3f} ms  ({res['burtorch']})", flush=True)
    this, other = statistics.median(runs["this"]), statistics.median(runs["other"])
    same = len(shas["this"]) == 1 and shas["this"] == shas["other"]
    print(f"this  ({pythons['this']}): median {this:.3f} ms")
    print(f"other ({pythons['other']}): median {other:.3f} ms")
    digests = "; ".join(f"{who} {', '.join(d[:16] for d in sorted(shas[who]))}" for who in ("this", "other"))
    print(f"other / this = {other / this:.2f}x; G's SHA-256 {'match' if same else 'DIFFER'} ({digests})")
    return 0 if same else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.per_sample", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=5, help="calls per row per repetition (their median counts)")
    ap.add_argument("--against", metavar="OTHER_PYTHON",
                    help="time the out= call here and in OTHER_PYTHON's burtorch, alternating processes")
    ap.add_argument("--rounds", type=int, default=6, help="--against: processes per interpreter")
    ap.add_argument("--calls", type=int, default=30, help="--against: timed calls per process")
    ap.add_argument("--warmup", type=int, default=5, help="--against: untimed calls per process first")
    args = ap.parse_args(argv)
    if args.against:
        raise SystemExit(against(args))
    p, X, Y, V = _setup(args.n, args.hidden)
    d = sum(v.size for v in p.values())
    print(f"per-sample gradients: W4 MLP e={args.hidden}, d={d:,}, N={args.n:,}, FP32, "
          f"output {args.n * d * 4 / 1e6:.0f} MB; medians of {args.reps} turns of {args.inner} calls each")
    print(f"{'framework':<22} {'median ms':>10} {'min':>8} {'max':>8} {'x torch':>8} {'x out=':>7} "
          f"{'x lanes-off':>11}  max |G - burtorch| / max |G|")
    runs = {}
    for name, make in ROWS:
        try:
            once = make(p, X, Y, V, args.hidden)
            once()  # warm-up (compilation for jit peers)
        except ImportError as exc:
            print(f"{name:<22} not installed ({exc.name})")
            continue
        runs[name] = once
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs.items())
    for rep in range(args.reps):  # every row once per repetition: all see the same load
        # the order rotates: whichever row runs first in a round would otherwise always see the
        # caches (and the host's load) in the same state
        for name, once in order[rep % len(order):] + order[:rep % len(order)]:
            # --inner calls back to back, their median: each row timed as a loop calling it runs
            # it, in the caches its own previous call left (its output among them), not in the
            # state the row before it left them
            turn = []
            for _ in range(args.inner):
                t = time.perf_counter()
                G = once()
                turn.append(time.perf_counter() - t)
                del G
            times[name].append(statistics.median(turn))
    if "burtorch-compiled" not in runs:
        raise SystemExit("per_sample: burtorch's compiled row is the reference and did not run")
    reference = runs["burtorch-compiled"]().copy()
    torch_ms = statistics.median(times["torch-func-vmap-grad"]) if "torch-func-vmap-grad" in times else None
    out_ms = statistics.median(times["burtorch-compiled-out"]) if "burtorch-compiled-out" in times else None
    off_ms = statistics.median(times["burtorch-out-lanes-off"]) if "burtorch-out-lanes-off" in times else None
    for name, once in runs.items():
        G = once()
        if G is None or name in UNCHECKED:  # the plain writes compute nothing, discard stores nothing
            check = "-"
        else:
            err = float(np.max(np.abs(G - reference)) / np.max(np.abs(reference)))
            check = f"{err:.2e} " + ("ok" if err < 1e-4 else "MISMATCH")
            if name.startswith(("burtorch-compiled", "burtorch-out")):  # one program's bits
                same = np.array_equal(G.view(np.uint32), reference.view(np.uint32))
                check += ", bitwise" if same else ", NOT BITWISE"
        med = statistics.median(times[name])
        rel = f"{med / torch_ms:8.3f}" if torch_ms else f"{'-':>8}"
        rel_out = f"{med / out_ms:7.2f}" if out_ms else f"{'-':>7}"
        rel_off = f"{med / off_ms:11.2f}" if off_ms else f"{'-':>11}"
        print(f"{name:<22} {1e3 * med:>10.2f} {1e3 * min(times[name]):>8.2f} {1e3 * max(times[name]):>8.2f} {rel} "
              f"{rel_out} {rel_off}  {check}")
        del G
    floors = [statistics.median(times[name]) for name in FLOOR_ROWS if name in times]
    if floors and out_ms:
        print(f"write floor (the faster plain write of the whole output): {1e3 * min(floors):.2f} ms; "
              f"burtorch-compiled-out / floor = {out_ms / min(floors):.2f}")
    if out_ms and "write-stream" in times and "burtorch-out-discard" in times:
        # out= streams above a quarter of the last-level cache: its bounds are the streamed write
        # and the rows' compute alone; the call costs their sum without overlap, the larger with all.
        # discard makes each whole row in a row-sized buffer: the compute alone only while a row
        # fits the second-level cache (e = 4's 24 KB, not e = 64's 276 KB)
        st, alone = statistics.median(times["write-stream"]), statistics.median(times["burtorch-out-discard"])
        print(f"streamed write floor {1e3 * st:.2f} ms, compute alone (rows made, not stored) {1e3 * alone:.2f} ms: "
              f"out= {1e3 * out_ms:.2f} ms is {out_ms / max(st, alone):.2f}x the larger, "
              f"{out_ms / (st + alone):.2f}x their sum")


if __name__ == "__main__":
    main()
