"""`burtorch train mlp|gpt`: train one of the paper's two models, with checkpoints that survive Ctrl-C."""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from dataclasses import asdict
from typing import Any

from .arguments import memory_setting, non_negative_int, output_problem, plan_setting, positive_float, positive_int
from .digest import sha256
from .trainer import History, sample_text, train, uniform_loss

PRESETS = {
    # name: (mlp kwargs, gpt kwargs)
    # The paper's W5 has the two norms of each block and no final one (46,289 parameters on 65
    # characters); "karpathy" is the same with gpt.py's final LayerNorm.
    "paper": (dict(block=16, emb=64, hidden=64), dict(block=8, dim=24, layers=6, heads=6, final_norm=False)),
    "karpathy": (dict(block=16, emb=64, hidden=64), dict(block=8, dim=24, layers=6, heads=6, final_norm=True)),
    "tiny": (dict(block=4, emb=8, hidden=16), dict(block=8, dim=12, layers=2, heads=2)),
}

# What defines a run: a resumed run keeps all of these (only how long it runs and what it writes
# may change), so that it ends exactly where the uninterrupted run would have.
DTYPES = ("float32", "float64", "bfloat16", "float16")
RUN_KEYS = ("preset", "hidden", "dtype", "optimizer", "lr", "batch", "chunk", "seed", "eval_every",
            "eval_samples")

DESCRIPTION = """\
Trains the paper's character-level MLP (W4, makemore) or miniature GPT (W5). Each step runs by a
plan chosen at the start (printed in one line) by timing the ways a step can run for about a
second: eager or recorded, samples per graph, the SGD update fused into the sweep, threads.
--memory bounds what it may choose ("sample": the paper's per-sample oracle, memory of one
sample whatever the batch); --plan eager forces the paper's path. Prints progress, validation
losses and sampled text.

Checkpoints are single checksummed files holding the model, the optimizer, the step, the random
state, the run's settings, the vocabulary and the loss history. One is written at the end with
--save, every N steps with --save-every, and on Ctrl-C or SIGTERM (the run then stops after the
current step and exits with 128 + the signal number). --resume continues a run exactly: the same
seed and settings reach bitwise the same parameters as an uninterrupted run (the plan is kept in
the checkpoint and reused)."""

EPILOG = """\
examples:
  burtorch train gpt                                   the paper's GPT on the embedded corpus
  burtorch train gpt --memory sample                   memory of one sample, whatever the batch
  burtorch train gpt --plan eager                      the paper's per-sample eager oracle
  burtorch train gpt --plan "compiled chunk=32"        a path picked by hand
  burtorch train mlp --data names.txt --steps 30000    the MLP on a word list
  burtorch train gpt --data tinyshakespeare            the paper's data set, fetched by name
  burtorch train gpt --save run.ckpt --save-every 500  checkpoint every 500 steps
  burtorch train gpt --resume run.ckpt                 continue after an interruption"""


