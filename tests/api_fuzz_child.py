"""One batch of the API fuzzer, run in its own process by test_api_fuzz.py (so that a crash or a
hang fails a test instead of killing pytest).

Each call: hypothesis draws a target (fuzz_targets.py), a number of positional arguments and maybe
a keyword from the argument space (fuzz_world.py). The call is written to the log before it
runs, so if the process dies the parent knows which call killed it. The oracle:
  - the call returns, or raises an expected exception type (TypeError, ValueError, IndexError,
    MemoryError, StaleValueError, ...), or lets an argument's own exception through unchanged;
    anything else (SystemError, AttributeError, an unexplained RuntimeError, ...) is a finding;
  - where the answer is known (a scalar op on a live Value and a Python number), the result is
    compared with plain Python math;
  - no call takes longer than CALL_SECONDS (a hang);
  - afterwards nothing it had no business touching changed (World.check).
The counts per area and every finding go to a JSON report.

    python tests/api_fuzz_child.py --seed 1 --calls 500 --log calls.log --report report.json
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

import burtorch as bt
from fuzz_targets import all_targets
from fuzz_world import ARGUMENTS, KEYWORDS, PLAUSIBLE, TEMPLATES, ArgumentError, World, hint_for
from op_table import UNARY as UNARY_REFERENCE

CALL_SECONDS = 20
CLEAN = (TypeError, ValueError, IndexError, KeyError, MemoryError, OverflowError, bt.StaleValueError,
         FloatingPointError, NotImplementedError, OSError, BufferError, ArgumentError)
# Division by zero is Python's own answer to an operator (Fraction(1) / a zero Value), not to a call.
OPERATOR_SYMBOLS = (" / ", " // ", " % ", " ** ", "pow3")
# RuntimeErrors burtorch raises on purpose (misuse of arenas and modes), by message.
INTENDED_RUNTIME_ERRORS = ("in another order than entered", "is not entered on this thread",
                           "must call super().__init__()", "exited more often than entered")
REACHING_ARGUMENTS = {"a64", "a32", "full", "cp", "cp_discarded", "cp_other", "(a64, 0, 3)", "(a64, 2**40, 2**41)",
                      "(a64, 5, 2)", "bt.Arena(capacity=1)"}
LIVE_F64 = {"v64", "w64", "u64", "zero"}
LIVE_F64_VECTORS = {"vec64", "mat64", "cols64", "cat64", "one64", "act64", "qkv64", "q64"}
ARITHMETIC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


class CallTimeout(BaseException):
    """A call ran past CALL_SECONDS (BaseException: library code catching Exception cannot hide it)."""


class Drawer:
    """What argument factories may draw beyond their choice: bytes and integers."""

    def __init__(self, data):
        self.data = data

    def binary(self, max_size):
        return self.data.draw(st.binary(max_size=max_size))

    def integer(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))


def classify(exc: BaseException, assigning: bool, target: str = "") -> str | None:
    """None for an expected exception, else why it is a finding."""
    if isinstance(exc, CLEAN):
        return None
    if isinstance(exc, ZeroDivisionError) and any(s in target for s in OPERATOR_SYMBOLS):
        return None
    if assigning and type(exc) is AttributeError and any(m in str(exc) for m in ("not writable", "no setter")):
        return None  # Python's answer to assigning a read-only attribute
    if type(exc) is RuntimeError and any(m in str(exc) for m in INTENDED_RUNTIME_ERRORS):
        return None
    return f"{type(exc).__name__}: {exc}"


def expected_value(target_name: str, arg_names: list, args: list, world):
    """The answer plain Python knows for an op on live float64 pool nodes, with the magnitude its
    rounding is relative to: (value or list of values, scale), or None."""
    recv, dot, op = target_name.partition(".")
    if dot and recv != "bt" and not args:
        if recv in LIVE_F64 and op in UNARY_REFERENCE and op != "leaky_relu":
            return UNARY_REFERENCE[op][1](getattr(world, recv).data), None
        if recv in LIVE_F64_VECTORS:
            xs = getattr(world, recv).data
            if op in UNARY_REFERENCE and op != "leaky_relu":
                return [UNARY_REFERENCE[op][1](x) for x in xs], None
            if op in ("sum", "mean"):
                return sum(xs) / (len(xs) if op == "mean" else 1), sum(map(abs, xs))
    if recv == "bt" and len(args) == 1:
        if arg_names[0] in LIVE_F64 and op in UNARY_REFERENCE and op not in ("leaky_relu", "abs"):
            return UNARY_REFERENCE[op][1](args[0].data), None
        if arg_names[0] in LIVE_F64_VECTORS and op in ("vsum", "vmean"):
            xs = args[0].data
            return sum(xs) / (len(xs) if op == "vmean" else 1), sum(map(abs, xs))
    parts = target_name.split(" ")
    if len(parts) == 3 and parts[1] in ARITHMETIC and len(args) == 1 and type(args[0]) in (int, float):
        left, sym, right = parts
        f, c = ARITHMETIC[sym], float(args[0])
        for name, flip in ((left, False), (right, True)):
            if name in LIVE_F64:
                x = getattr(world, name).data
                return (f(c, x) if flip else f(x, c)), None
            if name in LIVE_F64_VECTORS:
                return [f(c, x) if flip else f(x, c) for x in getattr(world, name).data], None
    return None


def agrees(got, want, scale=None) -> bool:
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(agrees(g, w) for g, w in zip(got, want))
    if math.isnan(want):
        return math.isnan(got)
    if math.isinf(want):
        return got == want
    return abs(got - want) <= 1e-12 * (abs(want) if scale is None else scale) + 1e-300


def check_result(result) -> str | None:
    """A result must be usable: its repr works, a live node's data reads."""
    repr(result)
    if type(result) is bt.Value and result.alive and not isinstance(result.data, float):
        return f"Value.data is a {type(result.data).__name__}"
    if type(result) is bt.Vector and result.alive and len(result.data) != result.size:
        return f"Vector of size {result.size} holds {len(result.data)} numbers"
    return None


