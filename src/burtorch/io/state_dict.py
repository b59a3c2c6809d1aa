"""Model-level save/load: a state dict (name -> parameters) in the burtorch format with a name table.

Format choice: the same header as node ranges plus a name table (``flags`` bit 0), rather than
safetensors. Reasons: no extra dependency for a package whose core has none; one reader and one
set of corruption checks (both CRCs, sizes, counts) for every file burtorch writes; and the
payload is the concatenation of the parameters' slot ranges, so a load is a few memcpys. The
file stores each parameter as a flat run of numbers under its name; shapes are the model's (a
load into a module checks each parameter's element count), and :func:`load_state_dict` without a
target returns flat buffers (``numpy.asarray`` over them copies nothing).
"""
from __future__ import annotations

import array
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, overload

from ..node_selection import Nodes, Selection, select
from .atomic import write_atomic
from .format import (
    ITEMSIZE,
    FormatError,
    check_payload,
    decode_header,
    encode_header,
    encode_name_table,
    numbers_from_bytes,
    read_declared,
)
from .payload import read_payload, write_payload
from .regular_file import open_regular

if TYPE_CHECKING:
    from _typeshed import StrPath


class HasStateDict(Protocol):
    """A model: anything with ``state_dict()`` (a :class:`burtorch.nn.Module`)."""

    def state_dict(self) -> Mapping[str, Any]: ...


StateDictSource: TypeAlias = "HasStateDict | Mapping[str, Nodes]"
_Target = TypeVar("_Target", bound="HasStateDict | Mapping[str, Nodes]")


def _named_targets(module_or_mapping: StateDictSource) -> tuple[list[tuple[str, Selection]], str]:
    sd = module_or_mapping.state_dict() if hasattr(module_or_mapping, "state_dict") else module_or_mapping
    if not hasattr(sd, "items"):
        raise TypeError("expected a module with state_dict() or a mapping name -> Value/list/view, "
                        f"got {type(module_or_mapping).__name__}")
    named: list[tuple[str, Selection]] = []
    for name, target in sd.items():
        if not isinstance(name, str):
            raise TypeError(f"state dict names must be str, got {name!r}")
        named.append((name, select(target)))
    if not named:
        raise ValueError("the state dict is empty")
    dtype = named[0][1].dtype
    for name, t in named:
        if t.dtype != dtype:
            raise ValueError(f"state dict mixes dtypes: {named[0][0]!r} is {dtype}, {name!r} is {t.dtype}")
    return named, dtype


def state_dict_bytes(module_or_mapping: StateDictSource) -> bytes:
    """The bytes :func:`save_state_dict` writes: header, name table and every parameter's values.

    Args:
        module_or_mapping: a module with ``state_dict()``, or a mapping name -> Value, list of
            Values, range or Vector.

    Raises:
        TypeError, ValueError: not a state dict, an empty one, or one of mixed dtypes.
        StaleValueError: a parameter was discarded by a rewind.
    """
    named, dtype = _named_targets(module_or_mapping)
    payload = b"".join([read_payload(t, "values") for _, t in named])
    table = encode_name_table([(name, t.count) for name, t in named])
    return encode_header(dtype, "values", sum(t.count for _, t in named), payload, table) + payload


def save_state_dict(module_or_mapping: StateDictSource, path: StrPath, *, durable: bool = True) -> None:
    """Saves every parameter's values under its name to ``path``, atomically.

    Args:
        module_or_mapping: as :func:`state_dict_bytes`.
        path: the file; written through a temporary file and a rename (:mod:`burtorch.io.atomic`).
        durable: fsync before the rename.

    Raises:
        As :func:`state_dict_bytes`, and OSError when the file cannot be written.
    """
    write_atomic(os.fspath(path), (state_dict_bytes(module_or_mapping),), durable=durable)


@overload
def load_state_dict(path: StrPath, into: None = None, *, strict: bool = True) -> dict[str, array.array[float]]: ...
@overload
def load_state_dict(path: StrPath, into: _Target, *, strict: bool = True) -> _Target: ...
def load_state_dict(path: StrPath, into: _Target | None = None, *,
                    strict: bool = True) -> _Target | dict[str, array.array[float]]:
    """Reads a state dict file.

    Args:
        path: a regular file written by :func:`save_state_dict`.
        into: a module with ``state_dict()`` or a mapping name -> Value/list/range/Vector, or None.
        strict: with ``into``, every name must be in both the file and the targets.

    Returns:
        ``into`` after writing the values into it; without ``into``, ``{name: array.array}``
        ('f' for float32, 'd' for float64).

    Raises:
        FileNotFoundError, NotRegularFileError: no such regular file.
        FormatError: not a state dict file, corrupt, or not matching ``into`` (names, counts,
            dtype). Nothing is written unless every check passes.
        StaleValueError: a target was discarded by a rewind.
    """
    fd, size = open_regular(path)
    try:
        data = read_declared(lambda n: os.read(fd, n), size)
    finally:
        os.close(fd)
    return load_state_dict_bytes(data, into, strict=strict)


@overload
def load_state_dict_bytes(data: bytes | bytearray | memoryview, into: None = None, *,
                          strict: bool = True) -> dict[str, array.array[float]]: ...
@overload
def load_state_dict_bytes(data: bytes | bytearray | memoryview, into: _Target, *, strict: bool = True) -> _Target: ...
def load_state_dict_bytes(data: bytes | bytearray | memoryview, into: _Target | None = None, *,
                          strict: bool = True) -> _Target | dict[str, array.array[float]]:
    """:func:`load_state_dict` from the bytes :func:`state_dict_bytes` made."""
    header = decode_header(data, len(data))
    if header.names is None:
        raise FormatError("this file holds a node range, not a state dict; load it with burtorch.io.load")
    if header.what != "values":
        raise FormatError(f"a state dict file holds values, this one holds {header.what}")
    payload = memoryview(data)[header.header_size:]
    check_payload(header, payload)
    itemsize = ITEMSIZE[header.dtype]
    blocks: dict[str, memoryview] = {}
    pos = 0
    for name, count in header.names:
        blocks[name] = payload[pos:pos + count * itemsize]
        pos += count * itemsize
    if into is None:
        out: dict[str, array.array[float]] = {}
        for name, block in blocks.items():
            out[name] = numbers_from_bytes(header.dtype, block, header.byteorder)
        return out
    named, dtype = _named_targets(into)
    if dtype != header.dtype:
        raise FormatError(f"the file holds {header.dtype} parameters, the targets are {dtype}")
    wanted = dict(named)
    missing = [n for n in wanted if n not in blocks]
    unexpected = [n for n in blocks if n not in wanted]
    if strict and (missing or unexpected):
        raise FormatError(f"state dict names differ: missing in file {missing}, not in targets {unexpected}")
    for name, t in named:
        if name in blocks and t.count * itemsize != len(blocks[name]):
            raise FormatError(f"{name!r}: the file holds {len(blocks[name]) // itemsize} numbers, "
                              f"the target has {t.count}")
    for _, t in named:
        t.check_alive()
    for name, t in named:
        if name in blocks:
            write_payload(t, blocks[name], "values", header.byteorder)
    return into
