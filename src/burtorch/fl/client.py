"""The client side: a group of clients hosted by one process (the round's data and the oracle a
method's client code calls are burtorch.optim.rounds').

A group holds its clients' shards and method states and ONE model replica in an arena of its
own. The server broadcasts x at every round's start, so a replica per client would hold nothing
a client needs between rounds; sharing it keeps a client's resident state to its data and its
method vectors.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import time
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from ..optim.compressors import Message
from ..optim.methods import Method
from ..optim.rounds import Oracle, Reply, Round
from ..optim.server import LocalClients
from .shared_memory import MetricWriter, PointReader, SharedRound

if TYPE_CHECKING:
    from .problem import Problem

__all__ = ["ClientGroup", "LocalClients", "Oracle", "PackedReplies", "Reply", "Round"]

# Messages of up to this many values travel in the packed columns; longer ones (a dense round)
# as their own arrays, which pickle copies once anyway.
_PACKED_VALUES = 1 << 12


class PackedReplies:
    """A worker's replies as they go back to the driver, which unpickles them as the list of
    :class:`Reply` itself. Pickled one by one, a round's replies are tens of small objects and
    two small arrays per message, and the pickling and unpickling of those objects cost the
    worker and the driver more than the bytes: here the small messages' values and indices go
    in two arrays for the whole batch, and each reply as a tuple of its scalars."""

    __slots__ = ("replies",)

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        values: list[np.ndarray] = []
        indices: list[np.ndarray] = []
        for r in self.replies:
            m: Any = r.message
            if (type(m) is Message and type(m.values) is np.ndarray and m.values.dtype == np.float64
                    and m.values.ndim == 1 and len(m.values) <= _PACKED_VALUES
                    and (m.indices is None or (type(m.indices) is np.ndarray and m.indices.dtype == np.int64
                                               and m.indices.shape == m.values.shape))):
                values.append(m.values)
                if m.indices is not None:
                    indices.append(m.indices)
                m = (m.d, m.bits, len(m.values), m.indices is not None)
            rows.append((r.client, r.samples, r.loss, r.metric, m))
        return _unpack_replies, (rows, _joined(values, np.float64), _joined(indices, np.int64))


def _joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)


def _unpack_replies(rows: list[tuple[Any, ...]], values: np.ndarray, indices: np.ndarray) -> list[Reply]:
    """The replies of a :class:`PackedReplies`; the messages' arrays are views of the batch's."""
    out = []
    v = i = 0
    for client, samples, loss, metric, m in rows:
        if type(m) is tuple:
            d, bits, n, sparse = m
            idx = None
            if sparse:
                idx = indices[i:i + n]
                i += n
            m = Message(d, values[v:v + n], bits, idx)
            v += n
        out.append(Reply(client, m, samples, loss, metric))
    return out


class ClientGroup(LocalClients):
    """Clients ``ids`` of ``problem`` running ``method``; lives in whichever process hosts them,
    with a replica of the problem's model in an arena of its own."""

    def __init__(self, problem: Problem, method: Method, ids: Iterable[int], threads: int | None = None) -> None:
        # A worker process or actor is given one core: its native records must not split across
        # threads that would compete with the other workers for the same cores.
        if threads is not None:
            _core.set_num_threads(threads)
        self.problem = problem
        self.arena = _core.Arena(problem.dtype)
        with self.arena:
            model = problem.make_model()
        super().__init__(method, model, problem.shards, problem.accumulate, ids)
        self.reader, self.writer = PointReader(), MetricWriter()
        self.busy = 0.0  # seconds spent in rounds (run_shared), for the benchmarks' timeline

    def run_shared(self, ctx: Round | SharedRound, participants: list[int], evaluate: bool) -> list[Reply]:
        """:meth:`run` for a round sent whole or with its point in the driver's shared buffer."""
        start = time.perf_counter()
        try:
            if not isinstance(ctx, SharedRound):
                return self.run(ctx, participants, evaluate)
            replies = self.run(self.reader.round(ctx), participants, evaluate)
            if ctx.metrics is not None:
                self.writer.write(ctx, replies)
            return replies
        finally:
            self.busy += time.perf_counter() - start

    def busy_seconds(self) -> float:
        return self.busy

    def run_ray(self, head: bytes, participants: list[int], evaluate: bool,
                layout: tuple[tuple[int, str] | None, ...] = (), *arrays: Any) -> bytes:
        """:meth:`run_shared` as a Ray actor is called: ``head`` is the round pickled (with a small
        point inside it); a larger point and previous point come as the ``arrays`` after it,
        ``layout`` saying, for each, how many it takes and its dtype: the bytes of the array in
        pieces that Ray carried inside the call's own message, joined here into a new array, or
        one array Ray resolved from its object store (read-only, over the store's shared memory,
        which the clients read in place: they copy what they change). The replies go back as one
        pickle of :class:`PackedReplies`: Ray's own serialization of many small replies
        (dataclasses holding numpy arrays) can cost more than the clients' compute of a small
        model's round."""
        ctx = pickle.loads(head)
        points = {}
        start = 0
        for name, how in zip(("x", "x_prev"), layout):
            if how is None:
                continue
            count, dtype = how
            parts = arrays[start:start + count]
            start += count
            if isinstance(parts[0], np.ndarray):  # from the object store
                points[name] = parts[0]
            else:
                points[name] = np.frombuffer(bytearray().join(parts), dtype=np.dtype(dtype))
        if points:
            ctx = dataclasses.replace(ctx, **points)
        return pickle.dumps(PackedReplies(self.run_shared(ctx, participants, evaluate)),
                            protocol=pickle.HIGHEST_PROTOCOL)

    # what a driver may ask over a connection (serve)
    REQUESTS = ("run_shared", "get_states", "load_states", "where", "busy_seconds")

    def serve(self, conn: Connection) -> None:
        """Answers requests ``(name, *args)`` from ``conn`` with ``("ok", result)`` or
        ``("error", traceback)`` until ``("stop",)``: how a worker process of the processes
        executor takes its rounds over its pipe. The wait for the next request is a blocking
        read."""
        while True:
            request = conn.recv()
            if request[0] == "stop":
                return
            try:
                if request[0] not in self.REQUESTS:
                    raise ValueError(f"unknown request {request[0]!r}")
                result = getattr(self, request[0])(*request[1:])
                if request[0] == "run_shared":
                    # pickled here at the highest protocol (Connection.send's pickler uses the
                    # default one, several times slower on these arrays), while the driver waits
                    conn.send_bytes(pickle.dumps(("ok", PackedReplies(result)), protocol=pickle.HIGHEST_PROTOCOL))
                else:
                    conn.send(("ok", result))
            except BaseException:
                conn.send(("error", traceback.format_exc()))

    def where(self) -> tuple[int, str | None]:
        """(process id, Ray node id or None): where this group lives."""
        ray = sys.modules.get("ray")
        node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
        return os.getpid(), node
