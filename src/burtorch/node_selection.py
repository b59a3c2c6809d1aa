"""Which nodes the user means: one resolver for io, views and viz.

Accepted forms, alone or in a list (in any mix):

* a ``Value``;
* ``(arena, first, last)``: nodes ``[first, last)`` of an arena;
* a ``bt.Vector`` (or anything with ``.arena``, ``.spans`` and ``.alive``).

A Value or a Vector that a rewind discarded is refused with :class:`StaleValueError` when the
selection is made and again by :meth:`Selection.check_alive`, which a loader calls right before
it writes (a rewind may happen between the two). A list made only of Values keeps them as
``values``, which lets io pack or unpack them with one struct call.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, TypeGuard

from ._core import Arena, StaleValueError, Value


class NodeView(Protocol):
    """A view of nodes: a ``bt.Vector``, or anything with ``.arena`` and ``.spans``."""

    @property
    def arena(self) -> Arena: ...

    @property
    def spans(self) -> list[tuple[int, int]]: ...


NodeRange: TypeAlias = "tuple[Arena, int, int]"
Node: TypeAlias = "Value | NodeRange | NodeView"
Nodes: TypeAlias = "Node | Sequence[Node]"
# (arena, first, last, the Value it came from or None)
Segment: TypeAlias = "tuple[Arena, int, int, Value | None]"

FORMS = ("a Value, a list of Values, an (arena, first, last) range or a Vector "
         "(anything with .arena and .spans)")


class Selection:
    """Resolved nodes, in order.

    Attributes:
        dtype: ``"float32"`` or ``"float64"`` (one dtype per selection).
        count: the number of nodes.
        values: the list of Values when the user gave only Values, else None.
        segments: ``(arena, first, last, handle)`` per contiguous piece, where ``handle`` is the
            Value the piece came from (its liveness is checked) or None for a range or a view.
        views: the Vectors the segments came from, re-checked by :meth:`check_alive`.
    """

    __slots__ = ("dtype", "count", "values", "segments", "views")

    def __init__(self, dtype: str, count: int, values: Sequence[Value] | None, segments: list[Segment] | None,
                 views: Sequence[NodeView]) -> None:
        self.dtype = dtype
        self.count = count
        self.values = values
        self.segments = segments
        self.views = views

    def check_alive(self) -> None:
        """Raises unless every node still exists.

        Raises:
            StaleValueError: a Value or a Vector of the selection was discarded by a rewind.
            IndexError: a range now reaches past the end of its arena.
        """
        if self.values is not None:
            for v in self.values:
                if not v.alive:
                    raise StaleValueError(f"the Value at slot {v.index} was discarded by a rewind")
            return
        for view in self.views:
            _check_view(view)
        for arena, first, last, handle in self.segments or ():
            if handle is not None:
                if not handle.alive:
                    raise StaleValueError(f"the Value at slot {first} was discarded by a rewind")
            elif last > arena.num_nodes:
                raise IndexError(f"node range [{first}, {last}) is outside the arena's "
                                 f"{arena.num_nodes} nodes (was it rewound?)")

    def single_arena(self, what: str = "these nodes") -> tuple[Arena, list[tuple[int, int]]]:
        """``(arena, [(first, last), ...])`` with neighbouring spans merged.

        Raises:
            ValueError: the nodes belong to more than one arena.
        """
        segments = self.segments
        if segments is None:
            segments = [(v.arena, v.index, v.index + 1, v) for v in self.values or ()]
        arena = segments[0][0]
        if any(s[0] is not arena for s in segments):
            raise ValueError(f"{what} belong to different arenas")
        spans: list[tuple[int, int]] = []
        for _, first, last, _ in segments:
            if spans and spans[-1][1] == first:
                spans[-1] = (spans[-1][0], last)
            else:
                spans.append((first, last))
        return arena, spans


def select(nodes: Nodes) -> Selection:
    """Resolves ``nodes`` (see the module docstring for the forms) into a :class:`Selection`.

    Raises:
        TypeError: ``nodes`` is none of the accepted forms.
        ValueError: an empty list, or nodes of two dtypes.
        IndexError: a range outside its arena.
        StaleValueError: a Value or a Vector discarded by a rewind.
    """
    items: Sequence[Any]
    if type(nodes) is list or type(nodes) is tuple:
        if nodes and all(type(v) is Value for v in nodes):
            dtype = nodes[0].dtype
            for v in nodes:
                if v.dtype is not dtype:
                    raise ValueError(f"cannot mix dtypes: {dtype.name} and {v.dtype.name}")
            sel = Selection(dtype.name, len(nodes), nodes, None, ())
            sel.check_alive()
            return sel
        if _is_range(nodes):
            items = (nodes,)
        elif not nodes:
            raise ValueError("no nodes given: the list is empty")
        else:
            items = nodes
    else:
        items = (nodes,)
    segments: list[Segment] = []
    views: list[NodeView] = []
    for item in items:
        if type(item) is Value:
            if not item.alive:
                raise StaleValueError(f"the Value at slot {item.index} was discarded by a rewind")
            segments.append((item.arena, item.index, item.index + 1, item))
        elif _is_range(item):
            segments.append(_range_segment(item))
        elif isinstance(getattr(item, "arena", None), Arena) and hasattr(item, "spans"):
            _check_view(item)
            views.append(item)
            segments.extend(_range_segment((item.arena, first, first + length)) for first, length in item.spans)
        else:
            raise TypeError(f"expected {FORMS}, got {type(item).__name__}")
    if not segments:
        raise ValueError("no nodes given: the view is empty")
    dtype = segments[0][0].dtype
    count = 0
    for arena, first, last, _ in segments:
        if arena.dtype is not dtype:
            raise ValueError(f"cannot mix dtypes: {dtype.name} and {arena.dtype.name}")
        count += last - first
    return Selection(dtype.name, count, None, _coalesce(segments), views)


def _is_range(obj: object) -> TypeGuard[NodeRange]:
    return type(obj) is tuple and len(obj) == 3 and isinstance(obj[0], Arena)


def _range_segment(t: NodeRange) -> Segment:
    arena, first, last = t
    if type(first) is not int or type(last) is not int:
        raise TypeError(f"a node range is (arena, first, last) with int bounds, got {t!r}")
    if first < 0 or last < first or last > arena.num_nodes:
        raise IndexError(f"node range [{first}, {last}) is outside the arena's {arena.num_nodes} nodes")
    return (arena, first, last, None)


def _check_view(view: NodeView) -> None:
    if getattr(view, "alive", True) is False:
        spans = list(view.spans)
        where = f"slot {spans[0][0]}" if spans else "no slots"
        raise StaleValueError(f"a view of {len(spans)} span(s) from {where} was discarded by a rewind")


def _coalesce(segments: list[Segment]) -> list[Segment]:
    """Merges neighbouring ranges of one arena so each needs one native copy (Values stay apart)."""
    out: list[Segment] = []
    for seg in segments:
        if out:
            arena, first, last, handle = out[-1]
            if seg[0] is arena and handle is None and seg[3] is None and seg[1] == last:
                out[-1] = (arena, first, seg[2], None)
                continue
        out.append(seg)
    return out
