"""The C++ source of a lane program's block function (see burtorch.native): every record's
forward, then the reverse sweep, in locals, with the op table's expressions (csrc/lanes/native.hpp)
and the lane kernels' order of operations; records that call the math library in scalar loops of
their own."""
from __future__ import annotations

import struct

from .. import _core

_LIB_FWD = {"tanh", "exp", "log", "neg_log", "sigmoid", "sin", "cos", "softplus", "rpow_const", "pow"}
_LIB_BWD = {"sin", "cos", "softplus", "rpow_const", "pow"}
_POW_FAST = {2.0, 3.0, 1.0, 0.0, -1.0, 0.5}  # pow_imm's branches without a library call


def _as_t(c: float, dtype: str) -> float:
    return struct.unpack("f", struct.pack("f", c))[0] if dtype == "float32" else c


def _literal(c: float) -> str:
    """The double c exactly, as C++ (T(...) of it is the kernels' static_cast<T>(r.imm))."""
    if c != c or c in (float("inf"), float("-inf")):
        bits = struct.unpack("<Q", struct.pack("<d", c))[0]
        return f"__builtin_bit_cast(double, 0x{bits:016x}ULL)"
    return float.hex(c)


class _Item:
    """One step of the fused loop: its code, the value and grad slots it reads and writes, and
    whether it calls the math library (then it runs in a scalar loop of its own)."""

    def __init__(self, lines, reads=(), writes=(), greads=(), lib=False):
        self.lines = lines
        self.reads, self.writes, self.greads = set(reads), set(writes), set(greads)
        self.lib = lib


def _forward_item(rec, k, dtype):
    op, kind, out, nout, a, b, imm, args = rec
    x = "x{}".format
    if kind in ("unary", "unary_imm"):
        c = f"T({_literal(imm)})" if kind == "unary_imm" else "T(0)"
        lib = op in _LIB_FWD or (op == "pow_const" and _as_t(imm, dtype) not in _POW_FAST)
        return _Item([f"const T {x(out)} = fwd_{op}({x(a)}, {c});"], [a], [out], lib=lib)
    if kind == "binary":
        return _Item([f"const T {x(out)} = fwd_{op}({x(a)}, {x(b)});"], [a, b], [out], lib=op in _LIB_FWD)
    n = len(args)
    s, L = f"s{k}", []
    xs = [x(i) for i in args]
    if op in ("reduce_sum", "reduce_mean", "reduce_negative_mean", "variance", "variance_biased",
              "mean_and_mean_squares"):
        L.append(f"T {s} = T(0);")
        if op == "mean_and_mean_squares":
            L.append(f"T q{k} = T(0);")
        for xi in xs:
            L.append(f"{s} = {s} + {xi};")
            if op == "mean_and_mean_squares":
                L.append(f"q{k} = madd<T>({xi}, {xi}, q{k});")
        if op == "reduce_sum":
            L.append(f"const T {x(out)} = {s};")
        elif op == "reduce_mean":
            L.append(f"const T {x(out)} = {s} / T({n});")
        elif op == "reduce_negative_mean":
            L.append(f"const T {x(out)} = -{s} / T({n});")
        elif op == "mean_and_mean_squares":
            L.append(f"const T {x(out)} = {s} / T({n});")
            L.append(f"const T {x(out + 1)} = q{k} / T({n});")
            L.append(f"(void){x(out)}; (void){x(out + 1)};  // a program may read one of the two")
        else:
            L.append(f"const T m{k} = {s} / T({n});")
            L.append(f"T ss{k} = T(0);")
            for xi in xs:
                L.append(f"{{ const T d = {xi} - m{k}; ss{k} = madd<T>(d, d, ss{k}); }}")
            den = n - 1 if op == "variance" else n
            L.append(f"const T {x(out)} = ss{k} / T({den});")
    elif op == "reduce_sub":
        L.append(f"T {s} = {xs[0]};")
        L += [f"{s} = {s} - {xi};" for xi in xs[1:]]
        L.append(f"const T {x(out)} = {s};")
    elif op == "reduce_mul":
        L.append(f"T {s} = T(1);")
        L += [f"{s} = {s} * {xi};" for xi in xs]
        L.append(f"const T {x(out)} = {s};")
    elif op in ("reduce_sum_of_squares", "reduce_mean_squares"):
        L.append(f"T {s} = T(0);")
        L += [f"{s} = madd<T>({xi}, {xi}, {s});" for xi in xs]
        L.append(f"const T {x(out)} = {s}{'' if op == 'reduce_sum_of_squares' else f' / T({n})'};")
    elif op in ("inner_product", "inner_product_with_bias"):
        m = n // 2
        L.append(f"T {s} = T(0);")
        L += [f"{s} = madd<T>({xs[i]}, {xs[m + i]}, {s});" for i in range(m)]
        L.append(f"const T {x(out)} = {s}{' + ' + xs[2 * m] if op == 'inner_product_with_bias' else ''};")
    else:
        raise ValueError(f"native: no code for var-arity op {op}")
    return _Item(L, args, range(out, out + nout))


