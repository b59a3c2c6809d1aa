"""Recorded programs: trace a function once per input signature, replay it natively.

``value_and_grad(fn)`` returns a callable. Its first call with a given signature (which arguments
are floats and which are ids, how many ids, the dtype, the arena) runs ``fn`` once in trace mode:
the ops it appends are copied out of the arena as a ``Program`` whose float inputs and ids can be
replaced. Every later call, and ``.map`` over many samples, replays the program's records in
native code (forward, then the reverse sweep): no Python runs per op or per sample.

Trace rules (see the README):
- comparisons of traced Values (``<``, ``<=``, ``>``, ``>=``) and ``bool(v)`` are guards: each
  replay re-evaluates them and, where one comes out differently, that sample is recomputed by a
  new trace (kept as another variant of the program), never answered from the old one;
- reading a number out of a traced Value (``float(v)``, ``.data``, ``.item()``, ``tolist()``,
  numpy views), ``backward()`` and ``no_grad()`` inside the traced function raise TraceError
  naming the line: their result would be baked into the program;
- writes (``.data =``, ``.grad =``, ``zero_grad()``, ``set_data``, ``load_array``, optimizer
  steps), into any arena, raise TraceError: they would run once, at trace time, and be dropped
  by every replay;
- ids (ints passed where an id argument is declared) may only be used as ids: in
  ``bt.embedding`` / ``nn.Embedding`` lookups and as ``cross_entropy`` targets. Any other use
  (arithmetic, comparisons, indexing a Python list) raises TraceError. A scalar id argument is
  one traced id, a list of L ints L of them (one signature per L);
- gradients come in ``argnums`` order (``argnums=(1, 0)``: d/dx1 first), as in JAX;
- under ``detect_anomaly`` calls and ``.map`` run eagerly, so that every op is checked.
"""
from __future__ import annotations

import sys
from array import array
from typing import Any

from . import _core, native

TraceError = _core.TraceError
Program = _core.Program



def lane_width(dtype=None) -> int:
    """Samples one vector register of this build holds for dtype (default: the default dtype):
    replays over many samples run them in blocks of such lanes (8 FP64 / 16 FP32 on AVX-512,
    4 / 8 on AVX2, 2 / 4 on SSE2 and NEON)."""
    return _core.lane_width(_core.get_default_dtype() if dtype is None else dtype)


def lanes_enabled() -> bool:
    """Whether replays over many samples run them in SIMD lanes (the default)."""
    return _core.lanes_enabled()


def set_lanes_enabled(on: bool) -> None:
    """Lets replays over many samples run them in SIMD lanes (True, the default) or one sample at
    a time (False): the same numbers either way, bit for bit; the switch is for comparisons."""
    if not isinstance(on, bool):
        raise TypeError(f"set_lanes_enabled(): on must be a bool, got {type(on).__name__}")
    _core.set_lanes_enabled(on)


# Variants kept per signature: each failed guard adds one; past this, the oldest is dropped.
MAX_VARIANTS = 16
# Signatures kept per compiled function (least recently used dropped first).
MAX_SIGNATURES = 64


class TracedId:
    """An int that is a program input: usable as an id (lookups, targets) and nothing else."""

    __slots__ = ("_value", "_bt_input")

    def __init__(self, value: int, position: int):
        self._value = int(value)
        self._bt_input = position

    def __index__(self):
        if not _core._reading_ids():
            _refuse("using a traced id as an int (indexing, range(), ...)")
        return self._value

    def __repr__(self):
        return f"TracedId(position={self._bt_input})"

    def _refuse_number(self, *_):
        _refuse("using a traced id as a number")

    __int__ = __float__ = __bool__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse_number
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __pow__ = __rpow__ = __neg__ = _refuse_number
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse_number
    __hash__ = None  # type: ignore[assignment]  # unhashable, as objects with __eq__ are


def _refuse(what):
    frame = sys._getframe(2)
    raise TraceError(f"{what} while tracing ({frame.f_code.co_filename}:{frame.f_lineno}): the value would be "
                     "baked into the program; ids can only be looked up (embedding) or be cross_entropy targets")


def traced_ids(ids, start: int):
    """ids (an int or a sequence of ints) as TracedIds at positions start, start + 1, ..."""
    if isinstance(ids, TracedId):
        raise TypeError("ids are already traced")
    if _is_int(ids):
        return TracedId(ids, start)
    return [TracedId(v, start + i) for i, v in enumerate(ids)]


