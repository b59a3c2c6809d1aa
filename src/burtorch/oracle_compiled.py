"""The gradient oracle from recorded programs: each distinct sample shape is traced once (token
ids and targets are program inputs), then every sample is replayed natively, with no Python per
sample. Parameters stay shared: a program holds none, each replay call reads them from the arena
(once per call, not per sample), so optimizer updates are seen; memory is that of one sample's
frame. numpy is needed only by per_sample_grads, whose result is an array.
"""
from __future__ import annotations

import weakref
from array import array
from itertools import chain

from . import _core
from .data.arrays import ArrayBatch
from .nn.module import structure_epoch
from .program import traced_ids

# model -> {(sample shape, dtype, wrt key): Program}; dies with the model.
_programs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> nn.module.structure_epoch() when its cached parameter vector was built.
_epochs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Programs kept per model: a loop over ever new sample shapes or wrt lists must not keep every
# program it traced; past this, the least recently used one is dropped (and retraced if needed).
MAX_PROGRAMS = 64


def _flat(x) -> list:
    return [x] if hasattr(x, "__index__") and not hasattr(x, "__len__") else list(x)


# A sample's shape (per id part: 0 for one id, L for a sequence of L ids), by the rule the native
# replays read samples with, so the two never disagree.
_shape = _core._sample_shape


def _listed(batch):
    """batch as the replays take it: a list of samples, or an ArrayBatch (read through its arrays)."""
    return batch if type(batch) is list or type(batch) is ArrayBatch else list(batch)


def _ids(batch):
    """What the native replays read a batch's ids from: the list itself, or an ArrayBatch's arrays."""
    return batch.parts if type(batch) is ArrayBatch else batch


def _shape_at(batch, i: int):
    """_shape(batch[i]), without making the sample of an ArrayBatch (all of its samples have one)."""
    return batch.shape if type(batch) is ArrayBatch else _shape(batch[i])


def _parameters(model):
    """model.parameter_vector(), kept per model (building it walks every module each time), built
    again when a module's structure changed since (nn.module.structure_epoch); when its nodes
    changed too (a layer replaced), the model's programs, which read the old nodes, are dropped."""
    cache = _programs.setdefault(model, {})
    params = cache.get("params")
    epoch = structure_epoch()
    if params is None or _epochs.get(model) != epoch or not _alive(params):
        fresh = model.parameter_vector()
        if params is not None and (fresh.arena is not params.arena or fresh.spans != params.spans):
            for k in [k for k in cache if k != "params"]:
                del cache[k]
        params = cache["params"] = fresh
        _epochs[model] = epoch
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
    return _program(model, sample, _shape(sample), loss_fn, wrt)


def _cached_program(model, shape, wrt_key=None):
    """The live program already traced for `shape`, or None."""
    cache = _programs.get(model)
    if cache is not None and _epochs.get(model) == structure_epoch():  # else _parameters looks again
        params = cache.get("params")
        key = (shape, params.arena.dtype, wrt_key) if params is not None else None
        prog = cache.get(key) if key is not None else None
        if prog is not None and prog.alive:
            if next(reversed(cache)) != key:  # most recently used last: eviction takes the first
                cache[key] = cache.pop(key)
            return prog
    return None


def _wrt_key(wrt):
    """What identifies the nodes of a wrt list: each one's arena and node indices (its spans and
    shape for a Vector). Not its repr, which prints values: two parameters holding equal numbers
    would share a program, and one whose values change would trace a new one every step."""
    if wrt is None:
        return None
    key: list[tuple] = []
    for w in wrt:
        if isinstance(w, _core.Vector):
            key.append(("Vector", id(w.arena), tuple(w.spans), tuple(w.shape)))
        elif isinstance(w, _core.Value):
            key.append(("Value", id(w.arena), w.index))
        else:
            raise TypeError(f"wrt must hold Values or Vectors, got {type(w).__name__}")
    return tuple(key)


def _remember(cache: dict, key, prog) -> None:
    """cache[key] = prog, dropping dead programs, then the least recently used past MAX_PROGRAMS."""
    cache.pop(key, None)
    for k in [k for k, p in cache.items() if k != "params" and not p.alive]:
        del cache[k]
    programs = [k for k in cache if k != "params"]
    for k in programs[:max(0, len(programs) + 1 - MAX_PROGRAMS)]:
        del cache[k]
    cache[key] = prog


