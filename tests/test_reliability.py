"""Regression tests of issue 41 (reliability of the new surfaces): one or more per finding, each
failing before its fix. The classes: caches keyed by the wrong thing, trace rules, modes,
state left half-changed by an error, thread isolation, silent numeric damage, files, and the
command lines."""
import io
import math
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch.nn import MiniGPT

# ---------------------------------------------------------------- 1. caches


def _gpt_and_batch():
    bt.manual_seed(1)
    model = MiniGPT(vocab=13, block=6, dim=8, layers=2, heads=2, dtype=bt.float32)
    r = random.Random(2)
    batch = [([r.randrange(13) for _ in range(6)], [r.randrange(13) for _ in range(6)]) for _ in range(3)]
    return model, batch


def test_per_sample_grads_wrt_parameters_that_print_alike():
    model, batch = _gpt_and_batch()
    a, b = model.blocks[0].ln1.weight, model.blocks[1].ln1.weight
    assert repr(a) == repr(b)  # the old cache key
    Ga, _ = bt.per_sample_grads(model, batch, wrt=[a])
    Gb, _ = bt.per_sample_grads(model, batch, wrt=[b])
    G, _ = bt.per_sample_grads(model, batch)
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.size for _, p in model.named_parameters()]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    ia, ib = names.index("blocks.0.ln1.weight"), names.index("blocks.1.ln1.weight")
    np.testing.assert_array_equal(Ga, G[:, starts[ia]:starts[ia + 1]])
    np.testing.assert_array_equal(Gb, G[:, starts[ib]:starts[ib + 1]])
    assert not np.array_equal(Ga, Gb)


def test_per_sample_grads_loss_fn_is_part_of_the_key():
    model, batch = _gpt_and_batch()
    G1, L1 = bt.per_sample_grads(model, batch, loss_fn=lambda m, s: m.loss(*s))
    G2, L2 = bt.per_sample_grads(model, batch, loss_fn=lambda m, s: m.loss(*s) * 2.0)
    np.testing.assert_allclose(L2, 2 * L1, rtol=1e-6)
    np.testing.assert_allclose(G2, 2 * G1, rtol=1e-5, atol=1e-7)


def test_program_cache_stays_bounded_in_a_training_loop():
    from burtorch import oracle_compiled

    model, batch = _gpt_and_batch()
    p = model.blocks[0].ln1.weight
    opt = bt.optim.SGD(model.parameters(), lr=0.1)
    for T in range(1, 7):  # new values every step (the old key printed them) and new shapes
        for _ in range(15):
            short = [(i[:T], t[:T]) for i, t in batch]
            bt.per_sample_grads(model, short, wrt=[p])
            bt.grad_oracle(model, short, compile=True)
            opt.step()
    cache = oracle_compiled._programs[model]
    assert len(cache) - 1 <= 12  # two programs per shape, and the parameter vector
    pv = model.parameter_vector()
    for i in range(oracle_compiled.MAX_PROGRAMS + 20):  # wrt lists of ever new nodes
        bt.per_sample_grads(model, batch[:1], wrt=[pv[i:i + 1]])
    assert len(cache) - 1 <= oracle_compiled.MAX_PROGRAMS


@pytest.mark.parametrize("chunk", [1, 3])
def test_compiled_oracle_sees_a_replaced_layer(chunk):
    from burtorch.nn import Linear, MakemoreMLP

    bt.manual_seed(1)
    model = MakemoreMLP(vocab=11, block=4, emb=5, hidden=7)
    r = random.Random(2)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(6)]
    bt.grad_oracle(model, batch, compile=True, chunk=chunk)  # traced with the first fc2
    model.fc2 = Linear(7, 11)
    compiled = bt.grad_oracle(model, batch, compile=True, chunk=chunk)
    G = model.parameter_vector().numpy("grads").copy()
    assert compiled == pytest.approx(bt.grad_oracle(model, batch, chunk=chunk), rel=1e-6)
    np.testing.assert_allclose(G, model.parameter_vector().numpy("grads"), rtol=1e-4, atol=1e-6)
    Gs, _ = bt.per_sample_grads(model, batch)
    assert Gs.shape[1] == model.num_parameters()


