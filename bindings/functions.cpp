// Module-level op functions: bt.relu(x), bt.add(a, b), bt.reduce_sum(xs), bt.inner_product(x, w) ...
// Raw METH_O / METH_FASTCALL functions: they are as hot as Value's own number slots.
#include "common.hpp"

#include <string>

namespace btpy {

using bt::Op;

static PyObject* emit_nary(bt::ArenaBase* arena, PyObject* owner, Op op, const std::vector<uint32_t>& idx) {
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(arena, [&](auto& A) { return A.nary(op, idx.data(), idx.size()); });
        if (bt::nary_outputs(op) == 1) return make_value(arena, owner, out);
        nb::object a = nb::steal(make_value(arena, owner, out));
        nb::object b = a.is_valid() ? nb::steal(make_value(arena, owner, out + 1)) : nb::object();
        if (!b.is_valid()) return nullptr;
        return PyTuple_Pack(2, a.ptr(), b.ptr());
    });
}

// The common case without conversions: a list or tuple of Values only (no Python code can run,
// so nothing needs collecting first). 1: done, 0: not that case, -1: error set.
static int values_only(PyObject* seq, const char* what, std::vector<uint32_t>& out, bt::ArenaBase** arena,
                       PyObject** owner) {
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) return 0;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    if (n == 0) return 0;
    for (Py_ssize_t i = 0; i < n; ++i)
        if (!is_value(items[i])) return 0;
    if (!*arena) {
        *arena = as_pyvalue(items[0])->arena;
        *owner = as_pyvalue(items[0])->owner;
    }
    out.clear();
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyValue* v = as_pyvalue(items[i]);
        if (v->arena != *arena) {
            PyErr_Format(v->arena->dtype() != (*arena)->dtype() ? PyExc_TypeError : PyExc_ValueError,
                         "%s: item %zd lives in another arena (or has another dtype)", what, i);
            return -1;
        }
        if (!check_alive(v)) return -1;
        out.push_back(v->idx);
    }
    return 1;
}

template <Op op, size_t MinN>
static PyObject* f_reduce(PyObject*, PyObject* seq) {
    const char* name = bt::op_info(op).name;
    {
        bt::ArenaBase* arena = nullptr;
        PyObject* owner = nullptr;
        IndexBuffer idx;
        int fast = values_only(seq, name, *idx, &arena, &owner);
        if (fast < 0) return nullptr;
        if (fast > 0) {
            if (idx->size() < MinN)
                return PyErr_Format(PyExc_ValueError, "%s needs at least %zu values, got %zu", name, MinN, idx->size());
            return emit_nary(arena, owner, op, *idx);
        }
    }
    ConstantsGuard guard;
    Collected c;
    if (!collect_sequence(seq, name, c, false)) return nullptr;
    if (c.items.size() < MinN)
        return PyErr_Format(PyExc_ValueError, "%s needs at least %zu values, got %zu", name, MinN, c.items.size());
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    IndexBuffer idx;
    if (!place_collected(c, name, *idx, &arena, &owner)) return nullptr;
    return emit_nary(arena, owner, op, *idx);
}

