"""`burtorch train mlp|gpt`: train one of the paper's two models on the embedded corpus or a file."""
from __future__ import annotations

import os
import random
import sys
import time

from . import _core
from .trainer import (History, Progress, evaluate, load_checkpoint, read_meta, sample_text, save_checkpoint,
                      train, uniform_loss)

PRESETS = {
    # name: (mlp kwargs, gpt kwargs)
    "paper": (dict(block=16, emb=64, hidden=64), dict(block=8, dim=24, layers=6, heads=6)),
    "tiny": (dict(block=4, emb=8, hidden=16), dict(block=8, dim=12, layers=2, heads=2)),
}


def register(sub) -> None:
    p = sub.add_parser("train", help="train the char-level MLP (W4) or the mini GPT (W5)",
                       description="Train with per-sample gradient oracles (memory of one sample per step).")
    p.add_argument("model", choices=["mlp", "gpt"])
    p.add_argument("--data", metavar="FILE", help="text file (gpt) or one word per line (mlp); "
                   "default: the embedded corpus (Python's own pydoc text and its words)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="paper", help="model size (default: paper)")
    p.add_argument("--hidden", type=int, help="MLP hidden width e (paper: 4 ... 1024; preset: 64)")
    p.add_argument("--steps", type=int, help="optimizer steps (default: mlp 4000, gpt 3000)")
    p.add_argument("--batch", type=int, help="samples per step (default: mlp 32, gpt 32)")
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], help="default: mlp sgd, gpt adamw")
    p.add_argument("--lr", type=float, help="learning rate (default: sgd 0.1, adam/adamw 3e-3)")
    p.add_argument("--compile", action="store_true", help="trace each sample shape once and replay every "
                   "sample natively (recorded programs; same gradients, no Python per sample)")
    p.add_argument("--chunk", type=int, default=1, help="samples per graph (1: the paper's per-sample "
                   "oracle; k > 1: k samples as one graph, weights read once per chunk, memory of k samples)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--eval-every", type=int, default=250, help="steps between validation losses")
    p.add_argument("--eval-samples", type=int, default=300, help="validation samples per evaluation")
    p.add_argument("--save", metavar="DIR", help="write a checkpoint directory at the end")
    p.add_argument("--resume", metavar="DIR", help="continue from a checkpoint directory")
    p.add_argument("--plot", metavar="PNG", default=None, help="loss curves (needs matplotlib)")
    p.add_argument("--sample", type=int, default=None, help="characters (gpt) or words (mlp) to sample at the end")
    p.set_defaults(func=main)


def _data(args, meta):
    from . import data

    if args.model == "mlp":
        words = data.read_words(args.data) if args.data else data.default_words()
        words = [w.strip().lower() for w in words if w.strip()]
        return data.split(words, 0.1, seed=0), "words"
    text = data.read_text(args.data) if args.data else data.default_text()
    return data.split_text(text, 0.1), "text"


def _build(args, kind_cfg, vocab, dtype):
    from .nn import MakemoreMLP, MiniGPT

    if args.model == "mlp":
        return MakemoreMLP(vocab=vocab, dtype=dtype, **kind_cfg)
    return MiniGPT(vocab=vocab, dtype=dtype, **kind_cfg)


def _optimizer(name, model, lr):
    from .optim import SGD, Adam, AdamW

    cls = {"sgd": SGD, "adam": Adam, "adamw": AdamW}[name]
    return cls(model.parameters(), lr=lr)


def plot_history(history: History, path: str, title: str) -> bool:
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
    fig.savefig(path)
    return True


