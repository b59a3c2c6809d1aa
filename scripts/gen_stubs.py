"""Writes the type stubs of burtorch._core at build time (CMake runs it after building _core).

nanobind's stubgen describes the nanobind-bound classes and functions from their signatures
(bindings give the non-obvious ones with nb::sig). Value and the scalar op functions are a raw
CPython type and raw functions (one native call per op), whose signatures stubgen cannot see:
their stubs are generated here, from the module's own op tables, as stubgen replacement
patterns. A new op row in csrc/ops.hpp therefore gets its stub without touching this file.

Usage: python -S gen_stubs.py STAGE OUT   (STAGE holds burtorch/_core*.so; OUT receives the
stubs and py.typed). -S keeps site hooks such as an editable install's out of the import.
"""
from __future__ import annotations

import os
import sys
import tempfile

PREFIX = r"burtorch\._core\."

# Aliases the bindings' nb::sig strings refer to.
HEADER = """\
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeAlias, overload

class _ArrayLike(Protocol):
    def __array__(self, *args: Any, **kwargs: Any) -> Any: ...

ArrayLike: TypeAlias = _ArrayLike
VectorLike: TypeAlias = (
    "Vector | Value | Sequence[float] | Sequence[Value | float] | Sequence[Sequence[float]] | ArrayLike"
)
Number: TypeAlias = "Value | float"
"""

VALUE_CLASS = '''\
class Value:
    """A scalar node of a compute graph: a handle to one slot of an arena.

    Arithmetic with Values and Python numbers appends nodes; backward() fills the grads.
    <, <=, >, >= compare data; == and != are identity; bool(v) is v.data != 0.
    """

    def __init__(self, data: float, dtype: DType | str | None = None, label: str | None = None,
                 arena: Arena | None = None) -> None: ...
    data: float
    grad: float
    label: str | None
    @property
    def index(self) -> int: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def arena(self) -> Arena: ...
    @property
    def alive(self) -> bool: ...
    @property
    def op(self) -> str: ...
    @property
    def is_leaf(self) -> bool: ...
    @property
    def children(self) -> tuple[Value, ...]: ...
    @property
    def _prev(self) -> tuple[Value, ...]: ...
    def backward(self, seed: float = 1.0, wrt: Sequence[Value] | None = None) -> None: ...
    def item(self) -> float: ...
    def detach(self) -> Value: ...
    def zero_grad(self) -> None: ...
    def leaky_relu(self, slope: float = 0.01) -> Value: ...
{unary}
    def __add__(self, other: Number) -> Value: ...
    def __radd__(self, other: float) -> Value: ...
    def __sub__(self, other: Number) -> Value: ...
    def __rsub__(self, other: float) -> Value: ...
    def __mul__(self, other: Number) -> Value: ...
    def __rmul__(self, other: float) -> Value: ...
    def __truediv__(self, other: Number) -> Value: ...
    def __rtruediv__(self, other: float) -> Value: ...
    def __pow__(self, other: Number, mod: None = None) -> Value: ...
    def __rpow__(self, other: float) -> Value: ...
    def __neg__(self) -> Value: ...
    def __pos__(self) -> Value: ...
    def __abs__(self) -> Value: ...
    def __float__(self) -> float: ...
    def __bool__(self) -> bool: ...
    def __lt__(self, other: Number) -> bool: ...
    def __le__(self, other: Number) -> bool: ...
    def __gt__(self, other: Number) -> bool: ...
    def __ge__(self, other: Number) -> bool: ...
    def __hash__(self) -> int: ...
'''

REDUCTIONS = ("reduce_sum", "reduce_sub", "reduce_mul", "reduce_mean", "reduce_sum_of_squares",
              "reduce_mean_squares", "reduce_negative_mean", "variance", "variance_biased")


