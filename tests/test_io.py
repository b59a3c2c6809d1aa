"""burtorch.io: round trips for every dtype and `what`, and rejection of every kind of bad file."""
import io
import os
import random
import struct

import pytest

import burtorch as bt
import burtorch.io as bio
from burtorch.io import FormatError
from burtorch.io import format as fmt

DTYPES = [bt.float32, bt.float64]
WHATS = ["values", "grads", "both"]


class View:
    """The duck type of a view: an arena and spans of (first, length)."""

    def __init__(self, arena, spans):
        self.arena = arena
        self.spans = spans


def make_nodes(dtype, n=10, seed=1.0):
    arena = bt.Arena(dtype)
    vals = [bt.Value(seed * (i + 1) / 3.0, arena=arena) for i in range(n)]
    for i, v in enumerate(vals):
        v.grad = -seed * (i + 0.5) / 7.0
    return arena, vals


def snapshot(arena):
    n = arena.num_nodes
    return (n, arena.num_records, arena.read_bytes(0, n, "values"), arena.read_bytes(0, n, "grads"))


def scramble(arena):
    """Overwrites every value and grad so a load has something to restore."""
    n = arena.num_nodes
    fill = struct.pack("=d" if arena.dtype == bt.float64 else "=f", 123.25) * n
    arena.write_bytes(0, fill, "values")
    arena.write_bytes(0, fill, "grads")


