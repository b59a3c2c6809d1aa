"""Multi-head causal self-attention.

Two equivalent paths: `fused=True` (the default) runs all heads in one record over the fused q/k/v
block; `fused=False` builds each head from column views of that block and concatenates the heads'
outputs as a view (no copy). Tests check that both give the same values and gradients; the fused
one makes one native call where the other makes several per head."""
from __future__ import annotations

from typing import Literal, overload

from .. import _core
from .linear import Linear
from .module import Module


class MultiHeadAttention(Module):
    """Multi-head self-attention of a (T x C) sequence, returning (T x C).

    The q/k/v weights are one (3C x C) block without bias: rows [0, C) are the queries of heads
    0..H-1 in turn, then the keys, then the values; an output projection (with bias) follows.

    Args:
        dim: C, the model width.
        heads: the number of heads (``dim`` must be a multiple of it).
        causal: each position attends only to itself and earlier ones (default True).
        fused: all heads in one record (default); False builds each head from column views.
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.

    Raises:
        ValueError: ``dim`` is not a multiple of ``heads``.
    """

    def __init__(self, dim: int, heads: int, causal: bool = True, fused: bool = True,
                 dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.fused = fused
        if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:  # before dim % heads
            raise ValueError(f"heads must be a positive int, got {heads!r}")
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.dim, self.heads, self.head_size, self.causal = dim, heads, dim // heads, causal
        self.qkv = Linear(dim, 3 * dim, bias=False, dtype=self.dtype)
        self.proj = Linear(dim, dim, dtype=self.dtype)

    @overload
    def forward(self, x: _core.VectorLike, return_weights: Literal[False] = False,
                sequences: int = 1) -> _core.Vector: ...

    @overload
    def forward(self, x: _core.VectorLike, return_weights: Literal[True],
                sequences: int = 1) -> tuple[_core.Vector, list[_core.Vector]]: ...

    def forward(self, x: _core.VectorLike, return_weights: bool = False,
                sequences: int = 1) -> _core.Vector | tuple[_core.Vector, list[_core.Vector]]:
        """x: (T x C), or `sequences` stacked sequences ((S*T) x C; fused path only).

        With ``return_weights`` also the H (T x T) attention weight matrices, one per head.
        """
        qkv = self.qkv(x)
        if self.fused:
            if return_weights:
                y, head_weights = _core.multi_head_attention(qkv, self.heads, self.causal, return_weights=True,
                                                             sequences=sequences)
                return self.proj(y), head_weights
            return self.proj(_core.multi_head_attention(qkv, self.heads, self.causal, sequences=sequences))
        if sequences != 1:
            raise ValueError("stacked sequences need the fused attention (fused=True)")
        C, hs = self.dim, self.head_size
        outs: list[_core.Vector] = []
        weights: list[_core.Vector] = []
        for h in range(self.heads):
            q = qkv.columns(h * hs, (h + 1) * hs)
            k = qkv.columns(C + h * hs, C + (h + 1) * hs)
            v = qkv.columns(2 * C + h * hs, 2 * C + (h + 1) * hs)
            if return_weights:
                o, w = _core.attention(q, k, v, causal=self.causal, return_weights=True)
                weights.append(w)
            else:
                o = _core.attention(q, k, v, causal=self.causal)
            outs.append(o)
        y = self.proj(_core.hcat(outs))
        return (y, weights) if return_weights else y

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, causal={self.causal}, fused={self.fused}"


class CausalSelfAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with ``causal=True`` (GPT's attention)."""

    def __init__(self, dim: int, heads: int, dtype: _core.DType | None = None) -> None:
        super().__init__(dim, heads, causal=True, dtype=dtype)
