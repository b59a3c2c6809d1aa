"""bt.float128: W1/W2 values and gradients in binary128 agree with FP64 to 1e-15 and with exact
rational arithmetic (a Fraction-valued reverse mode written here) to 1e-30; finite differences
agree too; bad operands raise, never crash; mixing with FP64 Values is refused."""
from fractions import Fraction

import pytest

import burtorch as bt
from burtorch.paper_graphs import w1_graph, w2_graph

pytestmark = pytest.mark.skipif(not hasattr(bt, "float128"), reason="this compiler has no __float128")


class Rational:
    """A scalar reverse-mode node over fractions.Fraction: every value and gradient exact."""

    def __init__(self, data, parents=(), local=()):
        self.data, self.grad = Fraction(data), Fraction(0)
        self._parents, self._local = parents, local

    @staticmethod
    def _of(x):
        return x if isinstance(x, Rational) else Rational(x)

    def __add__(self, o):
        o = self._of(o)
        return Rational(self.data + o.data, (self, o), (1, 1))

    __radd__ = __add__

    def __neg__(self):
        return Rational(-self.data, (self,), (-1,))

    def __sub__(self, o):
        return self + (-self._of(o))

    def __rsub__(self, o):
        return self._of(o) - self

    def __mul__(self, o):
        o = self._of(o)
        return Rational(self.data * o.data, (self, o), (o.data, self.data))

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = self._of(o)
        return Rational(self.data / o.data, (self, o), (1 / o.data, -self.data / o.data**2))

    def __rtruediv__(self, o):
        return self._of(o) / self

    def __pow__(self, n):
        return Rational(self.data**n, (self,), (n * self.data ** (n - 1),))

    def relu(self):
        return Rational(max(self.data, 0), (self,), (1 if self.data > 0 else 0,))

    def backward(self):
        order, seen = [], set()

        def visit(v):
            if id(v) not in seen:
                seen.add(id(v))
                for p in v._parents:
                    visit(p)
                order.append(v)

        visit(self)
        self.grad = Fraction(1)
        for v in reversed(order):
            for p, d in zip(v._parents, v._local):
                p.grad += d * v.grad


def rel(x, y):
    return abs(x - y) / max(abs(y), Fraction(1, 10**300))


GRAPHS = [(w1_graph, {}), (w2_graph, {}), (w1_graph, {"a0": 0.3, "b0": -1.7}), (w2_graph, {"a0": 0.1, "b0": 2.7})]


@pytest.mark.parametrize("graph, at", GRAPHS)
def test_w1_w2_against_fp64_and_exact_fractions(graph, at):
    a, b, g = graph(bt.float128, **at)
    g.backward()
    a64, b64, g64 = graph(bt.Value, **at)
    g64.backward()
    ar, br, gr = graph(Rational, **at)  # the same float64 leaves, exactly
    gr.backward()
    for q, d, r in ((g, g64, gr), (a, a64, ar), (b, b64, br)):
        assert rel(Fraction(q.grad), Fraction(d.grad)) <= 1e-15
        assert rel(q.grad_fraction(), r.grad) <= Fraction(1, 10**30)
    assert rel(Fraction(g.data), Fraction(g64.data)) <= 1e-15
    assert rel(g.data_fraction(), gr.data) <= Fraction(1, 10**30)


def test_gradients_match_finite_differences():
    h = Fraction(1, 10**12)

    def f(a0):
        return w2_graph(bt.float128, a0=a0)[2].data_fraction()

    a, _, g = w2_graph(bt.float128, a0=Fraction(-4))
    g.backward()
    slope = (f(Fraction(-4) + h) - f(Fraction(-4) - h)) / (2 * h)
    assert rel(slope, a.grad_fraction()) < 1e-9


def test_exact_conversions_and_rounding():
    assert bt.float128(0.1).data_fraction() == Fraction(0.1)  # a float converts exactly
    assert bt.float128(2**62 + 1).data_fraction() == 2**62 + 1  # so does an int below 2**63
    third = bt.float128(Fraction(1, 3)).data_fraction()  # a Fraction rounds once, to 113 bits
    assert third != Fraction(1, 3) and abs(third - Fraction(1, 3)) <= Fraction(1, 3) / 2**113
    assert (bt.float128(1) / 3).data_fraction() == third
    assert (bt.float128(2) ** -2).data_fraction() == Fraction(1, 4)
    x = bt.float128(-3.0)
    y = (x * x).relu() - x.relu() + 1
    y.backward()
    assert x.grad_fraction() == -6 and y.data_fraction() == 10
    y.backward()  # gradients are set, not accumulated: the same again
    assert x.grad == -6.0


def test_bad_operands_raise_and_mixing_is_refused():
    x = bt.float128(1.5)
    with pytest.raises(ZeroDivisionError):
        x / 0
    with pytest.raises(ZeroDivisionError):
        1 / bt.float128(0)
    with pytest.raises(ValueError, match="negative power"):
        bt.float128(0) ** -1
    with pytest.raises(ValueError, match="finite"):
        x + float("inf")
    with pytest.raises(ValueError, match="2\\*\\*63"):
        x * 2**70
    with pytest.raises(TypeError):
        bt.float128("1")
    with pytest.raises(TypeError):
        x + True
    with pytest.raises(TypeError):
        x ** 0.5
    with pytest.raises(TypeError):
        x + bt.Value(1.0)  # FP64 and FP128 graphs do not mix silently
    with pytest.raises(TypeError):
        bt.Value(1.0) * x
    assert x.data == 1.5  # nothing changed


def test_a_deep_chain_is_built_swept_and_freed_without_recursion():
    x = bt.float128(0.5)
    y = x
    for _ in range(200_000):
        y = y + x
    y.backward()
    assert x.grad == 200_001.0
    del y  # the chain is released iteratively (no stack overflow)
