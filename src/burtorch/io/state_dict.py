"""Model-level save/load: a state dict (name -> parameters) in the burtorch format with a name table.

Format choice: the same header as node ranges plus a name table (``flags`` bit 0), rather than
safetensors. Reasons: no extra dependency for a package whose core has none; one reader and one
set of corruption checks (both CRCs, sizes, counts) for every file burtorch writes; and the
payload is the concatenation of the parameters' slot ranges, so a load is a few memcpys. A
state dict maps names to 1-D runs of numbers (burtorch has no shapes), so the only thing
safetensors would add is interchange, which ``numpy`` / ``torch`` users get from
:func:`load_state_dict` returning buffers (``numpy.asarray`` over them copies nothing).
"""
from __future__ import annotations

import array
import os

from .format import (FormatError, check_payload, decode_header, encode_header, encode_name_table)
from .ranges import _read_all, write_atomic
from .targets import ITEMSIZE, NATIVE_BYTEORDER, check_alive, read_payload, resolve, write_payload


def _named_targets(module_or_mapping):
    sd = module_or_mapping.state_dict() if hasattr(module_or_mapping, "state_dict") else module_or_mapping
    if not hasattr(sd, "items"):
        raise TypeError("expected a module with state_dict() or a mapping name -> Value/list/view, "
                        f"got {type(module_or_mapping).__name__}")
    named = []
    for name, target in sd.items():
        if not isinstance(name, str):
            raise TypeError(f"state dict names must be str, got {name!r}")
        named.append((name, resolve(target)))
    if not named:
        raise ValueError("the state dict is empty")
    dtype = named[0][1].dtype
    for name, t in named:
        if t.dtype != dtype:
            raise ValueError(f"state dict mixes dtypes: {named[0][0]!r} is {dtype}, {name!r} is {t.dtype}")
    return named, dtype


def save_state_dict(module_or_mapping, path) -> None:
    """Saves every parameter's values under its name to ``path`` (temp file, then rename)."""
    named, dtype = _named_targets(module_or_mapping)
    payload = b"".join([read_payload(t, "values") for _, t in named])
    table = encode_name_table([(name, t.count) for name, t in named])
    header = encode_header(dtype, "values", sum(t.count for _, t in named), payload, table)
    write_atomic(os.fspath(path), header, payload)


def load_state_dict(path, into=None, *, strict: bool = True):
    """Reads a state dict file.

    Without ``into``: returns ``{name: array.array}`` ('f' for float32, 'd' for float64).
    With ``into`` (a module with ``state_dict()`` or a mapping name -> Value/list/view): checks
    names (all of them when ``strict``), counts, dtype and liveness, then writes the values into
    the targets and returns ``into``. Nothing is written if any check fails.
    """
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        data = _read_all(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    header = decode_header(data, len(data))
    if header.names is None:
        raise FormatError("this file holds a node range, not a state dict; load it with burtorch.io.load")
    if header.what != "values":
        raise FormatError(f"a state dict file holds values, this one holds {header.what}")
    payload = memoryview(data)[header.header_size:]
    check_payload(header, payload)
    itemsize = ITEMSIZE[header.dtype]
    blocks = {}
    pos = 0
    for name, count in header.names:
        blocks[name] = payload[pos:pos + count * itemsize]
        pos += count * itemsize
    if into is None:
        out = {}
        for name, block in blocks.items():
            arr = array.array("f" if header.dtype == "float32" else "d")
            arr.frombytes(block)
            if header.byteorder != NATIVE_BYTEORDER:
                arr.byteswap()
            out[name] = arr
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
        check_alive(t)
    for name, t in named:
        if name in blocks:
            write_payload(t, blocks[name], "values", header.byteorder)
    return into