# Where each call runs (--context): as is, under a mode, or inside a function being traced (where
# a TraceError is a clean answer: the call reads or writes what a replay could not repeat).
CONTEXTS = ("plain", "no_grad", "anomaly", "trace")


def in_context(context: str, call):
    """call() run in `context`; its result (None inside a trace, which discards what it made)."""
    if context == "no_grad":
        with bt.no_grad():
            return call()
    if context == "anomaly":
        with bt.detect_anomaly():
            return call()
    if context == "trace":
        def traced(x):
            call()
            return x * 1.0

        bt.trace(traced, [1.0])
        return None
    return call()


def run(seed_value: int, calls: int, log_path: str, self_test: str | None, context: str = "plain") -> dict:
    warnings.simplefilter("ignore")
    world = World()
    by_area = collections.defaultdict(list)
    for t in all_targets():
        by_area[t.area].append(t)
    areas = sorted(by_area)
    by_name = dict((name, (name, make)) for name, make in ARGUMENTS)
    templates = {name: args for name, args in TEMPLATES.items() if all(a in by_name for a in args)}
    assert len(templates) == len(TEMPLATES), set(TEMPLATES) - set(templates)
    # Half the arguments come from what the API takes (burtorch objects, small numbers and lists),
    # so calls get past the first type check and reach deeper.
    pick_argument = st.one_of(st.sampled_from(PLAUSIBLE), st.sampled_from(ARGUMENTS))
    stats = collections.defaultdict(lambda: {"calls": 0, "results": 0, "checked": 0, "clean": collections.Counter(),
                                             "findings": []})
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def on_alarm(signum, frame):
        raise CallTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    if self_test == "crash":
        os.write(log, b"self-test: crash\n")
        import ctypes

        ctypes.string_at(0)
    if self_test == "hang":
        os.write(log, b"self-test: hang\n")
        while True:
            pass

    @settings(max_examples=calls, database=None, deadline=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(seed_value)
    @given(st.data())
    def one_call(data):
        t = data.draw(st.sampled_from(by_area[data.draw(st.sampled_from(areas))]), label="target")
        lo, hi = t.nargs or (0, 3)
        n = data.draw(st.integers(lo, min(hi, lo + 3)) if data.draw(st.integers(0, 4)) else st.integers(0, 4))
        if t.is_set:
            n = 1
        drawer = Drawer(data)
        picks = []
        if t.name in templates and data.draw(st.integers(0, 2)) == 0:  # a good call, one or two arguments off
            picks = [by_name[a] for a in templates[t.name]]
            for _ in range(data.draw(st.integers(1, 2))):
                if picks and data.draw(st.booleans()):
                    picks[data.draw(st.integers(0, len(picks) - 1))] = data.draw(pick_argument)
                else:
                    picks.append(data.draw(pick_argument))
            n = len(picks)
        for i in range(n - len(picks)):  # by the parameter's name half the time, where the name says something
            hinted = hint_for(t.params[i]) if i < len(t.params) else []
            picks.append(data.draw(st.sampled_from(hinted) if hinted and data.draw(st.booleans()) else pick_argument))
        kw = data.draw(st.sampled_from(KEYWORDS)) if not t.is_set and data.draw(st.integers(0, 5)) == 0 else None
        kw_pick = data.draw(pick_argument) if kw else None
        names = [p[0] for p in picks]
        desc = f"{t.name}({', '.join(names)}{', ' if names and kw else ''}{f'{kw}={kw_pick[0]}' if kw else ''})"
        os.write(log, (desc + "\n").encode("utf-8", "backslashreplace"))
        area = stats[t.area]
        reaching = (t.area == "Arena" or any(n in REACHING_ARGUMENTS or n.startswith("FakeView") for n in names)
                    or (kw_pick and (kw_pick[0] in REACHING_ARGUMENTS or kw_pick[0].startswith("FakeView"))))
        args = [make(world, drawer) for _, make in picks]  # hypothesis draws stay outside the oracle
        kwargs = {kw: kw_pick[1](world, drawer)} if kw else {}
        area["calls"] += 1
        finding = None
        result = None
        signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
        try:
            fn = t.resolve(world)
            if isinstance(fn, tuple):  # a property
                obj, attr = fn
                result = in_context(context, lambda: setattr(obj, attr, args[0]) if t.is_set else getattr(obj, attr))
            else:
                result = in_context(context, lambda: fn(*args, **kwargs))
            area["results"] += 1
            try:  # checking a result is the oracle's work: what it raises is a finding, not a clean error
                finding = check_result(result)
                try:
                    known = expected_value(t.name, names, args, world) if finding is None else None
                except (ValueError, OverflowError, ZeroDivisionError, TypeError):
                    known = None  # plain Python's math raises where burtorch follows IEEE: nothing to compare
                if known is not None and type(result) in (bt.Value, bt.Vector):
                    area["checked"] += 1
                    if not agrees(result.data, *known):
                        finding = f"wrong result: {result.data!r}, plain Python says {known[0]!r}"
            except CallTimeout:
                raise
            except Exception as e:  # noqa: BLE001
                finding = "checking the result raised\n" + "".join(traceback.format_exception(e)[-6:])
        except CallTimeout:
            finding = f"hang: no answer after {CALL_SECONDS} s"
        except BaseException as e:  # noqa: BLE001  (the oracle decides)
            why = None if context == "trace" and isinstance(e, bt.TraceError) else classify(e, t.is_set, t.name)
            if why is None:
                area["clean"][type(e).__name__] += 1
            else:
                finding = why + "\n" + "".join(traceback.format_exception(e)[-6:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        del result
        problems = world.restore_thread_state() + world.check(reaching)
        if finding or problems:
            area["findings"].append({"call": desc, "finding": finding, "after": problems})

    start = time.perf_counter()
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # some tools print their reports
    try:
        one_call()
    finally:
        sys.stdout.close()
        sys.stdout = stdout
    os.close(log)
    return {"seed": seed_value, "calls": calls, "seconds": round(time.perf_counter() - start, 2),
            "world_rebuilds": world.rebuilds, "build": bt.build_info,
            "areas": {k: {**v, "clean": dict(v["clean"])} for k, v in sorted(stats.items())}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--self-test", choices=["crash", "hang"])
    p.add_argument("--context", choices=CONTEXTS, default="plain")
    a = p.parse_args()
    log, out = os.path.abspath(a.log), os.path.abspath(a.report)
    # The fuzzed calls save files under relative names ("values", "a", ...): they go to a
    # directory of this process's own, never into the one it was started from (a checkout).
    with tempfile.TemporaryDirectory(prefix="api-fuzz-") as scratch:
        os.chdir(scratch)
        report = run(a.seed, a.calls, log, a.self_test, a.context)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    main()
