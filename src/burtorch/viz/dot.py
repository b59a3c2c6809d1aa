"""DOT (Graphviz) text of the graph reachable from a node, as in the paper's Figure 1.

A scalar record is drawn as micrograd draws it: an ellipse for the operator and a record-shaped
node for the value it wrote, showing the slot index, label, value and gradient. A range record
(several outputs, or more arguments than ``max_scalar_args``) is one box listing its output span
and argument spans; a run of leaves read as one argument span is one box as well. Edges go from
arguments to results.

The walk is iterative (no recursion) and reads the arena only through ``arena.record_of`` and
``arena.record``; slots are allocated in creation order, so the outputs of records increase with
the record index, which lets a run of leaves inside a span be skipped with a binary search.
"""
from __future__ import annotations

from collections.abc import Iterator

from .._core import Arena, StaleValueError, Value
from ..node_selection import Nodes, select

# arena.record(r): (op, first output, number of outputs, argument spans [(first, count)], immediate)
Record = tuple[str, int, int, list[tuple[int, int]], float]


class GraphTooLargeError(ValueError):
    """The graph has more nodes than ``max_nodes`` allows drawing."""


def to_dot(root: Nodes, max_nodes: int = 2000, show_grad: bool = True, rankdir: str = "LR",
           precision: int = 6, max_scalar_args: int = 4, name: str = "burtorch") -> str:
    """DOT text of the graph that ``root`` depends on.

    Args:
        root: a Value, a list of Values, an ``(arena, first, last)`` range or a Vector, of one arena.
        max_nodes: the most DOT nodes to draw.
        show_grad: show each value's grad beside its data.
        rankdir: ``"LR"``, ``"RL"``, ``"TB"`` or ``"BT"``.
        precision: significant digits of the numbers shown.
        max_scalar_args: a record with more arguments is drawn as one box.
        name: the graph's name in the DOT text.

    Returns:
        The DOT text.

    Raises:
        GraphTooLargeError: more than ``max_nodes`` nodes would be drawn.
        StaleValueError: a root discarded by a rewind.
        ValueError, TypeError: bad arguments or roots of several arenas.
    """
    if rankdir not in ("LR", "RL", "TB", "BT"):
        raise ValueError(f"rankdir must be one of LR, RL, TB, BT, got {rankdir!r}")
    if type(root).__name__ == "Program":  # a recorded program (burtorch.program)
        from ..program import program_dot
        return program_dot(root, rankdir=rankdir)
    if not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive int, got {max_nodes!r}")
    arena, root_spans = _roots(root)
    walk = _Walk(arena, max_nodes, show_grad, precision, max_scalar_args)
    root_keys = set()
    for first, last in root_spans:
        for key, _ in walk.producers(first, last):
            root_keys.add(key)
    walk.run()
    lines = [f"digraph {_quote(name)} {{", f"  rankdir={rankdir};",
             '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9];']
    for _, key, attrs in sorted(walk.nodes.values()):
        if key in root_keys:
            attrs += ", penwidth=2"
        lines.append(f"  {key} [{attrs}];")
    order = {key: entry[0] for key, entry in walk.nodes.items()}
    for src, dst, label in sorted(walk.edges, key=lambda e: (order[e[1]], order[e[0]], e)):
        lines.append(f"  {src} -> {dst}" + (f" [label={_quote(label)}];" if label else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _roots(root: Nodes) -> tuple[Arena, list[tuple[int, int]]]:
    try:
        return select(root).single_arena("the roots")
    except StaleValueError:  # a discarded root would draw whatever node now holds its slot
        raise StaleValueError("cannot draw the graph of a node or view discarded by a rewind") from None


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_RECORD_SPECIAL = set('{}|<>"\\')


def _record_text(text: str) -> str:
    """Escapes text for a field of a Graphviz record-shaped node."""
    out = []
    for ch in str(text):
        if ch in _RECORD_SPECIAL:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


def _span(first: int, last: int) -> str:
    return f"#{first}" if last == first + 1 else f"#[{first}, {last})"


class _Walk:
    """Collects DOT nodes and edges; ``pending`` holds records whose arguments are not yet drawn."""

    def __init__(self, arena: Arena, max_nodes: int, show_grad: bool, precision: int, max_scalar_args: int) -> None:
        self.arena = arena
        self.max_nodes = max_nodes
        self.show_grad = show_grad
        self.precision = precision
        self.max_scalar_args = max_scalar_args
        self.max_shown_outputs = 4
        self.nodes: dict[str, tuple[tuple[int, int], str, str]] = {}  # key -> (sort key, key, attrs)
        self.edges: set[tuple[str, str, str]] = set()
        self.pending: list[tuple[int, str, bool]] = []
        self._records: dict[int, Record] = {}
        self._num_records = arena.num_records

    # -- arena access ------------------------------------------------------------------------
    def record(self, r: int) -> Record:
        rec = self._records.get(r)
        if rec is None:
            rec = self._records[r] = self.arena.record(r)
        return rec

    def value(self, slot: int) -> Value:
        return self.arena.value(slot)

    def is_scalar(self, rec: Record) -> bool:
        return rec[2] == 1 and sum(count for _, count in rec[3]) <= self.max_scalar_args

    def next_record_output(self, slot: int) -> int:
        """First output slot of the first record whose outputs start at or after ``slot``."""
        lo, hi = 0, self._num_records
        while lo < hi:
            mid = (lo + hi) // 2
            if self.record(mid)[1] < slot:
                lo = mid + 1
            else:
                hi = mid
        return self.record(lo)[1] if lo < self._num_records else self.arena.num_nodes

    def runs(self, first: int, last: int) -> Iterator[tuple[int, int, int]]:
        """Splits [first, last) into runs with one producer each: (start, end, record or -1)."""
        s = first
        while s < last:
            r = self.arena.record_of(s)
            if r >= 0:
                out, n = self.record(r)[1:3]
                end = min(out + n, last)
            else:
                end = min(max(self.next_record_output(s), s + 1), last)
            yield s, end, r
            s = end

    # -- drawing ---------------------------------------------------------------------------------
    def add_node(self, key: str, sort_key: tuple[int, int], attrs: str) -> None:
        if len(self.nodes) >= self.max_nodes:
            raise GraphTooLargeError(
                f"the graph has more than max_nodes={self.max_nodes} nodes to draw; pass a larger "
                "max_nodes= or draw a subgraph (to_dot of an intermediate node)")
        self.nodes[key] = (sort_key, key, attrs)

    def number(self, x: float) -> str:
        return f"{x:.{self.precision}g}"

    def slot_text(self, slot: int) -> str:
        v = self.value(slot)
        text = f"#{slot}" + (f" {v.label}" if v.label is not None else "") + " data " + self.number(v.data)
        return text + (" grad " + self.number(v.grad) if self.show_grad else "")

    def value_node(self, slot: int) -> str:
        key = f"v{slot}"
        if key not in self.nodes:
            v = self.value(slot)
            head = f"#{slot}" + (f" {v.label}" if v.label is not None else "")
            fields = [_record_text(head), "data " + self.number(v.data)]
            if self.show_grad:
                fields.append("grad " + self.number(v.grad))
            self.add_node(key, (slot, 1), 'shape=record, label="{ ' + " | ".join(fields) + ' }"')
        return key

    def op_text(self, rec: Record) -> str:
        op, imm = rec[0], rec[4]
        return op if imm == 0 else f"{op} {self.number(imm)}"

    def producers(self, first: int, last: int, split_leaves: bool = False) -> Iterator[tuple[str, tuple[int, int]]]:
        """Yields (DOT key, (start, end)) for each producer of the slots [first, last).

        A run of leaves is one box, or (``split_leaves``) one value node per leaf.
        """
        for start, end, r in self.runs(first, last):
            if r < 0:
                if end - start == 1 or split_leaves:
                    for slot in range(start, end):
                        yield self.value_node(slot), (slot, slot + 1)
                else:
                    key = f"l{start}_{end}"
                    if key not in self.nodes:
                        self.add_node(key, (start, 0), f'shape=box3d, label={_quote("leaves " + _span(start, end))}')
                    yield key, (start, end)
                continue
            rec = self.record(r)
            if self.is_scalar(rec):
                key = self.value_node(start)
                op_key = f"op{r}"
                if op_key not in self.nodes:
                    self.add_node(op_key, (start, 0), f'shape=ellipse, label={_quote(self.op_text(rec))}')
                    self.edges.add((op_key, key, ""))
                    self.pending.append((r, op_key, True))
                yield key, (start, end)
            else:
                key = f"r{r}"
                if key not in self.nodes:
                    out, n = rec[1:3]
                    lines = [self.op_text(rec), "out " + _span(out, out + n)]
                    lines += ["arg " + _span(a, a + c) for a, c in rec[3]]
                    if n <= self.max_shown_outputs:  # small outputs: show them as value nodes do
                        lines += [self.slot_text(slot) for slot in range(out, out + n)]
                    self.add_node(key, (out, 0), f'shape=box, style=rounded, label={_quote(chr(10).join(lines))}')
                    self.pending.append((r, key, False))
                yield key, (start, end)

    def run(self) -> None:
        while self.pending:
            r, consumer, scalar = self.pending.pop()
            for first, count in self.record(r)[3]:
                # A scalar record's arguments are drawn one value node each (a range record's
                # outputs stay one box, with one edge naming the span it passes).
                for key, (start, end) in self.producers(first, first + count, split_leaves=scalar):
                    self.edges.add((key, consumer, "" if key.startswith("v") else _span(start, end)))
