"""Lane programs replayed natively: a recorded program's records compiled to one C++ function.

The lane replay (csrc/lanes/replay.hpp) runs a block of samples record by record, each record a
vector loop over the block's lanes that loads its arguments from the lane frame and stores its
output back. Here the program's records become one loop over the lanes instead (per segment, see
below): every record's forward, then the reverse sweep, in locals, with the op table's own
expressions (csrc/lanes/native.hpp expands ops.hpp's rows into functions) and the interpreter's
order of operations (kernels.hpp: the `go != 0 ? base + go * d : base` selects, the var-arity
ops' accumulation orders, pow_const's branches picked by its immediate). It reads the block's
inputs, parameters and constants from their frame slots and leaves what the replay reads back
(the root's and the guards' values, the wrt nodes' grads) in theirs, so everything around it
(rows of X in, guards, rows out, streaming stores) stays the interpreter's. Its rows mode, for
full blocks of a guard-free program's per-sample rows (what .map asks for), also reads the block's
rows of X and writes its values and rows of grads in the same loop.

Bits: the core and the generated code are both compiled with -ffp-contract=off, so an expression
rounds the same whether a kernel runs it per record or the fused loop runs it with its operands
in registers; library calls (exp, tanh, ...) are the same libm's. Still, each library is checked
after loading: a few hundred samples replayed both ways must agree bit for bit, else the program
keeps the interpreter. Records that call the library (no vector variants without -ffast-math)
end a vectorized segment and run in their own scalar loop, values crossing segments through the
frame, so the rest of the program stays vectorized.

When: `.map` starts compiling a program in the background once it has mapped NATIVE_AFTER lanes
(a cache hit loads at once) and switches when the library is ready and checked; until then, and
whenever anything fails (no compiler, a compile error, an unwritable cache, a truncated or
foreign cached file, a bit mismatch), the interpreter runs, with the same results, and
native_status says why. compile_native() compiles and loads at once. set_native_programs(False)
or BURTORCH_NATIVE_PROGRAMS=0 turns it off.

Cache: $BURTORCH_CACHE_DIR, else $XDG_CACHE_HOME/burtorch, else ~/.cache/burtorch; one file per
SHA-256 of (source, flags, compiler identity, burtorch build), written to a temporary file and
renamed into place, so processes compiling the same program at once never see half a file.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from . import _core

# Lanes a program maps (over all its calls) before .map starts compiling it: a program mapped over
# a batch this large, or over many smaller ones, is mapped for throughput. The compile runs in
# another process (0.5-1 s of CPU for W1 or W2), so no call waits for it; on a busy core it
# competes with the caller for that long, so programs mapped only a few times over small batches
# are left to the interpreter.
NATIVE_AFTER = 50_000
# Samples replayed both ways after loading a library (full blocks and a partial one).
CHECK_SAMPLES = 300

_enabled = os.environ.get("BURTORCH_NATIVE_PROGRAMS", "1").strip().lower() not in ("0", "false", "off", "no")
_compiler_cache: dict[str, Any] = {}
# Test hook: True makes the check after loading see a mismatch (the fallback's path).
_inject_mismatch = False


def set_native_programs(on: bool) -> None:
    """Lets .map compile lane programs to native code (True, the default unless
    BURTORCH_NATIVE_PROGRAMS=0) or not. Off, programs already loaded go back to the interpreter
    at their next .map (the same results either way)."""
    global _enabled
    _enabled = bool(on)


def native_programs_enabled() -> bool:
    """Whether .map compiles lane programs to native code."""
    return _enabled


# ---------------------------------------------------------------- code generation

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


# ---------------------------------------------------------------- compiler, cache, loading

_MARCH = {"generic": "-march=x86-64-v2", "avx2": "-march=x86-64-v3", "avx512": "-march=x86-64-v4",
          "native": "-march=native"}
FLAGS = ("-O3", "-std=c++20", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp-simd")


def compiler() -> str | None:
    """The C++ compiler: $CXX if set (None if it does not exist), else c++, g++ or clang++ on PATH."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _identity(cxx: str) -> str:
    """The compiler's --version output (part of the cache key), once per process and compiler."""
    key = "id:" + cxx
    if key not in _compiler_cache:
        try:
            r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
            _compiler_cache[key] = r.stdout
        except (OSError, subprocess.SubprocessError) as exc:
            _compiler_cache[key] = None
            raise RuntimeError(f"{cxx} --version failed: {exc}") from None
    if _compiler_cache[key] is None:
        raise RuntimeError(f"{cxx} --version failed")
    return _compiler_cache[key]


