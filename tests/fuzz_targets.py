"""What the API fuzzer calls: every public callable of burtorch, enumerated from the package.

Areas:
  core      every public callable in dir(burtorch) (functions, classes: their constructors), and the
            lazily loaded names (numpy_view, load_array, memory_report, grad_oracle)
  Value     every public method and property (read and write) of Value, and its operators
  Vector    likewise for Vector
  Arena     every public method and property of Arena, Checkpoint's too
  nn        every module class of burtorch.nn (constructor), forward and methods of built modules
  optim     every optimizer and compressor class of burtorch.optim (constructor), steps of built ones
  io        every function of burtorch.io, with bytes, byte streams and paths
  tools     burtorch.viz.to_dot, burtorch.views, burtorch.introspect
Not called: the command line, the benchmark harness, burtorch.fl's executors and the data file
readers (they start processes or read the filesystem; their own tests and fuzzers cover them).

A target is (name, area, receiver, attribute) and `resolve(world)` gives the callable; a property
target with `set=True` assigns its first argument instead of calling.
"""
from __future__ import annotations

import inspect
import io as pyio
import operator
import re

import burtorch as bt

LAZY = ("numpy_view", "load_array", "memory_report", "grad_oracle")

RECEIVERS = {
    "Value": ["v64", "w64", "u64", "v32", "zero", "stale64", "stale32"],
    "Vector": ["vec64", "mat64", "cols64", "cat64", "one64", "vec32", "mat32", "act64", "qkv64", "q64", "stalevec",
               "stalemat"],
    "Arena": ["a64", "a32", "full"],
    "Checkpoint": ["cp", "cp_discarded", "cp_other"],
    "Module": ["linear", "mlp"],
    "Optimizer": ["sgd", "adam"],
}

# Binary operators tried with a burtorch object on either side.
OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "//": operator.floordiv, "%": operator.mod, "@": operator.matmul, "pow3": lambda a, b: pow(a, b, 3),
}
UNARY_OPERATORS = {"neg": operator.neg, "pos": operator.pos, "abs": abs, "float": float, "int": int, "bool": bool,
                   "len": len, "hash": hash, "repr": repr, "iter": lambda x: list(iter(x)), "round": round}


class Target:
    __slots__ = ("name", "area", "resolve", "is_set", "nargs", "params")

    def __init__(self, name, area, resolve, is_set=False, nargs=None):
        self.name, self.area, self.resolve, self.is_set = name, area, resolve, is_set
        # nargs: (min, max) positional arguments and their names, or None if unknown
        self.nargs, self.params = (nargs[:2], list(nargs[2:]) if len(nargs) > 2 else []) if nargs else (None, [])


