"""Zero-copy numpy arrays over nodes' values or grads, and bulk loading of numbers into nodes.

``numpy_view(x)`` accepts a Value, a list of Values, an ``(arena, first, last)`` range or a
``bt.Vector`` (see :mod:`burtorch.node_selection`); stale Values and Vectors are refused.
Contiguous nodes give a zero-copy array that keeps the arena alive; nodes in several spans need
``copy=True`` (a plain copy, not linked). A Vector's array has the Vector's shape, as
``Vector.numpy()`` has; every other selection gives a 1-D array.

When writing through a view is safe
-----------------------------------
Views are read-only unless ``writable=True``. Writing is safe for

* leaf values you own between steps: parameters (an optimizer update, an initialisation) and
  input leaves before you build the graph that reads them;
* grads of leaves, for example zeroing or scaling them between backward calls.

Writing is not safe for interior nodes (results of ops): backward uses the values the forward pass
wrote, so changing them makes gradients inconsistent with the graph. Interior grads are zeroed by
the next backward that sweeps their records (before it accumulates into them), so what a view
shows there is the last sweep's result until then. A view shows whatever the slots hold: after a
rewind below its range the slots belong to new nodes, so do not keep views across rewinds.
numpy is imported only when these functions are called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ._core import Vector
from .node_selection import Nodes, select

if TYPE_CHECKING:
    import numpy as np


def _check_what(what: str) -> None:
    if what not in ("values", "grads"):
        raise ValueError(f"what must be 'values' or 'grads', got {what!r}")


def numpy_view(x: Nodes, what: str = "values", writable: bool = False, copy: bool = False) -> np.ndarray:
    """A numpy array over the values (or grads) of the nodes of ``x``: of the Vector's shape for a
    ``bt.Vector`` (a (4, 1024) weight gives a (4, 1024) array, a 1-D Vector a 1-D one), 1-D for
    every other selection.

    Args:
        x: a Value, a list of Values, an ``(arena, first, last)`` range or a Vector, of one arena.
        what: ``"values"`` or ``"grads"``.
        writable: allow writing through the array (see the module docstring for when it is safe).
        copy: for nodes in several spans, return a fresh array (writes do not reach the arena).

    Returns:
        A zero-copy array that keeps the arena alive (one contiguous span), or a copy.

    Raises:
        ValueError: several spans without ``copy=True``, nodes of several arenas, or a bad ``what``.
        StaleValueError: a Value or Vector discarded by a rewind.
    """
    _check_what(what)
    arena, spans = select(x).single_arena()
    if len(spans) == 1:
        first, last = spans[0]
        flat = cast("np.ndarray", arena.numpy(first, last, what, writable))  # numpy() is typed Any: numpy is optional
    elif not copy:
        raise ValueError(f"these nodes lie in {len(spans)} separate spans, so no single zero-copy array "
                         "covers them; pass copy=True for a copy, or take a view of each span")
    else:
        import numpy as np

        flat = np.concatenate([arena.numpy(first, last, what, False) for first, last in spans])
    # a Vector's spans run in its row-major order, so the flat array reshapes without a copy
    return flat.reshape(x.shape) if isinstance(x, Vector) and len(x.shape) > 1 else flat


def load_array(x: Nodes, data: Any, what: str = "values") -> None:
    """Copies numbers into the values or grads of the nodes of ``x`` in bulk.

    Numbers are converted to the arena's dtype; everything is checked before anything is
    written. The same safety rules as writable views apply.

    Args:
        x: the nodes, in the forms :func:`numpy_view` takes.
        data: a numpy array, a list, or any buffer of as many numbers as there are nodes.
        what: ``"values"`` or ``"grads"``.

    Raises:
        ValueError: a count mismatch, nodes of several arenas, or a bad ``what``.
        TypeError: ``data`` holds something other than real numbers (None, strings, bools).
        StaleValueError: a Value or Vector discarded by a rewind.
    """
    import numpy as np

    _check_what(what)
    selection = select(x)
    arena, spans = selection.single_arena()
    array = np.asarray(data)
    # only real numbers convert: numpy would turn None into NaN, and strings or bools into numbers
    if array.dtype.kind not in "fiu":
        raise TypeError(f"load_array() needs real numbers, got an array of dtype {array.dtype}")
    if arena.dtype.name == "bfloat16":
        array = _bfloat16_bits(np.asarray(array, dtype=np.float64).reshape(-1))
    else:  # numpy rounds float64 to float32 and float16 once, to nearest even, as the arena does
        dtype = {"float32": np.float32, "float16": np.float16}.get(arena.dtype.name, np.float64)
        array = np.ascontiguousarray(array, dtype=dtype).reshape(-1)  # no copy if already right
    count = sum(last - first for first, last in spans)
    if array.size != count:
        raise ValueError(f"{array.size} numbers for {count} nodes")
    selection.check_alive()
    pos = 0
    for first, last in spans:
        arena.write_bytes(first, array[pos:pos + last - first], what)
        pos += last - first


def _bfloat16_bits(x: Any) -> Any:
    """float64 numbers rounded once to nearest-even bfloat16, as uint16 bit patterns (what a
    bfloat16 arena stores; numpy has no bfloat16). Through float32 rounded "to odd", which makes
    the second rounding give the correctly rounded result; NaN stays a quiet NaN."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        bits = f.view(np.uint32).astype(np.uint64)
        inexact = (f.astype(np.float64) != x) & np.isfinite(f)
        away = np.abs(x) > np.abs(f.astype(np.float64))  # x lies beyond f, away from zero
        even = (bits & 1) == 0
        bits = np.where(inexact & even, np.where(away, bits + 1, bits - 1), bits)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        nan = np.isnan(x)
        rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return np.ascontiguousarray(rounded.astype(np.uint16))
