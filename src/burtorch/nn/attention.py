"""Multi-head causal self-attention.

Two equivalent paths: `fused=True` (the default) runs all heads in one record over the fused q/k/v
block; `fused=False` builds each head from column views of that block and concatenates the heads'
outputs as a view (no copy). Tests check that both give the same values and gradients; the fused
one saves ~25 native calls per layer."""
from .. import _core
from .linear import Linear
from .module import Module


class MultiHeadAttention(Module):
    """x (T x C) -> (T x C). q/k/v weights are one (3C x C) block without bias: rows [0, C) are the
    queries of heads 0..H-1 in turn, then the keys, then the values."""

    def __init__(self, dim: int, heads: int, causal: bool = True, fused: bool = True, dtype=None):
        super().__init__()
        self.fused = fused
        if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:  # before dim % heads
            raise ValueError(f"heads must be a positive int, got {heads!r}")
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.dim, self.heads, self.head_size, self.causal = dim, heads, dim // heads, causal
        self.qkv = Linear(dim, 3 * dim, bias=False, dtype=dtype)
        self.proj = Linear(dim, dim, dtype=dtype)

    def forward(self, x, return_weights: bool = False, sequences: int = 1):
        """x: (T x C), or `sequences` stacked sequences ((S*T) x C; fused path only)."""
        qkv = self.qkv(x)
        if self.fused:
            if return_weights:
                y, weights = _core.multi_head_attention(qkv, self.heads, self.causal, return_weights=True,
                                                        sequences=sequences)
                return self.proj(y), weights
            return self.proj(_core.multi_head_attention(qkv, self.heads, self.causal, sequences=sequences))
        if sequences != 1:
            raise ValueError("stacked sequences need the fused attention (fused=True)")
        C, hs = self.dim, self.head_size
        outs, weights = [], []
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

    def extra_repr(self):
        return f"dim={self.dim}, heads={self.heads}, causal={self.causal}, fused={self.fused}"


class CausalSelfAttention(MultiHeadAttention):
    def __init__(self, dim: int, heads: int, dtype=None):
        super().__init__(dim, heads, causal=True, dtype=dtype)