def _split_params(text):
    """Top-level comma-separated parameters of a signature's text."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in out + [cur.strip()] if p]


def _arity_of_text(params):
    lo = hi = 0
    names = []
    for p in _split_params(params):
        name = p.split(":")[0].split("=")[0].strip()
        if name in ("self", "/", "*") or name.startswith("**"):
            continue
        if name.startswith("*"):
            hi += 3
            continue
        hi += 1
        lo += "=" not in p
        names.append(name)
    return (lo, hi, *names)


def _arity(fn, probe=False):
    """(min, max) positional arguments: from the Python signature, nanobind's signature text, a
    signature on the docstring's first line or, for raw C functions, the error of a bare call."""
    try:
        sig = inspect.signature(fn)
        lo = hi = 0
        names = []
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                hi += 1
                lo += p.default is p.empty
                names.append(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                hi += 3
        return (lo, hi, *names)
    except (TypeError, ValueError):
        pass
    nb = getattr(fn, "__nb_signature__", None)
    if nb:
        text = nb[0][0]
        return _arity_of_text(text[text.index("(") + 1:text.rindex(") ->") if ") ->" in text else text.rindex(")")])
    first = (getattr(fn, "__doc__", None) or "").split("\n")[0]
    m = re.match(r"^\w+\(([^()]*)\)", first)
    if m:
        return _arity_of_text(m.group(1))
    if probe:
        try:
            fn()
            return 0, 0
        except TypeError as e:
            msg = str(e)
            m = re.search(r"takes (\d+) or (\d+) arguments", msg) or re.search(r"takes (\d+) arguments", msg)
            if "exactly one argument" in msg:
                return 1, 1
            if "no arguments" in msg:
                return 0, 0
            if m:
                return int(m.group(1)), int(m.groups()[-1])
        except Exception:  # noqa: BLE001  (a probe only)
            pass
    return None


def _public(obj):
    return [n for n in dir(obj) if not n.startswith("_")]


def _members(area, cls, receivers):
    out = []
    for name in _public(cls):
        attr = inspect.getattr_static(cls, name)
        kinds = [("get", False)]
        if isinstance(attr, property) or type(attr).__name__ in ("getset_descriptor", "member_descriptor"):
            kinds = [("get", False), ("set", True)]
        elif not callable(getattr(cls, name)):
            continue
        for kind, is_set in kinds:
            for r in receivers:
                def resolve(world, r=r, name=name, kind=kind):
                    obj = getattr(world, r)
                    return getattr(obj, name) if kind == "get" and callable(getattr(type(obj), name, None)) \
                        else (obj, name)
                label = f"{r}.{name}" + (" = ..." if is_set else "")
                out.append(Target(label, area, resolve, is_set=is_set, nargs=_arity(getattr(cls, name))))
    return out


def _operators(area, receivers):
    out = []
    for sym, fn in OPERATORS.items():
        for r in receivers:
            out.append(Target(f"{r} {sym} x", area, lambda w, r=r, fn=fn: (lambda x: fn(getattr(w, r), x)),
                              nargs=(1, 1)))
            out.append(Target(f"x {sym} {r}", area, lambda w, r=r, fn=fn: (lambda x: fn(x, getattr(w, r))),
                              nargs=(1, 1)))
    for sym, fn in UNARY_OPERATORS.items():
        for r in receivers:
            out.append(Target(f"{sym}({r})", area, lambda w, r=r, fn=fn: (lambda: fn(getattr(w, r))), nargs=(0, 0)))
    out += [Target(f"{r}[x]", area, lambda w, r=r: (lambda x: getattr(w, r)[x]), nargs=(1, 1))
            for r in receivers if area == "Vector"]
    return out


def _classes_of(module, base):
    return [getattr(module, n) for n in getattr(module, "__all__", _public(module))
            if inspect.isclass(getattr(module, n)) and issubclass(getattr(module, n), base)]


def all_targets() -> list:
    from burtorch import introspect, nn, optim, views, viz
    from burtorch import io as bio

    targets = []
    for name in _public(bt):
        obj = getattr(bt, name)
        if inspect.ismodule(obj) or not callable(obj):
            continue
        targets.append(Target(f"bt.{name}", "core", lambda w, obj=obj: obj, nargs=_arity(obj, probe=True)))
    for name in LAZY:
        targets.append(Target(f"bt.{name}", "core", lambda w, name=name: getattr(bt, name),
                              nargs=_arity(getattr(bt, name))))
    targets += _members("Value", bt.Value, RECEIVERS["Value"]) + _operators("Value", RECEIVERS["Value"])
    targets += _members("Vector", bt.Vector, RECEIVERS["Vector"]) + _operators("Vector", RECEIVERS["Vector"])
    targets += _members("Arena", bt.Arena, RECEIVERS["Arena"])
    targets += _members("Arena", bt.Checkpoint, RECEIVERS["Checkpoint"])
    for cls in _classes_of(nn, nn.Module):
        targets.append(Target(f"nn.{cls.__name__}", "nn", lambda w, cls=cls: cls, nargs=_arity(cls)))
    targets += _members("nn", nn.Module, RECEIVERS["Module"])
    targets += [Target(f"{r}(x)", "nn", lambda w, r=r: getattr(w, r), nargs=(1, 1)) for r in RECEIVERS["Module"]]
    for cls in _classes_of(optim, object):
        targets.append(Target(f"optim.{cls.__name__}", "optim", lambda w, cls=cls: cls, nargs=_arity(cls)))
    targets += _members("optim", optim.Optimizer, RECEIVERS["Optimizer"])
    for name in bio.__all__:
        obj = getattr(bio, name)
        if callable(obj) and not inspect.isclass(obj):
            targets.append(Target(f"io.{name}", "io", lambda w, obj=obj: obj, nargs=_arity(obj)))
    targets.append(Target("io.save(BytesIO, ...)", "io", lambda w: (lambda *a, **k: bio.save(pyio.BytesIO(), *a, **k)),
                          nargs=(1, 2)))
    targets.append(Target("io.load(BytesIO(x), ...)", "io",
                          lambda w: (lambda data, *a, **k: bio.load(pyio.BytesIO(data), *a, **k)), nargs=(2, 3)))
    targets.append(Target("io.load_state_dict(BytesIO(x), ...)", "io",
                          lambda w: (lambda data, *a, **k: bio.load_state_dict(pyio.BytesIO(data), *a, **k)),
                          nargs=(1, 2)))
    for mod, names in ((views, ("numpy_view", "load_array")), (introspect, ("memory_report",)), (viz, ("to_dot",))):
        for name in names:
            obj = getattr(mod, name)
            targets.append(Target(f"{mod.__name__.split('.')[-1]}.{name}", "tools", lambda w, obj=obj: obj,
                                  nargs=_arity(obj)))
    return targets


# Calls given any of these may legitimately change any node of the pool arenas (raw writes,
# rewinds, clear, optimizer steps, loads into node ranges).
ARENA_REACHING = ("a64", "a32", "full", "cp", "cp_discarded", "cp_other", "linear", "mlp", "sgd", "adam",
                  "FakeView", "RewindingNumber", "RewindingIterable", "(a64")
