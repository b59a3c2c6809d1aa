"""The federated server: rounds of broadcast, client work on an executor and aggregation, and the
run's record.

A round is the method's (burtorch.optim.server); the federation adds where clients run (an
executor), which clients take part (a seeded sample: uniform, Bernoulli or by importance; all of
them in round 0 for methods that initialise state), and evaluation. On evaluation rounds every
client also reports its full local loss and gradient at x, and the record holds
f(x) = (1/n) sum_i f_i(x) and ||grad f(x)||. Bits are the messages' own counts at the wire's width
(fp32 or fp64, the method's); ``bits_per_client`` is the run's cumulative uplink total divided by
n, ``bits_down_per_client`` the same for what the server sent (the method's downlink_bits per
participant).
"""
from __future__ import annotations

import math
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..optim import streams
from ..optim.methods import Method
from ..optim.rounds import Reply, Round
from ..optim.server import Server
from ..seeding import next_seed
from .executors import Executor, make_executor
from .problem import Problem
from .sampling import importance_probabilities

CHECKPOINT_VERSION = 2  # 2: downlink bits among the totals


def save_checkpoint(path: str, payload: Any) -> None:
    """Pickles ``payload`` to ``path`` through a temporary file renamed over it."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path: str) -> Any:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError) as e:
        raise ValueError(f"{path} is not a readable burtorch fl checkpoint ({e})") from None


# How a round's clients are drawn when participation < 1: "uniform", round(participation * n) of
# them without replacement; "bernoulli", each independently with probability participation;
# "importance", each independently with probability p_i ∝ L_i (fl/sampling.py), participation * n
# of them expected, the averaging methods reweighting by 1/p_i.
SAMPLINGS = ("uniform", "bernoulli", "importance")


class Diverged(FloatingPointError):
    """A round's loss, gradient norm or point is not finite: the run stops there, its records
    (the last one included) kept."""


def check_participation(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"participation must be in (0, 1], got {p!r}")
    return float(p)


class Federation(Server):
    """n clients of ``problem`` running ``method`` on an executor, driven by this server.

    Everything that can be wrong is checked here, before any round: the method against the
    problem (compressor kind and dimension, participation, batch size, step size), the executor
    (Ray installed, cluster reachable) and the problem's picklability for other processes."""

    def __init__(self, problem: Problem, method: Method, participation: float = 1.0,
                 executor: str | Executor = "serial", workers: int | None = None, address: str | None = None,
                 seed: int | None = None, eval_every: int = 1, sampling: str = "uniform") -> None:
        if not isinstance(method, Method):
            raise TypeError(f"expected a burtorch.fl Method, got {type(method).__name__}")
        self.problem = problem
        self.participation = check_participation(participation)
        if sampling not in SAMPLINGS:
            raise ValueError(f"unknown client sampling {sampling!r}; choose from {', '.join(SAMPLINGS)}")
        self.sampling = sampling
        if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
            raise ValueError(f"eval_every must be an int >= 0 (0: never), got {eval_every!r}")
        self.eval_every = eval_every
        seed = next_seed() if seed is None else int(seed)
        smoothness = problem.smoothness()
        self.probabilities: tuple[float, ...] | None = None
        bound = self.participation
        if sampling == "importance":
            if smoothness is None or smoothness.L_local is None:
                raise ValueError("client sampling by importance draws client i with probability ∝ L_i, and this "
                                 "problem knows no per-client smoothness constants")
            self.probabilities = importance_probabilities(smoothness.L_local, self.participation * problem.n_clients)
            # the slowest client's rate is what the theory steps (EF21-PP's) may count on
            bound = min(self.probabilities)
        super().__init__(method, problem.initial_point(seed), problem.shard_sizes(), bound, smoothness, seed)
        self.executor = make_executor(executor, workers, address) if isinstance(executor, str) else executor
        self.records: list[dict[str, Any]] = []
        self.stopped: str | None = None  # why the run stopped early, if it did
        self.executor.start(problem, method)

    # ---- one round ----
    def _drawn(self, t: int) -> bool:
        """Whether round t's participants are a random draw (not everybody by rule)."""
        return not (self.participation == 1.0 or (t == 0 and self.method.full_first_round))

    def participants(self, t: int) -> list[int]:
        if not self._drawn(t):
            return list(range(self.n))
        if self.probabilities is not None:  # importance: client i on a coin of probability p_i
            ps = self.probabilities
            return [i for i in range(self.n) if streams.rng(self.seed, streams.PARTICIPANTS, t, i + 1).random() < ps[i]]
        if self.sampling == "bernoulli":  # each client on its own coin: the round's size varies
            p = self.participation
            return [i for i in range(self.n) if streams.rng(self.seed, streams.PARTICIPANTS, t, i + 1).random() < p]
        m = max(1, round(self.participation * self.n))
        return sorted(streams.rng(self.seed, streams.PARTICIPANTS, t).sample(range(self.n), m))

    def round(self, evaluate: bool | None = None) -> dict[str, Any]:
        """One round; its record is kept even when the run diverged, which then raises
        :class:`Diverged` (the records so far stay in ``records``)."""
        if self.stopped is not None:
            raise Diverged(self.stopped)
        ctx = self.open_round()
        chosen = self.participants(ctx.t)
        if self.probabilities is not None and self._drawn(ctx.t):
            # every drawn round is reweighted, a round that happened to draw everybody too
            ctx.probabilities = self.probabilities
        if evaluate is None:
            evaluate = self.eval_every > 0 and ctx.t % self.eval_every == 0
        start = time.perf_counter()
        replies = self.executor.run(ctx, chosen, evaluate)
        record = self.close_round(ctx, replies, time.perf_counter() - start)
        if evaluate:
            record.update(self._metrics(replies, ctx))
        self.records.append(record)
        bad = [(k, record[k]) for k in ("loss", "grad_norm", "oracle_loss")
               if isinstance(record.get(k), float) and not math.isfinite(record[k])]
        if bad or not np.all(np.isfinite(self.x)):
            what = ", ".join(f"the {k.replace('_', ' ')} is {v}" for k, v in bad) or "the point is not finite"
            self.stopped = f"round {ctx.t}: {what}; the run diverged (lower the step size)"
            raise Diverged(self.stopped)
        return record

    def _metrics(self, replies: list[Reply], ctx: Round) -> dict[str, float]:
        loss, grad = 0.0, np.zeros(len(ctx.x))
        for r in replies:  # client order
            if r.metric is None:
                raise RuntimeError(f"client {r.client} did not report its metrics in an evaluation round")
            loss += r.metric[0]
            grad += r.metric[1]
        loss /= self.n
        grad /= self.n
        with np.errstate(over="ignore", invalid="ignore"):
            norm = float(np.sqrt(grad @ grad))
        return {"loss": float(loss), "grad_norm": norm}

    def run(self, rounds: int, progress: Callable[[dict[str, Any]], object] | None = None) -> list[dict[str, Any]]:
        """``rounds`` more rounds (the last one always evaluated); returns the records."""
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be a positive int, got {rounds!r}")
        last = self.t + rounds - 1
        for _ in range(rounds):
            rec = self.round(evaluate=True if self.t == last and self.eval_every else None)
            if progress is not None:
                progress(rec)
        return self.records

    # ---- checkpoints ----
    # Where clients run is not part of a run: executors agree bitwise, so a run checkpointed on one
    # may resume on another.
    _PLACEMENT = ("executor", "workers", "address")

    def run_settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings().items() if k not in self._PLACEMENT}

    def state_dict(self) -> dict[str, Any]:
        """Everything the next round depends on: the server's point(s), method state, counters
        and records, and every client's method state. Every random draw is a function of (seed,
        round, client), so nothing else is needed to continue bitwise."""
        return {"version": CHECKPOINT_VERSION, "settings": self.run_settings(), "t": self.t, "x": self.x,
                "x_prev": self.x_prev, "server": self.server,
                "totals": (self.total_bits, self.total_floats, self.total_samples, self.total_bits_down),
                "records": self.records, "stopped": self.stopped, "clients": self.executor.client_states()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from ``state`` (of :meth:`state_dict`): the run's settings must match this
        federation's; nothing changes if they do not."""
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise ValueError("not a burtorch fl checkpoint of this version")
        mine = self.run_settings()
        diff = sorted(k for k in set(mine) | set(state["settings"]) if mine.get(k) != state["settings"].get(k))
        if diff:
            shown = ", ".join(f"{k}: {state['settings'].get(k)!r} in the checkpoint, {mine.get(k)!r} now"
                              for k in diff[:4])
            raise ValueError(f"the checkpoint is of another run ({shown})")
        self.executor.load_client_states(state["clients"])
        self.t, self.x, self.x_prev, self.server = state["t"], state["x"], state["x_prev"], state["server"]
        self.total_bits, self.total_floats, self.total_samples, self.total_bits_down = state["totals"]
        self.records, self.stopped = list(state["records"]), state["stopped"]

    def save(self, path: str) -> None:
        """Writes :meth:`state_dict` to ``path`` atomically (a crash leaves the previous file)."""
        save_checkpoint(path, self.state_dict())

    # ---- the run's description and lifetime ----
    def settings(self) -> dict[str, Any]:
        return {**self.problem.settings(), **self.method.settings(), **self.executor.settings(),
                "participation": self.participation, "sampling": self.sampling, "seed": self.seed, "d": self.d}

    def close(self) -> None:
        self.executor.close()

    def __enter__(self) -> Federation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
