"""A pure-Python reference model of the arena semantics burtorch documents (for test_stateful.py).

For every arena a test drives, the model knows
  - which slots exist and which allocation each holds, hence which handles are alive;
  - each node's value, with a bound on the rounding error the engine may have accumulated;
  - each node's grad, with a bound likewise: leaf grads accumulate; a backward pass zeroes the
    interior grads of the records it sweeps (from the root's record down to the lowest record
    the root depends on, or to the first record at or above the lowest `wrt` node), seeds the
    root and adds each record's contribution to its arguments;
  - the records and args entries, and what the arena's capacity allows.

Values are the ops' mathematical definitions evaluated in float64; the engine's numbers must lie
within the propagated error bound (a few ulps per op of the arena's dtype), so float32 arenas
are checked as strictly as their precision allows. Ops record a vector-Jacobian product that
reads the CURRENT values of their arguments and outputs, as the engine's sweep does.
"""
from __future__ import annotations

import itertools
import math
import struct

NO_RECORD = 2**32 - 1
F32_MAX = 3.4028234663852886e38
_serials = itertools.count(1)


def to_f32(x: float) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    if abs(x) >= F32_MAX * (1 + 2.0**-25):
        return math.copysign(math.inf, x)
    return struct.unpack("f", struct.pack("f", max(-F32_MAX, min(F32_MAX, x))))[0]


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def softplus(x: float) -> float:
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


# Unary ops: name -> (f(x), derivative D(x, y), local Lipschitz bound of f near x given the input
# error e, bound on the error of D given the errors ex of x and ey of y). relu and abs are only
# applied away from their kink (the test picks inputs farther from 0 than their error bound).
UNARY = {
    "neg": (lambda x: -x, lambda x, y: -1.0, lambda x, e: 1.0, lambda x, y, ex, ey: 0.0),
    "relu": (lambda x: x if x > 0 else 0.0, lambda x, y: 1.0 if x > 0 else 0.0,
             lambda x, e: 1.0, lambda x, y, ex, ey: 0.0),
    "abs": (abs, lambda x, y: 1.0 if x > 0 else (-1.0 if x < 0 else 0.0),
            lambda x, e: 1.0, lambda x, y, ex, ey: 0.0),
    "tanh": (math.tanh, lambda x, y: 1.0 - y * y, lambda x, e: 1.0, lambda x, y, ex, ey: 2 * abs(y) * ey + ey * ey),
    "sigmoid": (sigmoid, lambda x, y: y * (1.0 - y), lambda x, e: 0.25,
                lambda x, y, ex, ey: abs(1 - 2 * y) * ey + ey * ey),
    "sin": (math.sin, lambda x, y: math.cos(x), lambda x, e: 1.0, lambda x, y, ex, ey: ex),
    "cos": (math.cos, lambda x, y: -math.sin(x), lambda x, e: 1.0, lambda x, y, ex, ey: ex),
    "sqr": (lambda x: x * x, lambda x, y: 2.0 * x, lambda x, e: 2 * abs(x) + e, lambda x, y, ex, ey: 2 * ex),
    "exp": (math.exp, lambda x, y: y, lambda x, e: math.exp(x + e), lambda x, y, ex, ey: ey),
    "softplus": (softplus, lambda x, y: sigmoid(x), lambda x, e: 1.0, lambda x, y, ex, ey: 0.25 * ex),
}
KINKED = ("relu", "abs")

# Ops with an immediate constant c: name -> (f(x, c), D(x, c)).
IMMEDIATE = {
    "add_const": (lambda x, c: x + c, lambda x, c: 1.0),
    "mul_const": (lambda x, c: x * c, lambda x, c: c),
    "rsub_const": (lambda x, c: c - x, lambda x, c: -1.0),
}

# Binary ops: name -> f(a, b); their derivatives are in binary_vjp.
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}


class Slot:
    """One node: the allocation it holds (serial), its value and grad with error bounds."""

    __slots__ = ("serial", "value", "err", "grad", "gtol", "record", "label")

    def __init__(self, value: float, err: float = 0.0, record=None):
        self.serial = next(_serials)
        self.value = value
        self.err = err
        self.grad = 0.0
        self.gtol = 0.0
        self.record = record
        self.label = None