def include_dir() -> Path | None:
    """The headers the generated code includes: the package's include/ (installed beside the
    extension), else the source tree's csrc/ (an editable install)."""
    here = Path(__file__).resolve().parent
    cands = [here / "include"]
    if _core.__spec__ is not None and _core.__spec__.origin:
        cands.append(Path(_core.__spec__.origin).resolve().parent / "include")
    for cand in (*cands, here.parent.parent / "csrc"):
        if (cand / "lanes" / "native.hpp").is_file():
            return cand
    return None


def isa_flags() -> list[str]:
    """The target of the ISA level this process loaded (-march), so the generated code computes
    with the instructions the core's kernels use (madd's FMA among them)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    return [_MARCH.get(getattr(_core, "isa_level", "generic"), "-march=x86-64-v2")]


def cache_dir() -> Path:
    """$BURTORCH_CACHE_DIR, else $XDG_CACHE_HOME/burtorch, else ~/.cache/burtorch."""
    d = os.environ.get("BURTORCH_CACHE_DIR")
    if d:
        return Path(d)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "burtorch" if xdg else Path.home() / ".cache" / "burtorch"


def _build_id() -> str:
    inc = include_dir()
    h = hashlib.sha256(f"{getattr(_core, 'build_info', '')}; {getattr(_core, 'isa_level', '')}".encode())
    if inc is not None:
        for name in ("lanes/native.hpp", "ops.hpp", "reduce.hpp"):
            h.update((inc / name).read_bytes())
    return h.hexdigest()


class _Job:
    """One program's native state: status, the compile in flight, the loaded library."""

    def __init__(self, status="not started"):
        self.status = status
        self.proc: subprocess.Popen | None = None
        self.so: Path | None = None
        self.tmp: Path | None = None
        self.lib: ctypes.CDLL | None = None
        self.address = 0
        self.rows_address = 0
        self.check_x = None
        self.mapped = 0


def _state(prog) -> _Job | None:
    return _core._lanes_native(prog)[1]


def _fail(prog, job: _Job, why: str) -> str:
    job.status = "interpreter: " + why
    job.proc = None
    _core._set_lanes_native(prog, 0, 0, job)
    return job.status


def _source(prog) -> tuple[str, list[str], Path] | str:
    """(the generated source, the compile command without its files, the cached library's path),
    or why not."""
    s = _core._lanes_structure(prog)
    if not s["eligible"]:
        return "the program does not replay in lanes (vector records or ids)"
    cxx = compiler()
    if cxx is None:
        tried = "CXX=" + os.environ["CXX"] if os.environ.get("CXX") else "c++, g++, clang++"
        return f"no C++ compiler ({tried} not found)"
    inc = include_dir()
    if inc is None:
        return "burtorch's headers (include/lanes/native.hpp) are not installed"
    try:
        src = generate(s)
        flags = [*FLAGS, *isa_flags()]
        key = hashlib.sha256("\0".join([src, *flags, _identity(cxx), _build_id()]).encode()).hexdigest()
    except (RuntimeError, ValueError, OSError) as exc:
        return str(exc)
    return src, [cxx, *flags, f"-I{inc}"], cache_dir() / f"lanes-{key[:40]}.so"


def cached_path(prog) -> Path | None:
    """Where prog's library is (or would be) cached; None where it cannot be compiled."""
    got = _source(prog)
    return None if isinstance(got, str) else got[2]


def _plan(prog, job: _Job) -> tuple[list[str], Path] | str:
    """(the compile command, the cached file's path; no command on a cache hit), or why not."""
    got = _source(prog)
    if isinstance(got, str):
        return got
    src, cmd, so = got
    if so.is_file():
        return [], so
    d = so.parent
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=so.stem + ".", suffix=".tmp.so", dir=d)
        os.close(fd)
        job.tmp = Path(tmp)
        cpp = Path(tmp[: -len(".so")] + ".cpp")
        cpp.write_text(src)
    except OSError as exc:
        _cleanup(job)
        return f"the cache {d} is not writable ({exc.strerror or exc})"
    return [*cmd, str(cpp), "-o", tmp], so


