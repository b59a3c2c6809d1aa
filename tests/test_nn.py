"""Layers and models: the Module API, gradients (finite differences, PyTorch with the same weights),
the per-sample oracle (mean gradient, constant memory) and the optimizers."""
import math
import random

import pytest

import burtorch as bt
from burtorch import nn, optim
from burtorch.oracle import grad_oracle


@pytest.fixture
def arena64():
    a = bt.Arena(bt.float64)
    with a:
        yield a


def test_module_api(arena64):
    m = nn.MLP(3, [4, 2], act="tanh", dtype=bt.float64)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert m.num_parameters() == 3 * 4 + 4 + 4 * 2 + 2
    assert len(m.parameter_vector().spans) == 1  # created in one go: one contiguous block
    sd = m.state_dict()
    other = nn.MLP(3, [4, 2], act="tanh", dtype=bt.float64)
    other.load_state_dict(sd)
    x = bt.leaves([0.1, -0.2, 0.3])
    assert other(x).data == m(x).data
    with pytest.raises(KeyError):
        other.load_state_dict({"layers.0.weight": sd["layers.0.weight"]})
    with pytest.raises(ValueError):
        other.load_state_dict({**sd, "layers.0.bias": [1.0]})
    with pytest.raises(AttributeError):
        m.layers[0].weight = bt.leaves([1.0])
    assert "MLP" in repr(m) and "Linear(3, 4" in repr(m)


def test_scalar_neuron_and_layer_match_finite_differences(arena64):
    rng = random.Random(3)
    layer = nn.Layer(4, 3, act="tanh", dtype=bt.float64)
    xs = [bt.Value(rng.uniform(-1, 1)) for _ in range(4)]

    def loss():
        return bt.reduce_sum([y * y for y in layer(xs)])

    params = layer.parameter_vector()
    with bt.scope():
        params.zero_grad()
        loss().backward()
        grads = params.grad
    flat = params.values()
    for i in range(0, params.size, 3):
        old = flat[i].data
        with bt.scope():
            flat[i].data = old + 1e-6
            up = loss().data
        with bt.scope():
            flat[i].data = old - 1e-6
            dn = loss().data
        flat[i].data = old
        assert grads[i] == pytest.approx((up - dn) / 2e-6, rel=1e-6, abs=1e-8)


def test_fused_and_view_multi_head_attention_agree(arena64):
    rng = random.Random(5)
    fused = nn.MultiHeadAttention(8, 2, dtype=bt.float64)
    views = nn.MultiHeadAttention(8, 2, fused=False, dtype=bt.float64)
    views.load_state_dict(fused.state_dict())
    x = bt.leaves([rng.uniform(-1, 1) for _ in range(5 * 8)], shape=(5, 8))
    results = []
    for m in (fused, views):
        with bt.scope():
            m.zero_grad()
            x.zero_grad()
            y = m(x)
            (y * y).sum().backward()
            results.append((y.data, m.parameter_vector().grad, x.grad))
    for a, b in zip(*results):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-14)
    y, ws = fused(x, return_weights=True)
    assert len(ws) == 2 and ws[0].shape == (5, 5)


def test_per_sample_oracle_equals_gradient_of_the_mean(arena64):
    rng = random.Random(7)
    model = nn.MakemoreMLP(vocab=7, block=3, emb=4, hidden=5, dtype=bt.float64)
    batch = [(tuple(rng.randrange(7) for _ in range(3)), rng.randrange(7)) for _ in range(6)]
    mean_loss = grad_oracle(model, batch)
    oracle_grads = model.parameter_vector().grad
    with bt.scope():
        model.zero_grad()
        loss = bt.reduce_mean([model.loss(c, t) for c, t in batch])
        loss.backward()
        assert loss.data == pytest.approx(mean_loss, rel=1e-12)
        assert model.parameter_vector().grad == pytest.approx(oracle_grads, rel=1e-10, abs=1e-14)


def test_oracle_memory_does_not_grow_with_batch(arena64):
    model = nn.MiniGPT(vocab=11, block=4, dim=8, layers=2, heads=2, dtype=bt.float64)
    sample = ([1, 2, 3, 4], [2, 3, 4, 5])
    before = arena64.num_nodes
    grad_oracle(model, [sample])
    committed_one = arena64.stats()["bytes_committed"]
    grad_oracle(model, [sample] * 64)
    assert arena64.num_nodes == before  # every sample's nodes were rewound
    assert arena64.stats()["bytes_committed"] == committed_one  # and their memory reused


