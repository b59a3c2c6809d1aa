"""The gradient oracle from recorded programs: each distinct sample shape is traced once (token
ids and targets are program inputs), then every sample is replayed natively, with no Python per
sample. Parameters stay shared (read from the arena, never copied into the program); memory is
that of one sample's frame.
"""
from __future__ import annotations

import weakref

from . import _core
from .program import traced_ids

# model -> {(sample shape, dtype, wrt key): Program}; dies with the model.
_programs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _flat(x) -> list:
    return [x] if hasattr(x, "__index__") and not hasattr(x, "__len__") else list(x)


def _shape(sample):
    return tuple(0 if hasattr(part, "__index__") and not hasattr(part, "__len__") else len(part) for part in sample)


def _parameters(model):
    """model.parameter_vector(), kept per model (building it walks every module each time)."""
    cache = _programs.setdefault(model, {})
    params = cache.get("params")
    if params is None or not _alive(params):
        params = cache["params"] = model.parameter_vector()
    return params


def _alive(vector) -> bool:
    try:
        vector.size and vector[0:1].tolist("grads")
        return True
    except _core.StaleValueError:
        return False


def sample_program(model, sample, loss_fn=None, wrt=None):
    """The program of samples shaped like `sample` (a tuple of id parts: ints or int lists), traced
    on first use. wrt: Values / Vectors whose grads it reports (default: all parameters, in
    parameter_vector() order); the reverse sweep visits only records leading to them."""
    params = _parameters(model)
    wrt_key = None if wrt is None else tuple((type(w).__name__, repr(w)) for w in wrt)
    key = (_shape(sample), params.arena.dtype, wrt_key)
    cache = _programs.setdefault(model, {})
    prog = cache.get(key)
    if prog is not None and prog.alive:
        return prog
    arena = params.arena
    cp = arena.checkpoint()
    parts, pos = [], 0
    for part in sample:
        t = traced_ids(part, pos)
        pos += len(_flat(part))
        parts.append(t)
    _core._trace_begin(arena, pos)
    try:
        with arena:
            loss = loss_fn(model, tuple(parts)) if loss_fn is not None else model.loss(*parts)
        prog = _core._trace_end(loss, [], [params] if wrt is None else list(wrt))
    finally:
        _core._trace_abort()
        arena.rewind(cp)
    cache[key] = prog
    return prog


def _runs(batch):
    """Consecutive samples of one shape, as (shape, first index, id rows) runs (batch order kept,
    so grads accumulate in the same order as the eager oracle's)."""
    import numpy as np

    runs, start = [], 0
    shapes = [_shape(s) for s in batch]
    for i in range(1, len(batch) + 1):
        if i == len(batch) or shapes[i] != shapes[start]:
            rows = [[v for part in s for v in _flat(part)] for s in batch[start:i]]
            runs.append((batch[start], start, np.asarray(rows, dtype=np.int64).reshape(i - start, -1)))
            start = i
    return runs


def compiled_grad_oracle(model, batch, loss_fn=None, zero_grad: bool = True, threads: int = 1) -> float:
    """grad_oracle(model, batch, compile=True): d mean_loss / d params into the parameters' grads,
    each sample replayed from its shape's program with seed 1/b. Returns the mean loss. threads > 1
    replays blocks of each shape's run at once (burtorch.oracle.grad_oracle says how they add)."""
    import numpy as np

    batch = list(batch)
    n = len(batch)
    if n == 0:
        raise ValueError("grad_oracle(): empty batch")
    params = _parameters(model)
    if zero_grad:
        params.zero_grad()
    total = 0.0
    for sample, start, rows in _runs(batch):
        prog = sample_program(model, sample, loss_fn)
        values = np.empty(len(rows), dtype=np.float64)
        X = np.zeros((len(rows), 0))
        if threads > 1 and len(rows) > 1:
            failed = prog._replay_threads(X, rows, 1.0 / n, values, threads)
        else:
            failed = prog._replay(X, rows, "arena", 1.0 / n, values, None)
        for s in failed:  # a guard came out differently: this sample runs eagerly
            values[s] = _eager_sample(model, batch[start + s], loss_fn, params.arena, 1.0 / n)
        for v in values.tolist():
            total += v
    return total / n


def _eager_sample(model, sample, loss_fn, arena, seed):
    cp = arena.checkpoint()
    try:
        loss = loss_fn(model, sample) if loss_fn is not None else model.loss(*sample)
        v = loss.data
        loss.backward(seed)
        return v
    finally:
        arena.rewind(cp)


def per_sample_grads(model, batch, loss_fn=None, wrt=None, out=None):
    """(G, losses): G[i] is the gradient of sample i's loss w.r.t. the parameters (or the wrt
    nodes), as an (N, d) numpy array written directly by the replay; losses is (N,). out: an
    (N, d) C-contiguous array of the model's dtype to write into instead of a new one."""
    import numpy as np

    batch = list(batch)
    N = len(batch)
    if N == 0:
        raise ValueError("per_sample_grads(): empty batch")
    runs = _runs(batch)
    first = sample_program(model, runs[0][0], loss_fn, wrt)
    dt = np.float64 if first.dtype == _core.float64 else np.float32
    if out is None:
        out = np.empty((N, first.num_wrt), dtype=dt)
    elif out.shape != (N, first.num_wrt) or out.dtype != dt or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {np.dtype(dt).name} array of shape {(N, first.num_wrt)}")
    losses = np.empty(N, dtype=np.float64)
    for sample, start, rows in runs:
        prog = sample_program(model, sample, loss_fn, wrt)
        stop = start + len(rows)
        failed = prog._replay(np.zeros((len(rows), 0)), rows, "rows", 1.0, losses[start:stop], out[start:stop])
        if failed:
            raise RuntimeError(f"per_sample_grads(): guards failed for samples {[start + s for s in failed]}; "
                               "the loss branches on values, so per-sample programs do not apply")
    return out, losses
