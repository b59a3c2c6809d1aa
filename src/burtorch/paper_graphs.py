"""The paper's Figure 1 (W1) and Figure 2 (W2) graphs, written once for the demo, the tests and the
benchmarks.

Each builder takes a leaf constructor (``bt.Value``, ``torch.tensor(..., requires_grad=True)``, a
micrograd ``Value``, ...) so the very same expression runs in every framework.
"""


def _relu(x):
    return x.relu()


def w1_expr(a, b):
    """Figure 1's expression of two leaves: g = ((a + b) - (a*b + b**3))**2 * 0.5."""
    c = a + b
    d = a * b + b**3
    e = c - d
    f = e**2
    return f * 0.5


def w2_expr(a, b, relu=_relu):
    """Figure 2's expression of two leaves; returns (c, d, e, f, g), c and d as finally rebound.

    ``c += c + 1`` of the paper means c becomes a new node c + (c + 1), as in PyTorch autograd;
    it is written out so that frameworks with in-place ``+=`` compute the same thing.
    """
    c = a + b
    d = a * b + b**3
    c = c + (c + 1)
    c = c + (1 + c + (-a))
    d = d + (d * 2 + relu(b + a))
    d = d + (3 * d + relu(b - a))
    e = c - d
    f = e**2
    g = f / 2.0
    g = g + 10.0 / f
    return c, d, e, f, g


def w1_graph(leaf, a0: float = -41.0, b0: float = 2.0):
    """Figure 1 at a = -41, b = 2 from a leaf constructor. Returns (a, b, g)."""
    a = leaf(a0)
    b = leaf(b0)
    return a, b, w1_expr(a, b)


def w2_graph(leaf, a0: float = -4.0, b0: float = 2.0, relu=_relu):
    """Figure 2 (micrograd's README example) at a = -4, b = 2. Returns (a, b, g)."""
    a, b, *_, g = w2_nodes(leaf, a0, b0, relu)
    return a, b, g


def w2_nodes(leaf, a0: float = -4.0, b0: float = 2.0, relu=_relu):
    """Figure 2's graph from a leaf constructor; returns its named nodes (a, b, c, d, e, f, g)."""
    a = leaf(a0)
    b = leaf(b0)
    return (a, b) + w2_expr(a, b, relu)
