"""What a save reads from and a load writes into: Values, node ranges and views, in payload order.

Accepted forms (and lists of them, in any mix):

* a ``Value``;
* ``(arena, first, last)``: nodes ``[first, last)`` of an arena;
* anything with ``.arena`` and ``.spans`` (a list of ``(first, length)``), such as ``bt.Vector``.

A list made only of Values takes a fast path (one struct pack or unpack for the whole list), which
is what keeps a W3-sized save at a few microseconds of Python.
"""
from __future__ import annotations

import array
import struct

from .._core import Arena, StaleValueError, Value
from .format import ITEMSIZE, NATIVE_BYTEORDER

_STRUCTS: dict = {}


def value_struct(dtype: str, count: int, byteorder: int) -> struct.Struct:
    """A cached Struct packing ``count`` numbers of ``dtype`` in the given byte order."""
    key = (dtype, count, byteorder)
    s = _STRUCTS.get(key)
    if s is None:
        if len(_STRUCTS) > 256:
            _STRUCTS.clear()
        s = struct.Struct(("<" if byteorder == 0 else ">") + str(count) + ("f" if dtype == "float32" else "d"))
        _STRUCTS[key] = s
    return s


class Targets:
    """Resolved targets: ``values`` (fast path: a list of Values) or ``segments``.

    ``segments`` is a list of ``(arena, first, last, handle)`` where ``handle`` is the Value the
    segment came from (so its liveness can be checked) or None for a range or a view's span.
    """

    __slots__ = ("dtype", "count", "values", "segments", "views")

    def __init__(self, dtype, count, values, segments, views=()):
        self.dtype = dtype
        self.count = count
        self.values = values
        self.segments = segments
        self.views = views  # views with an .alive flag (bt.Vector), checked before reading or writing


def resolve(targets) -> Targets:
    if type(targets) is list or type(targets) is tuple:
        if targets and all(type(v) is Value for v in targets):
            dtype = targets[0].dtype
            for v in targets:
                if v.dtype is not dtype:
                    raise ValueError(f"cannot mix dtypes in one save/load: {dtype.name} and {v.dtype.name}")
            return Targets(dtype.name, len(targets), targets, None)
        if _is_range(targets):
            segments = [_range_segment(targets)]
        elif not targets:
            raise ValueError("nothing to save or load: the list of targets is empty")
        else:
            segments = []
            for item in targets:
                segments.extend(_segments_of(item))
    else:
        segments = _segments_of(targets)
        targets = (targets,)
    views = [item for item in targets if type(item) is not Value and hasattr(item, "alive")
             and hasattr(item, "spans")]
    dtype = segments[0][0].dtype
    count = 0
    for arena, first, last, _ in segments:
        if arena.dtype is not dtype:
            raise ValueError(f"cannot mix dtypes in one save/load: {dtype.name} and {arena.dtype.name}")
        count += last - first
    return Targets(dtype.name, count, None, _coalesce(segments), views)


def _is_range(obj) -> bool:
    return type(obj) is tuple and len(obj) == 3 and isinstance(obj[0], Arena)


def _range_segment(t):
    arena, first, last = t
    if not isinstance(first, int) or not isinstance(last, int):
        raise TypeError(f"a node range is (arena, first, last) with int bounds, got {t!r}")
    if first < 0 or last < first or last > arena.num_nodes:
        raise IndexError(f"node range [{first}, {last}) is outside the arena's {arena.num_nodes} nodes")
    return (arena, first, last, None)


def _segments_of(item) -> list:
    if type(item) is Value:
        return [(item.arena, item.index, item.index + 1, item)]
    if _is_range(item):
        return [_range_segment(item)]
    arena = getattr(item, "arena", None)
    spans = getattr(item, "spans", None)
    if isinstance(arena, Arena) and spans is not None:
        return [_range_segment((arena, first, first + length)) for first, length in spans]
    raise TypeError("expected a Value, a list of Values, an (arena, first, last) range or a view "
                    f"with .arena and .spans, got {type(item).__name__}")


def _coalesce(segments) -> list:
    """Merges neighbouring ranges of one arena so each needs one native copy (Values stay apart)."""
    out = []
    for seg in segments:
        if out:
            arena, first, last, handle = out[-1]
            if seg[0] is arena and handle is None and seg[3] is None and seg[1] == last:
                out[-1] = (arena, first, seg[2], None)
                continue
        out.append(seg)
    return out


def check_alive(t: Targets) -> None:
    """Raises unless every target still exists (nothing is written before this passes)."""
    if t.values is not None:
        for v in t.values:
            if not v.alive:
                raise StaleValueError(f"cannot load into Value at slot {v.index}: it was discarded by a rewind")
        return
    _check_views(t)
    for arena, first, last, handle in t.segments:
        if handle is not None:
            if not handle.alive:
                raise StaleValueError(f"cannot load into Value at slot {first}: it was discarded by a rewind")
        elif last > arena.num_nodes:
            raise IndexError(f"node range [{first}, {last}) is outside the arena's {arena.num_nodes} nodes "
                             "(was it rewound?)")


def _check_views(t: Targets) -> None:
    for view in t.views:
        if not view.alive:
            spans = list(view.spans)
            where = f"slot {spans[0][0]}" if spans else "no slots"
            raise StaleValueError(f"a view of {len(spans)} span(s) from {where} was discarded by a rewind")


def read_payload(t: Targets, what: str) -> bytes:
    """The native-order payload of the targets: values, grads, or values then grads."""
    if t.values is not None:
        s = value_struct(t.dtype, t.count, NATIVE_BYTEORDER)
        if what == "values":
            return s.pack(*[v.data for v in t.values])
        if what == "grads":
            return s.pack(*[v.grad for v in t.values])
        return s.pack(*[v.data for v in t.values]) + s.pack(*[v.grad for v in t.values])
    if what == "both":
        return _read_segments(t, "values") + _read_segments(t, "grads")
    return _read_segments(t, what)


def _read_segments(t: Targets, what: str) -> bytes:
    _check_views(t)
    for arena, first, last, handle in t.segments:
        if handle is not None and not handle.alive:
            raise StaleValueError(f"cannot save Value at slot {first}: it was discarded by a rewind")
    if len(t.segments) == 1:
        arena, first, last, _ = t.segments[0]
        return arena.read_bytes(first, last, what)
    return b"".join([arena.read_bytes(first, last, what) for arena, first, last, _ in t.segments])


def write_payload(t: Targets, payload, what: str, byteorder: int) -> None:
    """Writes a checked payload (bytes-like, ``what`` blocks in ``byteorder``) into the targets."""
    block = t.count * ITEMSIZE[t.dtype]
    parts = [("values", 0), ("grads", block)] if what == "both" else [(what, 0)]
    if t.values is not None:
        s = value_struct(t.dtype, t.count, byteorder)
        for part, offset in parts:
            numbers = s.unpack_from(payload, offset)
            if part == "values":
                for v, x in zip(t.values, numbers):
                    v.data = x
            else:
                for v, x in zip(t.values, numbers):
                    v.grad = x
        return
    mv = memoryview(payload)
    if byteorder != NATIVE_BYTEORDER:  # rare: a file from a machine of the other endianness
        swapped = array.array("f" if t.dtype == "float32" else "d")
        swapped.frombytes(mv[: block * len(parts)])
        swapped.byteswap()
        mv = memoryview(swapped).cast("B")
    itemsize = ITEMSIZE[t.dtype]
    for part, offset in parts:
        pos = offset
        for arena, first, last, _ in t.segments:
            n = (last - first) * itemsize
            arena.write_bytes(first, mv[pos:pos + n], part)
            pos += n
