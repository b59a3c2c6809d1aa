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
from typing import TYPE_CHECKING

import numpy as np

from .. import _core
from ..optim.methods import Method
from ..optim.rounds import Oracle, Reply, Round
from ..optim.server import LocalClients
from .shared_memory import MetricWriter, PointReader, SharedRound

if TYPE_CHECKING:
    from .problem import Problem

__all__ = ["ClientGroup", "LocalClients", "Oracle", "Reply", "Round"]


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

    def run_ray(self, head: bytes, participants: list[int], evaluate: bool, x: np.ndarray | None = None,
                x_prev: np.ndarray | None = None) -> bytes:
        """:meth:`run_shared` as a Ray actor is called: ``head`` is the round pickled (with a small
        point inside it), ``x`` and ``x_prev`` a large point and previous point when they were
        put in Ray's object store. Ray resolves those into read-only arrays over the store's
        shared memory, which the clients read in place (they copy what they change). The replies
        go back as one pickle: Ray's own serialization of many small replies (dataclasses holding
        numpy arrays) can cost more than the clients' compute of a small model's round."""
        ctx = pickle.loads(head)
        if x is not None or x_prev is not None:
            ctx = dataclasses.replace(ctx, x=ctx.x if x is None else x, x_prev=ctx.x_prev if x_prev is None else x_prev)
        return pickle.dumps(self.run_shared(ctx, participants, evaluate), protocol=pickle.HIGHEST_PROTOCOL)

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
                conn.send(("ok", getattr(self, request[0])(*request[1:])))
            except BaseException:
                conn.send(("error", traceback.format_exc()))

    def where(self) -> tuple[int, str | None]:
        """(process id, Ray node id or None): where this group lives."""
        ray = sys.modules.get("ray")
        node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
        return os.getpid(), node
