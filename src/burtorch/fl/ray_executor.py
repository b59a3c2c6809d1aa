"""Clients as Ray actors: each actor hosts a block of clients whose data and method state stay
resident in it between rounds (batching clients per actor keeps the per-round overhead to one
call per worker, not one per client).

``address=None`` starts a local Ray instance for the run (and stops it afterwards);
``address="HOST:PORT"`` joins a running cluster (``ray start --head`` on one machine, ``ray start
--address HOST:PORT`` on the others), which must run the same burtorch and Python.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .client import ClientGroup
from .executor_base import Executor, blocks, check_picklable, check_workers

if TYPE_CHECKING:
    from ..optim.methods import Method
    from ..optim.rounds import Reply, Round
    from .problem import Problem

# How a round's point reaches the actors. Ray carries an argument of up to its
# max_direct_call_object_size (100 KiB by default) inside the call's own message, and puts a larger
# one in its object store, which costs the driver, the raylet and each actor a round trip to the
# store per round, several times what carrying the point in the messages costs. So the point and
# the previous point, up to _INLINE_BYTES together, go by value, in pieces of _PIECE_BYTES that Ray
# inlines (below its limit with room for its framing), and only what would pass what Ray inlines
# into one call (task_rpc_inlined_bytes_limit, 10 MiB by default) is put in the store, once per
# round, for every actor to read in place. A piece is the array's bytes (Ray adds a few dozen
# bytes of its own).
_PIECE_BYTES = 96 << 10
_INLINE_BYTES = 8 << 20

INSTALL_HINT = "the ray executor needs Ray: pip install \"burtorch[fl]\" (or pip install ray)"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return ray


def check_reachable(address: str, timeout: float = 3.0) -> None:
    """A TCP connect to the cluster's address, so a wrong one fails in seconds with a clear error."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"a Ray address is HOST:PORT (or ray://HOST:PORT), got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"cannot reach a Ray cluster at {address} ({e}); start one with "
                              f"'ray start --head' or check the address") from None


# The smallest object store Ray accepts (its OBJECT_STORE_MINIMUM_MEMORY_BYTES): a round's messages
# go by value or through one small put, so the store holds little, and its mapping is what each
# process of the tree touches of it.
OBJECT_STORE_BYTES = 75 * 1024 * 1024

# The local Ray node started by _init (None: none, or Ray was joined or started by ray.init).
_local_node: Any = None


def _init(ray: Any, workers: int | None, address: str | None) -> None:
    global _local_node
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        ray.init(address=address, log_to_driver=False)
        return
    # A local node of our own (even when another cluster runs on this machine, which a bare
    # ray.init() would join), started without what a federated run does not use: the dashboard,
    # the log monitor (log_to_driver is off) and the autoscaler's monitor, with the smallest
    # object store. Each of those is a Python process of 50-80 MB resident. ray.init() cannot
    # leave the last two out; ray.cluster_utils' head node takes Ray's node parameters.
    cpus = workers or os.cpu_count() or 1
    try:
        from ray.cluster_utils import Cluster

        node = Cluster(initialize_head=True, head_node_args={
            "num_cpus": cpus, "num_gpus": 0, "include_dashboard": False, "include_log_monitor": False,
            "no_monitor": True, "object_store_memory": OBJECT_STORE_BYTES})
    except (ImportError, TypeError, ValueError):  # a Ray without these parameters: its defaults
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=OBJECT_STORE_BYTES)
        return
    try:
        ray.init(address=node.address, log_to_driver=False)
    except BaseException:
        node.shutdown()
        raise
    _local_node = node


def _stop(ray: Any) -> None:
    """ray.shutdown(), and the local node's processes stopped if _init started one."""
    global _local_node
    ray.shutdown()
    node, _local_node = _local_node, None
    if node is not None:
        node.shutdown()


