"""Linear: y = W x + b as one range record (the whole layer is one native call)."""
import math

from .. import _core
from .module import Module


class Linear(Module):
    """W is (out x in); init as PyTorch's nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) for W and b."""

    def __init__(self, nin: int, nout: int, bias: bool = True, dtype=None):
        super().__init__(dtype)
        self.nin, self.nout = nin, nout
        k = 1.0 / math.sqrt(nin)
        self.param("weight", (nout, nin), "uniform", -k, k)
        if bias:
            self.param("bias", nout, "uniform", -k, k)
        else:
            self.bias = None

    def forward(self, x):
        return _core.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"{self.nin}, {self.nout}, bias={self.bias is not None}"