def target_forms(arena, vals):
    """The same 6 nodes (slots 2..7) expressed in every accepted form."""
    return {
        "values-list": vals[2:8],
        "range": (arena, 2, 8),
        "view": View(arena, [(2, 3), (5, 3)]),
        "mixed-list": [vals[2], (arena, 3, 5), View(arena, [(5, 2)]), vals[7]],
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("what", WHATS)
@pytest.mark.parametrize("form", ["values-list", "range", "view", "mixed-list"])
def test_round_trip_bytes_and_file(dtype, what, form, tmp_path):
    arena, vals = make_nodes(dtype)
    targets = target_forms(arena, vals)[form]
    before = snapshot(arena)
    data = bio.dumps(targets, what)
    path = tmp_path / "nodes.bt"
    bio.save(path, targets, what=what)
    assert path.read_bytes() == data
    itemsize = 4 if dtype == bt.float32 else 8
    assert len(data) == fmt.FIXED_SIZE + 6 * itemsize * (2 if what == "both" else 1)

    scramble(arena)
    bio.loads(data, targets, what)
    _assert_slots_restored(arena, before, 2, 8, what)

    scramble(arena)
    bio.load(path, targets, what=what)
    _assert_slots_restored(arena, before, 2, 8, what)

    scramble(arena)
    bio.load(io.BytesIO(data), targets, what=what)
    _assert_slots_restored(arena, before, 2, 8, what)


def _assert_slots_restored(arena, before, first, last, what):
    _, _, values, grads = before
    size = 4 if arena.dtype == bt.float32 else 8
    lo, hi = first * size, last * size
    if what in ("values", "both"):
        assert arena.read_bytes(first, last, "values") == values[lo:hi]
    if what in ("grads", "both"):
        assert arena.read_bytes(first, last, "grads") == grads[lo:hi]
    if what == "values":
        assert arena.read_bytes(first, last, "grads") != grads[lo:hi]  # untouched: still scrambled


def test_value_list_and_range_make_identical_files():
    arena, vals = make_nodes(bt.float64)
    assert bio.dumps(vals[1:4], "both") == bio.dumps((arena, 1, 4), "both")
    assert bio.dumps(vals[3]) == bio.dumps((arena, 3, 4))


def test_header_fields_match_the_documented_layout():
    arena, vals = make_nodes(bt.float32, 3)
    data = bio.dumps(vals, "grads")
    assert data[:4] == b"BURT"
    assert struct.unpack_from("<H", data, 4)[0] == 1
    assert data[6] == 1 and data[7] == 2  # float32, grads
    assert struct.unpack_from("<I", data, 12)[0] == 40
    assert struct.unpack_from("<QQ", data, 16) == (3, 12)
    assert struct.unpack("<3f", data[40:]) == tuple(v.grad for v in vals)


def test_load_one_block_from_a_file_with_both(tmp_path):
    arena, vals = make_nodes(bt.float64, 4)
    data = bio.dumps(vals, "both")
    expected_values = [v.data for v in vals]
    expected_grads = [v.grad for v in vals]
    scramble(arena)
    bio.loads(data, vals, "grads")
    assert [v.grad for v in vals] == expected_grads
    assert [v.data for v in vals] == [123.25] * 4
    bio.loads(data, vals, "values")
    assert [v.data for v in vals] == expected_values
    bio.loads(data, vals, None)  # None: whatever the file holds


def test_into_another_arena_of_the_same_dtype():
    a1, v1 = make_nodes(bt.float64, 5, seed=2.0)
    a2, v2 = make_nodes(bt.float64, 5, seed=9.0)
    bio.loads(bio.dumps((a1, 0, 5), "both"), (a2, 0, 5), "both")
    assert [v.data for v in v2] == [v.data for v in v1]
    assert [v.grad for v in v2] == [v.grad for v in v1]


def test_zero_nodes_round_trip():
    arena, _ = make_nodes(bt.float64, 2)
    data = bio.dumps((arena, 1, 1))
    assert len(data) == fmt.FIXED_SIZE
    bio.loads(data, (arena, 0, 0))


def test_other_endianness_is_byteswapped(monkeypatch):
    for dtype, code in [(bt.float32, "f"), (bt.float64, "d")]:
        arena, vals = make_nodes(dtype, 4)
        numbers = [v.data for v in vals]
        foreign = 1 - fmt.NATIVE_BYTEORDER
        payload = struct.pack((">" if foreign else "<") + "4" + code, *numbers)
        monkeypatch.setattr(fmt, "NATIVE_BYTEORDER", foreign)
        data = fmt.encode_header(dtype.name, "values", 4, payload) + payload
        monkeypatch.undo()
        for targets in (vals, (arena, 0, 4)):
            scramble(arena)
            bio.loads(data, targets)
            assert [v.data for v in vals] == numbers


# ---- bad input: clear errors, arena untouched ------------------------------------------------

def expect_rejected(arena, exc, fn, match=None):
    before = snapshot(arena)
    with pytest.raises(exc, match=match):
        fn()
    assert snapshot(arena) == before


def test_wrong_dtype_count_what_are_rejected():
    a32, v32 = make_nodes(bt.float32, 4)
    a64, v64 = make_nodes(bt.float64, 4)
    data = bio.dumps(v64, "values")
    expect_rejected(a32, FormatError, lambda: bio.loads(data, v32), "float64 numbers")
    expect_rejected(a64, FormatError, lambda: bio.loads(data, v64[:3]), "4 nodes")
    expect_rejected(a64, FormatError, lambda: bio.loads(data, v64, "grads"), "holds values")
    expect_rejected(a64, FormatError, lambda: bio.loads(data, v64, "both"), "holds values")
    expect_rejected(a64, ValueError, lambda: bio.loads(data, v64, "weights"), "what must be")


def test_foreign_and_truncated_files_are_rejected(tmp_path):
    arena, vals = make_nodes(bt.float64, 4)
    data = bio.dumps(vals, "both")
    expect_rejected(arena, FormatError, lambda: bio.loads(b"", vals), "not a burtorch file")
    expect_rejected(arena, FormatError, lambda: bio.loads(b"PK\x03\x04" + bytes(60), vals), "not a burtorch")
    expect_rejected(arena, FormatError, lambda: bio.loads(data[:20], vals), "truncated")
    expect_rejected(arena, FormatError, lambda: bio.loads(data[:-1], vals, "both"), "truncated")
    expect_rejected(arena, FormatError, lambda: bio.loads(data + b"\0", vals, "both"), "after the payload")
    path = tmp_path / "torn.bt"
    path.write_bytes(data[:-8])
    expect_rejected(arena, FormatError, lambda: bio.load(path, vals, "both"), "truncated")
    path.write_bytes(data + b"\0")
    expect_rejected(arena, FormatError, lambda: bio.load(path, vals, "both"), "after the payload")
    path.write_bytes(b"")
    expect_rejected(arena, FormatError, lambda: bio.load(path, vals), "not a burtorch file")


def test_decode_header_takes_a_size_in_bytes():
    # found by BURTORCH_FUZZ=long: a Decimal NaN size raised decimal.InvalidOperation
    from decimal import Decimal

    data = bio.dumps(make_nodes(bt.float64, 3)[1])
    assert bio.decode_header(data, len(data)).count == 3
    for size in (Decimal("nan"), Decimal(len(data)), float(len(data)), "64", None):
        with pytest.raises(TypeError, match="total_size must be an int"):
            bio.decode_header(data, size)
    with pytest.raises(ValueError, match="at least 0"):
        bio.decode_header(data, -1)


def test_newer_version_is_rejected_by_name():
    arena, vals = make_nodes(bt.float64, 2)
    data = bytearray(bio.dumps(vals))
    data[4] = 2
    expect_rejected(arena, FormatError, lambda: bio.loads(bytes(data), vals), "version 2")


def test_payload_corruption_is_caught_by_checksum():
    arena, vals = make_nodes(bt.float64, 3)
    data = bytearray(bio.dumps(vals))
    data[-1] ^= 0x10
    expect_rejected(arena, FormatError, lambda: bio.loads(bytes(data), vals), "checksum")


def test_stale_target_is_rejected_before_writing():
    arena, vals = make_nodes(bt.float64, 3)
    cp = arena.checkpoint()
    extra = bt.Value(5.0, arena=arena)
    data = bio.dumps(vals + [extra])
    arena.rewind(cp)
    bt.Value(6.0, arena=arena)  # reuses the slot, so the handle is stale (not merely out of range)
    expect_rejected(arena, bt.StaleValueError, lambda: bio.loads(data, vals + [extra]))
    expect_rejected(arena, bt.StaleValueError, lambda: bio.loads(data, [vals[0], (arena, 1, 3), extra]))
    arena.rewind(cp)
    expect_rejected(arena, IndexError, lambda: bio.loads(data, (arena, 0, 4)))


def test_bad_target_types():
    arena, vals = make_nodes(bt.float64, 3)
    data = bio.dumps(vals)
    with pytest.raises(TypeError):
        bio.dumps([1.0, 2.0])
    with pytest.raises(TypeError):
        bio.dumps(object())
    with pytest.raises(ValueError, match="empty"):
        bio.dumps([])
    with pytest.raises(IndexError):
        bio.dumps((arena, 2, 9))
    a32, v32 = make_nodes(bt.float32, 1)
    with pytest.raises(ValueError, match="mix dtypes"):
        bio.dumps(vals + v32)
    with pytest.raises(ValueError, match="mix dtypes"):
        bio.dumps([(arena, 0, 1), (a32, 0, 1)])
    with pytest.raises(TypeError):
        bio.loads("not bytes", vals)
    expect_rejected(arena, TypeError, lambda: bio.loads(data, [vals[0], 3.0, vals[1]]))


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    arena, vals = make_nodes(bt.float64, 3)
    path = tmp_path / "keep.bt"
    bio.save(path, vals)
    good = path.read_bytes()
    cp = arena.checkpoint()
    gone = bt.Value(1.0, arena=arena)
    arena.rewind(cp)
    with pytest.raises(bt.StaleValueError):
        bio.save(path, vals + [gone])
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["keep.bt"]


def test_in_place_save_shrinks_the_file(tmp_path):
    arena, vals = make_nodes(bt.float64, 6)
    path = tmp_path / "inplace.bt"
    bio.save(path, vals, atomic=False)
    bio.save(path, vals[:2], atomic=False)
    assert path.read_bytes() == bio.dumps(vals[:2])


def test_large_range_round_trips_through_a_file(tmp_path):
    arena = bt.Arena(bt.float64)
    n = 200_000  # 1.6 MB payload
    kept = [bt.Value(float(i), arena=arena) for i in range(n)]  # noqa: F841  (dropped nodes would be reclaimed)
    path = tmp_path / "big.bt"
    bio.save(path, (arena, 0, n))
    scramble(arena)
    bio.load(path, (arena, 0, n))
    assert arena.value(n - 1).data == float(n - 1) and arena.value(12345).data == 12345.0


# ---- state dicts ---------------------------------------------------------------------------

def test_state_dict_round_trip(tmp_path):
    arena, vals = make_nodes(bt.float32, 9)
    sd = {"w": View(arena, [(0, 6)]), "b": vals[6:8], "scale": vals[8]}
    path = tmp_path / "model.bt"
    bio.save_state_dict(sd, path)
    plain = bio.load_state_dict(path)
    assert list(plain) == ["w", "b", "scale"]
    assert plain["w"].typecode == "f" and list(plain["b"]) == [vals[6].data, vals[7].data]
    expected = arena.read_bytes(0, 9, "values")
    scramble(arena)
    assert bio.load_state_dict(path, sd) is sd
    assert arena.read_bytes(0, 9, "values") == expected


def test_state_dict_module_duck_type(tmp_path):
    arena, vals = make_nodes(bt.float64, 4)

    class Module:
        def state_dict(self):
            return {"layer.weight": (arena, 0, 3), "layer.bias": vals[3]}

    path = tmp_path / "m.bt"
    bio.save_state_dict(Module(), path)
    expected = arena.read_bytes(0, 4, "values")
    scramble(arena)
    bio.load_state_dict(path, Module())
    assert arena.read_bytes(0, 4, "values") == expected


def test_state_dict_mismatches_are_rejected(tmp_path):
    arena, vals = make_nodes(bt.float64, 4)
    path = tmp_path / "m.bt"
    bio.save_state_dict({"a": vals[:2], "b": vals[2:]}, path)
    expect_rejected(arena, FormatError, lambda: bio.load_state_dict(path, {"a": vals[:2]}), "missing")
    expect_rejected(arena, FormatError, lambda: bio.load_state_dict(path, {"a": vals[:2], "b": vals[2:3]}),
                    "'b'")
    a32, v32 = make_nodes(bt.float32, 4)
    expect_rejected(a32, FormatError, lambda: bio.load_state_dict(path, {"a": v32[:2], "b": v32[2:]}),
                    "float64")
    bio.load_state_dict(path, {"a": vals[:2]}, strict=False)  # partial load allowed on request
    with pytest.raises(FormatError, match="state dict"):
        bio.load(path, vals)
    bio.save(path, vals)
    with pytest.raises(FormatError, match="node range"):
        bio.load_state_dict(path)
    with pytest.raises(ValueError, match="empty"):
        bio.save_state_dict({}, path)


def test_corrupt_name_table_is_rejected(tmp_path):
    arena, vals = make_nodes(bt.float64, 2)
    path = tmp_path / "m.bt"
    bio.save_state_dict({"alpha": vals[0], "beta": vals[1]}, path)
    data = bytearray(path.read_bytes())
    data[fmt.FIXED_SIZE + 6] ^= 1  # a byte of the first name
    path.write_bytes(bytes(data))
    expect_rejected(arena, FormatError, lambda: bio.load_state_dict(path, {"alpha": vals[0], "beta": vals[1]}),
                    "header checksum")


# ---- fuzzing: any bytes either load correctly or raise FormatError, arena untouched ------------

FUZZ_ARENA, FUZZ_VALUES = make_nodes(bt.float64, 5, seed=3.0)
FUZZ_GOOD = bio.dumps(FUZZ_VALUES, "both")


def fuzz_once(data, what="both"):
    before = snapshot(FUZZ_ARENA)
    with pytest.raises(FormatError):
        bio.loads(data, (FUZZ_ARENA, 0, 5), what)
    assert snapshot(FUZZ_ARENA) == before


# The fuzz inputs come from fixed seeds (the same cases every run) and are far more than the 200-500
# hypothesis examples these tests drew before, in a tenth of the time: a load that rejects takes
# ~15 us, a hypothesis example ~0.5 ms. Where the space is small (every truncation, every bit) the
# loop covers all of it.

def fuzz_all(cases):
    for data, what in cases:
        try:
            fuzz_once(data, what)
        except Exception as e:  # name the input that got through (or raised the wrong error)
            raise AssertionError(f"input {data!r}, what={what!r}: {type(e).__name__}: {e}") from e


def random_byte_strings(seed, count=2000, max_size=200):
    """Byte strings of every length up to max_size in the shapes hypothesis favours (all zeros,
    all 0xff, a few extreme bytes), then ``count`` of random length and random bytes."""
    rng = random.Random(seed)
    edges = [0, 1, 0x7F, 0x80, 0xFF]
    for n in range(max_size + 1):
        yield bytes(n)
        yield b"\xff" * n
        yield bytes(rng.choice(edges) for _ in range(n))
    for _ in range(count):
        yield rng.randbytes(rng.randint(0, max_size))


def test_fuzz_random_bytes():
    fuzz_all((data, "both") for data in random_byte_strings(1))


def test_fuzz_random_bytes_after_magic():
    fuzz_all((b"BURT" + data, "both") for data in random_byte_strings(2))
    # and a good file's header cut anywhere, then random bytes: the checks past the magic see
    # plausible fields, not only a wrong version
    rng = random.Random(3)
    fuzz_all((FUZZ_GOOD[:rng.randint(4, fmt.FIXED_SIZE)] + rng.randbytes(rng.randint(0, 200)), "both")
             for _ in range(500))


def test_fuzz_every_truncation():
    fuzz_all((FUZZ_GOOD[:cut], "both") for cut in range(len(FUZZ_GOOD)))


def test_fuzz_single_bit_flips_are_all_detected():
    def flipped(bit):
        data = bytearray(FUZZ_GOOD)
        data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)

    fuzz_all((flipped(bit), what) for bit in range(len(FUZZ_GOOD) * 8) for what in ["values", "grads", "both", None])