// inner_product(x, w) and inner_product_with_bias(x, w, bias)
template <bool WithBias>
static PyObject* f_inner(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    const char* name = WithBias ? "inner_product_with_bias" : "inner_product";
    if (nargs != (WithBias ? 3 : 2))
        return PyErr_Format(PyExc_TypeError, "%s takes %d arguments, got %zd", name, WithBias ? 3 : 2, nargs);
    {
        bt::ArenaBase* arena = nullptr;
        PyObject* owner = nullptr;
        IndexBuffer ix, iw;
        int fx = values_only(args[0], name, *ix, &arena, &owner);
        int fw = fx > 0 ? values_only(args[1], name, *iw, &arena, &owner) : fx;
        if (fx < 0 || fw < 0) return nullptr;
        if (fx > 0 && fw > 0 && (!WithBias || is_value(args[2]))) {
            if (ix->size() != iw->size())
                return PyErr_Format(PyExc_ValueError, "%s: the two sequences differ in length (%zu vs %zu)", name,
                                    ix->size(), iw->size());
            ix->insert(ix->end(), iw->begin(), iw->end());
            if (WithBias) {
                PyValue* bv = as_pyvalue(args[2]);
                if (bv->arena != arena)
                    return PyErr_Format(PyExc_ValueError, "%s: the bias lives in another arena", name);
                if (!check_alive(bv)) return nullptr;
                ix->push_back(bv->idx);
            }
            return emit_nary(arena, owner, WithBias ? Op::inner_product_with_bias : Op::inner_product, *ix);
        }
    }
    ConstantsGuard guard;
    Collected x, w, b;
    if (!collect_sequence(args[0], name, x, false) || !collect_sequence(args[1], name, w, false)) return nullptr;
    if (x.items.size() != w.items.size())
        return PyErr_Format(PyExc_ValueError, "%s: the two sequences differ in length (%zu vs %zu)", name,
                            x.items.size(), w.items.size());
    if (WithBias) {
        nb::object one = nb::steal(PyTuple_Pack(1, args[2]));
        if (!one.is_valid()) return nullptr;
        if (!collect_sequence(one.ptr(), name, b, false)) return nullptr;
    }
    // x, w and the bias are placed as one sequence, so every Value is checked before any constant
    // is created: a Value of another arena is reported as such, not as a full arena.
    Collected all;
    for (const Collected* c : {&x, &w, &b}) {
        all.items.insert(all.items.end(), c->items.begin(), c->items.end());
        all.numbers.insert(all.numbers.end(), c->numbers.begin(), c->numbers.end());
        all.is_number.insert(all.is_number.end(), c->is_number.begin(), c->is_number.end());
    }
    PyObject* owner = nullptr;
    bt::ArenaBase* arena = nullptr;
    IndexBuffer idx;
    if (!place_collected(all, name, *idx, &arena, &owner)) return nullptr;
    return emit_nary(arena, owner, WithBias ? Op::inner_product_with_bias : Op::inner_product, *idx);
}

template <Op op>
static PyObject* f_unary(PyObject*, PyObject* x) {
    if (!is_value(x))
        return PyErr_Format(PyExc_TypeError, "%s() expects a Value, got %s", bt::op_info(op).name, Py_TYPE(x)->tp_name);
    return emit_unary(reinterpret_cast<PyValue*>(x), op);
}

// Binary ops as functions: numbers on either side become constant leaves of the Value's arena.
template <Op op>
static PyObject* f_binary(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    const char* name = bt::op_info(op).name;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "%s() takes 2 arguments, got %zd", name, nargs);
    if (is_value(args[0]) && is_value(args[1])) return emit_binary(as_pyvalue(args[0]), as_pyvalue(args[1]), op);
    ConstantsGuard guard;
    nb::object pair = nb::steal(PyTuple_Pack(2, args[0], args[1]));
    if (!pair.is_valid()) return nullptr;
    Collected c;
    if (!collect_sequence(pair.ptr(), name, c, false)) return nullptr;
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    IndexBuffer idx;
    if (!place_collected(c, name, *idx, &arena, &owner)) return nullptr;
    const uint32_t a = (*idx)[0], b = (*idx)[1];
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(arena, [&](auto& A) { return A.binary(op, a, b); });
        return make_value(arena, owner, out);
    });
}

static PyObject* f_leaky_relu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    double slope = 0.01;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "leaky_relu(x, slope=0.01) takes 1 or 2 arguments");
    if (!is_value(args[0]))
        return PyErr_Format(PyExc_TypeError, "leaky_relu() expects a Value, got %s", Py_TYPE(args[0])->tp_name);
    if (nargs == 2) {
        int ok = is_value(args[1]) ? 0 : number_to_double(args[1], &slope);
        if (ok <= 0)
            return ok < 0 ? nullptr : PyErr_Format(PyExc_TypeError, "leaky_relu(): the slope must be a number");
    }
    return emit_imm(as_pyvalue(args[0]), Op::leaky_relu, slope);
}

