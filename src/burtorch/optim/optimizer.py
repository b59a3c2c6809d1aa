"""The optimizer protocol: parameters as one view, native in-place steps, PyTorch's names."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from .. import _core

if TYPE_CHECKING:
    from ..nn.module import Module

# What an optimizer optimizes: a module, its parameters() or one Vector.
Params: TypeAlias = "Module | Iterable[_core.Vector] | _core.Vector"


def _as_vector(params: Any) -> _core.Vector:
    if hasattr(params, "parameters"):  # a Module
        params = params.parameters()
    if isinstance(params, _core.Vector):
        return params
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    for p in params:
        if not isinstance(p, _core.Vector):
            raise TypeError(f"optimizer parameters must be Vectors (e.g. module.parameters()), got {type(p).__name__}")
    return _core.cat(params)


def _check_hyper(name: str, value: float, lo: float = 0.0, hi: float | None = None, lo_open: bool = False) -> float:
    if not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{name} must be a number, got {value!r}")
    if (value <= lo if lo_open else value < lo) or (hi is not None and value >= hi):
        raise ValueError(f"invalid {name}: {value}")
    return float(value)


class Optimizer:
    """The base of the native optimizers: the parameters as one view, the state in native code.

    Subclasses implement :meth:`step`.

    Args:
        params: a module, a list of parameter Vectors, or one Vector.

    Raises:
        ValueError: no parameters.
        TypeError: parameters that are not Vectors.
    """

    buffers = 0

    def __init__(self, params: Params) -> None:
        self.params = _as_vector(params)
        self.state = _core.OptimState(self.params, self.buffers)

    def zero_grad(self) -> None:
        self.params.zero_grad()

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``{"steps": int, "buffers": list of floats}``: everything :meth:`load_state_dict` needs."""
        return {"steps": self.state.steps, "buffers": self.state.state()}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (the buffer count must match)."""
        self.state.load_state(list(d["buffers"]), int(d["steps"]))
