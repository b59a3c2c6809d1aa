"""Where clients run: one interface, three places.

* ``serial``: every client in this process (the default; no dependencies).
* ``processes``: a local pool of worker processes, each hosting a contiguous block of clients
  whose data and state stay resident there between rounds.
* ``ray``: Ray actors, one per worker, each hosting a block of clients; a local Ray instance by
  default or a running cluster by ``address`` (see ray_executor.py).

Every executor returns the replies sorted by client id, and a client's computation depends only
on the broadcast round and its own state, so the server sees the same numbers whichever runs it.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
import traceback
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from .client import ClientGroup, Reply, Round
from .executor_base import Executor, answers, blocks, check_picklable, check_workers
from .shared_memory import RoundSharing

if TYPE_CHECKING:
    from ..optim.methods import Method
    from .problem import Problem

__all__ = ["EXECUTORS", "Executor", "SerialExecutor", "ProcessExecutor", "blocks", "check_picklable",
           "check_workers", "make_executor"]

EXECUTORS = ("serial", "processes", "ray")


class SerialExecutor(Executor):
    name = "serial"

    def start(self, problem: Problem, method: Method) -> None:
        self.group = ClientGroup(problem, method, range(problem.n_clients))

    def run(self, ctx: Round, participants: list[int], evaluate: bool) -> list[Reply]:
        return self.group.run_shared(ctx, participants, evaluate)

    def busy_seconds(self) -> list[float]:
        return [self.group.busy_seconds()]

    def state_of(self, client: int) -> dict[str, Any]:
        return self.group.state_of(client)

    def client_states(self) -> dict[int, dict[str, Any]]:
        return self.group.get_states()

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        # a private copy: the caller's dict must not alias the running clients' arrays
        self.group.load_states(pickle.loads(pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)))


def _batch_scheduling() -> None:
    """Asks the OS to schedule this process as a batch job where it can (Linux's SCHED_BATCH):
    a worker woken by the driver's request then waits for its core instead of preempting the
    driver there, which otherwise can stall the driver for a scheduler tick before it wakes the
    next worker, who then starts its clients that much later. The workers compute until they
    reply; nothing in them waits on latency."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError:  # not permitted here (a sandbox): the default policy, only slower
        pass


def _serve(conn: Connection, problem: Problem, method: Method, ids: Iterable[int]) -> None:
    """A worker process: builds its group, then answers run requests until told to stop."""
    _batch_scheduling()
    try:
        group = ClientGroup(problem, method, ids, threads=1)  # one core per worker process
        conn.send(("ok", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    group.serve(conn)


@contextlib.contextmanager
def _main_not_rerun(problem: Problem, method: Method) -> Iterator[None]:
    """While workers are spawned, hides the main script's path from multiprocessing when nothing
    sent to them comes from that script: a child then does not run the script's top level again,
    so a script without a ``__name__ == "__main__"`` guard works (instead of every worker
    re-running it, which multiprocessing stops with an error the parent sees as EOFError)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or b"__main__" in pickle.dumps((problem, method), protocol=pickle.HIGHEST_PROTOCOL):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _answer(conn: Connection, what: str) -> Any:
    status, value = conn.recv()
    if status != "ok":
        raise RuntimeError(f"a client worker failed while {what}:\n{value}")
    return value


class ProcessExecutor(Executor):
    name = "processes"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = check_workers(workers) or os.cpu_count() or 1
        self.procs: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self.blocks: list[list[int]] = []
        self.sharing = RoundSharing()

    def start(self, problem: Problem, method: Method) -> None:
        check_picklable(problem, method)
        mp = multiprocessing.get_context("spawn")  # no inherited arenas or threads
        self.blocks = blocks(problem.n_clients, self.workers)
        with _main_not_rerun(problem, method):
            for ids in self.blocks:
                parent, child = mp.Pipe()
                # each worker is sent its own clients' shards only
                proc = mp.Process(target=_serve, args=(child, problem.only(ids), method, ids), daemon=True)
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        try:
            for conn in self.conns:
                _answer(conn, "starting")
        except EOFError:
            self.close()
            raise RuntimeError(
                "a worker process exited while starting. The processes executor starts workers with "
                "'spawn', which runs your script's top level again in each worker; the problem or method "
                "is defined in that script, so put the code that runs the federation under\n"
                "    if __name__ == \"__main__\":\n"
                "or use executor='serial'") from None

    def run(self, ctx: Round, participants: list[int], evaluate: bool) -> list[Reply]:
        # The point goes through memory the workers map: written once, not pickled down every
        # pipe (a pipe holds 64 KiB, so a large point went to the workers one after the other).
        sent = self.sharing.send(ctx, evaluate)
        chosen = set(participants)
        asked = []
        for conn, ids in zip(self.conns, self.blocks):
            mine = [i for i in ids if i in chosen]
            if mine or evaluate:
                conn.send(("run_shared", sent, mine, evaluate))
                asked.append(conn)
        replies = [r for part in answers(asked, f"running round {ctx.t}") for r in part]
        self.sharing.received(sent, replies)
        return sorted(replies, key=lambda r: r.client)

    def client_states(self) -> dict[int, dict[str, Any]]:
        for conn in self.conns:
            conn.send(("get_states",))
        return {i: st for part in answers(self.conns, "sending its client states") for i, st in part.items()}

    def busy_seconds(self) -> list[float]:
        for conn in self.conns:
            conn.send(("busy_seconds",))
        return answers(self.conns, "timing its rounds")

    def load_client_states(self, states: dict[int, dict[str, Any]]) -> None:
        for conn, ids in zip(self.conns, self.blocks):
            conn.send(("load_states", {i: states[i] for i in ids if i in states}))
        answers(self.conns, "loading client states")

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        self.procs, self.conns = [], []
        self.sharing.close()

    def settings(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": len(self.blocks) or self.workers}


def make_executor(name: str = "serial", workers: int | None = None, address: str | None = None) -> Executor:
    """An executor by name; checks what can be checked (Ray installed, address reachable) now."""
    if address is not None and name != "ray":
        raise ValueError("address is for the ray executor (executor='ray')")
    if name == "serial":
        if workers not in (None, 1):
            raise ValueError("the serial executor runs in this process; workers is for processes or ray")
        return SerialExecutor()
    if name == "processes":
        return ProcessExecutor(workers)
    if name == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(workers, address)
    raise ValueError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")
