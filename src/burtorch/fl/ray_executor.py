"""Clients as Ray actors: each actor hosts a block of clients whose data and method state stay
resident in it between rounds (batching clients per actor keeps the per-round overhead to one
call per worker, not one per client).

``address=None`` starts a local Ray instance for the run (and stops it afterwards);
``address="HOST:PORT"`` joins a running cluster (``ray start --head`` on one machine, ``ray start
--address HOST:PORT`` on the others), which must run the same burtorch and Python.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import socket
import tempfile
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from .client import ClientGroup
from .executor_base import SHARED_DIR, Executor, RoundSharing, answers, blocks, check_picklable, check_workers

if TYPE_CHECKING:
    from ..optim.methods import Method
    from ..optim.rounds import Reply, Round
    from .problem import Problem

_INLINE_BYTES = 1 << 17  # rounds up to this size are sent by value with each call
_UNIX_PATH_MAX = 104  # the shortest limit of a Unix socket's path among the OSes (macOS's)
_CONNECT_SECONDS = 60.0
_ACCEPT_POLL_SECONDS = 0.2  # between checks that the actor's serve_at call is still waiting

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
    """Clients on Ray actors. An actor on the driver's machine takes its rounds over a Unix socket
    to the driver, with the point in memory both map (the PointBuffer), as a worker process does:
    Ray places the actor and owns its lifetime, but a Ray call per round costs the driver and the
    actor about a millisecond of CPU each, which on a machine of few cores is taken from the
    clients' compute. Actors on other machines take their rounds as Ray calls."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None, *, sockets: bool = True) -> None:
        """``sockets=False``: every actor takes its rounds as Ray calls, as on another machine."""
        self.ray = import_ray()
        self.sockets = bool(sockets)
        self.workers = check_workers(workers)
        if address is not None:
            if not isinstance(address, str):
                raise TypeError(f"address must be a str, got {type(address).__name__}")
            check_reachable(address)
        self.address = address
        self.actors: list[Any] = []
        self.blocks: list[list[int]] = []
        self._started_ray = False
        self.sharing = RoundSharing()
        self.conns: list[Connection | None] = []  # per actor: its socket when on this machine
        self._serving: list[Any] = []  # the actors' serve_at calls, which return on "stop"

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
        try:
            self._connect_local()
        except BaseException:
            self.close()
            raise

    def _connect_local(self) -> None:
        """A socket to each actor that sees this machine's shared memory (a random token written
        there and read back by the actor); the others keep Ray calls, as does an actor whose
        connection fails."""
        ray = self.ray
        self.conns = [None] * len(self.actors)
        if not self.sockets:
            return
        # private (0700): only this user connects; in /dev/shm where there is one, which no other
        # machine sees (a temporary directory might be shared over the network)
        folder = tempfile.mkdtemp(prefix="burtorch-fl-", dir=SHARED_DIR)
        try:
            token = os.urandom(16)
            with open(os.path.join(folder, "token"), "wb") as f:
                f.write(token)
            path = os.path.join(folder, "s")
            local = ray.get([a.can_read.remote(os.path.join(folder, "token"), token) for a in self.actors])
            if not any(local) or len(path.encode()) >= _UNIX_PATH_MAX:
                return
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(path)
                listener.listen(len(self.actors))
                listener.settimeout(_ACCEPT_POLL_SECONDS)
                for i, a in enumerate(self.actors):
                    if local[i]:
                        # one at a time, so the connection accepted is this actor's
                        self.conns[i] = self._accept(listener, a.serve_at.remote(path))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _accept(self, listener: socket.socket, serving: Any) -> Connection | None:
        """The connection of the actor whose serve_at call is ``serving``; None when that call
        failed (the actor then takes Ray calls)."""
        waited = 0.0
        while True:
            try:
                sock, _ = listener.accept()
                break
            except TimeoutError:
                waited += _ACCEPT_POLL_SECONDS
            ready, _ = self.ray.wait([serving], timeout=0)
            if ready:  # the call ended without connecting
                with contextlib.suppress(Exception):
                    self.ray.get(ready)
                return None
            if waited >= _CONNECT_SECONDS:
                raise RuntimeError(f"a Ray actor on this machine did not connect within {_CONNECT_SECONDS:.0f} s")
        sock.setblocking(True)
        self._serving.append(serving)
        return Connection(sock.detach())

    def _ask(self, requests: list[tuple[Any, ...] | None], what: str) -> list[Any]:
        """Each actor's answer to its request (None: not asked), over its socket or as a Ray call;
        the answers of the asked actors, in actor order."""
        ray = self.ray
        local: list[Connection] = []
        futures = []
        for a, conn, request in zip(self.actors, self.conns, requests):
            if request is None:
                continue
            if conn is not None:
                conn.send(request)
                local.append(conn)
            else:
                futures.append(getattr(a, request[0]).remote(*request[1:]))
        by_socket = iter(answers(local, what))
        by_ray = iter(ray.get(futures))
        return [next(by_socket) if conn is not None else next(by_ray)
                for conn, request in zip(self.conns, requests) if request is not None]

    def run(self, ctx: Round, participants: list[int], evaluate: bool) -> list[Reply]:
        ray = self.ray
        shared = self.sharing.send(ctx, evaluate) if any(c is not None for c in self.conns) else ctx
        remote: Any = None
        chosen = set(participants)
        requests: list[tuple[Any, ...] | None] = []
        for ids, conn in zip(self.blocks, self.conns):
            mine = [i for i in ids if i in chosen]
            if not (mine or evaluate):
                requests.append(None)
            elif conn is not None:
                requests.append(("run_shared", shared, mine, evaluate))
            else:
                # The round travels as one pickle: by value when small (a ray.put is a round trip
                # to the object store, dearer than sending a few bytes), through the object store
                # once when large (a model's point), so that it is not copied into every call.
                if remote is None:
                    blob = pickle.dumps(ctx, protocol=pickle.HIGHEST_PROTOCOL)
                    remote = ray.put(blob) if len(blob) > _INLINE_BYTES else blob
                requests.append(("run_packed", remote, mine, evaluate))
        replies = []
        for part in self._ask(requests, f"running round {ctx.t}"):
            replies.extend(pickle.loads(part) if isinstance(part, bytes) else part)
        self.sharing.received(shared, replies)
        return sorted(replies, key=lambda r: r.client)

    def client_states(self) -> dict[int, dict[str, Any]]:
        parts = self._ask([("get_states",)] * len(self.actors), "sending its client states")
        return {i: st for part in parts for i, st in part.items()}

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        self._ask([("load_states", {i: states[i] for i in ids if i in states}) for ids in self.blocks],
                  "loading client states")

    def busy_seconds(self) -> list[float]:
        return self._ask([("busy_seconds",)] * len(self.actors), "timing its rounds")

    def placements(self) -> list[tuple[int, str | None]]:
        """(process id, Ray node id) of each actor: how the cluster spread the clients."""
        return self._ask([("where",)] * len(self.actors), "saying where it runs")

    def close(self) -> None:
        for conn in self.conns:
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(("stop",))
        with contextlib.suppress(Exception):
            self.ray.get(self._serving, timeout=10)  # the actors left their loops
        for conn in self.conns:
            if conn is not None:
                conn.close()
        for a in self.actors:
            self.ray.kill(a)
        self.actors, self.conns, self._serving = [], [], []
        self.sharing.close()
        if self._started_ray:
            _stop(self.ray)
            self._started_ray = False

    def settings(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": len(self.blocks) or self.workers, "address": self.address}
