"""The `burtorch` command: info, demo, and the subcommands of the packages that register them."""
import argparse
import json
import sys


def _info(args) -> int:
    from .sysinfo import describe

    info = describe()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            print(f"{k:10s} {v}")
    return 0


def _demo(args) -> int:
    from .demo import main

    main(repeats=args.repeats)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="burtorch", description="Scalar-level autodiff with a C++ core.")
    p.add_argument("--version", action="version", version=f"burtorch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="CPU, compiler flags and build type of this installation")
    info.add_argument("--json", action="store_true", help="print as JSON")
    info.set_defaults(func=_info)
    demo = sub.add_parser("demo", help="the paper's Figure 1 and 2 graphs: values, gradients, timings")
    demo.add_argument("--repeats", type=int, default=5, help="timed runs per workload (median reported)")
    demo.set_defaults(func=_demo)
    from .bench.cli import register as register_bench
    from .fl.cli import register as register_fl
    from .train_cli import register as register_train

    register_train(sub)
    register_bench(sub)
    register_fl(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