def test_oracle_rejects_bad_losses(arena64):
    model = nn.MakemoreMLP(vocab=5, block=2, emb=2, hidden=3, dtype=bt.float64)
    with pytest.raises(ValueError):
        grad_oracle(model, [])
    with pytest.raises(IndexError):
        grad_oracle(model, [((0, 9), 1)])
    with pytest.raises(ValueError):
        grad_oracle(model, [((0, 1, 2), 1)])
    before = arena64.num_nodes
    with pytest.raises(TypeError):
        grad_oracle(model, [((0, 1), 1)], loss_fn=lambda m, s: 3.0)
    assert arena64.num_nodes == before


# ---------------------------------------------------------------- PyTorch references


def _torch():
    return pytest.importorskip("torch")


def _t(vec, torch, shape=None):
    t = torch.tensor(vec.data, dtype=torch.float64, requires_grad=True)
    return t


def test_makemore_mlp_matches_pytorch(arena64):
    torch = _torch()
    F = torch.nn.functional
    rng = random.Random(11)
    model = nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=12, dtype=bt.float64)
    ctx, target = [rng.randrange(27) for _ in range(16)], rng.randrange(27)
    with bt.scope():
        model.zero_grad()
        loss = model.loss(ctx, target)
        loss.backward()
        sd = model.state_dict()
        P = {k: torch.tensor(v.data, dtype=torch.float64).view(*v.shape).requires_grad_() for k, v in sd.items()}
        x = P["embed.weight"][torch.tensor(ctx)].view(-1)
        h = torch.tanh(x @ P["fc1.weight"].T + P["fc1.bias"])
        logits = h @ P["fc2.weight"].T + P["fc2.bias"]
        tl = F.cross_entropy(logits[None], torch.tensor([target]))
        tl.backward()
        assert loss.data == pytest.approx(tl.item(), rel=1e-12)
        for k, v in sd.items():
            assert v.grad == pytest.approx(P[k].grad.view(-1).tolist(), rel=1e-9, abs=1e-12), k


def torch_gpt_loss(P, ids, targets, cfg, torch):
    F = torch.nn.functional
    T, C, H = len(ids), cfg["dim"], cfg["heads"]
    x = P["tok.weight"][torch.tensor(ids)] + P["pos.weight"][:T]
    for i in range(cfg["layers"]):
        p = lambda n: P[f"blocks.{i}.{n}"]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"))
        qkv = h @ p("attn.qkv.weight").T
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        split = lambda t: t.view(T, H, C // H).transpose(0, 1)  # noqa: E731
        a = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        a = a.transpose(0, 1).reshape(T, C)
        x = x + a @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"))
        f = torch.relu(h @ p("ff1.weight").T + p("ff1.bias"))
        x = x + f @ p("ff2.weight").T + p("ff2.bias")
    if "ln_f.weight" in P:  # Karpathy's final norm (the paper's model has none)
        x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["head.weight"].T + P["head.bias"]
    return F.cross_entropy(logits, torch.tensor(targets))


@pytest.mark.parametrize("preset, count", [("paper", 46_289), ("karpathy", 46_337)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mini_gpt_matches_pytorch(dtype, preset, count):
    torch = _torch()
    bdt = bt.float64 if dtype == "float64" else bt.float32
    tdt = torch.float64 if dtype == "float64" else torch.float32
    arena = bt.Arena(bdt)
    with arena:
        cfg = dict(vocab=65, block=8, dim=24, layers=6, heads=6)
        model = getattr(nn.MiniGPT, preset)(dtype=bdt)
        assert model.num_parameters() == count and model.final_norm == (preset == "karpathy")
        rng = random.Random(13)
        ids = [rng.randrange(65) for _ in range(8)]
        targets = ids[1:] + [rng.randrange(65)]
        model.zero_grad()
        loss = model.loss(ids, targets)
        loss.backward()
        sd = model.state_dict()
        P = {k: torch.tensor(v.data, dtype=tdt).view(*v.shape).requires_grad_() for k, v in sd.items()}
        tl = torch_gpt_loss(P, ids, targets, cfg, torch)
        tl.backward()
        rel = 1e-11 if dtype == "float64" else 2e-5
        assert loss.data == pytest.approx(tl.item(), rel=rel)
        gabs = 1e-12 if dtype == "float64" else 2e-6
        grel = 1e-8 if dtype == "float64" else 2e-3
        for k, v in sd.items():
            assert v.grad == pytest.approx(P[k].grad.view(-1).tolist(), rel=grel, abs=gabs), k


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "sgd_nesterov_wd", "adam", "adamw"])
def test_optimizers_match_pytorch(name):
    torch = _torch()
    arena = bt.Arena(bt.float64)
    with arena:
        rng = random.Random(17)
        w0 = [rng.uniform(-1, 1) for _ in range(10)]
        w = bt.leaves(w0)
        tw = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
        make = {
            "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
            "sgd_momentum": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1),
                             lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1)),
            "sgd_nesterov_wd": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
                                lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                                                          weight_decay=0.01)),
            "adam": (lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1),
                     lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1)),
            "adamw": (lambda p: optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
        }[name]
        opt, topt = make[0]([w]), make[1]([tw])
        for _ in range(5):
            opt.zero_grad()
            topt.zero_grad()
            with bt.scope():
                (w * w * w).sum().backward()
            (tw ** 3).sum().backward()
            opt.step()
            topt.step()
        assert w.data == pytest.approx(tw.tolist(), rel=1e-12, abs=1e-14)