@contextlib.contextmanager
def session(workers: int | None = None, address: str | None = None) -> Iterator[None]:
    """One Ray session for several federations (a --compare run): started here unless one is
    running, stopped on exit if started here. Executors inside find it running and leave it be,
    so Ray starts once, not once per run."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        _init(ray, check_workers(workers), address)
        started = True
    try:
        yield
    finally:
        if started:
            _stop(ray)


class RayExecutor(Executor):
    """Clients on Ray actors: every round, and every other request, is a Ray actor call. The round's
    point goes through Ray's object store, put once per round and read in place by every actor on
    the machine that holds it (Ray copies it to the other machines' stores); the round's other
    fields go by value; each actor's replies come back as one pickle."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        self.ray = import_ray()
        self.workers = check_workers(workers)
        if address is not None:
            if not isinstance(address, str):
                raise TypeError(f"address must be a str, got {type(address).__name__}")
            check_reachable(address)
        self.address = address
        self.actors: list[Any] = []
        self.blocks: list[list[int]] = []
        self._started_ray = False
        # the last round's point and what carried it (an ObjectRef when large)
        self._last: tuple[Any, Any] = (None, None)

    def start(self, problem: Problem, method: Method) -> None:
        ray = self.ray
        check_picklable(problem, method)
        if not ray.is_initialized():
            _init(ray, self.workers, self.address)
            self._started_ray = True
        workers = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.blocks = blocks(problem.n_clients, workers)
        actor = ray.remote(num_cpus=1)(ClientGroup)
        # each actor is sent its own clients' shards only, and reserves one CPU, so its native
        # work runs on one thread
        self.actors = [actor.options(scheduling_strategy="SPREAD").remote(problem.only(ids), method, ids, 1)
                       for ids in self.blocks]
        ray.get([a.shard_size.remote(ids[0]) for a, ids in zip(self.actors, self.blocks)])  # surface start errors

    @staticmethod
    def _pieces(v: np.ndarray) -> list[bytes]:
        """The bytes of ``v`` in pieces of at most _PIECE_BYTES, which Ray carries inside the
        call's message (bytes: Ray serializes them for a fraction of what numpy views cost)."""
        raw = np.ascontiguousarray(v).tobytes()
        return [raw[i:i + _PIECE_BYTES] for i in range(0, len(raw), _PIECE_BYTES)]

    @staticmethod
    def ways(ctx: Round) -> tuple[str, str]:
        """How the round's point and previous point reach the actors: "head" (by value in the
        round's pickle; also for None), "pieces" (in pieces inside each call) or "store" (one
        object in Ray's object store); the two points' pieces count against one budget."""
        out, inlined = [], 0
        for v in (ctx.x, ctx.x_prev):
            if not isinstance(v, np.ndarray) or v.ndim != 1 or v.nbytes <= _PIECE_BYTES:
                out.append("head")
            elif inlined + v.nbytes > _INLINE_BYTES:
                out.append("store")
            else:
                out.append("pieces")
                inlined += v.nbytes
        return out[0], out[1]

    def run(self, ctx: Round, participants: list[int], evaluate: bool) -> list[Reply]:
        ray = self.ray
        chosen = set(participants)
        arrays: list[Any] = []
        layout: list[tuple[int, str] | None] = [None, None]
        carried: dict[str, Any] = {}
        put = None
        for slot, (name, v, way) in enumerate(zip(("x", "x_prev"), (ctx.x, ctx.x_prev), self.ways(ctx))):
            if way == "head" or v is None:  # ways() says "head" for None; the check is for the types
                continue
            if way == "store":
                ref = None
                if name == "x_prev":
                    # The previous point of methods that use it is the point of the round before
                    # (the server's step makes a new array): its object is in the store already.
                    last, last_ref = self._last
                    if last_ref is not None and v is last and v is not ctx.x:
                        ref = last_ref
                ref = ray.put(v) if ref is None else ref
                if name == "x":
                    put = ref
                parts: list[Any] = [ref]
            else:
                parts = self._pieces(v)
            arrays.extend(parts)
            layout[slot] = (len(parts), v.dtype.str)
            carried[name] = None
        # The round's other fields (and a small point) by value, as one pickle made once for all
        # the calls: Ray serializes each argument of each call on its own.
        head = pickle.dumps(dataclasses.replace(ctx, **carried), protocol=pickle.HIGHEST_PROTOCOL)
        extra = (tuple(layout), *arrays) if arrays else ()
        futures = []
        for a, ids in zip(self.actors, self.blocks):
            mine = [i for i in ids if i in chosen]
            if mine or evaluate:
                futures.append(a.run_ray.remote(head, mine, evaluate, *extra))
        # One blocking ray.get for all the actors' replies: taking them as they arrive (ray.wait
        # for one at a time) costs the driver a call into Ray per actor, more than it saves by
        # unpickling one actor's replies while another computes.
        replies = [r for part in ray.get(futures) for r in pickle.loads(part)]
        self._last = (ctx.x, put)  # held until the next round, whose previous point it is
        return sorted(replies, key=lambda r: r.client)

    def client_states(self) -> dict[int, dict[str, Any]]:
        parts = self.ray.get([a.get_states.remote() for a in self.actors])
        return {i: st for part in parts for i, st in part.items()}

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self.ray.get([a.load_states.remote({i: states[i] for i in ids if i in states})
                      for a, ids in zip(self.actors, self.blocks)])

    def busy_seconds(self) -> list[float]:
        return self.ray.get([a.busy_seconds.remote() for a in self.actors])

    def placements(self) -> list[tuple[int, str | None]]:
        """(process id, Ray node id) of each actor: how the cluster spread the clients."""
        return self.ray.get([a.where.remote() for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors, self._last = [], (None, None)
        if self._started_ray:
            _stop(self.ray)
            self._started_ray = False

    def settings(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": len(self.blocks) or self.workers, "address": self.address}