# Functions whose result type depends on an argument: one nb::sig describes one signature, so
# their overloads live here (the binding's own signature is the last, catch-all one).
_ATTENTION_ARGS = "q: VectorLike, k: VectorLike, v: VectorLike, causal: bool = True, scale: float | None = None"
_MHA_ARGS = "qkv: VectorLike, heads: int, causal: bool = True, scale: float | None = None"
OVERLOAD_SIGNATURES = {
    "Vector\\.__getitem__": [
        "def __getitem__(self, key: int, /) -> Value | Vector: ...",
        "def __getitem__(self, key: slice, /) -> Vector: ...",
    ],
    "attention": [
        f"def attention({_ATTENTION_ARGS}, return_weights: Literal[False] = False) -> Vector: ...",
        f"def attention({_ATTENTION_ARGS}, *, return_weights: Literal[True]) -> tuple[Vector, Vector]: ...",
        f"def attention({_ATTENTION_ARGS}, return_weights: bool = False) -> Vector | tuple[Vector, Vector]: ...",
    ],
    "multi_head_attention": [
        f"def multi_head_attention({_MHA_ARGS}, return_weights: Literal[False] = False, sequences: int = 1)"
        " -> Vector: ...",
        f"def multi_head_attention({_MHA_ARGS}, *, return_weights: Literal[True], sequences: int = 1)"
        " -> tuple[Vector, list[Vector]]: ...",
        f"def multi_head_attention({_MHA_ARGS}, return_weights: bool = False, sequences: int = 1)"
        " -> Vector | tuple[Vector, list[Vector]]: ...",
    ],
}


def pattern(name: str, lines: list[str]) -> str:
    return PREFIX + name + "$:\n" + "".join("    " + line + "\n" for line in lines) + "\n"


def overloads() -> str:
    text = ""
    for name, signatures in OVERLOAD_SIGNATURES.items():
        lines = []
        for sig in signatures:
            lines += ["@overload", sig]
        lines[-1] = lines[-1].removesuffix(" ...")  # the docstring goes under the catch-all one
        text += pattern(name, lines + [r"\doc"])
    return text


def patterns(core) -> str:
    unary = "\n".join(f"    def {op}(self) -> Value: ..." for op in core._unary_ops)
    text = pattern("__prefix__", HEADER.splitlines())
    text += pattern("Value", VALUE_CLASS.format(unary=unary).splitlines())
    text += pattern("StaleValueError", [
        "class StaleValueError(RuntimeError):",
        '    """A Value or Vector refers to nodes that a rewind of their arena discarded."""'])
    text += pattern("TraceError", [
        "class TraceError(RuntimeError):",
        '    """Python code read a number out of a traced value, or used a mode a replay cannot repeat."""'])
    text += pattern("AnomalyError", [
        "class AnomalyError(FloatingPointError):",
        '    """The first non-finite forward value or backward contribution under detect_anomaly()."""'])
    ops = "|".join(core._unary_ops)
    text += pattern(f"({ops})", [r"def \1(x: Value, /) -> Value:", r"\doc"])
    ops = "|".join(core._binary_ops)
    text += pattern(f"({ops})", [r"def \1(a: Number, b: Number, /) -> Value:", r"\doc"])
    text += pattern(f"({'|'.join(REDUCTIONS)})", [r"def \1(xs: Sequence[Number], /) -> Value:", r"\doc"])
    text += pattern("reduce_mean_and_mean_squares",
                    ["def reduce_mean_and_mean_squares(xs: Sequence[Number], /) -> tuple[Value, Value]:", r"\doc"])
    text += pattern("inner_product",
                    ["def inner_product(x: Sequence[Number], w: Sequence[Number], /) -> Value:", r"\doc"])
    text += pattern("inner_product_with_bias", [
        "def inner_product_with_bias(x: Sequence[Number], w: Sequence[Number], b: Number, /) -> Value:", r"\doc"])
    text += pattern("leaky_relu", ["def leaky_relu(x: Value, slope: float = 0.01, /) -> Value:", r"\doc"])
    text += pattern("mul_by_constant", ["def mul_by_constant(x: Value, c: float, /) -> Value:", r"\doc"])
    text += pattern("(_unary_ops|_binary_ops)", [r"\1: tuple[str, ...]"])
    text += overloads()
    return text


def main(stage: str, out: str) -> None:
    sys.path.insert(0, stage)
    import burtorch._core as core  # the staged module, not an installed package
    from nanobind import stubgen

    with tempfile.TemporaryDirectory() as tmp:
        pat = os.path.join(tmp, "core.pat")
        with open(pat, "w", encoding="utf-8") as f:
            f.write(patterns(core))
        os.makedirs(out, exist_ok=True)
        # -P: the package's own modules call names that stubgen counts as private (init_,
        # _push_mode); without them in the stub every such call is a type error.
        stubgen.main(["-q", "-P", "-i", stage, "-m", "burtorch._core", "-r", "-O", out, "-p", pat,
                      "-M", os.path.join(out, "py.typed")])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
