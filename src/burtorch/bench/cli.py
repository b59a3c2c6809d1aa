"""``burtorch bench ...``: argparse wiring. ``register(subparsers)`` adds the ``bench`` command.

    burtorch bench {tiny,small,saveload,mlp,gpt,all} [--quick|--paper] [--frameworks ...]
    burtorch bench report RESULTS.json [--readme PATH]
    burtorch bench compare OLD.json NEW.json
"""
from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import sys
import time
from pathlib import Path

from .workloads import WORKLOAD_ORDER

WORKLOAD_CHOICES = (*WORKLOAD_ORDER, "all")


def _int_list(text: str) -> list:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _against(text: str) -> tuple:
    label, sep, python = text.partition("=")
    if not sep or not label or not python:
        raise argparse.ArgumentTypeError(f"expected LABEL=PYTHON, got {text!r}")
    return label, python


def _cpu(text: str):
    if text.lower() == "none":
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU number or 'none', got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=(*WORKLOAD_CHOICES, "report", "compare"),
                   help="a workload (W1 tiny, W2 small, W3 saveload, W4 mlp, W5 gpt), all of "
                        "them, or: report JSON / compare OLD.json NEW.json")
    p.add_argument("files", nargs="*", help="JSON file(s) for report / compare")
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_const", dest="preset", const="quick",
                        help="a few-minute smoke run: fewer iterations, configs and repetitions")
    preset.add_argument("--paper", action="store_const", dest="preset", const="paper",
                        help="the paper's full counts for every peer, full W4/W5 grids (slow)")
    p.set_defaults(preset="full")
    p.add_argument("--frameworks", "-f", type=lambda s: [x for x in s.split(",") if x],
                   help="comma list of frameworks or families (burtorch,torch,jax-jit,...); "
                        "default: all")
    p.add_argument("--iters", type=int, help="W1/W2/W3: iterations per run for everyone")
    p.add_argument("--budget", type=float,
                   help="W1/W2/W3: seconds one run may take before a peer measures fewer "
                        "iterations (0 = never reduce)")
    p.add_argument("--reps", type=int, help="timed repetitions (W4/W5: timed steps)")
    p.add_argument("--warmup", type=int, help="untimed warm-up iterations / steps")
    p.add_argument("--embed", type=_int_list, help="W4 hidden sizes e, e.g. 4,64,1024")
    p.add_argument("--batch", type=_int_list, help="W4/W5 batch sizes b, e.g. 1,64")
    p.add_argument("--data", help="directory with names.txt / tinyshakespeare.txt, or one file")
    p.add_argument("--cpu", type=_cpu, help="core to pin each run to (default: the last allowed "
                                            "core; 'none' to not pin)")
    p.add_argument("--against", type=_against, action="append", default=[],
                   help="LABEL=PYTHON: also run burtorch under another interpreter (another "
                        "venv / build with burtorch.bench) and show it beside this one")
    p.add_argument("--out", default="bench-results",
                   help="directory for results.json, results.md and PNG charts")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed")
    p.add_argument("--readme", help="report: write the benchmarks README page here")


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="the paper's workloads against installed peers",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=handle)
    return p


def _validate(args) -> None:
    for name in ("iters", "reps", "warmup"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "warmup" else 1):
            raise SystemExit(f"burtorch bench: --{name} must be positive, got {v}")
    if args.data is not None and not Path(args.data).exists():
        raise SystemExit(f"burtorch bench: --data {args.data!r} does not exist")
    for name in ("embed", "batch"):
        v = getattr(args, name)
        if v is not None and (not v or min(v) < 1):
            raise SystemExit(f"burtorch bench: --{name} needs positive integers")


def handle(args) -> int:
    from . import compare, report

    if args.what == "report":
        if len(args.files) != 1:
            raise SystemExit("burtorch bench report: give exactly one results JSON")
        argv = [args.files[0]] + (["--readme", args.readme] if args.readme else [])
        return report.main(argv)
    if args.what == "compare":
        if len(args.files) != 2:
            raise SystemExit("burtorch bench compare: give OLD.json NEW.json")
        old, new = (report.load(f) for f in args.files)
        sys.stdout.write(compare.render(compare.compare(old, new, args.frameworks),
                                        args.files[0], args.files[1]))
        return 0
    if args.files:
        raise SystemExit(f"burtorch bench {args.what}: unexpected arguments {args.files}")
    _validate(args)
    return run_suite(args)


def _command_line(args) -> str:
    argv = getattr(args, "argv", None)
    if argv is not None:  # python -m burtorch.bench
        return "python -m burtorch.bench " + shlex.join(argv)
    return "burtorch " + shlex.join(sys.argv[1:])


def run_suite(args) -> int:
    from . import frameworks as fw
    from . import harness, machine, report

    workloads = WORKLOAD_ORDER if args.what == "all" else (args.what,)
    try:
        entries = fw.select(args.frameworks)
    except ValueError as exc:
        raise SystemExit(f"burtorch bench: {exc}") from None
    overrides = {"iters": args.iters, "reps": args.reps, "warmup": args.warmup,
                 "embed": args.embed, "batch": args.batch, "data": args.data,
                 "budget": args.budget}
    jobs, missing = harness.plan(workloads, entries, args.preset, overrides, args.against)
    cpu = harness.default_cpu() if args.cpu is None else (None if args.cpu == "none" else args.cpu)
    for m in missing:
        print(f"{m['entry']}: not installed; to include it: {m['install']}")
    started = _dt.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    runs = harness.run_all(jobs, cpu=cpu, timeout=args.timeout,
                           progress=lambda s: print(s, file=sys.stderr, flush=True))
    doc = {
        "schema": report.SCHEMA,
        "meta": {"command": _command_line(args),
                 "preset": args.preset, "started": started,
                 "elapsed_s": time.perf_counter() - t0, "cpu": cpu,
                 "machine": machine.describe(), "workloads": list(workloads)},
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


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m burtorch.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    args = ap.parse_args(argv)
    args.argv = argv
    return handle(args)
