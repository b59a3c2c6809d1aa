"""The character-level MLP of Bengio et al. (2003) as in makemore (workload W4)."""
from __future__ import annotations

from collections.abc import Sequence

from ... import _core
from ..embedding import Embedding
from ..linear import Linear
from ..module import Module


def _plain(module: Module, cls: type[Module]) -> bool:
    """Whether ``module`` runs ``cls.forward`` itself: not a subclass's, nor one set on it."""
    return type(module).forward is cls.forward and "forward" not in vars(module)


class MakemoreMLP(Module):
    """The character MLP of Bengio et al. (2003) as makemore builds it (the paper's W4).

    A context of ``block`` token ids -> each embedded (a V x emb table) -> concatenated (a view)
    -> Linear(block*emb, hidden) -> tanh -> Linear(hidden, V) -> logits. Parameters:
    V*emb + block*emb*hidden + hidden + hidden*V + V.

    Args:
        vocab: V, the vocabulary size.
        block: the context length.
        emb: the embedding size.
        hidden: the hidden width e.
        dtype: ``bt.float32`` or ``bt.float64``; default ``bt.get_default_dtype()`` when built.
    """

    def __init__(self, vocab: int = 27, block: int = 16, emb: int = 64, hidden: int = 64,
                 dtype: _core.DType | None = None) -> None:
        super().__init__(dtype)
        self.vocab, self.block, self.emb_dim, self.hidden = vocab, block, emb, hidden
        self.embed = Embedding(vocab, emb, dtype=self.dtype)
        self.fc1 = Linear(block * emb, hidden, dtype=self.dtype)
        self.fc2 = Linear(hidden, vocab, dtype=self.dtype)

    @classmethod
    def paper(cls, hidden: int = 64, vocab: int = 27, dtype: _core.DType = _core.float32) -> MakemoreMLP:
        """The paper's W4: block 16, embedding 64, hidden e in {4, 16, ..., 1024}, in FP32 as the
        paper trains it (``dtype`` defaults to ``bt.float32``, not to ``bt.get_default_dtype()``)."""
        return cls(vocab=vocab, block=16, emb=64, hidden=hidden, dtype=dtype)

    def forward(self, context: Sequence[int]) -> _core.Vector:
        if len(context) != self.block:
            raise ValueError(f"MakemoreMLP expects a context of {self.block} token ids, got {len(context)}")
        x = self.embed(context).flatten()
        return self.fc2(self.fc1(x).tanh())

    def loss(self, context: Sequence[int], target: int) -> _core.Value:
        return _core.cross_entropy(self.forward(context), target)

    def loss_batch(self, samples: Sequence[tuple[Sequence[int], int]]) -> _core.Value:
        """Mean loss of k (context, target) samples as ONE graph: each layer is one record over k
        rows (W is read once, not k times), the first one with the lookup and the tanh inside it
        (``lookup_linear``: from 1.5 V rows on it works through the table instead of k contexts).
        A subclass of ``Embedding`` or ``Linear`` with its own ``forward`` in ``embed`` or ``fc1``
        (or a ``forward`` set on the module itself) is called instead, as ``forward`` calls it,
        over the k contexts' rows."""
        ids: list[int] = []
        for ctx, _ in samples:
            if len(ctx) != self.block:
                raise ValueError(f"MakemoreMLP expects contexts of {self.block} token ids, got {len(ctx)}")
            ids.extend(ctx)
        if _plain(self.embed, Embedding) and _plain(self.fc1, Linear):
            h = _core.lookup_linear(self.embed.weight, ids, self.fc1.weight, self.fc1.bias, activation="tanh")
        else:
            h = self.fc1(self.embed(ids).reshape(len(samples), self.block * self.emb_dim)).tanh()
        return _core.cross_entropy(self.fc2(h), [t for _, t in samples])

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, block={self.block}, emb={self.emb_dim}, hidden={self.hidden}"
