"""Zero-copy numpy arrays over nodes' values or grads, and bulk loading of numbers into nodes.

``numpy_view(x)`` accepts a Value, a list of Values, an ``(arena, first, last)`` range, or anything
with ``.arena`` and ``.spans`` (such as ``bt.Vector``). Contiguous nodes give a zero-copy array that
keeps the arena alive; nodes in several spans need ``copy=True`` (a plain copy, not linked).

When writing through a view is safe
-----------------------------------
Views are read-only unless ``writable=True``. Writing is safe for

* leaf values you own between steps: parameters (an optimizer update, an initialisation) and
  input leaves before you build the graph that reads them;
* grads of leaves, for example zeroing or scaling them between backward calls.

Writing is not safe for interior nodes (results of ops): backward uses the values the forward pass
wrote, so changing them makes gradients inconsistent with the graph; and interior grads are
overwritten by the next backward anyway. A view shows whatever the slots hold: after a rewind
below its range the slots belong to new nodes, so do not keep views across rewinds.
numpy is imported only when these functions are called.
"""
from __future__ import annotations

from ._core import Arena, StaleValueError, Value


def _spans(x):
    """(arena, [(first, last), ...]) of the nodes of ``x``, in order; checks Values are alive."""
    if isinstance(x, Value):
        if not x.alive:
            raise StaleValueError(f"the Value at slot {x.index} was discarded by a rewind")
        return x.arena, [(x.index, x.index + 1)]
    if isinstance(x, tuple) and len(x) == 3 and isinstance(x[0], Arena):
        arena, first, last = x
        if not (isinstance(first, int) and isinstance(last, int)) or not 0 <= first <= last <= arena.num_nodes:
            raise IndexError(f"node range [{first}, {last}) is outside the arena's {arena.num_nodes} nodes")
        return arena, [(first, last)]
    arena = getattr(x, "arena", None)
    spans = getattr(x, "spans", None)
    if isinstance(arena, Arena) and spans is not None:
        return arena, _merge([(first, first + length) for first, length in spans])
    if isinstance(x, (list, tuple)) and x and all(isinstance(v, Value) for v in x):
        arena = x[0].arena
        for v in x:
            if v.arena is not arena:
                raise ValueError("the Values belong to different arenas")
            if not v.alive:
                raise StaleValueError(f"the Value at slot {v.index} was discarded by a rewind")
        return arena, _merge([(v.index, v.index + 1) for v in x])
    raise TypeError("expected a Value, a list of Values, an (arena, first, last) range or a view with "
                    f".arena and .spans, got {type(x).__name__}")


def _merge(spans):
    out = []
    for first, last in spans:
        if out and out[-1][1] == first:
            out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


def _check_what(what):
    if what not in ("values", "grads"):
        raise ValueError(f"what must be 'values' or 'grads', got {what!r}")


def numpy_view(x, what: str = "values", writable: bool = False, copy: bool = False):
    """A 1-D numpy array over the values (or grads) of the nodes of ``x``.

    Zero-copy when the nodes are one contiguous span; with several spans, raises ValueError
    unless ``copy=True``, which returns a fresh array (writes to it do not reach the arena).
    """
    _check_what(what)
    arena, spans = _spans(x)
    if len(spans) == 1:
        first, last = spans[0]
        return arena.numpy(first, last, what, writable)
    if not copy:
        raise ValueError(f"these nodes lie in {len(spans)} separate spans, so no single zero-copy array "
                         "covers them; pass copy=True for a copy, or take a view of each span")
    import numpy as np

    return np.concatenate([arena.numpy(first, last, what, False) for first, last in spans])


def load_array(x, data, what: str = "values") -> None:
    """Copies numbers (a numpy array, a list, any buffer) into the values or grads of ``x`` in bulk.

    The length must equal the number of nodes; numbers are converted to the arena's dtype. Checks
    everything before writing anything. The same safety rules as writable views apply.
    """
    import numpy as np

    _check_what(what)
    arena, spans = _spans(x)
    dtype = np.float32 if arena.dtype.name == "float32" else np.float64
    array = np.ascontiguousarray(data, dtype=dtype).reshape(-1)  # no copy if already right
    count = sum(last - first for first, last in spans)
    if array.size != count:
        raise ValueError(f"{array.size} numbers for {count} nodes")
    pos = 0
    for first, last in spans:
        arena.write_bytes(first, array[pos:pos + last - first], what)
        pos += last - first