class Record:
    """An op application: outputs [first, first + n), the lowest record it depends on, and its
    vector-Jacobian product vjp(model, grads of outputs, their bounds) -> [(slot, contribution, bound)]."""

    __slots__ = ("index", "first", "n", "lo", "vjp")

    def __init__(self, index, first, n, lo, vjp):
        self.index, self.first, self.n, self.lo, self.vjp = index, first, n, lo, vjp


class ArenaModel:
    """What one arena must hold. Slots and records that existed before the model was made (a
    thread's default arena is shared by every test) are outside it and never touched."""

    def __init__(self, name: str, handle, f32: bool, capacity: int | None = None):
        self.name = name
        self.handle = handle
        self.f32 = f32
        self.eps = (2.0**-23 if f32 else 2.0**-52) * 4  # a few ulps per rounding
        self.tiny = 1e-35 if f32 else 1e-300
        self.limit = 1e25 if f32 else 1e250  # past this, overflow is possible: not compared
        self.base_slots = handle.num_nodes
        self.base_records = handle.num_records
        self.base_args = handle.num_args
        self.slots: list[Slot] = []
        self.records: list[Record] = []
        self.nargs = self.base_args
        # Arena(capacity=c): c slots, c records, 2c args entries.
        self.cap = (capacity, capacity, 2 * capacity) if capacity else None

    def __repr__(self) -> str:
        return f"<{self.name}: {self.n_slots} slots, {self.n_records} records, {self.nargs} args>"

    # ---------------------------------------------------------------- counts and capacity
    @property
    def n_slots(self) -> int:
        return self.base_slots + len(self.slots)

    @property
    def n_records(self) -> int:
        return self.base_records + len(self.records)

    def fits(self, slots: int = 0, records: int = 0, args: int = 0) -> bool:
        if self.cap is None:
            return True
        s, r, a = self.cap
        return self.n_slots + slots <= s and self.n_records + records <= r and self.nargs + args <= a

    # ---------------------------------------------------------------- slots
    def slot(self, idx: int) -> Slot:
        return self.slots[idx - self.base_slots]

    def alive(self, idx: int, serial: int) -> bool:
        return self.base_slots <= idx < self.n_slots and self.slot(idx).serial == serial

    def round(self, x: float) -> float:
        return to_f32(x) if self.f32 else x

    def leaf(self, value: float, err: float = 0.0) -> int:
        self.slots.append(Slot(self.round(value) if err == 0.0 else value, err))
        return self.n_slots - 1

    def lo_of(self, idx: int) -> int:
        rec = self.slot(idx).record if idx >= self.base_slots else None
        return rec.lo if rec is not None else NO_RECORD

    def append(self, outs, args, nargs: int, vjp, grad_enabled: bool) -> int:
        """Appends an op's outputs ((value, error bound) pairs). With gradients off they are
        plain leaves and nothing is recorded. Returns the first output slot."""
        first = self.n_slots
        if not grad_enabled:
            for v, e in outs:
                self.slots.append(Slot(v, e))
            return first
        index = self.n_records
        lo = min([index] + [self.lo_of(a) for a in args])
        rec = Record(index, first, len(outs), lo, vjp)
        self.records.append(rec)
        self.nargs += nargs
        for v, e in outs:
            self.slots.append(Slot(v, e, rec))
        return first

    # ---------------------------------------------------------------- checkpoints
    def mark(self):
        n = self.n_slots
        last = self.slot(n - 1).serial if n > self.base_slots else None
        return (n, self.n_records, self.nargs, last)

    def mark_valid(self, mark) -> bool:
        n, r, a, last = mark
        if n > self.n_slots or r > self.n_records or a > self.nargs:
            return False
        return last is None or self.slot(n - 1).serial == last

    def rewind(self, mark) -> None:
        n, r, a, _ = mark
        del self.slots[n - self.base_slots:]
        del self.records[r - self.base_records:]
        self.nargs = a

    def clear(self) -> None:
        assert self.base_slots == 0, "only arenas the test created may be cleared"
        self.rewind((0, 0, 0, None))

    # ---------------------------------------------------------------- grads
    def set_grad(self, idx: int, g: float) -> None:
        s = self.slot(idx)
        s.grad = self.round(g)
        s.gtol = 0.0

    def scale_grad(self, idx: int, c: float) -> None:
        s = self.slot(idx)
        s.grad *= self.round(c)
        s.gtol = s.gtol * abs(c) + self.eps * abs(s.grad)

    def first_record_at_or_above(self, idx: int) -> int:
        for rec in self.records:
            if rec.first >= idx:
                return rec.index
        return self.n_records

    def backward(self, root: int, seed: float, stop_below: int) -> None:
        seed = self.round(seed)
        rs = self.slot(root)
        if rs.record is None:  # a leaf: d root / d root = 1, accumulated like any leaf grad
            rs.grad += seed
            rs.gtol += self.eps * abs(rs.grad)
            return
        top = rs.record.index
        lo = rs.record.lo
        if stop_below:
            lo = max(lo, self.first_record_at_or_above(stop_below))
        swept = self.records[lo - self.base_records: top - self.base_records + 1]
        for rec in swept:
            for i in range(rec.first, rec.first + rec.n):
                self.set_grad(i, 0.0)
        rs.grad, rs.gtol = seed, 0.0
        for rec in reversed(swept):
            outs = [self.slot(i) for i in range(rec.first, rec.first + rec.n)]
            if all(s.grad == 0.0 for s in outs):
                continue  # the engine skips records whose outputs carry no gradient
            for idx, c, tol in rec.vjp(self, [s.grad for s in outs], [s.gtol for s in outs]):
                s = self.slot(idx)
                s.grad += c
                s.gtol += tol + self.eps * abs(s.grad)

    # ---------------------------------------------------------------- comparing
    def close(self, got: float, ref: float, tol: float) -> bool:
        if math.isnan(ref):
            return math.isnan(got)
        if math.isinf(ref):
            return got == ref
        if not abs(ref) + tol <= self.limit:
            return True  # outside the range this model compares (or an unbounded error)
        return abs(got - ref) <= 2 * tol + self.tiny


