"""How a training step (or a gradient oracle) runs, chosen by measuring the candidates once.

A :class:`Plan` names one way to run a step: eager or recorded (``compile``), samples per graph
(``chunk``; 0 is the whole batch as one graph), the SGD update fused into the sweep or not, and
the native thread count. :func:`choose` is the planner's decision, a pure function of the
measured times; :func:`measure` times the candidates on the first call (at most ``budget``
seconds), and the caller keeps the result per key (model structure, batch shape, dtype,
optimizer kind, memory budget) in :data:`CACHE` for the process.

This module knows nothing of models or optimizers: the callers (burtorch.oracle for
``grad_oracle(plan="auto")``, burtorch.optim.fused for ``opt.train_step``) list the candidates
their step allows and run them.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# A byte budget by default: enough for the chunked and whole-batch graphs of the paper's models
# at the batch sizes of its experiments, far below what a laptop has; "sample" and "fast" are the
# two ends (the paper's guarantee, and no bound).
DEFAULT_MEMORY = 64 << 20
BUDGET_SECONDS = 0.85  # no candidate starts after this; the one running then ends within the second


@dataclass(frozen=True)
class Plan:
    """One way to run a step. ``str(plan)`` is the spelling :func:`parse` reads back."""

    compile: bool = False
    chunk: int = 1  # samples per graph; 0: the whole batch as one graph
    fused: bool = False
    threads: int = 1

    def __str__(self) -> str:
        words = ["compiled" if self.compile else "eager"]
        if self.chunk != 1:
            words.append("chunk=batch" if self.chunk == 0 else f"chunk={self.chunk}")
        if self.fused:
            words.append("fused")
        words.append(f"threads={self.threads}")
        return " ".join(words)

    def samples_per_graph(self, n: int) -> int:
        """How many samples one graph (or one replay frame) holds for a batch of n."""
        return n if self.chunk == 0 else min(self.chunk, n)


EAGER = Plan()  # the paper's per-sample oracle, then the optimizer's step


def parse(text: str, threads: int | None = None) -> Plan:
    """A plan from its spelling: ``"eager"`` or ``"compiled"``, then any of ``chunk=K`` (or
    ``chunk=batch``), ``fused`` and ``threads=T``; ``threads`` fills in a missing count (default 1).

    Raises:
        ValueError: a word it does not know, or a count below 1.
    """
    if not isinstance(text, str):
        raise TypeError(f"a plan is a str such as 'compiled chunk=32', got {type(text).__name__}")
    words = text.split()
    if not words or words[0] not in ("eager", "compiled"):
        raise ValueError(f"a plan starts with 'eager' or 'compiled' (or is 'auto'), got {text!r}")
    plan = Plan(compile=words[0] == "compiled", threads=threads or 1)
    for w in words[1:]:
        key, _, value = w.partition("=")
        if key == "fused" and not value:
            plan = replace(plan, fused=True)
        elif key == "chunk" and value == "batch":
            plan = replace(plan, chunk=0)
        elif key == "chunk" and value.isdigit() and int(value) >= 1:
            plan = replace(plan, chunk=int(value))
        elif key == "threads" and value.isdigit() and int(value) >= 1:
            plan = replace(plan, threads=int(value))
        else:
            raise ValueError(f"unknown word {w!r} in the plan {text!r} (chunk=K, chunk=batch, fused, threads=T)")
    return plan


def memory_limit(memory: Any) -> int | None:
    """``memory`` as a limit on the bytes of one step's graphs: None (the default) is
    :data:`DEFAULT_MEMORY`; ``"sample"`` is 0, one sample per graph whatever the batch (the
    paper's guarantee); ``"fast"`` is no limit (returned as None); an int is a byte budget.

    Raises:
        ValueError / TypeError: anything else than "sample", "fast", None or a positive int.
    """
    if memory is None:
        return DEFAULT_MEMORY
    if memory == "sample":
        return 0
    if memory == "fast":
        return None
    if isinstance(memory, bool) or not isinstance(memory, int):
        raise TypeError(f"memory must be 'sample', 'fast' or a byte count, got {memory!r}")
    if memory < 1:
        raise ValueError(f"a memory budget is a positive byte count, got {memory}")
    return memory


def fits(plan: Plan, n: int, limit: int | None, sample_bytes: int) -> bool:
    """Whether a plan's graphs stay within ``limit`` (see :func:`memory_limit`) for a batch of n,
    one sample's graph taking ``sample_bytes``: a graph of its samples per graph, one per thread
    for a compiled plan (each thread replays into its own frame). ``"sample"`` (0) is one
    sample's graph at a time: one sample per graph, on one thread."""
    if limit is None:
        return True
    k = plan.samples_per_graph(n)
    if limit == 0:
        return k == 1 and plan.threads == 1
    return k * sample_bytes * (plan.threads if plan.compile else 1) <= limit


@dataclass
class Chosen:
    """What the planner chose and why: ``plan``, the measured seconds per step of every
    candidate it timed (``times``), the candidates it left out and why (``skipped``), and what it
    cost (``cost``, seconds of the first call)."""

    plan: Plan
    reason: str
    times: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    cost: float = 0.0
    fallbacks: list = field(default_factory=list)

    def explain(self) -> str:
        """Several lines: the choice, then every candidate with its time or why it was left out."""
        lines = [f"plan: {self.plan} ({self.reason}; choosing cost {self.cost * 1e3:.0f} ms)"]
        for p, t in sorted(self.times.items(), key=lambda kv: kv[1]):
            lines.append(f"  {str(p):40s} {t * 1e3:9.3f} ms per step")
        for p, why in self.skipped.items():
            lines.append(f"  {str(p):40s} not timed: {why}")
        for note in self.fallbacks:
            lines.append(f"  fallback: {note}")
        return "\n".join(lines)

    def line(self) -> str:
        """One line, for a log: the plan, how many candidates were timed, and the cost."""
        return f"plan: {self.plan} ({self.reason}; {len(self.times)} candidates timed in {self.cost:.2f} s)"


def choose(times: dict, order: Sequence[Plan]) -> Plan:
    """The fastest timed plan; a tie goes to the earlier plan of ``order`` (the candidates'
    order, simplest first), so that the choice is a function of the times alone.

    Raises:
        ValueError: no plan was timed.
    """
    best = None
    for p in order:
        if p in times and (best is None or times[p] < times[best]):
            best = p
    if best is None:
        raise ValueError("no candidate plan ran")
    return best


def measure(candidates: Sequence[Plan], trial: Callable[[Plan], float | None], budget: float = BUDGET_SECONDS,
            clock: Callable[[], float] = time.perf_counter, skipped: dict | None = None,
            min_repeats: int = 2, enough: float | None = None, max_repeats: int = 200) -> Chosen:
    """Times each candidate in the order given, most promising first, until ``budget`` seconds
    are spent (the first candidate is always timed): a first, untimed call (its trace), then the
    fastest of at least ``min_repeats`` timed calls (more, up to ``max_repeats``, while they add
    up to less than ``enough`` seconds, by default an equal share of half the budget: on a
    shared machine most calls are slowed by others' work, and the fastest of several is the
    step's own cost); then the closest three are timed again, in turns, while the budget lasts.

    ``trial(plan)`` runs one step by ``plan`` and undoes what the caller needs undone; it
    returns the seconds of the step alone (undoing excluded), or None to be timed by ``clock``
    around the call. An exception there drops the candidate (noted in ``skipped``, as for a
    model that cannot be traced); a non-finite loss (ArithmeticError) stops planning.
    """
    skipped = dict(skipped or {})
    times: dict = {}
    if enough is None:
        enough = max(0.005, budget / (2 * max(1, len(candidates))))
    start = clock()

    def once(p: Plan) -> float:
        t0 = clock()
        took = trial(p)
        return clock() - t0 if took is None else took

    for p in candidates:
        if times and clock() - start > budget:
            skipped[p] = "out of the planning budget"
            continue
        try:
            once(p)
            samples = [once(p) for _ in range(min_repeats)]
            while sum(samples) < enough and len(samples) < max_repeats:
                samples.append(once(p))
        except (ArithmeticError, MemoryError):
            raise  # the step itself is bad (a non-finite loss): every path would say so
        except Exception as e:  # noqa: BLE001 - a path that cannot run this model is left out, with why
            skipped[p] = f"{type(e).__name__}: {e}"
            continue
        times[p] = min(samples)
    if not times:
        raise RuntimeError("no path could run this step:\n" + "\n".join(f"  {p}: {w}" for p, w in skipped.items()))
    for _ in range(3):
        if clock() - start > budget:
            break
        for p in sorted(times, key=times.__getitem__)[:3]:
            times[p] = min(times[p], once(p))
    plan = choose(times, candidates)
    reason = "the only path that ran" if len(times) == 1 else f"fastest of {len(times)} timed"
    return Chosen(plan, reason, times, skipped, clock() - start)


def model_key(model: Any, params: Any) -> tuple:
    """What makes two models the same to the planner: the class and the parameters' shapes and dtype."""
    shapes = tuple(tuple(v.shape) for v in model.parameters()) if hasattr(model, "parameters") else (params.size,)
    return type(model).__module__, type(model).__qualname__, shapes, str(params.arena.dtype)


def batch_key(batch: Any) -> tuple:
    """The batch's size, kind and first sample's shape (sizes of its id parts)."""
    first = batch[0]
    shape = getattr(batch, "shape", None)
    if shape is None:
        shape = tuple(len(p) if hasattr(p, "__len__") else 0 for p in first)
    return len(batch), type(batch).__name__, tuple(shape)


def sample_bytes(params: Any, build: Callable[[], Any]) -> int:
    """Arena bytes of the graph ``build()`` makes (one sample's loss), rewound after."""
    arena = params.arena
    cp = arena.checkpoint()
    before = arena.stats()["bytes_in_use"]
    try:
        build()
        return max(1, int(arena.stats()["bytes_in_use"]) - int(before))
    finally:
        arena.rewind(cp)


class Snapshot:
    """The values and grads of ``params`` and an optimizer's state, to undo trial steps. Read as
    the arena's raw bytes, span by span: no Python float per parameter (a wide layer has a
    million) and no numpy (whose import alone is more than the memory of a per-sample step)."""

    def __init__(self, params: Any, opt: Any = None) -> None:
        self.params, self.opt = params, opt
        arena = params.arena
        self.spans = [(first, first + length) for first, length in params.spans]
        self.values = [arena.read_bytes(a, b, "values") for a, b in self.spans]
        self.grads = [arena.read_bytes(a, b, "grads") for a, b in self.spans]
        self.state = opt.state_dict() if opt is not None and opt.state_dict()["buffers"] else None
        self.steps = opt.state.steps if opt is not None else None
        self.fused = getattr(opt, "fused_weights", None)

    def restore_values(self) -> None:
        """The values and the optimizer's state (what a step changes)."""
        arena = self.params.arena
        for (a, _), data in zip(self.spans, self.values):
            arena.write_bytes(a, data, "values")
        if self.opt is not None:
            self.opt.load_state_dict(self.state or {"steps": self.steps, "buffers": []})
            if self.fused is not None:
                self.opt.fused_weights = self.fused

    def restore(self) -> None:
        """Everything, the grads too."""
        self.restore_values()
        arena = self.params.arena
        for (a, _), data in zip(self.spans, self.grads):
            arena.write_bytes(a, data, "grads")


def candidates(n: int, threads: Sequence[int], chunked: bool, fusable: bool, limit: int | None,
               sample_bytes: int = 0) -> tuple[list[Plan], dict]:
    """The plans a step over a batch of n may take, most promising first, and those the memory
    ``limit`` leaves out (with why). ``chunked``: the model has ``loss_batch`` and no custom loss
    (graphs of several samples are possible); ``fusable``: the optimizer can update inside the
    sweep (SGD without momentum, over exactly the model's parameters); ``threads``: the counts to
    try (each at most the cores this process may use)."""
    whole = 0 if n > 1 else 1
    ks = [k for k in (8, 32) if 1 < k < n]
    order: list[Plan] = []
    for t in threads:
        if fusable and chunked and n > 1:
            order.append(Plan(True, 0, True, t))
            if t > 1:
                order += [Plan(True, k, True, t) for k in ks if n % k == 0]
        if chunked and n > 1:
            order.append(Plan(True, 0, False, t))
            order += [Plan(True, k, False, t) for k in ks]
        order.append(Plan(True, 1, False, t))
    for t in threads:
        if fusable and (chunked or n == 1):
            order.append(Plan(False, whole, True, t))
        if chunked and n > 1:
            order += [Plan(False, k, False, t) for k in ks] + [Plan(False, 0, False, t)]
    order.append(EAGER)
    kept, skipped = [], {}
    for p in dict.fromkeys(order):
        if fits(p, n, limit, sample_bytes):
            kept.append(p)
        else:
            skipped[p] = ("memory='sample' keeps one sample's graph at a time" if limit == 0 else
                          f"its graphs exceed the memory budget of {limit:,} bytes")
    return kept, skipped


def planned(key: Hashable, build: Callable[[], tuple[list, dict, list]], run: Callable[[Plan], float],
            trial: Callable[[Plan], float | None], undo: Callable[[], None] | None = None,
            forget: Callable[[], Callable[[], None]] | None = None, budget: float = BUDGET_SECONDS,
            take: bool = True) -> tuple[float | None, Chosen]:
    """Runs one step by the plan cached for ``key``, choosing it first if there is none.

    ``build()`` gives (candidates, skipped, notes); ``trial(plan)`` takes a step, undoes it and
    returns its seconds (see :func:`measure`); ``undo()`` (after the trials) restores whatever
    the trials left, so the first step's result is that of the chosen plan alone; ``forget()``
    (called before the trials) returns a function that drops what the trials cached (recorded
    programs of the paths not chosen); ``run(plan)`` takes the step. A chosen plan that raises
    on a later batch (other than for a non-finite loss) runs that step by the paper's eager path
    instead, and the plan's ``fallbacks`` say so. ``take=False`` only chooses (the loss returned
    is None).
    """
    chosen = CACHE.get(key)
    if chosen is None:
        cands, skipped, notes = build()
        drop = forget() if forget is not None else None
        try:
            chosen = measure(cands, trial, budget, skipped=skipped)
        finally:
            if undo is not None:
                undo()
            if drop is not None:
                drop()
        chosen.fallbacks += notes
        CACHE[key] = chosen
    if not take:
        return None, chosen
    return run_chosen(chosen, run), chosen


def run_chosen(chosen: Chosen, run: Callable[[Plan], float]) -> float:
    """``run(chosen.plan)``; if that raises (other than for a non-finite loss), the step again
    by the paper's eager path, noted in ``chosen.fallbacks``."""
    try:
        return run(chosen.plan)
    except (ArithmeticError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the paper's path is the fallback of every other
        if chosen.plan == EAGER:
            raise
        note = f"{chosen.plan} failed on a batch ({type(e).__name__}: {e}); that step ran eagerly"
        if note not in chosen.fallbacks:
            chosen.fallbacks.append(note)
        return run(EAGER)


# key -> Chosen, for the process (keys hold no model: plans are shared by models of one structure)
CACHE: dict[Hashable, Chosen] = {}


def explain_plan(what: Any = None) -> str:
    """What the planner chose and why: for an optimizer that took ``train_step`` (its last
    plan), or, by default, every plan of this process, one block each."""
    if what is not None:
        chosen = getattr(what, "plan", None)
        if not isinstance(chosen, Chosen):
            raise ValueError(f"this {type(what).__name__} has taken no train_step yet")
        return chosen.explain()
    if not CACHE:
        return "no plan chosen yet (grad_oracle(plan='auto') and opt.train_step choose on their first call)"
    return "\n".join(c.explain() for c in CACHE.values())


# bumped by clear(): a caller's memo of a plan (kept to skip rebuilding the key) is valid while
# the epoch it was taken in lasts
EPOCH = [0]


def clear() -> None:
    """Forgets every plan (the next planned call measures again)."""
    CACHE.clear()
    EPOCH[0] += 1
