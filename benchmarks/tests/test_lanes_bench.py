"""python -m burtorch_bench.lanes: every row it times computes the same values and gradients (the
benchmark cross-checks them before timing), and it prints a row per path for W1 and W2."""
from __future__ import annotations

import os
import sys
import time

import pytest

import burtorch as bt
from burtorch_bench import lanes


def test_lanes_bench_runs_and_leaves_lanes_on(capsys, monkeypatch, tmp_path):
    from burtorch import native

    monkeypatch.setenv("BURTORCH_CACHE_DIR", str(tmp_path))  # its compiles stay in the test's directory
    torch_loaded = "torch" in sys.modules  # an earlier test of this process may have imported it
    lanes.main(["--n1", "70", "--n2", "45", "--reps", "1"])
    out = capsys.readouterr().out
    # the header says whether native code ran: it does wherever a compiler is
    ran = "ran" if native.compiler() else "did not run (interpreter: no C++ compiler"
    for graph, n in (("W1", "70"), ("W2", "45")):
        assert f"{graph}: N = {n} inputs" in out
        assert f"{graph}: N = {n} inputs, value and 2 grads each, FP64; medians of 1; native code: {ran}" in out
    for row in ("burtorch .map (lanes)", "burtorch .map(out=) (lanes)", "burtorch .map(out=) interpreter",
                "burtorch .map one-sample", "traffic floor"):
        assert out.count(row) == 2
    assert bt.lanes_enabled() and native.native_programs_enabled()
    # the header says how the peers were set up and what the floor is
    assert "peers: one-core; XLA_FLAGS=" in out
    assert ("torch loaded: 1 threads" if torch_loaded else "torch not loaded") in out
    assert "floor: np.copyto(grads, X) + values.fill(0)" in out


def test_peers_one_core_sets_the_xla_flag_once(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nonexistent")
    lanes.configure_peers("one-core")
    lanes.configure_peers("one-core")
    assert lanes.os.environ["XLA_FLAGS"] == "--xla_dump_to=/nonexistent --xla_cpu_multi_thread_eigen=false"
    monkeypatch.delenv("XLA_FLAGS")
    lanes.configure_peers("default")
    assert "XLA_FLAGS" not in lanes.os.environ


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="no /proc: the column stays empty")
def test_others_cpu_counts_another_threads_work():
    import threading

    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(i * i for i in range(1000))

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = lanes.others_cpu_ns()
        time.sleep(0.05)
        after = lanes.others_cpu_ns()
    finally:
        stop.set()
        t.join()
    assert after > before


def test_lanes_bench_refuses_bad_sizes(capsys):
    with pytest.raises(SystemExit):
        lanes.main(["--n1", "1"])
    with pytest.raises(SystemExit):
        lanes.main(["--peers", "all"])