def register(sub) -> None:
    """Adds the ``train`` command to the subparsers of ``burtorch``."""
    p = sub.add_parser("train", help="train the char-level MLP (W4) or the mini GPT (W5)",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=["mlp", "gpt"], help="mlp: next character of a word; gpt: of a text")
    p.add_argument("--data", metavar="FILE|NAME", help="text file (gpt) or one word per line (mlp), or a "
                   "data set's name (names, tinyshakespeare: downloaded once, see 'burtorch data'); "
                   "default: the embedded corpus (Python's own pydoc text and its words)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="model size (default: paper)")
    p.add_argument("--hidden", type=positive_int, help="MLP hidden width e (paper: 4 ... 1024; preset: 64)")
    p.add_argument("--steps", type=positive_int, help="optimizer steps (default: mlp 4000, gpt 3000)")
    p.add_argument("--batch", type=positive_int, help="samples per step (default: 32)")
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], help="default: mlp sgd, gpt adamw")
    p.add_argument("--lr", type=positive_float, help="learning rate (default: sgd 0.1, adam/adamw 3e-3)")
    p.add_argument("--plan", type=plan_setting, help="how each step runs: auto (default: timed at the start, "
                   "within --memory), eager (the paper's per-sample oracle), or a plan such as "
                   "'compiled chunk=32 fused threads=2' (see docs/guides/step-paths.md)")
    p.add_argument("--memory", type=memory_setting, help="what the plan may hold: sample (one sample per graph, "
                   "whatever the batch), fast (no bound) or a byte budget such as 64M (default 64M)")
    p.add_argument("--chunk", type=positive_int, help="by hand: samples per graph (1: the paper's per-sample "
                   "oracle; k > 1: k samples as one graph, weights read once per chunk, memory of k samples)")
    p.add_argument("--compile", action="store_true", help="by hand: trace each sample (or chunk) shape once and "
                   "replay every one natively (recorded programs: the same gradients, no Python per sample or "
                   "chunk); may change between a run and its resumption")
    p.add_argument("--threads", type=positive_int, help="native threads (at most the cores this process may "
                   "use; default: the plan's, 1 with --chunk/--compile): with --compile, blocks of each "
                   "batch's samples (or chunks) replay at once (the last bits of the sums depend on N); with "
                   "--chunk alone, a chunk's layers split across threads (the same bits for any N); "
                   "per-sample eager ops are too small to split")
    p.add_argument("--dtype", choices=list(DTYPES), help="storage of parameters, activations and gradients "
                   "(bfloat16, float16: 2 bytes a number, computed in float32; docs: Scalar types); default: float32")
    p.add_argument("--seed", type=int, help="seeds initialisation, sampling and the data split (default: 1337)")
    p.add_argument("--eval-every", type=positive_int, help="steps between validation losses (default: 250)")
    p.add_argument("--eval-samples", type=positive_int, help="validation samples per evaluation (default: 300)")
    p.add_argument("--save", metavar="FILE", help="write a checkpoint here at the end (and for "
                   "--save-every and interruptions; default for those: burtorch-MODEL.ckpt, or the "
                   "--resume file)")
    p.add_argument("--save-every", type=positive_int, metavar="N", help="also write the checkpoint every N steps")
    p.add_argument("--resume", metavar="FILE", help="continue the run of this checkpoint")
    p.add_argument("--plot", metavar="PNG", help="loss curves (needs matplotlib)")
    p.add_argument("--sample", type=non_negative_int, help="characters (gpt) or words (mlp) to sample at the end "
                   "(default: gpt 300, mlp 8; 0: none)")
    p.add_argument("--record-times", action="store_true", help="at the end, print each kind of range record's "
                   "calls and microseconds per step, and the time outside records (bt.record_times; the "
                   "validation losses included)")
    p.set_defaults(func=main)


def _defaults(model: str, given: dict) -> dict:
    optimizer = given.get("optimizer") or ("sgd" if model == "mlp" else "adamw")
    return {"preset": "paper", "hidden": None, "dtype": "float32", "optimizer": optimizer,
            "lr": 0.1 if optimizer == "sgd" else 3e-3, "batch": 32, "chunk": 1, "seed": 1337,
            "eval_every": 250, "eval_samples": 300}


def _run_settings(args, meta) -> dict:
    """The run's settings: the command line's over the defaults, or the checkpoint's on resume."""
    given = {k: getattr(args, k) for k in RUN_KEYS if getattr(args, k) is not None}
    if given.get("hidden") is not None and args.model != "mlp":
        raise UsageError("--hidden applies to the mlp only")
    if meta is None:
        return {**_defaults(args.model, given), **given}
    if meta["model"] != args.model:
        raise UsageError(f"{args.resume} is a {meta['model']} checkpoint, not {args.model}")
    saved = meta["run"]
    conflicts = [f"--{k.replace('_', '-')} {given[k]} (the checkpoint's run has {saved[k]})"
                 for k in given if given[k] != saved[k]]
    if conflicts:
        raise UsageError("a resumed run keeps its settings; drop or change " + ", ".join(conflicts))
    return dict(saved)


class UsageError(Exception):
    """A command line or input the run cannot start from; reported without a traceback."""


# Bounds on the sizes a command line may ask for: each step holds its batch's samples in memory,
# the model its parameters (and the optimizer's buffers), and sampling builds its text in memory;
# past these a typo would grow memory until the machine runs out instead of failing at once.
MAX_BATCH = 1 << 20
MAX_HIDDEN = 1 << 14
MAX_SAMPLE = 1 << 20


