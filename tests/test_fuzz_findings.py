"""Regressions for the bugs found by the stateful model test, the API fuzzer, and by reading the
bindings while writing them (each section says which), with the smallest reproducer.
"""
import pytest

import burtorch as bt


def counts(arena):
    return (arena.num_nodes, arena.num_records, arena.num_args)


# ---------------------------------------------------------------- a failed op leaves no constants behind
# Numbers passed where Values are expected became constant leaves before the op checked its other
# operands, shapes and capacity; when the op then failed, the constants stayed in the arena.
# Found by the stateful model test (arenas with room for a few nodes).
def full_but(room):
    """An arena holding one Value `x`, with room for exactly `room` more nodes."""
    arena = bt.Arena(bt.float64, capacity=1 + room)
    return arena, bt.Value(1.0, arena=arena)


FAILING_AFTER_CONSTANTS = {
    # room for the constants, not for the op's output
    "reduce with numbers": (2, lambda a, x: bt.reduce_sum([x, 1.0, 2.0]), MemoryError),
    "binary function with a number": (1, lambda a, x: bt.add(x, 1.0), MemoryError),
    "inner product with numbers": (1, lambda a, x: bt.inner_product([x], [3.0]), MemoryError),
    "vector plus a list": (2, lambda a, x: bt.vector([x, x]) + [1.0, 2.0], MemoryError),
    "dot with a list": (2, lambda a, x: bt.dot(bt.vector([x, x]), [1.0, 2.0]), MemoryError),
    # a later operand is wrong
    "inner product, stale second list": (8, None, bt.StaleValueError),
    "linear, shape mismatch": (8, lambda a, x: bt.linear([1.0, 2.0, 3.0], bt.vector([x]).reshape(1, 1)), ValueError),
    "layer_norm, gamma of the wrong size": (
        8, lambda a, x: bt.layer_norm(bt.vector([x, x]), [1.0, 1.0, 1.0], [0.0, 0.0]), ValueError),
    "cross entropy, bad target": (8, lambda a, x: bt.cross_entropy([1.0, 2.0], 5), IndexError),
    "hcat of a list and a vector": (8, lambda a, x: bt.hcat([bt.vector([x]).reshape(1, 1), [[1.0, 2.0], [3.0, 4.0]]]),
                                    ValueError),
}


@pytest.mark.parametrize("case", sorted(FAILING_AFTER_CONSTANTS))
def test_a_failed_op_takes_back_the_constants_it_created(case):
    room, call, error = FAILING_AFTER_CONSTANTS[case]
    arena, x = full_but(room)
    with arena:
        if call is None:  # inner_product([1.0, 2.0], [stale, 3.0])
            cp = arena.checkpoint()
            dead = bt.Value(5.0, arena=arena)
            arena.rewind(cp)
            call = lambda a, x: bt.inner_product([1.0, 2.0], [dead, 3.0])  # noqa: E731
        before = counts(arena)
        with pytest.raises(error):
            call(arena, x)
        assert counts(arena) == before
        assert x.alive and x.data == 1.0


def test_constants_made_by_python_code_inside_an_argument_survive_the_outer_failure():
    arena = bt.Arena(bt.float64)
    kept = []

    class Sneaky:
        def __float__(self):
            kept.append(bt.vector([bt.Value(7.0, arena=arena), 8.0]))  # a nested call with a constant
            return 1.0

    with arena:
        W = bt.leaves([[1.0, 2.0]])
        with pytest.raises(ValueError):
            bt.linear([Sneaky(), 2.0, 3.0], W)  # x has 3 inputs, W expects 2
        assert kept[0].alive and kept[0].data == [7.0, 8.0]


def test_the_constants_of_a_successful_op_stay():
    x = bt.Value(2.0)
    y = bt.add(x, 3.0)
    assert y.data == 5.0 and y.children[1].data == 3.0 and y.children[1].alive


# ---------------------------------------------------------------- a label that cannot be stored
# Value(x, label="\ud800") with labels on raised UnicodeEncodeError after the node was created.
# Found by the stateful model test.
def test_a_value_whose_label_cannot_be_encoded_is_not_created():
    arena = bt.Arena()
    with bt.labels(True):
        with pytest.raises(UnicodeEncodeError):
            bt.Value(1.0, arena=arena, label="\ud800")
        assert arena.num_nodes == 0
        v = bt.Value(2.0, arena=arena, label="nul\x00inside \u00e9")
        assert v.label == "nul\x00inside \u00e9" and arena.num_nodes == 1


