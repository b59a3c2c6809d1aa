"""The training steps the thread benchmarks time, one builder per workload: `threads` runs them on
one and on two threads in its process, `capacity`'s pinned workers run them one thread per CPU.
Both import them from here, so that neither imports the other for them.
"""
from __future__ import annotations

import random
from collections.abc import Callable

from .specs import random_w4_batches, random_w5_batches, replay_chunk


def w4_step(hidden: int, block: int = 16, batch: int = 64, threads: int = 1) -> Callable[[int], None]:
    """step(i): a W4 step on `threads` threads (compiled fused, the batch as one chunk) on the
    i-th of 8 fixed batches of `batch` samples, of the model with `hidden` units over contexts
    of `block` positions (the paper's: 16)."""
    import burtorch as bt
    from burtorch import nn
    from burtorch.optim import SGD

    r = random.Random(0)
    bt.manual_seed(0)
    model = nn.MakemoreMLP(vocab=27, block=block, emb=64, hidden=hidden, dtype=bt.float32)
    batches = random_w4_batches(r, batch, block)
    opt = SGD(model.parameters(), lr=0.001)

    def step(i: int) -> None:
        opt.fused_step(model, batches[i % len(batches)], chunk=batch, threads=threads, compile=True)

    return step


def w5_step(batch: int) -> Callable[[int], None]:
    """step(i): a one-thread W5 step (the paper's miniature GPT, compiled fused in chunks of at most
    8 sequences, as the two-thread rows give each thread its own) on the i-th of 8 fixed batches
    of `batch` sequences."""
    import burtorch as bt
    from burtorch import nn
    from burtorch.optim import SGD

    r = random.Random(0)
    bt.manual_seed(0)
    model = nn.MiniGPT.paper(vocab=65, dtype=bt.float32)
    batches = random_w5_batches(r, batch)
    opt = SGD(model.parameters(), lr=0.001)

    def step(i: int) -> None:
        opt.fused_step(model, batches[i % len(batches)], chunk=replay_chunk("gpt", batch, 1), threads=1, compile=True)

    return step
