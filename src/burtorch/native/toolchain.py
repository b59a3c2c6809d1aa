"""What compiling a block function takes (see burtorch.native): the C++ compiler, its flags for the
ISA level this process loaded, burtorch's headers, the cache directory and the build's identity
(parts of the cache key)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .. import _core

_compiler_cache: dict[str, Any] = {}

_MARCH = {"generic": "-march=x86-64-v2", "avx2": "-march=x86-64-v3", "avx512": "-march=x86-64-v4",
          "native": "-march=native"}
FLAGS = ("-O3", "-std=c++20", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp-simd")


def compiler() -> str | None:
    """The C++ compiler: $CXX if set (None if it does not exist), else c++, g++ or clang++ on PATH."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _identity(cxx: str) -> str:
    """The compiler's --version output (part of the cache key), once per process and compiler."""
    key = "id:" + cxx
    if key not in _compiler_cache:
        try:
            r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
            _compiler_cache[key] = r.stdout
        except (OSError, subprocess.SubprocessError) as exc:
            _compiler_cache[key] = None
            raise RuntimeError(f"{cxx} --version failed: {exc}") from None
    if _compiler_cache[key] is None:
        raise RuntimeError(f"{cxx} --version failed")
    return _compiler_cache[key]


def include_dir() -> Path | None:
    """The headers the generated code includes: the package's include/ (installed beside the
    extension), else the source tree's csrc/ (an editable install)."""
    here = Path(__file__).resolve().parent.parent  # the burtorch package
    cands = [here / "include"]
    if _core.__spec__ is not None and _core.__spec__.origin:
        cands.append(Path(_core.__spec__.origin).resolve().parent / "include")
    for cand in (*cands, here.parent.parent / "csrc"):
        if (cand / "lanes" / "native.hpp").is_file():
            return cand
    return None


def isa_flags() -> list[str]:
    """The target flags the loaded extension was compiled with: every -m flag of its build line
    (-march=..., and -mavx2 -mfma where a build adds them to a level, as the sanitized builds
    do), so the generated code computes with the instructions the core's kernels use. madd() is
    one fused multiply-add exactly where the core was compiled with FMA, so a target without it
    would round differently. A build line without -m flags: the loaded level's -march on x86-64,
    else the compiler's default target."""
    import platform

    info = getattr(_core, "build_info", "")
    flags = info.split("flags:", 1)[1].split(";", 1)[0].split() if "flags:" in info else []
    target = [f for f in flags if f.startswith("-m")]
    if target:
        return target
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    return [_MARCH.get(getattr(_core, "isa_level", "generic"), "-march=x86-64-v2")]


def cache_dir() -> Path:
    """$BURTORCH_CACHE_DIR, else $XDG_CACHE_HOME/burtorch, else ~/.cache/burtorch."""
    d = os.environ.get("BURTORCH_CACHE_DIR")
    if d:
        return Path(d)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "burtorch" if xdg else Path.home() / ".cache" / "burtorch"


def _build_id() -> str:
    inc = include_dir()
    h = hashlib.sha256(f"{getattr(_core, 'build_info', '')}; {getattr(_core, 'isa_level', '')}".encode())
    if inc is not None:
        for name in ("lanes/native.hpp", "ops.hpp", "reduce.hpp"):
            h.update((inc / name).read_bytes())
    return h.hexdigest()
