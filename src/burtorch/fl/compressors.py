"""The gradient compressors: their one home is burtorch.optim.compressors (the research optimizers
use them as well); burtorch.fl.compressors keeps the names fl users import."""
from ..optim.compressors import (
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
    full_message,
    make_compressor,
)

__all__ = ["COMPRESSORS", "Compressor", "Identity", "Message", "Natural", "RandK", "RandomDithering", "RandSeqK",
           "Scaled", "TopK", "full_message", "make_compressor"]