def _start(prog, job: _Job) -> None:
    plan = _plan(prog, job)
    if isinstance(plan, str):
        _fail(prog, job, plan)
        return
    cmd, so = plan
    job.so = so
    if not cmd:
        _load(prog, job)
        return
    try:
        # the compiler's messages go to a file (a pipe nobody reads until it ends could fill up and
        # stall it)
        with open(_log(job.tmp), "wb") as log:
            job.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
    except OSError as exc:
        _cleanup(job)
        _fail(prog, job, f"the compiler did not start ({exc})")
        return
    job.status = "compiling"
    _compiling.add(job)


# Compiles in flight: at exit they are stopped and their temporary files removed (left running,
# each would leave its half-made files in the cache).
_compiling: set[_Job] = set()


@atexit.register
def _stop_compiles() -> None:
    for job in list(_compiling):
        if job.proc is not None:
            job.proc.kill()
            job.proc.wait()
        _cleanup(job)
    _compiling.clear()


def _log(tmp) -> Path:
    return Path(str(tmp)[: -len(".so")] + ".log")


def _cleanup(job: _Job) -> None:
    if job.tmp is not None:
        for p in (job.tmp, Path(str(job.tmp)[: -len(".so")] + ".cpp"), _log(job.tmp)):
            try:
                p.unlink()
            except OSError:
                pass
        job.tmp = None


def _finish(prog, job: _Job) -> None:
    """The compile ended: its file into the cache, then loaded."""
    proc, job.proc = job.proc, None
    _compiling.discard(job)
    assert proc is not None and job.tmp is not None and job.so is not None
    try:
        err = _log(job.tmp).read_text(errors="replace")
    except OSError:
        err = ""
    if proc.returncode != 0:
        _cleanup(job)
        first = next((ln for ln in err.splitlines() if "error" in ln), err.strip()[:200])
        _fail(prog, job, f"the compiler failed ({first})")
        return
    try:
        os.replace(job.tmp, job.so)
    except OSError as exc:
        _cleanup(job)
        _fail(prog, job, f"the cache is not writable ({exc})")
        return
    _cleanup(job)
    _load(prog, job)


def _load(prog, job: _Job) -> None:
    assert job.so is not None
    try:
        lib = ctypes.CDLL(str(job.so))
        abi = lib.burtorch_lanes_abi
        abi.restype = ctypes.c_int
        size = 8 if prog.dtype == _core.float64 else 4
        if abi() != _core._lanes_native_abi() * 100 + size:
            _fail(prog, job, f"{job.so.name} was built for another burtorch or dtype")
            return
        address = ctypes.cast(lib.burtorch_lanes_block, ctypes.c_void_p).value or 0
        job.rows_address = ctypes.cast(lib.burtorch_lanes_rows, ctypes.c_void_p).value or 0
    except (OSError, AttributeError) as exc:
        _fail(prog, job, f"{job.so.name} does not load ({exc}): a truncated or foreign file; delete it to rebuild")
        return
    job.lib = lib
    job.address = address
    try:
        why = _check(prog, job)
    except Exception as exc:  # e.g. a program a rewind made stale: it replays nothing any more
        why = f"the check could not replay the program ({type(exc).__name__}: {exc})"
    if why:
        job.lib = None
        job.address = 0
        _fail(prog, job, why)
        return
    job.status = "native"
    _core._set_lanes_native(prog, address, job.rows_address, job)


def _check(prog, job: _Job) -> str | None:
    """Replays check samples with the library and with the record loops: None if every value,
    grad and failed guard agrees bit for bit, else why not."""
    import numpy as np

    X = job.check_x
    if X is None or len(X) < 2:
        rng = np.random.default_rng(47)
        X = rng.uniform(-2.0, 2.0, size=(CHECK_SAMPLES, prog.num_inputs))
    X = np.ascontiguousarray(X[:CHECK_SAMPLES], dtype=np.float64)
    gdt = np.float64 if prog.dtype == _core.float64 else np.float32
    results = []
    lanes_were = _core.lanes_enabled()
    _core.set_lanes_enabled(True)
    try:
        for address in (0, job.address):
            _core._set_lanes_native(prog, address, job.rows_address, job)
            values = np.full(len(X), -7.0)
            rows = np.full((len(X), prog.num_wrt), -7.0, dtype=gdt)
            failed = prog._replay(X, None, "rows", 1.0, values, rows)
            values_only = np.full(len(X), -7.0)
            prog._replay(X, None, "values", 1.0, values_only, None)
            results.append((values.tobytes(), rows.tobytes(), list(failed), values_only.tobytes()))
    finally:
        _core._set_lanes_native(prog, 0, 0, job)
        _core.set_lanes_enabled(lanes_were)
    if _inject_mismatch or results[0] != results[1]:
        return f"its results differ from the interpreter's on {len(X)} check samples"
    return None


