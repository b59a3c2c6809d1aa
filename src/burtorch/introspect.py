"""Introspection: a memory report of arenas, in the spirit of the BurTorch authors' memory report.

``memory_report()`` prints (and returns) one table per arena: nodes, records, argument entries and
labels, then bytes by category (values, grads, generation tags, sweep bounds, records, args,
labels) with their
share, bytes per node, and the memory committed from the OS. It reads only ``arena.stats()``.
"""
from __future__ import annotations

import sys
from typing import IO, Any, Literal

from ._core import Arena, current_arena, float32, float64

_CATEGORIES = ("values", "grads", "generations", "sweep_bounds", "pins", "records", "args", "labels")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_stats(stats: dict[str, Any], title: str = "") -> str:
    """The text of a memory report for one ``arena.stats()`` dict."""
    nodes = stats["nodes"]
    in_use = stats["bytes_in_use"]
    head = title or f"arena {stats['dtype']}"
    lines = [f"== burtorch memory report: {head} ==",
             f"nodes {nodes:,}   records {stats['records']:,}   args {stats['args']:,}   "
             f"labels {stats['labels']:,}   epoch {stats['epoch']}",
             f"{'category':<12}{'bytes':>14}{'':>12}{'share':>8}{'per node':>10}"]
    for name in _CATEGORIES:
        b = stats["bytes"].get(name, 0)
        share = f"{100 * b / in_use:.1f}%" if in_use else "-"
        per_node = f"{b / nodes:.1f}" if nodes else "-"
        lines.append(f"{name:<12}{b:>14,}{human_bytes(b):>12}{share:>8}{per_node:>10}")
    lines.append(f"{'in use':<12}{in_use:>14,}{human_bytes(in_use):>12}{'100%' if in_use else '-':>8}"
                 f"{(f'{in_use / nodes:.1f}' if nodes else '-'):>10}")
    committed = stats["bytes_committed"]
    lines.append(f"{'committed':<12}{committed:>14,}{human_bytes(committed):>12}"
                 "   (reserved from the OS, reused after rewinds)")
    if "pinned_top" in stats:  # what keeps the arena from shrinking (reclamation stops there)
        lines.append(f"highest pinned node {stats['pinned_top']} ({stats['pins_at_top']} handles)   "
                     f"reclaims {stats['reclaims']:,} ({stats['reclaimed_nodes']:,} nodes)")
    return "\n".join(lines)


def memory_report(arena: Arena | None = None, file: IO[str] | Literal[False] | None = None) -> str:
    """Prints a memory report of ``arena`` (default: the thread's float32 and float64 arenas).

    Returns the text; ``file`` defaults to stdout (pass ``file=False`` to only return it).
    """
    if arena is not None and not isinstance(arena, Arena):
        raise TypeError(f"memory_report() expects an Arena or None, got {type(arena).__name__}")
    if file not in (None, False) and not hasattr(file, "write"):
        raise TypeError(f"memory_report(): file must have a write() method, got {type(file).__name__}")
    arenas = [arena] if arena is not None else [current_arena(float32), current_arena(float64)]
    text = "\n\n".join(format_stats(a.stats()) for a in arenas)
    if file is not False:
        print(text, file=file or sys.stdout)
    return text
