"""Files on disk: loaders refuse what is not a regular file, the atomic writer cannot be redirected,
keeps modes, leaves nothing behind, and a save killed midway leaves the old file intact."""
import os
import stat
import subprocess
import sys
import textwrap

import pytest

import burtorch as bt
import burtorch.io as bio
from burtorch import data
from burtorch.cli import checkpoint
from burtorch.io import NotRegularFileError
from burtorch.io.atomic import SUFFIX, remove_orphans

needs_posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _values(n=4):
    arena = bt.Arena(bt.float64)
    with arena:
        return arena, [bt.Value(float(i) + 0.5) for i in range(n)]


def _loaders(tmp_path):
    arena, vals = _values()
    return {
        "io.load": lambda p: bio.load(p, vals),
        "io.load_state_dict": lambda p: bio.load_state_dict(p),
        "data.read_text": lambda p: data.read_text(str(p)),
        "data.read_words": lambda p: data.read_words(str(p)),
        "checkpoint.load": lambda p: checkpoint.load(p),
    }


@needs_posix
@pytest.mark.parametrize("loader", ["io.load", "io.load_state_dict", "data.read_text", "data.read_words",
                                    "checkpoint.load"])
def test_loaders_refuse_a_fifo_without_blocking(tmp_path, loader):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="FIFO"):
        _loaders(tmp_path)[loader](fifo)  # a blocking open or read would hang the test here


@pytest.mark.parametrize("loader", ["io.load", "io.load_state_dict", "data.read_text", "checkpoint.load"])
def test_loaders_refuse_devices_and_directories(tmp_path, loader):
    load = _loaders(tmp_path)[loader]
    if os.path.exists("/dev/zero"):
        with pytest.raises(NotRegularFileError, match="character device"):
            load("/dev/zero")  # would read without end
    with pytest.raises(NotRegularFileError, match="directory"):
        load(tmp_path)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing")


def test_a_header_declaring_more_than_the_targets_hold_is_refused_before_reading():
    import io

    arena, vals = _values(10)
    big = bio.dumps((arena, 0, 10))
    _, few = _values(2)

    class Endless(io.RawIOBase):  # a stream that would never end: only the header may be read
        def __init__(self, head):
            self.head, self.reads = head, 0

        def readable(self):
            return True

        def read(self, n=-1):
            self.reads += 1
            out, self.head = (self.head[:n], self.head[n:]) if self.head else (b"\0" * n, b"")
            return out

    stream = Endless(big[:40])
    with pytest.raises(bio.FormatError, match="at most"):
        bio.load(stream, few)
    assert stream.reads == 1


def test_stale_vectors_are_refused_everywhere():
    np = pytest.importorskip("numpy")
    keep = bt.leaves([1.0, 2.0])
    cp = bt.checkpoint()
    gone = bt.leaves([3.0, 4.0, 5.0])
    bt.rewind(cp)
    bt.leaves([9.0, 9.0, 9.0])  # the slots now belong to other nodes
    with pytest.raises(bt.StaleValueError):
        bt.numpy_view(gone)
    with pytest.raises(bt.StaleValueError):
        bt.load_array(gone, np.zeros(3))
    with pytest.raises(bt.StaleValueError):
        bio.dumps(gone)
    with pytest.raises(bt.StaleValueError):
        bio.loads(bio.dumps(keep), [keep, gone])
    with pytest.raises(bt.StaleValueError):
        bt.viz.to_dot(gone)
    assert list(bt.numpy_view(keep)) == [1.0, 2.0]


# ---- the atomic writer ---------------------------------------------------------------------

