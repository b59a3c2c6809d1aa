"""What every executor shares: the interface, cutting clients into per-worker blocks, and the
checks of its arguments (kept apart from executors.py so that the Ray executor, which
make_executor loads only when asked, builds on it without a cycle)."""
from __future__ import annotations

import dataclasses
import mmap
import os
import pickle
import tempfile
import weakref
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..optim.rounds import Round

if TYPE_CHECKING:
    from ..optim.methods import Method
    from ..optim.rounds import Reply
    from .problem import Problem


def blocks(n_clients: int, workers: int) -> list[list[int]]:
    """Client ids cut into ``workers`` contiguous blocks of near-equal size (none empty)."""
    workers = min(workers, n_clients)
    base, extra = divmod(n_clients, workers)
    out: list[list[int]] = []
    start = 0
    for w in range(workers):
        size = base + (1 if w < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def check_workers(workers: Any) -> int | None:
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    return workers


def check_picklable(problem: Problem, method: Method) -> None:
    try:
        pickle.dumps((problem, method))
    except Exception as e:
        raise TypeError(f"this executor sends the problem and method to other processes, but they do not pickle "
                        f"({e}); build them from module-level classes, or use executor='serial'") from None


def answers(conns: list[Connection], what: str) -> list[Any]:
    """Every worker's answer (``("ok", value)`` or ``("error", traceback)``) to the request just
    sent on each of ``conns``, taken in the order they arrive (the driver unpickles one while the
    others still compute; the wait is a blocking select, not a poll) and returned in ``conns``'
    order. When one failed, the others' answers are still drained, so that every connection stays
    in step, and then the first failure is raised."""
    got: dict[int, Any] = {}
    pending = {id(c): c for c in conns}
    while pending:
        for ready in wait(list(pending.values())):
            conn = pending.pop(id(ready))
            try:
                got[id(conn)] = conn.recv()
            except EOFError:
                got[id(conn)] = ("error", "the worker exited")
    for conn in conns:
        status, value = got[id(conn)]
        if status != "ok":
            raise RuntimeError(f"a client worker failed while {what}:\n{value}")
    return [got[id(c)][1] for c in conns]


# Where the round's point is shared: /dev/shm (memory) on Linux, else the temporary directory
# (a file the OS keeps in its page cache while it is mapped).
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


class PointBuffer:
    """The driver's side of the round's point in memory every worker on this machine maps: written
    once per round, read by each worker with one copy, instead of a pickle of d floats sent down
    every worker's pipe and unpickled there (the processes executor's workers; Ray's actors get
    the point through Ray's object store).

    The driver writes only between rounds, after every worker asked in the previous round has
    replied, so a worker never reads a half-written point."""

    def __init__(self, x: np.ndarray) -> None:
        self.dtype, self.n = x.dtype, len(x)
        self.path, self._map = _shared_file(2 * x.nbytes, "burtorch-fl-point-")  # x, then the previous point
        self._view = np.frombuffer(self._map, dtype=self.dtype, count=2 * self.n)
        # the file goes with the buffer, even when close() is never called
        self._cleanup = weakref.finalize(self, _remove, self.path)

    # A smaller point goes with the request by value: it fits in one write to a pipe (64 KiB),
    # so sharing it would save nothing.
    MIN_BYTES = 1 << 15

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
        self._map.close()
        self._cleanup()


def _shared_file(size: int, prefix: str) -> tuple[str, mmap.mmap]:
    """A new file of ``size`` bytes in SHARED_DIR, mapped read-write: (path, map)."""
    size = max(size, 1)
    fd, path = tempfile.mkstemp(prefix=prefix, dir=SHARED_DIR)
    try:
        os.ftruncate(fd, size)
        if hasattr(os, "posix_fallocate"):
            # the pages reserved now: a full /dev/shm (a container's is often 64 MB) is an
            # OSError here, not a SIGBUS at the first write past its end
            os.posix_fallocate(fd, 0, size)
        return path, mmap.mmap(fd, size)
    except BaseException:
        os.remove(path)
        raise
    finally:
        os.close(fd)


class MetricBuffer:
    """Where the workers on this machine put their clients' full gradients on evaluation rounds
    (a row per client), instead of pickling n_clients x d floats through their pipes; the driver
    takes one private copy of the rows after every worker has replied."""

    def __init__(self, rows: int, n: int) -> None:
        self.rows, self.n = rows, n
        self.path, self._map = _shared_file(rows * n * 8, "burtorch-fl-metrics-")
        self._cleanup = weakref.finalize(self, _remove, self.path)

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

    def close(self) -> None:
        self._map.close()
        self._cleanup()


class MetricWriter:
    """A worker's side of the MetricBuffer: mapped once (by path), written row by row."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._map: mmap.mmap | None = None

    def write(self, shared: SharedRound, replies: list[Reply]) -> None:
        """Moves each reply's gradient into its client's row (the reply keeps the loss)."""
        assert shared.metrics is not None
        if shared.metrics != self.path:
            self.close()
            with open(shared.metrics, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), 0)
            self.path = shared.metrics
        assert self._map is not None
        block = np.frombuffer(self._map, dtype=np.float64, count=shared.metric_rows * shared.n)
        block = block.reshape(shared.metric_rows, shared.n)
        for r in replies:
            if r.metric is not None and r.metric[1] is not None:
                block[r.client] = r.metric[1]
                r.metric = cast(Any, (r.metric[0], None))  # the driver's fill() puts the row back
        del block

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._map, self.path = None, None


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


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class PointReader:
    """A worker's side: maps the driver's buffer once (by path) and rebuilds each round with a
    private copy of the point, as unpickling gave it (a client may keep or modify its arrays)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._map: mmap.mmap | None = None

    def round(self, shared: SharedRound) -> Round:
        if shared.path != self.path:
            self.close()
            with open(shared.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.path = shared.path
        assert self._map is not None
        both = np.frombuffer(self._map, dtype=np.dtype(shared.dtype), count=2 * shared.n)
        x = both[:shared.n].copy()
        x_prev = both[shared.n:].copy() if shared.has_prev else None
        return dataclasses.replace(shared.round, x=x, x_prev=x_prev)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._map, self.path = None, None


class Executor:
    name = "executor"

    def start(self, problem: Problem, method: Method) -> None:
        raise NotImplementedError

    def run(self, ctx: Round, participants: list[int], evaluate: bool) -> list[Reply]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def state_of(self, client: int) -> dict[str, Any]:
        """A client's method state, where clients run in this process."""
        raise NotImplementedError(f"the {self.name} executor keeps client states in other processes")

    def client_states(self) -> dict[int, dict[str, Any]]:
        """Every client's method state, wherever it lives (for a checkpoint)."""
        raise NotImplementedError

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        """Puts checkpointed client states back where the clients live now."""
        raise NotImplementedError

    def busy_seconds(self) -> list[float]:
        """Seconds each worker has spent in its clients' rounds so far (reading the round and the
        clients' work, not the messaging): the benchmarks' timeline of a round."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        return {"executor": self.name}
