"""burtorch_bench: every workload in a tiny configuration, for burtorch and each installed peer.

These check the numbers each framework computes (and that the suite's plumbing reports them),
never speed. Peers that are not installed are skipped with pytest.importorskip.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from burtorch_bench import agreement, child, compare, harness, report
from burtorch_bench import frameworks as fw
from burtorch_bench.specs import (
    W1_GOLDEN,
    W2_GOLDEN,
    W3_NAMES,
    gpt_param_count,
    mlp_param_count,
    w1_reference,
    w2_values,
)


def _require(entry):
    for pkg in entry.requires:
        pytest.importorskip(pkg)


def _runner(name, workload, **config):
    entry = fw.BY_NAME[name]
    _require(entry)
    return fw.load(entry).make_runner(workload, entry.variant, config)


# Marked `peers` when they run another framework (deselected by the sanitized run: uninstrumented
# libraries spend most of that run's time under its preloaded runtimes, checking no code of ours).
GRAPH_CASES = [pytest.param(e.name, w, marks=() if e.name.startswith("burtorch") else pytest.mark.peers)
               for e in fw.ENTRIES for w in ("tiny", "small") if w in e.workloads]


@pytest.mark.parametrize("name,workload", GRAPH_CASES)
def test_graph_workloads_compute_the_golden_numbers(name, workload):
    r = _runner(name, workload, n=3, reps=1, warmup=0)
    r.run("run", 3)
    nums = r.numbers()
    if workload == "tiny":
        assert nums == pytest.approx(W1_GOLDEN, rel=1e-12)
    else:
        for k, v in W2_GOLDEN.items():
            assert abs(nums[k] - v) < 5e-5, (k, nums[k])


def test_plain_float_references_match_the_paper():
    assert w1_reference() == W1_GOLDEN
    g = w2_values()["g"]
    assert abs(g - W2_GOLDEN["g"]) < 5e-5


@pytest.mark.parametrize("name", ["burtorch", "torch-eager", "numpy"])
def test_saveload_round_trips_the_seven_values(name):
    r = _runner(name, "saveload", n=2, reps=1, warmup=0)
    try:
        r.run("save", 2)
        r.run("load", 2)
        nums = r.numbers()
    finally:
        r.close()
    expected = w2_values()
    for k in W3_NAMES:
        assert nums[k] == pytest.approx(expected[k], rel=1e-12)
    assert nums["file bytes"] >= 7 * 8


TRAIN_PEERS = ["burtorch", "torch-eager", "jax-jit", "mlx-eager", "mlx-compile"]


def _train_peers_agree(workload, config):
    """Runs every installed training peer two steps from the same weights; returns their rows."""
    results = {}
    for name in TRAIN_PEERS:
        entry = fw.BY_NAME[name]
        if fw.missing_requirement(entry):
            continue
        r = fw.load(entry).make_runner(workload, entry.variant,
                                       {**config, "n": 1, "reps": 1, "warmup": 0})
        r.run("step", 1)
        r.after_first_step()
        r.run("step", 1)
        results[name] = (r.numbers(), r.info)
    if not results:
        pytest.skip("no training peer installed")
    rows = [{"name": n, "entry": n, "workload": workload, "status": "ok", "numbers": v}
            for n, (v, _) in results.items()]
    agreement.check(workload, rows)
    for row in rows:
        nums = row["numbers"]
        assert abs(nums["loss before"] - nums["ln V"]) < 0.7
        assert nums["loss after"] < nums["loss before"]
        assert row["agrees"], row["agreement"]
    return [info for _, info in results.values()]


@pytest.mark.peers
@pytest.mark.parametrize("workload,config", [("mlp", {"e": 4, "b": 2}), ("gpt", {"b": 2})])
def test_training_peers_agree_from_the_same_weights(workload, config):
    """On whatever data is found (the embedded corpus in a lone clone): counts follow the vocab."""
    for info in _train_peers_agree(workload, config):
        vocab = info["vocab"]
        expected = mlp_param_count(vocab, config["e"]) if workload == "mlp" else gpt_param_count(vocab)
        assert info["parameters"] == expected


@pytest.mark.peers
@pytest.mark.parametrize("workload,config", [("mlp", {"e": 4, "b": 2}), ("gpt", {"b": 2})])
def test_training_peers_on_the_papers_data_have_the_papers_sizes(workload, config, shared_data):
    for info in _train_peers_agree(workload, {**config, "data": str(shared_data)}):
        assert info["parameters"] == (5963 if workload == "mlp" else 46289)
        assert info["vocab"] == (27 if workload == "mlp" else 65)


@pytest.mark.parametrize("workload,config", [("mlp", {"e": 4, "b": 8}), ("gpt", {"b": 8})])
def test_the_planned_row_takes_the_burtorch_rows_steps(workload, config):
    """burtorch-planned (SGD.train_step, its plan timed on the first call) against the paper's
    per-sample row: the same losses before and after two steps, to rounding."""
    numbers = {}
    for name in ("burtorch", "burtorch-planned"):
        r = _runner(name, workload, **config, n=1, reps=1, warmup=0)
        r.run("step", 1)
        r.after_first_step()
        r.run("step", 1)
        numbers[name] = r.numbers()
    assert "train_step" in fw.load(fw.BY_NAME["burtorch-planned"]).PlannedRunner.timed_region
    ref, got = numbers["burtorch"], numbers["burtorch-planned"]
    assert set(ref) == set(got)
    for k in ("loss before", "loss after"):
        assert got[k] == pytest.approx(ref[k], rel=1e-5), k


def test_agreement_flags_a_wrong_answer():
    good = {"g": 612.5, "dg/da": -35.0, "dg/db": 1050.0}
    rows = [{"name": "burtorch", "entry": "burtorch", "status": "ok", "numbers": good},
            {"name": "fast-but-wrong", "entry": "x", "status": "ok",
             "numbers": {**good, "dg/db": 1050.001}}]
    agreement.check("tiny", rows)
    assert rows[0]["agrees"] is True
    assert rows[1]["agrees"] is False and "dg/db" in rows[1]["agreement"]
    loss_rows = [{"name": "a", "entry": "a", "status": "ok",
                  "numbers": {"loss before": 3.3, "loss after": 3.4, "ln V": math.log(27)}}]
    agreement.check("mlp", loss_rows)
    assert loss_rows[0]["agrees"] is False and "did not decrease" in loss_rows[0]["agreement"]


def test_fit_budget_keeps_paper_count_or_reduces_visibly():
    assert child.fit_budget(100_000, 1e-6, 2.0) == 100_000
    assert child.fit_budget(100_000, 1e-4, 2.0) == 20_000
    assert child.fit_budget(100_000, 1e-3, 2.0) == 2_000
    assert child.fit_budget(100_000, 1.0, 2.0) == 100  # never below the floor


def test_plan_prints_install_line_for_a_missing_peer(monkeypatch):
    ghost = fw.Entry("ghost", "impl_ghost", "eager", ("no_such_package_xyz",),
                     "pip install ghost", ("tiny",))
    jobs, missing = harness.plan(["tiny"], [fw.BY_NAME["burtorch"], ghost], "quick")
    assert [j.name for j in jobs] == ["burtorch"]
    assert missing == [{"entry": "ghost", "package": "no_such_package_xyz",
                        "install": "pip install ghost"}]
    lines = report.status_lines([], missing)
    assert lines == ["ghost: not installed (no_such_package_xyz); to include it: pip install ghost"]


def test_plan_grids_and_compile_subset():
    torch_entry, compile_entry = fw.BY_NAME["torch-eager"], fw.BY_NAME["torch-compile"]
    full = harness.configs_for("mlp", torch_entry, "full", {})
    assert len(full) == 14 and {c["e"] for c in full} == {4, 16, 32, 64, 128, 512, 1024}
    sub = harness.configs_for("mlp", compile_entry, "full", {})
    assert [(c["e"], c["b"]) for c in sub] == [(64, 1), (64, 64), (1024, 64)]
    named = harness.configs_for("mlp", compile_entry, "full", {"embed": [4], "batch": [1]})
    assert [(c["e"], c["b"]) for c in named] == [(4, 1)]
    w1 = harness.configs_for("tiny", torch_entry, "paper", {})
    assert w1[0]["n"] == 100_000 and w1[0]["budget_s"] is None


def test_end_to_end_subprocess_run_report_and_compare(tmp_path):
    entries = [fw.BY_NAME["burtorch"]]
    if not fw.missing_requirement(fw.BY_NAME["micrograd"]):
        entries.append(fw.BY_NAME["micrograd"])
    overrides = {"iters": 50, "reps": 2, "warmup": 5}
    jobs, _ = harness.plan(["tiny", "small"], entries, "quick", overrides)
    runs = harness.run_all(jobs, cpu=harness.default_cpu(), timeout=120)
    assert all(r["status"] == "ok" for r in runs), [r.get("message") for r in runs]
    for r in runs:
        assert r["init_s"] > 0 and r["process_s"] >= r["init_s"]
        assert r["peak_rss"] > 1 << 20
        assert r["n"] == {"run": 50} and len(r["times"]["run"]) == 2
    doc = {"schema": report.SCHEMA, "missing": [], "runs": runs,
           "meta": {"command": "test", "preset": "quick", "started": "now", "elapsed_s": 1.0,
                    "cpu": None, "machine": {}, "workloads": ["tiny", "small"]}}
    report.annotate(runs)
    assert all(r["agrees"] for r in runs)
    text = report.render_terminal(doc)
    assert "612.5, -35, 1050" in text and "W2 small graph" in text
    paths = report.write_outputs(doc, tmp_path)
    raw = json.loads(paths["json"].read_text())
    assert len(raw["runs"]) == len(runs) and "summary" not in raw["runs"][0]
    assert "| burtorch |" in paths["markdown"].read_text()
    paper_like = report.ours_like_paper(doc)
    assert paper_like[0][0] == "W1, 100K iterations" and paper_like[0][1].endswith(" s")
    old, new = report.load(paths["json"]), report.load(paths["json"])
    rows = compare.compare(old, new)
    assert rows and all(abs(r[6] - 1.0) < 1e-12 for r in rows)


def test_rows_pool_their_processes():
    ok = {"status": "ok", "workload": "mlp", "config": {"e": 4, "b": 1}, "n": {"step": 1}}
    runs = [{**ok, "times": {"step": [1.0, 2.0, 3.0]}, "peak_rss": 10, "init_s": 0.5},
            {**ok, "times": {"step": [7.0, 8.0, 9.0]}, "peak_rss": 30, "init_s": 0.9},
            {**ok, "times": {"step": [4.0, 5.0, 6.0]}, "peak_rss": 20, "init_s": 0.7}]
    row = harness.merge_processes(runs)
    assert sorted(row["times"]["step"]) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert row["process_medians"]["step"] == [2.0, 8.0, 5.0]
    assert row["peak_rss"] == 30 and row["init_s"] == 0.7 and row["processes"] == 3
    assert runs[0]["times"]["step"] == [1.0, 2.0, 3.0]  # the per-process runs are left as they were
    assert report.scaled(row, "step") == (5000.0, 1000.0, 9000.0)  # ms per step, over all nine samples
    failed = {"status": "error", "message": "child exited 1"}
    assert harness.merge_processes([runs[0], failed, runs[1]])["status"] == "error"
    assert harness.merge_processes([runs[0]]) is runs[0]
    with pytest.raises(ValueError):
        harness.run_all([], processes=0)
    assert "3 fresh processes" in report.processes_line({"processes": 3})
    assert report.processes_line({"processes": 1}) == "" and report.processes_line(None) == ""


def test_each_round_of_processes_runs_every_row():
    overrides = {"iters": 20, "reps": 2, "warmup": 2}
    jobs, _ = harness.plan(["tiny"], [fw.BY_NAME["burtorch"]], "quick", overrides)
    seen = []
    runs = harness.run_all(jobs, cpu=harness.default_cpu(), timeout=120, processes=2, progress=seen.append)
    assert len(runs) == len(jobs) == 1 and runs[0]["status"] == "ok", runs[0].get("message")
    assert runs[0]["processes"] == 2 and len(runs[0]["times"]["run"]) == 4
    assert len(runs[0]["process_medians"]["run"]) == 2
    assert [s.endswith(f"(process {p}/2)") for p, s in zip((1, 2), seen)] == [True, True]


def test_cli_rejects_bad_input():
    from burtorch_bench import cli
    with pytest.raises(SystemExit):
        cli.main(["nonsense"])
    with pytest.raises(SystemExit):
        cli.main(["tiny", "--iters", "0"])
    with pytest.raises(SystemExit):
        cli.main(["tiny", "--frameworks", "tensorflowx"])
    with pytest.raises(SystemExit):
        cli.main(["compare", "only-one.json"])
    with pytest.raises(SystemExit):
        cli.main(["mlp", "--data", "/no/such/dir"])
    with pytest.raises(SystemExit):
        cli.main(["mlp", "--batch", "0"])
    with pytest.raises(argparse_error()):
        cli._against("no-equals-sign")


def argparse_error():
    import argparse
    return argparse.ArgumentTypeError


def test_summary_is_spliced_between_markers(tmp_path):
    from burtorch_bench import summary

    results = Path(__file__).resolve().parents[1] / "results" / "latest.json"
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{summary.START}\nold text\n{summary.END}\nafter\n")
    assert summary.main([str(results), str(readme)]) == 0
    text = readme.read_text()
    assert "old text" not in text and text.startswith("# title\n\nbefore\n") and text.endswith("after\n")
    assert "| config | burtorch |" in text and "W1 tiny graph" in text
    bad = tmp_path / "bad.md"
    bad.write_text("no markers")
    with pytest.raises(SystemExit):
        summary.main([str(results), str(bad)])


def test_best_table_states_the_ratios_of_the_speed_targets():
    from burtorch_bench.best import table

    def run(entry, threads, seconds, workload="mlp", **cfg):
        return {"workload": workload, "entry": entry, "status": "ok",
                "times": {"step": [seconds, seconds * 3, seconds]}, "config": {"b": 64, "threads": threads, **cfg}}

    doc = {"runs": [run("burtorch-chunk", 1, 0.004, e=64), run("burtorch-chunk", 2, 0.002, e=64),
                    run("burtorch", 1, 0.006, e=64), run("jax-jit", 1, 0.005, e=64), run("torch-eager", 1, 0.008, e=64),
                    run("gemm-floor", 1, 0.003, e=64), run("gemm-floor", 2, 0.0024, e=64),
                    run("burtorch", 1, 0.01, workload="gpt"), run("burtorch", 1, 0.005, e=128),
                    run("gemm-floor", 1, 0.004, e=128),
                    {"workload": "mlp", "entry": "mlx-eager", "status": "failed", "config": {"b": 64, "e": 64}}]}
    lines = table(doc)
    assert lines[2] == ("| W4 | e=64 b=64 | burtorch-chunk 4 | burtorch-chunk 2 | 2.00x | jax-jit 5 | 0.40 | 8 | 0.25 "
                        "| 3 | 75 % | 2.4 | 1.25x |")
    assert lines[3] == "| W4 | e=128 b=64 | burtorch 5 | - | - | - | - | - | - | 4 | 80 % | - | - |"
    assert lines[4] == "| W5 | b=64 | burtorch 10 | - | - | - | - | - | - | - | - | - | - |"
    assert len(lines) == 5
