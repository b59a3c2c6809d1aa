"""What every executor shares: the interface, cutting clients into per-worker blocks, and the
checks of its arguments (kept apart from executors.py so that the Ray executor, which
make_executor loads only when asked, builds on it without a cycle)."""
from __future__ import annotations

import pickle
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..optim.methods import Method
    from ..optim.rounds import Reply, Round
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
