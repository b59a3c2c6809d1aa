"""What machine and build this is: shown by `burtorch info`, recorded with every benchmark result."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

from ..platform import physical_memory

# The instruction-set flags that matter for these kernels, in the order shown.
INTERESTING_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                     "avx512_bf16", "avx512_vnni", "neon", "asimd")


def _cpuinfo() -> dict:
    out = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "flags", "Features") and key not in out:
                    out[key] = value.strip()
    except OSError:
        pass
    return out


def _memory_bytes() -> int | None:
    return physical_memory()


def _compiler() -> str:
    for cc in ("c++", "g++", "clang++"):
        try:
            out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout:
            return out.stdout.splitlines()[0]
    return "unknown"


def describe(compiler: bool = True) -> dict:
    """The machine, the interpreter and this burtorch build as a flat dict.

    Args:
        compiler: also ask the system C++ compiler for its version (spawns a process).

    Returns:
        ``burtorch``, ``build``, ``isa`` (the ISA level that runs: bt.build_info()), ``cpu``,
        ``cpu_flags`` (the flags of :data:`INTERESTING_FLAGS`
        the CPU has), ``virtualized``, ``logical_cpus``, ``memory_gib``, ``os``, ``python``,
        ``python_impl`` and, with ``compiler``, ``compiler``.
    """
    import burtorch

    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    mem = _memory_bytes()
    out = {
        "burtorch": burtorch.__version__,
        "build": str(burtorch.build_info),
        "isa": burtorch.build_info()["isa"],
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [f for f in INTERESTING_FLAGS if f in flags],
        "virtualized": "hypervisor" in flags,
        "logical_cpus": os.cpu_count(),
        "memory_gib": round(mem / 2 ** 30, 1) if mem else None,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
    }
    if compiler:
        out["compiler"] = _compiler()
    return out
