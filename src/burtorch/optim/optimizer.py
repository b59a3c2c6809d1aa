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
    plan: Any = None  # the burtorch.planner.Chosen of the last train_step
    _fast_step: Any = None  # burtorch.optim.fused.FastStep: that plan, bound for the next step

    def __init__(self, params: Params) -> None:
        self.params = _as_vector(params)
        self.state = _core.OptimState(self.params, self.buffers)

    def train_step(self, model: Any, batch: Any, loss_fn: Any = None, *, plan: Any = "auto", memory: Any = None,
                   threads: int | None = None) -> float:
        """One step on the mean loss over ``batch``, run the fastest way the planner found.

        The first call for a model structure, batch shape, dtype and optimizer kind times the
        ways this step can run (eager or recorded, samples per graph, the update fused into the
        sweep for SGD, the thread count), at most about a second of the first steps, and keeps
        the fastest for the process; every call after runs it. Each trial is undone, so the first
        step's result is the chosen plan's. ``self.plan`` (and :func:`burtorch.explain_plan`)
        says what was chosen and why.

        Args:
            model, batch, loss_fn: as :func:`burtorch.oracle.grad_oracle`.
            plan: "auto", or a plan to run as given (``"eager"`` is the paper's per-sample
                oracle then :meth:`step`; see :func:`burtorch.planner.parse`).
            memory: what the plan may hold: ``"sample"`` (one sample per graph, the paper's
                guarantee), ``"fast"`` (no bound) or a byte budget for one step's graphs;
                default :data:`burtorch.planner.DEFAULT_MEMORY`.
            threads: the native thread count; default: the planner tries 1 and
                ``bt.get_num_threads()``.

        Returns:
            The mean loss over ``batch`` before the step.

        Raises:
            As :func:`burtorch.oracle.grad_oracle`; ValueError for a bad ``plan`` or ``memory``.
        """
        fast = self._fast_step
        if fast is not None and plan == "auto" and fast.fits(model, batch, loss_fn, memory, threads):
            return fast(batch)
        from .fused import planned_step

        loss, self.plan = planned_step(self, model, batch, loss_fn, plan, memory, threads)
        assert loss is not None  # planned_step returns None only when told not to take the step
        return loss

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