# ---------------------------------------------------------------- reshape to a product that wraps around
# reshape checked rows * cols == size in 64 bits: (7, 0x6db6db6db6db6db7) wraps to 1, and a
# one-element vector became a (7, 3067833783) matrix (ops then failed on absurd sizes at best).
# Found reading the bindings' integer arithmetic.
@pytest.mark.parametrize("shape", [(7, 0x6DB6DB6DB6DB6DB7), (0x6DB6DB6DB6DB6DB7, 7), (2**32 + 1, 1), (1, 2**32 + 1)])
def test_reshape_refuses_dimensions_whose_product_wraps(shape):
    v = bt.leaves([1.0])
    with pytest.raises(ValueError):
        v.reshape(*shape)
    assert bt.leaves([1.0, 2.0, 3.0, 4.0]).reshape(2, 2).shape == (2, 2)


# ---------------------------------------------------------------- scale_grad by inf or nan
# scale_grad(inf) turns the zero grads of interior nodes into nan without telling the arena, whose
# next sweep then skipped resetting them (it assumes untouched interior grads are zero). Found by
# the stateful model test.
@pytest.mark.parametrize("factor", [float("inf"), float("-inf"), float("nan")])
def test_interior_grads_scaled_by_a_non_finite_factor_are_reset(factor):
    x = bt.Value(2.0)
    h = bt.vector([x * 3.0])
    loss = bt.vsum(h * h)
    h.scale_grad(factor)
    loss.backward()
    assert h.grad == [12.0] and x.grad == 36.0


# ---------------------------------------------------------------- write_bytes at a huge offset
# write_bytes formed first + count in signed 64-bit arithmetic before checking first: undefined
# behaviour for first near 2**63, whatever the error message then said. Found reading the bindings.
@pytest.mark.parametrize("first", [2**63 - 1, 2**63 - 2, -1])
def test_write_bytes_checks_the_offset_before_adding_the_count(first):
    arena = bt.Arena()
    bt.Value(1.0, arena=arena)
    with pytest.raises(IndexError):
        arena.write_bytes(first, b"\0" * 16)


# ---------------------------------------------------------------- the error an inner product reports
# inner_product placed the constants of x before checking the Values of w: with x's arena full, a w
# Value of another dtype was reported as a MemoryError instead of the TypeError it is. Found by the
# stateful model test.
def test_inner_product_checks_every_value_before_creating_constants():
    arena, x = full_but(0)
    other = bt.Value(1.0, dtype=bt.float32)
    with pytest.raises(TypeError):
        bt.inner_product([2.0, x], [x, other])
    with pytest.raises(ValueError, match="another arena"):
        bt.inner_product([2.0, x], [x, bt.Value(1.0, arena=bt.Arena(bt.float64))])
    assert counts(arena) == (1, 0, 0)


# ---------------------------------------------------------------- buffers without strides
# numpy's datetime64 scalar exports its 8 raw bytes as a 1-D buffer without strides, although
# strides were asked for; reading a list of them as rows dereferenced the missing strides (SIGSEGV,
# "load of null pointer" under UBSan). Found by the API fuzzer: bt.linear(x, datetime64 array).
@pytest.mark.parametrize("make", [
    lambda np: np.array(["2020-01-01"], "M8[D]"),
    lambda np: [np.datetime64("2020-01-01")],
    lambda np: [[np.datetime64("2020-01-01")]],
    lambda np: np.array([1, 2], "m8[s]"),
])
def test_datetime_buffers_are_refused_not_read(make):
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match="not a number"):
        bt.leaves(make(np))
    with pytest.raises(TypeError):
        bt.linear([1.0], make(np))
    assert bt.leaves([np.float64(2.0), np.int32(3)]).data == [2.0, 3.0]


# ---------------------------------------------------------------- clear errors from the Python tools
# Wrong arguments reached attribute lookups deep inside: "'Vector' object has no attribute 'stats'"
# (memory_report), "'DType' object has no attribute 'loss'" (grad_oracle), "'float' object has no
# attribute 'grad'" (zero_grad). Found by the API fuzzer.
@pytest.mark.parametrize("call", [
    lambda: bt.memory_report(bt.leaves([1.0])),
    lambda: bt.memory_report(None, file=3),
    lambda: bt.grad_oracle(bt.float64, [(1,)]),
    lambda: bt.zero_grad([1.0, 2.0]),
    lambda: bt.zero_grad((bt.current_arena(), 0, 3)),
])
def test_tools_given_the_wrong_type_raise_type_error(call):
    with pytest.raises(TypeError):
        call()


