"""Embedding: a (num x dim) table; a lookup is a view of its rows (no copy, no record)."""
from .. import _core
from .module import Module


class Embedding(Module):
    """A (num x dim) table whose lookup is a view of its rows (no copy, no record).

    Rows are drawn from N(0, 1), as PyTorch's ``nn.Embedding`` draws them.

    Args:
        num: the number of rows (ids ``0 .. num - 1``).
        dim: the row size.
        dtype: ``bt.float32`` (default) or ``bt.float64``.
    """

    def __init__(self, num: int, dim: int, dtype=None):
        super().__init__(dtype)
        self.num, self.dim = num, dim
        self.param("weight", (num, dim), "normal", 0.0, 1.0)

    def forward(self, ids):
        return _core.embedding(self.weight, ids)

    def extra_repr(self):
        return f"{self.num}, {self.dim}"
