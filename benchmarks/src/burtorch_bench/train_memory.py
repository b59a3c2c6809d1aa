"""Peak resident memory of whole `burtorch train` processes (W5 at every b; W4 e=1024), from the OS.

    python -m burtorch_bench.train_memory --data DIR      (DIR: names.txt and tinyshakespeare.txt;
                                                          default $BURTORCH_DATA)

Each configuration is a fresh `burtorch train ...` process; its peak RSS is read with
getrusage(RUSAGE_CHILDREN) after it exits (so it covers interpreter, imports, data and training).
"""
import argparse
import subprocess
import sys

from burtorch.cli.arguments import positive_int
from burtorch.data.locate import find_data_file


def peak_rss_mb(cmd) -> float:
    # RUSAGE_CHILDREN reports the largest peak among waited-for children: run each in its own
    # intermediate process so every figure is that command's own.
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True, capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.train_memory",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--data", metavar="DIR", help="directory with names.txt and tinyshakespeare.txt "
                                                  "(default: $BURTORCH_DATA)")
    ap.add_argument("--steps", type=positive_int, default=20, help="training steps per process")
    ap.add_argument("--threads", type=positive_int, default=1, help="also W5 b=64 rows with this many threads "
                    "(per-sample, --compile, --chunk 8, --compile --chunk 32)")
    args = ap.parse_args(argv)
    shakespeare_path = find_data_file("tinyshakespeare.txt", args.data)
    names_path = find_data_file("names.txt", args.data)
    if shakespeare_path is None or names_path is None:
        ap.error("give --data DIR (or set $BURTORCH_DATA) with names.txt and tinyshakespeare.txt")
    shakespeare, names = str(shakespeare_path), str(names_path)
    base = [sys.executable, "-m", "burtorch", "train"]
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64):
        cmd = base + ["gpt", "--data", shakespeare, "--steps", str(args.steps), "--batch", str(b),
                      "--optimizer", "sgd", "--lr", "3e-4", "--sample", "0", "--eval-every", str(args.steps),
                      "--eval-samples", "32"]
        rows.append((f"W5 MiniGPT (46,289 params), b={b}", peak_rss_mb(cmd)))
    if args.threads > 1:  # threads x one sample (or chunk) of activations, per way of using them
        for extra in ([], ["--compile"], ["--chunk", "8"], ["--compile", "--chunk", "32"]):
            cmd = base + ["gpt", "--data", shakespeare, "--steps", str(args.steps), "--batch", "64",
                          "--optimizer", "sgd", "--lr", "3e-4", "--sample", "0", "--eval-every", str(args.steps),
                          "--eval-samples", "32", "--threads", str(args.threads), *extra]
            rows.append((f"W5 b=64 --threads {args.threads} {' '.join(extra)}".rstrip(), peak_rss_mb(cmd)))
    for b in (1, 64):
        cmd = base + ["mlp", "--data", names, "--hidden", "1024", "--steps", str(args.steps), "--batch", str(b),
                      "--sample", "0", "--eval-every", str(args.steps), "--eval-samples", "32"]
        rows.append((f"W4 MLP e=1024 (1,079,003 params), b={b}", peak_rss_mb(cmd)))
    rows.append(("bare interpreter (python -c pass)", peak_rss_mb([sys.executable, "-c", "pass"])))
    print(f"{'whole training process':45s} {'peak RSS MB':>12s}")
    for name, mb in rows:
        print(f"{name:45s} {mb:12.1f}")


if __name__ == "__main__":
    main()
