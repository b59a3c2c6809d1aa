"""The OS layer of the Python package: what differs between POSIX (Linux, macOS) and Windows.

Everything OS-specific in the Python code goes through here: the flags that create a temporary
file exclusively (io/atomic.py), the signals that ask the trainer to stop after its step and
checkpoint (cli/interrupt.py), and the machine's memory (cli/machine.py). The C++ core's
counterpart is csrc/platform.hpp (memory mapping, huge pages).
"""
from __future__ import annotations

import os
import sys

WINDOWS = sys.platform == "win32"

# Creating a temporary file the way mkstemp does: fails if the name exists, never follows a
# symlink planted under it (POSIX; Windows creates no symlink by default), not inherited by child
# processes, and binary on Windows (no newline translation).
EXCLUSIVE_CREATE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOINHERIT", 0)
                          | getattr(os, "O_BINARY", 0))

# Signals that ask a training run to stop at its next step boundary: Ctrl-C everywhere, SIGTERM
# (what `kill` and service managers send) on POSIX, Ctrl-Break on Windows, which delivers no
# SIGTERM from outside the process.
STOP_SIGNALS = ("SIGINT", "SIGBREAK") if WINDOWS else ("SIGINT", "SIGTERM")


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the OS does not say."""
    if WINDOWS:
        import ctypes

        class _MemoryStatus(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                        ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                        ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                        ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                        ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

        status = _MemoryStatus()
        status.dwLength = ctypes.sizeof(status)
        ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
        return int(status.ullTotalPhys) if ok else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # macOS has no SC_PHYS_PAGES on some versions
        return None