def _check_budgets(args, run: dict) -> None:
    for flag, value, top in (("--batch", run["batch"], MAX_BATCH), ("--chunk", run["chunk"], MAX_BATCH),
                             ("--eval-samples", run["eval_samples"], MAX_BATCH),
                             ("--hidden", run["hidden"], MAX_HIDDEN), ("--sample", args.sample, MAX_SAMPLE)):
        if value is not None and value > top:
            raise UsageError(f"{flag} {value} is above the most this command takes ({top:,})")


def _check_output(path: str, what: str) -> None:
    problem = output_problem(path)
    if problem is not None:
        raise UsageError(f"{what} {path}: {problem}")


def _model_config(model: str, run: dict) -> dict:
    mlp_cfg, gpt_cfg = PRESETS[run["preset"]]
    cfg = dict(mlp_cfg if model == "mlp" else gpt_cfg)
    if run["hidden"] is not None:
        cfg["hidden"] = run["hidden"]
    return cfg


def _read_data(model: str, path):
    """(items, digest): the words or the text, and a SHA-256 of what was read."""
    from .. import data

    if model == "mlp":
        words = data.read_words(path) if path else data.default_words()
        words = [w.strip().lower() for w in words if w.strip()]
        return words, sha256("\n".join(words).encode("utf-8")).hexdigest()
    text = data.read_text(path) if path else data.default_text()
    return text, sha256(text.encode("utf-8")).hexdigest()


def _build(model: str, cfg: dict, vocab: int, dtype_name: str):
    import burtorch as bt

    from ..nn import MakemoreMLP, MiniGPT

    dtype = getattr(bt, dtype_name)
    cls = MakemoreMLP if model == "mlp" else MiniGPT
    return cls(vocab=vocab, dtype=dtype, **cfg)


def _optimizer(name: str, model, lr: float):
    from ..optim import SGD, Adam, AdamW

    return {"sgd": SGD, "adam": Adam, "adamw": AdamW}[name](model.parameters(), lr=lr)


def _check_meta(meta: dict, path: str) -> None:
    """Refuses a checkpoint whose metadata is not what this command writes (even if well formed)."""
    def bad(why):
        raise UsageError(f"{path} cannot be resumed: {why}")

    kinds = {"format": str, "model": str, "run": dict, "config": dict, "itos": list, "steps": int,
             "step": int, "rng": list, "data": dict, "history": dict, "optimizer_steps": int}
    for key, kind in kinds.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            bad(f"its {key!r} is missing or not a {kind.__name__}")
    if meta["format"] != "burtorch-train-1":
        bad(f"unknown format {meta['format']!r}")
    if meta["model"] not in ("mlp", "gpt") or set(meta["run"]) != set(RUN_KEYS):
        bad("it does not describe an mlp or gpt run of this version")
    run = meta["run"]

    def whole(x, low):
        return isinstance(x, int) and not isinstance(x, bool) and x >= low

    if (run["preset"] not in PRESETS or run["dtype"] not in DTYPES
            or run["optimizer"] not in ("sgd", "adam", "adamw") or not whole(run["seed"], -(1 << 63))
            or not (run["hidden"] is None or whole(run["hidden"], 1))
            or not all(whole(run[k], 1) for k in ("batch", "chunk", "eval_every", "eval_samples"))
            or not (isinstance(run["lr"], (int, float)) and not isinstance(run["lr"], bool)
                    and 0 < run["lr"] < float("inf"))):
        bad(f"its run settings are malformed: {run}")
    path, sha = meta["data"].get("path"), meta["data"].get("sha256")
    if not (path is None or isinstance(path, str)) or not isinstance(sha, str):
        bad("its data record is malformed")
    if not 0 <= meta["step"] <= meta["steps"]:
        bad(f"step {meta['step']} is outside 0..{meta['steps']}")
    if meta["optimizer_steps"] != meta["step"]:
        bad(f"the optimizer took {meta['optimizer_steps']} steps, the run {meta['step']}")
    if not all(isinstance(c, str) and len(c) == 1 for c in meta["itos"]) or len(set(meta["itos"])) != len(meta["itos"]):
        bad("its vocabulary is not a list of distinct characters")
    h = meta["history"]
    if set(h) != {"steps", "train_loss", "val_steps", "val_loss"} or not all(isinstance(v, list) for v in h.values()):
        bad("its history is malformed")
    if h["steps"] != list(range(1, meta["step"] + 1)) or len(h["train_loss"]) != meta["step"] \
            or len(h["val_steps"]) != len(h["val_loss"]) or any(not 1 <= s <= meta["step"] for s in h["val_steps"]):
        bad("its history does not match its step")
    rng = meta["rng"]  # random.Random.getstate(): (version, 625 words, gauss_next)
    if len(rng) != 3 or not isinstance(rng[1], list) or len(rng[1]) != 625:
        bad("its random state is malformed")
    try:
        random.Random().setstate(_tuplify(rng))
    except (TypeError, ValueError, IndexError, OverflowError):
        bad("its random state is malformed")


