"""LayerNorm over the last dimension (each row), one range record."""
from .. import _core
from .module import Module


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, dtype=None):
        super().__init__(dtype)
        self.dim, self.eps = dim, eps
        self.param("weight", dim, "ones")
        self.param("bias", dim)

    def forward(self, x):
        return _core.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"