def test_optimizer_bad_arguments(arena64):
    w = bt.leaves([1.0, 2.0])
    with pytest.raises(ValueError):
        optim.SGD([w], lr=-1)
    with pytest.raises(ValueError):
        optim.SGD([w], lr=float("nan"))
    with pytest.raises(ValueError):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.Adam([w], betas=(1.0, 0.9))
    with pytest.raises(ValueError):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError):
        optim.SGD([bt.Value(1.0)], lr=0.1)


def test_training_learns():
    arena = bt.Arena(bt.float32)
    with arena:
        rng = random.Random(0)
        text = "abcdefgh" * 40
        from burtorch.data import TextDataset
        ds = TextDataset(text, block=4)
        model = nn.MiniGPT(vocab=ds.vocab_size, block=4, dim=12, layers=1, heads=2)
        opt = optim.AdamW(model.parameters(), lr=1e-2)
        first = None
        for _ in range(60):
            loss = grad_oracle(model, ds.batch(8, rng))
            opt.step()
            first = first if first is not None else loss
        assert first > 1.5 and loss < 0.3 * first  # a periodic text is learnt


@pytest.mark.parametrize("chunk", [2, 3, 8])
def test_chunked_oracle_equals_per_sample(arena64, chunk):
    rng = random.Random(19)
    mlp = nn.MakemoreMLP(vocab=9, block=4, emb=3, hidden=70, dtype=bt.float64)  # 70 > 64: wide kernels
    gpt = nn.MiniGPT(vocab=11, block=5, dim=8, layers=2, heads=2, dtype=bt.float64)
    mlp_batch = [(tuple(rng.randrange(9) for _ in range(4)), rng.randrange(9)) for _ in range(7)]
    gpt_batch = [([rng.randrange(11) for _ in range(5)], [rng.randrange(11) for _ in range(5)]) for _ in range(7)]
    for model, batch in [(mlp, mlp_batch), (gpt, gpt_batch)]:
        per_sample = grad_oracle(model, batch)
        g1 = model.parameter_vector().grad
        chunked = grad_oracle(model, batch, chunk=chunk)
        g2 = model.parameter_vector().grad
        assert chunked == pytest.approx(per_sample, rel=1e-12)
        assert g2 == pytest.approx(g1, rel=1e-9, abs=1e-13)
    with pytest.raises(ValueError):
        grad_oracle(mlp, mlp_batch, chunk=0)
    with pytest.raises(ValueError):
        grad_oracle(nn.MLP(2, [1], dtype=bt.float64), [([0.0, 1.0],)], chunk=2)


def test_load_state_dict_is_all_or_nothing():
    from burtorch import nn

    model = nn.MLP(3, [4, 2])
    before = {name: p.data for name, p in model.state_dict().items()}
    good = {name: [0.5] * p.size for name, p in model.state_dict().items()}
    for bad_entry in ([0.5] * 3, ["x"] * 8, None):  # the LAST layer's bias is bad each time
        state = dict(good)
        state["layers.1.bias"] = bad_entry
        with pytest.raises((ValueError, TypeError)):
            model.load_state_dict(state)
        assert {name: p.data for name, p in model.state_dict().items()} == before  # nothing applied
    with pytest.raises(KeyError):
        model.load_state_dict({**good, "extra": [1.0]})
    with pytest.raises(TypeError):
        model.load_state_dict([1.0, 2.0])
    model.load_state_dict(good)
    assert all(v == 0.5 for p in model.parameters() for v in p.data)


def test_module_dtype_comes_from_the_base_class():
    from burtorch import nn

    for module in (nn.Linear(2, 3, dtype=bt.float64), nn.MLP(2, [3], dtype=bt.float64),
                   nn.MiniGPT(vocab=5, block=4, dim=4, layers=1, heads=2, dtype=bt.float64)):
        assert module.dtype is bt.float64
        assert all(p.dtype is bt.float64 for p in module.parameters())
    assert nn.Linear(2, 3, dtype=bt.float32).dtype is bt.float32
    with pytest.raises(TypeError):
        nn.Linear(2, 3, dtype="float64")