def _is_int(x) -> bool:
    return hasattr(x, "__index__") and not isinstance(x, (float, bool, _core.Value)) and not hasattr(x, "__len__")


def trace(fn, floats=(), ids=(), *, wrt=None, wrt_inputs=None, arena=None, dtype=None, call=None):
    """Traces ``fn`` once and returns its Program.

    floats: the values of the float inputs (each becomes a fresh leaf, passed to fn in order);
    ids: the length of each id argument (0 for a scalar id), with example values given by
    ``call``; wrt: Values / Vectors whose grads replays report (default: the float inputs, or
    those at the positions wrt_inputs).
    ``call(inputs, id_args)`` calls fn with the traced inputs (default: ``fn(*inputs, *id_args)``).
    The arena is rewound to where it was: the program keeps its own copy of the records.
    """
    if arena is None:
        arena = _core.current_arena(dtype) if dtype is not None else _core.current_arena()
    cp = arena.checkpoint()
    ids = list(ids)
    num_ids = sum(max(1, n) if isinstance(n, int) else len(n) for n in ids)
    _core._trace_begin(arena, num_ids)
    try:
        with arena:
            inputs = [_core.Value(float(x), dtype=arena.dtype) for x in floats]
        id_args, pos = [], 0
        for example in ids:
            t = traced_ids(example, pos)
            pos += 1 if isinstance(t, TracedId) else len(t)
            id_args.append(t)
        with arena:
            root = call(inputs, id_args) if call is not None else fn(*inputs, *id_args)
        if isinstance(root, _core.Vector) and len(root.values()) == 1:
            root = root.values()[0]
        if wrt is None:
            wrt = inputs if wrt_inputs is None else [inputs[i] for i in wrt_inputs]
        return _core._trace_end(root, inputs, list(wrt))
    finally:
        _core._trace_abort()
        arena.rewind(cp)


