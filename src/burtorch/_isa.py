"""Loads the build of the extension this CPU runs best, as ``burtorch._core``.

The extension is built once per ISA level (CMakeLists.txt): ``burtorch/_core_generic`` (x86-64-v2
on x86-64), ``_core_avx2`` (x86-64-v3: AVX2 + FMA) and ``_core_avx512`` (x86-64-v4), or a single
``_core_native`` when built with ``BURTORCH_NATIVE=ON``. Each is a complete module named
``_core``; the probe ``burtorch._cpu`` (baseline code) says which levels the CPU and OS run, and
the highest one present is imported, once, when the package is. ``BURTORCH_ISA=generic|avx2|avx512``
forces a level: one the CPU cannot run, or that was not built, is an ImportError that says why
(never an illegal instruction later).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import ExtensionFileLoader, ModuleSpec

LEVELS = ("generic", "avx2", "avx512")
ENV = "BURTORCH_ISA"


def _origin(level: str) -> str | None:
    spec = importlib.util.find_spec(f"{__package__}._core_{level}")
    return spec.origin if spec is not None else None


def choose(requested: str | None, cpu_levels: list[str], built: dict[str, str]) -> str:
    """The level to load: ``requested`` (``BURTORCH_ISA``) if given, else the best one built.

    Raises ImportError when ``requested`` is unknown, not built, or not run by this CPU.
    """
    if requested:
        if requested == "native":
            if "native" not in built:
                raise ImportError(f"{ENV}=native: this burtorch was not built with BURTORCH_NATIVE=ON")
            return requested
        if requested not in LEVELS:
            raise ImportError(f"{ENV}={requested!r}: unknown level; one of {', '.join(LEVELS)}")
        if requested not in cpu_levels:
            raise ImportError(f"{ENV}={requested}: this CPU does not run it (it runs: "
                              f"{', '.join(cpu_levels) or 'none of ' + ', '.join(LEVELS)})")
        if requested not in built:
            hint = ("; it was built with BURTORCH_NATIVE=ON, for the building CPU alone" if "native" in built else "")
            raise ImportError(f"{ENV}={requested}: this build has no {requested} level "
                              f"(built: {', '.join(built)}){hint}")
        return requested
    if "native" in built:
        return "native"
    for level in reversed(LEVELS):
        if level in built and level in cpu_levels:
            return level
    raise ImportError(f"burtorch has no build this CPU runs (built: {', '.join(built) or 'none'}; the CPU runs: "
                      f"{', '.join(cpu_levels) or 'none of them: x86-64 needs x86-64-v2 (SSE4.2, POPCNT)'})")


def load() -> None:
    name = f"{__package__}._core"
    if name in sys.modules:
        return
    from . import _cpu

    built = {level: path for level in (*LEVELS, "native") if (path := _origin(level)) is not None}
    level = choose(os.environ.get(ENV), list(_cpu.supported_levels()), built)
    # The module's init function is PyInit__core whichever file holds it: loaded under the name
    # burtorch._core, the chosen file is the package's _core for every later import.
    loader = ExtensionFileLoader(name, built[level])
    spec = ModuleSpec(name, loader, origin=built[level])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


load()
