"""Lane programs compiled to native code (burtorch.native): every sample's value and grads bitwise
those of the one-sample replay, on every op of the op table (one program holding them all, so
few files compile), on random graphs of the generator the lane tests use, with guards, FP32 and
FP64, N below, at and above a block; every fallback (no compiler, a compile error, an unwritable
cache, a corrupted cached file, a bit mismatch) keeps the interpreter's results and says why; the
background compile switches .map over once ready."""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch import _core, native
from lane_bits import DTYPES, bits, lanes_restored  # noqa: F401 (lanes_restored: an autouse fixture)
from op_table import BINARY, NARY, UNARY, any_, away0, pos
from test_random_graphs import OPS, evaluate

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler to compile lane programs")


@pytest.fixture(autouse=True)
def native_restored(tmp_path_factory, monkeypatch):
    """Each test's cache is its own directory unless it shares the module's (tests that compile
    the same program reuse it); the switch and the test hook are put back."""
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))
    yield
    native.set_native_programs(True)
    native.jobs._inject_mismatch = False


def block(prog):
    """The lanes per block the replay uses for prog (csrc/lanes/replay.hpp's block_lanes)."""
    w = _core.lane_width(prog.dtype)
    size = 8 if prog.dtype == bt.float64 else 4
    for u in (16, 4):
        if prog.frame_size * w * u * 2 * size <= 256 << 10:
            return w * u
    return w


def results(f, X, how, reduce=None):
    """f.map(X) with native code ('native'), the lanes' interpreter ('interpreter') or one sample
    at a time ('one')."""
    native.set_native_programs(how == "native")
    _core.set_lanes_enabled(how != "one")
    try:
        return f.map(X, reduce=reduce)
    finally:
        native.set_native_programs(True)
        _core.set_lanes_enabled(True)


def assert_native_matches(f, X, reduce=None):
    v1, g1 = results(f, X, "native", reduce)
    assert _core._lanes_native(f.programs()[-1])[0] != 0  # the library ran
    v0, g0 = results(f, X, "one", reduce)
    np.testing.assert_array_equal(bits(v1), bits(v0))
    np.testing.assert_array_equal(bits(g1), bits(g0))
    return v1, g1


def all_ops(p, q, r):
    """Every op of the op table once (unary on an argument of its domain, binary also with one
    slot as both operands, var-arity over mixed arguments), summed by a var-arity record."""
    arg = {pos: p, any_: q, away0: r}
    terms = [f(arg[sample]) for f, _, sample in UNARY.values()]
    for f, _, (sa, sb) in BINARY.values():
        terms.append(f(arg[sa], arg[sb]))
        terms.append(f(arg[sa], arg[sa]) if sa is sb else f(arg[sb], arg[sb]))
    xs = [q, p, r, q * p, q - r]  # 5 arguments: no division by n is exact by chance
    for name, (f, _, _) in NARY.items():
        if name.startswith("inner_product"):  # 3 products (and a bias)
            terms.append(f([*xs, p] if name == "inner_product" else [*xs, p, r]))
            terms.append(f([q, q, r, r, q, p, r][: 6 if name == "inner_product" else 7]))
            continue
        terms.append(f(xs))
        terms.append(f([q, q, r]))  # repeated arguments: one grad added into several times
    return bt.reduce_sum(terms) * bt.relu(q)  # relu: the sweep's zero-grad lanes where q <= 0


def op_table_inputs(n, seed=0):
    rng = random.Random(seed)
    X = np.array([[pos(rng), any_(rng), away0(rng)] for _ in range(n)])
    X[1::7, 1] = 0.0  # every output grad 0 in those lanes
    return X


