"""Gradient compressors of distributed optimization, run in native code (O(d), no Python per coordinate).

Two classes, with the constants the convergence theorems use:

* unbiased (``omega``):     E[C(x)] = x,  E||C(x) - x||^2 <= omega ||x||^2
* contractive (``alpha``):  E||C(x) - x||^2 <= (1 - alpha) ||x||^2

A compressor is built for one dimension ``d`` (its constants depend on it). ``compress(x, seed)``
returns a :class:`Message`: the values sent and, for sparsifiers, their indices. Its ``bits`` are
exactly what the message carries: ``float_bits`` per value, ceil(log2 d) per index, signs and
levels for the quantizers (fixed width, no entropy coding). Random compressors take an explicit
64-bit seed (federated runs derive it from run seed, client and round); without one they draw
from their own seeded stream, call after call.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _core
from ..seeding import next_seed
from . import streams

_native = _core.compress


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return int(seed)


def index_bits(d: int) -> int:
    """Bits of one coordinate index of a d-vector."""
    return max(1, math.ceil(math.log2(d)))


class Message:
    """One compressed vector as sent: ``values`` at ``indices`` (None: all d coordinates, in order)."""

    __slots__ = ("d", "indices", "values", "bits")

    def __init__(self, d: int, values: np.ndarray, bits: int, indices: np.ndarray | None = None) -> None:
        self.d, self.values, self.bits, self.indices = d, values, bits, indices

    @property
    def floats(self) -> int:
        return len(self.values)

    def dense(self) -> np.ndarray:
        """The decoded d-vector (float64)."""
        if self.indices is None:
            return np.array(self.values, dtype=np.float64)
        out = np.zeros(self.d)
        out[self.indices] = self.values
        return out

    def add_to(self, acc: np.ndarray, scale: float = 1.0) -> None:
        """acc += scale * message, touching only the coordinates sent."""
        if self.indices is None:
            acc += self.values if scale == 1.0 else scale * self.values
        else:
            acc[self.indices] += self.values if scale == 1.0 else scale * self.values

    def scaled(self, factor: float) -> Message:
        return Message(self.d, self.values * factor, self.bits, self.indices)

    def __repr__(self) -> str:
        kind = "dense" if self.indices is None else f"{len(self.indices)} of"
        return f"Message({kind} d={self.d}, bits={self.bits})"


def full_message(x: np.ndarray, float_bits: int = 32) -> Message:
    """An uncompressed message: d values."""
    return Message(len(x), x, len(x) * float_bits)


class Compressor:
    """Base class. Subclasses set ``unbiased``/``omega`` or ``alpha`` and implement ``_compress``."""

    unbiased = False
    omega: float | None = None
    alpha: float | None = None

    def __init__(self, d: int, float_bits: int = 32, seed: int | None = None) -> None:
        self.d = check_int("d", d, 1)
        self.float_bits = check_int("float_bits", float_bits, 1)
        self._seed = next_seed() if seed is None else _check_seed(seed)
        self._calls = 0

    def seed(self, seed: int) -> None:
        """Restarts the stream used when compress() is called without a seed."""
        self._seed, self._calls = _check_seed(seed), 0

    def _vector(self, x: Any) -> np.ndarray:
        if isinstance(x, _core.Vector):
            raise TypeError("pass a Vector's grads as vector.numpy('grads'), or use compress_grad_(vector)")
        if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64):
            arr = np.ascontiguousarray(x)
        else:
            if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
                raise TypeError(f"compress() expects a sequence of numbers, got {type(x).__name__}")
            try:
                arr = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError("compress() expects a sequence of numbers") from None
        if arr.ndim != 1 or len(arr) != self.d:
            raise ValueError(f"{type(self).__name__} was built for d={self.d}, got shape {arr.shape}")
        return arr

    def compress(self, x: np.ndarray | Sequence[float], seed: int | None = None) -> Message:
        """Compresses a d-vector (numpy float32/float64 or a sequence of numbers)."""
        msg = self._compress(self._vector(x), self._seed_for(seed))
        # The inputs are finite (each compressor refuses others); a scaled value or a norm can
        # still overflow near the type's maximum, and an inf would be sent without a word.
        if not np.isfinite(msg.values).all():
            raise ValueError(f"{type(self).__name__}: compressing these values overflows the "
                             f"{msg.values.dtype} type (they lie near its maximum); scale them down")
        return msg

    __call__ = compress

    def compress_difference(self, a: np.ndarray | Sequence[float], b: np.ndarray | Sequence[float],
                            seed: int | None = None) -> Message:
        """compress(a - b): the same message, which a compressor that can select from the
        difference as it reads it (TopK) makes without writing a - b out."""
        return self.compress(np.subtract(self._vector(a), self._vector(b)), seed)

    def _seed_for(self, seed: int | None) -> int:
        """The seed of one message: ``seed``, or the next of this compressor's own stream."""
        if seed is None:
            seed = streams.derive(self._seed, streams.STANDALONE, self._calls)
            self._calls += 1
        return seed & ((1 << 64) - 1)

    def compress_grad_(self, vector: _core.Vector, seed: int | None = None) -> Message:
        """Replaces the grads of a Vector by their compression (zero-copy when it is contiguous)."""
        grads: Any = vector.numpy("grads", writable=vector.contiguous)  # the stub says object
        msg = self.compress(grads, seed)
        if vector.contiguous:
            grads[:] = msg.dense()
        else:
            vector.set_grad(msg.dense().tolist())
        return msg

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        raise NotImplementedError

    @property
    def bits(self) -> int:
        """Bits of one message."""
        raise NotImplementedError

    @property
    def floats(self) -> int:
        """Float values in one message."""
        raise NotImplementedError

    def __repr__(self) -> str:
        const = self.omega if self.unbiased else self.alpha
        consts = ("omega" if self.unbiased else "alpha") + ("=?" if const is None else f"={const:g}")
        return f"{type(self).__name__}(d={self.d}, {self.extra_repr()}{consts})"

    def extra_repr(self) -> str:
        return ""


