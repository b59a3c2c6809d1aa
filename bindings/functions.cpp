// Module-level op functions: bt.relu(x), bt.add(a, b), bt.reduce_sum(xs), bt.inner_product(x, w) ...
// Raw METH_O / METH_FASTCALL functions: they are as hot as Value's own number slots.
#include "common.hpp"

#include <string>

namespace btpy {

using bt::Op;

static thread_local std::vector<uint32_t> tl_idx;
static thread_local std::vector<uint32_t> tl_idx2;

bool collect_values(PyObject* seq, const char* what, std::vector<uint32_t>& out, bt::ArenaBase** arena,
                    PyObject** owner, bt::DType* dtype, bool allow_empty) {
    out.clear();
    if (is_value(seq)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of Values, got a single Value", what);
        return false;
    }
    PyObject* fast = PySequence_Fast(seq, "expected a sequence of Values");
    if (!fast) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of Values, got %s", what, Py_TYPE(seq)->tp_name);
        return false;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject** items = PySequence_Fast_ITEMS(fast);
    if (n == 0 && !allow_empty) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: needs at least one Value, got an empty sequence", what);
        return false;
    }
    // The arena is that of the first Value (or of the caller's choice, if one was given).
    if (!*arena) {
        for (Py_ssize_t i = 0; i < n; ++i)
            if (is_value(items[i])) {
                PyValue* v = reinterpret_cast<PyValue*>(items[i]);
                *arena = v->arena;
                *owner = v->owner;
                *dtype = v->dtype;
                break;
            }
        if (!*arena) {
            *dtype = g_default_dtype;
            *owner = current_arena(*dtype);
            if (!*owner) { Py_DECREF(fast); return false; }
            *arena = box_of(*owner)->core.get();
        }
    }
    out.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* it = items[i];
        if (is_value(it)) {
            PyValue* v = reinterpret_cast<PyValue*>(it);
            if (v->arena != *arena) {
                Py_DECREF(fast);
                if (v->dtype != *dtype)
                    PyErr_Format(PyExc_TypeError, "%s: item %zd is a %s Value, the others are %s", what, i,
                                 dtype_name(v->dtype), dtype_name(*dtype));
                else
                    PyErr_Format(PyExc_ValueError, "%s: item %zd lives in another arena", what, i);
                return false;
            }
            if (!check_alive(v)) { Py_DECREF(fast); return false; }
            out.push_back(v->idx);
            continue;
        }
        double c;
        if (!number_to_double(it, &c)) {
            Py_DECREF(fast);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: item %zd is a %s, not a Value or a number", what, i, Py_TYPE(it)->tp_name);
            return false;
        }
        // A number becomes a constant leaf.
        out.push_back(*dtype == bt::DType::float64 ? typed<double>(*arena).leaf(c)
                                                   : typed<float>(*arena).leaf(static_cast<float>(c)));
    }
    Py_DECREF(fast);
    return true;
}

static PyObject* emit_nary(bt::ArenaBase* arena, PyObject* owner, bt::DType dt, Op op, const std::vector<uint32_t>& idx) {
    return guarded([&]() -> PyObject* {
        uint32_t out = dt == bt::DType::float64 ? typed<double>(arena).nary(op, idx.data(), idx.size())
                                                : typed<float>(arena).nary(op, idx.data(), idx.size());
        if (bt::nary_outputs(op) == 1) return make_value(arena, owner, out, dt);
        PyObject* a = make_value(arena, owner, out, dt);
        PyObject* b = a ? make_value(arena, owner, out + 1, dt) : nullptr;
        if (!b) { Py_XDECREF(a); return nullptr; }
        PyObject* t = PyTuple_Pack(2, a, b);
        Py_DECREF(a);
        Py_DECREF(b);
        return t;
    });
}

template <Op op, size_t MinN>
static PyObject* f_reduce(PyObject*, PyObject* seq) {
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    bt::DType dt;
    const char* name = bt::op_info(op).name;
    if (!collect_values(seq, name, tl_idx, &arena, &owner, &dt, false)) return nullptr;
    if (tl_idx.size() < MinN)
        return PyErr_Format(PyExc_ValueError, "%s needs at least %zu values, got %zu", name, MinN, tl_idx.size());
    return emit_nary(arena, owner, dt, op, tl_idx);
}

