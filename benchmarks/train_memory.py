"""Peak resident memory of whole `burtorch train` processes (W5 at every b; W4 e=1024), from the OS.

Run: python benchmarks/train_memory.py [--data-dir ../shared/data]
Each configuration is a fresh `burtorch train ...` process; its peak RSS is read with
getrusage(RUSAGE_CHILDREN) after it exits (so it covers interpreter, imports, data and training).
"""
import argparse
import os
import resource
import subprocess
import sys


def peak_rss_mb(cmd) -> float:
    # RUSAGE_CHILDREN reports the largest peak among waited-for children: run each in its own
    # intermediate process so every figure is that command's own.
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True, capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    shakespeare = os.path.join(args.data_dir, "tinyshakespeare.txt")
    names = os.path.join(args.data_dir, "names.txt")
    base = [sys.executable, "-m", "burtorch", "train"]
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64):
        cmd = base + ["gpt", "--data", shakespeare, "--steps", str(args.steps), "--batch", str(b),
                      "--optimizer", "sgd", "--lr", "3e-4", "--sample", "0", "--eval-every", str(args.steps),
                      "--eval-samples", "32"]
        rows.append((f"W5 MiniGPT (46,337 params), b={b}", peak_rss_mb(cmd)))
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
