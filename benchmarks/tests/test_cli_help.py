"""Every benchmark command's --help is user documentation: it exits 0 and names the command."""
import importlib
import subprocess
import sys

import pytest

from burtorch_bench.cli import main


def test_the_suite_command_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: burtorch-bench") and "W1: the paper's Figure 1 graph" in out


def test_python_m_burtorch_bench_is_the_same_command():
    done = subprocess.run([sys.executable, "-m", "burtorch_bench", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m burtorch_bench") and "burtorch-bench report" in done.stdout


@pytest.mark.parametrize("script", ["op_cost", "init_time", "label_memory", "train_memory", "saveload", "per_sample",
                                    "partial_grad", "compiled_vs_eager", "planned_train"])
def test_benchmark_scripts_have_help(script, capsys):
    module = importlib.import_module(f"burtorch_bench.{script}")
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    assert f"python -m burtorch_bench.{script}" in capsys.readouterr().out


@pytest.mark.parametrize("typed, what", [("w1", "tiny"), ("W4", "mlp"), ("w5", "gpt"), ("mlp", "mlp"), ("all", "all")])
def test_workloads_by_either_name(typed, what, monkeypatch):
    from burtorch_bench import cli

    seen = []
    monkeypatch.setattr(cli, "run_suite", lambda args: seen.append((args.what, args.argv, args.prog)) or 0)
    assert main([typed, "--reps", "1"]) == 0
    assert seen == [(what, [typed, "--reps", "1"], "burtorch-bench")]


@pytest.mark.parametrize("argv", [["w6"], ["bench"], ["tiny", "--reps", "0"]])
def test_unknown_workloads_and_bad_counts_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err