# -------------------------------------------------------------------- op definitions
def term(model: ArenaModel, d: float, g: float, gtol: float, dd: float):
    """A contribution g * d with its error bound, given the error dd of the derivative d."""
    return g * d, abs(d) * gtol + abs(g) * dd + model.eps * abs(g * d)


def unary_out(model: ArenaModel, name: str, x: Slot):
    f, _, lip, _ = UNARY[name]
    y = f(x.value)
    return y, lip(x.value, x.err) * x.err + model.eps * abs(y)


def unary_vjp(name: str, xi: int, yi: int):
    _, deriv, _, derr = UNARY[name]

    def vjp(model, g, gt):
        x, y = model.slot(xi), model.slot(yi)
        return [(xi, *term(model, deriv(x.value, y.value), g[0], gt[0], derr(x.value, y.value, x.err, y.err)))]

    return vjp


def imm_out(model: ArenaModel, name: str, x: Slot, c: float):
    f, deriv = IMMEDIATE[name]
    y = f(x.value, c)
    return y, abs(deriv(x.value, c)) * x.err + model.eps * (abs(y) + abs(c))


def imm_vjp(name: str, xi: int, c: float):
    _, deriv = IMMEDIATE[name]

    def vjp(model, g, gt):
        return [(xi, *term(model, deriv(model.slot(xi).value, c), g[0], gt[0], 0.0))]

    return vjp


def binary_out(model: ArenaModel, name: str, a: Slot, b: Slot):
    y = BINARY[name](a.value, b.value)
    if name == "mul":
        err = abs(b.value) * a.err + abs(a.value) * b.err + a.err * b.err
    else:
        err = a.err + b.err
    return y, err + model.eps * (abs(y) + (abs(a.value) + abs(b.value) if name != "mul" else 0.0))