class Compiled:
    """What value_and_grad / grad return: call it like fn, or ``.map`` it over many samples."""

    def __init__(self, fn, argnums, ids, dtype, with_value):
        self.fn = fn
        self._single = isinstance(argnums, int)
        if not self._single and not isinstance(argnums, (tuple, list)):
            raise ValueError(f"argnums must be an int or a tuple of ints, got {argnums!r}")
        self.argnums: tuple = (argnums,) if self._single else tuple(argnums)
        if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in self.argnums):
            raise ValueError(f"argnums must be non-negative ints, got {argnums!r}")
        if len(set(self.argnums)) != len(self.argnums):
            raise ValueError(f"argnums names an argument twice: {argnums!r}")
        self.ids = tuple(sorted(ids))
        if any(a in self.ids for a in self.argnums):
            raise ValueError("an argument cannot be both differentiated (argnums) and an id")
        if len(self.argnums) == 0:
            raise ValueError("argnums is empty")
        self.dtype = dtype
        self._with_value = with_value
        self._cache = {}  # signature -> list of Programs (variants), newest last
        self.traces = 0  # how many times fn was traced (re-traces after a failed guard included)

    # ---- signatures
    def _split(self, args):
        """(float values in order, id arguments in order, their lengths, the position of each
        differentiated argument among the floats)."""
        floats: list = []
        id_args: list = []
        id_shape: list[int] = []
        float_pos: dict[int, int] = {}  # argument index -> its position among the floats
        for i, a in enumerate(args):
            if i in self.ids:
                if _is_int(a):
                    id_shape.append(0)
                    id_args.append([int(a.__index__())])
                else:
                    vals = [int(v.__index__()) if _is_int(v) else _not_an_id(v) for v in a]
                    id_shape.append(len(vals))
                    id_args.append(vals)
                continue
            if isinstance(a, _core.Value):
                a = a.data
            elif not isinstance(a, (int, float)) or isinstance(a, bool):
                try:
                    a = float(a)
                except (TypeError, ValueError):
                    raise TypeError(f"argument {i} must be a float (or a Value); got {type(a).__name__}") from None
            float_pos[i] = len(floats)
            floats.append(float(a))
        missing = [a for a in self.argnums if a >= len(args)]
        if missing:
            raise TypeError(f"argnums {missing} out of range for {len(args)} arguments")
        # the grads come in argnums order (argnums=(1, 0) gives (d/dx1, d/dx0)), as in JAX
        return floats, id_args, tuple(id_shape), tuple(float_pos[a] for a in self.argnums)

    def _arena(self):
        return _core.current_arena(self.dtype) if self.dtype is not None else _core.current_arena()

    def _key(self, nargs, id_shape, arena):
        # id(arena) stays unique while cached: each program keeps its arena alive
        return (nargs, id_shape, id(arena), arena.dtype)

    def _trace(self, args, floats, id_args, id_shape, wrt_pos, arena):
        kinds = ["id" if i in self.ids else "x" for i in range(len(args))]

        def call(inputs, traced):
            it_x, it_i = iter(inputs), iter(traced)
            return self.fn(*[next(it_i) if k == "id" else next(it_x) for k in kinds])

        examples = [ids[0] if n == 0 else ids for ids, n in zip(id_args, id_shape)]
        with arena:
            prog = trace(self.fn, floats, examples, arena=arena, call=call, wrt_inputs=wrt_pos)
        self.traces += 1
        return prog

    def _programs(self, args, floats, id_args, id_shape, wrt_pos):
        arena = self._arena()
        key = self._key(len(args), id_shape, arena)
        progs = [p for p in self._cache.pop(key, []) if p.alive]
        if not progs:
            progs = [self._trace(args, floats, id_args, id_shape, wrt_pos, arena)]
            # a new signature: those whose programs died are dropped, then the least recently
            # used past MAX_SIGNATURES, so a loop over new arenas or id lengths stays bounded
            for k in [k for k, ps in self._cache.items() if not any(p.alive for p in ps)]:
                del self._cache[k]
            for k in list(self._cache)[:max(0, len(self._cache) + 1 - MAX_SIGNATURES)]:
                del self._cache[k]
        self._cache[key] = progs  # most recently used last
        return key, progs, arena

    # ---- one call (no numpy: plain buffers in and out)
    def __call__(self, *args):
        _check_grad_enabled()
        floats, id_args, id_shape, wrt_pos = self._split(args)
        if _core.is_anomaly_enabled():  # replays check nothing: the eager ops check every output
            return self._eager(args, floats, id_args, id_shape, wrt_pos)
        key, progs, arena = self._programs(args, floats, id_args, id_shape, wrt_pos)
        X = _row(array("d", floats))
        flat_ids = [v for a in id_args for v in a]
        ids = _row(array("q", flat_ids)) if flat_ids else None
        for prog in reversed(progs):
            result = self._call_one(prog, X, ids)
            if result is not None:
                return result
        prog = self._trace(args, floats, id_args, id_shape, wrt_pos, arena)
        progs.append(prog)
        del progs[:-MAX_VARIANTS]
        result = self._call_one(prog, X, ids)
        assert result is not None, "a fresh trace failed its own guards"
        return result

    def _eager(self, args, floats, id_args, id_shape, wrt_pos):
        """fn run eagerly on fresh leaves, then swept backward: the same value and grads as a
        replay, with every op of it (scalar and range, forward and backward) checked by
        detect_anomaly, which names the op that made the first non-finite number."""
        arena = self._arena()
        cp = arena.checkpoint()
        try:
            with arena:
                inputs = [_core.Value(x, dtype=arena.dtype) for x in floats]
                it_x, it_i = iter(inputs), iter(zip(id_args, id_shape))
                call = []
                for i in range(len(args)):
                    if i in self.ids:
                        ids, n = next(it_i)
                        call.append(ids[0] if n == 0 else ids)
                    else:
                        call.append(next(it_x))
                root = self.fn(*call)
                if isinstance(root, _core.Vector) and len(root.values()) == 1:
                    root = root.values()[0]
                if not isinstance(root, _core.Value):
                    raise TypeError(f"the function must return a scalar Value, got {type(root).__name__}")
                root.backward()
                value = root.data
                grads = [inputs[p].grad for p in wrt_pos]
        finally:
            arena.rewind(cp)
        return self._result(value, grads)

    def _call_one(self, prog, X, ids):
        """The result of one sample, or None when a guard came out differently."""
        value = array("d", [0.0])
        grads = array("d" if prog.dtype == _core.float64 else "f", [0.0]) * prog.num_wrt
        if prog._replay(X, ids, "rows", 1.0, value, _row(grads)):
            return None
        return self._result(value[0], grads)

    def _result(self, value, grads):
        floats = [float(x) for x in grads]
        g = floats[0] if self._single else tuple(floats)
        return (float(value), g) if self._with_value else g

    # ---- many samples in one native call
    def map(self, X=None, ids=None, reduce=None, out=None):
        """Runs every sample of X (N, k): column j is the j-th float argument (a 1-D X is one
        float argument); ids: one int array per id argument, (N,) for an int id, (N, L) for a
        list of L ids. Returns (values (N,), grads (N, len(argnums))), or with reduce="mean"
        (values (N,), the mean gradient (len(argnums),): each sample's sweep seeded with 1/N and
        the samples' grads added in float64 in ascending sample order, a fixed order; samples
        whose guard failed are recomputed and added after the others, in ascending order). grad()
        returns the grads only. Samples whose guard fails go through the other variants already
        traced, each over all of them in one replay; those no variant takes, through a call.

        out: arrays the results are written into (and returned), instead of new ones: for
        value_and_grad a pair (values, grads), for grad the grads array alone. values is float64
        (N,); grads is (N, len(argnums)) of the program's dtype (float64 or float32), or float64
        (len(argnums),) with reduce="mean"; each C-contiguous, writeable, and overlapping neither
        the other nor X or the ids. A bad array, or a NaN or inf in X, raises before anything is
        written.

        Programs made of scalar ops only (no vector/range ops) run their samples in blocks of
        SIMD lanes, each sample's numbers bitwise those of a call with that sample alone."""
        import numpy as np

        if reduce not in (None, "mean"):
            raise ValueError(f"reduce must be None or 'mean', got {reduce!r}")
        _check_grad_enabled()
        # the caller's own arrays, before any conversion: out= must not overlap them
        inputs = [a for a in (X, *(ids or ())) if isinstance(a, np.ndarray)]
        X, id_cols, N = _batch(X, ids)
        id_shape = tuple(0 if c.ndim == 1 else c.shape[1] for c in id_cols)
        if len(id_shape) != len(self.ids):
            raise ValueError(f"the function takes {len(self.ids)} id arguments, got {len(id_shape)}")
        nargs = X.shape[1] + len(id_cols)
        if N == 0:
            raise ValueError("map(): no samples")
        mode = "sum" if reduce == "mean" else "rows"
        arena = self._arena()
        if not any(a is X for a in inputs):  # converted: the copy the replay reads
            inputs.append(X)
        given = self._outputs(out, arena.dtype, N, mode, inputs) if out is not None else None
        if _core.is_anomaly_enabled():  # every sample eagerly, its ops checked (see __call__)
            return self._map_eager(X, id_cols, N, nargs, reduce, given)
        # A signature already traced (its programs alive) replays without looking at sample 0 as
        # arguments: the per-call Python work stays small next to a short program's replay.
        key = self._key(nargs, id_shape, arena)
        progs = self._cache.pop(key, None)
        if progs and all(p.alive for p in progs):
            self._cache[key] = progs  # most recently used last
        else:
            if progs:
                self._cache[key] = progs
            row_args = _sample_args(X, id_cols, 0, self.ids, nargs)
            floats, id_args, id_shape0, wrt_pos = self._split(row_args)
            key, progs, arena = self._programs(row_args, floats, id_args, id_shape0, wrt_pos)
        prog = progs[-1]
        native.on_map(prog, X, N)  # compiles it to native code once it pays (burtorch.native)
        # the ids as one (N, ids per sample) int64 array; None when fn takes none
        ids = np.ascontiguousarray(np.concatenate([c.reshape(N, -1) for c in id_cols], axis=1), dtype=np.int64) \
            if id_cols else None
        value, grads, failed = _run(prog, X, ids, mode, 1.0 / N if reduce else 1.0, given)
        if not failed:
            return (value, grads) if self._with_value else grads
        # Guards that came out differently: those samples go through the other variants already
        # traced (newest first, as a call tries them), each variant over all the samples still
        # failing in one lane replay, with seed 1 as a call replays them; what none of them
        # takes is recomputed by a call, which traces its branch. A sample's value and grads
        # are those of a call with that sample alone whichever variant takes it (a variant
        # whose guards all hold recorded that sample's very branch).
        todo = np.asarray(failed, dtype=np.intp)
        added = []  # with reduce: (samples, their grads) to add after the others
        for other in list(reversed(progs[:-1])):
            if not len(todo):
                break
            v, g, miss = _run(other, X[todo], None if ids is None else ids[todo], "rows", 1.0)
            took = np.ones(len(todo), dtype=bool)
            took[miss] = False
            value[todo[took]] = v[took]
            if reduce:
                added.append((todo[took], g[took]))
            else:
                grads[todo[took]] = g[took]
            todo = todo[~took]
        for s in todo.tolist():
            v, g = self._call_raw(_sample_args(X, id_cols, s, self.ids, nargs))
            value[s] = v
            if reduce:
                added.append((np.array([s]), np.array([g])))
            else:
                grads[s] = g
        if reduce:  # one sample after another in ascending order (accumulate adds sequentially)
            at = np.concatenate([a for a, _ in added])
            rows = np.concatenate([np.asarray(g, dtype=np.float64) for _, g in added])[np.argsort(at)]
            grads[...] = np.add.accumulate(np.vstack([grads[None], rows / N]), axis=0)[-1]
        return (value, grads) if self._with_value else grads

    def _outputs(self, out, dtype, N, mode, inputs=()):
        """The caller's (values, grads) for map(out=...), checked: (values, grads) arrays, neither
        overlapping the other nor any of `inputs` (X and ids: the replay reads them while it
        writes, and a failed guard's sample is read again afterwards)."""
        import numpy as np

        if self._with_value:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError("out must be a pair (values, grads) for value_and_grad(...).map")
            values, grads = out
        else:
            values, grads = None, out
        nw = len(self.argnums)
        f64 = np.dtype(np.float64)
        gdt = f64 if mode == "sum" or dtype == _core.float64 else np.dtype(np.float32)
        gshape = (nw,) if mode == "sum" else (N, nw)
        checked: list[Any] = []
        for name, a, dt, shape in (("values", values, f64, (N,)), ("grads", grads, gdt, gshape)):
            if a is None:
                checked.append(None)
                continue
            if not isinstance(a, np.ndarray):
                raise TypeError(f"out: {name} must be a numpy array, got {type(a).__name__}")
            if a.dtype is not dt and a.dtype != dt:  # numpy's native dtypes are one object each
                raise TypeError(f"out: {name} must have dtype {dt.name}, got {a.dtype}")
            if a.shape != shape:
                raise ValueError(f"out: {name} must have shape {shape}, got {a.shape}")
            flags = a.flags
            if not flags.c_contiguous:
                raise ValueError(f"out: {name} must be C-contiguous")
            if not flags.writeable:
                raise ValueError(f"out: {name} is read-only")
            checked.append(a)
        values, grads = checked
        # may_share_memory compares the arrays' address ranges (shares_memory would solve for an
        # exact overlap, which can cost far more than the replay of a short program)
        if values is not None and grads is not None and np.may_share_memory(values, grads):
            raise ValueError("out: values and grads overlap")
        for name, a in (("values", values), ("grads", grads)):
            if a is not None:
                for x in inputs:
                    if np.may_share_memory(a, x):
                        raise ValueError(f"out: {name} overlaps the inputs (X or ids)")
        return checked

    def _map_eager(self, X, id_cols, N, nargs, reduce, given=None):
        import numpy as np

        values = np.empty(N, dtype=np.float64)
        grads = np.zeros((N, len(self.argnums)), dtype=np.float64)
        for s in range(N):
            values[s], grads[s] = self._call_raw(_sample_args(X, id_cols, s, self.ids, nargs))
        if reduce:
            grads = grads.sum(axis=0) / N
        if given is not None:
            for mine, theirs in zip((values, grads), given):
                if theirs is not None:
                    theirs[...] = mine
            values = values if given[0] is None else given[0]
            grads = grads if given[1] is None else given[1]
        return (values, grads) if self._with_value else grads

    def _call_raw(self, args):
        saved = self._with_value, self._single
        self._with_value, self._single = True, False
        try:
            return self(*args)
        finally:
            self._with_value, self._single = saved

    def programs(self):
        """Every program traced so far (all signatures and variants)."""
        return [p for progs in self._cache.values() for p in progs]