def test_compiled_signatures_stay_bounded():
    from burtorch import program

    f = bt.value_and_grad(lambda x, ids: x * 2.0, ids=(1,))
    for n in range(program.MAX_SIGNATURES + 30):  # a new id length each call
        assert f(1.5, list(range(n + 1))) == (3.0, 2.0)
    assert len(f._cache) <= program.MAX_SIGNATURES


# ---------------------------------------------------------------- 2. trace rules


def test_argnums_order_orders_the_grads():
    f = bt.value_and_grad(lambda x, y: x * 2.0 + y * 3.0, argnums=(1, 0))
    assert f(1.0, 1.0) == (5.0, (3.0, 2.0))
    g = bt.grad(lambda x, y, z: x * 2.0 + y * 3.0 + z * 5.0, argnums=(2, 0, 1))
    assert g(1.0, 1.0, 1.0) == (5.0, 2.0, 3.0)
    np.testing.assert_array_equal(g.map(np.ones((4, 3))), np.tile([5.0, 2.0, 3.0], (4, 1)))


@pytest.mark.parametrize("argnums", [(0, 0), -1, (1, -1), 1.0, True])
def test_bad_argnums_refused(argnums):
    with pytest.raises(ValueError, match="argnums"):
        bt.value_and_grad(lambda x, y: x * y, argnums=argnums)


def _writes():
    p = bt.Value(3.0)
    v = bt.vector([1.0, 2.0])
    model = bt.nn.Linear(2, 1, dtype=bt.float32)  # another arena: its writes are as much lost
    opt = bt.optim.SGD(model.parameters(), lr=0.1)
    return {
        "Value.data": lambda: setattr(p, "data", 5.0),
        "Value.grad": lambda: setattr(p, "grad", 1.0),
        "Value.zero_grad": p.zero_grad,
        "Vector.set_data": lambda: v.set_data([3.0, 4.0]),
        "Vector.set_grad": lambda: v.set_grad([3.0, 4.0]),
        "Vector.zero_grad": v.zero_grad,
        "Vector.scale_grad": lambda: v.scale_grad(2.0),
        "load_array": lambda: bt.load_array(v, [5.0, 6.0]),
        "optimizer step": opt.step,
    }


@pytest.mark.parametrize("name", sorted(_writes()))
def test_a_write_inside_a_traced_function_is_refused(name):
    write = _writes()[name]

    def fn(x):
        write()
        return x * 2.0

    with pytest.raises(bt.TraceError, match="dropped by every replay"):
        bt.value_and_grad(fn)(1.0)
    write()  # outside a trace, the same write is fine
    assert bt.value_and_grad(lambda x: x * 2.0)(1.0) == (2.0, 2.0)  # the failed trace left nothing behind


def test_a_bad_argument_to_a_native_cast_is_a_type_error():
    for wrt in ([1.0], ["a"], [None]):
        with pytest.raises(TypeError, match="wrt must hold Values or Vectors"):
            bt.trace(lambda x: x * 2.0, [1.0], wrt=wrt)

    class FakeId(int):
        _bt_input = "not an int"  # looks like a traced id to the native side, but is not one

    def fn(x, ids):
        return bt.embedding(bt.vector([1.0, 2.0, 3.0]).reshape(3, 1), [FakeId(1)]).sum() * x

    with pytest.raises(TypeError, match="type this function cannot use"):  # was RuntimeError('std::bad_cast')
        bt.value_and_grad(fn, ids=(1,))(1.0, [1])


# ---------------------------------------------------------------- 3. modes


@pytest.mark.parametrize("mode, probe", [(bt.no_grad, lambda: not bt.is_grad_enabled()),
                                         (bt.detect_anomaly, bt.is_anomaly_enabled)])
def test_mode_decorator_on_a_generator_function(mode, probe):
    @mode()
    def gen():
        yield probe()
        x = yield probe()
        yield x, probe()

    it = gen()
    assert next(it) is True
    assert not probe()  # the caller, between two resumptions, is outside the mode
    assert next(it) is True
    assert it.send(7) == (7, True)
    assert not probe()