def _program(model, sample, shape, loss_fn, wrt):
    # a custom loss_fn traces another program: it is part of the key (a chunk's _ChunkLoss is not,
    # its shapes are already in `shape`)
    custom = loss_fn is not None and type(loss_fn) is not _ChunkLoss
    wrt_key = (_wrt_key(wrt), loss_fn) if custom else _wrt_key(wrt)
    prog = _cached_program(model, shape, wrt_key)
    if prog is not None:
        return prog
    params = _parameters(model)
    key = (shape, params.arena.dtype, wrt_key)
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
    _remember(cache, key, prog)
    return prog


def _replay_batch(model, batch, loss_fn, wrt, mode, seed, values, out, zero=False, stream=False, threads=1):
    """Replays every sample of batch (a list) from the program of its shape, run by run of
    consecutive samples of one shape (batch order kept, so grads accumulate in the order of the
    eager oracle). Yields each run's failed sample indices (into batch), after the run."""
    i, n = 0, len(batch)
    while i < n:
        shape = _shape_at(batch, i)
        prog = _program(model, batch[i], shape, loss_fn, wrt)
        stop, failed = prog._replay_samples(_ids(batch), i, shape, mode, seed, values, out, zero, stream, threads)
        zero = False  # later runs continue from the grads the first one wrote
        yield failed
        i = stop


def compiled_grad_oracle(model, batch, loss_fn=None, zero_grad: bool = True, threads: int = 1,
                         chunk: int = 1) -> float:
    """grad_oracle(model, batch, compile=True): d mean_loss / d params into the parameters' grads,
    each sample replayed from its shape's program with seed 1/b. Returns the mean loss. Needs no
    numpy: ids go to the replay as the batch's own lists. threads > 1 replays blocks of each
    shape's run at once (burtorch.oracle.grad_oracle says how their grads add). chunk > 1 replays
    chunks of samples instead (_chunked_oracle)."""
    batch = _listed(batch)
    n = len(batch)
    if n == 0:
        raise ValueError("grad_oracle(): empty batch")
    if chunk > 1:
        return _chunked_oracle(model, batch, zero_grad, threads, chunk)
    values = array("d", [0.0]) * n
    arena = None
    # zero=zero_grad: the first replay starts the parameter grads from zero instead of reading
    # them (the same as zeroing them first, without the pass)
    for failed in _replay_batch(model, batch, loss_fn, None, "arena", 1.0 / n, values, None, zero_grad,
                                threads=threads):
        for s in failed:  # a guard came out differently: this sample runs eagerly
            arena = arena or _parameters(model).arena
            values[s] = _eager_sample(model, batch[s], loss_fn, arena, 1.0 / n)
    total = 0.0
    for v in values:  # in batch order, as the eager oracle adds
        total += v
    return total / n


class _ChunkLoss:
    """The loss of a chunk program: the traced ids of a compound sample (part q of every sample,
    concatenated) split back into the chunk's samples, then model.loss_batch over them."""

    def __init__(self, shapes):
        self.shapes = shapes  # each sample's shape (_shape)

    def __call__(self, model, parts):
        samples: list[list] = [[] for _ in self.shapes]
        for q, part in enumerate(parts):
            pos = 0
            for sample, shape in zip(samples, self.shapes):
                length = shape[q]
                sample.append(part[pos] if length == 0 else part[pos:pos + length])
                pos += max(1, length)
        return model.loss_batch([tuple(sample) for sample in samples])


def _compound(group, shapes) -> tuple:
    """A chunk as one sample of its program: part q of every sample, concatenated into one list
    (shapes: the samples' _shape)."""
    parts = []
    for q in range(len(group[0])):
        if all(shape[q] == 0 for shape in shapes):
            parts.append([sample[q] for sample in group])
        else:
            parts.append(list(chain.from_iterable(_flat(sample[q]) for sample in group)))
    return tuple(parts)


def _chunk_shapes(group) -> tuple:
    """The shapes of a chunk's samples, which must all have the same number (at least one) of id
    parts."""
    shapes = tuple(_shape(s) for s in group)
    if not shapes[0] or any(len(sh) != len(shapes[0]) for sh in shapes):
        raise ValueError("every sample of a chunked batch must have the same number of id parts (at least one)")
    return shapes


def _uniform_chunk_key(k: int, shape: tuple) -> tuple:
    """The program cache's key for a chunk of k samples of one shape: its size and that shape
    (a key of one shape per sample grows with the batch and is hashed on every step)."""
    return ("chunk", k, shape)


def _uniform_chunk_program(model, batch, start: int, k: int, shape: tuple):
    """The program of model.loss_batch over k samples of `shape` (the shape of batch[start]),
    traced from batch[start:start + k] on first sight; None when one of those has another shape
    and nothing is cached (the slice is taken only then: this runs every step)."""
    key = _uniform_chunk_key(k, shape)
    prog = _cached_program(model, key)
    if prog is None:
        uniform = (shape,) * k
        group = batch[start:start + k]
        if _chunk_shapes(group) == uniform:
            prog = _program(model, _compound(group, uniform), key, _ChunkLoss(uniform), None)
    return prog