def _check_grad_enabled():
    """Under no_grad() a first call could not trace (a trace records ops) while a later one would
    replay: one rule for both, the call computes gradients and is refused."""
    if not _core.is_grad_enabled():
        raise ValueError("a compiled gradient cannot run under no_grad(): it computes gradients")


def _row(buf):
    """A non-empty array.array as a (1, n) buffer: one sample for a replay."""
    return memoryview(buf).cast("B").cast(buf.typecode, (1, len(buf)))


def _not_an_id(v):
    raise TypeError(f"ids must be ints, got {type(v).__name__}")


def _batch(X, ids):
    import numpy as np

    if X is None:
        X = np.zeros((0, 0))
    X = np.asarray(X)
    if X.dtype.kind not in "fiu" or X.dtype == np.bool_:
        raise TypeError(f"X must hold real numbers, got dtype {X.dtype}")
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2:
        raise ValueError(f"X must be (N, k), got shape {X.shape}")
    X = np.ascontiguousarray(X, dtype=np.float64)
    id_cols = []
    for c in ids or ():
        c = np.asarray(c)
        if c.dtype.kind not in "iu":
            raise TypeError(f"ids must be integer arrays, got dtype {c.dtype}")
        if c.ndim not in (1, 2):
            raise ValueError(f"each id array must be (N,) or (N, L), got shape {c.shape}")
        id_cols.append(c.astype(np.int64))
    sizes = {len(c) for c in id_cols} | ({X.shape[0]} if X.shape[1] else set())
    if len(sizes) > 1:
        raise ValueError(f"X and ids have different numbers of samples: {sorted(sizes)}")
    N = sizes.pop() if sizes else 0
    if X.shape[1] == 0:
        X = np.zeros((N, 0))
    return X, id_cols, N


