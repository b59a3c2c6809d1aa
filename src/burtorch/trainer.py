"""Training loops for the two character-level models, with validation, checkpoints and sampling.

Used by `burtorch train mlp|gpt`. Every step: draw b samples, grad_oracle (per-sample
build / backward / rewind, so memory is that of one sample), one optimizer step.
"""
from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from array import array
from dataclasses import asdict, dataclass, field

from .oracle import grad_oracle


@dataclass
class History:
    steps: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    val_steps: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)


def evaluate(model, samples) -> float:
    """Mean loss over samples, without backward (each graph is discarded right away)."""
    arena = model.parameter_vector().arena
    cp = arena.checkpoint()
    total = 0.0
    for s in samples:
        total += model.loss(*s).data
        arena.rewind(cp)
    return total / len(samples)


class Progress:
    """One status line: redrawn in place on a terminal, printed every `every` steps otherwise."""

    def __init__(self, total: int, stream=None, every: int = 100):
        stream = stream if stream is not None else sys.stderr  # looked up now: it may be redirected
        self.total, self.stream, self.every = total, stream, every
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()

    def update(self, step: int, loss: float, val: float | None, force: bool = False) -> None:
        if not (self.tty or force or step % self.every == 0 or step == self.total):
            return
        rate = step / max(time.perf_counter() - self.t0, 1e-9)
        width = 24
        done = int(width * step / self.total)
        bar = "#" * done + "-" * (width - done)
        msg = f"[{bar}] step {step}/{self.total}  loss {loss:.4f}"
        if val is not None:
            msg += f"  val {val:.4f}"
        msg += f"  {rate:.0f} steps/s"
        if self.tty:
            self.stream.write("\r" + msg + " " * 4)
            if step == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(msg + "\n")
        self.stream.flush()


def train(model, optimizer, train_set, val_samples, steps: int, batch: int, rng: random.Random,
          eval_every: int = 200, history: History | None = None, start_step: int = 0,
          progress: Progress | None = None, chunk: int = 1, compile: bool = False) -> History:
    history = history or History()
    ema = None
    val = history.val_loss[-1] if history.val_loss else None
    for step in range(start_step + 1, steps + 1):
        samples = train_set.batch(batch, rng)
        loss = grad_oracle(model, samples, chunk=chunk, compile=compile)
        optimizer.step()
        ema = loss if ema is None else 0.95 * ema + 0.05 * loss
        history.steps.append(step)
        history.train_loss.append(loss)
        if step % eval_every == 0 or step == steps:
            val = evaluate(model, val_samples)
            history.val_steps.append(step)
            history.val_loss.append(val)
        if progress:
            progress.update(step, ema, val)
    return history


def sample_text(model, tokenizer, rng: random.Random, length: int = 200, prompt_ids=None,
                stop_id: int | None = None, temperature: float = 1.0) -> list:
    """Autoregressive sampling: softmax of the last position's logits, one token at a time."""
    arena = model.parameter_vector().arena
    block = model.block
    ids = list(prompt_ids or [])
    out = []
    cp = arena.checkpoint()
    for _ in range(length):
        if hasattr(model, "blocks"):  # GPT: up to `block` tokens of context
            ctx = ids[-block:] if ids else [0]
            logits = model(ctx)[len(ctx) - 1]
        else:  # MLP: exactly `block` ids, padded with the boundary token
            ctx = ([0] * block + ids)[-block:]
            logits = model(ctx)
        probs = (logits * (1.0 / temperature)).softmax().data
        arena.rewind(cp)
        r, acc, nxt = rng.random(), 0.0, len(probs) - 1
        for i, p in enumerate(probs):
            acc += p
            if r < acc:
                nxt = i
                break
        if stop_id is not None and nxt == stop_id:
            break
        ids.append(nxt)
        out.append(nxt)
    return out


# ---------------------------------------------------------------- checkpoints
def save_checkpoint(directory: str, model, optimizer, meta: dict, history: History) -> None:
    """A directory: model.burt (burtorch.io state dict), optimizer.bin (float64 buffers), meta.json."""
    from . import io

    os.makedirs(directory, exist_ok=True)
    io.save_state_dict(model, os.path.join(directory, "model.burt"))
    st = optimizer.state_dict()
    buf = array("d", st["buffers"])
    tmp = os.path.join(directory, "optimizer.bin.tmp")
    with open(tmp, "wb") as f:
        buf.tofile(f)
    os.replace(tmp, os.path.join(directory, "optimizer.bin"))
    meta = dict(meta, optimizer_steps=st["steps"], optimizer_buffers=len(buf), history=asdict(history))
    tmp = os.path.join(directory, "meta.json.tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, os.path.join(directory, "meta.json"))


def read_meta(directory: str) -> dict:
    path = os.path.join(directory, "meta.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory} is not a burtorch training checkpoint (no meta.json)")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is corrupt: {e}") from None
    for key in ("kind", "config", "itos", "step", "optimizer_steps", "optimizer_buffers", "history"):
        if key not in meta:
            raise ValueError(f"{path} lacks {key!r}; not a burtorch training checkpoint")
    return meta


def load_checkpoint(directory: str, model, optimizer, meta: dict) -> History:
    from . import io

    io.load_state_dict(os.path.join(directory, "model.burt"), into=model)
    path = os.path.join(directory, "optimizer.bin")
    n = meta["optimizer_buffers"]
    if os.path.getsize(path) != 8 * n:
        raise ValueError(f"{path} holds {os.path.getsize(path)} bytes, expected {8 * n}")
    buf = array("d")
    with open(path, "rb") as f:
        buf.fromfile(f, n)
    optimizer.load_state_dict({"steps": meta["optimizer_steps"], "buffers": buf})
    return History(**meta["history"])


def uniform_loss(vocab: int) -> float:
    return math.log(vocab)
