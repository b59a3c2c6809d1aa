"""The client side: a group of clients hosted by one process (the round's data and the oracle a
method's client code calls are burtorch.optim.rounds').

A group holds its clients' shards and method states and ONE model replica in an arena of its
own. The server broadcasts x at every round's start, so a replica per client would hold nothing
a client needs between rounds; sharing it keeps a client's resident state to its data and its
method vectors.
"""
from __future__ import annotations

import os
import pickle
import socket
import sys
import time
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from .. import _core
from ..optim.methods import Method
from ..optim.rounds import Oracle, Reply, Round
from ..optim.server import LocalClients
from .executor_base import MetricWriter, PointReader, SharedRound

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

    def run_packed(self, ctx: bytes | SharedRound, participants: list[int], evaluate: bool) -> bytes:
        """:meth:`run_shared` with the replies as one pickle (and a round sent whole as one):
        how a Ray actor is called. Ray's own serialization of many small replies (dataclasses
        holding numpy arrays) can cost more than the clients' compute of a small model's round;
        one pickle each way does not."""
        round_: Round | SharedRound = pickle.loads(ctx) if isinstance(ctx, bytes) else ctx
        return pickle.dumps(self.run_shared(round_, participants, evaluate), protocol=pickle.HIGHEST_PROTOCOL)

    # what a driver may ask over a connection (serve)
    REQUESTS = ("run_shared", "get_states", "load_states", "where", "busy_seconds")

    def serve(self, conn: Connection) -> None:
        """Answers requests ``(name, *args)`` from ``conn`` with ``("ok", result)`` or
        ``("error", traceback)`` until ``("stop",)``: how a worker process, or a Ray actor on the
        driver's machine, takes its rounds. The wait for the next request is a blocking read."""
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

    def serve_at(self, path: str) -> None:
        """:meth:`serve` over the Unix socket the driver listens on at ``path`` (a Ray actor on
        the driver's machine: its rounds then bypass Ray's calls, which cost more CPU per call, on
        the driver and in the actor, than a pipe's message)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        conn = Connection(sock.detach())
        try:
            self.serve(conn)
        finally:
            conn.close()

    def can_read(self, path: str, token: bytes) -> bool:
        """Whether this process sees the driver's shared buffer at ``path`` (it holds ``token``):
        false on another machine of a cluster."""
        try:
            with open(path, "rb") as f:
                return f.read(len(token)) == token
        except OSError:
            return False

    def where(self) -> tuple[int, str | None]:
        """(process id, Ray node id or None): where this group lives."""
        ray = sys.modules.get("ray")
        node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
        return os.getpid(), node
