"""burtorch: scalar-level reverse-mode autodiff with a contiguous arena and a C++20 core.

Every scalar is a node (a slot in an arena); ``Value`` is a handle to one. Arithmetic appends
nodes and records, ``backward()`` sweeps the records once in reverse, and ``checkpoint()`` /
``rewind()`` discard whole iterations of nodes at once.
"""
from __future__ import annotations

from . import _core
from ._core import (  # noqa: F401  (re-exported API)
    Arena,
    get_default_dtype,
    set_default_dtype,
    AnomalyError,
    Checkpoint,
    DType,
    StaleValueError,
    Value,
    checkpoint,
    current_arena,
    Vector,
    attention,
    cat,
    cross_entropy,
    dot,
    embedding,
    float32,
    float64,
    hcat,
    is_anomaly_enabled,
    is_grad_enabled,
    layer_norm,
    leaves,
    linear,
    multi_head_attention,
    rewind,
    softmax,
    vector,
    vmean,
    vsum,
)
from ._core import (  # noqa: F401  scalar ops as functions
    abs, add, add_squares, cos, div, exp, inner_product, inner_product_with_bias, inv, inv_sqrt,
    leaky_relu, log, mean, mean_squares, mul, mul_by_constant, neg, neg_log, negative_mean, pow,
    pow3, reduce_mean, reduce_mean_and_mean_squares, reduce_mean_squares, reduce_mul,
    reduce_negative_mean, reduce_sub, reduce_sum, reduce_sum_of_squares, relu, sigmoid, sin,
    softplus, sqr, sqrt, sub, tanh, variance, variance_biased,
)

__version__ = "0.1.0"

from .seeding import manual_seed  # noqa: E402,F401

# Optional tools load on first use, so `import burtorch` stays light (no numpy, no matplotlib).
_LAZY_MODULES = ("io", "viz", "views", "introspect", "nn", "optim", "data", "bench", "oracle", "trainer")


def __getattr__(name):
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in ("numpy_view", "load_array"):
        return getattr(importlib.import_module(".views", __name__), name)
    if name == "memory_report":
        return importlib.import_module(".introspect", __name__).memory_report
    if name == "grad_oracle":
        return importlib.import_module(".oracle", __name__).grad_oracle
    raise AttributeError(f"module 'burtorch' has no attribute {name!r}")
build_info = getattr(_core, "build_info", "unknown")


class scope:
    """``with bt.scope():`` discards every node created inside the block on exit.

    Nodes created before the block (parameters, inputs) survive; handles to nodes created inside
    become stale.
    """

    __slots__ = ("_arena", "_cp")

    def __init__(self, arena: Arena | None = None):
        self._arena = arena
        self._cp = None

    def __enter__(self) -> Checkpoint:
        self._cp = checkpoint(self._arena)
        return self._cp

    def __exit__(self, *exc) -> None:
        rewind(self._cp)


class _ThreadMode:
    """A per-thread mode of the core, entered as a context manager or used as a decorator."""

    _name = ""

    def __enter__(self):
        _core._push_mode(self._name, 1)
        return self

    def __exit__(self, *exc) -> None:
        _core._push_mode(self._name, -1)

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_ThreadMode):
    """``with bt.no_grad():`` ops compute values but append no records (PyTorch's name).

    Inside the block every op writes its result into a fresh leaf node: nothing can be swept
    backward through it and no argument lists are stored, so validation passes and sampling
    cost values only. Per thread; nests; also usable as a decorator (``@bt.no_grad()``).
    """

    _name = "no_grad"


class detect_anomaly(_ThreadMode):
    """``with bt.detect_anomaly():`` the first non-finite number raises :class:`AnomalyError`.

    Checked: the outputs of every op appended inside the block, and during a backward pass
    inside it, the grads each record contributes to its arguments. The error names the op, its
    record index and the node (with its label when labels are on). Off (the default) it costs
    nothing per record. Per thread; nests; also usable as a decorator.
    """

    _name = "anomaly"


def backward(root: Value, seed: float = 1.0, wrt=None) -> None:
    """Reverse sweep from ``root``; same as ``root.backward(seed, wrt)``."""
    if not isinstance(root, Value):
        raise TypeError(f"backward() expects a Value, got {type(root).__name__}")
    root.backward(seed, wrt)


def reserve(nodes: int, dtype=None) -> None:
    """Commits memory for ``nodes`` nodes in the thread's current arena of ``dtype`` up front."""
    if not isinstance(nodes, int) or nodes < 0:
        raise ValueError(f"reserve() expects a non-negative int, got {nodes!r}")
    current_arena(dtype).reserve(nodes)


def stats(dtype=None) -> dict:
    """Nodes, records and bytes by category of the thread's current arena of ``dtype``."""
    return current_arena(dtype).stats()


def zero_grad(values) -> None:
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

    While off (the default), ``label=`` arguments and ``v.label = ...`` store nothing, so labels
    cost no memory and no time.
    """

    def __init__(self, enabled: bool = True):
        self._previous = _core.labels_enabled()
        _core.set_labels(bool(enabled))

    def __enter__(self) -> "labels":
        return self

    def __exit__(self, *exc) -> None:
        _core.set_labels(self._previous)

    @staticmethod
    def enabled() -> bool:
        return _core.labels_enabled()