@needs_posix
def test_a_planted_symlink_cannot_redirect_a_save(tmp_path):
    arena, vals = _values()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest = tmp_path / "model.bt"
    # Whatever temp name a save might pick, a link at a predictable one must not be followed.
    for guess in (f"{dest}.tmp", f"{dest}.{os.getpid()}.tmp", f".model.bt.{os.getpid()}.tmp"):
        os.symlink(victim, tmp_path / os.path.basename(guess))
    bio.save(dest, vals)
    assert victim.read_text() == "precious"
    assert not dest.is_symlink()
    bio.load(dest, vals)


@needs_posix
def test_save_keeps_the_destination_mode_and_new_files_follow_the_umask(tmp_path):
    arena, vals = _values()
    dest = tmp_path / "shared.bt"
    bio.save(dest, vals)
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o666 & ~mask
    os.chmod(dest, 0o640)
    bio.save(dest, vals)
    bio.save_state_dict({"w": vals}, dest)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640


def test_a_failed_save_leaves_neither_a_torn_file_nor_a_temp(tmp_path, monkeypatch):
    arena, vals = _values()
    dest = tmp_path / "keep.bt"
    bio.save(dest, vals)
    good = dest.read_bytes()
    import burtorch.io.atomic as atomic

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        bio.save(dest, [v * 2.0 for v in vals])
    assert dest.read_bytes() == good
    assert os.listdir(tmp_path) == ["keep.bt"]


@needs_posix
def test_orphans_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f".model.bt.{dead_pid}.0f3a9c2b7d41{SUFFIX}"
    orphan.write_bytes(b"x" * 1000)
    live = tmp_path / f".model.bt.{os.getppid()}.9e8d7c6b5a43{SUFFIX}"  # our parent runs: not an orphan
    live.write_bytes(b"y")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("mine")
    arena, vals = _values()
    bio.save(tmp_path / "model.bt", vals)
    assert not orphan.exists() and live.exists() and unrelated.exists()
    assert remove_orphans(str(tmp_path)) == []


@needs_posix
def test_kill_9_mid_save_leaves_the_old_file_intact(tmp_path):
    """A child saves 4 MB (all values 1.0), then starts a second save (all 2.0) that stops with half
    its payload in the temp file and says so; kill -9 lands there, mid-save, every time (a kill
    after a timed sleep could land between saves). The file must still load, whole, as the first
    save; the killed save's temp file is left behind, and the next save removes it."""
    dest = tmp_path / "big.bt"
    child = textwrap.dedent(f"""
        import sys, time, burtorch as bt, burtorch.io as bio
        from burtorch.io import atomic
        real_write_all = atomic.write_all

        def write_half_then_wait(fd, data):  # the payload's first half reaches the file, then a stop
            data = memoryview(data).cast("B")
            if len(data) > 1000:
                real_write_all(fd, data[:len(data) // 2])
                print("mid-save", flush=True)
                time.sleep(600)
            real_write_all(fd, data)

        arena = bt.Arena(bt.float64)
        n = 500_000
        with arena:
            vals = bt.leaves([0.0] * n)
        for k in (1, 2):
            vals.set_data([float(k)] * n)
            if k == 2:
                atomic.write_all = write_half_then_wait
            bio.save({str(dest)!r}, vals)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # an editable install may print a rebuild line first
            if line.strip() == "mid-save":
                break
        else:
            pytest.fail(f"the child exited with status {proc.wait()} before its second save")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    temps = [f for f in os.listdir(tmp_path) if f.endswith(SUFFIX)]
    assert len(temps) == 1 and f".{proc.pid}." in temps[0]  # the killed save's, half written
    assert 0 < (tmp_path / temps[0]).stat().st_size < dest.stat().st_size
    arena = bt.Arena(bt.float64)
    with arena:
        target = bt.leaves([0.0] * 500_000)
    bio.load(dest, target)  # whole and checksummed, or this raises
    values = target.data
    assert values[0] == 1.0 and values.count(1.0) == len(values)
    bio.save(dest, target)  # the first save of this process here sweeps the killed one's temp
    assert [f for f in os.listdir(tmp_path) if f.endswith(SUFFIX)] == []
