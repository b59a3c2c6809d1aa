"""``burtorch-bench``: the command line of the benchmark suite (also ``python -m burtorch_bench``)."""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import sys
import time
from pathlib import Path

from burtorch.cli.arguments import int_list, non_negative_float, non_negative_int, positive_float, positive_int

from .specs import WORKLOAD_ORDER, config_threads

WORKLOAD_CHOICES = (*WORKLOAD_ORDER, "all")
# The paper's names of the workloads, accepted beside the suite's own.
PAPER_NAMES = {"w1": "tiny", "w2": "small", "w3": "saveload", "w4": "mlp", "w5": "gpt"}

DESCRIPTION = """\
Runs the paper's workloads in burtorch and in every installed peer framework (PyTorch eager,
TorchScript and torch.compile, JAX eager and jit, micrograd, autograd, MLX), each (framework,
workload, configuration) in its own process pinned to one core, and cross-checks the numbers every
framework computes. Writes a terminal table, results.json, results.md and PNG charts to --out.

workloads:
  tiny      W1: the paper's Figure 1 graph, build + backward + discard, 100,000 times (FP64)
  small     W2: the Figure 2 graph (micrograd's README example), 20,000 times (FP64)
  saveload  W3: save and load the 7 node values of W2's graph, 5,000 times each
  mlp       W4: one training step of the character MLP (makemore), hidden e x batch b (FP32)
  gpt       W5: one training step of the miniature GPT, batch b (FP32)
  all       every workload above, in that order
  (w1 ... w5, the paper's names, run the same workloads)

other actions:
  burtorch-bench fl                 federated scale: 64 clients (makemore MLP), EF21 + TopK, rounds/s
                                    serially, on 2 local processes and on 2 Ray workers, medians of 5
                                    interleaved passes beside the load average (~1 min idle); its
                                    knobs: python -m burtorch_bench.fl_scale --help
  burtorch-bench report RESULTS.json [--markdown PAGE.md] [--plots] [--summary-json OUT.json]
                                    tables of a run, its performance page, PNG charts next to
                                    the JSON, the run reduced to what the tables render
  burtorch-bench compare OLD.json NEW.json                 per-row ratios of two runs

W4/W5 train on names.txt / tinyshakespeare.txt from --data (or the directory $BURTORCH_DATA), else
on the embedded corpus (Python's own pydoc text)."""


def _against(text: str) -> tuple:
    label, sep, python = text.partition("=")
    if not sep or not label or not python:
        raise argparse.ArgumentTypeError(f"expected LABEL=PYTHON, got {text!r}")
    return label, python


def _cpu(text: str):
    if text.lower() == "none":
        return "none"
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a CPU number or 'none', got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", type=lambda s: PAPER_NAMES.get(s.lower(), s),
                   choices=(*WORKLOAD_CHOICES, "fl", "report", "compare"),
                   help="a workload (W1 tiny, W2 small, W3 saveload, W4 mlp, W5 gpt: either name), all of "
                        "them, fl (federated scale), or: report JSON / compare OLD.json NEW.json")
    p.add_argument("files", nargs="*", help="JSON file(s) for report / compare")
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_const", dest="preset", const="quick",
                        help="a few-minute smoke run: fewer iterations, configs and repetitions")
    preset.add_argument("--paper", action="store_const", dest="preset", const="paper",
                        help="the paper's full counts for every peer, full W4/W5 grids on the paper's "
                             "data sets (names, tinyshakespeare: fetched by name unless --data) (slow)")
    p.set_defaults(preset="full")
    p.add_argument("--frameworks", "-f", type=lambda s: [x for x in s.split(",") if x],
                   help="comma list of frameworks or families (burtorch,torch,jax-jit,...); "
                        "default: all")
    p.add_argument("--iters", type=positive_int, help="W1/W2/W3: iterations per run for everyone")
    p.add_argument("--budget", type=non_negative_float,
                   help="W1/W2/W3: seconds one run may take before a peer measures fewer "
                        "iterations (0 = never reduce)")
    p.add_argument("--reps", type=positive_int, help="timed repetitions (W4/W5: timed steps)")
    p.add_argument("--warmup", type=non_negative_int, help="untimed warm-up iterations / steps")
    p.add_argument("--embed", type=int_list, help="W4 hidden sizes e, e.g. 4,64,1024")
    p.add_argument("--batch", type=int_list, help="W4/W5 batch sizes b, e.g. 1,64")
    p.add_argument("--threads", type=int_list, help="W4/W5: thread counts of the burtorch rows and of the GEMM "
                   "floor's BLAS, e.g. 1,2 (a threads column; a run of N threads is pinned to N cores; peers run "
                   "on one)")
    p.add_argument("--data", metavar="PATH",
                   help="a directory with names.txt / tinyshakespeare.txt, or one file for "
                        "W4/W5 (default: $BURTORCH_DATA, else the embedded corpus)")
    p.add_argument("--cpu", type=_cpu, help="core to pin each run to (default: the last allowed "
                                            "core; 'none' to not pin)")
    p.add_argument("--against", type=_against, action="append", default=[],
                   help="LABEL=PYTHON: also run burtorch under another interpreter (another "
                        "venv / build with burtorch_bench) and show it beside this one")
    p.add_argument("--out", default="bench-results",
                   help="directory for results.json, results.md and PNG charts")
    p.add_argument("--timeout", type=positive_float, default=900.0, help="seconds before a run is killed")
    p.add_argument("--processes", type=positive_int, default=1,
                   help="fresh processes per row, run in rounds over all rows; a row's samples are "
                        "pooled (a process's speed depends on where its memory landed)")
    from .report import add_report_arguments

    add_report_arguments(p)


