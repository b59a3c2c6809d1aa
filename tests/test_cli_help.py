"""Every command's --help is user documentation: it exits 0 and describes the command."""
import pytest

from burtorch.cli.main import main


@pytest.mark.parametrize("argv,expect", [
    ([], "train"), (["train"], "Checkpoints are single checksummed files"),
    (["demo"], "Figure 1"), (["info"], "compiler"),
])
def test_command_help(argv, expect, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert expect in out and "argparse wiring" not in out and "register(" not in out


def test_the_benchmarks_are_not_a_burtorch_command(capsys):
    """The benchmark suite is its own distribution (in benchmarks/); the library's command has no bench."""
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 2 and "invalid choice: 'bench'" in capsys.readouterr().err