def _sample_args(X, id_cols, s, id_positions, nargs):
    """Sample s as positional arguments (floats and ids interleaved as declared)."""
    xs = iter(X[s].tolist())
    cols = iter(id_cols)
    args = []
    for i in range(nargs):
        if i in id_positions:
            c = next(cols)
            args.append(int(c[s]) if c.ndim == 1 else c[s].tolist())
        else:
            args.append(next(xs))
    return args


def _run(prog, X, ids, mode, seed, given=None):
    """One native replay: (values (N,), grads, failed sample indices). given: the caller's
    (values, grads) arrays, checked (either may be None: a new one)."""
    import numpy as np

    N = X.shape[0]  # X is (N, k), k possibly 0 (_batch)
    values, out = given if given is not None else (None, None)
    if values is None:
        values = np.empty(N, dtype=np.float64)
    if out is not None:
        if mode == "sum":
            out.fill(0.0)
    elif mode == "rows":
        out = np.empty((N, prog.num_wrt), dtype=np.float64 if prog.dtype == _core.float64 else np.float32)
    elif mode == "sum":
        out = np.zeros(prog.num_wrt, dtype=np.float64)
    failed = prog._replay(X, ids, mode, seed, values, out)
    return values, out, failed


def value_and_grad(fn, argnums=0, *, ids=(), dtype=None) -> Compiled:
    """fn(*args) -> scalar Value, compiled: returns (value, grad) as floats (a tuple of grads for
    a tuple of argnums). ids: positions of id arguments (ints or lists of ints used as lookups
    or targets). dtype: the dtype of the traced arena (default: the default dtype)."""
    return Compiled(fn, argnums, ids, dtype, with_value=True)


