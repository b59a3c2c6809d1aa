"""The registry of frameworks (and their variants) the suite can run, and what each supports.

The parent only reads this table and checks ``importlib.util.find_spec``; the framework's own
module is imported in the child process alone.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str          # as shown in tables, e.g. "torch-eager"
    module: str        # burtorch_bench.frameworks.<module>
    variant: str       # passed to the module's make_runner
    requires: tuple    # top-level packages that must be importable
    install: str       # the one line printed when a requirement is missing
    workloads: tuple   # workload keys this entry implements


_W12 = ("tiny", "small")
_ALL = ("tiny", "small", "saveload", "mlp", "gpt")

ENTRIES = (
    Entry("burtorch", "impl_burtorch", "eager", ("burtorch",), "pip install burtorch", _ALL),
    Entry("burtorch-planned", "impl_burtorch_compiled", "planned", ("burtorch",), "pip install burtorch",
          ("mlp", "gpt")),
    Entry("burtorch-chunk", "impl_burtorch", "chunked", ("burtorch",), "pip install burtorch", ("mlp", "gpt")),
    Entry("burtorch-fused", "impl_burtorch", "fused", ("burtorch",), "pip install burtorch", ("mlp", "gpt")),
    Entry("burtorch-compiled-fused", "impl_burtorch", "compiled-fused", ("burtorch",), "pip install burtorch",
          ("mlp", "gpt")),
    Entry("burtorch-compiled", "impl_burtorch_compiled", "compiled", ("burtorch",), "pip install burtorch",
          ("tiny", "small", "mlp", "gpt")),
    Entry("burtorch-compiled-chunk", "impl_burtorch_compiled", "compiled-chunked", ("burtorch",),
          "pip install burtorch", ("mlp", "gpt")),
    Entry("burtorch-compiled-chunk-fused", "impl_burtorch_compiled", "compiled-chunked-fused", ("burtorch",),
          "pip install burtorch", ("mlp", "gpt")),
    Entry("torch-eager", "impl_torch", "eager", ("torch",), "pip install torch==2.13.0",
          ("tiny", "small", "saveload", "mlp", "gpt")),
    Entry("torch-script", "impl_torch", "script", ("torch",), "pip install torch==2.13.0", _W12),
    Entry("torch-compile", "impl_torch", "compile", ("torch",), "pip install torch==2.13.0",
          ("tiny", "small", "mlp", "gpt")),
    Entry("jax-eager", "impl_jax", "eager", ("jax", "jaxlib"), "pip install jax jaxlib", _W12),
    Entry("jax-jit", "impl_jax", "jit", ("jax", "jaxlib"), "pip install jax jaxlib",
          ("tiny", "small", "mlp", "gpt")),
    Entry("micrograd", "impl_micrograd", "eager", ("micrograd",), "pip install micrograd", _W12),
    Entry("autograd", "impl_autograd", "eager", ("autograd",), "pip install autograd", _W12),
    Entry("mlx-eager", "impl_mlx", "eager", ("mlx",), 'pip install "mlx[cpu]"',
          ("tiny", "small", "mlp", "gpt")),
    Entry("mlx-compile", "impl_mlx", "compile", ("mlx",), 'pip install "mlx[cpu]"',
          ("mlp", "gpt")),
    Entry("numpy", "impl_numpy", "plain", ("numpy",), "pip install numpy", ("saveload",)),
    Entry("gemm-floor", "impl_gemm_floor", "sgemm", ("numpy",), "pip install numpy", ("mlp",)),
)

BY_NAME = {e.name: e for e in ENTRIES}


def missing_requirement(entry: Entry) -> str | None:
    """The first required package that cannot be found, or None; imports nothing heavy."""
    for pkg in entry.requires:
        try:
            if importlib.util.find_spec(pkg) is None:
                return pkg
        except (ImportError, ValueError):
            return pkg
    return None


def load(entry: Entry):
    return importlib.import_module(f"{__name__}.{entry.module}")


def select(names) -> list:
    """Entries for a comma list of names or families ("torch" means every torch variant)."""
    if not names:
        return list(ENTRIES)
    out: list[Entry] = []
    for name in names:
        matches = [e for e in ENTRIES if e.name == name or e.name.split("-")[0] == name]
        if not matches:
            known = ", ".join(e.name for e in ENTRIES)
            raise ValueError(f"unknown framework {name!r}; known: {known}")
        out.extend(m for m in matches if m not in out)
    return out


class Unavailable(Exception):
    """Raised by a runner when its framework cannot run this workload here (message is shown)."""

