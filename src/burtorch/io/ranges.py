"""save / load / dumps / loads of the values and/or grads of Values, node ranges and views."""
from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from ..node_selection import Nodes, Selection, select
from .atomic import write_all, write_atomic
from .format import (
    FIXED_SIZE,
    FormatError,
    check_payload,
    check_what,
    decode_header,
    encode_header,
    payload_size,
    read_declared,
)
from .payload import read_payload, write_payload
from .regular_file import NotRegularFileError, open_regular

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, StrPath, SupportsRead, SupportsWrite


def dumps(values: Nodes, what: str = "values") -> bytes:
    """The header and payload of ``values`` as bytes (the layout of :mod:`burtorch.io.format`).

    Args:
        values: a Value, a list of Values, an ``(arena, first, last)`` range, a Vector, or a list
            of those.
        what: ``"values"``, ``"grads"`` or ``"both"``.

    Returns:
        The bytes a file written by :func:`save` would hold.

    Raises:
        TypeError, ValueError, IndexError: ``values`` or ``what`` is not one of the accepted forms.
        StaleValueError: a Value or Vector was discarded by a rewind.
    """
    t = select(values)
    payload = read_payload(t, check_what(what))
    return encode_header(t.dtype, what, t.count, payload) + payload


def loads(data: ReadableBuffer, values: Nodes, what: str | None = "values") -> None:
    """Loads bytes made by :func:`dumps` (or a file's content) into ``values``.

    Args:
        data: a bytes-like object.
        values: the targets, in the forms :func:`dumps` takes; same count and dtype as the data.
        what: ``"values"``, ``"grads"`` or ``"both"`` (the data must hold it; ``"values"`` and
            ``"grads"`` may be taken from data that holds both), or None for whatever it holds.

    Raises:
        FormatError: the data is not a burtorch file, is corrupt, or does not match the targets.
            Everything is checked before anything is written: on any error the arena is unchanged.
        StaleValueError: a target was discarded by a rewind.
    """
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    _load_from_buffer(mv, len(mv), select(values), what)


def save(file: StrPath | SupportsWrite[bytes], values: Nodes, what: str = "values", *, atomic: bool = True,
         durable: bool = True) -> None:
    """Saves the values and/or grads of ``values`` to ``file``.

    Args:
        file: a path, or a binary file object (written at its position, nothing else done).
        values: a Value, a list of Values, an ``(arena, first, last)`` range, a Vector, or a list
            of those.
        what: ``"values"``, ``"grads"`` or ``"both"``.
        atomic: write a temporary file beside the target and rename it over the target (see
            :mod:`burtorch.io.atomic`), so a crash leaves the old file or the new one, never a torn
            one. ``atomic=False`` overwrites in place: faster on filesystems where a rename is
            costly, and a torn file is then rejected by :func:`load` through its checksums.
        durable: with ``atomic``, fsync before the rename, so the new file survives a power loss.

    Raises:
        TypeError, ValueError, IndexError, StaleValueError: as :func:`dumps`.
        OSError: the file cannot be written (the old file is then left as it was).
    """
    t = select(values)
    payload = read_payload(t, check_what(what))
    header = encode_header(t.dtype, what, t.count, payload)
    if hasattr(file, "write"):
        file.write(header)
        file.write(payload)
        return
    path = os.fspath(file)
    if atomic:
        write_atomic(path, (header, payload), durable=durable)
    else:
        _write_in_place(path, header, payload)


def load(file: StrPath | SupportsRead[bytes], values: Nodes, what: str | None = "values") -> None:
    """Loads a file made by :func:`save` into ``values`` (same positions, same count and dtype).

    Args:
        file: a path to a regular file, or a binary file object.
        values: the targets, in the forms :func:`save` takes.
        what: as in :func:`loads`.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: the path is a directory, FIFO, device or socket.
        FormatError: not a burtorch file, corrupt, or not matching the targets. No more than the
            header declares (and the targets can hold) is ever read, and nothing is written into
            the arena unless every check passes.
        StaleValueError: a target was discarded by a rewind.
    """
    t = select(values)
    limit = FIXED_SIZE + payload_size(t.dtype, "both", t.count)  # a range file has no name table
    if hasattr(file, "read"):
        data = read_declared(file.read, None, limit)
    else:
        fd, size = open_regular(file)
        try:
            data = read_declared(lambda n: os.read(fd, n), size, limit)
        finally:
            os.close(fd)
    _load_from_buffer(data, len(data), t, what)


def _load_from_buffer(buf: ReadableBuffer, size: int, t: Selection, what: str | None) -> None:
    header = decode_header(buf, size)
    if what is None:
        what = header.what
    else:
        check_what(what)
        if what != header.what and header.what != "both":
            raise FormatError(f"the file holds {header.what}, not {what}")
    if header.names is not None:
        raise FormatError("this file is a state dict; load it with burtorch.io.load_state_dict")
    if header.dtype != t.dtype:
        raise FormatError(f"the file holds {header.dtype} numbers, the targets are {t.dtype}")
    if header.count != t.count:
        raise FormatError(f"the file holds {header.count} nodes, the targets have {t.count}")
    payload = memoryview(buf)[header.header_size:header.header_size + header.payload_bytes]
    check_payload(header, payload)
    t.check_alive()
    if what != header.what:  # one block out of a values-then-grads file
        block = header.payload_bytes // 2
        payload = payload[block:] if what == "grads" else payload[:block]
    write_payload(t, payload, what, header.byteorder)


def _write_in_place(path: str, header: bytes, payload: bytes) -> None:
    # No O_TRUNC: truncating to zero makes ext4 flush on close; shrink (if needed) after writing.
    # O_NONBLOCK: a FIFO without a reader fails at once instead of blocking the save.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(f"{path} is not a regular file; not overwriting it in place")
        os.set_blocking(fd, True)
        write_all(fd, header)
        write_all(fd, payload)
        os.ftruncate(fd, len(header) + len(payload))
    finally:
        os.close(fd)
