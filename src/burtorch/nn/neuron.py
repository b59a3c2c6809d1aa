"""The paper's scalar constructions (its appendix F.1): a neuron is an inner product with bias of
scalar Values followed by an activation, one record for the inner product."""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from .. import _core
from .activations import activation
from .module import Module


class Neuron(Module):
    """The paper's scalar neuron: ``act(w . x + b)`` over scalar Values, one inner-product record.

    ``w`` is drawn from U(-init_range, init_range), ``b`` is 0 (micrograd's convention).

    Args:
        nin: the number of inputs.
        act: the activation (``"relu"``, ``"tanh"``, ``"sigmoid"``, ``"softplus"`` or None).
        init_range: the half-width of the weights' uniform draw.
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    w: _core.Vector
    b: _core.Vector

    def __init__(self, nin: int, act: str | None = "relu", init_range: float = 1.0,
                 dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.nin = nin
        self.act_name = act
        self._act = activation(act)
        self.param("w", nin, "uniform", -init_range, init_range)
        self.param("b", 1)

    def forward(self, x: _core.Vector | Sequence[_core.Value | float]) -> _core.Value:
        xs = x.values() if isinstance(x, _core.Vector) else list(x)
        if len(xs) != self.nin:
            raise ValueError(f"Neuron expects {self.nin} inputs, got {len(xs)}")
        return self._act(_core.inner_product_with_bias(xs, self.w.values(), cast(_core.Value, self.b[0])))

    def extra_repr(self) -> str:
        return f"{self.nin}, act={self.act_name}"


class Layer(Module):
    """``nout`` scalar :class:`Neuron` s over the same inputs; a call returns a list of Values.

    Args:
        nin: the number of inputs.
        nout: the number of neurons.
        act: the activation of every neuron.
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    def __init__(self, nin: int, nout: int, act: str | None = "relu", dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.neurons = [Neuron(nin, act, dtype=self.dtype) for _ in range(nout)]

    def forward(self, x: _core.Vector | Sequence[_core.Value | float]) -> list[_core.Value]:
        return [n(x) for n in self.neurons]