def binary_vjp(name: str, ai: int, bi: int):
    def vjp(model, g, gt):
        a, b = model.slot(ai), model.slot(bi)
        if name == "mul":
            return [(ai, *term(model, b.value, g[0], gt[0], b.err)), (bi, *term(model, a.value, g[0], gt[0], a.err))]
        sign = -1.0 if name == "sub" else 1.0
        return [(ai, *term(model, 1.0, g[0], gt[0], 0.0)), (bi, *term(model, sign, g[0], gt[0], 0.0))]

    return vjp


def reduce_out(model: ArenaModel, name: str, xs: list, ws: list | None = None):
    """Outputs of a var-arity op over slots xs (and ws for inner_product)."""
    n = len(xs)
    vals = [x.value for x in xs]
    errs = [x.err for x in xs]
    eps = model.eps * (n + 1)
    if name == "reduce_sum":
        y = sum(vals)
        return [(y, sum(errs) + eps * sum(map(abs, vals)))]
    if name == "reduce_mean":
        y = sum(vals) / n
        return [(y, (sum(errs) + eps * sum(map(abs, vals))) / n + model.eps * abs(y))]
    if name == "reduce_sum_of_squares":
        y = sum(v * v for v in vals)
        return [(y, sum(2 * abs(v) * e + e * e for v, e in zip(vals, errs)) + eps * y)]
    if name == "reduce_mean_and_mean_squares":
        m = sum(vals) / n
        q = sum(v * v for v in vals) / n
        em = (sum(errs) + eps * sum(map(abs, vals))) / n + model.eps * abs(m)
        eq = (sum(2 * abs(v) * e + e * e for v, e in zip(vals, errs)) + eps * q * n) / n + model.eps * q
        return [(m, em), (q, eq)]
    if name == "inner_product":
        wv = [w.value for w in ws]
        we = [w.err for w in ws]
        y = sum(a * b for a, b in zip(vals, wv))
        err = sum(abs(b) * ea + abs(a) * eb + ea * eb for a, b, ea, eb in zip(vals, wv, errs, we))
        return [(y, err + eps * sum(abs(a * b) for a, b in zip(vals, wv)))]
    raise KeyError(name)


def reduce_vjp(name: str, xi: list, wi: list | None = None):
    n = len(xi)

    def vjp(model, g, gt):
        out = []
        if name in ("reduce_sum", "reduce_mean"):
            d = 1.0 if name == "reduce_sum" else 1.0 / n
            return [(i, *term(model, d, g[0], gt[0], 0.0)) for i in xi]
        if name == "reduce_sum_of_squares":
            for i in xi:
                x = model.slot(i)
                out.append((i, *term(model, 2 * x.value, g[0], gt[0], 2 * x.err)))
            return out
        if name == "reduce_mean_and_mean_squares":
            for i in xi:
                x = model.slot(i)
                c0, t0 = term(model, 1.0 / n, g[0], gt[0], 0.0)
                c1, t1 = term(model, 2 * x.value / n, g[1], gt[1], 2 * x.err / n)
                out.append((i, c0 + c1, t0 + t1))
            return out
        if name == "inner_product":
            for i, j in zip(xi, wi):
                x, w = model.slot(i), model.slot(j)
                out.append((i, *term(model, w.value, g[0], gt[0], w.err)))
                out.append((j, *term(model, x.value, g[0], gt[0], x.err)))
            return out
        raise KeyError(name)

    return vjp


def span_count(slots: list) -> int:
    """Spans of a view: maximal runs of consecutive slots (how the engine stores a view)."""
    return sum(1 for k in range(len(slots)) if k == 0 or slots[k] != slots[k - 1] + 1)


def range_args(*operands, tail: int = 0) -> int:
    """Args entries of a range record: [k] + per operand [nspans, (first, len) * nspans] + tail."""
    return 1 + sum(1 + 2 * span_count(op) for op in operands) + tail


def map_unary_outs(model, name, xs):
    return [unary_out(model, name, model.slot(i)) for i in xs]


def map_unary_vjp(name: str, xs: list, first: int):
    def vjp(model, g, gt):
        out = []
        for k, i in enumerate(xs):
            out.extend(unary_vjp(name, i, first + k)(model, [g[k]], [gt[k]]))
        return out

    return vjp


