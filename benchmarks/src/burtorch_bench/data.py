"""Data, batches and initial weights for W4 / W5, shared by every framework (numpy, lazy).

Every peer trains from the same initial weights on the same batches, so the losses they compute
must agree to FP32 tolerance: a faster wrong answer shows as wrong. Batches are prepared before
the timed region.
"""
from __future__ import annotations

from burtorch.data import corpus
from burtorch.data.locate import find_data_file

SEED = 1234


def load_words(data: str | None = None):
    """(words, source): names.txt from ``--data`` or $BURTORCH_DATA, else the embedded corpus's words."""
    path = find_data_file("names.txt", data)
    if path is None:
        return corpus.default_words(), "embedded corpus (pydoc_data.topics words; names.txt not found)"
    return corpus.read_words(str(path)), str(path)


def load_text(data: str | None = None):
    """(text, source): tinyshakespeare.txt from ``--data`` or $BURTORCH_DATA, else the embedded corpus."""
    path = find_data_file("tinyshakespeare.txt", data)
    if path is None:
        return corpus.default_text(), "embedded corpus (pydoc_data.topics; tinyshakespeare.txt not found)"
    return corpus.read_text(str(path)), str(path)


def mlp_dataset(block: int, data: str | None = None):
    """(X int64 [N, block], Y int64 [N], vocab, source): every next-character example of every word."""
    import numpy as np
    words, source = load_words(data)
    chars = sorted(set("".join(words)))
    stoi = {ch: i + 1 for i, ch in enumerate(chars)}  # 0 is '.', start and end of a word
    xs, ys = [], []
    for w in words:
        context = [0] * block
        for ch in w + ".":
            ix = stoi.get(ch, 0)
            xs.append(context)
            ys.append(ix)
            context = context[1:] + [ix]
    return np.asarray(xs, dtype=np.int64), np.asarray(ys, dtype=np.int64), len(chars) + 1, source


def gpt_dataset(data: str | None = None):
    """(tokens int64 [N], vocab, source)."""
    import numpy as np
    text, source = load_text(data)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    return np.asarray([stoi[c] for c in text], dtype=np.int64), len(chars), source


def mlp_batches(X, Y, batch: int, count: int, seed: int = SEED):
    """``count`` batches of ``batch`` samples drawn uniformly (with replacement across batches)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ix = rng.integers(0, len(X), size=batch)
        out.append((X[ix], Y[ix]))
    return out


def gpt_batches(tokens, block: int, batch: int, count: int, seed: int = SEED):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        starts = rng.integers(0, len(tokens) - block - 1, size=batch)
        x = np.stack([tokens[s:s + block] for s in starts])
        y = np.stack([tokens[s + 1:s + block + 1] for s in starts])
        out.append((x, y))
    return out


def mlp_init(vocab: int, embed: int, block: int, hidden: int, seed: int = SEED) -> dict:
    """FP32 weights as PyTorch's defaults draw them: N(0,1) table, U(+-1/sqrt(fan_in)) linears."""
    import numpy as np
    rng = np.random.default_rng(seed)
    fan1, fan2 = block * embed, hidden

    def u(fan, shape):
        bound = 1.0 / fan ** 0.5
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    return {
        "C": rng.standard_normal((vocab, embed)).astype(np.float32),
        "W1": u(fan1, (fan1, hidden)), "b1": u(fan1, (hidden,)),
        "W2": u(fan2, (hidden, vocab)), "b2": u(fan2, (vocab,)),
    }


def gpt_init(vocab: int, block: int, d: int, layers: int, ff: int, seed: int = SEED,
             final_norm: bool = False) -> dict:
    """FP32 weights as Karpathy's gpt.py draws them: N(0, 0.02) weights, zero biases, LN 1/0.

    Names: ``wte wpe``, per layer ``{l}.ln1.w {l}.ln1.b {l}.q {l}.k {l}.v {l}.proj.w {l}.proj.b
    {l}.ln2.w {l}.ln2.b {l}.ff1.w {l}.ff1.b {l}.ff2.w {l}.ff2.b``, then (only with
    ``final_norm``, Karpathy's variant; the paper's model has none) ``lnf.w lnf.b``, then ``head.w
    head.b``. Matrices are stored (in, out) so that ``x @ W`` applies them. Every framework
    applies the final norm exactly when ``lnf.w`` is present.
    """
    import numpy as np
    rng = np.random.default_rng(seed)

    def n(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    def z(*shape):
        return np.zeros(shape, dtype=np.float32)

    def o(*shape):
        return np.ones(shape, dtype=np.float32)

    p = {"wte": n(vocab, d), "wpe": n(block, d)}
    for layer in range(layers):
        p.update({
            f"{layer}.ln1.w": o(d), f"{layer}.ln1.b": z(d),
            f"{layer}.q": n(d, d), f"{layer}.k": n(d, d), f"{layer}.v": n(d, d),
            f"{layer}.proj.w": n(d, d), f"{layer}.proj.b": z(d),
            f"{layer}.ln2.w": o(d), f"{layer}.ln2.b": z(d),
            f"{layer}.ff1.w": n(d, ff), f"{layer}.ff1.b": z(ff),
            f"{layer}.ff2.w": n(ff, d), f"{layer}.ff2.b": z(d),
        })
    if final_norm:
        p.update({"lnf.w": o(d), "lnf.b": z(d)})
    p.update({"head.w": n(d, vocab), "head.b": z(vocab)})
    return p
