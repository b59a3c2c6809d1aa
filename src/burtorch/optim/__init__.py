"""Optimizers: native in-place steps (SGD, Adam, AdamW) and gradient-estimator methods of
optimization research (GD, PAGE, EF21, MARINA) with gradient compressors.

The research methods and compressors run on burtorch.fl (which works on numpy arrays): they load
on first use, so that training with SGD or Adam needs neither numpy nor fl.
"""
import importlib
from typing import TYPE_CHECKING, Any

from ..oracle import mean_loss
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

_LAZY = {
    "GradientEstimator": ".estimator", "GD": ".gd", "PAGE": ".page", "EF21": ".ef21", "MARINA": ".marina",
    **{name: "..fl.compressors" for name in ("Compressor", "Identity", "Natural", "RandK", "RandomDithering",
                                              "RandSeqK", "Scaled", "TopK")},
}

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "mean_loss", *_LAZY]

if TYPE_CHECKING:  # what __getattr__ below loads, as type checkers should see it
    from ..fl.compressors import (  # noqa: F401
        Compressor,
        Identity,
        Natural,
        RandK,
        RandomDithering,
        RandSeqK,
        Scaled,
        TopK,
    )
    from .ef21 import EF21  # noqa: F401
    from .estimator import GradientEstimator  # noqa: F401
    from .gd import GD  # noqa: F401
    from .marina import MARINA  # noqa: F401
    from .page import PAGE  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'burtorch.optim' has no attribute {name!r}")
