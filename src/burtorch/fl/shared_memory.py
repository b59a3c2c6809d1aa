"""The processes executor's shared memory: the round's point, written once by the driver into a
file every worker on this machine maps (instead of a pickle of d floats down every worker's
pipe), and on evaluation rounds the clients' full gradients, written by the workers into another
(instead of n_clients x d floats pickled back). Ray's actors get the point through Ray's own
object store instead (ray_executor.py).

The driver writes only between rounds, after every worker asked in the previous round has
replied, and reads the gradients only after every worker has replied: no file is read while it
is being written."""
from __future__ import annotations

import dataclasses
import mmap
import os
import tempfile
import weakref
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from ..optim.rounds import Reply, Round

# Where the files go: /dev/shm (memory) on Linux, else the temporary directory (a file the OS
# keeps in its page cache while it is mapped).
SHARED_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


@dataclasses.dataclass
class SharedRound:
    """A round whose point (and previous point) wait in a :class:`PointBuffer`: what is sent to
    each worker instead of the arrays, a few hundred bytes whatever d is."""

    round: Round        # the broadcast without its arrays (x and x_prev are None)
    path: str
    dtype: str
    n: int
    has_prev: bool
    # on evaluation rounds, the MetricBuffer (n_clients rows of n float64) where each client's
    # full gradient goes instead of into its reply
    metrics: str | None = None
    metric_rows: int = 0


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class _DriverFile:
    """A new file of ``size`` bytes in SHARED_DIR, mapped read-write by the driver, removed when
    closed (or when the object goes, if close() is never called)."""

    def __init__(self, size: int, prefix: str) -> None:
        size = max(size, 1)
        fd, path = tempfile.mkstemp(prefix=prefix, dir=SHARED_DIR)
        try:
            os.ftruncate(fd, size)
            if hasattr(os, "posix_fallocate"):
                # the pages reserved now: a full /dev/shm (a container's is often 64 MB) is an
                # OSError here, not a SIGBUS at the first write past its end
                os.posix_fallocate(fd, 0, size)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.remove(path)
            raise
        finally:
            os.close(fd)
        self.path = path
        self._cleanup = weakref.finalize(self, _remove, path)

    def close(self) -> None:
        self._map.close()
        self._cleanup()


class _WorkerMap:
    """A worker's mapping of the driver's file, made once per path (the driver keeps one file
    for the whole run)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._map: mmap.mmap | None = None

    def _mapped(self, path: str, writable: bool) -> mmap.mmap:
        if path != self.path:
            self.close()
            with open(path, "r+b" if writable else "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            self.path = path
        assert self._map is not None
        return self._map

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._map, self.path = None, None


class PointBuffer(_DriverFile):
    """The driver's side of the round's point: x, then the previous point, written once a round."""

    # A smaller point goes with the request by value: it fits in one write to a pipe (64 KiB),
    # so sharing it would save nothing.
    MIN_BYTES = 1 << 15

    def __init__(self, x: np.ndarray) -> None:
        super().__init__(2 * x.nbytes, "burtorch-fl-point-")
        self.dtype, self.n = x.dtype, len(x)
        self._view = np.frombuffer(self._map, dtype=self.dtype, count=2 * self.n)

    @classmethod
    def create(cls, x: Any) -> PointBuffer | None:
        """A buffer for rounds at points like ``x``, or None when not worth it or not possible
        (no room in shared memory): the rounds then go by value."""
        if not cls.accepts(x):
            return None
        try:
            return cls(x)
        except OSError:
            return None

    @staticmethod
    def accepts(x: Any) -> bool:
        """Whether a round at point ``x`` is worth sharing (and can be)."""
        return (isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind == "f"
                and x.nbytes >= PointBuffer.MIN_BYTES)

    def fits(self, ctx: Round) -> bool:
        return all(isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype == self.dtype and len(v) == self.n
                   for v in (ctx.x, *(() if ctx.x_prev is None else (ctx.x_prev,))))

    def share(self, ctx: Round) -> SharedRound:
        """Writes ctx's point(s) and returns what to send in their place (ctx must fit)."""
        self._view[:self.n] = ctx.x
        if ctx.x_prev is not None:
            self._view[self.n:] = ctx.x_prev
        return SharedRound(dataclasses.replace(ctx, x=cast(Any, None), x_prev=None), self.path, self.dtype.str, self.n,
                           ctx.x_prev is not None)

    def close(self) -> None:
        self._view = None  # type: ignore[assignment]  # released before the map closes
        super().close()


