"""The server: rounds of broadcast, client work and aggregation, and the run's record.

Round t (t = 0, 1, ...):

1. for t > 0 the method moves the point (x <- x - lr g for gradient-estimator methods);
2. the server draws the round's coin (MARINA/PAGE) and participants (a seeded sample of
   round(participation * n) clients; all of them in round 0 for methods that initialise state);
3. it broadcasts (t, x, previous x, coin, seed) and each participant returns one message;
4. the method absorbs the messages in client order and may move x (FedAvg).

On evaluation rounds every client also reports its full local loss and gradient at x, and the
record holds f(x) = (1/n) sum_i f_i(x) and ||grad f(x)||. Bits are the messages' own counts;
``bits_per_client`` is the run's cumulative total divided by n.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..seeding import next_seed
from . import streams
from .client import Reply, Round
from .executors import Executor, make_executor
from .methods import Method
from .problem import Problem


def check_participation(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"participation must be in (0, 1], got {p!r}")
    return float(p)


class Federation:
    """n clients of ``problem`` running ``method`` on an executor, driven by this server.

    Everything that can be wrong is checked here, before any round: the method against the
    problem (compressor kind and dimension, participation, batch size, step size), the executor
    (Ray installed, cluster reachable) and the problem's picklability for other processes."""

    def __init__(self, problem: Problem, method: Method, participation: float = 1.0,
                 executor: str | Executor = "serial", workers: int | None = None, address: str | None = None,
                 seed: int | None = None, eval_every: int = 1) -> None:
        if not isinstance(method, Method):
            raise TypeError(f"expected a burtorch.fl Method, got {type(method).__name__}")
        self.problem, self.method = problem, method
        self.participation = check_participation(participation)
        if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
            raise ValueError(f"eval_every must be an int >= 0 (0: never), got {eval_every!r}")
        self.eval_every = eval_every
        self.seed = next_seed() if seed is None else int(seed)
        self.n = problem.n_clients
        self.x = problem.initial_point(self.seed)
        self.d = len(self.x)
        method.bind(self.d, self.n, self.participation, problem.smoothness(), problem.shard_sizes())
        self.executor = make_executor(executor, workers, address) if isinstance(executor, str) else executor
        self.server = method.server_start(self.x)
        self.x_prev: np.ndarray | None = None
        self.t = 0
        self.records: list[dict[str, Any]] = []
        self.total_bits = 0
        self.total_floats = 0
        self.total_samples = 0
        self.executor.start(problem, method)

    # ---- one round ----
    def participants(self, t: int) -> list[int]:
        if self.participation == 1.0 or (t == 0 and self.method.full_first_round):
            return list(range(self.n))
        m = max(1, round(self.participation * self.n))
        return sorted(streams.rng(self.seed, streams.PARTICIPANTS, t).sample(range(self.n), m))

    def round(self, evaluate: bool | None = None) -> dict[str, Any]:
        t = self.t
        if t > 0:
            self.x_prev = self.x
            self.x = self.method.advance(self.x, self.server)
        coin = self.method.draw_coin(self.seed, t) if t > 0 else None
        chosen = self.participants(t)
        if evaluate is None:
            evaluate = self.eval_every > 0 and t % self.eval_every == 0
        ctx = Round(t, self.x, self.x_prev if self.method.uses_previous_point else None, coin, self.seed, self.n)
        start = time.perf_counter()
        replies = self.executor.run(ctx, chosen, evaluate)
        seconds = time.perf_counter() - start
        messages = [r for r in replies if r.message is not None]
        sent = [r.message for r in replies if r.message is not None]
        point = self.x
        self.x = self.method.absorb(self.x, self.server, messages, ctx)
        bits = sum(m.bits for m in sent)
        self.total_bits += bits
        self.total_floats += sum(m.floats for m in sent)
        self.total_samples += sum(r.samples for r in messages)
        oracle_losses = [r.loss for r in messages if r.loss is not None]
        record: dict[str, Any] = {"round": t, "participants": len(messages), "bits": bits,
                  "bits_per_client": self.total_bits / self.n, "seconds": seconds,
                  "oracle_loss": sum(oracle_losses) / len(oracle_losses) if oracle_losses else None}
        if coin is not None:
            record["coin"] = bool(coin)
        if evaluate:
            record.update(self._metrics(replies, len(point)))
        self.records.append(record)
        self.t += 1
        return record

    def _metrics(self, replies: list[Reply], d: int) -> dict[str, float]:
        loss, grad = 0.0, np.zeros(d)
        for r in replies:  # client order
            if r.metric is None:
                raise RuntimeError(f"client {r.client} did not report its metrics in an evaluation round")
            loss += r.metric[0]
            grad += r.metric[1]
        loss /= self.n
        grad /= self.n
        norm = float(np.sqrt(grad @ grad))
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise FloatingPointError(f"round {self.t}: the loss is {loss}, the gradient norm {norm}; "
                                     "lower the step size")
        return {"loss": loss, "grad_norm": norm}

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

    # ---- the run's description and lifetime ----
    def settings(self) -> dict[str, Any]:
        return {**self.problem.settings(), **self.method.settings(), **self.executor.settings(),
                "participation": self.participation, "seed": self.seed, "d": self.d}

    def close(self) -> None:
        self.executor.close()

    def __enter__(self) -> Federation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
