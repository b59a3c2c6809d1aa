"""The ISA levels (src/burtorch/_isa.py): the loader's choice and errors, and the kernel and
gradient tests at every level this host runs and this build has, each in a child process with
BURTORCH_ISA set (the level is chosen once, at import)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import burtorch as bt
from burtorch import _cpu, _isa

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = {level: p for level in (*_isa.LEVELS, "native") if (p := _isa._origin(level)) is not None}
RUNNABLE = [level for level in _isa.LEVELS if level in BUILT and level in _cpu.supported_levels()]


def _child(code: str, level: str | None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(_isa.ENV, None)
    if level is not None:
        env[_isa.ENV] = level
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def test_choose_picks_the_best_built_level_the_cpu_runs():
    built = {"generic": "g", "avx2": "a", "avx512": "z"}
    assert _isa.choose(None, ["generic", "avx2", "avx512"], built) == "avx512"
    assert _isa.choose(None, ["generic", "avx2"], built) == "avx2"
    assert _isa.choose(None, ["generic"], built) == "generic"
    assert _isa.choose(None, ["generic", "avx2", "avx512"], {"generic": "g"}) == "generic"
    assert _isa.choose("", ["generic", "avx2"], built) == "avx2"
    assert _isa.choose("generic", ["generic", "avx2", "avx512"], built) == "generic"
    assert _isa.choose(None, ["generic"], {"native": "n"}) == "native"


@pytest.mark.parametrize("requested, cpu, built, message", [
    ("sse9", ["generic"], {"generic": "g"}, "unknown level"),
    ("avx512", ["generic", "avx2"], {"generic": "g", "avx512": "z"}, "does not run"),
    ("avx2", ["generic", "avx2"], {"generic": "g"}, "no avx2 level"),
    ("avx2", ["generic", "avx2"], {"native": "n"}, "BURTORCH_NATIVE"),
    ("native", ["generic"], {"generic": "g"}, "not built with BURTORCH_NATIVE"),
    (None, [], {"generic": "g"}, "no build this CPU runs"),
])
def test_choose_refuses_what_cannot_run(requested, cpu, built, message):
    with pytest.raises(ImportError, match=message):
        _isa.choose(requested, cpu, built)


def test_build_info_names_the_running_level():
    info = bt.build_info()
    assert info["isa"] in BUILT
    assert info["isa"] in str(bt.build_info)
    assert info["cpu_levels"] == list(_cpu.supported_levels())
    assert os.path.samefile(info["extension"], BUILT[info["isa"]])
    if not info["forced"]:
        assert info["isa"] == ("native" if "native" in BUILT else RUNNABLE[-1])


def test_an_unsupported_forced_level_is_a_clear_import_error():
    r = _child("import burtorch", "sse9")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "unknown level" in r.stderr
    assert "Traceback" in r.stderr  # a Python exception, not a signal


# The gradients of one small model (a tanh MLP with a cross-entropy head, float64 and float32),
# printed as JSON by a child at each level.
GRADS = """
import json, random, burtorch as bt
from burtorch import nn
out = {"isa": bt.build_info()["isa"], "simd": bt._core.simd}
for key, dt in (("float64", bt.float64), ("float32", bt.float32)):
    random.seed(3)
    bt.manual_seed(3)
    layers = [nn.Layer(12, 8, act="tanh", dtype=dt), nn.Layer(8, 3, dtype=dt)]
    h = [random.uniform(-1, 1) for _ in range(12)]
    for layer in layers:
        h = layer(h)
    loss = bt.cross_entropy(h, 1)
    loss.backward()
    grads = [g for layer in layers for p in layer.parameters() for g in p.grad]
    out[key] = [loss.data] + grads
print(json.dumps(out))
"""


def _grads(level):
    r = _child(GRADS, level)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.skipif(len(RUNNABLE) < 2, reason="this host or build has fewer than two ISA levels")
def test_every_level_gives_the_same_gradients_within_tolerance():
    results = {level: _grads(level) for level in RUNNABLE}
    assert {r["isa"] for r in results.values()} == set(RUNNABLE)
    simd = {"generic": "portable", "avx2": "avx2", "avx512": "avx512"}
    assert all(r["simd"] == simd[level] for level, r in results.items())
    ref = results[RUNNABLE[0]]
    for level, r in results.items():
        for key, rtol in (("float64", 1e-12), ("float32", 2e-5)):
            assert len(r[key]) == len(ref[key])
            for a, b in zip(r[key], ref[key]):
                assert abs(a - b) <= rtol * max(1.0, abs(b)), (level, key, a, b)


# The kernel and gradient tests, rerun under each level that is not the one this process runs
# (that one ran them already): a subset that covers the SIMD code (GEMM-backed linear layers, the
# fused SGD step against PyTorch, the ops' and range ops' gradients against finite differences,
# the layers and optimizers against PyTorch, the replayed programs, and the lanes' and per-sample
# rows' bitwise agreement with the one-sample replay, whose kernels differ by level): seconds per level.
KERNEL_TESTS = ["tests/test_linear_kernels.py", "tests/test_fused_sgd.py", "tests/test_range_ops.py",
                "tests/test_ops.py", "tests/test_nn.py", "tests/test_program_models.py",
                "tests/test_lanes.py", "tests/test_lanes_range.py"]


@pytest.mark.parametrize("level", _isa.LEVELS)
def test_kernel_tests_pass_at_level(level):
    if level not in RUNNABLE:
        pytest.skip(f"{level}: not built here or not run by this CPU")
    if level == bt.build_info()["isa"]:
        pytest.skip(f"{level} is the level this process runs: the suite ran these tests at it")
    env = dict(os.environ, **{_isa.ENV: level})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", *KERNEL_TESTS],
                       cwd=os.path.dirname(HERE), capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
