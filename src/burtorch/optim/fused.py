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

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .. import _core, late, planner
from ..oracle import check_grad_enabled, checked_threads, forget_programs, grad_oracle, plan_threads, thread_cap
from ..planner import Chosen, Plan


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


def run_plan(opt: Any, model: Any, batch: Sequence[Any], loss_fn: Any, p: Plan) -> float:
    """One step of ``opt`` on ``batch`` by the plan ``p`` (see :class:`burtorch.planner.Plan`)."""
    chunk = len(batch) if p.chunk == 0 else p.chunk
    if p.fused:
        return fused_step(opt, model, batch, loss_fn, chunk, p.threads, p.compile)
    loss = grad_oracle(model, batch, loss_fn, chunk=chunk, compile=p.compile, threads=p.threads)
    with thread_cap(p.threads):  # the step on the oracle's count (see burtorch.cli.trainer)
        opt.step()
    return loss


def planned_step(opt: Any, model: Any, batch: Sequence[Any], loss_fn: Any = None, plan: Any = "auto",
                 memory: Any = None, threads: int | None = None, take: bool = True) -> tuple[float | None, Chosen]:
    """``opt.train_step(...)``: one step on ``batch`` by ``plan`` (a :class:`Plan`, its spelling,
    or "auto": the plan chosen for this model structure, batch shape, dtype and optimizer kind,
    measured on the first call); returns the mean loss and the plan with its explanation.
    ``take=False`` chooses the plan without stepping (the loss is None): the model and optimizer
    are left as they were."""
    if not hasattr(model, "parameter_vector"):
        raise TypeError(f"train_step(): a {type(model).__name__} has no parameter_vector()")
    check_grad_enabled("train_step()")  # else every trial would fail alike, and say nothing useful
    limit = planner.memory_limit(memory)
    if plan != "auto":
        p = plan if isinstance(plan, Plan) else planner.parse(plan, threads)
        _check_fusable(opt, p)
        return (run_plan(opt, model, batch, loss_fn, p) if take else None), Chosen(p, "given")
    if len(batch) == 0:
        raise ValueError("train_step(): empty batch")
    counts = plan_threads(threads)
    params = model.parameter_vector()
    n = len(batch)
    chunked = loss_fn is None and hasattr(model, "loss_batch")
    why_not = _why_not_fused(opt, params)
    key = ("step", planner.model_key(model, params), planner.batch_key(batch), type(opt).__qualname__, why_not,
           loss_fn is None, limit, counts)

    def build():
        size = 0
        if limit:
            size = planner.sample_bytes(params, lambda: loss_fn(model, batch[0]) if loss_fn is not None
                                        else model.loss(*batch[0]))
        cands, skipped = planner.candidates(n, counts, chunked, why_not is None, limit, size)
        notes = [] if why_not is None else [f"no fused update: {why_not} (the times are the oracle's: "
                                            "the optimizer's step is the same on every path)"]
        if _half(params):  # recorded programs replay float32 and float64 arenas only
            cands = [c for c in cands if not c.compile]
            notes.append(f"eager plans only: {params.dtype.name} graphs are not recorded as programs")
        if not chunked and n > 1:
            notes.append("one sample per graph: " + ("a custom loss_fn" if loss_fn is not None
                                                       else "the model has no loss_batch"))
        return cands, skipped, notes

    snap = None
    step_seconds: dict = {}

    fusable = why_not is None

    def trial(p: Plan) -> float:
        nonlocal snap
        if snap is None:  # taken once, by the first trial (a cached plan needs none); an
            # optimizer that cannot fuse is never stepped by a trial, so its state needs no copy
            snap = planner.Snapshot(opt.params, opt if fusable else None)
        if p.fused:
            t0 = time.perf_counter()
            run_plan(opt, model, batch, loss_fn, p)
            took = time.perf_counter() - t0
            snap.restore_values()
            return took
        # the other paths differ in the oracle alone: it overwrites the grads (nothing to undo)
        # and the optimizer's step, the same for all, is timed once per thread count, where a
        # fused path is to be weighed against them
        chunk = n if p.chunk == 0 else p.chunk
        t0 = time.perf_counter()
        grad_oracle(model, batch, loss_fn, chunk=chunk, compile=p.compile, threads=p.threads)
        took = time.perf_counter() - t0
        if not fusable:
            return took
        if p.threads not in step_seconds:
            step_seconds[p.threads] = _step_seconds(opt, snap, p.threads)
        return took + step_seconds[p.threads]

    def undo() -> None:
        if snap is not None:
            snap.restore()

    loss, chosen = planner.planned(key, build, lambda p: run_plan(opt, model, batch, loss_fn, p), trial, undo,
                                   lambda: forget_programs(model), take=take)
    if take:
        opt._fast_step = FastStep(opt, model, batch, loss_fn, memory, threads, chosen)
    return loss, chosen