def _backward_item(rec, k, dtype):
    op, kind, out, nout, a, b, imm, args = rec
    x, g = "x{}".format, "g{}".format
    go = g(out)

    def upd(slot, term):  # the kernels' select: a lane whose output grad is 0 keeps its grad
        return f"{g(slot)} = {go} != T(0) ? {g(slot)} + {term} : {g(slot)};"

    if kind in ("unary", "unary_imm"):
        c = f"T({_literal(imm)})" if kind == "unary_imm" else "T(0)"
        lib = op in _LIB_BWD
        if op == "pow_const":
            ct = _as_t(imm, dtype)
            lib = ct != 0.0 and _as_t(ct - 1.0, dtype) not in _POW_FAST
        return _Item([upd(a, f"{go} * d_{op}({x(a)}, {x(out)}, {c})")], [a, out], [], [out, a], lib=lib)
    if kind == "binary":
        args3 = f"{x(a)}, {x(b)}, {x(out)}"
        return _Item([upd(a, f"{go} * da_{op}({args3})"), upd(b, f"{go} * db_{op}({args3})")],
                     [a, b, out], [], [out, a, b], lib=op in _LIB_BWD)
    n = len(args)
    xs = [x(i) for i in args]
    L = []

    def where(slot, expr, sign="+", live=go):
        L.append(f"{g(slot)} = {live} != T(0) ? {g(slot)} {sign} {expr} : {g(slot)};")

    greads = [out] + list(args)
    if op == "reduce_sum":
        for i in args:
            where(i, go)
    elif op == "reduce_sub":
        where(args[0], go)
        for i in args[1:]:
            where(i, go, "-")
    elif op == "reduce_mul":
        L.append(f"T suffix{k} = T(1), prefix{k} = T(1);")
        for j in range(n - 1, -1, -1):
            L.append(f"const T si{k}_{j} = suffix{k};")
            L.append(f"suffix{k} = suffix{k} * {xs[j]};")
        for j in range(n):
            L.append(f"{{ const T d = {go} * (prefix{k} * si{k}_{j}); "
                     f"{g(args[j])} = {go} != T(0) ? {g(args[j])} + d : {g(args[j])}; }}")
            L.append(f"prefix{k} = prefix{k} * {xs[j]};")
    elif op in ("reduce_mean", "reduce_negative_mean"):
        L.append(f"const T d{k} = ({go if op == 'reduce_mean' else '-' + go}) / T({n});")
        for i in args:
            where(i, f"d{k}")
    elif op in ("reduce_sum_of_squares", "reduce_mean_squares"):
        L.append(f"const T c{k} = T(2) * {go}{'' if op == 'reduce_sum_of_squares' else f' / T({n})'};")
        for i, xi in zip(args, xs):
            where(i, f"c{k} * {xi}")
    elif op in ("inner_product", "inner_product_with_bias"):
        m = n // 2
        for i in range(m):
            where(args[i], f"{go} * {xs[m + i]}")
            where(args[m + i], f"{go} * {xs[i]}")
        if op == "inner_product_with_bias":
            where(args[2 * m], go)
    elif op in ("variance", "variance_biased"):
        L.append(f"T vs{k} = T(0);")
        L += [f"vs{k} = vs{k} + {xi};" for xi in xs]
        den = n - 1 if op == "variance" else n
        L.append(f"const T vm{k} = vs{k} / T({n});")
        L.append(f"const T vd{k} = T(2) * {go} / T({den});")
        for i, xi in zip(args, xs):
            where(i, f"vd{k} * ({xi} - vm{k})")
    elif op == "mean_and_mean_squares":
        g1 = g(out + 1)
        greads.append(out + 1)
        L.append(f"const T live{k} = ({go} != T(0) || {g1} != T(0)) ? T(1) : T(0);")
        L.append(f"const T d{k} = {go} / T({n});")
        L.append(f"const T dq{k} = T(2) * {g1} / T({n});")
        for i, xi in zip(args, xs):
            where(i, f"(d{k} + dq{k} * {xi})", live=f"live{k}")
    else:
        raise ValueError(f"native: no code for var-arity op {op}")
    return _Item(L, args, [], greads)


