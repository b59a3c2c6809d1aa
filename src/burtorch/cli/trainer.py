"""The training loop of `burtorch train`, with validation and sampling.

Every step: draw b samples, then the optimizer's planned step (``optimizer.train_step``, the plan
given or chosen at the start), or, with chunk/compile by hand, grad_oracle and one optimizer step
(the paper's per-sample build / backward / rewind by default, so memory is that of one sample).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from ..modes import no_grad
from ..oracle import checked_threads, grad_oracle, mean_loss, thread_cap
from ..seeding import next_seed


@dataclass
class History:
    """Per-step training losses and the validation losses of the evaluation steps."""

    steps: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    val_steps: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)


def train(model, optimizer, train_set, val_samples, steps: int, batch: int, rng: random.Random | None = None,
          eval_every: int = 200, history: History | None = None, start_step: int = 0, progress=None,
          chunk: int = 1, after_step=None, stop=None, compile: bool = False, threads: int | None = 1,
          plan=None, memory=None) -> History:
    """Runs steps ``start_step + 1 .. steps`` of training.

    Args:
        model: a module with ``loss`` (and ``loss_batch`` for ``chunk > 1``).
        optimizer: an optimizer over the model's parameters (``step()``).
        train_set: a dataset with ``batch(b, rng)``.
        val_samples: the samples of every validation loss.
        steps: the last step to run.
        batch: samples per step.
        rng: the sampler's random stream; default ``random.Random(bt.seeding.next_seed())``.
        eval_every: steps between validation losses (and the last step always).
        history: the history to append to (a resumed run's); default a new one.
        start_step: the steps already done.
        progress: an object with ``update(step, loss, val)``, or None.
        chunk: samples per graph (see :func:`burtorch.oracle.grad_oracle`).
        compile: replay recorded programs, per sample or per chunk (see :func:`burtorch.oracle.grad_oracle`).
        threads: native threads per step, the oracle's (see :func:`burtorch.oracle.grad_oracle`) and the
            optimizer step's; None (with a ``plan``) lets the planner try 1 and ``bt.get_num_threads()``.
        plan: None runs ``chunk``, ``compile`` and ``threads`` as given; otherwise every step is
            ``optimizer.train_step(model, samples, plan=plan, memory=memory, threads=threads)``
            ("auto", or a plan such as "compiled chunk=32").
        memory: the planner's memory setting (see ``Optimizer.train_step``).
        after_step: ``after_step(step, history)``, called after each step (periodic checkpoints).
        stop: an object whose ``signal`` turns non-None to stop after the current step.

    Returns:
        The history; its last step is where training stopped.

    Raises:
        ValueError: ``batch``, ``eval_every`` or ``chunk`` below 1, or ``start_step`` out of range.
    """
    for name, value in (("batch", batch), ("eval_every", eval_every), ("chunk", chunk)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not 0 <= start_step <= steps:
        raise ValueError(f"start_step {start_step} is outside 0..{steps}")
    if rng is None:
        rng = random.Random(next_seed())
    # once: the oracle and the step both run on this many
    n_threads = checked_threads(threads) if plan is None or threads is not None else None
    history = history or History()
    ema = None
    val = history.val_loss[-1] if history.val_loss else None
    for step in range(start_step + 1, steps + 1):
        samples = train_set.batch(batch, rng)
        if plan is not None:
            loss = optimizer.train_step(model, samples, plan=plan, memory=memory, threads=n_threads)
        else:
            assert n_threads is not None  # checked above when no plan is given
            loss = grad_oracle(model, samples, chunk=chunk, compile=compile, threads=n_threads)
            # the step follows the oracle's count, not the process's (every core by default): a
            # step split across cores after a one-thread oracle left the next oracle reading half
            # the weights back from the other core's cache, with a helper spinning on a core the
            # run was told not to use
            with thread_cap(n_threads):
                optimizer.step()
        ema = loss if ema is None else 0.95 * ema + 0.05 * loss
        history.steps.append(step)
        history.train_loss.append(loss)
        if step % eval_every == 0 or step == steps:
            val = mean_loss(model, val_samples)
            history.val_steps.append(step)
            history.val_loss.append(val)
        if progress:
            progress.update(step, ema, val)
        if after_step is not None:
            after_step(step, history)
        if stop is not None and stop.signal is not None:
            break
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
        with no_grad():  # sampling needs values only
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


def uniform_loss(vocab: int) -> float:
    """The loss of a model that predicts every token with probability 1 / vocab."""
    return math.log(vocab)
