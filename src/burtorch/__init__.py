"""burtorch: scalar-level reverse-mode autodiff with a contiguous arena and a C++20 core.

Every scalar is a node (a slot in an arena); ``Value`` is a handle to one. Arithmetic appends
nodes and records, ``backward()`` sweeps the records once in reverse, and ``checkpoint()`` /
``rewind()`` discard whole iterations of nodes at once.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

# Importing _isa loads the build of the extension this CPU runs best as burtorch._core.
from . import _isa  # noqa: F401

# isort: split
from . import _core
from ._core import (  # noqa: F401  (re-exported API: the engine, its types and every op)
    AnomalyError,
    Arena,
    Checkpoint,
    DType,
    StaleValueError,
    Value,
    Vector,
    abs,
    add,
    add_squares,
    attention,
    bfloat16,
    cat,
    checkpoint,
    cos,
    cross_entropy,
    current_arena,
    div,
    dot,
    embedding,
    exp,
    float16,
    float32,
    float64,
    get_default_dtype,
    get_num_threads,
    hcat,
    inner_product,
    inner_product_with_bias,
    inv,
    inv_sqrt,
    is_anomaly_enabled,
    is_grad_enabled,
    layer_norm,
    leaky_relu,
    leaves,
    linear,
    log,
    lookup_linear,
    mean,
    mean_squares,
    mul,
    mul_by_constant,
    multi_head_attention,
    neg,
    neg_log,
    negative_mean,
    pow,
    pow3,
    reduce_mean,
    reduce_mean_and_mean_squares,
    reduce_mean_squares,
    reduce_mul,
    reduce_negative_mean,
    reduce_sub,
    reduce_sum,
    reduce_sum_of_squares,
    relu,
    rewind,
    set_default_dtype,
    set_num_threads,
    sigmoid,
    sin,
    softmax,
    softplus,
    sqr,
    sqrt,
    sub,
    tanh,
    variance,
    variance_biased,
    vector,
    vmean,
    vsum,
)

__version__ = "0.1.0"

from .modes import detect_anomaly, no_grad  # noqa: E402,F401
from .seeding import manual_seed  # noqa: E402,F401

# The library's packages load on first use, so `import burtorch` stays light (no numpy, no
# matplotlib). The command line (burtorch.cli) sits beside the library and is never loaded by it.
_LAZY_MODULES = ("io", "viz", "views", "introspect", "nn", "optim", "data", "oracle", "seeding", "program",
                 "planner")

if TYPE_CHECKING:  # what the lazy loader below returns, as type checkers should see it
    from . import data, introspect, io, nn, optim, oracle, seeding, views, viz  # noqa: F401
    from .introspect import memory_report  # noqa: F401
    from .oracle import grad_oracle  # noqa: F401
    from .planner import explain_plan  # noqa: F401
    from .record_timer import record_times  # noqa: F401
    from .views import load_array, numpy_view  # noqa: F401


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    home = _LAZY_NAMES.get(name)
    if home is None:
        raise AttributeError(f"module 'burtorch' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    # kept as a module attribute, so later lookups (bt.grad_oracle in a training loop) skip this
    globals()[name] = value
    return value


# Names the package hands out from its lazy modules: name -> module.
_LAZY_NAMES = {"numpy_view": ".views", "load_array": ".views", "memory_report": ".introspect",
               "grad_oracle": ".oracle", "per_sample_grads": ".oracle_compiled", "record_times": ".record_timer",
               "explain_plan": ".planner",
               **dict.fromkeys(("value_and_grad", "grad", "trace", "Program", "TraceError", "lane_width",
                                "lanes_enabled", "set_lanes_enabled"), ".program"),
               **dict.fromkeys(("native_status", "compile_native", "set_native_programs",
                                "native_programs_enabled"), ".native")}


class _BuildInfo(str):
    """``bt.build_info``: the build's description as a string (compiler, flags, ISA level);
    called, ``bt.build_info()`` returns it as a dict, with the ISA level that runs and the levels
    the CPU supports."""

    def __call__(self) -> dict[str, Any]:
        from . import _cpu

        return {"isa": _core.isa_level, "simd": _core.simd, "fused_multiply_add": bool(_core.fused_multiply_add),
                "cpu_levels": list(_cpu.supported_levels()), "forced": os.environ.get(_isa.ENV) or None,
                "extension": _core.__spec__.origin if _core.__spec__ else None, "build": str(self)}


build_info = _BuildInfo(f"{getattr(_core, 'build_info', 'unknown')}; isa: {getattr(_core, 'isa_level', '?')}")
# Quadruple precision, where the compiler provides __float128 (absent otherwise: test with
# hasattr(bt, "float128")). A scalar Value type of its own, not an arena dtype (docs: Scalar types).
if hasattr(_core, "float128"):
    float128 = _core.float128


class scope:
    """``with bt.scope():`` discards every node created inside the block on exit.

    Nodes created before the block (parameters, inputs) survive; handles to nodes created inside
    become stale.

    Args:
        arena: the arena to scope (default: the thread's current one of the default dtype).
    """

    __slots__ = ("_arena", "_cp")

    def __init__(self, arena: Arena | None = None) -> None:
        self._arena = arena
        self._cp: Checkpoint | None = None

    def __enter__(self) -> Checkpoint:
        cp = self._cp = checkpoint(self._arena)
        return cp

    def __exit__(self, *exc: object) -> None:
        if self._cp is None:
            raise TypeError("scope.__exit__() without __enter__()")
        rewind(self._cp)


def backward(root: Value, seed: float = 1.0, wrt: Sequence[Value] | None = None) -> None:
    """Reverse sweep from ``root``; the same as ``root.backward(seed, wrt)``.

    Args:
        root: the Value to differentiate.
        seed: d root / d root (default 1.0; must be finite).
        wrt: Values whose grads are wanted; the sweep stops below the lowest of them.

    Raises:
        TypeError: ``root`` is not a Value.
    """
    if not isinstance(root, Value):
        raise TypeError(f"backward() expects a Value, got {type(root).__name__}")
    root.backward(seed, wrt)


def reserve(nodes: int, dtype: DType | str | None = None) -> None:
    """Commits memory for ``nodes`` nodes in the thread's current arena of ``dtype`` up front.

    Raises:
        ValueError: ``nodes`` is not a non-negative int.
    """
    if not isinstance(nodes, int) or nodes < 0:
        raise ValueError(f"reserve() expects a non-negative int, got {nodes!r}")
    current_arena(dtype).reserve(nodes)


def stats(dtype: DType | str | None = None) -> dict[str, Any]:
    """Nodes, records and bytes by category of the thread's current arena of ``dtype`` (a dict)."""
    return current_arena(dtype).stats()


def zero_grad(values: Iterable[Value | Vector]) -> None:
    """Sets the grad of every Value (or Vector) in ``values`` to 0."""
    for v in values:
        if isinstance(v, Vector):
            v.zero_grad()
        elif isinstance(v, Value):
            v.grad = 0.0
        else:
            raise TypeError(f"zero_grad() expects Values or Vectors, got {type(v).__name__}")


class labels:
    """Switches node labels on or off: ``bt.labels(True)`` or ``with bt.labels(True): ...``.

    A label given explicitly (``label=`` or ``v.label = ...``) is always stored; the switch only
    governs automatic labels, which nothing makes today. A node given no label costs no memory.
    """

    def __init__(self, enabled: bool = True) -> None:
        self._previous = _core.labels_enabled()
        _core.set_labels(bool(enabled))

    def __enter__(self) -> labels:
        return self

    def __exit__(self, *exc: object) -> None:
        _core.set_labels(self._previous)

    @staticmethod
    def enabled() -> bool:
        return _core.labels_enabled()
