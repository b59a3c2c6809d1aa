"""Gradient compressors of distributed optimization research, on flat lists of floats.

Two classes of compressors, with the constants that the convergence theorems use:

* unbiased (``omega``):     E[C(x)] = x,  E||C(x) - x||^2 <= omega ||x||^2
* contractive (``alpha``):  ||C(x) - x||^2 <= (1 - alpha) ||x||^2  (in expectation for random ones)

Each compressor is built for one dimension ``d`` (the constants depend on it), draws its
randomness from its own seedable ``random.Random``, and says what one message costs:
``floats`` (how many float numbers it carries) and ``bits`` (everything, indices and signs too).
Pure Python: no numpy needed; the cost is O(d) per call, small next to a gradient evaluation.
"""
from __future__ import annotations

import math
import random


def _check_int(name, value, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _floats(x) -> list:
    """A list of floats from a sequence of numbers (strings are not numbers here)."""
    if isinstance(x, (str, bytes)):
        raise TypeError("compress() expects a sequence of numbers, got a string")
    try:
        items = list(x)
    except TypeError:
        raise TypeError(f"compress() expects a sequence of numbers, got {type(x).__name__}") from None
    out = []
    for i, v in enumerate(items):
        if isinstance(v, (str, bytes)):
            raise TypeError(f"item {i} is not a number: {v!r}")
        try:
            out.append(float(v))
        except TypeError:
            raise TypeError(f"item {i} is not a number: {type(v).__name__}") from None
    return out


def _index_bits(d: int) -> int:
    return max(1, math.ceil(math.log2(d)))


class Compressor:
    """Base class: ``compress(x)`` returns the (decoded, dense) compressed vector as a new list."""

    unbiased = False
    omega: float | None = None   # variance parameter of an unbiased compressor
    alpha: float | None = None   # contraction parameter of a contractive compressor

    def __init__(self, d: int, seed: int | None = None, float_bits: int = 32):
        self.d = _check_int("d", d, 1)
        self.float_bits = _check_int("float_bits", float_bits, 1)
        self.rng = random.Random(seed)

    def seed(self, seed: int | None) -> None:
        """Restarts the random stream (reproducible runs)."""
        self.rng.seed(seed)

    def _as_list(self, x) -> list:
        if hasattr(x, "spans") and hasattr(x, "grad"):
            raise TypeError("pass a Vector's grads as vector.grad, or use compress_grad_(vector)")
        x = _floats(x)
        if len(x) != self.d:
            raise ValueError(f"{type(self).__name__} was built for d={self.d}, got a vector of {len(x)}")
        return x

    def compress(self, x) -> list:
        return self._compress(self._as_list(x))

    __call__ = compress

    def compress_grad_(self, vector) -> None:
        """Replaces the grads of a Vector (anything with .grad and .set_grad) by their compression."""
        vector.set_grad(self.compress(vector.grad))

    def _compress(self, x: list) -> list:
        raise NotImplementedError

    # ---- communication accounting: the cost of one message of this compressor ----
    @property
    def floats(self) -> int:
        raise NotImplementedError

    @property
    def bits(self) -> int:
        raise NotImplementedError

    def __repr__(self):
        consts = f"omega={self.omega:g}" if self.unbiased else f"alpha={self.alpha:g}"
        return f"{type(self).__name__}(d={self.d}, {self.extra_repr()}{consts})"

    def extra_repr(self) -> str:
        return ""


class Identity(Compressor):
    """No compression: unbiased with omega = 0 and contractive with alpha = 1."""

    unbiased = True

    def __init__(self, d: int, seed: int | None = None, float_bits: int = 32):
        super().__init__(d, seed, float_bits)
        self.omega = 0.0
        self.alpha = 1.0

    def _compress(self, x):
        return x

    @property
    def floats(self):
        return self.d

    @property
    def bits(self):
        return self.d * self.float_bits


class _Sparsifier(Compressor):
    """Keeps k coordinates; a message is k values and k indices."""

    def __init__(self, d: int, k: int, seed: int | None = None, float_bits: int = 32):
        super().__init__(d, seed, float_bits)
        self.k = _check_int("k", k, 1, self.d)

    @property
    def floats(self):
        return self.k

    @property
    def bits(self):
        return self.k * (self.float_bits + _index_bits(self.d))

    def extra_repr(self):
        return f"k={self.k}, "


class RandK(_Sparsifier):
    """k coordinates chosen uniformly without replacement, scaled by d/k: unbiased, omega = d/k - 1."""

    unbiased = True

    def __init__(self, d: int, k: int, seed: int | None = None, float_bits: int = 32):
        super().__init__(d, k, seed, float_bits)
        self.omega = self.d / self.k - 1.0

    def _compress(self, x):
        scale = self.d / self.k
        out = [0.0] * self.d
        for i in self.rng.sample(range(self.d), self.k):
            out[i] = x[i] * scale
        return out


class TopK(_Sparsifier):
    """The k largest-magnitude coordinates (ties: lower index first): biased, contractive, alpha = k/d.

    Deterministic; ||C(x) - x||^2 is the sum of the d - k smallest squares, at most (1 - k/d)||x||^2.
    """

    def __init__(self, d: int, k: int, seed: int | None = None, float_bits: int = 32):
        super().__init__(d, k, seed, float_bits)
        self.alpha = self.k / self.d

    def _compress(self, x):
        keep = sorted(range(self.d), key=lambda i: (-abs(x[i]), i))[:self.k]
        out = [0.0] * self.d
        for i in keep:
            out[i] = x[i]
        return out


class RandomDithering(Compressor):
    """Random dithering with s levels (QSGD, Alistarh et al. 2017), l2 norm: unbiased.

    Each |x_i| / ||x|| in [0, 1] is rounded at random to one of its two neighbouring levels
    l/s, (l+1)/s with the probabilities that keep its mean; sign and norm are kept. Variance:
    omega = min(d / s^2, sqrt(d) / s). A message is the norm (one float) plus, per coordinate,
    a sign bit and a level of ceil(log2(s + 1)) bits (fixed width, no entropy coding).
    """

    unbiased = True

    def __init__(self, d: int, s: int = 1, seed: int | None = None, float_bits: int = 32):
        super().__init__(d, seed, float_bits)
        self.s = _check_int("s", s, 1)
        self.omega = min(self.d / self.s ** 2, math.sqrt(self.d) / self.s)

    def _compress(self, x):
        norm = math.sqrt(sum(v * v for v in x))
        if norm == 0.0:
            return [0.0] * self.d
        s, rnd = self.s, self.rng.random
        out = []
        for v in x:
            level = abs(v) / norm * s
            low = math.floor(level)
            q = low + 1 if rnd() < level - low else low
            out.append(math.copysign(norm * q / s, v) if q else 0.0)
        return out

    @property
    def floats(self):
        return 1

    @property
    def bits(self):
        return self.float_bits + self.d * (1 + math.ceil(math.log2(self.s + 1)))

    def extra_repr(self):
        return f"s={self.s}, "


class Scaled(Compressor):
    """C(x) = Q(x) / (omega + 1) for an unbiased Q: contractive with alpha = 1 / (omega + 1).

    Lets EF21 (which needs a contractive compressor) use RandK or dithering.
    """

    def __init__(self, inner: Compressor):
        if not isinstance(inner, Compressor) or not inner.unbiased:
            raise TypeError("Scaled() wraps an unbiased Compressor")
        super().__init__(inner.d, None, inner.float_bits)
        self.inner = inner
        self.rng = inner.rng
        self.alpha = 1.0 / (inner.omega + 1.0)

    def _compress(self, x):
        c = self.alpha
        return [v * c for v in self.inner._compress(x)]

    @property
    def floats(self):
        return self.inner.floats

    @property
    def bits(self):
        return self.inner.bits

    def __repr__(self):
        return f"Scaled({self.inner!r}, alpha={self.alpha:g})"