def _chunk_key(shapes: tuple) -> tuple:
    """The program cache's key for a chunk of samples of these shapes (every shape when they
    differ)."""
    if all(s == shapes[0] for s in shapes):
        return _uniform_chunk_key(len(shapes), shapes[0])
    return ("chunk",) + shapes


def _chunked_oracle(model, batch, zero_grad, threads, chunk) -> float:
    """grad_oracle(model, batch, compile=True, chunk=k): each chunk of k samples (as the eager
    chunked oracle groups them) is one replay of the program of model.loss_batch over k samples
    of those shapes, traced on first use, with seed k/b. A run of chunks whose samples all have one
    shape replays at once, its ids packed natively (no Python per sample); threads > 1 replays
    blocks of its chunks side by side, each block's grads summed apart and the blocks added in
    order. A chunk mixing sample shapes replays alone."""
    if not hasattr(model, "loss_batch"):
        raise ValueError("chunk > 1 needs a model with loss_batch(samples) and no custom loss_fn")
    n = len(batch)
    losses = array("d")  # each chunk's mean loss times its size, in batch order
    zero, i, arena = zero_grad, 0, None
    while i < n:
        k = min(chunk, n - i)
        shape = _shape_at(batch, i)
        prog = _uniform_chunk_program(model, batch, i, k, shape)
        stop = 0
        if prog is not None:  # a run of chunks of this shape, ids packed natively
            out = array("d", [0.0]) * ((n - i) // k)
            stop, failed = prog._replay_chunks(_ids(batch), i, k, len(out), list(shape), k / n, out, zero, threads)
        if stop == 0:  # the chunk mixes sample shapes: its compound sample, packed here
            shapes = _chunk_shapes(batch[i:i + k])
            compound = _compound(batch[i:i + k], shapes)
            prog = _program(model, compound, _chunk_key(shapes), _ChunkLoss(shapes), None)
            out = array("d", [0.0])
            stop, failed = prog._replay_samples([compound], 0, _shape(compound), "arena", k / n, out, None, zero,
                                                False, threads)
        zero = False  # later runs continue from the grads the first one wrote
        for f in failed:  # a guard came out differently: this chunk runs eagerly
            arena = arena or _parameters(model).arena
            lo = i + f * k
            out[f] = _eager_sample(model, batch[lo:lo + k], lambda m, g: m.loss_batch(g), arena, k / n)
        for v in out[:stop]:
            losses.append(v * k)
        i += stop * k
    total = 0.0
    for v in losses:  # in batch order, as the eager chunked oracle adds
        total += v
    return total / n


def compiled_fused_step(opt, model, batch):
    """SGD.fused_step(model, batch, chunk >= len(batch), compile=True): the batch replayed once as
    one chunk of its program (model.loss_batch over len(batch) samples of one shape, traced on
    first use), the linear weights it reads in place updated inside the sweep, then every other
    parameter stepped. Returns the mean loss, or None, with nothing changed, when the batch
    cannot replay (not a list or an ArrayBatch, mixed shapes, a guard that comes out
    differently): then the caller steps eagerly. A non-finite loss raises FloatingPointError and
    changes nothing."""
    if type(batch) is not list and type(batch) is not ArrayBatch or _core.is_anomaly_enabled():
        return None  # under detect_anomaly the caller's eager step checks every op
    n = len(batch)
    shape = _shape_at(batch, 0)
    prog = _uniform_chunk_program(model, batch, 0, n, shape)
    if prog is None:
        return None
    replayed, loss, weights, applied = prog._fused_sgd_chunk(_ids(batch), list(shape), opt.params, opt.lr,
                                                             opt.weight_decay)
    if not replayed:
        return None
    _core.sgd_step_around_fused(opt.params, opt.state, opt.lr, opt.weight_decay, weights, applied)
    opt.fused_weights = len(weights)
    return loss


def compiled_sgd_chunks(opt, model, batch, k: int, threads: int):
    """SGD.fused_step(model, batch, chunk=k, compile=True) on two threads or more, len(batch) a
    multiple of k > 1: the chunks replayed as grad_oracle(..., compile=True, chunk=k, threads)
    replays them, each thread its block of chunks, then the step taken in the pass that adds the
    threads' gradients, so the parameters' grads are neither written nor read back (they keep
    their values). Returns the mean loss, or None with nothing changed when the batch cannot
    replay so (another kind of batch, a sample of another shape, an optimizer over other
    parameters than the model's): the caller steps unfused. A chunk whose guard fails runs
    eagerly, and the step then follows as opt.step(): the same values either way."""
    if type(batch) is not list and type(batch) is not ArrayBatch or _core.is_anomaly_enabled():
        return None  # under detect_anomaly the caller's eager step checks every op
    n = len(batch)
    if n % k:
        return None
    shape = _shape_at(batch, 0)
    prog = _uniform_chunk_program(model, batch, 0, k, shape)
    if prog is None:
        return None
    out = array("d", [0.0]) * (n // k)
    stop, failed, stepped = prog._sgd_chunks(_ids(batch), k, len(out), list(shape), k / n, out, opt.params, opt.state,
                                             opt.lr, opt.weight_decay, threads)
    if stop < len(out):
        return None
    if not stepped:  # the grads were written: the failed chunks add theirs eagerly, then the step
        arena = _parameters(model).arena
        for f in failed:
            out[f] = _eager_sample(model, batch[f * k:(f + 1) * k], lambda m, g: m.loss_batch(g), arena, k / n)
        opt.step()
    total = 0.0
    for v in out:  # in batch order, as the chunked oracle adds
        total += v * k
    opt.fused_weights = 0
    return total / n


def _eager_sample(model, sample, loss_fn, arena, seed):
    cp = arena.checkpoint()
    try:
        loss = loss_fn(model, sample) if loss_fn is not None else model.loss(*sample)
        v = loss.data
        if v != v or v in (float("inf"), float("-inf")):  # as the eager oracle and the replay refuse it
            raise FloatingPointError(f"the loss is {v} for a sample; lower the learning rate or check the data")
        loss.backward(seed)
        return v
    finally:
        arena.rewind(cp)


def per_sample_grads(model, batch, loss_fn=None, wrt=None, out=None):
    """(G, losses): G[i] is the gradient of sample i's loss w.r.t. the parameters (or the wrt
    nodes), as an (N, d) numpy array written directly by the replay; losses is (N,). out: an
    (N, d) C-contiguous array of the model's dtype to write into instead of a new one (reusing
    one across calls saves faulting in fresh pages for every call)."""
    import numpy as np

    if not _core.is_grad_enabled():  # as grad_oracle: a trace records ops, an eager sweep needs them
        raise ValueError("per_sample_grads() computes gradients: it cannot run under no_grad()")
    batch = _listed(batch)
    N = len(batch)
    if N == 0:
        raise ValueError("per_sample_grads(): empty batch")
    first = sample_program(model, batch[0], loss_fn, wrt)
    dt = np.float64 if first.dtype == _core.float64 else np.float32
    reused = out is not None  # written before: rows stream past the caches into it
    if out is None:
        out = np.empty((N, first.num_wrt), dtype=dt)
    elif (not isinstance(out, np.ndarray) or out.shape != (N, first.num_wrt) or out.dtype != dt
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"out must be a writable C-contiguous {np.dtype(dt).name} array of shape {(N, first.num_wrt)}")
    losses = np.empty(N, dtype=np.float64)
    if _core.is_anomaly_enabled():  # replays check nothing: each sample's eager sweep checks every op
        _eager_rows(model, batch, loss_fn, wrt, out, losses)
        return out, losses
    for failed in _replay_batch(model, batch, loss_fn, wrt, "rows", 1.0, losses, out, stream=reused):
        if failed:
            raise RuntimeError(f"per_sample_grads(): guards failed for samples {failed}; "
                               "the loss branches on values, so per-sample programs do not apply")
    return out, losses


def _eager_rows(model, batch, loss_fn, wrt, out, losses):
    """per_sample_grads, each sample swept eagerly (under detect_anomaly): row i the grads of the
    wrt nodes after sample i's sweep alone; the grads they held before are put back."""
    nodes = [_parameters(model)] if wrt is None else list(wrt)
    arena = nodes[0].arena
    saved = [n.grad if isinstance(n, _core.Value) else n.tolist("grads") for n in nodes]
    try:
        for i, sample in enumerate(batch):
            for n in nodes:
                n.zero_grad()
            cp = arena.checkpoint()
            try:
                loss = loss_fn(model, sample) if loss_fn is not None else model.loss(*sample)
                loss.backward()
                losses[i] = loss.data
            finally:
                arena.rewind(cp)
            out[i] = list(chain.from_iterable([n.grad] if isinstance(n, _core.Value) else n.tolist("grads")
                                              for n in nodes))
    finally:
        for n, g in zip(nodes, saved):
            if isinstance(n, _core.Value):
                n.grad = g
            else:
                n.set_grad(g)