@pytest.mark.parametrize("dtype", DTYPES)
def test_op_table_in_one_program_bitwise(dtype):
    f = bt.value_and_grad(all_ops, argnums=(0, 1, 2), dtype=dtype)
    X = op_table_inputs(1000)
    f.map(X[:2])
    assert bt.compile_native(f, X) == ["native"]
    prog = f.programs()[-1]
    assert _core._lanes_native(prog)[0] != 0
    B, w = block(prog), _core.lane_width(dtype)
    for n in (3, B - 1, B, B + w + 1, 2 * B + 3, 1000):  # below, at and above a block
        assert_native_matches(f, X[:n])
    assert_native_matches(f, X, reduce="mean")
    # the values-only replay (the block function without its sweep)
    vals = [np.full(len(X), 5.0) for _ in range(2)]
    for on, v in zip((True, False), vals):
        native.set_native_programs(on)
        f.map(X[:2])  # .map switches the program's block function on or off
        assert prog._replay(X, None, "values", 1.0, v, None) == []
    np.testing.assert_array_equal(bits(vals[0]), bits(vals[1]))
    assert f.traces == 1


def random_graphs(seed, count=6):
    """count programs of the random-graph generator (test_random_graphs.py's ops and shape)."""
    rng = random.Random(seed)
    return [[(rng.choice(OPS), rng.randrange(1001), rng.randrange(1001), rng.randrange(1001))
             for _ in range(rng.randint(1, 25))] for _ in range(count)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_random_graphs_bitwise(dtype):
    graphs = random_graphs(11)

    def fn(a, b, c):  # the graphs side by side in one program: one library to compile
        return bt.reduce_sum([evaluate(g, [a, b, c], bt) for g in graphs])

    f = bt.value_and_grad(fn, argnums=(0, 1, 2), dtype=dtype)
    X = np.random.default_rng(2).uniform(-2, 2, size=(301, 3))
    f.map(X[:2])
    assert bt.compile_native(f, X) == ["native"]
    assert_native_matches(f, X)


def guarded(a, b):
    h = bt.tanh(a * b)  # the guard reads a node the block function computes
    if h > 0.2:
        return h * a + bt.exp(b)
    return a - b * h


@pytest.mark.parametrize("dtype", DTYPES)
def test_guards_bitwise(dtype):
    X = np.random.default_rng(5).normal(size=(203, 2))
    X[0] = (2.0, 1.0)  # traced on the h > 0.2 branch; the lanes disagree in every block
    f, f0 = (bt.value_and_grad(guarded, argnums=(0, 1), dtype=dtype) for _ in range(2))
    f.map(X[:1].repeat(2, axis=0))
    assert bt.compile_native(f, X) == ["native"]
    v1, g1 = results(f, X, "native")
    v0, g0 = results(f0, X, "one")
    np.testing.assert_array_equal(bits(v1), bits(v0))
    np.testing.assert_array_equal(bits(g1), bits(g0))
    assert f.traces == f0.traces == 2
    # the program's own replay reports the same failed samples either way
    prog = f.programs()[0]
    address, state = _core._lanes_native(prog)
    assert address != 0
    failed = []
    for a in (address, 0):
        _core._set_lanes_native(prog, a, state.rows_address, state)
        failed.append(prog._replay(X, None, "rows", 1.0, np.empty(len(X)), np.empty((len(X), 2), g1.dtype)))
    assert failed[0] == failed[1] and len(failed[0]) > 20


def w1(a, b):
    return ((a + b) - (a * b + b ** 3)) ** 2 * 0.5


def interpreter_and(f, X):
    """f.map(X) with the interpreter's lanes, then with whatever f's programs do now."""
    want = results(f, X, "interpreter")
    got = f.map(X)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(bits(g), bits(w))


def test_malformed_check_samples_are_refused_before_anything_changes():
    f = bt.value_and_grad(w1, argnums=(0, 1))
    f(1.0, 2.0)
    before = bt.native_status(f)
    for X, err, msg in ((np.zeros((5, 3)), ValueError, r"shape \(n >= 1, 2\), got \(5, 3\)"),
                        (np.zeros((0, 2)), ValueError, "got \\(0, 2\\)"),
                        (np.array([[np.nan, 1.0]] * 4), ValueError, "NaN or inf"),
                        ("abc", TypeError, "array of numbers")):
        with pytest.raises(err, match=msg):
            bt.compile_native(f, X)
        assert bt.native_status(f) == before
    assert bt.compile_native(f, [[1.0, 2.0]] * 3) == ["native"]


def test_no_compiler_keeps_the_interpreter(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    f = bt.value_and_grad(w1, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(100, 2))
    f.map(X)
    status = bt.compile_native(f)
    assert status[0].startswith("interpreter: no C++ compiler (CXX=/nonexistent/c++")
    assert bt.native_status(f) == status
    interpreter_and(f, X)


def test_compile_error_keeps_the_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native.jobs, "generate", lambda s: "this is not C++;\n")
    f = bt.value_and_grad(w1, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(100, 2))
    f.map(X)
    [status] = bt.compile_native(f)
    assert status.startswith("interpreter: the compiler failed (") and "error" in status
    assert list(tmp_path.iterdir()) == []  # nothing half-made left in the cache
    interpreter_and(f, X)


def test_unwritable_cache_keeps_the_interpreter(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("a file where the cache directory would be")
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path / "file"))
    f = bt.value_and_grad(lambda a, b: w1(a, b) * 1.25, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(100, 2))
    f.map(X)
    [status] = bt.compile_native(f)
    assert status.startswith("interpreter: the cache") and "not writable" in status
    interpreter_and(f, X)


