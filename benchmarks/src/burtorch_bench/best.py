"""Per W4/W5 configuration of a bench run: burtorch's best row at one thread and at two, the
fastest peer, PyTorch eager and the GEMM floor (its BLAS on one thread, and on two when the run
had two-thread rows), as ratios (the figures the speed targets are stated in). Reads the
results.json that `burtorch-bench` writes.

    python -m burtorch_bench.best benchmarks/results/latest.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .specs import FLOOR, config_threads

HEADER = ("| W | config | best burtorch row, 1 thread (ms) | best at 2 threads (ms) | 2 threads / 1 thread "
          "| fastest peer (ms) | best burtorch (any) / fastest peer | torch-eager (ms) | best / torch-eager "
          "| GEMM floor (ms) | floor / best 1-thread row | floor, BLAS on 2 threads (ms) | its 2 threads / 1 thread |")


def step_medians(doc: dict) -> dict:
    """{(workload, e, b): {(entry, threads): median ms per step}} over the W4/W5 rows that ran."""
    rows: dict = {}
    for r in doc["runs"]:
        if r["workload"] not in ("mlp", "gpt") or r.get("status") != "ok" or "step" not in r.get("times", {}):
            continue
        c = r["config"]
        key = ("W4" if r["workload"] == "mlp" else "W5", c.get("e"), c["b"])
        rows.setdefault(key, {})[(r["entry"], config_threads(c))] = statistics.median(r["times"]["step"]) * 1e3
    return rows


def _g(x: float) -> str:
    return format(x, ".4g")


def table(doc: dict) -> list[str]:
    out = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    rows = step_medians(doc)
    for key in sorted(rows, key=lambda k: (k[0], k[1] or 0, k[2])):
        r = rows[key]
        one = {e: t for (e, th), t in r.items() if e.startswith("burtorch") and th == 1}
        two = {e: t for (e, th), t in r.items() if e.startswith("burtorch") and th == 2}
        peers = {e: t for (e, th), t in r.items() if not e.startswith("burtorch") and e != FLOOR}
        if not one:
            continue
        b1 = min(one, key=one.__getitem__)
        best = min([*one.values(), *two.values()])
        cfg = (f"e={key[1]} " if key[1] else "") + f"b={key[2]}"
        cells = [key[0], cfg, f"{b1} {_g(one[b1])}"]
        if two:
            b2 = min(two, key=two.__getitem__)
            cells += [f"{b2} {_g(two[b2])}", f"{one[b1] / two[b2]:.2f}x"]
        else:
            cells += ["-", "-"]
        if peers:
            fp = min(peers, key=peers.__getitem__)
            cells += [f"{fp} {_g(peers[fp])}", f"{best / peers[fp]:.2f}"]
        else:
            cells += ["-", "-"]
        te = peers.get("torch-eager")
        cells += [_g(te), f"{best / te:.2f}"] if te else ["-", "-"]
        floor, floor2 = r.get((FLOOR, 1)), r.get((FLOOR, 2))
        cells += [_g(floor), f"{floor / one[b1] * 100:.0f} %"] if floor else ["-", "-"]
        cells += [_g(floor2), f"{floor / floor2:.2f}x" if floor else "-"] if floor2 else ["-", "-"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.best", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a results.json written by burtorch-bench")
    args = ap.parse_args(argv)
    try:
        doc = json.loads(args.results.read_text())
    except (OSError, ValueError) as e:
        print(f"cannot read {args.results}: {e}", file=sys.stderr)
        return 2
    print("\n".join(table(doc)))
    from .capacity import around_runs

    probes = around_runs(doc.get("meta"))
    if probes:
        print("\n" + probes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
