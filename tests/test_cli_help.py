"""Every command's --help is user documentation: it exits 0 and describes the command."""
import importlib

import pytest

from burtorch.cli.main import main


@pytest.mark.parametrize("argv,expect", [
    ([], "train"), (["train"], "Checkpoints are single checksummed files"),
    (["bench"], "W1: the paper's Figure 1 graph"), (["demo"], "Figure 1"), (["info"], "compiler"),
])
def test_command_help(argv, expect, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert expect in out and "argparse wiring" not in out and "register(" not in out


@pytest.mark.parametrize("script", ["op_cost", "init_time", "label_memory", "train_memory", "saveload", "per_sample",
                                    "partial_grad", "compiled_vs_eager"])
def test_benchmark_scripts_have_help(script, capsys):
    module = importlib.import_module(f"burtorch.bench.{script}")
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    assert f"python -m burtorch.bench.{script}" in capsys.readouterr().out