@pytest.mark.parametrize("mode", [bt.no_grad, bt.detect_anomaly])
def test_mode_decorator_refuses_async_functions(mode):
    async def coro():
        return bt.is_grad_enabled()

    async def agen():
        yield 1

    for fn in (coro, agen):
        with pytest.raises(TypeError, match="async"):
            mode()(fn)
    with pytest.raises(TypeError, match="decorates functions"):
        mode()(3)


@pytest.mark.parametrize("make", [
    lambda: bt.vector([1000.0, 1.0]).exp(),
    lambda: bt.linear(bt.vector([1e300, 1e300]), bt.vector([1e300, 1e300]).reshape(1, 2)),
    lambda: bt.softmax(bt.vector([math.inf, 1.0])),
    lambda: bt.cross_entropy(bt.vector([math.nan, 1.0]), 0),
], ids=["map", "linear", "softmax", "cross_entropy"])
def test_detect_anomaly_checks_range_ops(make):
    with pytest.raises(bt.AnomalyError, match="the forward of"):
        with bt.detect_anomaly():
            make()
    make()  # outside the mode: no check


def test_detect_anomaly_checks_compiled_replays():
    f = bt.value_and_grad(lambda x, y: (bt.vector([x, y]).exp()).sum(), argnums=(0, 1))
    assert f(1.0, 2.0)[0] == pytest.approx(math.exp(1) + math.exp(2))  # traced and replayed outside the mode
    with pytest.raises(bt.AnomalyError, match="map_unary"):
        with bt.detect_anomaly():
            f(1000.0, 2.0)
    with pytest.raises(bt.AnomalyError):
        with bt.detect_anomaly():
            f.map(np.array([[1.0, 2.0], [1000.0, 1.0]]))
    value, grads = f.map(np.array([[1.0, 2.0], [1000.0, 1.0]]))  # outside: the replay, unchecked
    assert math.isinf(value[1])


def test_detect_anomaly_checks_the_compiled_oracle_and_per_sample_grads():
    model, batch = _gpt_and_batch()
    bt.grad_oracle(model, batch, compile=True)  # the programs are traced
    pv = model.parameter_vector()
    w = model.head.weight
    before = pv.numpy("values").copy()
    bt.load_array(w, np.full(w.size, 1e38, dtype=np.float32))
    for run in (lambda: bt.grad_oracle(model, batch, compile=True), lambda: bt.per_sample_grads(model, batch),
                lambda: bt.grad_oracle(model, batch, compile=True, chunk=3)):
        with pytest.raises(bt.AnomalyError):
            with bt.detect_anomaly():
                run()
    bt.load_array(pv, before)
    G_mode = None
    with bt.detect_anomaly():
        G_mode, L_mode = bt.per_sample_grads(model, batch)
    G, L = bt.per_sample_grads(model, batch)
    np.testing.assert_array_equal(L_mode, L)
    np.testing.assert_allclose(G_mode, G, rtol=1e-5, atol=1e-7)


def test_gradient_calls_refuse_no_grad_alike():
    from burtorch.nn import MakemoreMLP

    model = MakemoreMLP(vocab=11, block=4, emb=5, hidden=7)
    r = random.Random(1)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(4)]
    opt = bt.optim.SGD(model.parameters(), lr=0.1)
    f = bt.value_and_grad(lambda x, y: x * y, argnums=(0, 1))
    f(1.0, 2.0)  # traced: a replay under no_grad used to answer while a first call refused
    before = model.parameter_vector().tolist()
    calls = [lambda: bt.grad_oracle(model, batch), lambda: bt.grad_oracle(model, batch, compile=True),
             lambda: bt.per_sample_grads(model, batch), lambda: f(1.0, 2.0), lambda: f.map(np.ones((2, 2))),
             lambda: opt.fused_step(model, batch, chunk=4), lambda: opt.fused_step(model, batch)]
    for call in calls:
        with pytest.raises(ValueError, match="no_grad"):
            with bt.no_grad():
                call()
    assert model.parameter_vector().tolist() == before
    assert opt.fused_step(model, batch, chunk=4) > 0  # outside the mode, as before


