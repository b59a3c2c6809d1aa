"""`burtorch train`: runs end to end on small settings, learns, checkpoints, survives Ctrl-C and
resumes to bitwise the same parameters; refuses bad numbers and checkpoints that do not fit."""
import json
import os
import signal
import subprocess
import sys

import pytest

from burtorch.cli import checkpoint
from burtorch.cli.main import main

WORDS = ["anna", "bob", "carla", "dave", "emma", "fred", "gina", "hank"] * 20


def run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def val_losses(out):
    initial = float(out.split("initial validation loss: ")[1].split()[0])
    final = float(out.split("final validation loss ")[1].split()[0])
    return initial, final


@pytest.fixture
def words(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("\n".join(WORDS))
    return path


def test_train_mlp_on_a_word_file_learns_and_resumes(tmp_path, words, capsys):
    ckpt = tmp_path / "run.ckpt"
    out = run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "150",
              "--batch", "16", "--eval-every", "50", "--save", str(ckpt), "--sample", "3")
    initial, final = val_losses(out)
    assert final < initial - 0.5
    assert "sampled words:" in out
    meta = checkpoint.load(ckpt).meta
    assert meta["step"] == 150 and meta["model"] == "mlp" and meta["run"]["batch"] == 16
    assert len(meta["history"]["train_loss"]) == 150
    out2 = run(capsys, "train", "mlp", "--steps", "200", "--resume", str(ckpt), "--sample", "0")
    _, final2 = val_losses(out2)
    assert "resuming" in out2 and "trained 50 steps" in out2 and final2 < initial


def test_train_gpt_default_corpus_small(capsys):
    out = run(capsys, "train", "gpt", "--preset", "tiny", "--steps", "60", "--batch", "8",
              "--eval-every", "30", "--eval-samples", "50", "--sample", "20")
    initial, final = val_losses(out)
    assert final < initial
    assert "embedded corpus" in out and "sampled text:" in out
    assert "time by record" not in out  # only with --record-times


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_train_in_16_bit_storage_learns_and_resumes_its_master_weights(dtype, tmp_path, words, capsys):
    ckpt = tmp_path / "run.ckpt"
    out = run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "100",
              "--batch", "16", "--eval-every", "50", "--save", str(ckpt), "--sample", "0", "--dtype", dtype)
    initial, final = val_losses(out)
    assert final < initial - 0.5 and f"({dtype})" in out and "eager" in out
    meta = checkpoint.load(ckpt).meta
    assert meta["run"]["dtype"] == dtype
    out2 = run(capsys, "train", "mlp", "--steps", "120", "--resume", str(ckpt), "--sample", "0")
    assert "resuming" in out2 and f"({dtype})" in out2 and val_losses(out2)[1] < initial


def test_record_times_prints_each_record_per_training_step(capsys):
    out = run(capsys, "train", "mlp", "--steps", "6", "--batch", "8", "--compile", "--chunk", "8", "--sample", "0",
              "--eval-every", "3", "--eval-samples", "20", "--record-times")
    table = out.split("time by record, per training step:\n")[1].split("\ntotal time")[0].splitlines()
    calls = {" ".join(f[:2]): f[2] for f in (line.split() for line in table[1:]) if len(f) == 5}
    # one backward a step (the validation losses are forward only)
    assert calls["lookup_linear backward"] == "1" and calls["cross_entropy backward"] == "1"
    assert float(calls["lookup_linear forward"]) > 1  # the steps' and the validation losses'
    assert table[-2].startswith("outside records") and table[-1].startswith("wall")
    assert float(table[-1].split()[1]) > 0

def test_train_plot_when_matplotlib_is_installed(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "loss.png"
    run(capsys, "train", "gpt", "--preset", "tiny", "--steps", "20", "--batch", "4", "--eval-every", "10",
        "--eval-samples", "20", "--sample", "0", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flag,value", [("--batch", "0"), ("--eval-every", "0"), ("--steps", "-5"),
                                        ("--steps", "0"), ("--lr", "0"), ("--lr", "nan"), ("--lr", "-1"),
                                        ("--save-every", "0"), ("--chunk", "0"), ("--sample", "-1"),
                                        ("--eval-samples", "0"), ("--hidden", "0"), ("--batch", "x"),
                                        ("--threads", "0"), ("--threads", "-1")])
def test_every_number_is_validated_by_argparse(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "mlp", flag, value])
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def expect_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "burtorch train: error:" in err and message in err, err


def test_bad_data_and_missing_checkpoints_are_clear_errors(tmp_path, capsys):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00" * 100)
    expect_error(capsys, ["train", "gpt", "--data", str(blob), "--steps", "1"], "binary")
    expect_error(capsys, ["train", "mlp", "--resume", str(tmp_path / "nothing")], "No such file")
    expect_error(capsys, ["train", "mlp", "--resume", str(tmp_path)], "directory")
    expect_error(capsys, ["train", "gpt", "--hidden", "8", "--steps", "1"], "mlp only")
    expect_error(capsys, ["train", "gpt", "--threads", "4096", "--steps", "1"], "may use")


