"""Linear: y = W x + b as one range record (the whole layer is one native call)."""
import math

from .. import _core
from .module import Module


class Linear(Module):
    """W is (out x in); init as PyTorch's nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) for W and b."""

    def __init__(self, nin: int, nout: int, bias: bool = True, dtype=None):
        super().__init__()
        if dtype is not None:
            self.dtype = dtype
        self.nin, self.nout = nin, nout
        for name, n in (("nin", nin), ("nout", nout)):  # before 1/sqrt(nin) says "division by zero"
            if not isinstance(n, int) or isinstance(n, bool):
                raise TypeError(f"Linear: {name} must be an int, got {type(n).__name__}")
            if n < 1:
                raise ValueError(f"Linear: {name} must be at least 1, got {n}")
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
