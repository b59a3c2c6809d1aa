"""save / load / dumps / loads of the values and/or grads of Values, node ranges and views."""
from __future__ import annotations

import os
import threading

from .format import (FormatError, check_payload, check_what, decode_header, encode_header)
from .targets import check_alive, read_payload, resolve, write_payload

#: Files larger than this are memory-mapped by ``load(..., mmap=None)`` instead of read.
MMAP_THRESHOLD = 1 << 20


def dumps(values, what: str = "values") -> bytes:
    """The header and payload of ``values`` (see :mod:`burtorch.io.format`) as bytes."""
    t = resolve(values)
    payload = read_payload(t, check_what(what))
    return encode_header(t.dtype, what, t.count, payload) + payload


def loads(data, values, what: str | None = "values") -> None:
    """Loads bytes made by :func:`dumps` (or a file's content) into ``values``.

    ``what``: 'values', 'grads' or 'both' (the file must hold it; 'values' and 'grads' may be
    taken from a file that holds both), or None for whatever the file holds. Everything is checked
    before anything is written: on any error the arena is unchanged.
    """
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    _load_from_buffer(mv, len(mv), values, what)


def save(file, values, what: str = "values", *, atomic: bool = True) -> None:
    """Saves the values and/or grads of ``values`` to ``file`` (a path or a binary file object).

    With a path and ``atomic=True`` (the default) the data goes to a temporary file beside the
    target that is then renamed over it, so a crash never leaves a half-written file. On some
    filesystems (ext4) the rename costs far more than the write; ``atomic=False`` overwrites the
    file in place (a crash mid-write can leave a torn file, which ``load`` then rejects by its
    checksum).
    """
    t = resolve(values)
    payload = read_payload(t, check_what(what))
    header = encode_header(t.dtype, what, t.count, payload)
    if hasattr(file, "write"):
        file.write(header)
        file.write(payload)
        return
    path = os.fspath(file)
    if not atomic:
        _write_in_place(path, header, payload)
        return
    write_atomic(path, header, payload)


def write_atomic(path: str, header: bytes, payload) -> None:
    """Writes header + payload to a temporary file beside `path`, then renames it over `path`."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o644)
    try:
        try:
            _write_all(fd, header)
            _write_all(fd, payload)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load(file, values, what: str | None = "values", *, mmap: bool | None = None) -> None:
    """Loads a file made by :func:`save` into ``values`` (same positions, same count and dtype).

    ``file`` is a path or a binary file object. ``mmap=True`` maps the file instead of reading it
    (``None``: map files above ``MMAP_THRESHOLD`` bytes). All checks pass before a byte is written.
    """
    if hasattr(file, "read"):
        loads(file.read(), values, what)
        return
    path = os.fspath(file)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        size = os.fstat(fd).st_size
        if mmap or (mmap is None and size > MMAP_THRESHOLD):
            if size == 0:
                raise FormatError(f"not a burtorch file: {path} is empty")
            _load_mapped(fd, size, values, what)
            return
        data = _read_all(fd, size)
    finally:
        os.close(fd)
    _load_from_buffer(data, len(data), values, what)


def _load_mapped(fd: int, size: int, values, what) -> None:
    import mmap as mmap_module

    mapped = mmap_module.mmap(fd, size, access=mmap_module.ACCESS_READ)
    try:
        _load_from_buffer(mapped, size, values, what)
    finally:
        try:
            mapped.close()
        except BufferError:  # an exception's traceback still holds a slice; the GC unmaps it later
            pass


def _load_from_buffer(buf, size: int, values, what) -> None:
    header = decode_header(buf, size)
    if what is None:
        what = header.what
    else:
        check_what(what)
        if what != header.what and header.what != "both":
            raise FormatError(f"the file holds {header.what}, not {what}")
    if header.names is not None:
        raise FormatError("this file is a state dict; load it with burtorch.io.load_state_dict")
    t = resolve(values)
    if header.dtype != t.dtype:
        raise FormatError(f"the file holds {header.dtype} numbers, the targets are {t.dtype}")
    if header.count != t.count:
        raise FormatError(f"the file holds {header.count} nodes, the targets have {t.count}")
    payload = memoryview(buf)[header.header_size:header.header_size + header.payload_bytes]
    check_payload(header, payload)
    check_alive(t)
    if what != header.what:  # one block out of a values-then-grads file
        block = header.payload_bytes // 2
        payload = payload[block:] if what == "grads" else payload[:block]
    write_payload(t, payload, what, header.byteorder)


def _write_all(fd: int, data) -> None:
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]


def _write_in_place(path: str, header: bytes, payload: bytes) -> None:
    # No O_TRUNC: truncating to zero makes ext4 flush on close; shrink (if needed) after writing.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
    try:
        _write_all(fd, header)
        _write_all(fd, payload)
        os.ftruncate(fd, len(header) + len(payload))
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    data = os.read(fd, size + 1)  # one extra byte tells us if the file grew since fstat
    if len(data) == size:
        return data
    chunks = [data]
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