def _validate(args) -> None:
    if args.data is not None and not Path(args.data).exists():
        raise SystemExit(f"burtorch-bench: --data {args.data!r} does not exist")
    # Sizes past these would run for hours or exhaust memory in every child: refused before any work.
    for flag, values, top in (("--iters", [args.iters], 10**8), ("--reps", [args.reps], 10**4),
                              ("--warmup", [args.warmup], 10**6), ("--embed", args.embed, 1 << 16),
                              ("--batch", args.batch, 1 << 16)):
        for v in values or ():
            if v is not None and v > top:
                raise SystemExit(f"burtorch-bench: {flag} {v} is above the most this suite takes ({top:,})")
    # The results are written after every run: the directory is made (or refused) before the first.
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"burtorch-bench: --out {args.out}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise SystemExit(f"burtorch-bench: --out {args.out} is not writable")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for t in getattr(args, "threads", None) or ():
        if not 1 <= t <= cores:
            raise SystemExit(f"burtorch-bench: --threads {t}: this process may use {cores} core(s)")


def _paper_data() -> str:
    """The cache directory holding the paper's W4/W5 data sets, fetched by name if need be."""
    from burtorch import data

    try:
        for name in ("names", "tinyshakespeare"):
            data.fetch(name)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"burtorch-bench --paper: {exc}") from None
    return str(data.cache_dir())


def handle(args) -> int:
    from . import compare, report

    if args.what == "report":
        if len(args.files) != 1:
            raise SystemExit("burtorch-bench report: give exactly one results JSON")
        try:
            return report.report(args.files[0], args.markdown, args.plots, args.summary_json)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"burtorch-bench report: {exc}") from None
    if args.what == "compare":
        if len(args.files) != 2:
            raise SystemExit("burtorch-bench compare: give OLD.json NEW.json")
        try:
            old, new = (report.load(f) for f in args.files)
        except (OSError, ValueError) as exc:  # a missing, special or junk file: said, not a traceback
            raise SystemExit(f"burtorch-bench compare: {exc}") from None
        sys.stdout.write(compare.render(compare.compare(old, new, args.frameworks),
                                        args.files[0], args.files[1]))
        return 0
    if args.files:
        raise SystemExit(f"burtorch-bench {args.what}: unexpected arguments {args.files}")
    if args.preset == "paper" and args.data is None:
        args.data = _paper_data()
    _validate(args)
    if args.what == "fl":
        from . import fl_scale

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        argv = ["--json", str(out / "fl_scale.json")] + (["--data", args.data] if args.data else [])
        return fl_scale.main(argv)
    return run_suite(args)


def _command_line(args) -> str:
    return f"{args.prog} {shlex.join(args.argv)}"


def run_suite(args) -> int:
    from burtorch.cli import machine

    from . import capacity, harness, report
    from . import frameworks as fw

    workloads = WORKLOAD_ORDER if args.what == "all" else (args.what,)
    try:
        entries = fw.select(args.frameworks)
    except ValueError as exc:
        raise SystemExit(f"burtorch-bench: {exc}") from None
    overrides = {"iters": args.iters, "reps": args.reps, "warmup": args.warmup,
                 "embed": args.embed, "batch": args.batch, "data": args.data,
                 "budget": args.budget, "threads": args.threads}
    jobs, missing = harness.plan(workloads, entries, args.preset, overrides, args.against)
    cpu = harness.default_cpu() if args.cpu is None else (None if args.cpu == "none" else args.cpu)
    for m in missing:
        print(f"{m['entry']}: not installed; to include it: {m['install']}")
    started = _dt.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    # Two-thread rows depend on how much of two cores the machine gives right now: probed
    # before and after the runs, printed with the tables.
    pair: list[int] = []
    if any(config_threads(j.config) > 1 for j in jobs):
        cores = harness.cores_for(cpu, 2)  # the cores the two-thread rows run on
        pair = [int(c) for c in cores] if isinstance(cores, list) else []
    probes: dict = {}
    if len(pair) > 1:
        probes["before"] = capacity.probe_or_error(pair)
        print(capacity.describe(probes["before"]) + ", before the runs", file=sys.stderr, flush=True)
    runs = harness.run_all(jobs, cpu=cpu, timeout=args.timeout, processes=args.processes,
                           progress=lambda s: print(s, file=sys.stderr, flush=True))
    if probes:
        probes["after"] = capacity.probe_or_error(pair)
        print(capacity.describe(probes["after"]) + ", after the runs", file=sys.stderr, flush=True)
    doc = {
        "schema": report.SCHEMA,
        "meta": {"command": _command_line(args),
                 "preset": args.preset, "started": started,
                 "elapsed_s": time.perf_counter() - t0, "cpu": cpu, "processes": args.processes,
                 "machine": machine.describe(), "workloads": list(workloads),
                 **({"two_core_capacity": probes} if probes else {})},
        "missing": missing, "runs": runs,
    }
    report.annotate(runs)
    sys.stdout.write(report.render_terminal(doc))
    paths = report.write_outputs(doc, Path(args.out))
    print(f"\nwrote {paths['json']}, {paths['markdown']}"
          + (f", {len(paths['png'])} PNG chart(s)" if paths["png"] else
             " (no PNG: pip install matplotlib)"))
    bad = [r for r in runs if r["status"] == "ok" and not r.get("agrees")]
    errors = [r for r in runs if r["status"] in ("error", "timeout")]
    return 1 if bad or errors else 0


def main(argv=None, prog: str = "burtorch-bench") -> int:
    """The ``burtorch-bench`` command (``prog`` names it in help and in the recorded command line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    args = ap.parse_args(argv)
    args.argv, args.prog = argv, prog
    return handle(args)
