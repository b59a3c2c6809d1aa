from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _core, late
from .optimizer import Optimizer, Params, _check_hyper


class SGD(Optimizer):
    """SGD with momentum, dampening, Nesterov and (L2) weight decay, as ``torch.optim.SGD``.

    Args:
        params: a module, a list of parameter Vectors, or one Vector.
        lr: the learning rate.
        momentum: the momentum factor (0: none).
        weight_decay: L2 penalty added to the gradient.
        dampening: dampening of the momentum.
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).

    Raises:
        ValueError: a negative or non-numeric hyperparameter, or Nesterov without momentum.
        TypeError: parameters that are not Vectors.
    """

    def __init__(self, params: Params, lr: float = 0.1, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False) -> None:
        self.lr = _check_hyper("lr", lr)
        self.momentum = _check_hyper("momentum", momentum)
        self.weight_decay = _check_hyper("weight_decay", weight_decay)
        self.dampening = _check_hyper("dampening", dampening)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening = 0")
        self.nesterov = bool(nesterov)
        self.buffers = 1 if self.momentum else 0
        super().__init__(params)
        self.fused_weights = 0  # weights updated inside the sweep by the last fused_step()

    def step(self) -> None:
        _core.sgd_step(self.params, self.state, self.lr, self.momentum, self.weight_decay, self.dampening,
                       self.nesterov)

    def fused_step(self, model: Any, batch: Sequence[Any], loss_fn: Any = None, chunk: int = 1,
                   threads: int | None = None, compile: bool = False) -> float:
        """One step on the mean loss over ``batch``, each linear weight updated inside the backward.

        The same step as ``grad_oracle(model, batch, loss_fn, chunk=chunk); self.step()``, with the
        same resulting values to the bit, but a linear layer's weight takes its update where its
        gradient is computed (after its input gradient has read the old weights), so that gradient
        is never stored, zeroed or read back: a wide layer costs three passes over its weights per
        step instead of eight. Two exceptions, on several threads: a layer over a chunk with at
        least 1.5 MiB of weights splits by output units, and its input gradient is the sum of one
        partial gradient per thread, in thread order; and a compiled step runs a lookup whose
        rows only the next linear record reads together with that layer (each thread looks every
        row up itself), and the table's gradient is such a sum (``MakemoreMLP`` looks its rows up
        inside its first layer's record, ``lookup_linear``, whose table gradient through its
        tables is a sum of one part per task as well). Each is within rounding of one thread's
        (which is the unfused step's on one thread), and the same on every run for a given thread
        count.

        Fusing needs the whole batch as one graph (one sample, or ``chunk >= len(batch)`` with
        ``loss_batch``), no momentum, and a weight that no other op reads; otherwise the step
        runs unfused, with the same result. ``fused_weights`` says how many weights the last call
        fused; their ``.grad`` is left as it was, every other gradient is the batch's.

        One more fusion, across chunks: with ``compile=True``, no momentum, two threads or more
        and ``len(batch)`` a multiple of ``chunk`` (``1 < chunk < len(batch)``), each thread
        replays its block of chunks as ``grad_oracle(..., compile=True, chunk=chunk)`` does, and
        every parameter steps in the pass that adds the threads' gradients: no ``.grad`` is
        written (each keeps its values) and ``fused_weights`` is 0. The values are those of the
        unfused step on that many threads. It needs the optimizer's parameters to be the model's
        (``model.parameter_vector()``); otherwise, or when a chunk cannot replay, the step runs
        unfused.

        With ``compile=True`` and the whole batch as one chunk of samples of one shape, the step
        replays a recorded program of ``model.loss_batch`` (traced on first use, as
        ``grad_oracle(..., compile=True, chunk=k)`` traces it) instead of building the graph in
        Python: the same values to the bit. The batch is a list of samples or an
        :class:`burtorch.data.ArrayBatch`, whose ids the replay reads straight from the arrays. A
        batch it cannot replay (another kind of sequence, mixed shapes, a guard that comes out
        differently) steps eagerly.

        Args:
            model, batch, loss_fn, chunk, threads: as :func:`burtorch.oracle.grad_oracle`.
            compile: replay the step from a recorded program when the batch allows it.

        Returns:
            The mean loss over ``batch`` before the step.

        Raises:
            As :func:`burtorch.oracle.grad_oracle`; a non-finite loss changes nothing.
        """
        oracle = late.module("oracle")
        checked_threads, grad_oracle, thread_cap = oracle.checked_threads, oracle.grad_oracle, oracle.thread_cap
        oracle.check_grad_enabled("fused_step()")  # under no_grad a one-graph step returned its loss, untaken
        n = len(batch)
        good_chunk = isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1
        if (compile and not self.momentum and good_chunk and 1 < chunk < n and n % chunk == 0 and loss_fn is None
                and hasattr(model, "loss_batch") and hasattr(model, "parameter_vector")):
            n_threads = checked_threads(threads)
            if n_threads > 1:
                with thread_cap(n_threads):
                    loss = late.module("oracle_compiled").compiled_sgd_chunks(self, model, batch, chunk, n_threads)
                if loss is not None:
                    return loss
        one_graph = good_chunk and (n == 1 or (n > 1 and chunk >= n and loss_fn is None
                                               and hasattr(model, "loss_batch")))
        if self.momentum or not one_graph or not hasattr(model, "parameter_vector"):
            # grad_oracle raises for a bad chunk, an empty batch or a model it cannot use
            self.fused_weights = 0
            loss = grad_oracle(model, batch, loss_fn, chunk=chunk, threads=threads, compile=compile)
            self.step()
            return loss
        n_threads = checked_threads(threads)
        if compile and n > 1:  # a list of samples or an ArrayBatch (others step eagerly)
            with thread_cap(n_threads):
                replayed = late.module("oracle_compiled").compiled_fused_step(self, model, batch)
            if replayed is not None:
                return replayed
        zero = model.parameter_vector()
        arena = zero.arena
        cp = arena.checkpoint()
        with thread_cap(n_threads):
            try:
                if n == 1:
                    sample = batch[0]
                    if loss_fn is not None:
                        loss = loss_fn(model, sample)
                    elif hasattr(model, "loss"):
                        loss = model.loss(*sample)
                    else:
                        raise TypeError(f"fused_step(): a {type(model).__name__} has no loss(*sample); pass loss_fn")
                else:
                    loss = model.loss_batch(list(batch))
                if not isinstance(loss, _core.Value):
                    raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
                v = loss.data
                if v != v or v in (float("inf"), float("-inf")):
                    raise FloatingPointError(f"the loss is {v} for a batch; lower the learning rate or check the data")
                self.fused_weights = _core.sgd_fused_backward(loss, self.params, self.state, 1.0, self.lr,
                                                              self.weight_decay, True, zero)
                return v
            finally:
                arena.rewind(cp)
