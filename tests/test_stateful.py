"""A hypothesis state machine drives burtorch against a pure-Python reference model (arena_model.py).

Each example creates arenas (the thread's default ones, an explicit float64 arena and explicit
arenas of both dtypes with capacities of a few nodes), then runs a random sequence of: leaves,
scalar ops, var-arity ops, range ops, views (slices, rows, columns, cat, hcat, embedding,
reshape), backward (seeds, wrt, one-element vectors), gradient and data writes, no_grad, labels,
checkpoints and rewinds (valid, discarded, of another arena, scopes, clear), entering and exiting
arenas, the default dtype, save/load of node ranges through burtorch.io, uses of stale handles,
and worker threads busy on their own arenas.

After every step: every live slot of every arena holds the model's value and grad (within the
rounding the dtype allows), every handle is alive exactly when the model says so and a dead one
raises StaleValueError, the node/record/args counts are the model's (so a failed op changed
nothing), and the thread's modes and current arenas are the model's.

Runs: see fuzz_profile.py (BURTORCH_FUZZ=long for a long random search).
"""
from __future__ import annotations

import math
import struct
import threading

import pytest
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import burtorch as bt
from arena_model import (
    KINKED,
    UNARY,
    ArenaModel,
    binary_out,
    binary_vjp,
    copy_vjp,
    imm_out,
    imm_vjp,
    linear_outs,
    linear_vjp,
    map_binary_vjp,
    map_imm_vjp,
    map_unary_outs,
    map_unary_vjp,
    range_args,
    reduce_out,
    reduce_vjp,
    softmax_outs,
    softmax_vjp,
    sum_range_out,
    sum_range_vjp,
    unary_out,
    unary_vjp,
)
from fuzz_profile import stateful_settings

bio = pytest.importorskip("burtorch.io")

F32, F64 = bt.float32, bt.float64
NUMBERS = st.one_of(st.floats(-4.0, 4.0, allow_nan=False, width=64),
                    st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-3]))
CONSTANTS = st.one_of(st.floats(-3.0, 3.0, allow_nan=False), st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]))
USABLE = 1e3  # operands stay below this in magnitude, so chains of ops stay inside both dtypes
STALE_ERRORS = (bt.StaleValueError,)


class ValueRef:
    """A Value handle the test holds, with the slot and allocation it must refer to."""

    __slots__ = ("obj", "arena", "idx", "serial")

    def __init__(self, obj, arena: ArenaModel, idx: int):
        self.obj, self.arena, self.idx = obj, arena, idx
        self.serial = arena.slot(idx).serial

    def alive(self) -> bool:
        return self.arena.alive(self.idx, self.serial)

    @property
    def slot(self):
        return self.arena.slot(self.idx)


class VectorRef:
    """A Vector the test holds: its element slots (row-major) and shape (rows == 0: 1-D)."""

    __slots__ = ("obj", "arena", "elems", "serials", "rows", "cols")

    def __init__(self, obj, arena: ArenaModel, elems: list, rows: int = 0, cols: int = 0):
        self.obj, self.arena, self.elems = obj, arena, list(elems)
        self.serials = [arena.slot(i).serial for i in self.elems]
        self.rows, self.cols = rows, (cols if rows else len(self.elems))

    def alive(self) -> bool:
        return all(self.arena.alive(i, s) for i, s in zip(self.elems, self.serials))

    @property
    def shape(self):
        return (self.rows, self.cols) if self.rows else (len(self.elems),)


class CheckpointRef:
    __slots__ = ("obj", "marks")

    def __init__(self, obj, marks: dict):
        self.obj, self.marks = obj, marks  # ArenaModel -> mark


class Blob:
    """Bytes saved by burtorch.io.dumps: the target, what they hold and the exact numbers."""

    __slots__ = ("data", "target", "ref", "what", "slots", "numbers")

    def __init__(self, data, target, ref, what, slots, numbers):
        self.data, self.target, self.ref, self.what, self.slots, self.numbers = data, target, ref, what, slots, numbers


def worker_job(report: dict, rounds: int) -> None:
    """Work a thread does on its own arenas while the main thread runs the machine."""
    try:
        mine = bt.current_arena(F64)
        report["arena"] = mine
        a, b = bt.Value(-4.0, dtype=F64), bt.Value(2.0, dtype=F64)
        cp = bt.checkpoint()
        for _ in range(rounds):
            c = a * b + b ** 3
            d = c + (b - a).relu()
            d.backward()
            bt.rewind(cp)
        # d = a b + b^3 + relu(b - a): d/da = b - 1 = 1 and d/db = a + 3 b^2 + 1 = 9 per round
        if (a.grad, b.grad) != (1.0 * rounds, 9.0 * rounds):
            report["error"] = f"grads {a.grad}, {b.grad} after {rounds} rounds"
            return
        with bt.no_grad():
            if not (a * b).is_leaf:
                report["error"] = "no_grad leaked across threads"
                return
        small = bt.Arena(F32, capacity=5)
        with small:
            for _ in range(5):
                bt.Value(1.0, dtype=F32)
            try:
                bt.Value(1.0, dtype=F32)
                report["error"] = "capacity not enforced in a thread"
                return
            except MemoryError:
                pass
        report["keep"] = bt.leaves([1.5, -2.5], dtype=F64)  # outlives the thread
    except BaseException as e:  # noqa: BLE001  (reported to the main thread)
        report["error"] = repr(e)


class ArenaMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.arenas: list[ArenaModel] = []
        self.values: list[ValueRef] = []
        self.vectors: list[VectorRef] = []
        self.checkpoints: list[CheckpointRef] = []
        self.blobs: list[Blob] = []
        self.stacks = {F32: [], F64: []}
        self.entered: list = []  # every entered arena, any dtype, in order: the last sets the default dtype
        self.no_grad_depth = 0
        self.labels_on = False
        self.default_dtype = F64
        self.workers: list = []
        self.started = False

    # ---------------------------------------------------------------- setup and teardown
    @initialize(caps=st.tuples(st.integers(1, 12), st.integers(1, 48)))
    def start(self, caps):
        assert bt.is_grad_enabled() and not bt.labels.enabled() and bt.get_default_dtype() == F64
        self.start_cp = bt.checkpoint()
        self.defaults = {F64: ArenaModel("default float64", bt.current_arena(F64), False),
                         F32: ArenaModel("default float32", bt.current_arena(F32), True)}
        c32, c64 = caps
        self.arenas = [self.defaults[F64], self.defaults[F32],
                       ArenaModel("Arena(float64)", bt.Arena(F64), False),
                       ArenaModel(f"Arena(float32, capacity={c32})", bt.Arena(F32, capacity=c32), True, c32),
                       ArenaModel(f"Arena(float64, capacity={c64})", bt.Arena(F64, capacity=c64), False, c64)]
        self.started = True

    def teardown(self):
        if not self.started:
            return
        for t, _ in self.workers:
            t.join(60)
        for d in (F32, F64):
            while self.stacks[d]:
                self.stacks[d].pop().handle.__exit__(None, None, None)
        for _ in range(self.no_grad_depth):
            bt.no_grad().__exit__(None, None, None)
        bt.labels(False)
        bt.set_default_dtype(F64)
        bt.rewind(self.start_cp)

    # ---------------------------------------------------------------- helpers
    @property
    def grad_on(self) -> bool:
        return self.no_grad_depth == 0

    def dtype_of(self, arena: ArenaModel):
        return F32 if arena.f32 else F64

    @property
    def effective_dtype(self):
        """The dtype of what is made with no dtype or arena: the innermost entered arena's, else
        set_default_dtype's."""
        return self.dtype_of(self.entered[-1]) if self.entered else self.default_dtype

    def current(self, dtype) -> ArenaModel:
        return self.stacks[dtype][-1] if self.stacks[dtype] else self.defaults[dtype]

    def usable(self, v: ValueRef) -> bool:
        s = v.slot
        return abs(s.value) <= USABLE and s.err <= 1e-3 * (1 + abs(s.value))

    def live_values(self, usable=True):
        return [v for v in self.values if v.alive() and (not usable or self.usable(v))]

    def live_vectors(self, usable=True, pred=None):
        out = []
        for v in self.vectors:
            if not v.alive():
                continue
            if usable and not all(abs(v.arena.slot(i).value) <= USABLE for i in v.elems):
                continue
            if pred is None or pred(v):
                out.append(v)
        return out

    def dead(self):
        return [v for v in self.values + self.vectors if not v.alive()]

    def add_value(self, obj, arena: ArenaModel, idx: int) -> ValueRef:
        assert type(obj) is bt.Value, obj
        assert obj.index == idx, f"the engine put a node at slot {obj.index}, the model expects {idx}"
        ref = ValueRef(obj, arena, idx)
        self.values.append(ref)
        return ref

    def add_vector(self, obj, arena: ArenaModel, elems, rows=0, cols=0) -> VectorRef:
        ref = VectorRef(obj, arena, elems, rows, cols)
        assert tuple(obj.shape) == ref.shape, (obj.shape, ref.shape)
        got = [i for first, n in obj.spans for i in range(first, first + n)]
        assert got == ref.elems, f"the view covers slots {got}, the model expects {ref.elems}"
        self.vectors.append(ref)
        return ref

    def pick(self, data, items, label):
        return items[data.draw(st.integers(0, len(items) - 1), label=label)]

    def creation_target(self, data):
        """Where a new leaf goes, and the keyword arguments that send it there."""
        how = data.draw(st.sampled_from(["arena", "dtype", "bare"]), label="target")
        if how == "arena":
            a = self.pick(data, self.arenas, "arena")
            return a, {"arena": a.handle}
        if how == "dtype":
            d = data.draw(st.sampled_from([F32, F64]), label="dtype")
            return self.current(d), {"dtype": d}
        return self.current(self.effective_dtype), {}

    def mix_error(self, a: ArenaModel, b: ArenaModel):
        if a is b:
            return None
        return TypeError if a.f32 != b.f32 else ValueError

    # ---------------------------------------------------------------- leaves and views of leaves
    @rule(data=st.data(), x=NUMBERS, labelled=st.booleans())
    def new_value(self, data, x, labelled):
        arena, kw = self.creation_target(data)
        label = data.draw(st.sampled_from(["w", "bias \u03b2", "\ud800bad"]), label="label") if labelled else None
        bad_label = label is not None and "\ud800" in label  # stored whether labels are on or off
        if bad_label:
            with pytest.raises(UnicodeEncodeError):
                bt.Value(x, label=label, **kw)
            return
        if not arena.fits(1):
            with pytest.raises(MemoryError):
                bt.Value(x, label=label, **kw)
            return
        obj = bt.Value(x, label=label, **kw)
        idx = arena.leaf(x)
        if label is not None:
            arena.slot(idx).label = label
        self.add_value(obj, arena, idx)

    @rule(data=st.data())
    def new_leaves(self, data):
        arena, kw = self.creation_target(data)
        form = data.draw(st.sampled_from(["list", "nested", "shape", "numpy"]), label="form")
        rows = data.draw(st.integers(1, 3), label="rows") if form != "list" else 0
        cols = data.draw(st.integers(1, 4), label="cols")
        n = (rows or 1) * cols
        nums = data.draw(st.lists(NUMBERS, min_size=n, max_size=n), label="numbers") if form != "shape" else [0.0] * n
        if form == "list":
            arg = {"data": nums}
        elif form == "nested":
            arg = {"data": [nums[r * cols:(r + 1) * cols] for r in range(rows)]}
        elif form == "shape":
            arg = {"shape": (rows, cols)}
        else:
            np = pytest.importorskip("numpy")
            arg = {"data": np.array(nums, dtype=np.float64).reshape(rows, cols)}
        if not arena.fits(n):
            with pytest.raises(MemoryError):
                bt.leaves(**arg, **kw)
            return
        obj = bt.leaves(**arg, **kw)
        first = arena.n_slots
        for x in nums:
            arena.leaf(x)
        self.add_vector(obj, arena, range(first, first + n), rows, cols)

    @precondition(lambda self: self.live_values())
    @rule(data=st.data())
    def vector_of_values(self, data):
        """bt.vector([...]): a view of existing Values; numbers in the list become constants."""
        first = self.pick(data, self.live_values(), "first")
        arena = first.arena
        k = data.draw(st.integers(1, 4), label="k")
        items = [first]
        for _ in range(k - 1):
            if data.draw(st.booleans(), label="number?"):
                items.append(data.draw(NUMBERS, label="number"))
            else:
                items.append(self.pick(data, self.live_values(), "item"))
        foreign = [v for v in items if isinstance(v, ValueRef) and v.arena is not arena]
        call = lambda: bt.vector([v.obj if isinstance(v, ValueRef) else v for v in items])  # noqa: E731
        if foreign:
            with pytest.raises((TypeError, ValueError)):
                call()
            return
        consts = [v for v in items if not isinstance(v, ValueRef)]
        if not arena.fits(len(consts)):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        elems = [v.idx if isinstance(v, ValueRef) else arena.leaf(v) for v in items]
        self.add_vector(obj, arena, elems)

    # ---------------------------------------------------------------- scalar ops
    @precondition(lambda self: self.live_values())
    @rule(data=st.data(), name=st.sampled_from(sorted(UNARY)), form=st.sampled_from(["method", "function", "operator"]))
    def unary(self, data, name, form):
        v = self.pick(data, self.live_values(), "x")
        x = v.slot
        if (name in KINKED and abs(x.value) <= 4 * x.err + v.arena.tiny) or (name == "exp" and abs(x.value) > 20):
            name = "tanh"
        if form == "operator" and name in ("neg", "abs"):
            call = (lambda: -v.obj) if name == "neg" else (lambda: abs(v.obj))
        elif form == "function":
            call = lambda: getattr(bt, name)(v.obj)  # noqa: E731
        else:
            call = lambda: getattr(v.obj, name)()  # noqa: E731
        A = v.arena
        if not A.fits(1, int(self.grad_on)):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        out = A.append([unary_out(A, name, x)], [v.idx], 0, unary_vjp(name, v.idx, A.n_slots), self.grad_on)
        self.add_value(obj, A, out)

    @precondition(lambda self: self.live_values())
    @rule(data=st.data(), name=st.sampled_from(["add", "sub", "mul"]), form=st.sampled_from(["operator", "function"]))
    def binary(self, data, name, form):
        a = self.pick(data, self.live_values(), "a")
        b = self.pick(data, self.live_values(), "b")
        op = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q}[name]
        call = (lambda: op(a.obj, b.obj)) if form == "operator" else (lambda: getattr(bt, name)(a.obj, b.obj))
        err = self.mix_error(a.arena, b.arena)
        if err:
            with pytest.raises(err):
                call()
            return
        A = a.arena
        if not A.fits(1, int(self.grad_on)):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        out = A.append([binary_out(A, name, a.slot, b.slot)], [a.idx, b.idx], 0, binary_vjp(name, a.idx, b.idx),
                       self.grad_on)
        self.add_value(obj, A, out)

    @precondition(lambda self: self.live_values())
    @rule(data=st.data(), c=CONSTANTS,
          form=st.sampled_from(["v+c", "c+v", "v-c", "c-v", "v*c", "c*v", "mul_by_constant",
                                "add(v,c)", "sub(c,v)", "mul(c,v)"]))
    def with_constant(self, data, c, form):
        v = self.pick(data, self.live_values(), "v")
        A = v.arena
        cr = A.round(c)
        imm = {"v+c": ("add_const", cr, lambda: v.obj + c), "c+v": ("add_const", cr, lambda: c + v.obj),
               "v-c": ("add_const", A.round(-c), lambda: v.obj - c), "c-v": ("rsub_const", cr, lambda: c - v.obj),
               "v*c": ("mul_const", cr, lambda: v.obj * c), "c*v": ("mul_const", cr, lambda: c * v.obj),
               "mul_by_constant": ("mul_const", cr, lambda: bt.mul_by_constant(v.obj, c))}
        if form in imm:
            name, k, call = imm[form]
            if not A.fits(1, int(self.grad_on)):
                with pytest.raises(MemoryError):
                    call()
                return
            obj = call()
            out = A.append([imm_out(A, name, v.slot, k)], [v.idx], 0, imm_vjp(name, v.idx, k), self.grad_on)
            self.add_value(obj, A, out)
            return
        # functions take numbers as constant leaves of the Value's arena
        name = form.split("(")[0]
        const_first = form in ("sub(c,v)", "mul(c,v)")
        call = (lambda: getattr(bt, name)(c, v.obj)) if const_first else (lambda: getattr(bt, name)(v.obj, c))
        if not A.fits(2, int(self.grad_on)):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        k = A.leaf(c)
        a, b = (k, v.idx) if const_first else (v.idx, k)
        out = A.append([binary_out(A, name, A.slot(a), A.slot(b))], [a, b], 0, binary_vjp(name, a, b), self.grad_on)
        self.add_value(obj, A, out)

    @rule(data=st.data(), name=st.sampled_from(["reduce_sum", "reduce_mean", "reduce_sum_of_squares",
                                                  "reduce_mean_and_mean_squares", "inner_product"]),
          n=st.integers(1, 5))
    def var_arity(self, data, name, n):
        live = self.live_values()
        lists = 2 if name == "inner_product" else 1
        items = []
        for _ in range(lists * n):
            if live and data.draw(st.integers(0, 3), label="value or number") > 0:
                items.append(self.pick(data, live, "item"))
            else:
                items.append(data.draw(NUMBERS, label="number"))
        refs = [v for v in items if isinstance(v, ValueRef)]
        A = refs[0].arena if refs else self.current(self.effective_dtype)
        args = [v.obj if isinstance(v, ValueRef) else v for v in items]
        container = data.draw(st.sampled_from([list, tuple]), label="container")
        if name == "inner_product":
            call = lambda: bt.inner_product(container(args[:n]), container(args[n:]))  # noqa: E731
        else:
            call = lambda: getattr(bt, name)(container(args))  # noqa: E731
        errors = {self.mix_error(A, v.arena) for v in refs} - {None}
        if errors:
            with pytest.raises(tuple(errors)):
                call()
            return
        consts = len(items) - len(refs)
        nout = 2 if name == "reduce_mean_and_mean_squares" else 1
        if not A.fits(consts + nout, int(self.grad_on), len(items) * int(self.grad_on)):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        slots = [v.idx if isinstance(v, ValueRef) else A.leaf(v) for v in items]
        if name == "inner_product":
            outs = reduce_out(A, name, [A.slot(i) for i in slots[:n]], [A.slot(i) for i in slots[n:]])
            vjp = reduce_vjp(name, slots[:n], slots[n:])
        else:
            outs = reduce_out(A, name, [A.slot(i) for i in slots])
            vjp = reduce_vjp(name, slots)
        out = A.append(outs, slots, len(slots), vjp, self.grad_on)
        if nout == 1:
            self.add_value(obj, A, out)
        else:
            assert isinstance(obj, tuple) and len(obj) == 2
            self.add_value(obj[0], A, out)
            self.add_value(obj[1], A, out + 1)

    # ---------------------------------------------------------------- range ops
    def range_op(self, A: ArenaModel, call, outs, args, nargs, vjp, consts=(), shape=None, scalar=False):
        """Runs a range op (after `consts` new constant leaves) and records its outputs."""
        g = int(self.grad_on)
        if not A.fits(len(consts) + len(outs), g, nargs * g):
            with pytest.raises(MemoryError):
                call()
            return
        obj = call()
        for c in consts:
            A.leaf(c)
        first = A.append(outs(), args, nargs, vjp(A.n_slots), self.grad_on)
        if scalar:
            self.add_value(obj, A, first)
        else:
            rows, cols = shape
            self.add_vector(obj, A, range(first, first + len(outs)), rows, cols)

    @precondition(lambda self: self.live_vectors())
    @rule(data=st.data(), name=st.sampled_from(sorted(UNARY)))
    def vector_map(self, data, name):
        v = self.pick(data, self.live_vectors(), "v")
        A = v.arena
        if name in KINKED and any(abs(A.slot(i).value) <= 4 * A.slot(i).err + A.tiny for i in v.elems):
            name = "tanh"
        if name == "exp" and any(abs(A.slot(i).value) > 20 for i in v.elems):
            name = "tanh"
        call = (lambda: -v.obj) if name == "neg" else (lambda: getattr(v.obj, name)())
        outs = list(v.elems)
        self.range_op(A, call, _Outs(lambda: map_unary_outs(A, name, outs), len(outs)), outs, range_args(outs),
                      lambda first: map_unary_vjp(name, outs, first), shape=(v.rows, v.cols))

    @precondition(lambda self: self.live_vectors())
    @rule(data=st.data(), c=CONSTANTS, form=st.sampled_from(["v+c", "c+v", "v-c", "c-v", "v*c", "c*v"]))
    def vector_constant(self, data, c, form):
        v = self.pick(data, self.live_vectors(), "v")
        A = v.arena
        name, k, call = {"v+c": ("add_const", c, lambda: v.obj + c), "c+v": ("add_const", c, lambda: c + v.obj),
                         "v-c": ("add_const", -c, lambda: v.obj - c), "c-v": ("rsub_const", c, lambda: c - v.obj),
                         "v*c": ("mul_const", c, lambda: v.obj * c), "c*v": ("mul_const", c, lambda: c * v.obj)}[form]
        k = A.round(k)
        xs = list(v.elems)
        self.range_op(A, call, _Outs(lambda: [imm_out(A, name, A.slot(i), k) for i in xs], len(xs)), xs,
                      range_args(xs), lambda first: map_imm_vjp(name, xs, k), shape=(v.rows, v.cols))

    @precondition(lambda self: self.live_vectors())
    @rule(data=st.data(), name=st.sampled_from(["add", "sub", "mul"]), other=st.sampled_from(["vector", "list"]),
          reflected=st.booleans())
    def vector_binary(self, data, name, other, reflected):
        v = self.pick(data, self.live_vectors(), "v")
        A = v.arena
        op = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q}[name]
        if other == "list":
            nums = data.draw(st.lists(NUMBERS, min_size=len(v.elems), max_size=len(v.elems)), label="numbers")
            call = (lambda: op(nums, v.obj)) if reflected else (lambda: op(v.obj, nums))
            first_const = A.n_slots
            consts = list(range(first_const, first_const + len(nums)))
            a, b = (consts, list(v.elems)) if reflected else (list(v.elems), consts)

            def outs():
                return [binary_out(A, name, A.slot(i), A.slot(j)) for i, j in zip(a, b)]

            # the result takes the left operand's shape: a plain list on the left makes it 1-D
            self.range_op(A, call, _Outs(outs, len(a)), a + b, range_args(a, b),
                          lambda first: map_binary_vjp(name, a, b), consts=nums,
                          shape=(0, 0) if reflected else (v.rows, v.cols))
            return
        w = self.pick(data, self.live_vectors(), "w")
        call = lambda: op(v.obj, w.obj)  # noqa: E731
        err = self.mix_error(A, w.arena)
        if err or len(v.elems) != len(w.elems):
            with pytest.raises(err or ValueError):
                call()
            return
        a, b = list(v.elems), list(w.elems)
        self.range_op(A, call, _Outs(lambda: [binary_out(A, name, A.slot(i), A.slot(j)) for i, j in zip(a, b)],
                                     len(a)),
                      a + b, range_args(a, b), lambda first: map_binary_vjp(name, a, b), shape=(v.rows, v.cols))

    @precondition(lambda self: self.live_vectors())
    @rule(data=st.data(), form=st.sampled_from(["vsum", "vmean", "sum", "mean", "copy", "softmax"]))
    def vector_reduce(self, data, form):
        v = self.pick(data, self.live_vectors(), "v")
        A = v.arena
        xs = list(v.elems)
        if form in ("vsum", "vmean", "sum", "mean"):
            scale = 1.0 / len(xs) if form in ("vmean", "mean") else 1.0
            call = (lambda: getattr(bt, form)(v.obj)) if form.startswith("v") else (lambda: getattr(v.obj, form)())
            self.range_op(A, call, _Outs(lambda: [sum_range_out(A, xs, scale)], 1), xs, range_args(xs),
                          lambda first: sum_range_vjp(xs, scale), scalar=True)
        elif form == "copy":
            copies = _Outs(lambda: [(A.slot(i).value, A.slot(i).err) for i in xs], len(xs))
            self.range_op(A, lambda: v.obj.copy(), copies, xs, range_args(xs), lambda first: copy_vjp(xs),
                          shape=(v.rows, v.cols))
        else:
            rows, n = (v.rows or 1), v.cols
            self.range_op(A, lambda: bt.softmax(v.obj), _Outs(lambda: softmax_outs(A, xs, rows, n), len(xs)), xs,
                          range_args(xs, tail=2), lambda first: softmax_vjp(xs, rows, n, first),
                          shape=(v.rows, v.cols))

    @precondition(lambda self: self.live_vectors())
    @rule(data=st.data(), with_list=st.booleans())
    def dot(self, data, with_list):
        v = self.pick(data, self.live_vectors(), "v")
        A = v.arena
        xs = list(v.elems)
        if with_list:
            nums = data.draw(st.lists(NUMBERS, min_size=len(xs), max_size=len(xs)), label="numbers")
            ws = list(range(A.n_slots, A.n_slots + len(xs)))
            dots = _Outs(lambda: reduce_out(A, "inner_product", [A.slot(i) for i in xs], [A.slot(i) for i in ws]), 1)
            self.range_op(A, lambda: bt.dot(v.obj, nums), dots, xs + ws, range_args(xs, ws),
                          lambda first: reduce_vjp("inner_product", xs, ws), consts=nums, scalar=True)
            return
        w = self.pick(data, self.live_vectors(), "w")
        call = lambda: v.obj.dot(w.obj)  # noqa: E731
        err = self.mix_error(A, w.arena)
        if err or len(xs) != len(w.elems):
            with pytest.raises(err or ValueError):
                call()
            return
        ws = list(w.elems)
        self.range_op(A, call, _Outs(lambda: reduce_out(A, "inner_product", [A.slot(i) for i in xs],
                                                         [A.slot(i) for i in ws]), 1),
                      xs + ws, range_args(xs, ws), lambda first: reduce_vjp("inner_product", xs, ws), scalar=True)

    @precondition(lambda self: self.live_vectors(pred=lambda v: bool(v.rows)))
    @rule(data=st.data(), bias=st.booleans())
    def linear(self, data, bias):
        """linear(x, W, b) with W a contiguous matrix of the test's leaves."""
        W = self.pick(data, self.live_vectors(pred=lambda v: bool(v.rows)), "W")
        A = W.arena
        contiguous = W.elems == list(range(W.elems[0], W.elems[0] + len(W.elems)))
        nin, nout = W.cols, W.rows
        xs_candidates = self.live_vectors(pred=lambda v: v.arena is A and v.cols == nin)
        assume(xs_candidates)
        x = self.pick(data, xs_candidates, "x")
        bs = self.live_vectors(pred=lambda v: v.arena is A and not v.rows and len(v.elems) == nout
                               and v.elems == list(range(v.elems[0], v.elems[0] + nout)))
        b = self.pick(data, bs, "b") if bias and bs else None
        call = lambda: bt.linear(x.obj, W.obj, b.obj if b else None)  # noqa: E731
        if not contiguous:
            with pytest.raises(ValueError):
                call()
            return
        rows = x.rows or 1
        xs, ws, bl = list(x.elems), list(W.elems), list(b.elems) if b else []
        ops = (xs, ws, bl) if b else (xs, ws)
        self.range_op(A, call, _Outs(lambda: linear_outs(A, xs, ws, bl, rows, nin, nout), rows * nout),
                      xs + ws + bl, range_args(*ops, tail=4), lambda first: linear_vjp(xs, ws, bl, rows, nin, nout),
                      shape=(x.rows, nout))

    # ---------------------------------------------------------------- views (no records)
    @precondition(lambda self: self.live_vectors(usable=False))
    @rule(data=st.data(), form=st.sampled_from(["index", "slice", "columns", "reshape", "flatten", "values"]))
    def view(self, data, form):
        v = self.pick(data, self.live_vectors(usable=False), "v")
        A = v.arena
        length = v.rows or len(v.elems)
        if form == "index":
            i = data.draw(st.integers(-length, length - 1), label="i")
            obj = v.obj[i]
            i %= length
            if v.rows:
                self.add_vector(obj, A, v.elems[i * v.cols:(i + 1) * v.cols])
            else:
                self.add_value(obj, A, v.elems[i])
        elif form == "slice":
            a = data.draw(st.integers(0, length - 1), label="a")
            b = data.draw(st.integers(a + 1, length), label="b")
            obj = v.obj[a:b]
            if v.rows:
                self.add_vector(obj, A, v.elems[a * v.cols:b * v.cols], b - a, v.cols)
            else:
                self.add_vector(obj, A, v.elems[a:b])
        elif form == "columns":
            if not v.rows:
                with pytest.raises(ValueError):
                    v.obj.columns(0, 1)
                return
            a = data.draw(st.integers(0, v.cols - 1), label="a")
            b = data.draw(st.integers(a + 1, v.cols), label="b")
            elems = [v.elems[r * v.cols + c] for r in range(v.rows) for c in range(a, b)]
            self.add_vector(v.obj.columns(a, b), A, elems, v.rows, b - a)
        elif form == "reshape":
            n = len(v.elems)
            rows = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]), label="rows")
            self.add_vector(v.obj.reshape(rows, n // rows), A, v.elems, rows, n // rows)
        elif form == "flatten":
            self.add_vector(v.obj.flatten(), A, v.elems)
        else:
            for obj, i in zip(v.obj.values(), v.elems):
                self.add_value(obj, A, i)

    @rule(data=st.data())
    def handle_by_index(self, data):
        """arena.value(i): a new handle to whatever node slot i holds now (out of range: IndexError)."""
        A = self.pick(data, self.arenas, "arena")
        i = data.draw(st.integers(A.base_slots, A.n_slots + 1), label="index")
        if i >= A.n_slots:
            with pytest.raises(IndexError):
                A.handle.value(i)
            return
        self.add_value(A.handle.value(i), A, i)

    @precondition(lambda self: self.live_vectors(usable=False))
    @rule(data=st.data(), horizontal=st.booleans())
    def concatenate(self, data, horizontal):
        parts = [self.pick(data, self.live_vectors(usable=False), "part") for _ in range(data.draw(st.integers(1, 3)))]
        A = parts[0].arena
        errors = {self.mix_error(A, p.arena) for p in parts} - {None}
        if horizontal:
            call = lambda: bt.hcat([p.obj for p in parts])  # noqa: E731
            if not errors and not all(p.rows and p.rows == parts[0].rows for p in parts):
                errors = {ValueError}
        else:
            call = lambda: bt.cat([p.obj for p in parts])  # noqa: E731
        if errors:
            with pytest.raises(tuple(errors)):
                call()
            return
        obj = call()
        if horizontal:
            rows = parts[0].rows
            elems = [i for r in range(rows) for p in parts for i in p.elems[r * p.cols:(r + 1) * p.cols]]
            self.add_vector(obj, A, elems, rows, sum(p.cols for p in parts))
        else:
            self.add_vector(obj, A, [i for p in parts for i in p.elems])

    @precondition(lambda self: self.live_vectors(usable=False, pred=lambda v: bool(v.rows)))
    @rule(data=st.data())
    def embedding(self, data):
        table = self.pick(data, self.live_vectors(usable=False, pred=lambda v: bool(v.rows)), "table")
        ids = data.draw(st.lists(st.integers(-1, table.rows), min_size=1, max_size=4), label="ids")
        as_int = len(ids) == 1 and data.draw(st.booleans(), label="int")
        arg = ids[0] if as_int else ids
        if any(i < 0 or i >= table.rows for i in ids):
            with pytest.raises(IndexError):
                bt.embedding(table.obj, arg)
            return
        elems = [table.elems[i * table.cols + c] for i in ids for c in range(table.cols)]
        self.add_vector(bt.embedding(table.obj, arg), table.arena, elems, len(ids), table.cols)

    # ---------------------------------------------------------------- backward and writes
    @precondition(lambda self: self.live_values(usable=False) or self.live_vectors(pred=lambda v: len(v.elems) == 1))
    @rule(data=st.data(), seed=st.one_of(st.none(), CONSTANTS, st.sampled_from([math.inf, math.nan])),
          use_wrt=st.sampled_from(["none", "some", "empty", "foreign", "stale"]))
    def backward(self, data, seed, use_wrt):
        roots = self.live_values(usable=False) + self.live_vectors(pred=lambda v: len(v.elems) == 1)
        root = self.pick(data, roots, "root")
        A = root.arena
        root_idx = root.idx if isinstance(root, ValueRef) else root.elems[0]
        wrt = None
        error = None
        if use_wrt == "some":
            mine = [v for v in self.live_values(usable=False) if v.arena is A]
            wrt = [self.pick(data, mine, "wrt") for _ in range(data.draw(st.integers(1, 3)))] if mine else None
        elif use_wrt == "empty":
            wrt, error = [], ValueError
        elif use_wrt == "foreign":
            others = [v for v in self.live_values(usable=False) if v.arena is not A]
            if others:
                wrt, error = [self.pick(data, others, "wrt")], ValueError
        elif use_wrt == "stale":
            dead = [v for v in self.dead() if isinstance(v, ValueRef) and v.arena is A]
            if dead:
                wrt, error = [self.pick(data, dead, "wrt")], STALE_ERRORS
        if seed is not None and not math.isfinite(seed):
            error = ValueError  # the seed is checked first
        args = {} if seed is None else {"seed": seed}
        if wrt is not None:
            args["wrt"] = [w.obj for w in wrt]
        call = lambda: root.obj.backward(**args)  # noqa: E731
        if error:
            with pytest.raises(error):
                call()
            return
        call()
        stop = min(w.idx for w in wrt) if wrt else 0
        A.backward(root_idx, 1.0 if seed is None else seed, stop)

    @precondition(lambda self: self.live_values(usable=False) or self.live_vectors(usable=False))
    @rule(data=st.data(), x=CONSTANTS,
          form=st.sampled_from(["grad=", "zero_grad", "data=", "set_grad", "set_data", "vzero_grad", "scale_grad"]))
    def write(self, data, x, form):
        if form in ("grad=", "zero_grad", "data="):
            vals = self.live_values(usable=False)
            if not vals:
                return
            v = self.pick(data, vals, "v")
            A = v.arena
            if form == "grad=":
                v.obj.grad = x
                A.set_grad(v.idx, x)
            elif form == "zero_grad":
                v.obj.zero_grad()
                A.set_grad(v.idx, 0.0)
            else:
                v.obj.data = x
                s = v.slot
                s.value, s.err = A.round(x), 0.0
            return
        vecs = self.live_vectors(usable=False)
        if not vecs:
            return
        v = self.pick(data, vecs, "v")
        A = v.arena
        if form in ("set_grad", "set_data"):
            nums = data.draw(st.lists(CONSTANTS, min_size=len(v.elems), max_size=len(v.elems)), label="numbers")
            getattr(v.obj, form)(nums)
            for i, n in zip(v.elems, nums):  # a slot viewed twice takes the later number
                if form == "set_grad":
                    A.set_grad(i, n)
                else:
                    A.slot(i).value, A.slot(i).err = A.round(n), 0.0
        elif form == "vzero_grad":
            v.obj.zero_grad()
            for i in v.elems:
                A.set_grad(i, 0.0)
        else:
            c = data.draw(st.sampled_from([0.0, 2.0, -0.5, math.inf]), label="factor")
            v.obj.scale_grad(c)
            for i in v.elems:  # a slot viewed twice is scaled twice, as the engine does
                if math.isinf(c) and A.slot(i).grad == 0.0:
                    A.slot(i).grad, A.slot(i).gtol = math.nan, 0.0
                else:
                    A.scale_grad(i, c)

    # ---------------------------------------------------------------- checkpoints and rewinds
    @rule(data=st.data(), form=st.sampled_from(["bt.checkpoint()", "arena.checkpoint()", "bt.checkpoint(arena)"]))
    def take_checkpoint(self, data, form):
        if form == "bt.checkpoint()":
            obj = bt.checkpoint()
            marks = {self.current(F32): None, self.current(F64): None}
        else:
            A = self.pick(data, self.arenas, "arena")
            obj = A.handle.checkpoint() if form == "arena.checkpoint()" else bt.checkpoint(A.handle)
            marks = {A: None}
        for A in marks:
            marks[A] = A.mark()
        self.checkpoints.append(CheckpointRef(obj, marks))

    @precondition(lambda self: self.checkpoints)
    @rule(data=st.data(), form=st.sampled_from(["bt.rewind", "arena.rewind"]))
    def rewind(self, data, form):
        cp = self.pick(data, self.checkpoints, "checkpoint")
        if form == "bt.rewind":
            marks, call = cp.marks, lambda: bt.rewind(cp.obj)
        else:
            A = self.pick(data, self.arenas, "arena")
            call = lambda: A.handle.rewind(cp.obj)  # noqa: E731
            if A not in cp.marks:
                with pytest.raises(ValueError, match="another arena"):
                    call()
                return
            marks = {A: cp.marks[A]}
        if not all(A.mark_valid(m) for A, m in marks.items()):
            with pytest.raises(ValueError, match="discarded"):
                call()
            return
        call()
        for A, m in marks.items():
            A.rewind(m)

    @precondition(lambda self: self.live_values())
    @rule(data=st.data(), whole=st.booleans())
    def scope(self, data, whole):
        """Work inside `with bt.scope():` is discarded at its end; handles made inside go stale."""
        v = self.pick(data, self.live_values(), "v")
        A = v.arena
        if whole:
            if A is not self.current(self.dtype_of(A)):
                return
            ctx, scoped = bt.scope(), [self.current(F32), self.current(F64)]
        else:
            ctx, scoped = bt.scope(A.handle), [A]
        marks = {S: S.mark() for S in scoped}
        with ctx:
            if A.fits(1, int(self.grad_on)):
                inner = v.obj.tanh()
                out = A.append([unary_out(A, "tanh", v.slot)], [v.idx], 0, unary_vjp("tanh", v.idx, A.n_slots),
                               self.grad_on)
                ref = self.add_value(inner, A, out)
                assert A.close(inner.data, A.slot(out).value, A.slot(out).err)
                if self.grad_on:
                    inner.backward()
                    A.backward(ref.idx, 1.0, 0)
        for S, m in marks.items():
            S.rewind(m)

    @precondition(lambda self: any(A.base_slots == 0 and A.n_slots >= 6 for A in self.arenas))
    @rule(data=st.data())
    def clear(self, data):
        mine = [A for A in self.arenas if A.base_slots == 0 and A.n_slots >= 6]
        A = self.pick(data, mine, "arena")
        A.handle.clear()
        A.clear()

    # ---------------------------------------------------------------- thread state
    @precondition(lambda self: len(self.stacks[F32]) + len(self.stacks[F64]) < 4)
    @rule(data=st.data())
    def enter_arena(self, data):
        mine = [A for A in self.arenas if A not in self.defaults.values()]
        A = self.pick(data, mine, "arena")
        A.handle.__enter__()
        self.stacks[self.dtype_of(A)].append(A)
        self.entered.append(A)

    @precondition(lambda self: self.stacks[F32] or self.stacks[F64])
    @rule(data=st.data(), which=st.sampled_from(["top", "any", "not entered"]))
    def exit_arena(self, data, which):
        if which == "not entered":
            entered = self.stacks[F32] + self.stacks[F64]
            idle = [A for A in self.arenas if A not in entered and A not in self.defaults.values()]
            if idle:
                with pytest.raises(RuntimeError, match="not entered"):
                    self.pick(data, idle, "arena").handle.__exit__(None, None, None)
            return
        stack = self.stacks[F32] if self.stacks[F32] and (not self.stacks[F64] or data.draw(st.booleans())) \
            else self.stacks[F64]
        k = len(stack) - 1 if which == "top" else data.draw(st.integers(0, len(stack) - 1), label="which")
        A = stack[k]
        top = max(i for i, B in enumerate(stack) if B is A)  # the innermost entry of A is the one exited
        del self.entered[max(i for i, B in enumerate(self.entered) if B is A)]  # exited either way
        if top == len(stack) - 1:
            A.handle.__exit__(None, None, None)
            stack.pop()
            return
        with pytest.raises(RuntimeError, match="order"):  # the stack stays consistent: A is no longer entered
            A.handle.__exit__(None, None, None)
        del stack[top]

    @rule(mode=st.sampled_from(["no_grad", "labels", "default dtype"]), on=st.booleans())
    def switch_mode(self, mode, on):
        """no_grad nests (per thread); labels and the default dtype are switched process-wide."""
        if mode == "no_grad":
            if on and self.no_grad_depth < 3:
                bt.no_grad().__enter__()
                self.no_grad_depth += 1
            elif not on and self.no_grad_depth:
                bt.no_grad().__exit__(None, None, None)
                self.no_grad_depth -= 1
        elif mode == "labels":
            bt.labels(on)
            self.labels_on = on
        else:
            self.default_dtype = F32 if on else F64
            bt.set_default_dtype(self.default_dtype)

    @precondition(lambda self: self.live_values(usable=False))
    @rule(data=st.data(), label=st.sampled_from(["w1", "", None, "\u00e9t\u00e9", "\ud800", "nul\x00byte"]))
    def set_label(self, data, label):
        v = self.pick(data, self.live_values(usable=False), "v")
        if label is not None and "\ud800" in label:
            with pytest.raises(UnicodeEncodeError):
                v.obj.label = label
            return
        v.obj.label = label  # stored whether labels are on or off
        v.slot.label = label or None

    # ---------------------------------------------------------------- save and load (burtorch.io)
    @precondition(lambda self: self.live_values(usable=False) or self.live_vectors(usable=False))
    @rule(data=st.data(), kind=st.sampled_from(["vector", "values", "range"]),
          what=st.sampled_from(["values", "grads", "both"]))
    def save(self, data, kind, what):
        if kind == "vector":
            vecs = self.live_vectors(usable=False)
            if not vecs:
                return
            ref = self.pick(data, vecs, "vector")
            target, slots, f32 = ref.obj, [(ref.arena, i) for i in ref.elems], ref.arena.f32
        elif kind == "values":  # Values of one dtype, from any arenas
            vals = self.live_values(usable=False)
            if not vals:
                return
            first = self.pick(data, vals, "value")
            ref = [first] + [self.pick(data, vals, "value") for _ in range(data.draw(st.integers(0, 3)))]
            ref = [v for v in ref if v.arena.f32 == first.arena.f32]
            target, slots, f32 = [v.obj for v in ref], [(v.arena, v.idx) for v in ref], first.arena.f32
        else:
            grown = [B for B in self.arenas if B.n_slots > B.base_slots]
            if not grown:
                return
            A = self.pick(data, grown, "arena")
            first = data.draw(st.integers(A.base_slots, A.n_slots - 1), label="first")
            last = data.draw(st.integers(first + 1, A.n_slots), label="last")
            target, ref, f32 = (A.handle, first, last), (A, first, last), A.f32
            slots = [(A, i) for i in range(first, last)]
        blob = bio.dumps(target, what)
        size = 4 if f32 else 8
        payload = blob[-len(slots) * size * (2 if what == "both" else 1):]
        numbers = struct.unpack(("f" if f32 else "d") * (len(payload) // size), payload)
        for k, (A, i) in enumerate(slots):  # what was saved is what the model holds
            s = A.slot(i)
            if what in ("values", "both"):
                assert A.close(numbers[k], s.value, s.err), (A.name, i, numbers[k], s.value)
            if what in ("grads", "both"):
                g = numbers[k + (len(slots) if what == "both" else 0)]
                assert A.close(g, s.grad, s.gtol), (A.name, i, g, s.grad)
        self.blobs.append(Blob(blob, target, ref, what, slots, numbers))

    @precondition(lambda self: self.blobs)
    @rule(data=st.data(), damage=st.sampled_from(["none", "none", "flip", "truncate"]))
    def load(self, data, damage):
        blob = self.pick(data, self.blobs, "blob")
        raw = bytearray(blob.data)
        if damage == "flip":
            k = data.draw(st.integers(0, len(raw) - 1), label="byte")
            raw[k] ^= data.draw(st.integers(1, 255), label="mask")
        elif damage == "truncate":
            raw = raw[:data.draw(st.integers(0, len(raw) - 1), label="length")]
        call = lambda: bio.loads(bytes(raw), blob.target, blob.what)  # noqa: E731
        if isinstance(blob.ref, tuple):
            A, first, last = blob.ref
            target_error = IndexError if last > A.n_slots else None
        elif isinstance(blob.ref, VectorRef):
            # a stale view whose spans now run past the arena's end reads as a bad range
            target_error = None if blob.ref.alive() else (bt.StaleValueError, IndexError)
        else:
            target_error = None if all(v.alive() for v in blob.ref) else bt.StaleValueError
        if damage != "none":
            with pytest.raises((bio.FormatError,) + (target_error if isinstance(target_error, tuple) else
                                                     (target_error,) if target_error else ())):
                call()
            return
        if target_error:
            with pytest.raises(target_error):
                call()
            return
        call()
        n = len(blob.slots)
        for k, (A, i) in enumerate(blob.slots):  # a slot listed twice takes the later number
            s = A.slot(i)
            if blob.what in ("values", "both"):
                s.value, s.err = blob.numbers[k], 0.0
            if blob.what in ("grads", "both"):
                s.grad, s.gtol = blob.numbers[k + (n if blob.what == "both" else 0)], 0.0

    # ---------------------------------------------------------------- stale handles and threads
    @precondition(lambda self: self.dead())
    @rule(data=st.data(), use=st.sampled_from(["data", "grad", "set_data", "set_grad", "op", "backward", "label",
                                                "with_live", "reduce", "vector_op", "slice", "numpy"]))
    def use_stale(self, data, use):
        ref = self.pick(data, self.dead(), "dead")
        o = ref.obj
        live = [v.obj for v in self.live_values(usable=False) if v.arena is ref.arena]
        uses = {
            "data": lambda: o.data, "grad": lambda: o.grad,
            "set_data": lambda: setattr(o, "data", 1.0) if isinstance(ref, ValueRef) else o.set_data(
                [1.0] * len(ref.elems)),
            "set_grad": lambda: setattr(o, "grad", 1.0) if isinstance(ref, ValueRef) else o.set_grad(
                [1.0] * len(ref.elems)),
            "op": lambda: o.tanh(), "backward": lambda: o.backward() if isinstance(ref, ValueRef) else bt.vsum(o),
            "label": lambda: o.label if isinstance(ref, ValueRef) else o.zero_grad(),
            "with_live": lambda: o + (live[0] if live and isinstance(ref, ValueRef) else 1.0),
            "reduce": lambda: bt.reduce_sum([o] + live[:1]) if isinstance(ref, ValueRef) else bt.cat([o]),
            "vector_op": lambda: o * 2.0, "slice": lambda: o.item() if isinstance(ref, ValueRef) else o[0:1],
            "numpy": lambda: o.detach() if isinstance(ref, ValueRef) else o.numpy(),
        }
        if use == "numpy" and not isinstance(ref, ValueRef):
            pytest.importorskip("numpy")
        with pytest.raises(bt.StaleValueError):
            uses[use]()

    @precondition(lambda self: len(self.workers) < 2)
    @rule(rounds=st.integers(1, 300))
    def start_worker(self, rounds):
        report: dict = {}
        t = threading.Thread(target=worker_job, args=(report, rounds))
        t.start()
        self.workers.append((t, report))

    @precondition(lambda self: self.workers)
    @rule()
    def join_worker(self):
        t, report = self.workers.pop(0)
        t.join(60)
        assert not t.is_alive(), "a worker thread hangs"
        assert "error" not in report, report["error"]
        assert report["arena"] is not bt.current_arena(F64) and report["arena"] is not self.defaults[F64].handle
        keep = report["keep"]  # its thread (and that thread's default arena entry) is gone
        assert keep.data == [1.5, -2.5]
        y = bt.vsum(keep * keep)
        y.backward()
        assert y.data == 8.5 and keep.grad == ([3.0, -5.0] if self.grad_on else [0.0, 0.0])

    # ---------------------------------------------------------------- invariants
    @invariant()
    def modes_and_current_arenas(self):
        if not self.started:
            return
        assert bt.is_grad_enabled() == self.grad_on
        assert bt.labels.enabled() == self.labels_on
        assert bt.get_default_dtype() == self.effective_dtype
        for d in (F32, F64):
            assert bt.current_arena(d) is self.current(d).handle

    @invariant()
    def arenas_hold_the_model(self):
        for A in self.arenas:
            h = A.handle
            assert (h.num_nodes, h.num_records, h.num_args) == (A.n_slots, A.n_records, A.nargs), \
                f"{A.name}: engine has {(h.num_nodes, h.num_records, h.num_args)} nodes/records/args, model {A}"
            n = A.n_slots - A.base_slots
            if not n:
                continue
            fmt = ("f" if A.f32 else "d") * n
            values = struct.unpack(fmt, h.read_bytes(A.base_slots, A.n_slots, "values"))
            grads = struct.unpack(fmt, h.read_bytes(A.base_slots, A.n_slots, "grads"))
            for k, s in enumerate(A.slots):
                i = A.base_slots + k
                assert A.close(values[k], s.value, s.err), \
                    f"{A.name} slot {i}: value {values[k]!r}, model {s.value!r} +- {s.err:.3g}"
                assert A.close(grads[k], s.grad, s.gtol), \
                    f"{A.name} slot {i}: grad {grads[k]!r}, model {s.grad!r} +- {s.gtol:.3g}"

    @invariant()
    def handles_are_alive_exactly_when_the_model_says(self):
        for v in self.values:
            alive = v.alive()
            assert v.obj.alive == alive, f"Value at slot {v.idx} of {v.arena.name}: alive={v.obj.alive}, model {alive}"
            if alive:
                s = v.slot
                assert v.arena.close(v.obj.data, s.value, s.err)
                assert v.obj.is_leaf == (s.record is None)
                assert v.obj.label == s.label, (v.obj.label, s.label)
            else:
                with pytest.raises(bt.StaleValueError):
                    v.obj.data
        for vec in self.vectors:
            assert vec.obj.alive == vec.alive()
            if not vec.alive():
                with pytest.raises(bt.StaleValueError):
                    vec.obj.data


class _Outs:
    """The outputs of a range op, computed when the op succeeded (from the model's values then)."""

    def __init__(self, compute, n):
        self.compute, self.n = compute, n

    def __len__(self):
        return self.n

    def __call__(self):
        out = self.compute()
        assert len(out) == self.n
        return out


ArenaMachine.TestCase.settings = stateful_settings()
TestArenaMachine = ArenaMachine.TestCase


def test_the_model_itself_catches_a_wrong_gradient():
    """The reference model is strict: a grad off by one ulp-scaled unit in float64 is rejected."""
    arena = bt.Arena(F64)
    model = ArenaModel("check", arena, False)
    x = bt.Value(0.7, arena=arena)
    xi = model.leaf(0.7)
    y = x.tanh()
    yi = model.append([unary_out(model, "tanh", model.slot(xi))], [xi], 0, unary_vjp("tanh", xi, model.n_slots), True)
    y.backward(seed=2.0)
    model.backward(yi, 2.0, 0)
    s = model.slot(xi)
    assert model.close(x.grad, s.grad, s.gtol)
    assert not model.close(x.grad * (1 + 1e-12), s.grad, s.gtol)
    assert not model.close(x.grad + 1e-9, s.grad, s.gtol)
