"""Moving numbers between a :class:`~burtorch.node_selection.Selection` and a file's payload.

A selection made only of Values takes a fast path (one struct pack or unpack for the whole list),
which keeps the Python work of a small save to one call; other selections copy each
contiguous segment with one native call.
"""
from __future__ import annotations

import array
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..node_selection import Selection
from .format import ITEMSIZE, NATIVE_BYTEORDER, numbers_from_bytes, numbers_to_bytes

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_STRUCTS: dict[tuple[str, int, int], struct.Struct] = {}


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


def read_payload(t: Selection, what: str) -> bytes:
    """The native-order payload of the targets: values, grads, or values then grads."""
    if t.values is not None and t.dtype in ("bfloat16", "float16"):  # no struct code for bfloat16
        parts = ("values", "grads") if what == "both" else (what,)
        return b"".join(numbers_to_bytes(t.dtype, [v.data if p == "values" else v.grad for v in t.values])
                        for p in parts)
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


def _read_segments(t: Selection, what: str) -> bytes:
    t.check_alive()
    segments = t.segments or []
    if len(segments) == 1:
        arena, first, last, _ = segments[0]
        return arena.read_bytes(first, last, what)
    return b"".join([arena.read_bytes(first, last, what) for arena, first, last, _ in segments])


def write_payload(t: Selection, payload: ReadableBuffer, what: str, byteorder: int) -> None:
    """Writes a checked payload (bytes-like, ``what`` blocks in ``byteorder``) into the targets."""
    block = t.count * ITEMSIZE[t.dtype]
    parts = [("values", 0), ("grads", block)] if what == "both" else [(what, 0)]
    if t.values is not None:
        for part, offset in parts:
            numbers: Sequence[float]
            if t.dtype in ("bfloat16", "float16"):
                numbers = numbers_from_bytes(t.dtype, memoryview(payload)[offset:offset + block], byteorder)
            else:
                numbers = value_struct(t.dtype, t.count, byteorder).unpack_from(payload, offset)
            if part == "values":
                for v, x in zip(t.values, numbers):
                    v.data = x
            else:
                for v, x in zip(t.values, numbers):
                    v.grad = x
        return
    mv = memoryview(payload)
    if byteorder != NATIVE_BYTEORDER:  # rare: a file from a machine of the other endianness
        swapped = array.array({"float32": "f", "float64": "d"}.get(t.dtype, "H"))
        swapped.frombytes(mv[: block * len(parts)])
        swapped.byteswap()
        mv = memoryview(swapped).cast("B")
    itemsize = ITEMSIZE[t.dtype]
    for part, offset in parts:
        pos = offset
        for arena, first, last, _ in t.segments or ():
            n = (last - first) * itemsize
            arena.write_bytes(first, mv[pos:pos + n], part)
            pos += n