def _tuplify(x):
    return tuple(_tuplify(i) for i in x) if isinstance(x, list) else x


def plot_history(history: History, path: str, title: str) -> bool:
    """Draws the training and validation losses to ``path``; False when matplotlib is missing."""
    from ..viz.plots import save_figure

    try:
        from matplotlib.figure import Figure
    except ImportError:
        print("burtorch: --plot needs matplotlib (pip install matplotlib); no plot written", file=sys.stderr)
        return False
    fig = Figure(figsize=(7, 4), layout="tight")
    ax = fig.add_subplot()
    ax.plot(history.steps, history.train_loss, linewidth=0.6, alpha=0.5, label="train (batch)")
    ax.plot(history.val_steps, history.val_loss, marker="o", label="validation")
    ax.set(title=title, xlabel="step", ylabel="cross-entropy (nats)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_figure(fig, path)
    return True


def main(args) -> int:
    """Runs ``burtorch train`` with parsed ``args``; returns the exit code."""
    try:
        return _main(args)
    except UsageError as e:
        print(f"burtorch train: error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:  # the run diverged: a step's loss is inf or nan (the step is not taken)
        print(f"burtorch train: the run diverged: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before training started (or a second Ctrl-C): nothing to save yet
        print("\nburtorch train: interrupted; no checkpoint written", file=sys.stderr)
        return 130


def _choose_plan(args, meta, run, model, optimizer, train_set):
    """(the plan every step runs, or None for --chunk/--compile by hand; the line to print)."""
    from ..optim.fused import planned_step

    by_hand = args.compile or args.chunk is not None
    if args.plan is not None and by_hand:
        raise UsageError("--plan and --chunk/--compile both say how to step; give one (e.g. --plan 'compiled chunk=8')")
    if by_hand or (args.plan is None and meta is not None and "plan" not in meta and run["chunk"] != 1):
        how = ("compiled" if args.compile else "eager") + (f" chunk={run['chunk']}" if run["chunk"] > 1 else "")
        return None, f"plan: {how} threads={args.threads or 1} (--chunk/--compile by hand)"
    text = args.plan or (meta.get("plan") if meta is not None else None) or "auto"
    if text != "auto":
        try:
            _, chosen = planned_step(optimizer, model, [], plan=text, threads=args.threads, take=False)
        except ValueError as e:
            raise UsageError(f"--plan {text!r}: {e}") from None
        origin = "given" if args.plan else "the checkpoint's"
        return chosen.plan, f"plan: {chosen.plan} ({origin})"
    # a batch of its own stream, so the run's sampler is untouched; the trials are undone
    batch = train_set.batch(run["batch"], random.Random(run["seed"] + 3))
    _, chosen = planned_step(optimizer, model, batch, plan="auto", memory=args.memory, threads=args.threads,
                             take=False)
    return chosen.plan, chosen.line()


def _main(args) -> int:
    import burtorch as bt

    from .. import data, io
    from ..io.format import FormatError
    from . import checkpoint
    from .interrupt import StopRequests
    from .progress import Progress

    t_start = time.perf_counter()
    meta, ckpt = None, None
    if args.resume:
        try:
            ckpt = checkpoint.load(args.resume)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot resume from {args.resume}: {e}") from None
        meta = ckpt.meta
        _check_meta(meta, args.resume)
    run = _run_settings(args, meta)
    _check_budgets(args, run)
    save_path = args.save or args.resume or f"burtorch-{args.model}.ckpt"
    # Every file the run will write is checked before any work: a run must not train to the end
    # and then fail to write its result.
    if args.save or args.save_every:
        _check_output(save_path, "--save" if args.save else "the checkpoint")
    if args.plot:
        _check_output(args.plot, "--plot")
    if args.threads is not None and args.threads > bt._core._allowed_cores():
        raise UsageError(f"--threads {args.threads}: this process may use {bt._core._allowed_cores()} core(s)")
    cfg = _model_config(args.model, run)
    data_path = args.data if args.data is not None else (meta["data"].get("path") if meta else None)
    try:
        data_path = data.resolve(data_path)  # a data set's name: its cached file, fetched once
        items, digest = _read_data(args.model, data_path)
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    train_items: Any  # words for the MLP, text for the GPT
    val_items: Any
    try:  # too little data for a split or a block is a usage error, before any work
        if args.model == "mlp":
            train_items, val_items = data.split(items, 0.1, seed=0)
            tok = data.CharTokenizer("".join(items), specials=".")
        else:
            train_items, val_items = data.split_text(items, 0.1)
            tok = data.CharTokenizer(items)
    except ValueError as e:
        raise UsageError(f"{data_path or 'the embedded corpus'}: too little data: {e}") from None
    if meta is not None:
        if meta["config"] != cfg:
            raise UsageError(f"{args.resume}: its model configuration {meta['config']} is not its run's {cfg}")
        if meta["itos"] != tok.itos:
            raise UsageError(f"{args.resume} was trained with another vocabulary ({len(meta['itos'])} "
                             f"characters) than {data_path or 'the embedded corpus'} gives ({tok.vocab_size})")
        if meta["data"].get("sha256") != digest:
            raise UsageError(f"the data differ from the data {args.resume} was trained on "
                             f"({data_path or 'the embedded corpus'} changed?)")
    steps = args.steps if args.steps is not None else (meta["steps"] if meta else
                                                        (4000 if args.model == "mlp" else 3000))
    start = meta["step"] if meta else 0
    if start > steps:
        raise UsageError(f"{args.resume} is at step {start}, beyond --steps {steps}")

    bt.manual_seed(run["seed"])  # initialisation and every default-seeded sampler follow --seed
    train_set: data.WordDataset | data.TextDataset
    val_set: data.WordDataset | data.TextDataset
    try:
        if args.model == "mlp":
            train_set = data.WordDataset(train_items, cfg["block"], tok)
            val_set = data.WordDataset(val_items, cfg["block"], tok)
        else:
            train_set = data.TextDataset(train_items, cfg["block"], tok)
            val_set = data.TextDataset(val_items, cfg["block"], tok)
    except ValueError as e:
        raise UsageError(f"{data_path or 'the embedded corpus'}: too little data for a block of "
                         f"{cfg['block']}: {e}") from None
    if len(train_set) == 0 or len(val_set) == 0:
        raise UsageError(f"{data_path or 'the embedded corpus'}: too little data: {len(train_set)} training and "
                         f"{len(val_set)} validation examples")
    # The datasets hold the ids; the text itself (a corpus' size, three times over with its split)
    # would only add to the run's peak memory.
    prompt_text = val_items[:1] if args.model == "gpt" else ""
    del items, train_items, val_items
    model = _build(args.model, cfg, tok.vocab_size, run["dtype"])
    optimizer = _optimizer(run["optimizer"], model, run["lr"])
    rng = random.Random(run["seed"])
    val_samples = val_set.batch(min(run["eval_samples"], len(val_set)), random.Random(run["seed"] + 1))
    history = History()
    if ckpt is not None:
        expected = len(optimizer.state_dict()["buffers"])
        if len(ckpt.optimizer_buffers) != expected:
            raise UsageError(f"{args.resume}: {len(ckpt.optimizer_buffers)} optimizer numbers, this "
                             f"{run['optimizer']} needs {expected}")
        try:
            io.load_state_dict_bytes(ckpt.model_state, model)  # checks everything before writing
        except FormatError as e:
            raise UsageError(f"{args.resume}: the model state does not fit: {e}") from None
        optimizer.load_state_dict({"steps": ckpt.meta["optimizer_steps"], "buffers": ckpt.optimizer_buffers})
        history = History(**ckpt.meta["history"])
        rng.setstate(_tuplify(ckpt.meta["rng"]))

    plan, plan_line = _choose_plan(args, meta, run, model, optimizer, train_set)
    plan_text = None if plan is None else str(plan)

    def write_checkpoint(step: int, hist: History) -> None:
        state = optimizer.state_dict()
        checkpoint.save(save_path, {
            "format": "burtorch-train-1", "model": args.model, "run": run, "config": cfg,
            "itos": tok.itos, "steps": steps, "step": step, "rng": rng.getstate(),
            "data": {"path": os.path.abspath(data_path) if data_path else None, "sha256": digest},
            "history": asdict(hist), "optimizer_steps": state["steps"], "plan": plan_text,
        }, io.state_dict_bytes(model), state["buffers"])

    def after_step(step: int, hist: History) -> None:
        if args.save_every and step % args.save_every == 0:
            write_checkpoint(step, hist)

    source = data_path or "embedded corpus (pydoc)"
    print(f"burtorch train {args.model}: {model.num_parameters():,} parameters, vocab {tok.vocab_size}, "
          f"{len(train_set):,} training examples from {source}; {run['optimizer']} lr {run['lr']}, "
          f"batch {run['batch']}, {steps} steps ({run['dtype']})")
    print(plan_line)
    if start:
        print(f"resuming {args.resume} at step {start}")
    print(f"uniform baseline: {uniform_loss(tok.vocab_size):.4f} nats; initial validation loss: "
          f"{bt.oracle.mean_loss(model, val_samples):.4f}")
    t0 = time.perf_counter()
    timing = bt.record_times() if args.record_times else contextlib.nullcontext()
    with StopRequests() as stop, timing as times:
        history = train(model, optimizer, train_set, val_samples, steps, run["batch"], rng, run["eval_every"],
                        history, start, Progress(steps), chunk=run["chunk"], after_step=after_step, stop=stop,
                        compile=args.compile, threads=args.threads if plan is None else None, plan=plan,
                        memory=args.memory)
    dt = time.perf_counter() - t0
    reached = history.steps[-1] if history.steps else start
    done = reached - start
    if stop.signal is not None:
        write_checkpoint(reached, history)
        print(f"\n{stop.name}: stopped after step {reached} of {steps}; checkpoint written to {save_path}; "
              f"continue with: burtorch train {args.model} --resume {save_path}", file=sys.stderr)
        return stop.exit_code
    if done > 0:
        print(f"trained {done} steps in {dt:.1f} s ({1e3 * dt / done:.2f} ms per step, "
              f"{1e3 * dt / (done * run['batch']):.3f} ms per sample); final validation loss "
              f"{history.val_loss[-1]:.4f}")
    else:
        print(f"the checkpoint is at step {start}; nothing to do for --steps {steps}")
    if times is not None and done > 0:
        print(f"time by record, per training step:\n{times.table(per=done)}")
    if args.save:
        write_checkpoint(reached, history)
        print(f"checkpoint written to {args.save}")
    if args.plot and history.steps:
        if plot_history(history, args.plot, f"burtorch {args.model} on {os.path.basename(source)}"):
            print(f"loss curves written to {args.plot}")
    n_sample = args.sample if args.sample is not None else (8 if args.model == "mlp" else 300)
    srng = random.Random(run["seed"] + 2)
    if n_sample > 0 and args.model == "mlp":
        words = ["".join(tok.decode(sample_text(model, tok, srng, 30, stop_id=0))) for _ in range(n_sample)]
        print("sampled words:", ", ".join(w or "(empty)" for w in words))
    elif n_sample > 0:
        prompt = tok.encode(prompt_text)
        print("sampled text:\n" + tok.decode(prompt + sample_text(model, tok, srng, n_sample, prompt)))
    print(f"total time {time.perf_counter() - t_start:.1f} s")
    return 0