def test_corrupted_cached_file_keeps_the_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))
    # a program no other test compiles: this process has not loaded its library yet
    f = bt.value_and_grad(lambda a, b: w1(a, b) * 0.375 - a, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(100, 2))
    f.map(X)
    path = native.cached_path(f.programs()[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF truncated")
    [status] = bt.compile_native(f)
    assert status.startswith("interpreter: " + path.name + " does not load")
    interpreter_and(f, X)


def test_mismatch_keeps_the_interpreter(monkeypatch):
    monkeypatch.setattr(native.jobs, "_inject_mismatch", True)
    f = bt.value_and_grad(w1, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(100, 2))
    f.map(X)
    [status] = bt.compile_native(f)
    assert status == "interpreter: its results differ from the interpreter's on 300 check samples"
    assert _core._lanes_native(f.programs()[0])[0] == 0
    interpreter_and(f, X)


def test_background_compile_switches_when_ready(monkeypatch, tmp_path):
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))  # a cache miss: it compiles
    f = bt.value_and_grad(lambda a, b: w1(a, b) + 0.625 * b, argnums=(0, 1))
    X = np.random.default_rng(0).uniform(-3, 3, size=(native.NATIVE_AFTER // 2, 2))
    want = results(f, X, "interpreter")
    assert bt.native_status(f) == ["not started"]  # the interpreter's map counts no lanes
    f.map(X)
    assert bt.native_status(f) == ["not started"]  # half the lanes that pay
    got = f.map(X)  # starts the compile and replays with the interpreter meanwhile
    assert bt.native_status(f) == ["compiling"]
    prog = f.programs()[0]
    assert _core._lanes_native(prog)[0] == 0
    assert native._wait(f) == ["native"]
    assert _core._lanes_native(prog)[0] != 0
    after = f.map(X)
    for w, g, a in zip(want, got, after):
        np.testing.assert_array_equal(bits(g), bits(w))
        np.testing.assert_array_equal(bits(a), bits(w))
    assert len(list(tmp_path.glob("lanes-*.so"))) == 1 and not list(tmp_path.glob("*.tmp*"))
    # off: the next map runs the interpreter; on again: the library, loaded already
    bt.set_native_programs(False)
    f.map(X[:10])
    assert bt.native_status(f) == ["off (set_native_programs(False))"]
    assert _core._lanes_native(prog)[0] == 0
    bt.set_native_programs(True)
    f.map(X[:10])
    assert bt.native_status(f) == ["native"] and _core._lanes_native(prog)[0] != 0


def test_a_map_refused_for_nan_does_not_spoil_the_compile(monkeypatch, tmp_path):
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))
    f = bt.value_and_grad(lambda a, b: w1(a, b) - 0.375 * a, argnums=(0, 1))
    X = np.random.default_rng(1).uniform(-3, 3, size=(native.NATIVE_AFTER, 2))
    f(1.0, 2.0)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        f.map(bad)
    assert bt.native_status(f) == ["not started"]
    f.map(X)  # finite: the compile starts with these samples as its check
    assert native._wait(f) == ["native"]


