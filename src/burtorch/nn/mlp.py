"""Multi-layer perceptron from Linear layers with an activation between them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _core
from .activations import activation
from .linear import Linear
from .module import Module


class MLP(Module):
    """A stack of :class:`Linear` layers with an activation after every layer but the last.

    Args:
        nin: the input size.
        sizes: the output sizes of the layers, e.g. ``[16, 16, 1]``.
        act: the activation between layers (``"relu"``, ``"tanh"``, ``"sigmoid"``, ``"softplus"``
            or None).
        final_act: the activation after the last layer (default None).
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.

    Raises:
        ValueError: an unknown activation.
    """

    def __init__(self, nin: int, sizes: Sequence[int], act: str | None = "relu", final_act: str | None = None,
                 dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        dims = [nin] + list(sizes)
        self.layers = [Linear(a, b, dtype=self.dtype) for a, b in zip(dims, dims[1:])]
        self._act = activation(act)
        self._final = activation(final_act)
        self.act_name = act

    def forward(self, x: _core.VectorLike) -> _core.Vector:
        h: Any = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            h = self._act(h) if i < len(self.layers) - 1 else self._final(h)
        return h

    def extra_repr(self) -> str:
        return f"act={self.act_name}"
