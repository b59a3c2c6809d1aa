"""`burtorch train`: runs end to end on small settings, learns, saves and resumes."""
import json
import os

import pytest

from burtorch.cli import main


def run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def val_losses(out):
    initial = float(out.split("initial validation loss: ")[1].split()[0])
    final = float(out.split("final validation loss ")[1].split()[0])
    return initial, final


def test_train_mlp_on_a_word_file_learns_and_resumes(tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("\n".join(["anna", "bob", "carla", "dave", "emma", "fred", "gina", "hank"] * 20))
    ckpt = tmp_path / "ckpt"
    out = run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "150",
              "--batch", "16", "--eval-every", "50", "--save", str(ckpt), "--sample", "3")
    initial, final = val_losses(out)
    assert final < initial - 0.5
    assert "sampled words:" in out
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == 150 and meta["kind"] == "mlp"
    out2 = run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "200",
               "--batch", "16", "--resume", str(ckpt), "--sample", "0")
    _, final2 = val_losses(out2)
    assert "trained 50 steps" in out2 and final2 < initial


def test_train_gpt_default_corpus_small(capsys):
    out = run(capsys, "train", "gpt", "--preset", "tiny", "--steps", "60", "--batch", "8",
              "--eval-every", "30", "--eval-samples", "50", "--sample", "20")
    initial, final = val_losses(out)
    assert final < initial
    assert "embedded corpus" in out and "sampled text:" in out


def test_train_plot_when_matplotlib_is_installed(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "loss.png"
    run(capsys, "train", "gpt", "--preset", "tiny", "--steps", "20", "--batch", "4", "--eval-every", "10",
        "--eval-samples", "20", "--sample", "0", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_bad_inputs(tmp_path, capsys):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="binary"):
        main(["train", "gpt", "--data", str(blob), "--steps", "1"])
    with pytest.raises(FileNotFoundError):
        main(["train", "mlp", "--resume", str(tmp_path / "nothing"), "--steps", "1"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        main(["train", "mlp", "--resume", str(bad), "--steps", "1"])
    with pytest.raises(SystemExit):
        main(["train", "gpt", "--hidden", "8", "--steps", "1"])