class PointReader(_WorkerMap):
    """A worker's side of the point: rebuilds each round with a private copy of the point, as
    unpickling gave it (a client may keep or modify its arrays)."""

    def round(self, shared: SharedRound) -> Round:
        both = np.frombuffer(self._mapped(shared.path, writable=False), dtype=np.dtype(shared.dtype),
                             count=2 * shared.n)
        x = both[:shared.n].copy()
        x_prev = both[shared.n:].copy() if shared.has_prev else None
        return dataclasses.replace(shared.round, x=x, x_prev=x_prev)


class MetricBuffer(_DriverFile):
    """Where the workers put their clients' full gradients on evaluation rounds, a row per
    client; the driver takes one private copy of the rows after every worker has replied."""

    def __init__(self, rows: int, n: int) -> None:
        super().__init__(rows * n * 8, "burtorch-fl-metrics-")
        self.rows, self.n = rows, n

    @classmethod
    def create(cls, rows: int, n: int) -> MetricBuffer | None:
        try:
            return cls(rows, n)
        except OSError:
            return None

    def fill(self, replies: list[Reply]) -> None:
        """Puts the gradients back into the replies whose workers wrote them here."""
        block = np.frombuffer(self._map, dtype=np.float64, count=self.rows * self.n).reshape(self.rows, self.n)
        taken = np.array(block)  # the driver's own copy, so the next evaluation round cannot change it
        del block
        for r in replies:
            if r.metric is not None and r.metric[1] is None:
                r.metric = (r.metric[0], taken[r.client])


class MetricWriter(_WorkerMap):
    """A worker's side of the MetricBuffer, written row by row."""

    def write(self, shared: SharedRound, replies: list[Reply]) -> None:
        """Moves each reply's gradient into its client's row (the reply keeps the loss)."""
        assert shared.metrics is not None
        block = np.frombuffer(self._mapped(shared.metrics, writable=True), dtype=np.float64,
                              count=shared.metric_rows * shared.n).reshape(shared.metric_rows, shared.n)
        for r in replies:
            if r.metric is not None and r.metric[1] is not None:
                block[r.client] = r.metric[1]
                r.metric = cast(Any, (r.metric[0], None))  # the driver's fill() puts the row back
        del block


class RoundSharing:
    """An executor's shared memory for its workers on this machine: the PointBuffer, made at the
    first round whose point is worth it, and the MetricBuffer, at the first evaluation round
    after that. Either missing (small point, no room) means by value."""

    def __init__(self) -> None:
        self.point: PointBuffer | None = None
        self.metrics: MetricBuffer | None = None
        self._tried_point = self._tried_metrics = False

    def send(self, ctx: Round, evaluate: bool) -> Round | SharedRound:
        """What to send the local workers for round ``ctx``."""
        if not self._tried_point:
            self.point, self._tried_point = PointBuffer.create(ctx.x), True
        if self.point is None or not self.point.fits(ctx):
            return ctx
        shared = self.point.share(ctx)
        if evaluate:
            if not self._tried_metrics:
                self.metrics, self._tried_metrics = MetricBuffer.create(ctx.n_clients, shared.n), True
            if self.metrics is not None and self.metrics.rows == ctx.n_clients:
                shared.metrics, shared.metric_rows = self.metrics.path, self.metrics.rows
        return shared

    def received(self, sent: Round | SharedRound, replies: list[Reply]) -> None:
        """Completes the replies of a round sent as ``sent`` (gradients left in the MetricBuffer)."""
        if isinstance(sent, SharedRound) and sent.metrics is not None and self.metrics is not None:
            self.metrics.fill(replies)

    def close(self) -> None:
        for buf in (self.point, self.metrics):
            if buf is not None:
                buf.close()
        self.point = self.metrics = None
