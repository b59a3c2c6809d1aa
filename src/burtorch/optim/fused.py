"""Which way :meth:`burtorch.optim.SGD.fused_step` takes a step, decided in one place.

Four paths give the same step (see ``SGD.fused_step`` for what each guarantees):

* ``CHUNKS``: compiled chunks on two threads or more, the step taken in the pass that adds the
  threads' gradients (burtorch.oracle_compiled.compiled_sgd_chunks);
* ``COMPILED``: the whole batch replayed as one chunk of its recorded program, the linear weights
  updated inside the sweep (burtorch.oracle_compiled.compiled_fused_step);
* ``EAGER``: the whole batch built as one graph in Python, the linear weights updated inside
  the backward (``_core.sgd_fused_backward``);
* ``UNFUSED``: ``grad_oracle`` and then ``SGD.step()``.

:func:`plan` returns the paths to try, in order; every one but the last may decline a batch it
cannot replay (returning None, with nothing changed), and :func:`fused_step` then takes the next.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import _core, late
from ..oracle import check_grad_enabled, checked_threads, grad_oracle, thread_cap


class SGD(Protocol):
    """What the paths read and write of the optimizer (burtorch.optim.SGD, which imports this
    module: naming it here would be an import cycle)."""

    params: _core.Vector
    state: _core.OptimState
    lr: float
    momentum: float
    weight_decay: float
    fused_weights: int

    def step(self) -> None: ...

CHUNKS = "compiled chunks"
COMPILED = "compiled one chunk"
EAGER = "eager fused"
UNFUSED = "unfused"


def plan(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any = None, chunk: int = 1, threads: int | None = None,
         compile: bool = False) -> tuple[str, ...]:
    """The paths ``opt.fused_step(model, batch, loss_fn, chunk, threads, compile)`` tries, in order.

    Raises:
        As :func:`burtorch.oracle.checked_threads` for a bad ``threads`` where a fused path
        needs the count (the unfused path leaves the checks to ``grad_oracle``).
    """
    n = len(batch)
    good_chunk = isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1
    paths: list[str] = []
    # across chunks: needs a recorded program per chunk and several threads to split them over
    if (compile and not opt.momentum and good_chunk and 1 < chunk < n and n % chunk == 0 and loss_fn is None
            and hasattr(model, "loss_batch") and hasattr(model, "parameter_vector") and checked_threads(threads) > 1):
        paths.append(CHUNKS)
    # inside one backward: needs the whole batch as one graph and no momentum buffer to update
    one_graph = good_chunk and (n == 1 or (n > 1 and chunk >= n and loss_fn is None and hasattr(model, "loss_batch")))
    if opt.momentum or not one_graph or not hasattr(model, "parameter_vector"):
        return (*paths, UNFUSED)
    checked_threads(threads)
    if compile and n > 1:  # a list of samples or an ArrayBatch (others step eagerly)
        paths.append(COMPILED)
    return (*paths, EAGER)


def fused_step(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any = None, chunk: int = 1,
               threads: int | None = None, compile: bool = False) -> float:
    """One step of ``opt`` on the mean loss over ``batch`` by the first path of :func:`plan` that
    takes the batch; returns that loss."""
    check_grad_enabled("fused_step()")  # under no_grad a one-graph step returned its loss, untaken
    for path in plan(opt, model, batch, loss_fn, chunk, threads, compile):
        loss = _RUN[path](opt, model, batch, loss_fn, chunk, threads, compile)
        if loss is not None:
            return loss
    raise AssertionError("the last path of a plan never declines")  # plan() ends with EAGER or UNFUSED


def _chunks(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any, chunk: int, threads: int | None,
            compile: bool) -> float | None:
    n_threads = checked_threads(threads)
    with thread_cap(n_threads):
        return late.module("oracle_compiled").compiled_sgd_chunks(opt, model, batch, chunk, n_threads)


def _compiled(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any, chunk: int, threads: int | None,
              compile: bool) -> float | None:
    with thread_cap(checked_threads(threads)):
        return late.module("oracle_compiled").compiled_fused_step(opt, model, batch)


def _unfused(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any, chunk: int, threads: int | None,
             compile: bool) -> float:
    # grad_oracle raises for a bad chunk, an empty batch or a model it cannot use
    opt.fused_weights = 0
    loss = grad_oracle(model, batch, loss_fn, chunk=chunk, threads=threads, compile=compile)
    opt.step()
    return loss


def _eager(opt: SGD, model: Any, batch: Sequence[Any], loss_fn: Any, chunk: int, threads: int | None,
           compile: bool) -> float:
    n = len(batch)
    zero = model.parameter_vector()
    arena = zero.arena
    cp = arena.checkpoint()
    with thread_cap(checked_threads(threads)):
        try:
            if n == 1:
                sample = batch[0]
                if loss_fn is not None:
                    loss = loss_fn(model, sample)
                elif hasattr(model, "loss"):
                    loss = model.loss(*sample)
                else:
                    raise TypeError(f"fused_step(): a {type(model).__name__} has no loss(*sample); pass loss_fn")
            else:
                loss = model.loss_batch(list(batch))
            if not isinstance(loss, _core.Value):
                raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
            v = loss.data
            if v != v or v in (float("inf"), float("-inf")):
                raise FloatingPointError(f"the loss is {v} for a batch; lower the learning rate or check the data")
            opt.fused_weights = _core.sgd_fused_backward(loss, opt.params, opt.state, 1.0, opt.lr, opt.weight_decay,
                                                         True, zero)
            return v
        finally:
            arena.rewind(cp)


_RUN: dict[str, Callable[..., float | None]] = {CHUNKS: _chunks, COMPILED: _compiled, EAGER: _eager,
                                                UNFUSED: _unfused}
