"""The paper's per-sample gradient oracle (its serialized batch).

Parameters live below a checkpoint; for each sample the graph is built, swept backward with seed
1/b (so the parameter grads accumulate the gradient of the MEAN loss) and rewound. Peak memory is
that of one sample's graph, whatever the batch size.
"""
from . import _core


def grad_oracle(model, batch, loss_fn=None, zero_grad: bool = True) -> float:
    """Accumulates d mean_loss / d params over `batch` into the parameters' grads.

    batch: a sequence of samples; loss_fn(model, sample) -> scalar Value (default:
    model.loss(*sample)). Returns the mean loss. Parameter grads are zeroed first unless
    zero_grad=False (then the mean gradient is added to what is there).
    """
    n = len(batch)
    if n == 0:
        raise ValueError("grad_oracle(): empty batch")
    params = model.parameter_vector() if hasattr(model, "parameter_vector") else None
    if zero_grad and params is not None:
        params.zero_grad()
    arena = params.arena if params is not None else _core.current_arena()
    cp = arena.checkpoint()
    seed = 1.0 / n
    total = 0.0
    try:
        for sample in batch:
            loss = loss_fn(model, sample) if loss_fn is not None else model.loss(*sample)
            if not isinstance(loss, _core.Value):
                raise TypeError(f"the loss must be a scalar Value, got {type(loss).__name__}")
            v = loss.data
            if v != v or v in (float("inf"), float("-inf")):
                raise FloatingPointError(f"the loss is {v} for a sample; lower the learning rate or check the data")
            total += v
            loss.backward(seed)
            arena.rewind(cp)
    finally:
        if arena.num_nodes != cp.nodes:
            arena.rewind(cp)
    return total / n