# ---------------------------------------------------------------- 6. numbers


def test_libsvm_nan_label_refused(tmp_path):
    from burtorch.fl.libsvm import read_libsvm

    p = tmp_path / "a.svm"
    p.write_text("1 1:0.5\nnan 2:1\n-1 1:2\n")
    with pytest.raises(ValueError, match=r"a\.svm:2: the label is nan"):
        read_libsvm(str(p))
    p.write_text("1 1:0.5\ninf 2:1\n")
    with pytest.raises(ValueError, match="the label is inf"):
        read_libsvm(str(p))


@pytest.mark.parametrize("dtype, bits", [(np.float32, 32), (np.float64, 64)])
def test_natural_compression_near_the_types_maximum(dtype, bits):
    from burtorch.fl.compressors import Natural

    big = np.finfo(dtype).max
    top = dtype(2.0) ** (np.finfo(dtype).maxexp - 1)  # the largest power of two: kept exactly
    c = Natural(3, float_bits=bits, seed=1)
    np.testing.assert_array_equal(c.compress(np.array([top, -top, 1.0], dtype=dtype)).values, [top, -top, 1.0])
    for x in ([big, 1.0, 2.0], [1.0, -big, 2.0]):
        with pytest.raises(ValueError, match="largest power of two"):
            c.compress(np.array(x, dtype=dtype))