def test_zero_grad_takes_values_and_vectors():
    a, v = bt.Value(1.0), bt.leaves([1.0, 2.0])
    a.grad = 3.0
    v.set_grad([4.0, 5.0])
    bt.zero_grad([a, v])
    assert a.grad == 0.0 and v.grad == [0.0, 0.0]


# ---------------------------------------------------------------- Module.train with a module as the mode
# model.train(model) stored the module as its own `training` attribute, which children() then
# walked as a submodule: RecursionError. Found by the API fuzzer.
def test_module_train_takes_a_bool_only():
    from burtorch.nn import MLP

    model = MLP(2, [3, 1])
    with pytest.raises(TypeError):
        model.train(model)
    assert model.eval().training is False and model.train().training is True
    assert all(m.training for _, m in model.children())


# ---------------------------------------------------------------- layer sizes of zero
# nn.Linear(0, 2) (and MLP, MakemoreMLP(block=0) through it) failed with "float division by zero",
# Linear(-1, 2) with "math domain error", MultiHeadAttention(4, 0) (CausalSelfAttention, Block,
# MiniGPT) with "integer modulo by zero". Found by the API fuzzer.
@pytest.mark.parametrize("make", [
    lambda nn: nn.Linear(0, 2), lambda nn: nn.Linear(-1, 2), lambda nn: nn.MLP(0, [2]),
    lambda nn: nn.MakemoreMLP(vocab=5, block=0, emb=2, hidden=2), lambda nn: nn.MultiHeadAttention(4, 0),
    lambda nn: nn.Block(4, 0), lambda nn: nn.MiniGPT(vocab=5, block=2, dim=4, layers=1, heads=0),
])
def test_layer_sizes_below_one_are_value_errors(make):
    from burtorch import nn

    with pytest.raises(ValueError, match="at least 1|positive"):
        make(nn)


# ---------------------------------------------------------------- load_state_dict of something not a mapping
# module.load_state_dict(range(2**40)) asked `"weight" in range(2**40)`, which CPython answers by
# scanning the whole range in C: a hang no signal interrupts. Found by the API fuzzer.
@pytest.mark.parametrize("state", [range(2**40), [("weight", [1.0])], 3.0, "weight"])
def test_load_state_dict_wants_a_mapping(state):
    from burtorch.nn import Linear

    with pytest.raises(TypeError, match="mapping"):
        Linear(2, 1).load_state_dict(state)


# ---------------------------------------------------------------- Module.param with a name that is not a str
# Found by the API fuzzer (long run): `linear.param(<an SGD>, 3)` registered the parameter under the
# SGD before failing, and every later state_dict() raised a TypeError from deep inside.
@pytest.mark.parametrize("make_name", [lambda: bt.optim.SGD([bt.leaves([1.0])], lr=0.1), lambda: 3,
                                       lambda: "not an identifier", lambda: ""])
def test_module_param_refuses_bad_names_and_registers_nothing(make_name):
    name = make_name()
    lin = bt.nn.Linear(2, 2)
    before = list(lin.state_dict())
    with pytest.raises(TypeError, match="identifier"):
        lin.param(name, 3)
    assert list(lin.state_dict()) == before
    with pytest.raises(ValueError, match="unknown init"):
        lin.param("extra", 3, init="bogus")
    assert list(lin.state_dict()) == before


# ---------------------------------------------------------------- the compressor base class
# Found by the API fuzzer (long run): `Compressor(3, 3, <object>)` took any object as its seed, and
# the repr of a bare Compressor (no omega or alpha) raised TypeError.
def test_compressor_checks_its_seed_and_has_a_repr():
    from burtorch.fl.compressors import Compressor, TopK

    with pytest.raises(TypeError, match="seed"):
        Compressor(3, 3, object())
    with pytest.raises(TypeError, match="seed"):
        TopK(5, 2).seed(1.5)
    assert repr(Compressor(3, 3)) == "Compressor(d=3, alpha=?)"
    assert repr(TopK(5, 2)) == "TopK(d=5, k=2, alpha=0.4)"
