"""What machine and build this is: printed by `burtorch info` and recorded with benchmark results."""
import os
import platform
import sys


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(interesting=("avx", "avx2", "fma", "avx512f", "neon")) -> list:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in interesting if x in have]
    except OSError:
        pass
    return []


def describe() -> dict:
    from . import __version__, build_info

    return {
        "burtorch": __version__,
        "build": build_info,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_flags": " ".join(cpu_flags()),
        "cores": os.cpu_count(),
    }
