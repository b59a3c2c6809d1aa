"""LayerNorm over the last dimension (each row), one range record."""
from .. import _core
from .module import Module


class LayerNorm(Module):
    """Normalizes each row to mean 0 and variance 1, then scales and shifts it (one range record).

    Args:
        dim: the row size.
        eps: added to the variance (default 1e-5).
        dtype: ``bt.float32`` (default) or ``bt.float64``.
    """

    def __init__(self, dim: int, eps: float = 1e-5, dtype=None):
        super().__init__(dtype)
        self.dim, self.eps = dim, eps
        self.param("weight", dim, "ones")
        self.param("bias", dim)

    def forward(self, x):
        return _core.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"