def _segments(items):
    """Consecutive vectorizable items share a loop; a library-calling item gets its own."""
    segs: list[list[_Item]] = []
    for it in items:
        if it.lib or not segs or segs[-1][0].lib:
            segs.append([it])
        else:
            segs[-1].append(it)
    return segs


def _body(items, keep_values, wrt_slots, grads, inputs=None):
    """The loops of one mode (values only, or values and grads) over the lanes. inputs (the fused
    rows mode): each input slot's column in a row of X, read straight from the caller's rows."""
    segs = _segments(items)
    value_segs = [set().union(*(it.reads for it in s)) for s in segs]
    grad_segs = [set().union(*(it.greads for it in s)) for s in segs]
    out: list[str] = []
    touched: set[int] = set()
    for j, s in enumerate(segs):
        mine = set().union(*(it.writes for it in s))
        lines = [f"const T x{r} = T(xin[l * {len(inputs)} + {inputs[r]}]);" if inputs and r in inputs
                 else f"const T x{r} = v[{r} * B + l];" for r in sorted(value_segs[j] - mine)]
        for r in sorted(grad_segs[j]):
            lines.append(f"T g{r} = g[{r} * B + l];" if r in touched else f"T g{r} = T(0);")
        touched |= grad_segs[j]
        for it in s:
            lines += it.lines
        later_v = set().union(set(), *value_segs[j + 1:])
        for r in sorted(mine):
            if r in keep_values or r in later_v:
                lines.append(f"v[{r} * B + l] = x{r};")
        later_g = set().union(set(), *grad_segs[j + 1:])
        for r in sorted(grad_segs[j]):
            if r in later_g or r in wrt_slots:
                lines.append(f"g[{r} * B + l] = g{r};")
        pragma = [] if s[0].lib else ["#pragma omp simd"]
        out += pragma + ["for (size_t l = 0; l < B; ++l) {"] + ["    " + ln for ln in lines] + ["}"]
    if grads:
        for r in sorted(wrt_slots - touched):  # a wrt node the sweep never reaches: grad 0
            out += ["#pragma omp simd", f"for (size_t l = 0; l < B; ++l) g[{r} * B + l] = T(0);"]
    return out


