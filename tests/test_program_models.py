"""Models through recorded programs: grad_oracle(compile=True) and per_sample_grads equal the eager
oracle and eager per-sample sweeps bitwise, every parameter gradient, FP32 and FP64."""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch.nn import MakemoreMLP, MiniGPT


def gpt(dtype):
    return MiniGPT(vocab=13, block=6, dim=8, layers=2, heads=2, dtype=dtype), \
        lambda r, T=6: ([r.randrange(13) for _ in range(T)], [r.randrange(13) for _ in range(T)])


def mlp(dtype):
    return MakemoreMLP(vocab=11, block=4, emb=5, hidden=7, dtype=dtype), \
        lambda r: ([r.randrange(11) for _ in range(4)], r.randrange(11))


@pytest.mark.parametrize("make", [gpt, mlp])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_compiled_oracle_equals_eager_bitwise(make, dtype):
    bt.manual_seed(1)
    model, sample = make(dtype)
    r = random.Random(2)
    batch = [sample(r) for _ in range(12)]
    pv = model.parameter_vector()
    eager_loss = bt.grad_oracle(model, batch)
    eager = pv.numpy("grads").copy()
    compiled_loss = bt.grad_oracle(model, batch, compile=True, threads=1)
    assert compiled_loss == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    G, L = bt.per_sample_grads(model, batch)
    assert G.shape == (12, model.num_parameters()) and G.dtype == (np.float32 if dtype == bt.float32 else np.float64)
    for i, s in enumerate(batch):  # each row is that sample's own eager sweep
        model.zero_grad()
        cp = bt.checkpoint(dtype=dtype) if False else pv.arena.checkpoint()
        loss = model.loss(*s)
        L_i = loss.data
        loss.backward()
        pv.arena.rewind(cp)
        assert L[i] == L_i
        np.testing.assert_array_equal(G[i], pv.numpy("grads"))


def test_mixed_shapes_and_program_reuse():
    bt.manual_seed(3)
    model, sample = gpt(bt.float64)
    r = random.Random(4)
    batch = [sample(r, T) for T in (6, 6, 3, 3, 6, 2)]
    pv = model.parameter_vector()
    eager_loss = bt.grad_oracle(model, batch)
    eager = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, batch, compile=True, threads=1) == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    from burtorch.oracle_compiled import _programs
    assert len([k for k in _programs[model] if k != "params"]) == 3  # one program per shape


def test_partial_gradient_wrt_head_only():
    bt.manual_seed(5)
    model, sample = gpt(bt.float64)
    r = random.Random(6)
    batch = [sample(r) for _ in range(4)]
    head = [model.head.weight, model.head.bias]
    G_full, _ = bt.per_sample_grads(model, batch)
    G_head, L = bt.per_sample_grads(model, batch, wrt=head)
    from burtorch.oracle_compiled import sample_program
    full, part = sample_program(model, batch[0]), sample_program(model, batch[0], wrt=head)
    assert part.swept < full.swept / 4 and len(part) == len(full)
    # the head's parameters are the last ones of parameter_vector()
    np.testing.assert_array_equal(G_head, G_full[:, -G_head.shape[1]:])


def test_compiled_training_learns():
    bt.manual_seed(7)
    model, sample = mlp(bt.float64)
    opt = bt.optim.SGD(model.parameters(), lr=0.5)
    r = random.Random(8)
    batch = [sample(r) for _ in range(16)]
    first = bt.grad_oracle(model, batch, compile=True)
    for _ in range(30):
        loss = bt.grad_oracle(model, batch, compile=True)
        opt.step()
    assert loss < 0.7 * first


def test_bad_ids_for_compiled_oracle():
    model, sample = mlp(bt.float64)
    with pytest.raises(IndexError):
        bt.grad_oracle(model, [([0, 1, 2, 3], 1), ([0, 1, 2, 99], 1)], compile=True)
    with pytest.raises(ValueError, match="chunk"):
        bt.grad_oracle(model, [([0, 1, 2, 3], 1)], compile=True, chunk=4)
