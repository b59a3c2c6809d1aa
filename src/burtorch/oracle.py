"""The paper's per-sample gradient oracle (its serialized batch), and its forward-only twin.

Parameters live below a checkpoint; for each sample the graph is built, swept backward with seed
1/b (so the parameter grads accumulate the gradient of the MEAN loss) and rewound. Peak memory is
that of one sample's graph, whatever the batch size. :func:`mean_loss` is the same loop without
backward: the one evaluation loop of the trainer, the research estimators and the benchmarks.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import _core, late, planner
from .modes import no_grad

# A model is duck-typed (parameter_vector(), loss(*sample), loss_batch(samples)); so is a sample.
LossFn = Callable[[Any, Any], _core.Value]


def grad_oracle(model: Any, batch: Sequence[Any], loss_fn: LossFn | None = None, zero_grad: bool = True,
                chunk: int = 1, compile: bool = False, threads: int | None = None, plan: Any = None,
                memory: Any = None) -> float:
    """Accumulates the gradient of the mean loss over ``batch`` into the parameters' grads.

    Args:
        model: a module with ``parameter_vector()`` (and ``loss(*sample)`` unless ``loss_fn``).
        batch: a non-empty sequence of samples, or a :class:`burtorch.data.ArrayBatch` (its
            samples held as integer arrays, which a compiled replay reads without a Python int
            per id).
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        zero_grad: zero the parameter grads first; False adds the mean gradient to them.
        chunk: k > 1 (models with ``loss_batch``) builds k samples at a time as one graph, so
            each layer is one record over k rows and reads its weights once per chunk; memory is
            that of one chunk. 1 is the paper's per-sample oracle.
        compile: trace each distinct sample shape once (token ids and targets are program
            inputs) and replay every sample natively (burtorch.oracle_compiled): the same
            gradient, no Python per sample. With ``chunk=k`` the program is loss_batch over k
            samples, and each chunk is one replay: no Python per chunk either.
        threads: native threads for this call, 1 .. the cores this process may use; default
            ``bt.get_num_threads()``. Compiled: the batch is split into that many blocks of
            samples (or chunks) replayed at once, each block's gradient summed in its own buffer, the blocks
            added in order (the same bits on every run for a given count; one thread is exactly
            the eager order). Eager: large range records (a chunk's layers) split inside the op,
            which gives the same bits whatever the count.
        plan: None (the default) runs as ``chunk``, ``compile`` and ``threads`` say; ``"auto"``
            lets the planner choose them (:func:`burtorch.explain_plan` says what it chose), the
            first call for a model structure and batch shape timing the candidates; a spelling
            such as ``"compiled chunk=32 threads=2"`` (:func:`burtorch.planner.parse`) runs that.
            Fused plans are for optimizers (``opt.train_step``), not here.
        memory: with ``plan="auto"``: ``"sample"`` (one sample per graph), ``"fast"`` (no bound)
            or a byte budget for one call's graphs; default :data:`burtorch.planner.DEFAULT_MEMORY`.

    Returns:
        The mean loss over ``batch``.

    Raises:
        ValueError: an empty batch, a bad ``chunk``, ``chunk > 1`` without ``loss_batch`` (or
            with ``loss_fn``), ``threads`` out of range, a bad ``plan`` or ``memory``, or
            ``plan="auto"`` with ``zero_grad=False``.
        TypeError: a loss is not a scalar Value.
        FloatingPointError: a sample's loss is inf or nan.
    """
    if plan is not None:
        check_grad_enabled("grad_oracle()")
        return _planned_oracle(model, batch, loss_fn, zero_grad, plan, memory, threads)
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    check_grad_enabled("grad_oracle()")
    n_threads = checked_threads(threads)
    if compile and chunk > 1 and loss_fn is not None:
        raise ValueError("chunk > 1 needs a model with loss_batch(samples) and no custom loss_fn")
    saved = _saved_grads(model)
    try:
        # the count caps every native op of this call, a range op inside a replay included
        with thread_cap(n_threads):
            # each sample (or chunk) shape traced once, every one replayed natively; replays check
            # nothing, so under detect_anomaly the eager oracle runs, which checks every op
            if compile and not _core.is_anomaly_enabled():
                compiled = late.module("oracle_compiled")
                return compiled.compiled_grad_oracle(model, batch, loss_fn, zero_grad, threads=n_threads,
                                                     chunk=chunk)
            return _eager_oracle(model, batch, loss_fn, zero_grad, chunk)
    except BaseException:
        # a sample that fails (a non-finite loss, an error in the model, Ctrl-C) after others were
        # swept would leave part of the batch's gradient in the grads: they are put back as they were
        _restore_grads(saved)
        raise


def check_grad_enabled(what: str) -> None:
    """Raises ValueError under no_grad(): the call computes gradients, and without records its
    sweeps would reach no parameter (an eager oracle returned its loss with the grads untouched)."""
    if not _core.is_grad_enabled():
        raise ValueError(f"{what} computes gradients: it cannot run under no_grad()")


def _saved_grads(model: Any) -> list[tuple[Any, int, bytes]]:
    """The parameters' grads as raw bytes per span (no numpy), for _restore_grads."""
    params = model.parameter_vector() if hasattr(model, "parameter_vector") else None
    if params is None:
        return []
    arena = params.arena
    return [(arena, first, arena.read_bytes(first, first + count, "grads")) for first, count in params.spans]


def _restore_grads(saved: list[tuple[Any, int, bytes]]) -> None:
    for arena, first, data in saved:
        arena.write_bytes(first, data, "grads")


def _planned_oracle(model: Any, batch: Sequence[Any], loss_fn: LossFn | None, zero_grad: bool, plan: Any,
                    memory: Any, threads: int | None) -> float:
    limit = planner.memory_limit(memory)

    def run(p: planner.Plan) -> float:
        if p.fused:
            raise ValueError(f"the plan {p} fuses an optimizer's update: use opt.train_step(model, batch, plan=...)")
        chunk = len(batch) if p.chunk == 0 else p.chunk
        return grad_oracle(model, batch, loss_fn, zero_grad, chunk=chunk, compile=p.compile, threads=p.threads)

    if plan != "auto":
        return run(plan if isinstance(plan, planner.Plan) else planner.parse(plan, threads))
    if not zero_grad:  # a trial overwrites the grads, and a failed step could not be undone
        raise ValueError("plan='auto' needs zero_grad=True")
    if not hasattr(model, "parameter_vector"):
        raise TypeError(f"grad_oracle(): a {type(model).__name__} has no parameter_vector()")
    if len(batch) == 0:
        raise ValueError("grad_oracle(): empty batch")
    quick = (len(batch), type(batch), planner.batch_key(batch), loss_fn, memory, threads)
    memo = _last_plan[0]
    if memo is not None and memo[0] is model and memo[1] == quick and memo[2] == planner.EPOCH[0]:
        return planner.run_chosen(memo[3], run)
    counts = plan_threads(threads)
    params = model.parameter_vector()
    chunked = loss_fn is None and hasattr(model, "loss_batch")
    key = ("oracle", planner.model_key(model, params), planner.batch_key(batch), loss_fn is None, limit, counts)

    def build():
        size = 0
        if limit:
            size = planner.sample_bytes(params, lambda: loss_fn(model, batch[0]) if loss_fn is not None
                                        else model.loss(*batch[0]))
        cands, skipped = planner.candidates(len(batch), counts, chunked, False, limit, size)
        return cands, skipped, []

    # a trial overwrites the grads (zero_grad) and nothing else: the real call writes them last
    loss, chosen = planner.planned(key, build, run, lambda p: (run(p), None)[1], None, lambda: forget_programs(model))
    _last_plan[0] = (model, quick, planner.EPOCH[0], chosen)
    assert loss is not None  # planned() returns None only when told not to take the step
    return loss


# (model, quick key, planner epoch, Chosen) of the last planned oracle call: the next call with the same
# model and batch kind skips rebuilding the key (which walks the model's modules)
_last_plan: list = [None]


def plan_threads(threads: int | None) -> tuple[int, ...]:
    """The thread counts a planner tries: ``threads`` alone when given, else 1 and the count
    ``bt.get_num_threads()`` allows (at most the cores this process may use)."""
    if threads is not None:
        return (checked_threads(threads),)
    most = min(checked_threads(None), int(_core._allowed_cores()))
    return (1,) if most <= 1 else (1, most)


def forget_programs(model: Any):
    """Returns a function that drops the programs of ``model`` recorded from now on (the trials'
    of a planner), so only the chosen plan's stay (traced again on its first real step)."""
    programs = late.module("oracle_compiled")._programs
    before = set(programs.get(model, {}))

    def drop() -> None:
        cache = programs.get(model)
        if cache is not None:
            for k in set(cache) - before:
                del cache[k]

    return drop


class thread_cap:
    """``with thread_cap(n):`` native work in the block, on this thread, runs on at most n threads
    (a count checked by :func:`checked_threads`), whatever ``set_num_threads`` says; the cap
    before the block is restored after it. A class, not a generator: grad_oracle enters it every
    step."""

    __slots__ = ("threads", "_old")

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._old = 0

    def __enter__(self) -> None:
        self._old = _core._swap_call_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        _core._swap_call_threads(self._old)


def checked_threads(threads: int | None) -> int:
    """``threads`` as a thread count: None is ``get_num_threads()``; 1 .. the cores this process
    may use, else ValueError (TypeError for a non-int)."""
    if threads is None:
        return int(_core.get_num_threads())
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int, got {type(threads).__name__}")
    cores = int(_core._allowed_cores())
    if not 1 <= threads <= cores:
        raise ValueError(f"threads must be in 1..{cores} (the cores this process may use), got {threads}")
    return threads


def _eager_oracle(model: Any, batch: Sequence[Any], loss_fn: LossFn | None, zero_grad: bool, chunk: int) -> float:
    if chunk > 1:
        if loss_fn is not None or not hasattr(model, "loss_batch"):
            raise ValueError("chunk > 1 needs a model with loss_batch(samples) and no custom loss_fn")
        batch = list(batch)
        groups = [batch[i:i + chunk] for i in range(0, len(batch), chunk)]
        return _sweep(model, groups, len(batch), lambda g: model.loss_batch(g), weight=len, zero_grad=zero_grad)
    if loss_fn is None and not hasattr(model, "loss"):
        raise TypeError(f"grad_oracle(): a {type(model).__name__} has no loss(*sample); pass loss_fn(model, sample)")
    return _sweep(model, batch, len(batch),
                  (lambda s: loss_fn(model, s)) if loss_fn is not None else (lambda s: model.loss(*s)),
                  weight=lambda s: 1, zero_grad=zero_grad)


def _sweep(model: Any, items: Iterable[Any], n: int, loss_of: Callable[[Any], Any], weight: Callable[[Any], int],
           zero_grad: bool) -> float:
    """For each item: loss_of(item) (the mean over its weight(item) samples), backward with seed
    weight/n, rewind."""
    if n == 0:
        raise ValueError("grad_oracle(): empty batch")
    params = model.parameter_vector() if hasattr(model, "parameter_vector") else None
    if zero_grad and params is not None:
        params.zero_grad()
    arena = params.arena if params is not None else _core.current_arena()
    cp = arena.checkpoint()
    total = 0.0
    try:
        for item in items:
            loss = loss_of(item)
            if not isinstance(loss, _core.Value):
                raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
            v = loss.data
            if v != v or v in (float("inf"), float("-inf")):
                raise FloatingPointError(f"the loss is {v} for a sample; lower the learning rate or check the data")
            w = weight(item)
            total += v * w
            loss.backward(w / n)
            arena.rewind(cp)
    finally:
        if arena.num_nodes != cp.nodes:
            arena.rewind(cp)
    return total / n


def mean_loss(model: Any, samples: Sequence[Any], loss_fn: LossFn | None = None) -> float:
    """The mean loss over ``samples`` from forward passes only.

    Each sample's graph is discarded as soon as its loss is read, so memory is that of one sample;
    parameter grads are untouched and nothing is left in the arena.

    Args:
        model: a module with ``parameter_vector()`` (and ``loss(*sample)`` unless ``loss_fn``).
        samples: a non-empty sequence of samples.
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.

    Returns:
        The mean of the samples' losses, as a float.

    Raises:
        ValueError: ``samples`` is empty.
        TypeError: a loss is not a scalar Value.
    """
    n = len(samples)
    if n == 0:
        raise ValueError("mean_loss(): no samples")
    arena = model.parameter_vector().arena
    cp = arena.checkpoint()
    total = 0.0
    try:
        with no_grad():  # values only: no records, no args
            for sample in samples:
                loss = loss_fn(model, sample) if loss_fn is not None else model.loss(*sample)
                if not isinstance(loss, _core.Value):
                    raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
                total += loss.data
                arena.rewind(cp)
    finally:
        if arena.num_nodes != cp.nodes:
            arena.rewind(cp)
    return total / n