def generate(structure: dict) -> str:
    """C++ source of the block function of a lane-eligible program, from
    _core._lanes_structure(program)."""
    if not structure["eligible"]:
        raise ValueError("native: the program does not run in lanes")
    dtype = structure["dtype"]
    recs = structure["records"]
    fwd = [_forward_item(r, k, dtype) for k, r in enumerate(recs)]
    root = structure["root"]
    keep = {root} | {a for a, _ in structure["guards"]} | {b for _, b in structure["guards"] if b >= 0}
    wrt = {f + t for f, n in structure["wrt"] for t in range(n)}
    seed = _Item([f"g{root} = g{root} + seed;"], [], [], [root])
    bwd = [_backward_item(recs[k], k, dtype) for k in reversed(structure["sweep"])]
    # The rows mode: X's rows in, the values and the rows of grads out, in the one loop (what the
    # replay's load_rows, value copy and store_rows do around the block function otherwise), for
    # full blocks of programs without guards.
    order = [f + t for f, n in structure["wrt"] for t in range(n)]
    inputs = {r: i for i, r in enumerate(structure["inputs"])}
    out_lines = [f"vout[l] = double(x{root});"] + [f"rout[l * {len(order)} + {j}] = g{r};" for j, r in enumerate(order)]
    outs = _Item(out_lines, [root], [], order)
    ctype = "double" if dtype == "float64" else "float"
    # the replay's block sizes (replay.hpp's block_lanes: the vector width times 16, 4 or 1)
    w = _core.lane_width(_core.float64 if dtype == "float64" else _core.float32)
    blocks = (16 * w, 4 * w, w)
    src = [
        "// generated by burtorch.native from a recorded program: do not edit",
        '#include "lanes/native.hpp"',
        "",
        "namespace {",
        f"using T = {ctype};",
        "using namespace bt;",
        "using namespace bt::native;",
        "",
        "// CB: the block's lanes known at compile time (the replay's block sizes), 0: B at run time",
        "template <size_t CB>",
        "void values_only(T* __restrict__ v, size_t b) {",
        "    const size_t B = CB ? CB : b;",
        *["    " + ln for ln in _body(fwd, keep, wrt, False)],
        "}",
        "",
        "template <size_t CB>",
        "void with_grads(T* __restrict__ v, T* __restrict__ g, size_t b, T seed) {",
        "    const size_t B = CB ? CB : b;",
        *["    " + ln for ln in _body(fwd + [seed] + bwd, keep, wrt, True)],
        "}",
        "",
        "template <size_t CB>",
        "void rows_mode(T* __restrict__ v, T* __restrict__ g, size_t b, T seed, const double* __restrict__ xin,",
        "          double* __restrict__ vout, T* __restrict__ rout) {",
        "    const size_t B = CB ? CB : b;",
        "    (void)g;",
        *["    " + ln for ln in _body(fwd + [seed] + bwd + [outs], set(), set(), False, inputs)],
        "}",
        "",
        "template <size_t CB>",
        "void run(T* v, T* g, size_t B, int grads, T seed) {",
        "    if (grads)",
        "        with_grads<CB>(v, g, B, seed);",
        "    else",
        "        values_only<CB>(v, B);",
        "}",
        "}  // namespace",
        "",
        'extern "C" int burtorch_lanes_abi() { return bt::native::kAbiVersion * 100 + int(sizeof(T)); }',
        "",
        'extern "C" void burtorch_lanes_block(T* v, T* g, size_t B, int grads, T seed) {',
        "    switch (B) {",
        *[f"        case {b}: return run<{b}>(v, g, B, grads, seed);" for b in blocks],
        "        default: return run<0>(v, g, B, grads, seed);",
        "    }",
        "}",
        "",
        'extern "C" void burtorch_lanes_rows(T* v, T* g, size_t B, T seed, const double* x, double* values,'
        " T* rows) {",
        "    switch (B) {",
        *[f"        case {b}: return rows_mode<{b}>(v, g, B, seed, x, values, rows);" for b in blocks],
        "        default: return rows_mode<0>(v, g, B, seed, x, values, rows);",
        "    }",
        "}",
        "",
    ]
    return "\n".join(src)
