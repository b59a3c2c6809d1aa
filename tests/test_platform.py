"""burtorch.platform: the OS layer's answers on this host (POSIX here; the Windows branches are
chosen by sys.platform and are not run here)."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from burtorch import platform


def test_stop_signals_exist_on_this_os():
    assert platform.STOP_SIGNALS[0] == "SIGINT"
    for name in platform.STOP_SIGNALS:
        assert isinstance(getattr(signal, name), signal.Signals)


def test_exclusive_create_refuses_an_existing_name(tmp_path):
    path = tmp_path / "f.tmp"
    fd = os.open(path, platform.EXCLUSIVE_CREATE_FLAGS, 0o600)
    os.write(fd, b"x")
    os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(path, platform.EXCLUSIVE_CREATE_FLAGS, 0o600)
    assert path.read_bytes() == b"x"


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need a privilege on Windows")
def test_exclusive_create_never_follows_a_planted_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    link = tmp_path / "f.tmp"
    link.symlink_to(target)
    with pytest.raises(OSError):
        os.open(link, platform.EXCLUSIVE_CREATE_FLAGS, 0o600)
    assert target.read_bytes() == b"keep"


def test_physical_memory_is_the_machines():
    mem = platform.physical_memory()
    if sys.platform.startswith("linux"):
        with open("/proc/meminfo", encoding="ascii") as f:
            total_kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
        # MemTotal leaves out what the kernel reserved at boot: within a few percent of the pages
        assert mem is not None and 0.9 < total_kib * 1024 / mem <= 1.0
    else:
        assert mem is None or mem > 0
