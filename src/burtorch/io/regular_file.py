"""Reading files without trusting them: regular files only, never more than a stated bound.

A FIFO would block a load forever, ``/dev/zero`` would feed it without end, a directory reads as
an odd error; all are refused before a byte is read. Files are read into memory rather than
mapped: a file truncated by another process while mapped kills the reader with SIGBUS, while a
short read is just an error.
"""
from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import StrPath

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFileError(ValueError):
    """The path names a directory, a FIFO, a device or a socket where a regular file was expected."""


def open_regular(path: StrPath) -> tuple[int, int]:
    """Opens ``path`` for reading, refusing anything but a regular file.

    Returns:
        ``(fd, size)``; the caller closes ``fd``.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: a directory, FIFO, device or socket.
    """
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.fspath(path), flags)
    except IsADirectoryError:
        raise NotRegularFileError(f"{os.fspath(path)} is a directory, not a regular file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise NotRegularFileError(f"{os.fspath(path)} is {kind}, not a regular file")
        # O_NONBLOCK stays: it changes nothing for a regular file (reads never wait on one).
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_regular(path: StrPath, limit: int) -> bytes:
    """The whole content of the regular file ``path``, refusing files larger than ``limit`` bytes.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: not a regular file.
        ValueError: larger than ``limit`` (also when it grows past it while being read).
    """
    fd, size = open_regular(path)
    try:
        if size > limit:
            raise ValueError(f"{os.fspath(path)} is {size:,} bytes; the limit is {limit:,}")
        data = read_up_to(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{os.fspath(path)} grew past the limit of {limit:,} bytes while being read")
    return data


def read_up_to(fd: int, n: int) -> bytes:
    """Up to ``n`` bytes from ``fd``: fewer only at the end of the file."""
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