// inner_product(x, w) and inner_product_with_bias(x, w, bias)
template <bool WithBias>
static PyObject* f_inner(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    const char* name = WithBias ? "inner_product_with_bias" : "inner_product";
    if (nargs != (WithBias ? 3 : 2))
        return PyErr_Format(PyExc_TypeError, "%s takes %d arguments, got %zd", name, WithBias ? 3 : 2, nargs);
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    bt::DType dt;
    if (!collect_values(args[0], name, tl_idx, &arena, &owner, &dt, false)) return nullptr;
    if (!collect_values(args[1], name, tl_idx2, &arena, &owner, &dt, false)) return nullptr;
    if (tl_idx.size() != tl_idx2.size())
        return PyErr_Format(PyExc_ValueError, "%s: the two sequences differ in length (%zu vs %zu)", name,
                            tl_idx.size(), tl_idx2.size());
    tl_idx.insert(tl_idx.end(), tl_idx2.begin(), tl_idx2.end());
    if (WithBias) {
        PyObject* b = args[2];
        if (is_value(b)) {
            PyValue* bv = reinterpret_cast<PyValue*>(b);
            if (bv->arena != arena)
                return PyErr_Format(bv->dtype != dt ? PyExc_TypeError : PyExc_ValueError,
                                    "%s: the bias lives in another arena or has another dtype", name);
            if (!check_alive(bv)) return nullptr;
            tl_idx.push_back(bv->idx);
        } else {
            double c;
            if (!number_to_double(b, &c))
                return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_TypeError, "%s: bias must be a Value or a number", name);
            PyObject* r = guarded([&]() -> PyObject* {
                tl_idx.push_back(dt == bt::DType::float64 ? typed<double>(arena).leaf(c) : typed<float>(arena).leaf(float(c)));
                Py_RETURN_NONE;
            });
            if (!r) return nullptr;
            Py_DECREF(r);
        }
    }
    return emit_nary(arena, owner, dt, WithBias ? Op::inner_product_with_bias : Op::inner_product, tl_idx);
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
    PyObject* pair = PyTuple_Pack(2, args[0], args[1]);
    if (!pair) return nullptr;
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    bt::DType dt;
    bool ok = collect_values(pair, name, tl_idx, &arena, &owner, &dt, false);
    Py_DECREF(pair);
    if (!ok) return nullptr;
    uint32_t a = tl_idx[0], b = tl_idx[1];
    return guarded([&]() -> PyObject* {
        uint32_t out = dt == bt::DType::float64 ? typed<double>(arena).binary(op, a, b) : typed<float>(arena).binary(op, a, b);
        return make_value(arena, owner, out, dt);
    });
}

static PyObject* f_leaky_relu(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    double slope = 0.01;
    if (nargs < 1 || nargs > 2) return PyErr_Format(PyExc_TypeError, "leaky_relu(x, slope=0.01) takes 1 or 2 arguments");
    if (!is_value(args[0])) return PyErr_Format(PyExc_TypeError, "leaky_relu() expects a Value, got %s", Py_TYPE(args[0])->tp_name);
    if (nargs == 2 && !number_to_double(args[1], &slope))
        return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_TypeError, "leaky_relu(): the slope must be a number");
    return emit_imm(reinterpret_cast<PyValue*>(args[0]), Op::leaky_relu, slope);
}

static PyObject* f_mul_by_constant(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "mul_by_constant() takes 2 arguments");
    double c;
    if (!is_value(args[0]) || !number_to_double(args[1], &c))
        return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_TypeError, "mul_by_constant(x, c): x must be a Value and c a number");
    return PyNumber_Multiply(args[0], args[1]);
}

#define BT_FN(fname, impl, flags, doc) {fname, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(impl)), flags, doc}
#define BT_FN_U(name, ...) BT_FN(#name, (f_unary<Op::name>), METH_O, "Elementwise " #name " of a Value, as a new node."),
#define BT_FN_B(name, ...) BT_FN(#name, (f_binary<Op::name>), METH_FASTCALL, #name "(a, b) of two Values (or a Value and a number)."),
static PyMethodDef functions[] = {
    BT_UNARY_OPS(BT_FN_U)
    BT_BINARY_OPS(BT_FN_B)
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
}

}  // namespace btpy
