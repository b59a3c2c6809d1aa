"""Optimizers: native in-place steps (SGD, Adam, AdamW) and gradient-estimator methods of
optimization research (GD, PAGE, EF21, MARINA) with gradient compressors."""
from .adam import Adam, AdamW
from .compressors import Compressor, Identity, Natural, RandK, RandomDithering, RandSeqK, Scaled, TopK
from .ef21 import EF21
from .estimator import GradientEstimator, mean_loss
from .gd import GD
from .marina import MARINA
from .optimizer import Optimizer
from .page import PAGE
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW",
           "GradientEstimator", "GD", "PAGE", "EF21", "MARINA", "mean_loss",
           "Compressor", "Identity", "RandK", "TopK", "RandSeqK", "Natural", "RandomDithering", "Scaled"]
