"""Linear: y = W x + b as one range record (the whole layer is one native call)."""
from __future__ import annotations

import math

from .. import _core
from .module import Module


class Linear(Module):
    """Applies ``y = W x + b`` as one range record (a vector, or each row of a matrix).

    ``W`` is (nout x nin); both ``W`` and ``b`` are drawn from U(-1/sqrt(nin), 1/sqrt(nin)) as
    PyTorch's ``nn.Linear`` draws them.

    Args:
        nin: the input size.
        nout: the output size.
        bias: add the bias ``b`` (default True).
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    weight: _core.Vector
    bias: _core.Vector | None

    def __init__(self, nin: int, nout: int, bias: bool = True, dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
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

    def forward(self, x: _core.VectorLike) -> _core.Vector:
        return _core.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.nin}, {self.nout}, bias={self.bias is not None}"