def main(args) -> int:
    from . import data

    t_start = time.perf_counter()
    meta = read_meta(args.resume) if args.resume else None
    if meta and meta["kind"] != args.model:
        raise SystemExit(f"burtorch: {args.resume} is a {meta['kind']} checkpoint, not {args.model}")
    (train_items, val_items), unit = _data(args, meta)
    dtype = _core.float32 if args.dtype == "float32" else _core.float64
    mlp_cfg, gpt_cfg = PRESETS[args.preset]
    cfg = dict(mlp_cfg if args.model == "mlp" else gpt_cfg)
    if args.hidden is not None:
        if args.model != "mlp":
            raise SystemExit("burtorch: --hidden applies to the mlp only")
        cfg["hidden"] = args.hidden
    if meta:
        cfg = meta["config"]
        tok = data.CharTokenizer("".join(meta["itos"][1:] if args.model == "mlp" else meta["itos"]),
                                 specials="." if args.model == "mlp" else "")
        if tok.itos != meta["itos"]:
            raise SystemExit("burtorch: the checkpoint's vocabulary cannot be rebuilt")
    else:
        tok = (data.CharTokenizer("".join(train_items + val_items), specials=".") if args.model == "mlp"
               else data.CharTokenizer(set(train_items) | set(val_items)))
    if args.model == "mlp":
        train_set = data.WordDataset(train_items, cfg["block"], tok)
        val_set = data.WordDataset(val_items, cfg["block"], tok)
    else:
        train_set = data.TextDataset(train_items, cfg["block"], tok)
        val_set = data.TextDataset(val_items, cfg["block"], tok)
    model = _build(args, cfg, tok.vocab_size, dtype)
    opt_name = args.optimizer or ("sgd" if args.model == "mlp" else "adamw")
    lr = args.lr if args.lr is not None else (0.1 if opt_name == "sgd" else 3e-3)
    optimizer = _optimizer(opt_name, model, lr)
    steps = args.steps if args.steps is not None else (4000 if args.model == "mlp" else 3000)
    batch = args.batch or 32
    if steps < 1 or batch < 1:
        raise SystemExit("burtorch: --steps and --batch must be positive")
    rng = random.Random(args.seed)
    val_rng = random.Random(args.seed + 1)
    val_samples = val_set.batch(min(args.eval_samples, len(val_set)), val_rng)
    history, start = History(), 0
    if meta:
        history = load_checkpoint(args.resume, model, optimizer, meta)
        start = meta["step"]
        rng.setstate(_tuplify(meta["rng"]))
        if start >= steps:
            print(f"checkpoint is at step {start}; nothing to do for --steps {steps}")
    source = args.data or "embedded corpus (pydoc)"
    print(f"burtorch train {args.model}: {model.num_parameters():,} parameters, vocab {tok.vocab_size}, "
          f"{len(train_set):,} training examples from {source}; {opt_name} lr {lr}, batch {batch}, "
          f"{steps} steps ({args.dtype})")
    print(f"uniform baseline: {uniform_loss(tok.vocab_size):.4f} nats; initial validation loss: "
          f"{evaluate(model, val_samples):.4f}")
    t0 = time.perf_counter()
    if args.chunk < 1:
        raise SystemExit("burtorch: --chunk must be positive")
    if args.compile and args.chunk != 1:
        raise SystemExit("burtorch: --compile replays per-sample programs; drop --chunk")
    history = train(model, optimizer, train_set, val_samples, steps, batch, rng, args.eval_every, history,
                    start, Progress(steps), chunk=args.chunk, compile=args.compile)
    dt = time.perf_counter() - t0
    done = steps - start
    if done > 0:
        print(f"trained {done} steps in {dt:.1f} s ({1e3 * dt / done:.2f} ms per step, "
              f"{1e3 * dt / (done * batch):.3f} ms per sample); final validation loss "
              f"{history.val_loss[-1]:.4f}")
    if args.save:
        save_checkpoint(args.save, model, optimizer,
                        dict(kind=args.model, config=cfg, itos=tok.itos, step=max(steps, start),
                             rng=rng.getstate(), dtype=args.dtype), history)
        print(f"checkpoint written to {args.save}")
    if args.plot and history.steps:
        if plot_history(history, args.plot, f"burtorch {args.model} on {os.path.basename(source)}"):
            print(f"loss curves written to {args.plot}")
    n_sample = args.sample if args.sample is not None else (8 if args.model == "mlp" else 300)
    srng = random.Random(args.seed + 2)
    if n_sample and args.model == "mlp":
        words = ["".join(tok.decode(sample_text(model, tok, srng, 30, stop_id=0))) for _ in range(n_sample)]
        print("sampled words:", ", ".join(w or "(empty)" for w in words))
    elif n_sample:
        prompt = tok.encode(val_items[:1])
        print("sampled text:\n" + tok.decode(prompt + sample_text(model, tok, srng, n_sample, prompt)))
    print(f"total time {time.perf_counter() - t_start:.1f} s")
    return 0


def _tuplify(x):
    return tuple(_tuplify(i) for i in x) if isinstance(x, list) else x