def map_imm_vjp(name: str, xs: list, c: float):
    def vjp(model, g, gt):
        out = []
        for k, i in enumerate(xs):
            out.extend(imm_vjp(name, i, c)(model, [g[k]], [gt[k]]))
        return out

    return vjp


def map_binary_vjp(name: str, a: list, b: list):
    def vjp(model, g, gt):
        out = []
        for k, (i, j) in enumerate(zip(a, b)):
            out.extend(binary_vjp(name, i, j)(model, [g[k]], [gt[k]]))
        return out

    return vjp


def sum_range_out(model, xs, scale):
    vals = [model.slot(i).value for i in xs]
    y = sum(vals) * scale
    err = (sum(model.slot(i).err for i in xs) + model.eps * (len(xs) + 1) * sum(map(abs, vals))) * abs(scale)
    return y, err + model.eps * abs(y)


def sum_range_vjp(xs, scale):
    def vjp(model, g, gt):
        return [(i, *term(model, scale, g[0], gt[0], 0.0)) for i in xs]

    return vjp


def softmax_outs(model, xs, rows, n):
    out = []
    for r in range(rows):
        row = [model.slot(i) for i in xs[r * n:(r + 1) * n]]
        m = max(s.value for s in row)
        es = [math.exp(s.value - m) for s in row]
        total = sum(es)
        spread = 2 * max(s.err for s in row)
        for e in es:
            y = e / total
            out.append((y, y * spread + model.eps * (n + 2)))
    return out


def softmax_vjp(xs, rows, n, first):
    def vjp(model, g, gt):
        out = []
        for r in range(rows):
            ys = [model.slot(first + r * n + k) for k in range(n)]
            gs, ts = g[r * n:(r + 1) * n], gt[r * n:(r + 1) * n]
            gy = sum(a * y.value for a, y in zip(gs, ys))
            scale = sum(abs(a * y.value) for a, y in zip(gs, ys))
            ey = max(y.err for y in ys)
            for k in range(n):
                y = ys[k].value  # outputs may have been overwritten since: any sign
                c = y * (gs[k] - gy)
                tol = (abs(y) * (ts[k] + sum(ts)) + ey * (abs(gs[k]) + 2 * sum(map(abs, gs)))
                       + model.eps * (n + 2) * abs(y) * (abs(gs[k]) + scale))
                out.append((xs[r * n + k], c, tol))
        return out

    return vjp


def linear_outs(model, xs, ws, bs, rows, nin, nout):
    out = []
    for r in range(rows):
        x = [model.slot(i) for i in xs[r * nin:(r + 1) * nin]]
        for o in range(nout):
            w = [model.slot(i) for i in ws[o * nin:(o + 1) * nin]]
            y = sum(a.value * b.value for a, b in zip(x, w))
            err = sum(abs(b.value) * a.err + abs(a.value) * b.err + a.err * b.err for a, b in zip(x, w))
            scale = sum(abs(a.value * b.value) for a, b in zip(x, w))
            if bs:
                bias = model.slot(bs[o])
                y += bias.value
                err += bias.err
                scale += abs(bias.value)
            out.append((y, err + model.eps * (nin + 2) * scale))
    return out


def linear_vjp(xs, ws, bs, rows, nin, nout):
    def vjp(model, g, gt):
        out = []
        for r in range(rows):
            for o in range(nout):
                k = r * nout + o
                for i in range(nin):
                    xi, wi = xs[r * nin + i], ws[o * nin + i]
                    x, w = model.slot(xi), model.slot(wi)
                    out.append((xi, *term(model, w.value, g[k], gt[k], w.err)))
                    out.append((wi, *term(model, x.value, g[k], gt[k], x.err)))
                if bs:
                    out.append((bs[o], *term(model, 1.0, g[k], gt[k], 0.0)))
        return out

    return vjp


def copy_vjp(xs):
    def vjp(model, g, gt):
        return [(i, *term(model, 1.0, g[k], gt[k], 0.0)) for k, i in enumerate(xs)]

    return vjp