def grad(fn, argnums=0, *, ids=(), dtype=None) -> Compiled:
    """Like value_and_grad, returning only the gradient."""
    return Compiled(fn, argnums, ids, dtype, with_value=False)


def program_dot(prog, name: str = "program", rankdir: str = "LR") -> str:
    """DOT text of a program: one box per record (op and outputs), inputs and external nodes
    (parameters, captured Values) as ellipses, an edge per argument span's producer."""
    producer = []  # (first frame slot, last + 1, node name)
    lines = [f"digraph {name} {{", f"  rankdir={rankdir};", "  node [fontname=Helvetica];"]
    inputs = set(prog.input_slots)
    for i, slot in enumerate(prog.input_slots):
        lines.append(f'  in{i} [shape=ellipse, label="input {i}"];')
        producer.append((slot, slot + 1, f"in{i}"))
    if prog.num_external:
        lines.append(f'  ext [shape=ellipse, label="external ({prog.num_external} nodes)"];')
        producer.append((0, prog.num_external, "ext"))
    for k in range(len(prog)):
        op, out, nout, spans, _ = prog.record(k)
        shape = f" [{nout}]" if nout > 1 else ""
        root = ", style=bold" if out <= prog.root < out + nout else ""
        lines.append(f'  r{k} [shape=box, label="{op}{shape}"{root}];')
        seen = set()
        for first, count in spans:
            for lo, hi, node in producer:
                if lo < first + count and first < hi and node not in seen:
                    seen.add(node)
                    lines.append(f"  {node} -> r{k};")
        producer.append((out, out + nout, f"r{k}"))
    del inputs
    lines.append("}")
    return "\n".join(lines) + "\n"