class FastStep:
    """The chosen plan of an optimizer's last planned step, bound to its model and batch kind, so
    that the next step of that kind runs it at once (rebuilding the planner's key walks every
    module of the model: more than a small model's whole step)."""

    __slots__ = ("opt", "model", "loss_fn", "chosen", "key", "epoch", "run", "_shape_at", "threads")

    def __init__(self, opt: Any, model: Any, batch: Sequence[Any], loss_fn: Any, memory: Any, threads: Any,
                 chosen: Chosen) -> None:
        self.opt, self.model, self.loss_fn, self.chosen = opt, model, loss_fn, chosen
        self._shape_at = late.module("oracle_compiled")._shape_at
        self.key = self._key(batch, loss_fn, memory, threads)
        self.epoch = planner.EPOCH[0]
        self.threads = _core.get_num_threads()  # the count the run below was bound for
        p = chosen.plan
        compile, t = p.compile, p.threads
        if p.fused:
            self.run = lambda b: fused_step(opt, model, b, loss_fn, len(b) if p.chunk == 0 else p.chunk, t, compile)
        elif t == checked_threads(None):  # the process's count already: no cap to set around the step
            def run(b: Sequence[Any]) -> float:
                loss = grad_oracle(model, b, loss_fn, True, len(b) if p.chunk == 0 else p.chunk, compile, t)
                opt.step()
                return loss

            self.run = run
        else:
            cap = thread_cap(t)

            def run_capped(b: Sequence[Any]) -> float:
                loss = grad_oracle(model, b, loss_fn, True, len(b) if p.chunk == 0 else p.chunk, compile, t)
                with cap:
                    opt.step()
                return loss

            self.run = run_capped

    def _key(self, batch: Sequence[Any], loss_fn: Any, memory: Any, threads: Any) -> tuple:
        return len(batch), type(batch), self._shape_at(batch, 0), loss_fn, memory, threads

    def fits(self, model: Any, batch: Sequence[Any], loss_fn: Any, memory: Any, threads: Any) -> bool:
        """Whether a step on ``batch`` has this plan (the same model, batch kind and settings)."""
        return (model is self.model and self.epoch == planner.EPOCH[0] and len(batch) > 0
                and self.key == self._key(batch, loss_fn, memory, threads) and self.threads == _core.get_num_threads())

    def __call__(self, batch: Sequence[Any]) -> float:
        try:
            return self.run(batch)
        except (ArithmeticError, MemoryError):
            raise
        except Exception:  # noqa: BLE001 - as every planned step: the plan again, then the paper's path
            return planner.run_chosen(self.chosen, lambda p: run_plan(self.opt, self.model, batch, self.loss_fn, p))


def _step_seconds(opt: Any, snap: planner.Snapshot, threads: int) -> float:
    """The fastest of five ``opt.step()`` on ``threads`` threads, each undone."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        with thread_cap(threads):
            opt.step()
        best = min(best, time.perf_counter() - t0)
        snap.restore_values()
    return best


def _half(params: Any) -> bool:
    return params.dtype.name in ("bfloat16", "float16")


def _why_not_fused(opt: Any, params: Any) -> str | None:
    if _half(params):
        return f"{params.dtype.name} parameters step on a master copy, after the sweep"
    if not hasattr(opt, "fused_step"):
        return f"{type(opt).__name__} has no fused update (SGD has)"
    if opt.momentum:
        return "momentum keeps a buffer the fused sweep does not update"
    if opt.params.spans != params.spans:
        return "the optimizer's parameters are not the model's"
    return None


def _check_fusable(opt: Any, p: Plan) -> None:
    if p.fused and not hasattr(opt, "fused_step"):
        raise ValueError(f"the plan {p} fuses the update, which {type(opt).__name__} has not (SGD has)")


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
