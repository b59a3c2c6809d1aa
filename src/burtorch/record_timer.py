"""Where a step's time goes, record by record: ``with bt.record_times() as rt: ...``.

While the block runs, every range record (``linear``, ``cross_entropy``, a lookup, a map over a
range, ...) adds its wall time and a call to its kind's total, forward and backward apart, in
eager graphs, sweeps and compiled replays alike. Scalar ops are not timed one by one: their time
and Python's stay in what ``outside`` reports. Switched off (outside any block) a record pays
one load and a branch.

A record split across threads inside the op is timed once, on the thread that runs it, so its
total is wall time. Records replayed on several threads at once (a compiled oracle's blocks of
samples on each thread) each add their own time: then the totals are CPU time and can exceed
the block's wall time.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import _core


@dataclass(frozen=True)
class RecordTime:
    """One kind of record in one direction: ``calls`` of it took ``seconds`` in all."""

    op: str  # a range op's name, or "lookup+linear" for a lookup replayed with its layer as one op
    direction: str  # "forward" or "backward"
    calls: int
    seconds: float


class RecordTimes:
    """The totals of one ``record_times()`` block, filled in when the block ends."""

    def __init__(self) -> None:
        self.rows: list[RecordTime] = []
        self.wall = 0.0  # seconds the block took

    @property
    def in_records(self) -> float:
        """Seconds spent in records, summed over kinds (and over threads; see the module)."""
        return sum(r.seconds for r in self.rows)

    @property
    def outside(self) -> float:
        """The block's wall time outside records: Python, scalar ops, conversions, optimizers."""
        return self.wall - self.in_records

    def table(self, per: int = 1) -> str:
        """The rows, slowest first, with µs and calls per ``per`` (e.g. the steps the block ran)."""
        if not isinstance(per, int) or isinstance(per, bool) or per < 1:
            raise ValueError(f"per must be a positive int, got {per!r}")
        lines = [f"{'record':<28}{'calls':>8}{'us':>11}{'share':>8}"]

        def line(name: str, calls: str, seconds: float) -> str:
            share = f"{100 * seconds / self.wall:.1f}%" if self.wall > 0 else "-"
            return f"{name:<28}{calls:>8}{1e6 * seconds / per:>11.2f}{share:>8}"

        for r in sorted(self.rows, key=lambda r: -r.seconds):
            lines.append(line(f"{r.op} {r.direction}", f"{r.calls / per:g}", r.seconds))
        lines.append(line("outside records", "", self.outside))
        lines.append(line("wall", "", self.wall))
        return "\n".join(lines)


@contextmanager
def record_times() -> Iterator[RecordTimes]:
    """Times every range record run inside the block; the result fills in when it ends.

    One block at a time in a process (the totals are the process's): a second one inside it, on
    any thread, raises RuntimeError and leaves the first timing.
    """
    times = RecordTimes()
    _core._record_times_start()
    start = time.perf_counter()
    try:
        yield times
    finally:
        times.wall = time.perf_counter() - start
        times.rows = [RecordTime(op, direction, calls, seconds)
                      for op, direction, calls, seconds in _core._record_times_stop()]
