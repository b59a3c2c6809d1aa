"""Central differences through the arena: the one helper the gradient tests of range ops share."""
import burtorch as bt


def central_difference(node: bt.Value, f, h: float) -> float:
    """(f(x + h) - f(x - h)) / 2h where x is node's value; f builds a graph and returns its root.

    Each evaluation is rewound, and the node's value is restored afterwards."""
    old = node.data
    with bt.scope():
        node.data = old + h
        up = f().data
    with bt.scope():
        node.data = old - h
        dn = f().data
    node.data = old
    return (up - dn) / (2 * h)