def poll(prog) -> str:
    """Advances the program's compile if it ended; returns its status."""
    job = _state(prog)
    if job is not None and job.proc is not None and job.proc.poll() is not None:
        _finish(prog, job)
    status = "not started" if job is None else job.status
    if not _enabled and status in ("native", "not started"):
        return "off (set_native_programs(False))"
    return status


def on_map(prog, X, n: int) -> None:
    """Called by .map before each replay: counts the lanes, starts the compile once they pay,
    switches to the library once it is ready (or back to the interpreter when turned off)."""
    address, job = _core._lanes_native(prog)
    if not _enabled:
        if address:  # the library stays loaded (status "native") for when it is turned on again
            _core._set_lanes_native(prog, 0, 0, job)
        return
    if job is None:
        job = _Job()
        _core._set_lanes_native(prog, 0, 0, job)
    if job.status == "native":
        if not address:  # turned off and on again
            _core._set_lanes_native(prog, job.address, job.rows_address, job)
        return
    if job.proc is not None:
        if job.proc.poll() is not None:
            _finish(prog, job)
        return
    if job.status != "not started" or not _core.lanes_enabled():  # lanes off: one sample at a time
        return
    job.mapped += n
    if job.mapped >= NATIVE_AFTER and n >= 2:
        job.check_x = X[:CHECK_SAMPLES].copy()
        _start(prog, job)


def compile_program(prog, X=None, timeout: float = 120.0) -> str:
    """Compiles (or loads from the cache) prog's block function now and switches its lane replay
    to it once checked; returns the status ("native", or "interpreter: why")."""
    job = _state(prog)
    if job is None:
        job = _Job()
        _core._set_lanes_native(prog, 0, 0, job)
    if job.status == "native":
        return job.status
    if job.proc is None:
        if X is not None:
            job.check_x = X[:CHECK_SAMPLES]
        job.status = "not started"
        _start(prog, job)
    return wait_program(prog, timeout)


def wait_program(prog, timeout: float = 120.0) -> str:
    """Waits for a compile in flight (if any) and loads its library; returns the status."""
    job = _state(prog)
    if job is None:
        return "not started"
    if job.proc is not None:
        try:
            job.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return job.status
        _finish(prog, job)
    return job.status


def _programs(obj) -> list:
    if isinstance(obj, _core.Program):
        return [obj]
    if hasattr(obj, "programs"):  # value_and_grad / grad's Compiled
        return list(obj.programs())
    raise TypeError(f"expected a Program or what value_and_grad/grad return, got {type(obj).__name__}")


def native_status(obj) -> str | list[str]:
    """Whether .map replays obj natively: for a Program its status, for what value_and_grad or
    grad return the statuses of its programs (oldest first). A status is "native", "compiling",
    "not started", "off (...)" or "interpreter: <why>" (the interpreter runs, same results)."""
    if isinstance(obj, _core.Program):
        return poll(obj)
    return [poll(p) for p in _programs(obj)]


def compile_native(obj, X=None, timeout: float = 120.0) -> str | list[str]:
    """Compiles obj's lane programs now (a Program, or every program value_and_grad/grad traced),
    waiting for the compiler; X: samples to check the library's bits on (default: random ones).
    Returns native_status(obj)."""
    if isinstance(obj, _core.Program):
        return compile_program(obj, X, timeout)
    return [compile_program(p, X, timeout) for p in _programs(obj)]


def _wait(obj, timeout: float = 120.0) -> str | list[str]:
    """Test hook: waits for the background compiles of obj's programs."""
    if isinstance(obj, _core.Program):
        return wait_program(obj, timeout)
    return [wait_program(p, timeout) for p in _programs(obj)]

