"""The performance page (docs/performance.md) is generated from the committed results
(benchmarks/results/latest.json) and nothing else: regenerating it reproduces it byte for byte."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from burtorch_bench import cli, report

REPO = Path(__file__).resolve().parents[2]
LATEST = REPO / "benchmarks" / "results" / "latest.json"
PAGE = REPO / "docs" / "performance.md"


@pytest.fixture
def checkout():
    if not (LATEST.is_file() and PAGE.is_file()):
        pytest.skip("not run from a checkout of the repository")
    return REPO


def test_the_committed_page_is_the_committed_results_rendered(checkout, tmp_path, monkeypatch, capsys):
    """The page names the two paths in its commands, so it is rendered where they mean the same:
    a copy of the results at benchmarks/results/latest.json, the page at docs/performance.md."""
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    shutil.copyfile(LATEST, tmp_path / "benchmarks" / "results" / "latest.json")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "benchmarks/results/latest.json", "--markdown", "docs/performance.md"]) == 0
    assert "wrote docs/performance.md" in capsys.readouterr().out
    assert (tmp_path / "docs" / "performance.md").read_bytes() == PAGE.read_bytes()
    assert not list(tmp_path.rglob("*.png"))  # plots only when asked


def test_the_committed_results_are_small_and_reduced(checkout):
    assert LATEST.stat().st_size < 300_000
    doc = json.loads(LATEST.read_text(encoding="utf-8"))
    assert doc["schema"] == report.SCHEMA and doc["meta"]["times"]
    timed = [r for r in doc["runs"] if r.get("times")]
    assert timed and all(len(t) == 3 and t[0] <= t[1] <= t[2] for r in timed for t in r["times"].values())
    assert all(r["reps_timed"][ph] >= 3 for r in timed for ph in r["times"])


def test_the_page_says_how_it_was_made_and_on_what(checkout):
    text = PAGE.read_text(encoding="utf-8")
    meta = json.loads(LATEST.read_text(encoding="utf-8"))["meta"]
    assert text.startswith("# Performance\n")
    assert "burtorch-bench report benchmarks/results/latest.json --markdown docs/performance.md" in text
    assert report.current_command(meta["command"]) in text and meta["machine"]["compiler"] in text
    assert "## Results" in text and "## Machine" in text and ".png" not in text


def _expanded(doc: dict, seed: int) -> dict:
    """The reduced run with each row's three times grown back to five repetitions (two more between
    its min and max, one either side of the median, so min, median and max stay)."""
    r = random.Random(seed)
    runs = []
    for run in doc["runs"]:
        run = {k: v for k, v in run.items() if k != "reps_timed"}
        if run.get("times"):
            run["times"] = {ph: [t[2], r.uniform(t[0], t[1]), t[0], t[1], r.uniform(t[1], t[2])]
                            for ph, t in run["times"].items()}
        runs.append(run)
    meta = {k: v for k, v in doc["meta"].items() if k != "times"}
    return {**doc, "meta": meta, "runs": runs}


def test_reducing_a_run_keeps_every_figure_the_page_renders(checkout, tmp_path):
    reduced_doc = json.loads(LATEST.read_text(encoding="utf-8"))
    full = _expanded(reduced_doc, 7)
    (tmp_path / "full.json").write_text(json.dumps(full))
    again = report.reduced(report.load(tmp_path / "full.json"))
    assert [r.get("times") for r in again["runs"]] == [r.get("times") for r in reduced_doc["runs"]]
    assert {ph: 5 for ph in full["runs"][0]["times"]} == again["runs"][0]["reps_timed"]
    (tmp_path / "small.json").write_text(report.dumps_runs(again))
    assert json.loads((tmp_path / "small.json").read_text()) == again  # the one-run-a-line file is the run
    pages = [report.render_page(report.load(tmp_path / name), "R.json", "P.md") for name in ("full.json", "small.json")]
    assert pages[0] == pages[1]
    assert report.reduced(again)["runs"][0]["reps_timed"] == again["runs"][0]["reps_timed"]  # reducing twice


def test_summary_json_and_plots_from_the_command(checkout, tmp_path, capsys):
    full = tmp_path / "run" / "results.json"
    full.parent.mkdir()
    full.write_text(json.dumps(_expanded(json.loads(LATEST.read_text(encoding="utf-8")), 3)))
    out = tmp_path / "latest.json"
    assert cli.main(["report", str(full), "--summary-json", str(out)]) == 0
    assert json.loads(out.read_text())["meta"]["times"] and out.stat().st_size < full.stat().st_size
    pytest.importorskip("matplotlib")
    assert cli.main(["report", str(full), "--plots"]) == 0
    pngs = {p.name for p in full.parent.glob("*.png")}
    assert pngs == {f"{w}.png" for w in ("tiny", "small", "saveload", "mlp", "gpt")}


def test_runs_recorded_under_the_former_command_are_shown_under_todays():
    assert report.current_command("burtorch bench all --threads 1,2") == "burtorch-bench all --threads 1,2"
    assert report.current_command("python -m burtorch.bench mlp") == "burtorch-bench mlp"
    assert report.current_command("burtorch-bench gpt --quick") == "burtorch-bench gpt --quick"


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", '{"schema": 99, "runs": []}'])
def test_report_refuses_what_is_not_a_results_file(tmp_path, content, capsys):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as e:
        cli.main(["report", str(path), "--markdown", str(tmp_path / "p.md")])
    assert str(e.value).startswith("burtorch-bench report: ") and not (tmp_path / "p.md").exists()