static PyObject* f_mul_by_constant(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "mul_by_constant() takes 2 arguments");
    double c;
    int ok = is_value(args[0]) && !is_value(args[1]) ? number_to_double(args[1], &c) : 0;
    if (ok <= 0)
        return ok < 0 ? nullptr
                      : PyErr_Format(PyExc_TypeError, "mul_by_constant(x, c): x must be a Value and c a number");
    return emit_imm(as_pyvalue(args[0]), Op::mul_const, c);
}

#define BT_FN(fname, impl, flags, doc) \
    {fname, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(impl)), flags, doc}
#define BT_FN_U(name, ...) \
    BT_FN(#name, (f_unary<Op::name>), METH_O, "Elementwise " #name " of a Value, as a new node."),
#define BT_FN_B(name, ...) \
    BT_FN(#name, (f_binary<Op::name>), METH_FASTCALL, #name "(a, b) of two Values (or a Value and a number)."),
static PyMethodDef functions[] = {
    BT_UNARY_OPS(BT_FN_U) BT_BINARY_OPS(BT_FN_B)
        BT_FN("leaky_relu", f_leaky_relu, METH_FASTCALL, "leaky_relu(x, slope=0.01): x if x > 0 else slope * x."),
    BT_FN("mul_by_constant", f_mul_by_constant, METH_FASTCALL, "mul_by_constant(x, c): x * c for a Python number c."),
    BT_FN("reduce_sum", (f_reduce<Op::reduce_sum, 1>), METH_O, "Sum of a sequence of Values, as one node."),
    BT_FN("reduce_sub", (f_reduce<Op::reduce_sub, 1>), METH_O, "x0 - x1 - x2 - ... of a sequence, as one node."),
    BT_FN("reduce_mul", (f_reduce<Op::reduce_mul, 1>), METH_O, "Product of a sequence, as one node."),
    BT_FN("reduce_mean", (f_reduce<Op::reduce_mean, 1>), METH_O, "Mean of a sequence, as one node."),
    BT_FN("reduce_sum_of_squares", (f_reduce<Op::reduce_sum_of_squares, 1>), METH_O, "Sum of squares of a sequence."),
    BT_FN("reduce_mean_squares", (f_reduce<Op::reduce_mean_squares, 1>), METH_O, "Mean of squares of a sequence."),
    BT_FN("reduce_negative_mean", (f_reduce<Op::reduce_negative_mean, 1>), METH_O, "Minus the mean of a sequence."),
    BT_FN("variance", (f_reduce<Op::variance, 2>), METH_O, "Unbiased sample variance (divides by n - 1); n >= 2."),
    BT_FN("variance_biased", (f_reduce<Op::variance_biased, 1>), METH_O, "Biased variance (divides by n)."),
    BT_FN("reduce_mean_and_mean_squares", (f_reduce<Op::mean_and_mean_squares, 1>), METH_O,
          "(mean, mean of squares) of a sequence: one record with two output nodes."),
    BT_FN("inner_product", f_inner<false>, METH_FASTCALL, "inner_product(x, w): sum_i x[i] * w[i], as one node."),
    BT_FN("inner_product_with_bias", f_inner<true>, METH_FASTCALL,
          "inner_product_with_bias(x, w, b): sum_i x[i] * w[i] + b, as one node."),
    {nullptr, nullptr, 0, nullptr}};
#undef BT_FN_U
#undef BT_FN_B

void init_functions(nb::module_& m) {
    for (PyMethodDef* d = functions; d->ml_name; ++d) {
        PyObject* f = PyCFunction_NewEx(d, nullptr, m.attr("__name__").ptr());
        if (!f) throw nb::python_error();
        m.attr(d->ml_name) = nb::steal(f);
    }
    // The op tables by kind, for tools that describe the API (the stub generator, tests).
    nb::list unary, binary;
#define BT_NAME_U(name, ...) unary.append(#name);
#define BT_NAME_B(name, ...) binary.append(#name);
    BT_UNARY_OPS(BT_NAME_U)
    BT_BINARY_OPS(BT_NAME_B)
#undef BT_NAME_U
#undef BT_NAME_B
    m.attr("_unary_ops") = nb::tuple(unary);
    m.attr("_binary_ops") = nb::tuple(binary);
}

}  // namespace btpy
