"""burtorch-bench --threads and the GEMM floor row: which rows run at which thread counts, the cores
a threaded run is pinned to, the floor's numbers and its column in the tables (never speed)."""
from __future__ import annotations

import os

import pytest

from burtorch_bench import agreement, cli, harness, report
from burtorch_bench import frameworks as fw

pytest.importorskip("numpy")


def test_thread_counts_apply_to_burtorch_training_rows_only():
    over = {"threads": [1, 2], "embed": [4], "batch": [2]}
    chunk = harness.configs_for("mlp", fw.BY_NAME["burtorch-chunk"], "quick", over)
    assert [c["threads"] for c in chunk] == [1, 2]
    peer = harness.configs_for("mlp", fw.BY_NAME["torch-eager"], "quick", over)
    assert [c["threads"] for c in peer] == [1]
    floor = harness.configs_for("mlp", fw.BY_NAME["gemm-floor"], "quick", over)
    assert [c["threads"] for c in floor] == [1, 2]  # the floor's BLAS on as many threads
    w1 = harness.configs_for("tiny", fw.BY_NAME["burtorch"], "quick", over)
    assert "threads" not in w1[0]  # W1-W3 build graphs from Python: one thread
    jobs, _ = harness.plan(["mlp"], [fw.BY_NAME["burtorch-chunk"]], "quick", over)
    assert [j.name for j in jobs] == ["burtorch-chunk", "burtorch-chunk (2 threads)"]
    assert harness.describe_config(jobs[1].config) == "e=4 b=2 threads=2"
    # only the floor's BLAS gets more than one thread, and only on its two-thread row
    jobs, _ = harness.plan(["mlp"], [fw.BY_NAME["gemm-floor"], fw.BY_NAME["burtorch-chunk"]], "quick", over)
    blas = [(j.name, j.env.get("OPENBLAS_NUM_THREADS")) for j in jobs]
    assert blas == [("gemm-floor", None), ("gemm-floor (2 threads)", "2"), ("burtorch-chunk", None),
                    ("burtorch-chunk (2 threads)", None)]
    assert all(j.env.get(v) == "2" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") for j in jobs[1:2])


def test_compiled_chunk_rows_replay_chunks_of_about_64_rows_one_per_thread_at_least():
    from burtorch_bench.specs import replay_chunk

    # W4: a row per sample; W5: 8 rows (its block) per sample
    assert [replay_chunk("mlp", b, t) for b, t in ((64, 1), (64, 2), (1, 1), (1, 2), (7, 2))] == [64, 32, 1, 1, 3]
    gpt = [replay_chunk("gpt", b, t) for b, t in ((64, 1), (64, 2), (8, 1), (8, 2), (2, 2), (1, 2))]
    assert gpt == [8, 8, 8, 4, 1, 1]


def test_a_threaded_run_is_pinned_to_that_many_cores():
    assert harness.cores_for(None, 2) is None
    assert harness.cores_for(1, 1) == 1
    allowed = sorted(os.sched_getaffinity(0))
    top = max(allowed)
    pinned = harness.cores_for(top, 2)
    assert pinned[0] == top and len(pinned) == min(2, len(allowed)) and set(pinned) <= set(allowed)


def test_cli_refuses_thread_counts_the_machine_cannot_run():
    with pytest.raises(SystemExit):
        cli.main(["mlp", "--threads", "0"])
    with pytest.raises(SystemExit):
        cli.main(["mlp", "--threads", str(len(os.sched_getaffinity(0)) + 1)])


def test_gemm_floor_runs_the_steps_products_and_counts_their_flops():
    entry = fw.BY_NAME["gemm-floor"]
    runner = fw.load(entry).make_runner("mlp", entry.variant, {"e": 8, "b": 4})
    runner.run("step", 2)
    vocab = runner.info["vocab"]
    assert runner.numbers()["gflop"] == pytest.approx(2 * 3 * (4 * 1024 * 8 + 4 * 8 * vocab) / 1e9)
    assert runner.gW1.shape == (8, 1024) and runner.gx.shape == (4, 1024)
    with pytest.raises(ValueError):
        fw.load(entry).make_runner("gpt", entry.variant, {"b": 4})


def _row(name, entry, ms, threads=1, numbers=None):
    return {"name": name, "entry": entry, "workload": "mlp", "status": "ok",
            "config": {"e": 8, "b": 4, "threads": threads}, "times": {"step": [ms / 1e3] * 3},
            "n": {"step": 1}, "peak_rss": 1 << 24, "init_s": 0.1, "timed_region": "-",
            "numbers": numbers or {"loss before": 3.3, "loss after": 3.2, "ln V": 3.2958}}


def test_floor_row_agrees_without_being_the_reference_and_gives_each_row_its_percent():
    rows = [_row("burtorch-chunk", "burtorch-chunk", 4.0), _row("burtorch-chunk (2 threads)", "burtorch-chunk", 2.0, 2),
            _row("gemm-floor", "gemm-floor", 1.0, numbers={"gflop": 0.01})]
    report.annotate(rows)
    assert all(r["agrees"] for r in rows)
    agreement.check("mlp", rows)
    assert rows[1]["agreement"] == "agrees with burtorch-chunk"
    header, body, _ = report.table_rows(rows)
    col, tcol = header.index("% of GEMM floor"), header.index("threads")
    assert [b[col] for b in body] == ["25", "-", "100"]  # no floor at two threads in this run
    assert [b[tcol] for b in body] == ["1", "2", "1"]
    # with a two-thread floor, each row is set against the floor at its own thread count
    rows.append(_row("gemm-floor (2 threads)", "gemm-floor", 0.8, 2, numbers={"gflop": 0.01}))
    report.annotate(rows)
    header, body, _ = report.table_rows(rows)
    assert [b[col] for b in body] == ["25", "40", "100", "100"]


@pytest.fixture
def short_probes(monkeypatch):
    """The capacity probe in two rounds of 0.02 s phases instead of three of 0.1 s, its workers
    calibrated over 0.01 s instead of 0.05 s."""
    from burtorch_bench import capacity

    monkeypatch.setattr(capacity, "_ROUNDS", 2)
    monkeypatch.setattr(capacity, "_CALIBRATE_SECONDS", 0.01)
    monkeypatch.setattr(capacity, "_PROBE_SECONDS", 0.02)
    monkeypatch.setattr(capacity, "_SECONDS", 0.005)


def test_the_capacity_probe_times_each_cpu_alone_then_both_and_never_stops_a_run(short_probes):
    from burtorch_bench import capacity

    cpu = max(os.sched_getaffinity(0))
    probe = capacity.measure([cpu, cpu])  # both on one CPU: they take turns
    assert probe["cpus"] == [cpu, cpu] and len(probe["alone_per_s"]) == len(probe["together_per_s"]) == 2
    assert probe["round_trip_ns"] is None  # no trip from a CPU to itself
    assert probe["capacity"] == pytest.approx(sum(probe["together_per_s"]) / max(probe["alone_per_s"]))
    # (What it reads is not checked: its phases here are 0.02 s, and another test process on that
    # CPU in one phase and not in the next read 2.96 in a CI run. Where each worker runs is
    # checked as it starts: _start refuses one that is not pinned.)
    assert "two-core capacity" in capacity.describe(probe)
    for cpus in ([10_000, cpu], [cpu, 10_000]):  # no such CPU: that worker cannot pin itself
        bad = capacity.probe_or_error(cpus)
        assert bad["capacity"] is None and "cannot pin" in bad["error"]
        assert "not measured" in capacity.describe(bad)
    with pytest.raises(ValueError):
        capacity.measure([cpu])
    meta = {"two_core_capacity": {"before": probe, "after": bad}}
    line = capacity.around_runs(meta)
    assert f"before the runs {probe['capacity']:.2f}" in line and "after: -" in line
    assert capacity.around_runs({}) == ""
    doc = {"meta": meta, "runs": []}
    assert report.render_markdown(doc).startswith(line)
    assert line in report.render_terminal(doc)


@pytest.mark.parametrize("cpus", ["x", "0", "1,2,3", "-1,0", "0,"])
def test_the_capacity_command_rejects_a_bad_cpu_list(cpus, capsys):
    from burtorch_bench import capacity

    with pytest.raises(SystemExit) as exc:
        capacity.main([f"--cpus={cpus}"])
    assert exc.value.code == 2 and "expected two CPU numbers" in capsys.readouterr().err


def test_the_capacity_command_reports_a_cpu_it_cannot_use(capsys):
    from burtorch_bench import capacity

    cpu = max(os.sched_getaffinity(0))
    assert capacity.main(["--cpus", f"{cpu},100000"]) == 1
    assert "capacity: " in (err := capsys.readouterr().err) and "cannot pin to CPU 100000" in err


def test_a_capacity_worker_that_stops_is_an_error_not_a_hang():
    from burtorch_bench import capacity

    (proc,), (rate,) = capacity._start([max(os.sched_getaffinity(0))])
    assert rate > 0
    proc.kill()
    proc.wait()
    with pytest.raises(RuntimeError, match="stopped before it timed"):
        capacity._run([proc], [1])
    capacity._release([proc])


def test_a_run_with_two_thread_rows_probes_the_cores_before_and_after(tmp_path, monkeypatch, short_probes):
    import json

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(report, "render_png", lambda doc, out_dir: {})  # charts: not what this checks
    code = cli.main(["mlp", "--frameworks", "burtorch-chunk", "--embed", "4", "--batch", "2", "--threads", "1,2",
                     "--reps", "1", "--out", str(tmp_path)])
    assert code == 0
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    probes = meta["two_core_capacity"]
    for when in ("before", "after"):
        assert probes[when]["capacity"] > 0 and len(probes[when]["cpus"]) == 2
    assert probes["before"]["round_trip_ns"] > 0
    assert (tmp_path / "results.md").read_text().startswith("Two cores")


def test_the_round_trip_probe_refuses_what_it_cannot_time():
    from burtorch import _core

    allowed = sorted(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="differ"):
        _core._line_round_trip_ns(allowed[0], allowed[0], 10)
    with pytest.raises(ValueError, match="no such CPU"):
        _core._line_round_trip_ns(allowed[0], 1 << 20, 10)
    with pytest.raises(ValueError, match="rounds"):
        _core._line_round_trip_ns(allowed[0], allowed[-1] + 1, 0)
    # a CPU number past the machine's: no thread can be pinned there (one outside a taskset mask
    # but online can be), and the probe says so rather than hang
    outside = max(os.cpu_count() or 1, allowed[-1] + 1)
    with pytest.raises(ValueError, match="pin"):
        _core._line_round_trip_ns(allowed[0], outside, 10)
    if len(allowed) > 1:
        assert _core._line_round_trip_ns(allowed[0], allowed[1], 1000) > 0


def _stores_case():
    import random

    import burtorch as bt
    from burtorch import nn

    bt.manual_seed(0)
    model = nn.MakemoreMLP(vocab=27, block=16, emb=4, hidden=8, dtype=bt.float32)
    r = random.Random(0)
    batches = [[([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(8)] for _ in range(2)]
    return model, batches


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this process may use one core only")
def test_the_stores_section_times_both_stores_and_restores_the_default():
    """python -m burtorch_bench.threads --only stores: every round times plain then streaming
    stores after probing the CPUs' round trip, and streaming is back on afterwards, also when a
    step fails midway."""
    import burtorch as bt
    from burtorch_bench.threads import _store_runs

    before = bt.get_num_threads()
    cpus = sorted(os.sched_getaffinity(0))[:2]
    try:
        model, batches = _stores_case()
        runs = _store_runs(model, batches, reps=2, cpus=cpus, per_run=1)
        assert len(runs[False]) == len(runs[True]) == 2
        assert all(trip > 0 and ms > 0 for v in runs.values() for trip, ms in v)
        assert bt._core._set_split_step_streaming(True) is True  # left on
        bad = [[([99] * 16, 0)] * 8]  # ids past the vocabulary: the first step raises
        with pytest.raises(IndexError):
            _store_runs(model, bad, reps=1, cpus=cpus, per_run=1)
        assert bt._core._set_split_step_streaming(True) is True
    finally:
        bt.set_num_threads(before)


def _spied(monkeypatch, name, section):
    """Runs section() with capacity.<name> wrapped: (its calls as (args, result), the lines printed)."""
    import contextlib
    import io

    from burtorch_bench import capacity

    real, seen = getattr(capacity, name), []

    def spy(*a, **kw):
        seen.append((a, real(*a, **kw)))
        return seen[-1][1]

    monkeypatch.setattr(capacity, name, spy)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        section()
    return seen, out.getvalue().splitlines()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this process may use one core only")
def test_the_cpus_section_times_a_w4_step_pinned_to_each_cpu_alone_and_at_once(monkeypatch, short_probes):
    """python -m burtorch_bench.threads --only cpus: a worker process per CPU, which says where it
    runs (one left unpinned fails to start), timed alone and then at once with the other."""
    from burtorch_bench import threads

    cpus = sorted(os.sched_getaffinity(0))[:2]
    seen, lines = _spied(monkeypatch, "pinned_rates", lambda: threads.cpus_section(2))
    ((args, rates),) = seen
    assert args == (cpus, "w4", 2) and sorted(rates) == ["alone", "together"]
    assert all(len(r) == 2 and len(r[i]) == 2 and min(r[i]) > 0 for r in rates.values() for i in (0, 1))
    assert lines[1].startswith(f"alone: CPU {cpus[0]} ") and lines[2].startswith(f"at once: CPU {cpus[0]} ")
    ratios = [float(w.rstrip(",")) for w in lines[3].split() if w[0].isdigit()]
    assert len(ratios) == 2 and 0 < ratios[0] <= ratios[1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this process may use one core only")
def test_the_bound_section_sets_each_half_at_once_against_the_whole_step_alone(monkeypatch, short_probes):
    """python -m burtorch_bench.threads --only bound: each whole step timed alone on each CPU, each
    of its halves (W4: units, positions, samples; W5: samples) on both at once, and the ratios
    printed from those."""
    import statistics

    from burtorch_bench import threads

    cpus = sorted(os.sched_getaffinity(0))[:2]
    seen, printed = _spied(monkeypatch, "rates_by_kind", lambda: threads.bound_section(2, embeds=(8,), w5_batches=(2,)))
    cases = [("W4 e=8", "w4:8:16:64", {"units": "w4:4:16:64", "positions": "w4:8:8:64", "samples": "w4:8:16:32"}),
             ("W5 b=2", "w5:2", {"samples": "w5:1"})]
    lines = iter(printed[2:])
    assert len(seen) == len(cases)
    for (args, rates), (title, whole, halves) in zip(seen, cases):
        assert args == (cpus, {whole: ("alone",), **{k: ("together",) for k in halves.values()}}, 2)
        phases = {k: sorted(v) for k, v in rates.items()}
        assert phases == {whole: ["alone"], **{k: ["together"] for k in halves.values()}}
        alone = [1e3 / statistics.median(r) for r in rates[whole]["alone"]]
        for name, kind in halves.items():
            line = next(lines)
            half = [1e3 / statistics.median(r) for r in rates[kind]["together"]]
            assert line.startswith(f"{title}: half the {name} ")
            ratios = [float(w[:-1]) for w in line.split() if w.endswith("x")]
            assert ratios == pytest.approx([alone[0] / half[0], alone[1] / half[1], min(alone) / max(half)], abs=0.006)
    assert next(lines, None) is None


def test_work_kinds_set_the_steps_model_and_batch(monkeypatch, capsys):
    from burtorch import nn
    from burtorch.optim import SGD
    from burtorch_bench import capacity, step_builders

    assert capacity.w4_shape("w4") == (64, 16, 64) and capacity.w4_shape("w4:4:8:32") == (4, 8, 32)
    assert capacity.w5_batch("w5:12") == 12
    for bad in ("w4:4:8", "w4:0:8:32", "w4:4:x:32", "w6:4:8:32", "w4:4:8:32:1", "w5", "w5:0", "w5:x"):
        with pytest.raises(ValueError, match="a W[45] kind is"):
            capacity.w5_batch(bad) if bad.startswith("w5") else capacity.w4_shape(bad)
        with pytest.raises(SystemExit) as exc:
            capacity.main(["--worker", "0", "--work", bad])
        assert exc.value.code == 2 and "kind is" in capsys.readouterr().err
    with pytest.raises(ValueError, match="phases are"):
        capacity.rates_by_kind([0], {"gemm": ("apart",)}, 1)
    seen = []

    class MLPSpy(nn.MakemoreMLP):
        def loss_batch(self, samples):
            seen.append((self.hidden, self.block, len(samples), {len(ctx) for ctx, _ in samples}))
            return super().loss_batch(samples)

    class GPTSpy(nn.MiniGPT):
        def loss_batch(self, samples):
            seen.append(("gpt", len(samples)))
            return super().loss_batch(samples)

    real_step = SGD.fused_step

    def step_spy(self, model, batch, **kw):
        seen.append((len(batch), kw["chunk"], kw["threads"]))
        return real_step(self, model, batch, **kw)

    monkeypatch.setattr(nn, "MakemoreMLP", MLPSpy)
    monkeypatch.setattr(nn, "MiniGPT", GPTSpy)
    monkeypatch.setattr(SGD, "fused_step", step_spy)
    step_builders.w4_step(4, 8, 32)(0)
    assert seen[:2] == [(32, 32, 1), (4, 8, 32, {8})]
    seen.clear()
    step_builders.w5_step(12)(0)  # chunks of 8 sequences at most, as the two-thread rows replay them
    assert seen[:2] == [(12, 8, 1), ("gpt", 8)]


def test_step_paths_prints_a_positive_time_for_each_path():
    import contextlib
    import io

    from burtorch_bench import step_paths

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert step_paths.main(["--embed", "8", "--reps", "1"]) == 0
    row = out.getvalue().splitlines()[1].split()
    assert row[0] == "e=8" and len(row) == 4 and all(float(x) > 0 for x in row[1:])


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--embed", "x"], ["--embed", "0"], ["--embed", ","]])
def test_the_side_by_side_benches_refuse_bad_counts_before_running(argv, capsys):
    from burtorch_bench import step_paths, threads

    with pytest.raises(SystemExit) as e:
        step_paths.main(argv)
    assert e.value.code == 2 and "error: argument" in capsys.readouterr().err
    if argv[0] == "--reps":
        with pytest.raises(SystemExit) as e:
            threads.main(argv)
        assert e.value.code == 2


def test_record_runs_alternate_the_thread_counts_and_keep_each_records_time_per_step():
    """python -m burtorch_bench.threads --only records: runs of steps on 1 then 2 threads, each
    run's records timed by bt.record_times() and divided by the steps in it."""
    import burtorch as bt
    from burtorch_bench.threads import record_runs

    W = bt.leaves([[0.5, -0.5], [0.25, 1.0]], dtype=bt.float64)
    calls: list[int] = []

    def step(t):  # one linear record on 1 thread, none on 2
        calls.append(t)
        if t == 1:
            bt.linear([1.0, 2.0], W)

    runs = record_runs(step, reps=3, per_run=4)
    assert calls == [1] * 3 + [2] * 3 + ([1] * 4 + [2] * 4) * 3  # warm-up, then alternating runs
    assert set(runs[1]) == {"linear forward", "outside records", "wall"}
    assert set(runs[2]) == {"outside records", "wall"}
    assert all(len(v) == 3 for r in runs.values() for v in r.values())
    for one in zip(runs[1]["linear forward"], runs[1]["outside records"], runs[1]["wall"]):
        assert 0 < one[0] < one[2] and one[0] + one[1] == pytest.approx(one[2])


def test_record_runs_divide_each_runs_times_by_its_steps(monkeypatch):
    import contextlib

    import burtorch as bt
    from burtorch.record_timer import RecordTime, RecordTimes
    from burtorch_bench.threads import record_runs

    @contextlib.contextmanager
    def fixed():  # every run: 0.004 s in linear forward records, 0.01 s in all
        rt = RecordTimes()
        yield rt
        rt.rows, rt.wall = [RecordTime("linear", "forward", 4, 0.004)], 0.01

    monkeypatch.setattr(bt, "record_times", fixed)
    runs = record_runs(lambda t: None, reps=2, per_run=4)
    for t in (1, 2):
        assert runs[t]["linear forward"] == pytest.approx([1000.0, 1000.0])
        assert runs[t]["outside records"] == pytest.approx([1500.0, 1500.0])
        assert runs[t]["wall"] == pytest.approx([2500.0, 2500.0])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this process may use one core only")
def test_the_records_section_prints_each_record_of_the_w4_step_on_both_counts():
    import contextlib
    import io

    from burtorch_bench import threads

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        threads.records_section(1, embeds=(8,), per_run=1)
    rows = {" ".join(f[1:-3]): f[-3:] for f in (line.split() for line in out.getvalue().splitlines()[2:])}
    assert all(line.startswith("e=8 ") for line in out.getvalue().splitlines()[2:])
    want = {f"{op} {d}" for op in ("lookup_linear", "linear", "cross_entropy")  # tanh: in the lookup's
            for d in ("forward", "backward")}
    assert set(rows) == want | {"outside records", "wall"}
    for name in want | {"wall"}:
        one, two, ratio = (float(x.rstrip("x")) for x in rows[name])
        assert one > 0 and two > 0 and rows[name][2].endswith("x")
        h = 0.005  # each figure is printed to two decimals: the ratio of the unrounded ones
        assert (one - h) / (two + h) - h <= ratio <= (one + h) / (two - h) + h