@pytest.mark.skipif(__import__("burtorch")._core._allowed_cores() < 2, reason="one core only")
@pytest.mark.parametrize("extra", [["--compile"], ["--chunk", "4"], ["--compile", "--chunk", "4"]])
def test_train_on_two_threads_learns(extra, capsys):
    out = run(capsys, "train", "gpt", "--preset", "tiny", "--steps", "30", "--batch", "8", "--eval-every", "30",
              "--eval-samples", "16", "--sample", "0", "--threads", "2", *extra)
    first, last = val_losses(out)[0], val_losses(out)[-1]
    assert last < first


@pytest.fixture
def good_checkpoint(tmp_path, words, capsys):
    ckpt = tmp_path / "good.ckpt"
    run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "20", "--batch", "4",
        "--eval-every", "10", "--sample", "0", "--save", str(ckpt))
    return ckpt


def rewrite(ckpt, path, edit):
    """A checkpoint with edited metadata and a VALID checksum: only the meaning is wrong."""
    c = checkpoint.load(ckpt)
    edit(c.meta)
    path.write_bytes(checkpoint.encode(c.meta, c.model_state, c.optimizer_buffers))
    return path


def test_resume_refuses_damaged_or_edited_files(tmp_path, good_checkpoint, capsys):
    raw = good_checkpoint.read_bytes()
    flipped = tmp_path / "flipped.ckpt"
    flipped.write_bytes(raw[:200] + bytes([raw[200] ^ 1]) + raw[201:])
    expect_error(capsys, ["train", "mlp", "--resume", str(flipped)], "checksum")
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(raw[:-10])
    expect_error(capsys, ["train", "mlp", "--resume", str(cut)], "truncated")
    edited = tmp_path / "edited.ckpt"
    edited.write_bytes(raw.replace(b'"batch":4', b'"batch":5'))
    expect_error(capsys, ["train", "mlp", "--resume", str(edited)], "checksum")
    state_dict = tmp_path / "model.bt"
    state_dict.write_bytes(checkpoint.load(good_checkpoint).model_state)
    expect_error(capsys, ["train", "mlp", "--resume", str(state_dict)], "not a burtorch checkpoint")


@pytest.mark.parametrize("edit,message", [
    (lambda m: m.update(step=-3), "outside"),
    (lambda m: m.update(step=10**6), "outside"),
    (lambda m: m.update(step="7"), "not a int"),
    (lambda m: m.update(optimizer_steps=5), "optimizer took"),
    (lambda m: m["history"]["train_loss"].pop(), "history"),
    (lambda m: m.update(rng=[3, [1, 2], None]), "random state"),
    (lambda m: m.update(rng=[]), "random state"),  # found by the fuzzer: an IndexError escaped
    (lambda m: m.update(rng=[3, [2**70] * 625, None]), "random state"),
    (lambda m: m["run"].pop("seed"), "this version"),
    (lambda m: m.update(itos=["a", "a"]), "distinct"),
    (lambda m: m.update(format="other"), "format"),
    (lambda m: m["run"].update(batch=0), "run settings"),
    (lambda m: m["run"].update(preset="huge"), "run settings"),
    (lambda m: m["run"].update(lr=-1.0), "run settings"),
    (lambda m: m["data"].update(path=7), "data record"),
])
def test_resume_refuses_checkpoints_that_make_no_sense(tmp_path, good_checkpoint, edit, message, capsys):
    bad = rewrite(good_checkpoint, tmp_path / "bad.ckpt", edit)
    expect_error(capsys, ["train", "mlp", "--resume", str(bad)], message)


def test_resume_refuses_another_model_config_vocabulary_or_step(tmp_path, good_checkpoint, words, capsys):
    ckpt = str(good_checkpoint)
    expect_error(capsys, ["train", "gpt", "--resume", ckpt], "is a mlp checkpoint")
    expect_error(capsys, ["train", "mlp", "--resume", ckpt, "--hidden", "32"], "keeps its settings")
    expect_error(capsys, ["train", "mlp", "--resume", ckpt, "--lr", "0.5"], "--lr 0.5")
    other = tmp_path / "other.txt"
    other.write_text("\n".join(["zoe", "yann", "xavi", "wim"] * 20))
    expect_error(capsys, ["train", "mlp", "--resume", ckpt, "--data", str(other)], "vocabulary")
    words.write_text("\n".join(WORDS[::-1]))  # same letters, other data
    expect_error(capsys, ["train", "mlp", "--resume", ckpt], "data differ")
    words.write_text("\n".join(WORDS))
    expect_error(capsys, ["train", "mlp", "--resume", ckpt, "--steps", "10"], "beyond --steps 10")
    bigger = rewrite(good_checkpoint, tmp_path / "cfg.ckpt", lambda m: m["config"].update(hidden=99))
    expect_error(capsys, ["train", "mlp", "--resume", str(bigger)], "model configuration")
    assert main(["train", "mlp", "--resume", ckpt, "--sample", "0"]) == 0  # the good one resumes
    assert "nothing to do" in capsys.readouterr().out


