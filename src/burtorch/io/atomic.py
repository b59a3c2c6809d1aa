"""The one atomic writer behind every save: a whole new file or the old one, never a torn one.

The data goes to a temporary file created beside the destination the way ``mkstemp`` creates
one (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600, an unpredictable name), so a symlink planted
under a guessable name cannot redirect the write. It is then given the destination's mode (new
files get the umask's default), flushed to disk (``durable``), and renamed over the destination
with ``os.replace``. Any exception removes the temporary file.

A process killed mid-save (``kill -9``, power loss) cannot remove its temporary file, so its name
carries the writer's pid; the first save of a process into a directory removes the temporary
files there whose writer no longer runs.
"""
from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..platform import EXCLUSIVE_CREATE_FLAGS
from .regular_file import _KINDS, NotRegularFileError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, StrPath

SUFFIX = ".burtorch-tmp"
_ORPHAN = re.compile(r"^\..*\.(\d+)\.[0-9a-f]{12}" + re.escape(SUFFIX) + "$")
_MAX_NAME_IN_TEMP = 96  # keeps temp names under NAME_MAX whatever the destination's name

_TEMP_FLAGS = EXCLUSIVE_CREATE_FLAGS
_TEMP_MODE = 0o600
_swept: set[str] = set()
_swept_lock = threading.Lock()


def write_atomic(path: StrPath, chunks: Iterable[ReadableBuffer], *, durable: bool = True) -> None:
    """Writes the bytes-like ``chunks`` in order to ``path``, atomically.

    Args:
        path: the destination (str or path-like); its directory must exist.
        chunks: an iterable of bytes-like objects.
        durable: fsync the file before the rename and the directory after it, so the new content
            survives a power loss once this returns. Without it the rename is still atomic for
            other processes, but a crash of the machine may leave the old content.

    Raises:
        OSError: the directory is missing or not writable, the disk is full, ...; the destination
            is then unchanged and no temporary file is left.
        NotRegularFileError: the destination is a directory, FIFO, device or socket (left as is).
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    _refuse_special(path)
    remove_orphans(directory, once=True)
    mode = _mode_for(path)
    fd, tmp = _create_temp(directory, name)
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            if mode != _TEMP_MODE:
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        _refuse_special(path)  # again: one may have been made there while the data was written
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        _fsync_directory(directory)


def _refuse_special(path: str) -> None:
    """Raises NotRegularFileError when ``path`` is a directory, FIFO, device or socket: the rename
    would replace it with a regular file (a FIFO a reader waits on, /dev/null when run as root).
    A symlink is the link itself, which the rename replaces, as it replaces a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise NotRegularFileError(f"{path} is {kind}; a save replaces only regular files")


def _create_temp(directory: str, name: str) -> tuple[int, str]:
    """Creates a new temporary file as ``tempfile.mkstemp`` does (exclusive, not through a link,
    mode 0600, a random name), named so that :func:`remove_orphans` can tell whose it is."""
    prefix = os.path.join(directory, f".{name[:_MAX_NAME_IN_TEMP]}.{os.getpid()}.")
    for _ in range(100):
        tmp = prefix + os.urandom(6).hex() + SUFFIX
        try:
            return os.open(tmp, _TEMP_FLAGS, _TEMP_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


def remove_orphans(directory: str, once: bool = False) -> list[str]:
    """Removes the temporary files in ``directory`` left by saves whose process is gone.

    Args:
        directory: where to look.
        once: do nothing if this process already swept ``directory``.

    Returns:
        The names removed.
    """
    directory = os.path.abspath(directory)
    if once:
        with _swept_lock:
            if directory in _swept:
                return []
            _swept.add(directory)
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    me = os.getpid()
    for entry in entries:
        m = _ORPHAN.match(entry.name)
        if m is None or int(m.group(1)) == me or _alive(int(m.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or a pid we cannot judge: leave its file alone
    return True


def _mode_for(path: str) -> int:
    """The destination's permission bits, or the umask's default for a new file."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux shows it without changing it (os.umask would, briefly, for every thread)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_all(fd: int, data: ReadableBuffer) -> None:
    """Writes all of ``data`` (bytes-like) to ``fd``, however many calls it takes."""
    mv = memoryview(data).cast("B")
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]


def _fsync_directory(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # not every platform lets a directory be opened; the file itself is synced
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
