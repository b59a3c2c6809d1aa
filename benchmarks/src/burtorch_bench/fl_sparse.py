"""Sparse federated runs at the size of the LibSVM data sets of the EF21 papers: peak memory (RSS,
from the OS) of a child process that builds a synthetic data set of the chosen shape as CSR,
splits it among the clients and runs EF21 + Top-k.

    python -m burtorch_bench.fl_sparse [--shape news20|rcv1] [--clients 20] [--rounds 100] [--k 1]
    python -m burtorch_bench.fl_sparse --shape rcv1 --write-libsvm rcv1-shaped.txt

With ``--write-libsvm PATH`` the generated set is written as a LibSVM file (labels +1/-1, 1-based
feature indices) and nothing is run: a stand-in of the real file's shape for the reproduction in
docs/guides/reproduce-ef21.md.

Shapes: news20.binary (19,996 x 1,355,191, 0.034 % of entries stored) and rcv1.binary
(20,242 x 47,236, 0.16 %). The data is generated, not read: the point is the memory of storage,
oracles and method state for that shape (the reader's cost is the file's, O(nnz) as well).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SHAPES = {"news20": (19_996, 1_355_191, 0.00034), "rcv1": (20_242, 47_236, 0.0016)}
# What the issue asks of each shape, for the printout's verdict.
LIMIT_MB = {"news20": 1024, "rcv1": 300}


def synthetic_csr(rows: int, dim: int, density: float, seed: int = 0):
    """A CSR matrix whose rows hold about density * dim entries at uniform columns (repeats within a
    row merged away), values N(0, 1) / sqrt(entries), and labels from a sparse linear rule."""
    import numpy as np

    from burtorch.fl.sparse import CSR

    rng = np.random.default_rng(seed)
    counts = np.maximum(1, rng.poisson(density * dim, rows))
    row = np.repeat(np.arange(rows, dtype=np.int64), counts)
    key = np.unique(row * dim + rng.integers(0, dim, len(row)))  # sorted: by row, then column
    del row
    row, col = np.divmod(key, dim)
    del key
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=rows))])
    del row
    values = rng.standard_normal(len(col)) / np.sqrt(density * dim)
    A = CSR(indptr, col, values, (rows, dim))
    w = rng.standard_normal(dim) * (rng.random(dim) < 0.1)
    y = np.where(A.matvec(w) + 1e-3 * rng.standard_normal(rows) > 0, 1.0, -1.0)
    return A, y


def write_libsvm(path: str, A, y) -> None:
    """A CSR matrix and its labels as a LibSVM file, written a block of rows at a time."""
    import numpy as np

    with open(path, "w") as f:
        for start in range(0, len(y), 2048):
            lines = []
            for r in range(start, min(start + 2048, len(y))):
                lo, hi = A.indptr[r], A.indptr[r + 1]
                feats = " ".join(f"{c + 1}:{v:.6g}" for c, v in zip(A.indices[lo:hi].tolist(), A.data[lo:hi].tolist()))
                lines.append(f"{int(np.sign(y[r])):+d} {feats}\n")
            f.writelines(lines)


def child(shape: str, clients: int, rounds: int, k: int) -> dict:
    from burtorch.fl import Federation, make_compressor, make_method
    from burtorch.fl.logistic import SparseLogisticProblem

    rows, dim, density = SHAPES[shape]
    t0 = time.perf_counter()
    A, y = synthetic_csr(rows, dim, density)
    nnz = A.nnz
    problem = SparseLogisticProblem(A, y, clients, split="iid", seed=0, source=f"synthetic {shape}-shaped")
    del A, y
    built = time.perf_counter()
    method = make_method("ef21", compressor=make_compressor("topk", dim, k))
    with Federation(problem, method, seed=0, eval_every=10) as fed:
        fed.run(rounds)
        first, last = fed.records[0], fed.records[-1]
    done = time.perf_counter()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"shape": shape, "rows": rows, "dim": dim, "nnz": nnz, "clients": clients, "rounds": rounds, "k": k,
            "peak_rss_mb": peak_kb / 1024, "build_s": built - t0, "rounds_s": done - built,
            "grad_norm_first": first["grad_norm"], "grad_norm_last": last["grad_norm"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.fl_sparse", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="news20")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--k", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--write-libsvm", metavar="PATH", default=None,
                   help="write the generated data set of --shape as a LibSVM file and stop")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write_libsvm:
        A, y = synthetic_csr(*SHAPES[args.shape])
        write_libsvm(args.write_libsvm, A, y)
        print(f"{args.write_libsvm}: {A.shape[0]:,} x {A.shape[1]:,}, nnz {A.nnz:,} ({args.shape}-shaped, generated)")
        return 0
    if args.child:
        print(json.dumps(child(args.shape, args.clients, args.rounds, args.k)))
        return 0
    cmd = [sys.executable, "-m", "burtorch_bench.fl_sparse", "--child", "--shape", args.shape,
           "--clients", str(args.clients), "--rounds", str(args.rounds), "--k", str(args.k)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "BURTORCH_NUM_THREADS": "1"})
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    limit = LIMIT_MB[args.shape]
    load = os.getloadavg()[0]
    print(f"{r['shape']}-shaped: {r['rows']:,} x {r['dim']:,}, nnz {r['nnz']:,}; {r['clients']} clients, EF21 + "
          f"Top-{r['k']}, {r['rounds']} rounds: peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({'within' if r['peak_rss_mb'] < limit else 'OVER'} {limit} MB); build {r['build_s']:.1f} s, "
          f"rounds {r['rounds_s']:.1f} s (load average {load:.2f}); ||grad f|| {r['grad_norm_first']:.3e} -> "
          f"{r['grad_norm_last']:.3e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "load_average": load}, f, indent=1)
    return 0 if r["peak_rss_mb"] < limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