# The signal lands at step 100 of 1,500: 1,400 steps (about 0.2 s here) before the run would end.
STEPS = 1500
# A plan by hand, so that the uninterrupted run and the cut one step alike (an "auto" plan rests on
# timings); the resumed run is given none and must take the checkpoint's.
PLAN = ("--plan", "compiled chunk=batch fused threads=1")


def _train_cmd(words, save, *extra):
    return [sys.executable, "-m", "burtorch", "train", "mlp", "--data", str(words), "--preset", "tiny",
            "--steps", str(STEPS), "--batch", "8", "--eval-every", "500", "--sample", "0", "--save", str(save),
            *extra]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(words file, checkpoint) of one uninterrupted run, which every signal's run is held against."""
    where = tmp_path_factory.mktemp("uninterrupted")
    words, whole = where / "words.txt", where / "whole.ckpt"
    words.write_text("\n".join(WORDS))
    done = subprocess.run(_train_cmd(words, whole, *PLAN), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return words, whole


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_training_checkpoints_and_resuming_matches_an_uninterrupted_run(tmp_path, uninterrupted, signum):
    words, whole = uninterrupted
    cut = tmp_path / "cut.ckpt"
    proc = subprocess.Popen(_train_cmd(words, cut, *PLAN), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # progress lines go to stderr every 100 steps
        if f"step 100/{STEPS}" in line:
            proc.send_signal(signum)
            break
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 128 + signum, err
    assert f"checkpoint written to {cut}" in err and "--resume" in err
    stopped = checkpoint.load(cut).meta["step"]
    assert 100 <= stopped < STEPS

    resumed = subprocess.run(_train_cmd(words, cut, "--resume", str(cut)), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"plan: {PLAN[1]} (the checkpoint's)" in resumed.stdout
    a, b = checkpoint.load(whole), checkpoint.load(cut)
    assert a.model_state == b.model_state  # bitwise the same parameters
    assert a.optimizer_buffers == b.optimizer_buffers
    assert a.meta["history"] == b.meta["history"] and a.meta["rng"] == b.meta["rng"]


def test_periodic_checkpoints(tmp_path, words, capsys):
    ckpt = tmp_path / "every.ckpt"
    seen = []
    real_save = checkpoint.save

    def spy(path, meta, *rest):
        seen.append(meta["step"])
        real_save(path, meta, *rest)

    checkpoint.save = spy
    try:
        run(capsys, "train", "mlp", "--data", str(words), "--preset", "tiny", "--steps", "25", "--batch", "2",
            "--save-every", "10", "--save", str(ckpt), "--sample", "0")
    finally:
        checkpoint.save = real_save
    assert seen == [10, 20, 25]
    assert json.dumps(checkpoint.load(ckpt).meta["step"]) == "25"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".burtorch-tmp")]


def test_the_plan_is_chosen_printed_in_one_line_and_bounded_by_memory(capsys):
    common = ("train", "gpt", "--preset", "tiny", "--steps", "4", "--batch", "8", "--eval-every", "4",
              "--eval-samples", "8", "--sample", "0")
    out = run(capsys, *common)
    lines = [line for line in out.splitlines() if line.startswith("plan: ")]
    assert len(lines) == 1 and "candidates timed in" in lines[0]
    out = run(capsys, *common, "--memory", "sample")
    line = next(line for line in out.splitlines() if line.startswith("plan: "))
    assert "chunk=" not in line  # one sample per graph
    assert "plan: eager threads=1 (given)" in run(capsys, *common, "--plan", "eager")
    assert "(--chunk/--compile by hand)" in run(capsys, *common, "--compile", "--chunk", "4")


@pytest.mark.parametrize("argv,message", [
    (["--plan", "warp"], "starts with"), (["--plan", "compiled chunk=0"], "unknown word"),
    (["--memory", "lots"], "byte count"), (["--memory", "0"], "positive"),
])
def test_bad_plans_and_memory_settings_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "gpt", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_plan_and_a_hand_picked_chunk_conflict(capsys):
    assert main(["train", "gpt", "--plan", "eager", "--chunk", "4", "--steps", "1"]) == 2
    assert "give one" in capsys.readouterr().err
    # AdamW (the GPT's default) has no fused update
    assert main(["train", "gpt", "--plan", "eager chunk=batch fused", "--steps", "1"]) == 2
    assert "SGD has" in capsys.readouterr().err
