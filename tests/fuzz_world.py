"""The world the API fuzzer's calls run in, and the argument space they draw from.

The world holds, per child process:
  - pool arenas (float64 and float32, a capacity of 2**14 nodes) entered as the thread's current
    arenas, so calls that allocate without an arena land there and huge sizes fail cleanly;
  - the objects calls receive: live and stale Values and Vectors of both dtypes, views with gaps,
    arenas (one full), checkpoints (valid, discarded, of another arena), modules, optimizers;
  - protected nodes in the pool arenas that no argument reaches (only Arena-level calls can);
  - sentinel nodes in arenas no call ever sees, and in the thread's default arenas.
After every call, `check()` says what broke: a sentinel or protected node that changed, a thread
mode or current arena that a call left switched, a pool object that died.

Arguments come from ARGUMENTS: factories of numbers at and beyond every boundary (NaN, inf,
2**31, 2**32, 2**63, 2**64 and negatives), strings, bytes, empty and nested containers, numpy
arrays of odd dtypes, shapes and strides, burtorch objects (stale ones too), and objects whose
__float__ / __index__ / __iter__ / __len__ re-enter the library (rewind, allocate, call another
op) or raise.
"""
from __future__ import annotations

import math
import struct
from decimal import Decimal
from fractions import Fraction

import burtorch as bt

try:
    import numpy as np
except ImportError:  # the fuzzer runs without numpy too, with fewer arguments
    np = None

F32, F64 = bt.float32, bt.float64
CAPACITY = 1 << 14
RESET_ABOVE = 4096  # nodes of call results kept before the pool arenas are rewound


class ArgumentError(Exception):
    """Raised by the fuzzer's own argument objects: the library must let it through unchanged."""


# ---------------------------------------------------------------- arguments that re-enter
class RewindingNumber:
    """A number whose conversion rewinds the pool arenas and allocates in the freed slots."""

    def __init__(self, world, value=1.5):
        self.world, self.value = world, value

    def __float__(self):
        self.world.rewind_pool()
        # kept: a dropped Value at the top would be reclaimed, and the slots must be reissued now
        self.world.kept += [bt.Value(-777.0, arena=self.world.a64), bt.Value(-777.0, arena=self.world.a32)]
        return self.value

    def __index__(self):
        self.__float__()
        return 1


class NestedOpNumber:
    """A number whose conversion runs other ops on pool Values (nested calls into the core)."""

    def __init__(self, world):
        self.world = world

    def __float__(self):
        w = self.world
        s = bt.reduce_sum([w.v64, 2.0, w.v64 * 3.0])
        bt.vsum(w.vec64 + [1.0, 2.0, 3.0])
        return s.data

    def __index__(self):
        return int(self.__float__()) % 2


class RaisingNumber:
    """Conversion raises the fuzzer's own error, which must come out unchanged."""

    def __float__(self):
        raise ArgumentError("from __float__")

    def __index__(self):
        raise ArgumentError("from __index__")


class WrongFloat:
    """__float__ returns a str: Python's own TypeError."""

    def __float__(self):
        return "1.0"

    def __index__(self):
        return "1"


class HugeIndex:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


class RewindingIterable:
    """Yields a live pool Value, rewinds the pool (killing the rest), then yields stale ones."""

    def __init__(self, world, n=4):
        self.world, self.n = world, n

    def __len__(self):
        return self.n

    def __iter__(self):
        w = self.world
        fresh = [bt.Value(float(i), arena=w.a64) for i in range(self.n)]
        yield w.v64
        w.rewind_pool()
        w.kept.append(bt.Value(-777.0, arena=w.a64))
        yield from fresh[1:]


