"""`burtorch fl`: a federated run (or several methods compared) with a progress bar, a JSON
record and plots against rounds and communicated bits."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .arguments import non_negative_float, output_problem, positive_float, positive_int

if TYPE_CHECKING:
    from .progress import Progress

# The names, spelled out so that `burtorch --help` does not import numpy (a test keeps them in
# step with the modules that define them).
EXECUTORS = ("serial", "processes", "ray")
SPLITS = ("iid", "label", "dirichlet")


def register(sub) -> None:
    p = sub.add_parser("fl", help="federated optimization: n clients, EF21 / MARINA / PAGE / DIANA / FedAvg, "
                                  "compressed communication, serial, processes or Ray")
    # The names are checked when the command runs, against the lists kept with the methods and the
    # compressors (burtorch.optim), so a new method needs no line here; an unknown name lists them.
    p.add_argument("--method", default="ef21",
                   help="gd, dcgd, ef21, marina, page, diana, fedavg, ... (default ef21)")
    p.add_argument("--compressor", default="topk",
                   help="topk, randk, randseqk, natural, dithering, identity, ... or scaled-NAME; used by the "
                        "methods that compress (default topk)")
    p.add_argument("--k", type=positive_int, default=1, help="coordinates kept by randk/topk/randseqk (default 1)")
    p.add_argument("--s", type=positive_int, default=1, help="levels of random dithering (default 1)")
    p.add_argument("--compare", default=None,
                   help="several methods on one figure: comma-separated METHOD[:COMPRESSOR][@LR] "
                        "(e.g. gd,ef21,dcgd:topk@0.5,marina:randk)")
    p.add_argument("--clients", type=positive_int, default=20)
    p.add_argument("--rounds", type=positive_int, default=1000)
    p.add_argument("--participation", type=positive_float, default=1.0, help="fraction of clients per round, in (0, 1]")
    p.add_argument("--sampling", default="uniform", choices=("uniform", "bernoulli", "importance"),
                   help="with --participation < 1: round(p n) clients uniformly (default), each with "
                        "probability p, or each with probability p_i proportional to its smoothness L_i "
                        "(p n expected; gd, dcgd and fedavg reweight by 1/p_i)")
    p.add_argument("--lr", type=positive_float, default=None, help="step size (default: the method's theory step)")
    p.add_argument("--lr-scale", type=positive_float, default=1.0, help="multiplies the theory step (default 1)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="minibatch size (ef21-sgd, vr-marina, page, fedavg)")
    p.add_argument("--p", type=positive_float, default=None,
                   help="MARINA/PAGE full-round probability (default: theory's)")
    p.add_argument("--downlink", default="topk",
                   help="ef21-bc: the server's contractive compressor of its broadcast (topk, identity, "
                        "scaled-NAME; default topk)")
    p.add_argument("--downlink-k", type=positive_int, default=None,
                   help="coordinates the downlink compressor keeps (default --k)")
    p.add_argument("--wire", default="fp32", choices=("fp32", "fp64"),
                   help="width of the values clients send: fp32 rounds them to float32 before the server uses "
                        "them; bits are counted at this width (default fp32)")
    p.add_argument("--local-steps", type=positive_int, default=5, help="FedAvg local steps (default 5)")
    p.add_argument("--local-optimizer", default="sgd", choices=("sgd", "adam"),
                   help="FedAvg: the clients' optimizer of their local steps (Adam starts afresh each round)")
    p.add_argument("--schedule", default="constant", choices=("constant", "step", "cosine"),
                   help="FedAvg: the local step by round: constant, step (x --lr-decay every --schedule-period "
                        "rounds) or cosine (to 0 over --schedule-period, default --rounds)")
    p.add_argument("--schedule-period", type=positive_int, default=None,
                   help="rounds of the schedule's period (default: --rounds for cosine, --rounds/3 for step)")
    p.add_argument("--lr-decay", type=positive_float, default=0.5, help="factor of the step schedule (default 0.5)")
    p.add_argument("--server-lr", type=positive_float, default=1.0, help="FedAvg: the server's step (default 1)")
    p.add_argument("--executor", default="serial", choices=EXECUTORS)
    p.add_argument("--workers", type=positive_int, default=None, help="worker processes or Ray actors")
    p.add_argument("--address", default=None, help="HOST:PORT of a running Ray cluster (--executor ray)")
    p.add_argument("--seed", type=int, default=None, help="run seed (default: from bt.manual_seed's stream)")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--data", default=None, help="a words file (names.txt) or a data set's name "
                      "(names): the makemore MLP per client")
    data.add_argument("--libsvm", default=None, help="a LibSVM-format file (.bz2 read as it is) or a "
                      "registered LibSVM set's name (rcv1, a9a, w8a; see 'burtorch data list'): "
                      "logistic regression on it")
    p.add_argument("--samples", type=positive_int, default=1000, help="default problem: samples in all (default 1000)")
    p.add_argument("--dim", type=positive_int, default=30, help="default problem: features (default 30)")
    p.add_argument("--lam", type=non_negative_float, default=0.1,
                   help="weight of the non-convex regulariser (default 0.1)")
    p.add_argument("--split", default="label", choices=SPLITS, help="how data is split among clients")
    p.add_argument("--alpha", type=positive_float, default=0.5, help="Dirichlet concentration for --split dirichlet")
    p.add_argument("--hidden", type=positive_int, default=64, help="--data: hidden width e of the MLP (default 64)")
    p.add_argument("--max-samples", type=positive_int, default=256, help="--data: samples per client (default 256)")
    p.add_argument("--eval-every", type=positive_int, default=1, help="rounds between loss/gradient-norm evaluations")
    p.add_argument("--plot", default=None, help="PNG of gradient norm and loss against rounds and bits")
    p.add_argument("--json", default=None, help="write the settings and per-round records here")
    p.add_argument("--target", type=non_negative_float, default=None,
                   help="also print the bits per client each run sent until ||grad f|| <= TARGET")
    p.add_argument("--tune", default=None, metavar="GRID",
                   help="step-size search: run every method at each step of GRID (e.g. 0.01,0.1,1) in parallel "
                        "on the executor, then compare each at its step with the smallest final gradient norm")
    p.add_argument("--tune-rounds", type=positive_int, default=None,
                   help="rounds of each --tune run (default: --rounds)")
    p.add_argument("--checkpoint", default=None,
                   help="save the run's state here every --checkpoint-every rounds, after each --compare entry "
                        "and on Ctrl-C/SIGTERM")
    p.add_argument("--checkpoint-every", type=int, default=0, help="rounds between checkpoints (0: none between)")
    p.add_argument("--resume", default=None,
                   help="continue a checkpointed run (same arguments and --seed): bitwise the run uninterrupted")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def build_problem(args, seed: int):
    from ..data import resolve

    if args.data is not None:
        from ..fl.names import from_file

        path = os.fspath(resolve(args.data) or args.data)
        return from_file(path, args.clients, hidden=args.hidden, max_samples=args.max_samples,
                         split=args.split, alpha=args.alpha, seed=seed)
    from ..fl.logistic import from_libsvm, synthetic

    if args.libsvm is not None:
        path = os.fspath(resolve(args.libsvm) or args.libsvm)
        return from_libsvm(path, args.clients, args.lam, args.split, args.alpha, seed)
    return synthetic(args.clients, args.samples, args.dim, args.lam, args.split, args.alpha, seed)


def parse_specs(args) -> list:
    """[(label, method name, compressor name, lr or None)] from --compare, or the single --method."""
    if args.compare is None:
        return [(args.method, args.method, args.compressor, args.lr)]
    specs = []
    for item in args.compare.split(","):
        item = item.strip()
        spec, _, lr = item.partition("@")
        name, _, comp = spec.partition(":")
        if not name:
            raise ValueError(f"--compare: empty method in {args.compare!r}")
        try:
            # @x16: sixteen times the theory step; @0.5: that step
            lr = ("x", float(lr[1:])) if lr.startswith("x") else float(lr) if lr else args.lr
        except ValueError:
            raise ValueError(f"--compare: {item!r}: after @ comes a step (0.5) or a multiple of the "
                             "theory step (x16)") from None
        specs.append((item, name, comp or args.compressor, lr))
    return specs


def build_method(args, name: str, compressor_name: str, lr, problem, d: int):
    """The method with its compressor, bound to the problem (so every error shows before a round)."""
    from ..optim.compressors import make_compressor
    from ..optim.methods import COMPRESSING, make_method

    bits = 32 if args.wire == "fp32" else 64
    compressor = make_compressor(compressor_name, d, args.k, args.s, bits) if name in COMPRESSING else None
    downlink = (make_compressor(args.downlink, d, args.downlink_k or args.k, args.s, bits) if name == "ef21-bc"
                else None)
    scale = args.lr_scale
    if isinstance(lr, tuple):
        lr, scale = None, lr[1]
        if not 0 < scale < float("inf"):
            raise ValueError(f"--compare {name}: the multiple of the theory step must be finite and > 0")
    method = make_method(name, lr=lr, compressor=compressor, batch=args.batch, p=args.p,
                         local_steps=args.local_steps, wire=args.wire, downlink=downlink,
                         **_fedavg_options(args, name))
    participation = args.participation
    if args.sampling == "importance" and participation < 1.0:  # as Federation binds it: the smallest p_i
        from ..fl.sampling import importance_lr, importance_probabilities

        sm = problem.smoothness()
        if sm is None or sm.L_local is None:
            raise ValueError("--sampling importance: this problem knows no per-client smoothness constants L_i")
        probabilities = importance_probabilities(sm.L_local, participation * problem.n_clients)
        participation = min(probabilities)
        if name == "gd" and method.lr is None:  # the theory's step of the reweighted GD for --rounds rounds
            method.lr = importance_lr(sm.L, sm.L_local, probabilities, args.rounds)
    method.bind(d, problem.n_clients, participation, problem.smoothness(), problem.shard_sizes())
    if lr is None:
        method.lr *= scale
    return method


def _fedavg_options(args, name: str) -> dict[str, Any]:
    """FedAvg's options from the command line (the other methods take none)."""
    if name != "fedavg":
        return {}
    period = args.schedule_period
    if period is None and args.schedule != "constant":
        period = args.rounds if args.schedule == "cosine" else max(1, args.rounds // 3)
    return {"server_lr": args.server_lr, "local_optimizer": args.local_optimizer, "schedule": args.schedule,
            "period": period, "decay": args.lr_decay}


# Bounds on the sizes a command line may ask for (the problem's matrices are dense, a round keeps
# a record, the MLP holds its parameters): past these a typo would grow memory until the machine
# runs out instead of failing at once.
MAX_CELLS = 1 << 27  # samples x features of the synthetic problem
MAX_ROUNDS = 1 << 22
MAX_CLIENTS = 1 << 16
MAX_HIDDEN = 1 << 14
MAX_SAMPLES_PER_CLIENT = 1 << 20


def _check_budgets(args) -> None:
    for flag, value, top in (("--rounds", args.rounds, MAX_ROUNDS), ("--clients", args.clients, MAX_CLIENTS),
                             ("--hidden", args.hidden, MAX_HIDDEN),
                             ("--max-samples", args.max_samples, MAX_SAMPLES_PER_CLIENT),
                             ("--samples x --dim", args.samples * args.dim, MAX_CELLS)):
        if value > top:
            raise ValueError(f"{flag} {value:,} is above the most this command takes ({top:,})")


def check_names(args) -> None:
    """Every method and compressor the command line names, checked before any work."""
    from ..optim.compressors import COMPRESSORS
    from ..optim.methods import METHODS

    for _, name, comp, _ in parse_specs(args):
        if name not in METHODS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
        for c in (comp, args.downlink):
            if c.removeprefix("scaled-") not in COMPRESSORS:
                raise ValueError(f"unknown compressor {c!r}; choose from {', '.join(COMPRESSORS)} or scaled-NAME")


def main(args) -> int:
    from ..fl.executors import make_executor
    from ..fl.federation import Diverged, Federation, check_participation
    from ..seeding import next_seed
    from .interrupt import StopRequests
    from .progress import Progress

    try:
        _check_budgets(args)
        check_names(args)
        for flag, path in (("--json", args.json), ("--plot", args.plot)):
            problem = None if path is None else output_problem(path)
            if problem is not None:  # before any round, not after the last
                raise ValueError(f"{flag} {path}: {problem}")
        if args.resume is not None and args.seed is None:
            raise ValueError("--resume needs the --seed of the checkpointed run")
        check_participation(args.participation)
        seed = next_seed() if args.seed is None else args.seed
        problem = build_problem(args, seed)
        d = len(problem.initial_point(seed))
        runs = [(label, build_method(args, name, comp, lr, problem, d)) for label, name, comp, lr in parse_specs(args)]
        make_executor(args.executor, args.workers, args.address)  # Ray present, cluster reachable
        if args.plot and importlib.util.find_spec("matplotlib") is None:  # before any round, not after
            raise ImportError("--plot needs matplotlib: pip install matplotlib")
        if args.checkpoint_every < 0:
            raise ValueError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
        checkpoint = args.checkpoint or args.resume
        args._seed, args._problem = seed, problem.settings()
        why = None if checkpoint is None else output_problem(checkpoint)
        if why is not None:
            raise ValueError(f"--checkpoint {checkpoint}: {why}")
        resumed = read_resume(args, [label for label, _ in runs]) if args.resume else None
        grid = None if args.tune is None else _grid(args.tune)
    except (ValueError, TypeError, ImportError, ConnectionError, FileNotFoundError, PermissionError) as e:
        print(f"burtorch fl: error: {e}", file=sys.stderr)
        return 2
    results, status, interrupted = [], 0, None
    done = {r["label"]: r for r in resumed["done"]} if resumed else {}
    # one Ray session for all the runs of a --compare (started once, not once per run)
    session: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.executor == "ray":
        from ..fl.ray_executor import session as ray_session

        session = ray_session(args.workers, args.address)
    tuning = None
    with session, StopRequests() as stop:
        if grid is not None:
            from ..fl.tuning import search, with_lr

            try:
                tuning = search(problem, runs, grid, args.participation, seed, args.tune_rounds or args.rounds,
                                args.executor, args.workers, args.address, args.sampling)
            except ValueError as e:
                print(f"burtorch fl: error: --tune: {e}", file=sys.stderr)
                return 2
            for label, entry in tuning.items():
                shown = ", ".join(f"{lr:g}: {s:.3e}" for lr, s in entry["scores"].items())
                print(f"tuned {label}: lr {entry['lr']:g}  (final grad norm by step: {shown})")
            runs = [(label, with_lr(method, tuning[label]["lr"])) for label, method in runs]
        for label, method in runs:
            if label in done:  # finished before the checkpoint
                results.append(done[label])
            else:
                progress = None if args.quiet else Progress(args.rounds, every=max(1, args.rounds // 10))
                if not args.quiet:
                    print(f"{label}: {method!r}", file=sys.stderr)
                with Federation(problem, method, args.participation, args.executor, args.workers, args.address,
                                seed, args.eval_every, args.sampling) as fed:
                    if resumed and resumed["label"] == label:
                        try:
                            fed.load_state_dict(resumed["state"])
                        except ValueError as e:
                            print(f"burtorch fl: error: --resume {args.resume}: {e}", file=sys.stderr)
                            return 2
                    try:
                        _rounds(fed, args, checkpoint, results, label, stop, progress)
                    except Diverged as e:  # the records so far are kept and written
                        print(f"burtorch fl: {label} stopped at {e}", file=sys.stderr)
                        status = 1
                    except ValueError as e:
                        # a compressor refuses non-finite coordinates: the run diverged inside a
                        # round, whose record is lost; the earlier ones are kept
                        if "not finite" not in str(e):
                            raise
                        fed.stopped = f"round {fed.t}: {e}; the run diverged (lower the step size)"
                        print(f"burtorch fl: {label} stopped at {fed.stopped}", file=sys.stderr)
                        status = 1
                    results.append({"label": label, "settings": fed.settings(), "records": fed.records,
                                    "stopped": fed.stopped})
                    if stop.signal is not None and fed.t < args.rounds and fed.stopped is None:
                        interrupted = fed.t
                        if checkpoint:
                            _save(checkpoint, args, results[:-1], label, fed)
                    elif checkpoint:
                        _save(checkpoint, args, results, None, None)
            last = results[-1]["records"][-1]
            metrics = (f"loss {last['loss']:.6g}  grad norm {last['grad_norm']:.3e}" if "loss" in last
                       else "loss not evaluated")
            line = (f"{label}: round {last['round']}  {metrics}  bits/client {last['bits_per_client']:.4g}"
                    f"  down {last.get('bits_down_per_client', 0):.4g}")
            if args.target is not None:
                hit = next((r for r in results[-1]["records"] if r.get("grad_norm", float("inf")) <= args.target), None)
                line += (f"  | grad norm <= {args.target:g} at round {hit['round']} after "
                         f"{hit['bits_per_client']:,.0f} bits/client" if hit
                         else f"  | grad norm <= {args.target:g} not reached")
            print(line)
            evaluated = [r["loss"] for r in results[-1]["records"] if "loss" in r]
            if not results[-1]["stopped"] and len(evaluated) > 1 and evaluated[-1] > evaluated[0]:
                print(f"burtorch fl: warning: {label}: the loss rose from {evaluated[0]:.6g} to {evaluated[-1]:.6g}; "
                      "the step size may be too large", file=sys.stderr)
            if interrupted is not None:
                break
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "burtorch fl " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["fl"] else None,
                       "problem": problem.settings(), "runs": results,
                       "tuning": None if tuning is None else
                       {label: {"lr": e["lr"], "scores": {str(k): v for k, v in e["scores"].items()}}
                        for label, e in tuning.items()}}, f, indent=1)
    if args.plot:
        from ..fl.plots import plot_runs

        plot_runs(results, args.plot, title=f"{problem.settings()['problem']}: {problem.n_clients} clients")
    if interrupted is not None:
        where = (f"; checkpoint in {checkpoint}, continue with --resume {checkpoint}" if checkpoint
                 else "; no --checkpoint was given")
        print(f"burtorch fl: {stop.name} after round {interrupted - 1}{where}", file=sys.stderr)
        return stop.exit_code
    return status


def _grid(text: str) -> list[float]:
    try:
        grid = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--tune: {text!r} is not a comma-separated list of step sizes") from None
    if not grid or not all(g > 0 and g != float("inf") for g in grid):
        raise ValueError(f"--tune: step sizes must be positive and finite, got {text!r}")
    return grid


def _rounds(fed, args, checkpoint: str | None, results: list, label: str, stop, progress) -> None:
    """The run's remaining rounds (the last one evaluated), checkpointed every
    --checkpoint-every rounds; stops early at a stop request."""
    while fed.t < args.rounds:
        rec = fed.round(evaluate=True if fed.t == args.rounds - 1 and args.eval_every else None)
        if progress is not None:
            _show_round(progress, rec)
        if checkpoint and args.checkpoint_every and fed.t % args.checkpoint_every == 0 and fed.t < args.rounds:
            _save(checkpoint, args, results, label, fed)
        if stop.signal is not None:
            return


def _save(path: str, args, results: list, label: str | None, fed) -> None:
    from ..fl.federation import save_checkpoint

    save_checkpoint(path, {"kind": "burtorch fl", "rounds": args.rounds, "seed": args._seed,
                           "problem": args._problem, "done": list(results), "label": label,
                           "state": None if fed is None else fed.state_dict()})


def read_resume(args, labels: list[str]) -> dict[str, Any]:
    """The --resume checkpoint, checked against this command's runs before any work."""
    from ..fl.federation import load_checkpoint

    ck = load_checkpoint(args.resume)
    if not isinstance(ck, dict) or ck.get("kind") != "burtorch fl":
        raise ValueError(f"--resume {args.resume}: not a burtorch fl checkpoint")
    if ck["seed"] != args._seed or ck["problem"] != args._problem:
        raise ValueError(f"--resume {args.resume}: the checkpoint is of another run (seed {ck['seed']}, "
                         f"problem {ck['problem']})")
    if ck["rounds"] != args.rounds:
        raise ValueError(f"--resume {args.resume}: the checkpoint is of a run of {ck['rounds']} rounds, "
                         f"not {args.rounds}")
    names = [r["label"] for r in ck["done"]] + ([ck["label"]] if ck["label"] is not None else [])
    if names != labels[:len(names)]:
        raise ValueError(f"--resume {args.resume}: the checkpoint's runs {names} are not this command's {labels}")
    return ck


def _show_round(progress: Progress, record: dict[str, Any]) -> None:
    progress.update(record["round"] + 1, record.get("loss", record["oracle_loss"]) or 0.0, None)
