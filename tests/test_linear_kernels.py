"""bt.linear through every path of its kernels (dot products, tiles over W^T or over x^T, chained
axpys; with and without bias; contiguous and gathered inputs), forward and all three gradients,
against numpy in float64, against finite differences, and against PyTorch in float32 when it is
installed. The kernels themselves are tested shape by shape in tests/cpp/test_gemm.cpp."""
import random

import pytest

import burtorch as bt
from finite_diff import central_difference

np = pytest.importorskip("numpy")

# (rows, in, out): 1 row (dots); 2..7 rows of a wide input (dots); few outputs of a wide input
# (dots, and grad input by axpys); rows >= out (tiles over W^T); rows < out (tiles over x^T);
# narrow inputs at every row count; sizes off the tile widths.
SHAPES = [(1, 100, 30), (3, 100, 30), (6, 130, 9), (20, 100, 5), (40, 30, 17), (9, 70, 100),
          (8, 24, 72), (2, 24, 72), (1, 5, 3), (33, 17, 65), (64, 80, 27)]


def _run(rows, n_in, n_out, bias, dtype, gathered, seed):
    """Builds sum(c * linear(x, W, b)) and returns numpy arrays of y, gx, gW, gb and the inputs."""
    rng = np.random.default_rng(seed)
    npt = np.float64 if dtype == bt.float64 else np.float32
    xv, wv = rng.uniform(-1, 1, (rows, n_in)).astype(npt), rng.uniform(-1, 1, (n_out, n_in)).astype(npt)
    bv, cv = rng.uniform(-1, 1, n_out).astype(npt), rng.uniform(-1, 1, rows * n_out).astype(npt)
    with bt.Arena(dtype, 3 * (rows * n_in + n_out * n_in + rows * n_out) + 1024):
        W = bt.leaves(wv, shape=(n_out, n_in), dtype=dtype)
        b = bt.leaves(bv, dtype=dtype) if bias else None
        c = bt.leaves(cv, dtype=dtype)
        if gathered:
            # rows of x stored in reverse order and read through an embedding view: gathered
            table = bt.leaves(xv[::-1].copy(), shape=(rows, n_in), dtype=dtype)
            x = bt.embedding(table, list(range(rows - 1, -1, -1)))
        else:
            table = x = bt.leaves(xv, shape=(rows, n_in), dtype=dtype)
        y = bt.linear(x, W, b)
        y.flatten().dot(c).backward()
        gx = table.numpy("grads").reshape(rows, n_in)
        if gathered:
            gx = gx[::-1]
        out = dict(y=y.numpy().reshape(rows, n_out), gx=gx.copy(), gW=W.numpy("grads").reshape(n_out, n_in).copy(),
                   gb=b.numpy("grads").copy() if bias else None)
    return out, xv, wv, bv, cv.reshape(rows, n_out)


@pytest.mark.parametrize("rows,n_in,n_out", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("gathered", [False, True])
def test_linear_matches_numpy_float64(rows, n_in, n_out, bias, gathered):
    got, x, w, b, gy = _run(rows, n_in, n_out, bias, bt.float64, gathered, seed=rows * 1000 + n_in + n_out)
    np.testing.assert_allclose(got["y"], x @ w.T + (b if bias else 0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["gx"], gy @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["gW"], gy.T @ x, rtol=1e-12, atol=1e-12)
    if bias:
        np.testing.assert_allclose(got["gb"], gy.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows,n_in,n_out", [(1, 70, 9), (5, 80, 6), (12, 24, 40), (30, 70, 9)])
def test_linear_gradients_match_finite_differences(rows, n_in, n_out):
    rng = random.Random(rows + n_in)
    with bt.Arena(bt.float64, 1 << 20):
        x = bt.leaves([rng.uniform(-1, 1) for _ in range(rows * n_in)], shape=(rows, n_in))
        W = bt.leaves([rng.uniform(-1, 1) for _ in range(n_out * n_in)], shape=(n_out, n_in))
        b = bt.leaves([rng.uniform(-1, 1) for _ in range(n_out)])

        def loss():
            return bt.linear(x, W, b).tanh().sum()

        with bt.scope():
            loss().backward()
            grads = {id(p): p.numpy("grads").copy() for p in (x, W, b)}
        h = 1e-6
        for p in (x, W, b):
            flat = p.flatten()
            for i in rng.sample(range(p.size), min(6, p.size)):
                fd = central_difference(flat[i], loss, h)
                assert grads[id(p)].reshape(-1)[i] == pytest.approx(fd, rel=1e-6, abs=1e-7)


def test_two_uses_of_a_weight_accumulate():
    with bt.Arena(bt.float64, 1 << 16):
        rng = np.random.default_rng(3)
        W = bt.leaves(rng.uniform(-1, 1, (20, 90)), shape=(20, 90))
        xa, xb = rng.uniform(-1, 1, (16, 90)), rng.uniform(-1, 1, (1, 90))
        ya = bt.linear(bt.leaves(xa, shape=(16, 90)), W)
        yb = bt.linear(bt.leaves(xb, shape=(1, 90)), W)
        (ya.sum() + yb.sum()).backward()
        expect = np.ones((16, 20)).T @ xa + np.ones((1, 20)).T @ xb
        np.testing.assert_allclose(W.numpy("grads").reshape(20, 90), expect, rtol=1e-12)


@pytest.mark.parametrize("rows,n_in,n_out", SHAPES + [(64, 1024, 128), (1, 1024, 1024)])
def test_linear_float32_matches_torch(rows, n_in, n_out):
    torch = pytest.importorskip("torch")
    got, x, w, b, gy = _run(rows, n_in, n_out, True, bt.float32, False, seed=7)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.linear(tx, tw, tb)
    ty.backward(torch.tensor(gy))
    # float32 sums of n_in (or rows, or n_out) terms in another order
    tol = dict(rtol=2e-5, atol=2e-5 * max(n_in, n_out, rows) ** 0.5)
    np.testing.assert_allclose(got["y"], ty.detach().numpy(), **tol)
    np.testing.assert_allclose(got["gx"], tx.grad.numpy(), **tol)
    np.testing.assert_allclose(got["gW"], tw.grad.numpy(), **tol)
    np.testing.assert_allclose(got["gb"], tb.grad.numpy(), **tol)