class LyingLength:
    """len() says more than iteration yields (or is negative, or raises). A million, not a billion:
    CPython's own list() and tuple() preallocate what len() promises."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        if isinstance(self.length, Exception):
            raise self.length
        return self.length

    def __iter__(self):
        return iter([1.0, 2.0])

    def __getitem__(self, i):
        if i >= 2:
            raise IndexError(i)
        return float(i)


class GrowingList(list):
    """A list that appends to itself while being iterated."""

    def __iter__(self):
        for i, x in enumerate(list.__iter__(self)):
            if i < 64:
                self.append(x)
            yield x


class NamedLike:
    """A dtype impostor: an object with a `name` (or raising on attribute access)."""

    def __init__(self, name):
        self._name = name

    @property
    def name(self):
        if isinstance(self._name, Exception):
            raise self._name
        return self._name


class FakeView:
    """Duck-typed like a Vector for burtorch.io targets: .arena and .spans, possibly absurd."""

    def __init__(self, arena, spans, alive=True):
        self.arena, self.spans, self.alive = arena, spans, alive


# ---------------------------------------------------------------- the world
class World:
    def __init__(self):
        self.make_sentinels()
        self.build()

    # ---- sentinels: never handed to any call ----
    def make_sentinels(self):
        self.hidden = [bt.Arena(F64), bt.Arena(F32)]
        self.sentinel_keep = []
        for a in self.hidden:
            with a:
                x = bt.leaves([0.25 * i - 3 for i in range(48)], dtype=a.dtype)
                loss = bt.vsum((x * x).tanh()) + bt.reduce_sum(x.values()[:5])
                loss.backward()
                self.sentinel_keep += [x, loss]  # held: dropped graphs would be reclaimed
        # the thread's default arenas: nothing below these may change either
        self.defaults = []
        for d in (F32, F64):
            vals = [bt.Value(1.0 / (i + 3), dtype=d) for i in range(8)]
            root = bt.reduce_mul(vals) * 2.0
            root.backward()
            self.sentinel_keep += [vals, root]
            self.defaults.append((bt.current_arena(d), vals[0].index, vals[-1].index + 1))
        self.hidden_bytes = self.sentinel_bytes()

    def sentinel_bytes(self):
        out = [a.read_bytes(0, a.num_nodes, w) for a in self.hidden for w in ("values", "grads")]
        out += [a.read_bytes(lo, hi, w) for a, lo, hi in self.defaults for w in ("values", "grads")]
        return out

    # ---- the pool: what calls receive ----
    def build(self):
        self.a64 = bt.Arena(F64, capacity=CAPACITY)
        self.a32 = bt.Arena(F32, capacity=CAPACITY)
        self.full = bt.Arena(F64, capacity=4)
        self.kept = [bt.Value(1.0, arena=self.full) for _ in range(4)]  # held: it must stay full
        self.enter()
        a64, a32 = self.a64, self.a32
        self.v64 = bt.Value(0.75, arena=a64)
        self.w64 = bt.Value(-1.25, arena=a64)
        self.u64 = (self.v64 * self.w64).tanh()  # an interior node
        self.v32 = bt.Value(0.5, arena=a32)
        self.zero = bt.Value(0.0, arena=a64)
        self.vec64 = bt.leaves([1.0, -2.0, 3.0], arena=a64)
        self.mat64 = bt.leaves([[0.5 * (i - j) for j in range(4)] for i in range(3)], arena=a64)
        self.cols64 = self.mat64.columns(1, 3)  # a view with gaps
        self.cat64 = bt.cat([self.vec64, self.vec64[0:2]])
        self.one64 = bt.leaves([2.0], arena=a64)
        self.vec32 = bt.leaves([1.0, 2.0, 3.0], arena=a32)
        self.mat32 = bt.leaves([[1.0, 2.0], [3.0, 4.0]], arena=a32)
        self.act64 = (self.mat64 * 2.0).tanh()  # interior nodes of a range record
        self.qkv64 = bt.leaves([[0.1 * (i + j) for j in range(6)] for i in range(4)], arena=a64)  # T=4, C=2
        self.q64 = self.qkv64.columns(0, 2)
        from burtorch import nn, optim
        self.linear = nn.Linear(3, 2, dtype=F64)
        self.mlp = nn.MLP(4, [3, 2])
        self.sgd = optim.SGD(self.linear.parameters(), lr=0.1, momentum=0.9)
        self.adam = optim.AdamW(self.mlp.parameters(), lr=1e-3)
        # protected: reachable only through an Arena
        self.protected = [bt.Value(10.0 + i, arena=a) for a in (a64, a32) for i in range(4)]
        for p in self.protected:
            p.grad = -1.0
        self.protected_before = [(p.data, p.grad) for p in self.protected]
        self.stable = [self.v64, self.w64, self.u64, self.v32, self.zero, self.vec64, self.mat64, self.cols64,
                       self.cat64, self.one64, self.vec32, self.mat32, self.act64, self.qkv64, self.q64]
        self.stable += self.protected
        self.cp = bt.checkpoint()
        # stale handles (64-bit generations: they stay stale) and checkpoints that cannot be used
        self.stale64 = bt.Value(3.0, arena=a64)
        self.stalevec = bt.leaves([1.0, 2.0], arena=a64)
        self.stalemat = bt.leaves([[1.0, 2.0], [3.0, 4.0]], arena=a32)
        self.stale32 = bt.Value(3.0, arena=a32)
        self.cp_discarded = bt.checkpoint()
        self.rewind_pool()
        self.kept += [bt.Value(0.0, arena=a64), bt.Value(0.0, arena=a32)]
        self.cp_other = self.full.checkpoint()
        self.mark = (a64.num_nodes, a32.num_nodes)
        self.rebuilds = getattr(self, "rebuilds", -1) + 1

    def enter(self):
        self.a64.__enter__()
        self.a32.__enter__()

    def rewind_pool(self):
        bt.rewind(self.cp)

    def pool_alive(self) -> bool:
        return all(s.alive for s in self.stable)

    # ---- after every call ----
    def restore_thread_state(self) -> list:
        """Puts back what a call may legitimately switch; returns what was left switched."""
        changed = []
        if not bt.is_grad_enabled():
            changed.append("gradient mode left off")
            while not bt.is_grad_enabled():
                bt.no_grad().__exit__(None, None, None)
        if bt.is_anomaly_enabled():
            changed.append("anomaly mode left on")
            while bt.is_anomaly_enabled():
                bt.detect_anomaly().__exit__(None, None, None)
        bt.labels(False)
        bt.set_default_dtype(F64)
        for d, mine in ((F64, self.a64), (F32, self.a32)):
            for _ in range(64):
                cur = bt.current_arena(d)
                if cur is mine or cur is self.defaults[0 if d is F32 else 1][0]:
                    break
                cur.__exit__(None, None, None)  # a call entered another arena
            if bt.current_arena(d) is not mine:
                mine.__enter__()  # a call exited the pool arena
        return changed

    def check(self, call_touches_arenas: bool) -> list:
        """What a call broke that it had no business touching."""
        problems = []
        if self.sentinel_bytes() != self.hidden_bytes:
            problems.append("a node of an arena no call can reach changed")
        if not self.pool_alive():
            if not call_touches_arenas:
                problems.append("a pool object died though the call was given no arena or checkpoint")
            self.rebuild()
            return problems
        if not call_touches_arenas:
            now = [(p.data, p.grad) for p in self.protected]
            if now != self.protected_before:
                problems.append(f"protected nodes changed: {self.protected_before} -> {now}")
        if self.a64.num_nodes > self.mark[0] + RESET_ABOVE or self.a32.num_nodes > self.mark[1] + RESET_ABOVE:
            self.rewind_pool()
        return problems

    def rebuild(self):
        for a in (self.a64, self.a32):
            while True:
                try:
                    a.__exit__(None, None, None)
                except RuntimeError:
                    break
        self.build()


# ---------------------------------------------------------------- the argument space
def _numbers():
    ints = [0, 1, -1, 2, 3, 4, 6, 7, 64, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**53 + 1, 2**63 - 1,
            2**63, 2**64, 2**64 + 7, -2**31, -2**32, -2**63, -2**63 - 1, 10**30, -10**30]
    floats = [0.0, -0.0, 0.5, -1.5, 3.0, 1e-300, 5e-324, -1e308, 1e308, 1.7976931348623157e308, 3.5e38, 1e-45,
              math.inf, -math.inf, math.nan, 2.0**31, 2.0**64]
    return ([(f"{i!r}", lambda w, d, i=i: i) for i in ints] + [(f"{x!r}", lambda w, d, x=x: x) for x in floats] +
            [("True", lambda w, d: True), ("False", lambda w, d: False), ("None", lambda w, d: None),
             ("1+2j", lambda w, d: 1 + 2j), ("Fraction(1, 3)", lambda w, d: Fraction(1, 3)),
             ("Decimal('1.5')", lambda w, d: Decimal("1.5")), ("Decimal('nan')", lambda w, d: Decimal("nan"))])


def _texts():
    items = ["", "a", "float32", "float64", "values", "grads", "both", "uniform", "relu", "tanh", "\x00",
             "\ud800", "x" * 70000, "fuzz-out.bin"]
    return ([(f"str {s[:12]!r}", lambda w, d, s=s: s) for s in items] +
            [("b''", lambda w, d: b""), ("b'BURT'", lambda w, d: b"BURT"),
             ("bytearray(16)", lambda w, d: bytearray(16)),
             ("memoryview(b'...')", lambda w, d: memoryview(b"\x00" * 24)),
             ("random bytes", lambda w, d: d.binary(max_size=96)),
             ("burtorch file", lambda w, d: bt.io.dumps(w.vec64)),
             ("burtorch file, one byte changed", _damaged_file),
             ("burtorch file, count 2**60", lambda w, d: _forged_file(w, count=2**60)),
             ("state dict file", lambda w, d: _state_dict_bytes(w))])


def _damaged_file(w, d):
    data = bytearray(bt.io.dumps(w.vec64, "both"))
    k = d.integer(0, len(data) - 1)
    data[k] ^= d.integer(1, 255)
    return bytes(data)


def _forged_file(w, count):
    """A header whose counts and checksums agree with each other but not with the payload."""
    import zlib

    from burtorch.io.format import FIXED_HEADER, MAGIC, VERSION

    payload = b"\x00" * 24
    head = FIXED_HEADER.pack(MAGIC, VERSION, 2, 1, 0, 0, 0, 40, count, count * 8, zlib.crc32(payload), 0)
    head = head[:36] + struct.pack("<I", zlib.crc32(head[:36]))
    return head + payload


def _state_dict_bytes(w):
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "state.bin")
        bt.io.save_state_dict(w.linear, path)
        with open(path, "rb") as f:
            return f.read()


def _containers():
    return [
        ("[]", lambda w, d: []), ("[[]]", lambda w, d: [[]]), ("[0, 1]", lambda w, d: [0, 1]),
        ("()", lambda w, d: ()), ("{}", lambda w, d: {}),
        ("set()", lambda w, d: set()), ("[1.0, 2.0]", lambda w, d: [1.0, 2.0]),
        ("[1.0, 2.0, 3.0]", lambda w, d: [1.0, 2.0, 3.0]), ("[[1, 2], [3, 4]]", lambda w, d: [[1, 2], [3, 4]]),
        ("[[1, 2], [3]]", lambda w, d: [[1, 2], [3]]), ("[[1, [2]]]", lambda w, d: [[1, [2]]]),
        ("[None]", lambda w, d: [None]), ("(1, 2)", lambda w, d: (1, 2)), ("(3, 4)", lambda w, d: (3, 4)),
        ("(2**31, 2**31)", lambda w, d: (2**31, 2**31)), ("(0,)", lambda w, d: (0,)),
        ("(-1, 3)", lambda w, d: (-1, 3)), ("(2, 1)", lambda w, d: (2, 1)),
        ("{'w': vec64}", lambda w, d: {"w": w.vec64}), ("{'weight': [1.0]}", lambda w, d: {"weight": [1.0]}),
        ("range(3)", lambda w, d: range(3)), ("range(2**40)", lambda w, d: range(2**40)),
        ("iter([1.0, 2.0])", lambda w, d: iter([1.0, 2.0])), ("[0.5] * 5000", lambda w, d: [0.5] * 5000),
        ("self-containing list", _self_list), ("[v64, 2.0, w64]", lambda w, d: [w.v64, 2.0, w.w64]),
        ("[v64, v32]", lambda w, d: [w.v64, w.v32]), ("[v64, stale]", lambda w, d: [w.v64, w.stale64]),
        ("[vec64, mat64]", lambda w, d: [w.vec64, w.mat64]), ("[vec64, vec32]", lambda w, d: [w.vec64, w.vec32]),
        ("[mat64, mat64]", lambda w, d: [w.mat64, w.mat64]), ("[stalevec]", lambda w, d: [w.stalevec]),
        ("[v64] * 3", lambda w, d: [w.v64] * 3), ("(a64, 0, 3)", lambda w, d: (w.a64, 0, 3)),
        ("(a64, 2**40, 2**41)", lambda w, d: (w.a64, 2**40, 2**41)), ("(a64, 5, 2)", lambda w, d: (w.a64, 5, 2)),
        ("GrowingList([1.0, v64])", lambda w, d: GrowingList([1.0, w.v64])),
        ("[0, 1, 2]", lambda w, d: [0, 1, 2]), ("[1.0, 1.0, 1.0, 1.0]", lambda w, d: [1.0] * 4),
        ("[0.0, 0.0, 0.0, 0.0]", lambda w, d: [0.0] * 4), ("[4, 3]", lambda w, d: [4, 3]),
    ]


def _self_list(w, d):
    x = [1.0]
    x.append(x)
    return x


def _burtorch_objects():
    names = ["v64", "w64", "u64", "v32", "zero", "vec64", "mat64", "cols64", "cat64", "one64", "vec32", "mat32",
             "act64", "qkv64", "q64", "stale64", "stale32", "stalevec", "stalemat", "a64", "a32", "full", "cp",
             "cp_discarded", "cp_other", "linear", "mlp", "sgd", "adam"]
    return ([(n, lambda w, d, n=n: getattr(w, n)) for n in names] +
            [("bt.float32", lambda w, d: F32), ("bt.float64", lambda w, d: F64),
             ("bt.Arena(capacity=1)", lambda w, d: bt.Arena(F64, capacity=1)),
             ("fresh Value of another arena", lambda w, d: bt.Value(1.0, arena=bt.Arena(F64))),
             ("FakeView(a64, [(0, 3)])", lambda w, d: FakeView(w.a64, [(0, 3)])),
             ("FakeView(a64, [(2**32 - 1, 2)])", lambda w, d: FakeView(w.a64, [(2**32 - 1, 2)])),
             ("FakeView(a64, [(-5, 3)])", lambda w, d: FakeView(w.a64, [(-5, 3)])),
             ("FakeView(None, None)", lambda w, d: FakeView(None, None)),
             ("linear.weight", lambda w, d: w.linear.weight), ("BytesIO()", lambda w, d: __import__("io").BytesIO())])


def _reentrant():
    return [
        ("RewindingNumber", lambda w, d: RewindingNumber(w)), ("NestedOpNumber", lambda w, d: NestedOpNumber(w)),
        ("RaisingNumber", lambda w, d: RaisingNumber()), ("WrongFloat", lambda w, d: WrongFloat()),
        ("HugeIndex(2**70)", lambda w, d: HugeIndex(2**70)), ("HugeIndex(-5)", lambda w, d: HugeIndex(-5)),
        ("HugeIndex(2**32 + 1)", lambda w, d: HugeIndex(2**32 + 1)),
        ("RewindingIterable", lambda w, d: RewindingIterable(w)),
        ("LyingLength(10**6)", lambda w, d: LyingLength(10**6)), ("LyingLength(-1)", lambda w, d: LyingLength(-1)),
        ("LyingLength(raises)", lambda w, d: LyingLength(ArgumentError("len"))),
        ("[1.0, RewindingNumber]", lambda w, d: [1.0, RewindingNumber(w)]),
        ("[v64, RewindingNumber]", lambda w, d: [w.v64, RewindingNumber(w)]),
        ("[RaisingNumber, 1.0]", lambda w, d: [RaisingNumber(), 1.0]),
        ("[[1.0, NestedOpNumber]]", lambda w, d: [[1.0, NestedOpNumber(w)]]),
        ("[RewindingNumber] ids", lambda w, d: [0, RewindingNumber(w)]),
        ("NamedLike('float32')", lambda w, d: NamedLike("float32")),
        ("NamedLike(raises)", lambda w, d: NamedLike(ArgumentError("name"))),
        ("NamedLike(3)", lambda w, d: NamedLike(3)),
    ]


def _arrays():
    if np is None:
        return []
    return [
        ("np.zeros(0)", lambda w, d: np.zeros(0)), ("np.ones(3)", lambda w, d: np.ones(3)),
        ("np.ones(3, float32)", lambda w, d: np.ones(3, dtype=np.float32)),
        ("np.arange(12.).reshape(3, 4)", lambda w, d: np.arange(12.0).reshape(3, 4)),
        ("np.arange(12.).reshape(3, 4).T", lambda w, d: np.arange(12.0).reshape(3, 4).T),
        ("np.arange(10.)[::3]", lambda w, d: np.arange(10.0)[::3]),
        ("np.arange(10.)[::-1]", lambda w, d: np.arange(10.0)[::-1]),
        ("np.ones((2, 2, 2))", lambda w, d: np.ones((2, 2, 2))), ("np.empty((0, 3))", lambda w, d: np.empty((0, 3))),
        ("np.empty((3, 0))", lambda w, d: np.empty((3, 0))), ("np.array(5.0)", lambda w, d: np.array(5.0)),
        ("np.float64(2.0)", lambda w, d: np.float64(2.0)), ("np.float32(nan)", lambda w, d: np.float32("nan")),
        ("np.int64(2**62)", lambda w, d: np.int64(2**62)), ("np.uint64(2**64 - 1)", lambda w, d: np.uint64(2**64 - 1)),
        ("np.array([0, 2], int8)", lambda w, d: np.array([0, 2], dtype=np.int8)),
        ("np.array([1, 2], uint64)", lambda w, d: np.array([1, 2], dtype=np.uint64)),
        ("np.array([2**40], int64)", lambda w, d: np.array([2**40], dtype=np.int64)),
        ("np.array([-1], int32)", lambda w, d: np.array([-1], dtype=np.int32)),
        ("np.array([True, False])", lambda w, d: np.array([True, False])),
        ("np.array([1+1j])", lambda w, d: np.array([1 + 1j])), ("np.array(['a'])", lambda w, d: np.array(["a"])),
        ("np.array([None], object)", lambda w, d: np.array([None], dtype=object)),
        ("np.array([1.0], '>f8')", lambda w, d: np.array([1.0], dtype=">f8")),
        ("np.array([1.0], float16)", lambda w, d: np.array([1.0], dtype=np.float16)),
        ("np.ones(4)[None, :, None][0]", lambda w, d: np.ones(4)[None, :, None][0]),
        ("np.zeros(3, [('a', 'f8')])", lambda w, d: np.zeros(3, dtype=[("a", "f8")])),
        ("np.array(['2020-01-01'], 'M8[D]')", lambda w, d: np.array(["2020-01-01"], dtype="M8[D]")),
        ("np.asfortranarray(ones((3, 2)))", lambda w, d: np.asfortranarray(np.ones((3, 2)))),
        ("np.lib.stride_tricks.as_strided(zero strides)",
         lambda w, d: np.lib.stride_tricks.as_strided(np.ones(1), shape=(4, 3), strides=(0, 0))),
        ("read-only array", _readonly_array), ("np.dtype('float32')", lambda w, d: np.dtype("float32")),
        ("np.float64", lambda w, d: np.float64),
    ]


def _readonly_array(w, d):
    a = np.arange(6.0)
    a.flags.writeable = False
    return a


ARGUMENTS = _numbers() + _texts() + _containers() + _burtorch_objects() + _reentrant() + _arrays()
_LIKELY = {"0", "1", "2", "3", "-1", "0.5", "-1.5", "True", "None", "str 'values'", "str 'grads'", "str 'float32'",
           "[1.0, 2.0]", "[1.0, 2.0, 3.0]", "[[1, 2], [3, 4]]", "(3, 4)", "(1, 2)", "[v64, 2.0, w64]", "[vec64, mat64]",
           "[mat64, mat64]", "burtorch file", "np.ones(3)", "np.arange(12.).reshape(3, 4)", "bt.float32",
           "bt.float64", "v64", "w64", "u64", "v32", "vec64", "mat64", "cols64", "cat64", "one64", "vec32", "mat32",
           "act64", "stale64", "stalevec", "a64", "cp", "linear", "qkv64", "q64", "[0, 1]", "2**32"}
PLAUSIBLE = [a for a in ARGUMENTS if a[0] in _LIKELY]

# A call known to succeed per target (by argument names): a third of the calls to these targets
# start from it with one or two arguments replaced, so they get past the checks that a random
# argument list fails at once and reach the code behind them.
TEMPLATES = {
    "bt.linear": ["vec64", "linear.weight"], "bt.attention": ["q64", "q64", "q64"],
    "bt.multi_head_attention": ["qkv64", "2"], "bt.softmax": ["mat64"], "bt.cross_entropy": ["mat64", "[0, 1, 2]"],
    "bt.layer_norm": ["mat64", "[1.0, 1.0, 1.0, 1.0]", "[0.0, 0.0, 0.0, 0.0]"], "bt.embedding": ["mat64", "[0, 1]"],
    "bt.lookup_linear": ["mat64", "[0, 1]", "mat64"],
    "bt.leaves": ["[[1, 2], [3, 4]]"], "bt.vector": ["[v64, 2.0, w64]"], "bt.cat": ["[vec64, mat64]"],
    "bt.hcat": ["[mat64, mat64]"], "bt.dot": ["vec64", "[1.0, 2.0, 3.0]"], "bt.vsum": ["cols64"],
    "bt.reduce_sum": ["[v64, 2.0, w64]"], "bt.reduce_mul": ["[v64, 2.0, w64]"], "bt.variance": ["[v64, 2.0, w64]"],
    "bt.inner_product": ["[v64, 2.0, w64]", "[v64, 2.0, w64]"],
    "bt.inner_product_with_bias": ["[v64, 2.0, w64]", "[1.0, 2.0, 3.0]", "v64"],
    "bt.backward": ["u64"], "bt.rewind": ["cp"], "bt.reserve": ["3"], "bt.Value": ["0.5"], "bt.add": ["v64", "w64"],
    "bt.Arena": ["bt.float32", "3"], "bt.numpy_view": ["vec64"], "bt.load_array": ["vec64", "np.ones(3)"],
    "bt.grad_oracle": ["mlp", "[[1, 2], [3, 4]]"],
    "io.dumps": ["vec64"], "io.loads": ["burtorch file", "vec64"], "io.decode_header": ["burtorch file", "64"],
    "io.save(BytesIO, ...)": ["vec64"], "io.load(BytesIO(x), ...)": ["burtorch file", "vec64"],
    "io.save_state_dict": ["linear", "str 'fuzz-out.bin'"], "io.load_state_dict": ["str 'fuzz-out.bin'", "linear"],
    "io.save": ["BytesIO()", "vec64"], "io.load": ["str 'fuzz-out.bin'", "vec64"],
    "nn.Linear": ["3", "2"], "nn.MLP": ["3", "[4, 3]"], "nn.Embedding": ["3", "2"], "nn.LayerNorm": ["3"],
    "nn.Neuron": ["3"], "nn.Layer": ["3", "2"], "nn.MultiHeadAttention": ["2", "1"],
    "nn.CausalSelfAttention": ["2", "1"], "nn.Block": ["2", "1"], "linear(x)": ["vec64"],
    "mlp(x)": ["[1.0, 1.0, 1.0, 1.0]"], "optim.SGD": ["linear"], "optim.Adam": ["mlp"], "optim.AdamW": ["linear"],
    "views.numpy_view": ["vec64"], "views.load_array": ["vec64", "np.ones(3)"], "viz.to_dot": ["u64"],
    "v64.backward": [], "vec64.set_data": ["[1.0, 2.0, 3.0]"], "mat64.columns": ["1", "3"],
    "mat64.reshape": ["2", "6"], "a64.numpy": ["0", "3"], "a64.write_bytes": ["0", "bytearray(16)"],
    "a64.read_bytes": ["0", "3"], "a64.value": ["2"], "a64.rewind": ["cp"],
}

# What a parameter of a given name usually takes, so that a call gets past its first check more
# often. Keys match a parameter name exactly or as its last word (x, weight -> "vector").
_HINT_NAMES = {
    "bytes": ["burtorch file", "burtorch file, one byte changed", "random bytes", "burtorch file, count 2**60",
              "state dict file", "b''", "memoryview(b'...')", "bytearray(16)"],
    "vector": ["vec64", "mat64", "cols64", "cat64", "one64", "qkv64", "q64", "vec32", "act64", "stalevec", "v64",
               "[1.0, 2.0, 3.0]", "[[1, 2], [3, 4]]", "[v64, 2.0, w64]", "np.arange(12.).reshape(3, 4)",
               "[1.0, RewindingNumber]", "[v64, RewindingNumber]", "RewindingIterable", "[vec64, mat64]"],
    "what": ["str 'values'", "str 'grads'", "str 'both'", "None", "str ''", "str '\\x00'"],
    "dtype": ["bt.float32", "bt.float64", "str 'float32'", "NamedLike('float32')", "np.dtype('float32')",
              "np.float64", "NamedLike(raises)", "None"],
    "arena": ["a64", "a32", "full", "bt.Arena(capacity=1)", "None"],
    "shape": ["(3, 4)", "(1, 2)", "(2**31, 2**31)", "(0,)", "(-1, 3)", "3", "(2, 1)"],
    "number": ["0.5", "-1.5", "0", "1", "nan", "inf", "1e+308", "RewindingNumber", "RaisingNumber", "NestedOpNumber",
               "9223372036854775808", "-1"],
    "int": ["0", "1", "2", "3", "7", "-1", "2147483648", "4294967296", "4294967297", "9223372036854775807",
            "HugeIndex(2**70)", "HugeIndex(-5)", "RewindingNumber", "True", "np.int64(2**62)"],
    "ids": ["[0, 1]", "0", "2", "np.array([0, 2], int8)", "[RewindingNumber] ids", "HugeIndex(2**70)",
            "np.array([1, 2], uint64)", "np.array([-1], int32)", "[]", "np.array([2**40], int64)"],
    "checkpoint": ["cp", "cp_discarded", "cp_other"],
    "model": ["linear", "mlp"],
    "file": ["str 'fuzz-out.bin'", "str ''", "None"],
}
HINTS = {
    **{k: "bytes" for k in ("data", "buf", "payload", "blob")},
    **{k: "vector" for k in ("values", "x", "vector", "v", "table", "logits", "qkv", "q", "k", "weight", "w", "params",
                             "gamma", "beta", "bias", "other", "root", "node", "a", "b", "xs", "matrices", "vectors",
                             "targets_", "context")},
    "what": "what", "dtype": "dtype", "arena": "arena", "shape": "shape",
    **{k: "number" for k in ("seed", "lr", "eps", "slope", "scale", "factor", "c", "momentum", "weight_decay", "a_",
                             "init_range")},
    **{k: "int" for k in ("first", "last", "index", "start", "stop", "rows", "cols", "heads", "sequences", "nin",
                          "nout", "dim", "num", "nodes", "r", "k", "chunk", "vocab", "block", "emb", "hidden",
                          "layers", "buffers", "size", "n")},
    **{k: "ids" for k in ("ids", "targets")},
    **{k: "checkpoint" for k in ("checkpoint", "cp")},
    **{k: "model" for k in ("model", "module", "module_or_mapping", "into")},
    **{k: "file" for k in ("file", "path")},
}


def hint_for(param: str) -> list:
    """The likely arguments of a parameter named `param` (empty if the name says nothing)."""
    names = _HINT_NAMES.get(HINTS.get(param) or HINTS.get(param.split("_")[-1], ""), [])
    by_name = dict(ARGUMENTS)
    return [(n, by_name[n]) for n in names if n in by_name]

# Keyword names the API uses, tried with arguments from the same space.
KEYWORDS = ["seed", "wrt", "dtype", "arena", "label", "shape", "data", "what", "writable", "copy", "capacity",
            "bias", "causal", "scale", "return_weights", "heads", "sequences", "eps", "lr", "momentum", "act",
            "atomic", "mmap", "slope", "first", "last", "rows", "cols", "chunk"]
