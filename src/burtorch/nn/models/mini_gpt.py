"""A miniature GPT (Karpathy's gpt.py, scaled down as in the paper; workload W5)."""
from __future__ import annotations

from collections.abc import Sequence

from ... import _core
from ..attention import MultiHeadAttention
from ..embedding import Embedding
from ..layer_norm import LayerNorm
from ..linear import Linear
from ..module import Module


class Block(Module):
    """A pre-norm transformer block: ``x + attn(ln1(x))``, then ``x + ff(ln2(x))``.

    Args:
        dim: the model width.
        heads: the attention heads.
        ff_mult: the feed-forward width as a multiple of ``dim`` (Linear-ReLU-Linear).
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    def __init__(self, dim: int, heads: int, ff_mult: int = 4, dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.ln1 = LayerNorm(dim, dtype=self.dtype)
        self.attn = MultiHeadAttention(dim, heads, causal=True, dtype=self.dtype)
        self.ln2 = LayerNorm(dim, dtype=self.dtype)
        self.ff1 = Linear(dim, ff_mult * dim, dtype=self.dtype)
        self.ff2 = Linear(ff_mult * dim, dim, dtype=self.dtype)

    def forward(self, x: _core.Vector, sequences: int = 1) -> _core.Vector:
        x = x + self.attn(self.ln1(x), sequences=sequences)
        return x + self.ff2(self.ff1(self.ln2(x)).relu())


class MiniGPT(Module):
    """A miniature GPT: token + position embeddings, ``layers`` Blocks, optionally a final
    LayerNorm, an LM head.

    The paper's configuration (``MiniGPT.paper()``, W5): vocab 65, block 8, width 24, 6 layers of
    6 heads (head size 4), feed-forward 96, the two norms of each block and no final norm (as the
    authors' model): 46,289 parameters. ``MiniGPT.karpathy()`` is the same with Karpathy's final
    LayerNorm (gpt.py): 2 x width more, 46,337.

    Args:
        vocab: the vocabulary size.
        block: the longest context.
        dim: the model width.
        layers: the number of blocks.
        heads: attention heads per block.
        final_norm: a LayerNorm between the last block and the head (Karpathy's gpt.py has one;
            the paper's model does not).
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    def __init__(self, vocab: int = 65, block: int = 8, dim: int = 24, layers: int = 6, heads: int = 6,
                 dtype: _core.DType | None = None, final_norm: bool = True) -> None:
        super().__init__(dtype)
        if not isinstance(final_norm, bool):
            raise TypeError(f"final_norm must be a bool, got {type(final_norm).__name__}")
        self.vocab, self.block, self.dim, self.n_layers, self.n_heads = vocab, block, dim, layers, heads
        self.final_norm = final_norm
        self.tok = Embedding(vocab, dim, dtype=self.dtype)
        self.pos = Embedding(block, dim, dtype=self.dtype)
        self.blocks = [Block(dim, heads, dtype=self.dtype) for _ in range(layers)]
        if final_norm:
            self.ln_f = LayerNorm(dim, dtype=self.dtype)
        self.head = Linear(dim, vocab, dtype=self.dtype)

    @classmethod
    def paper(cls, vocab: int = 65, dtype: _core.DType = _core.float32) -> MiniGPT:
        """The paper's W5 exactly (block 8, width 24, 6 layers of 6 heads, no final norm: 46,289
        parameters on 65 characters), in FP32 as the paper trains it (``dtype`` defaults to
        ``bt.float32``, not to ``bt.get_default_dtype()``)."""
        return cls(vocab=vocab, block=8, dim=24, layers=6, heads=6, dtype=dtype, final_norm=False)

    @classmethod
    def karpathy(cls, vocab: int = 65, dtype: _core.DType = _core.float32) -> MiniGPT:
        """The paper's sizes with Karpathy's final LayerNorm (gpt.py): 46,337 parameters on 65."""
        return cls(vocab=vocab, block=8, dim=24, layers=6, heads=6, dtype=dtype, final_norm=True)

    def _final(self, x: _core.Vector) -> _core.Vector:
        return self.head(self.ln_f(x) if self.final_norm else x)

    def forward(self, ids: Sequence[int]) -> _core.Vector:
        T = len(ids)
        if not 1 <= T <= self.block:
            raise ValueError(f"MiniGPT takes 1..{self.block} tokens, got {T}")
        x = self.tok(ids) + self.pos.weight[0:T]
        for blk in self.blocks:
            x = blk(x)
        return self._final(x)

    def loss(self, ids: Sequence[int], targets: Sequence[int]) -> _core.Value:
        """Cross-entropy averaged over the positions."""
        return _core.cross_entropy(self.forward(ids), targets)

    def loss_batch(self, samples: Sequence[tuple[Sequence[int], Sequence[int]]]) -> _core.Value:
        """Mean loss of k (ids, targets) sequences of one length as ONE graph: the sequences are
        stacked as (k*T) rows, every layer is one record over them, attention stays per sequence."""
        T = len(samples[0][0])
        if not 1 <= T <= self.block or any(len(i) != T or len(t) != T for i, t in samples):
            raise ValueError(f"loss_batch needs sequences of one length in 1..{self.block}")
        k = len(samples)
        ids = [i for s in samples for i in s[0]]
        pos = self.pos.weight[0:T]
        x = self.tok(ids) + _core.cat([pos] * k).reshape(k * T, self.dim)
        for blk in self.blocks:
            x = blk(x, sequences=k)
        logits = self._final(x)
        return _core.cross_entropy(logits, [t for s in samples for t in s[1]])

    def extra_repr(self) -> str:
        return (f"vocab={self.vocab}, block={self.block}, dim={self.dim}, layers={self.n_layers}, "
                f"heads={self.n_heads}" + ("" if self.final_norm else ", final_norm=False"))
