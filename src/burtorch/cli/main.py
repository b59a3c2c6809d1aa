"""The ``burtorch`` command: ``train``, ``demo``, ``fl``, ``data`` and ``info``."""
from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = "Scalar-level reverse-mode autodiff on the CPU with a C++20 core (BurTorch)."
EPILOG = "Run 'burtorch COMMAND --help' for the options of a command."


def _info(args) -> int:
    from .machine import describe

    info = describe()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            shown = " ".join(value) if isinstance(value, list) else value
            print(f"{key:12s} {shown}")
    return 0


def _demo(args) -> int:
    from .demo import main

    main(repeats=args.repeats)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``burtorch`` command with every subcommand registered."""
    from .. import __version__
    from .arguments import positive_int
    from .data import register as register_data
    from .fl import register as register_fl
    from .train import register as register_train

    p = argparse.ArgumentParser(prog="burtorch", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"burtorch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    register_train(sub)
    demo = sub.add_parser("demo", help="the paper's Figure 1 and 2 graphs: values, gradients, timings",
                          description="Builds the paper's Figure 1 (W1) and Figure 2 (W2) graphs, prints "
                                      "their values and gradients, then times build + backward + rewind "
                                      "of each from eager Python (100,000 and 20,000 iterations).")
    demo.add_argument("--repeats", type=positive_int, default=5,
                      help="timed runs per workload; the median is reported (default: 5)")
    demo.set_defaults(func=_demo)
    register_fl(sub)
    register_data(sub)
    info = sub.add_parser("info", help="this machine, interpreter and burtorch build",
                          description="Prints the CPU and its vector extensions, memory, OS, Python, "
                                      "the C++ compiler, and how this burtorch was built.")
    info.add_argument("--json", action="store_true", help="print as JSON")
    info.set_defaults(func=_info)
    return p


def main(argv=None) -> int:
    """Runs the ``burtorch`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