@pytest.fixture
def default_dtype():
    """Restores the process's default dtype after a test that changes it."""
    saved = bt.get_default_dtype()
    yield
    bt.set_default_dtype(saved)


def test_a_neuron_takes_values_of_the_default_dtype(default_dtype):
    # the micrograd example: modules and bt.Value(float) agree on the dtype (float64 by default),
    # so their nodes meet in one arena (once a TypeError about arenas)
    from burtorch import nn

    bt.set_default_dtype(bt.float64)
    bt.manual_seed(0)
    neuron = nn.Neuron(3)
    out = neuron([bt.Value(1.0), bt.Value(2.0), bt.Value(3.0)])
    assert isinstance(out, bt.Value) and out.dtype is bt.float64
    w, b = neuron.w.data, neuron.b.data[0]
    assert math.isclose(out.data, max(0.0, w[0] + 2 * w[1] + 3 * w[2] + b), rel_tol=1e-12, abs_tol=1e-15)
    out.backward()
    assert neuron.w.grad == ([1.0, 2.0, 3.0] if out.data > 0 else [0.0, 0.0, 0.0])


def test_mlp_and_value_are_float64_by_default(default_dtype):
    from burtorch import nn

    bt.set_default_dtype(bt.float64)
    mlp = nn.MLP(3, [4, 1])
    assert mlp.dtype is bt.float64 and bt.Value(1.0).dtype is bt.float64
    assert all(p.dtype is bt.float64 for p in mlp.parameters())
    out = mlp([bt.Value(0.5), bt.Value(-1.0), bt.Value(2.0)])
    out = out[0] if not isinstance(out, bt.Value) else out
    out.backward()
    assert out.dtype is bt.float64 and any(g != 0.0 for g in mlp.parameter_vector().grad)


def test_set_default_dtype_float32_makes_modules_and_values_float32(default_dtype):
    from burtorch import nn

    bt.set_default_dtype(bt.float32)
    mlp, gpt = nn.MLP(3, [4, 1]), nn.MiniGPT(vocab=5, block=4, dim=4, layers=1, heads=2)
    value = bt.Value(1.0)
    assert mlp.dtype is gpt.dtype is value.dtype is bt.float32
    assert all(p.dtype is bt.float32 for m in (mlp, gpt) for p in m.parameters())
    out = mlp([value, bt.Value(2.0), bt.Value(3.0)])
    assert (out if isinstance(out, bt.Value) else out[0]).dtype is bt.float32
    # the default is read when a module is built, not when burtorch was imported
    bt.set_default_dtype(bt.float64)
    assert nn.Linear(2, 2).dtype is bt.float64 and mlp.dtype is bt.float32


def test_paper_presets_and_subclass_dtypes_stay_as_declared(default_dtype):
    from burtorch import nn

    bt.set_default_dtype(bt.float64)
    assert nn.MakemoreMLP.paper(hidden=4).dtype is bt.float32  # the paper trains in FP32
    assert nn.MiniGPT.paper().dtype is bt.float32
    assert nn.MakemoreMLP.paper(hidden=4, dtype=bt.float64).dtype is bt.float64

    class Fixed(nn.Module):
        dtype = bt.float32  # a subclass that fixes its dtype keeps it whatever the default

        def __init__(self):
            super().__init__()
            self.param("w", 2)

    assert Fixed().dtype is bt.float32 and Fixed().w.dtype is bt.float32


def _paper_w4_count(e):
    # The paper's definition of W4: a 27 x 64 embedding, a 1024 x e hidden layer (16 characters of
    # context x 64) with its bias, an e x 27 head with its bias.
    return 27 * 64 + 1024 * e + e + 27 * e + 27


def test_presets_match_the_papers_parameter_counts():
    # The paper's W4 table, as printed there; the formula above must reproduce it.
    printed = {4: 5_963, 16: 18_587, 32: 35_419, 64: 69_083, 128: 136_411, 512: 540_379, 1024: 1_079_003}
    for e, count in printed.items():
        assert _paper_w4_count(e) == count
        assert nn.MakemoreMLP.paper(hidden=e, dtype=bt.float32).num_parameters() == count, e
    # W5: the paper's GPT on tiny Shakespeare's 65 characters, without a final norm.
    assert nn.MiniGPT.paper(vocab=65, dtype=bt.float32).num_parameters() == 46_289
