"""Step-size search: every method of a comparison run at every step of a grid, in parallel on the
chosen executor (worker processes or Ray tasks; one after another for serial), scored by the
gradient norm at the last round. A method is then compared at its best step, so a comparison
never sets a tuned method against an untuned baseline.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from ..optim.methods import Method
from .problem import Problem


def score(problem: Problem, method: Method, participation: float, seed: int, rounds: int,
          sampling: str = "uniform") -> float:
    """||grad f(x)|| after ``rounds`` rounds (serially, in whichever process runs this); inf for a
    run that diverged."""
    from .federation import Diverged, Federation

    with Federation(problem, method, participation, "serial", seed=seed, eval_every=rounds, sampling=sampling) as fed:
        try:
            fed.run(rounds)
        except Diverged:
            return math.inf
        except ValueError as e:  # a compressor refusing non-finite coordinates
            if "not finite" not in str(e):
                raise
            return math.inf
        norm = fed.records[-1]["grad_norm"]
    return norm if math.isfinite(norm) else math.inf


def with_lr(method: Method, lr: float) -> Method:
    """A copy of a bound method with step ``lr``."""
    m = copy.deepcopy(method)
    m.lr = float(lr)
    return m


def search(problem: Problem, methods: Sequence[tuple[str, Method]], grid: Sequence[float], participation: float,
           seed: int, rounds: int, executor: str = "serial", workers: int | None = None,
           address: str | None = None, sampling: str = "uniform") -> dict[str, dict[str, Any]]:
    """{label: {"lr": best step, "scores": {step: final gradient norm}}} for every (label, method)."""
    grid = [float(g) for g in grid]
    if not grid or not all(math.isfinite(g) and g > 0 for g in grid):
        raise ValueError(f"the step-size grid must be positive numbers, got {grid}")
    jobs = [(label, lr, with_lr(m, lr)) for label, m in methods for lr in grid]
    if executor == "serial":
        scores = [score(problem, m, participation, seed, rounds, sampling) for _, _, m in jobs]
    elif executor == "processes":
        scores = _on_processes(problem, jobs, participation, seed, rounds, workers, sampling)
    elif executor == "ray":
        scores = _on_ray(problem, jobs, participation, seed, rounds, workers, address, sampling)
    else:
        raise ValueError(f"unknown executor {executor!r}")
    out: dict[str, dict[str, Any]] = {}
    for (label, lr, _), s in zip(jobs, scores):
        out.setdefault(label, {"scores": {}})["scores"][lr] = s
    for label, entry in out.items():
        best = min(entry["scores"].items(), key=lambda kv: (kv[1], kv[0]))
        if not math.isfinite(best[1]):
            raise ValueError(f"{label}: every step of the grid {grid} diverged")
        entry["lr"] = best[0]
    return out


def _on_processes(problem, jobs, participation, seed, rounds, workers, sampling) -> list[float]:
    import concurrent.futures
    import multiprocessing
    import os

    from .executors import _main_not_rerun

    mp = multiprocessing.get_context("spawn")
    with _main_not_rerun(problem, jobs[0][2]), concurrent.futures.ProcessPoolExecutor(
            max_workers=workers or os.cpu_count() or 1, mp_context=mp) as pool:
        futures = [pool.submit(score, problem, m, participation, seed, rounds, sampling) for _, _, m in jobs]
        return [f.result() for f in futures]


def _on_ray(problem, jobs, participation, seed, rounds, workers, address, sampling) -> list[float]:
    from .ray_executor import import_ray, session

    ray = import_ray()
    with session(workers, address):
        task = ray.remote(num_cpus=1)(score)
        ref = ray.put(problem)
        return ray.get([task.remote(ref, m, participation, seed, rounds, sampling) for _, _, m in jobs])