def test_fuzz_byte_overwrites():
    def overwritten(rng):
        data = bytearray(FUZZ_GOOD)
        for pos in rng.sample(range(len(data)), rng.randint(1, 8)):  # 1 to 8 distinct positions
            data[pos] ^= rng.randint(1, 255)
        return bytes(data)

    rng = random.Random(4)
    fuzz_all((overwritten(rng), "both") for _ in range(3000))


# ---- real bt.Vector views ------------------------------------------------------------------

def test_vector_round_trip_and_stale_vector():
    arena = bt.Arena(bt.float32)
    with arena:
        W = bt.leaves([0.5 * i for i in range(12)], shape=(3, 4), dtype=bt.float32)
        cols = W.columns(1, 3)  # three spans of two
        data = bio.dumps([W, cols], "values")
        expected = arena.read_bytes(0, 12, "values")
        scramble(arena)
        bio.loads(data, [W, cols])
        assert arena.read_bytes(0, 12, "values") == expected
        cp = arena.checkpoint()
        tmp = bt.leaves([1.0, 2.0], dtype=bt.float32)
        saved = bio.dumps(tmp)
        arena.rewind(cp)
        bt.leaves([3.0, 4.0], dtype=bt.float32)  # reuses the slots: the old vector is stale
    expect_rejected(arena, bt.StaleValueError, lambda: bio.loads(saved, tmp))
    with pytest.raises(bt.StaleValueError):
        bio.dumps(tmp)


