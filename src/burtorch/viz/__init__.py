"""Drawing burtorch graphs (DOT text, rendered images) and plotting with matplotlib.

``to_dot(node)`` returns Graphviz DOT text; ``render(node, "graph.svg")`` draws it with the
``graphviz`` package or the ``dot`` binary. Plots live in :mod:`burtorch.viz.plots` (imported
lazily: matplotlib is optional).
"""
from .dot import GraphTooLargeError, to_dot
from .rendering import GraphvizMissingError, render

__all__ = ["GraphTooLargeError", "GraphvizMissingError", "render", "to_dot"]
