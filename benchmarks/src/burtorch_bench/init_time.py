"""Init time: process start to the end of one full W5 training step (and one W4 e=1024 step).

    python -m burtorch_bench.init_time    (medians of 7 fresh processes, wall clock measured outside)

Each process imports burtorch, builds the paper's model (FP32), takes one sample (b=1) through
grad_oracle and one SGD step, and exits. `burtorch-bench` reports init too, but its children also
prepare the shared numpy data for every peer, which this measurement leaves out.
"""
import argparse
import statistics
import subprocess
import sys
import time

from burtorch.cli.arguments import positive_int

PROGRAMS = {
    "W5 MiniGPT.paper(), b=1": (
        "from burtorch.nn import MiniGPT; from burtorch.optim import SGD; from burtorch.oracle import grad_oracle\n"
        "m = MiniGPT.paper(); opt = SGD(m.parameters(), lr=3e-4)\n"
        "grad_oracle(m, [([1, 2, 3, 4, 5, 6, 7, 8], [2, 3, 4, 5, 6, 7, 8, 9])]); opt.step()\n"),
    "W4 MakemoreMLP.paper(1024), b=1": (
        "from burtorch.nn import MakemoreMLP; from burtorch.optim import SGD; from burtorch.oracle import grad_oracle\n"
        "m = MakemoreMLP.paper(hidden=1024); opt = SGD(m.parameters(), lr=0.1)\n"
        "grad_oracle(m, [(tuple(range(16)), 3)]); opt.step()\n"),
    "bare interpreter (python -c pass)": "pass\n",
}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.init_time",
                                description="Wall clock from process start to the end of one W5 (and one "
                                            "W4 e=1024) training step, in fresh processes.")
    p.add_argument("--runs", type=positive_int, default=7, help="processes per program (default: 7)")
    runs = p.parse_args(argv).runs
    print(f"{'process start to end of first step':40s} {'median s':>9s} {'min':>7s} {'max':>7s}")
    for name, code in PROGRAMS.items():
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - t)
        print(f"{name:40s} {statistics.median(times):9.3f} {min(times):7.3f} {max(times):7.3f}")


if __name__ == "__main__":
    main()