def test_state_dict_of_vectors(tmp_path):
    arena = bt.Arena(bt.float64)
    with arena:
        sd = {"w": bt.leaves([1.0, 2.0, 3.0, 4.0], shape=(2, 2)), "b": bt.leaves([5.0, 6.0])}
    bio.save_state_dict(sd, tmp_path / "sd.bt")
    loaded = bio.load_state_dict(tmp_path / "sd.bt")
    assert list(loaded["w"]) == [1.0, 2.0, 3.0, 4.0] and list(loaded["b"]) == [5.0, 6.0]
    sd["w"].set_data([0.0] * 4)
    bio.load_state_dict(tmp_path / "sd.bt", sd)
    assert sd["w"].data == [1.0, 2.0, 3.0, 4.0]


def test_state_dict_of_a_real_module(tmp_path):
    from burtorch import nn

    model = nn.MLP(3, [4, 2])
    path = tmp_path / "mlp.bt"
    bio.save_state_dict(model, path)
    saved = {name: list(p.data) for name, p in model.state_dict().items()}
    for p in model.parameters():
        p.set_data([0.0] * p.size)
    model.load_state_dict(bio.load_state_dict(path))  # the module's own loader takes the arrays
    assert {name: list(p.data) for name, p in model.state_dict().items()} == saved
    for p in model.parameters():
        p.set_data([0.0] * p.size)
    bio.load_state_dict(path, model)  # or write straight into the module
    assert {name: list(p.data) for name, p in model.state_dict().items()} == saved