class Identity(Compressor):
    """No compression: unbiased with omega = 0 and contractive with alpha = 1."""

    unbiased = True
    omega = 0.0
    alpha = 1.0

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        return Message(self.d, x.copy(), self.bits)

    @property
    def bits(self) -> int:
        return self.d * self.float_bits

    @property
    def floats(self) -> int:
        return self.d


class _Sparsifier(Compressor):
    """Keeps k coordinates: a message is k values and k indices."""

    def __init__(self, d: int, k: int, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, float_bits, seed)
        self.k = check_int("k", k, 1, self.d)

    def _buffers(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(self.k, dtype=np.int64), np.empty(self.k, dtype=x.dtype)

    @property
    def bits(self) -> int:
        return self.k * (self.float_bits + index_bits(self.d))

    @property
    def floats(self) -> int:
        return self.k

    def extra_repr(self) -> str:
        return f"k={self.k}, "


class RandK(_Sparsifier):
    """k coordinates uniformly without replacement, scaled by d/k: unbiased, omega = d/k - 1."""

    unbiased = True

    def __init__(self, d: int, k: int, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, k, float_bits, seed)
        self.omega = self.d / self.k - 1.0

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        idx, val = self._buffers(x)
        _native.rand_k(x, self.k, seed, idx, val)
        return Message(self.d, val, self.bits, idx)


class TopK(_Sparsifier):
    """The k largest magnitudes (ties: lower index first): deterministic, contractive, alpha = k/d."""

    def __init__(self, d: int, k: int, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, k, float_bits, seed)
        self.alpha = self.k / self.d

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        idx, val = self._buffers(x)
        _native.top_k(x, self.k, idx, val)
        return Message(self.d, val, self.bits, idx)

    def compress_difference(self, a: np.ndarray | Sequence[float], b: np.ndarray | Sequence[float],
                            seed: int | None = None) -> Message:
        # EF21's C(grad - g_i): one native pass over both vectors selects from their difference,
        # computed per coordinate exactly as numpy's a - b computes it
        a, b = self._vector(a), self._vector(b)
        if a.dtype != b.dtype:  # numpy's promotion decides the difference's type
            return super().compress_difference(a, b, seed)
        self._seed_for(seed)  # TopK draws nothing, but the compressor's own stream moves as compress()'s does
        idx, val = self._buffers(a)
        _native.top_k_diff(a, b, self.k, idx, val)
        return Message(self.d, val, self.bits, idx)


class RandSeqK(_Sparsifier):
    """The BurTorch paper's RandSeqK: k consecutive coordinates (cyclically) from a uniform random
    start, scaled by d/k. Each coordinate is kept with probability k/d, so it is unbiased with
    omega = d/k - 1 like RandK, but a message carries ONE index (the start) and reads memory in
    one contiguous run."""

    unbiased = True

    def __init__(self, d: int, k: int, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, k, float_bits, seed)
        self.omega = self.d / self.k - 1.0

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        val = np.empty(self.k, dtype=x.dtype)
        start = _native.rand_seq_k(x, self.k, seed, val)
        idx = (start + np.arange(self.k, dtype=np.int64)) % self.d
        return Message(self.d, val, self.bits, idx)

    @property
    def bits(self) -> int:
        return self.k * self.float_bits + index_bits(self.d)


# Exponent widths of the IEEE formats, for natural compression's sign + exponent messages.
_EXPONENT_BITS = {16: 5, 32: 8, 64: 11}


class Natural(Compressor):
    """Natural compression (Horvath, Ho, Horvath, Sahu, Canini, Richtarik 2019): every coordinate
    rounded at random to one of the two powers of two around it, keeping its mean. Unbiased with
    omega = 1/8; a coordinate costs a sign and an exponent (9 bits for float32 values)."""

    unbiased = True
    omega = 1.0 / 8.0

    def __init__(self, d: int, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, float_bits, seed)
        if self.float_bits not in _EXPONENT_BITS:
            raise ValueError(f"natural compression needs float_bits in {sorted(_EXPONENT_BITS)}, got {float_bits}")

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        out = np.empty_like(x)
        _native.natural(x, seed, out)
        return Message(self.d, out, self.bits)

    @property
    def bits(self) -> int:
        return self.d * (1 + _EXPONENT_BITS[self.float_bits])

    @property
    def floats(self) -> int:
        return 0


class RandomDithering(Compressor):
    """Random dithering with s levels on the l2 norm (QSGD, Alistarh et al. 2017): unbiased,
    omega = min(d / s^2, sqrt(d) / s). A message is the norm (one float) and, per coordinate, a
    sign bit and a level of ceil(log2(s + 1)) bits."""

    unbiased = True

    def __init__(self, d: int, s: int = 1, float_bits: int = 32, seed: int | None = None) -> None:
        super().__init__(d, float_bits, seed)
        self.s = check_int("s", s, 1, 2 ** 31)
        self.omega = min(self.d / self.s ** 2, math.sqrt(self.d) / self.s)

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        out = np.empty_like(x)
        _native.dither(x, self.s, seed, out)
        return Message(self.d, out, self.bits)

    @property
    def bits(self) -> int:
        return self.float_bits + self.d * (1 + math.ceil(math.log2(self.s + 1)))

    @property
    def floats(self) -> int:
        return 1

    def extra_repr(self) -> str:
        return f"s={self.s}, "


class Scaled(Compressor):
    """C(x) = Q(x) / (omega + 1) for an unbiased Q: contractive with alpha = 1 / (omega + 1), which
    lets EF21 use RandK, RandSeqK, natural compression or dithering."""

    alpha: float

    def __init__(self, inner: Compressor) -> None:
        if not isinstance(inner, Compressor) or not inner.unbiased or inner.omega is None:
            raise TypeError("Scaled() wraps an unbiased Compressor")
        super().__init__(inner.d, inner.float_bits, inner._seed)
        self.inner = inner
        self.alpha = 1.0 / (inner.omega + 1.0)

    def _compress(self, x: np.ndarray, seed: int) -> Message:
        return self.inner._compress(x, seed).scaled(self.alpha)

    @property
    def bits(self) -> int:
        return self.inner.bits

    @property
    def floats(self) -> int:
        return self.inner.floats

    def __repr__(self) -> str:
        return f"Scaled({self.inner!r}, alpha={self.alpha:g})"


# Names for the command line and configuration files.
SPARSIFIERS = {"randk": RandK, "topk": TopK, "randseqk": RandSeqK}
COMPRESSORS = ("identity", "randk", "topk", "randseqk", "natural", "dithering")


def make_compressor(name: str, d: int, k: int | None = None, s: int = 1, float_bits: int = 32) -> Compressor:
    """A compressor by name: one of COMPRESSORS, or 'scaled-NAME' for an unbiased one made contractive."""
    if not isinstance(name, str):
        raise TypeError(f"compressor name must be a str, got {type(name).__name__}")
    if name.startswith("scaled-"):
        inner = make_compressor(name[len("scaled-"):], d, k, s, float_bits)
        if not inner.unbiased or isinstance(inner, Identity):
            raise ValueError(f"{name!r}: only randk, randseqk, natural and dithering can be scaled")
        return Scaled(inner)
    if name == "identity":
        return Identity(d, float_bits)
    if name in SPARSIFIERS:
        if k is None:
            raise ValueError(f"the {name} compressor needs k (--k)")
        return SPARSIFIERS[name](d, k, float_bits)
    if name == "natural":
        return Natural(d, float_bits)
    if name == "dithering":
        return RandomDithering(d, s, float_bits)
    raise ValueError(f"unknown compressor {name!r}; choose from {', '.join(COMPRESSORS)} "
                     f"(or scaled-NAME for an unbiased one)")


__all__ = ["COMPRESSORS", "Compressor", "Identity", "Message", "Natural", "RandK", "RandomDithering", "RandSeqK",
           "Scaled", "TopK", "full_message", "make_compressor"]
