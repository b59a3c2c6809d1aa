"""Optimizers: native in-place steps (SGD, Adam, AdamW) and gradient-estimator methods of
optimization research (GD, PAGE, EF21, MARINA) with gradient compressors.

The research methods and compressors run on burtorch.fl (which works on numpy arrays): they load
on first use, so that training with SGD or Adam needs neither numpy nor fl.
"""
import importlib

from ..oracle import mean_loss
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

_LAZY = {
    "GradientEstimator": ".estimator", "GD": ".gd", "PAGE": ".page", "EF21": ".ef21", "MARINA": ".marina",
    **{name: ".compressors" for name in ("Compressor", "Identity", "Natural", "RandK", "RandomDithering",
                                          "RandSeqK", "Scaled", "TopK")},
}

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "mean_loss", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'burtorch.optim' has no attribute {name!r}")
