"""Federated optimization research: n clients with their own data and method state, a server that
aggregates, the EF21 / MARINA / PAGE / DIANA family with native compressors, run serially, on a
local process pool or on Ray (see docs/guides/federated.md). The methods' update rules, the compressors
and the random streams live in burtorch.optim (methods, compressors, streams), one layer below.

Names are loaded on first use, so importing burtorch.fl stays free of numpy until a name is used."""
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below loads, as type checkers should see it
    from ..optim import streams  # noqa: F401
    from . import (  # noqa: F401
        client,
        compressors,
        executor_base,
        executors,
        federation,
        libsvm,
        logistic,
        methods,
        names,
        plots,
        problem,
        ray_executor,
        sampling,
        sparse,
        splits,
    )
    from .compressors import (  # noqa: F401
        COMPRESSORS,
        Compressor,
        Identity,
        Message,
        Natural,
        RandK,
        RandomDithering,
        RandSeqK,
        Scaled,
        TopK,
        make_compressor,
    )
    from .federation import Federation  # noqa: F401
    from .methods import (  # noqa: F401
        DCGD,
        DIANA,
        EF21,
        EF21BC,
        GD,
        MARINA,
        METHODS,
        PAGE,
        FedAvg,
        Method,
        make_method,
    )
    from .problem import ModelProblem, Problem, SampleProblem, Smoothness  # noqa: F401

_HOME = {
    "Federation": "federation",
    "Problem": "problem", "SampleProblem": "problem", "ModelProblem": "problem", "Smoothness": "problem",
    **{name: "methods" for name in ("Method", "GD", "DCGD", "EF21", "EF21BC", "MARINA", "PAGE", "DIANA", "FedAvg",
                                    "METHODS", "make_method")},
    **{name: "compressors" for name in ("Compressor", "Message", "Identity", "RandK", "TopK", "RandSeqK", "Natural",
                                        "RandomDithering", "Scaled", "COMPRESSORS", "make_compressor")},
}
__all__ = sorted(_HOME)
_SUBMODULES = ("client", "compressors", "executor_base", "executors", "federation", "libsvm", "logistic", "methods",
               "names", "plots", "problem", "ray_executor", "sampling", "sparse", "splits")
_MOVED = {"streams": "burtorch.optim.streams"}  # modules of fl's public path that live one layer below


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    for home in ("methods", "compressors"):  # a method or compressor added since _HOME was written
        module = importlib.import_module(f".{home}", __name__)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'burtorch.fl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