def test_cache_hit_loads_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))
    fn = lambda a, b: w1(a, b) - 0.875 * a  # noqa: E731
    X = np.random.default_rng(0).uniform(-3, 3, size=(native.NATIVE_AFTER, 2))
    f = bt.value_and_grad(fn, argnums=(0, 1))
    f.map(X[:2])
    assert bt.compile_native(f) == ["native"]
    g = bt.value_and_grad(fn, argnums=(0, 1))  # the same program again: its library is cached
    g.map(X)
    assert bt.native_status(g) == ["native"]


def test_env_switch_turns_it_off():
    import subprocess
    import sys

    code = "import burtorch as bt; print(bt.native_programs_enabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "BURTORCH_NATIVE_PROGRAMS": "0"}).stdout
    assert out.strip() == "False"


def test_native_status_refuses_other_objects():
    with pytest.raises(TypeError, match="expected a Program"):
        bt.native_status(42)


def test_target_flags_are_the_extensions_own(monkeypatch):
    # a sanitized build adds -mavx2 -mfma to the generic level's -march: without -mfma the
    # generated code's madd would round a multiply-add in two steps where the core fuses it
    line = "GNU 12.2.0; Debug; flags: -O1 -fsanitize=address,undefined -mavx2 -mfma -march=x86-64-v2; sanitize: a"
    monkeypatch.setattr(_core, "build_info", line)
    assert native.isa_flags() == ["-mavx2", "-mfma", "-march=x86-64-v2"]
    monkeypatch.setattr(_core, "build_info", "GNU 12.2.0; Release; flags: -O3 -march=native; sanitize: ")
    assert native.isa_flags() == ["-march=native"]


def test_generated_source_splits_at_library_calls():
    f = bt.value_and_grad(lambda a, b: bt.tanh(a * b) * b + a, argnums=(0, 1))
    f(1.0, 2.0)
    src = native.generate(_core._lanes_structure(f.programs()[0]))
    # mul before tanh vectorizes; tanh runs in a loop of its own; the rest vectorizes again
    assert src.count("#pragma omp simd") >= 3
    assert "fwd_tanh(" in src and "da_mul(" in src


def test_stale_program_keeps_a_clear_status():
    with bt.scope():
        w = bt.Value(0.5)  # a parameter the program reads, discarded when the scope ends
        f = bt.value_and_grad(lambda a, b: w1(a, b) * w - 0.125 * b, argnums=(0, 1))
        f.map(np.ones((4, 2)))
    [status] = bt.compile_native(f)
    assert status.startswith("interpreter: the check could not replay the program (StaleValueError")


def test_two_processes_compile_one_program_into_one_cache(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, burtorch as bt\n"
        "f = bt.value_and_grad(lambda a, b: ((a + b) - (a * b + b ** 3)) ** 2 * 0.5 + 0.0625 * a, argnums=(0, 1))\n"
        "X = np.random.default_rng(0).uniform(-3, 3, size=(1000, 2))\n"
        "f.map(X[:2])\n"
        "print(bt.compile_native(f), f.map(X)[1].tobytes().hex()[:64])\n"
    )
    env = {**os.environ, "BURTORCH_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and outs[0][0] == "['native']"
    # one library, whole, and nothing half-made beside it; a third process loads it
    [so] = tmp_path.glob("lanes-*.so")
    assert not list(tmp_path.glob("*.tmp*"))
    third = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert third.stdout.split() == outs[0]
    assert list(tmp_path.glob("lanes-*.so")) == [so]
