"""The paper's per-sample gradient oracle (its serialized batch).

Parameters live below a checkpoint; for each sample the graph is built, swept backward with seed
1/b (so the parameter grads accumulate the gradient of the MEAN loss) and rewound. Peak memory is
that of one sample's graph, whatever the batch size.
"""
from . import _core


def grad_oracle(model, batch, loss_fn=None, zero_grad: bool = True, chunk: int = 1) -> float:
    """Accumulates d mean_loss / d params over `batch` into the parameters' grads.

    batch: a sequence of samples; loss_fn(model, sample) -> scalar Value (default:
    model.loss(*sample)). Returns the mean loss. Parameter grads are zeroed first unless
    zero_grad=False (then the mean gradient is added to what is there).

    chunk=k > 1 (models with ``loss_batch``): k samples at a time form one graph, so each layer is
    one record over k rows and its weights are read once per chunk instead of once per sample.
    Memory is that of one chunk, still independent of the batch size; chunk=1 is the paper's
    per-sample oracle.
    """
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    if chunk > 1:
        if loss_fn is not None or not hasattr(model, "loss_batch"):
            raise ValueError("chunk > 1 needs a model with loss_batch(samples) and no custom loss_fn")
        batch = list(batch)
        groups = [batch[i:i + chunk] for i in range(0, len(batch), chunk)]
        return _sweep(model, groups, len(batch), lambda g: model.loss_batch(g), weight=len, zero_grad=zero_grad)
    if loss_fn is None and not hasattr(model, "loss"):
        raise TypeError(f"grad_oracle(): a {type(model).__name__} has no loss(*sample); pass loss_fn(model, sample)")
    return _sweep(model, batch, len(batch),
                  (lambda s: loss_fn(model, s)) if loss_fn is not None else (lambda s: model.loss(*s)),
                  weight=lambda s: 1, zero_grad=zero_grad)


def _sweep(model, items, n, loss_of, weight, zero_grad) -> float:
    """For each item: loss_of(item) (the mean over its weight(item) samples), backward with seed
    weight/n, rewind."""
    if n == 0:
        raise ValueError("grad_oracle(): empty batch")
    params = model.parameter_vector() if hasattr(model, "parameter_vector") else None
    if zero_grad and params is not None:
        params.zero_grad()
    arena = params.arena if params is not None else _core.current_arena()
    cp = arena.checkpoint()
    total = 0.0
    try:
        for item in items:
            loss = loss_of(item)
            if not isinstance(loss, _core.Value):
                raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
            v = loss.data
            if v != v or v in (float("inf"), float("-inf")):
                raise FloatingPointError(f"the loss is {v} for a sample; lower the learning rate or check the data")
            w = weight(item)
            total += v * w
            loss.backward(w / n)
            arena.rewind(cp)
    finally:
        if arena.num_nodes != cp.nodes:
            arena.rewind(cp)
    return total / n
