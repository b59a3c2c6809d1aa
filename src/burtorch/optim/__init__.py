"""Optimizers: native in-place steps (SGD, Adam, AdamW) and gradient-estimator methods of
optimization research (GD, PAGE, EF21, MARINA) with gradient compressors.

The research methods are the one home of their update rules (``methods``), the compressors
(``compressors``) and the rounds that run them (``rounds``, ``server``), which burtorch.fl runs on
many clients. They work on numpy arrays and load on first use, so that training with SGD or Adam
needs no numpy.
"""
import importlib
from typing import TYPE_CHECKING, Any

from ..oracle import mean_loss
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

_LAZY = {
    **{name: ".estimator" for name in ("GradientEstimator", "GD", "PAGE", "EF21", "MARINA")},
    **{name: ".compressors" for name in ("Compressor", "Identity", "Natural", "RandK", "RandomDithering",
                                              "RandSeqK", "Scaled", "TopK")},
}

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "mean_loss", *_LAZY]

if TYPE_CHECKING:  # what __getattr__ below loads, as type checkers should see it
    from .compressors import (  # noqa: F401
        Compressor,
        Identity,
        Natural,
        RandK,
        RandomDithering,
        RandSeqK,
        Scaled,
        TopK,
    )
    from .estimator import EF21, GD, MARINA, PAGE, GradientEstimator  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'burtorch.optim' has no attribute {name!r}")