@pytest.mark.parametrize("name", ["randk", "randseqk", "dithering", "scaled-randk", "scaled-dithering"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compressors_refuse_values_that_overflow_instead_of_sending_inf(name, dtype):
    from burtorch.fl.compressors import make_compressor

    big = np.finfo(dtype).max
    x = np.array([0.9 * big, -0.8 * big, 1.0, 2.0], dtype=dtype)
    c = make_compressor(name, 4, 1, 1)
    try:
        msg = c.compress(x)
    except ValueError as e:
        assert "overflow" in str(e)
    else:  # the coordinates drawn (or their scale) stayed in range: sent finite
        assert np.isfinite(msg.values).all()
    for seed in range(20):  # every draw: an error or finite values, never inf
        try:
            assert np.isfinite(c.compress(x, seed=seed).values).all()
        except ValueError as e:
            assert "overflow" in str(e)


def test_dithering_norm_of_large_doubles_does_not_overflow():
    from burtorch.fl.compressors import make_compressor

    c = make_compressor("dithering", 4, 1, 4)
    values = c.compress(np.array([1e200, -1e200, 1.0, 2.0])).values
    assert np.isfinite(values).all() and values[0] > 0 > values[1]  # the norm overflowed: every value was 0


@pytest.mark.parametrize("bad", [[None, 1.0], ["1", "2"], [True, False], [1.0, "x"]])
def test_load_array_refuses_non_numbers(bad):
    v = bt.vector([5.0, 6.0])
    with pytest.raises(TypeError, match="real numbers"):
        bt.load_array(v, bad)
    assert v.data == [5.0, 6.0]


# ---------------------------------------------------------------- 7. files


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs on this platform")
def test_atomic_save_leaves_a_fifo_alone(tmp_path):
    import os
    import stat

    from burtorch.io.regular_file import NotRegularFileError

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    v = bt.vector([1.0, 2.0])
    model = bt.nn.Linear(2, 1)
    for save in (lambda: bt.io.save(fifo, v), lambda: bt.io.save_state_dict(model, fifo)):
        with pytest.raises(NotRegularFileError, match="FIFO"):
            save()
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(NotRegularFileError, match="directory"):
        bt.io.save(tmp_path, v)
    assert sorted(os.listdir(tmp_path)) == ["pipe"]  # no temporary file left


def test_loader_checks_the_magic_before_reading_the_file(tmp_path):
    from burtorch.io.format import FIXED_SIZE, FormatError, read_declared

    junk = bytes(range(256)) * (1 << 14)  # 4 MiB without the magic
    taken = []
    stream = io.BytesIO(junk)

    def read(n):
        chunk = stream.read(n)
        taken.append(len(chunk))
        return chunk

    with pytest.raises(FormatError, match="not a burtorch file"):
        read_declared(read, len(junk))
    assert sum(taken) <= FIXED_SIZE
    p = tmp_path / "junk.bin"
    p.write_bytes(junk)
    with pytest.raises(FormatError, match="not a burtorch file"):
        bt.io.load_state_dict(p)


# ---------------------------------------------------------------- 8. the command lines


def _cli(argv, capsys):
    from burtorch.cli.main import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


def test_train_save_into_a_missing_directory_fails_before_training(tmp_path, capsys):
    code, out = _cli(["train", "mlp", "--preset", "tiny", "--steps", "3", "--save", str(tmp_path / "no" / "x.ckpt")],
                     capsys)
    assert code == 2 and "does not exist" in out.err
    assert "initial validation loss" not in out.out  # refused before any work


@pytest.mark.parametrize("flag", ["--batch", "--sample", "--eval-samples", "--hidden", "--chunk"])
def test_train_huge_sizes_refused_at_once(flag, capsys):
    code, out = _cli(["train", "mlp", "--preset", "tiny", "--steps", "1", flag, str(10**12)], capsys)
    assert code == 2 and "above the most" in out.err


@pytest.mark.parametrize("model", ["mlp", "gpt"])
@pytest.mark.parametrize("content", ["a", "ab\n", "hello world\n", "\n\n\n"])
def test_train_small_data_files_are_usage_errors(tmp_path, model, content, capsys):
    p = tmp_path / "d.txt"
    p.write_text(content)
    code, out = _cli(["train", model, "--preset", "tiny", "--steps", "1", "--data", str(p)], capsys)
    assert code == 2 and out.err.startswith("burtorch train: error: ") and "Traceback" not in out.err


def test_fl_libsvm_with_one_large_feature_index_starts_at_once(tmp_path, capsys):
    import time

    p = tmp_path / "wide.svm"
    p.write_text("".join(f"{1 if i % 2 else -1} 1:{i / 40} 4000:{(i % 7) / 7} {2 + i * 97 % 3990}:1\n"
                         for i in range(40)))
    t0 = time.perf_counter()
    code, out = _cli(["fl", "--libsvm", str(p), "--rounds", "1", "--quiet", "--clients", "20"], capsys)
    assert code == 0, out.err
    assert time.perf_counter() - t0 < 10  # the d^3 setup took minutes per run


def test_smoothness_from_the_smaller_gram_matrix():
    from burtorch.fl.logistic import LogisticProblem

    r = np.random.default_rng(0)
    for rows, dim in ((30, 50), (60, 8)):
        A, y = r.standard_normal((rows, dim)), np.where(r.standard_normal(rows) > 0, 1.0, -1.0)
        problem = LogisticProblem(A, y, 3, "iid", lam=0.1)
        s = problem.smoothness()
        mean_h = sum(B.T @ B / len(B) for B in problem.shards) / 3
        local = [np.linalg.eigvalsh(B.T @ B / len(B))[-1] / 4 + 0.2 for B in problem.shards]
        assert s.L == pytest.approx(np.linalg.eigvalsh(mean_h)[-1] / 4 + 0.2, rel=1e-12)
        assert s.L_tilde == pytest.approx(np.sqrt(np.mean(np.square(local))), rel=1e-12)


@pytest.mark.parametrize("flag", ["--lr", "--lr-scale", "--lam", "--alpha", "--participation", "--p", "--target"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_fl_non_finite_and_negative_numbers_are_usage_errors(flag, value, capsys):
    code, out = _cli(["fl", "--rounds", "1", "--quiet", flag, value], capsys)
    assert code == 2 and "must be" in out.err


@pytest.mark.parametrize("flag", ["--clients", "--rounds", "--k", "--s", "--samples", "--dim", "--hidden",
                                  "--max-samples", "--eval-every", "--local-steps", "--batch", "--workers"])
def test_fl_non_positive_counts_are_usage_errors(flag, capsys):
    code, out = _cli(["fl", "--rounds", "1", "--quiet", flag, "0"], capsys)
    assert code == 2 and "positive" in out.err


def test_fl_json_into_a_missing_directory_fails_before_the_rounds(tmp_path, capsys):
    code, out = _cli(["fl", "--rounds", "1", "--json", str(tmp_path / "no" / "r.json")], capsys)
    assert code == 2 and "does not exist" in out.err and "round" not in out.out


def test_fl_smoothness_that_overflows_is_a_usage_error(capsys):
    code, out = _cli(["fl", "--rounds", "1", "--quiet", "--lam", "1e300"], capsys)
    assert code == 2 and "overflow" in out.err


def test_fl_libsvm_too_large_for_a_dense_matrix(tmp_path):
    from burtorch.fl.libsvm import read_libsvm

    p = tmp_path / "big.svm"
    p.write_text("1 1:1 900000:1\n-1 2:1\n")
    with pytest.raises(ValueError, match="dense matrix"):
        read_libsvm(str(p), max_cells=1_000_000)


# ---------------------------------------------------------------- 4. state after an error


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("chunk", [1, 2])
def test_a_failing_oracle_leaves_the_grads_as_they_were(compile, chunk):
    from burtorch.nn import MakemoreMLP

    bt.manual_seed(1)
    model = MakemoreMLP(vocab=11, block=4, emb=5, hidden=7)
    r = random.Random(2)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(6)]
    pv = model.parameter_vector()
    bt.grad_oracle(model, batch)
    before = pv.numpy("grads").copy()
    bad = batch[:3] + [([0, 0, 0, 0], 99)]  # the fourth sample fails after three were swept
    with pytest.raises(IndexError):
        bt.grad_oracle(model, bad, compile=compile, chunk=chunk)
    np.testing.assert_array_equal(pv.numpy("grads"), before)
    bt.load_array(model.fc2.bias, np.full(model.fc2.bias.size, np.inf, dtype=np.float32))  # every loss is nan
    with pytest.raises(FloatingPointError):  # after zero_grad=True zeroed the grads
        bt.grad_oracle(model, batch, compile=compile, chunk=chunk)
    np.testing.assert_array_equal(pv.numpy("grads"), before)


@pytest.mark.parametrize("argv", [["train", "mlp", "--preset", "tiny", "--steps", "3", "--lr", "1e300"],
                                  ["fl", "--rounds", "5", "--quiet", "--lr", "1e300"],
                                  ["fl", "--rounds", "5", "--quiet", "--lr", "1e300", "--method", "marina",
                                   "--compressor", "randk", "--k", "3"]])
def test_a_diverging_run_says_so_without_a_traceback(argv, capsys):
    code, out = _cli(argv, capsys)
    assert code == 1 and "the run diverged" in out.err and "Traceback" not in out.err


# ---------------------------------------------------------------- 5. threads


def test_rewind_of_another_threads_default_arena_is_refused():
    import threading

    started, release, seen = threading.Event(), threading.Event(), {}

    def owner():
        x = bt.Value(1.0)
        seen["cp"] = bt.checkpoint()
        seen["y"] = x * 2.0
        started.set()
        release.wait(10)
        seen["alive"] = seen["y"].alive and seen["y"].data == 2.0

    t = threading.Thread(target=owner)
    t.start()
    started.wait(10)
    try:
        for attempt in (lambda: bt.rewind(seen["cp"]), lambda: seen["y"].arena.rewind(seen["cp"]),
                        lambda: seen["y"].arena.clear(), lambda: seen["y"].arena.release_unused()):
            with pytest.raises(RuntimeError, match="another thread's default arena"):
                attempt()
    finally:
        release.set()
        t.join()
    assert seen["alive"]


def test_a_shared_arena_may_still_be_rewound_from_any_thread():
    import threading

    arena = bt.Arena(bt.float64)
    with arena:
        bt.Value(1.0)
    cp = arena.checkpoint()
    with arena:
        bt.Value(2.0)
    t = threading.Thread(target=arena.rewind, args=(cp,))
    t.start()
    t.join()
    assert arena.num_nodes == 1
