"""Embedding: a (num x dim) table; a lookup is a view of its rows (no copy, no record)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _core
from .module import Module


class Embedding(Module):
    """A (num x dim) table whose lookup is a view of its rows (no copy, no record).

    Rows are drawn from N(0, 1), as PyTorch's ``nn.Embedding`` draws them.

    Args:
        num: the number of rows (ids ``0 .. num - 1``).
        dim: the row size.
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    weight: _core.Vector

    def __init__(self, num: int, dim: int, dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.num, self.dim = num, dim
        self.param("weight", (num, dim), "normal", 0.0, 1.0)

    def forward(self, ids: int | Sequence[int] | Any) -> _core.Vector:
        return _core.embedding(self.weight, ids)

    def extra_repr(self) -> str:
        return f"{self.num}, {self.dim}"
