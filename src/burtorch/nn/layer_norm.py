"""LayerNorm over the last dimension (each row), one range record."""
from __future__ import annotations

from .. import _core
from .module import Module


class LayerNorm(Module):
    """Normalizes each row to mean 0 and variance 1, then scales and shifts it (one range record).

    Args:
        dim: the row size.
        eps: added to the variance (default 1e-5).
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    weight: _core.Vector
    bias: _core.Vector

    def __init__(self, dim: int, eps: float = 1e-5, dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.dim, self.eps = dim, eps
        self.param("weight", dim, "ones")
        self.param("bias", dim)

    def forward(self, x: _core.VectorLike) -> _core.Vector:
        return _core.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"
