// The Python `Value` type: a raw CPython type whose arithmetic goes through number slots.
//
// Why not an ordinary nanobind class: a scalar op must cost about one native call. With number
// slots, a fast path for Value-Value operands and a freelist of handle objects, `a + b` is one
// C call that appends a slot and a record and returns a recycled handle, several times cheaper
// than dispatch through overloaded nanobind methods.
//
// Comparisons: <, <=, >, >= compare values and return a bool (Python control flow on data);
// == and != stay identity, so Values can be dict keys and set members as in micrograd.
#include <optional>

#include "value.hpp"

#include <cmath>
#include <string>

namespace btpy {

// ---------------------------------------------------------------- handles and their freelist
static constexpr int kFreeMax = 4096;
static PyValue* g_free[kFreeMax];
static int g_nfree = 0;

PyObject* make_value(bt::ArenaBase* arena, PyObject* owner, uint32_t idx) {
    PyValue* v;
    if (g_nfree) {
        v = g_free[--g_nfree];
    } else {
        v = static_cast<PyValue*>(PyObject_Malloc(sizeof(PyValue)));
        if (!v) return PyErr_NoMemory();
    }
    PyObject_Init(reinterpret_cast<PyObject*>(v), &ValueType);
    Py_INCREF(owner);
    v->arena = arena;
    v->owner = owner;
    v->idx = idx;
    v->gen = arena->gen_of(idx);
    arena->pin(idx);
    return reinterpret_cast<PyObject*>(v);
}

static bool may_reclaim(bt::ArenaBase* arena) {
    if (arena->reclaim_thread && arena->reclaim_thread != PyThread_get_thread_ident()) return false;
    return !bt::trace_of(arena);  // a trace refers to its records by position
}

void release_pin(bt::ArenaBase* arena, uint32_t idx, uint64_t gen) {
    if (!arena->unpin(idx, gen)) [[likely]]
        return;
    if (may_reclaim(arena)) arena->reclaim_top();
}

void release_fixed_pin(bt::ArenaBase* arena, uint32_t idx, uint64_t gen, bt::ArenaBase::Holder h) {
    if (!arena->unpin_fixed(idx, gen, h)) [[likely]]
        return;
    if (may_reclaim(arena)) arena->reclaim_top();
}

void compact_below(PyValue* root) {
    bt::ArenaBase* arena = root->arena;
    if (!value_alive(root) || !arena->hole_possible_below(root->idx) || !may_reclaim(arena)) return;
    arena->maybe_compact(root->idx);
}

static void value_dealloc(PyObject* o) {
    PyValue* v = reinterpret_cast<PyValue*>(o);
    bt::ArenaBase* a = v->arena;
    // Before the owner goes: it keeps the arena alive. A moved handle's pin moved with its node.
    if (a->alive(v->idx, v->gen) || (a->has_relocations() && a->relocate(v->idx, v->gen) && a->alive(v->idx, v->gen)))
        [[likely]] {
        if (a->unpin_alive(v->idx)) [[unlikely]]
            if (may_reclaim(a)) a->reclaim_top();
    }
    Py_DECREF(v->owner);
    if (g_nfree < kFreeMax)
        g_free[g_nfree++] = v;
    else
        PyObject_Free(v);
}

bool check_alive(PyValue* v) {
    if (v->arena->alive(v->idx, v->gen)) [[likely]]
        return true;
    if (v->arena->has_relocations() && v->arena->relocate(v->idx, v->gen) && v->arena->alive(v->idx, v->gen))
        return true;
    PyErr_Format(StaleValueError,
                 "this Value (slot %u) was discarded by a rewind of its arena; keep Values you need "
                 "across iterations below the checkpoint you rewind to",
                 v->idx);
    return false;
}

// ---------------------------------------------------------------- emitting ops
// "Value 'w1' (slot 7)" when labelled, "Value (slot 7)" otherwise: errors name nodes the way the
// user named them while debugging.
std::string describe(PyValue* v) {
    std::string s = "Value";
    if (value_alive(v))
        if (const std::string* lab = v->arena->label(v->idx)) s += " '" + *lab + "'";
    return s + " (slot " + std::to_string(v->idx) + ")";
}

static PyObject* mix_error(PyValue* a, PyValue* b) {
    if (a->arena->dtype() != b->arena->dtype())
        return PyErr_Format(PyExc_TypeError,
                            "cannot combine %s, a %s Value, with %s, a %s Value, in one op; create both "
                            "with the same dtype",
                            describe(a).c_str(), dtype_name(a->arena->dtype()), describe(b).c_str(),
                            dtype_name(b->arena->dtype()));
    return PyErr_Format(PyExc_ValueError,
                        "%s and %s live in different arenas; an op can only combine Values of one arena",
                        describe(a).c_str(), describe(b).c_str());
}

PyObject* emit_unary(PyValue* x, bt::Op op) {
    if (!check_alive(x)) return nullptr;
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(x->arena, [&](auto& A) { return A.unary(op, x->idx); });
        return make_value(x->arena, x->owner, out);
    });
}

PyObject* emit_imm(PyValue* x, bt::Op op, double c) {
    if (!check_alive(x)) return nullptr;
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(x->arena, [&](auto& A) { return A.unary_imm(op, x->idx, c); });
        return make_value(x->arena, x->owner, out);
    });
}

PyObject* emit_binary(PyValue* a, PyValue* b, bt::Op op) {
    if (a->arena != b->arena) return mix_error(a, b);
    if (!check_alive(a) || !check_alive(b)) return nullptr;
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(a->arena, [&](auto& A) { return A.binary(op, a->idx, b->idx); });
        return make_value(a->arena, a->owner, out);
    });
}

// x (op) y where either side may be a Python number. VC: Value op const, CV: const op Value.
// NegVC: the constant is negated for VC (x - c == x + (-c) exactly in IEEE arithmetic).
template <bt::Op VV, bt::Op VC, bt::Op CV, bool NegVC = false>
static PyObject* binop(PyObject* x, PyObject* y) {
    const bool vx = is_value(x), vy = is_value(y);
    if (vx && vy) return emit_binary(reinterpret_cast<PyValue*>(x), reinterpret_cast<PyValue*>(y), VV);
    double c;
    int ok = number_to_double(vx ? y : x, &c);  // may run Python code: before any liveness check
    if (ok < 0) return nullptr;
    if (ok == 0) Py_RETURN_NOTIMPLEMENTED;
    if (vx) return emit_imm(reinterpret_cast<PyValue*>(x), VC, NegVC ? -c : c);
    return emit_imm(reinterpret_cast<PyValue*>(y), CV, c);
}

using bt::Op;
static PyObject* nb_add_(PyObject* x, PyObject* y) { return binop<Op::add, Op::add_const, Op::add_const>(x, y); }
static PyObject* nb_sub_(PyObject* x, PyObject* y) { return binop<Op::sub, Op::add_const, Op::rsub_const, true>(x, y); }
static PyObject* nb_mul_(PyObject* x, PyObject* y) { return binop<Op::mul, Op::mul_const, Op::mul_const>(x, y); }
static PyObject* nb_div_(PyObject* x, PyObject* y) { return binop<Op::div, Op::div_const, Op::rdiv_const>(x, y); }
static PyObject* nb_pow_(PyObject* x, PyObject* y, PyObject* mod) {
    if (mod != Py_None) {
        PyErr_SetString(PyExc_TypeError, "pow() with a modulus is not defined for Values");
        return nullptr;
    }
    return binop<Op::pow, Op::pow_const, Op::rpow_const>(x, y);
}
static PyObject* nb_neg_(PyObject* x) { return emit_unary(reinterpret_cast<PyValue*>(x), Op::neg); }
static PyObject* nb_abs_(PyObject* x) { return emit_unary(reinterpret_cast<PyValue*>(x), Op::abs); }
static PyObject* nb_pos_(PyObject* x) {
    Py_INCREF(x);
    return x;
}

PyObject* nb_float_(PyObject* x) {
    PyValue* v = reinterpret_cast<PyValue*>(x);
    if (!check_alive(v)) return nullptr;
    if (!refuse_while_tracing(v->arena, "reading a Value's number (float(), .data, .item())")) return nullptr;
    return PyFloat_FromDouble(get_data(v));
}

// bool(v) is v.data != 0, as for a one-element tensor.
static int nb_bool_(PyObject* x) {
    PyValue* v = reinterpret_cast<PyValue*>(x);
    if (!check_alive(v)) return -1;
    const bool r = get_data(v) != 0.0;
    if (tracing()) record_guard(v, nullptr, 0.0, -1, r);
    return r;
}

static PyObject* value_richcompare(PyObject* x, PyObject* y, int op) {
    if (op == Py_EQ || op == Py_NE) Py_RETURN_NOTIMPLEMENTED;  // identity, as object's
    double a, b;
    for (int side = 0; side < 2; ++side) {
        PyObject* o = side ? y : x;
        double* d = side ? &b : &a;
        if (is_value(o)) continue;
        int ok = number_to_double(o, d);  // Python code first, liveness after
        if (ok < 0) return nullptr;
        if (ok == 0) Py_RETURN_NOTIMPLEMENTED;
    }
    for (int side = 0; side < 2; ++side) {
        PyObject* o = side ? y : x;
        if (!is_value(o)) continue;
        if (!check_alive(as_pyvalue(o))) return nullptr;
        (side ? b : a) = get_data(as_pyvalue(o));
    }
    bool r = false;
    switch (op) {
        case Py_LT: r = a < b; break;
        case Py_LE: r = a <= b; break;
        case Py_GT: r = a > b; break;
        case Py_GE: r = a >= b; break;
        default: break;
    }
    if (tracing()) {
        PyValue* va = is_value(x) ? as_pyvalue(x) : nullptr;
        PyValue* vb = is_value(y) ? as_pyvalue(y) : nullptr;
        // guards are kept as "value OP rhs": a number on the left flips the comparison
        static const int flip[] = {Py_GT, Py_GE, 0, 0, Py_LT, Py_LE};
        if (va)
            record_guard(va, vb, b, op, r);
        else
            record_guard(vb, nullptr, a, flip[op], r);
    }
    return PyBool_FromLong(r);
}

// ---------------------------------------------------------------- repr and construction
static PyObject* value_repr(PyObject* self) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    if (!value_alive(v)) return PyUnicode_FromFormat("Value(<stale: slot %u was rewound away>)", v->idx);
    PyObject* d = PyFloat_FromDouble(get_data(v));
    PyObject* g = PyFloat_FromDouble(get_grad(v));
    const std::string* lab = v->arena->label(v->idx);
    PyObject* r;
    const char* dt = v->arena->dtype() == bt::DType::float32 ? ", dtype=float32" : "";
    if (lab)
        r = PyUnicode_FromFormat("Value(data=%R, grad=%R, label='%s'%s)", d, g, lab->c_str(), dt);
    else
        r = PyUnicode_FromFormat("Value(data=%R, grad=%R%s)", d, g, dt);
    Py_XDECREF(d);
    Py_XDECREF(g);
    return r;
}

// Value(data, dtype=None, label=None, arena=None)
static PyObject* value_vectorcall(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject* slots[4] = {nargs > 0 ? args[0] : nullptr, nargs > 1 ? args[1] : nullptr, nargs > 2 ? args[2] : nullptr,
                          nargs > 3 ? args[3] : nullptr};
    static const char* names[4] = {"data", "dtype", "label", "arena"};
    if (nargs > 4) return PyErr_Format(PyExc_TypeError, "Value() takes at most 4 arguments");
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
            PyObject* k = PyTuple_GET_ITEM(kwnames, i);
            int j = 0;
            while (j < 4 && PyUnicode_CompareWithASCIIString(k, names[j]) != 0) ++j;
            if (j == 4) return PyErr_Format(PyExc_TypeError, "Value() got an unexpected keyword argument '%U'", k);
            if (slots[j])
                return PyErr_Format(PyExc_TypeError, "Value() got multiple values for argument '%s'", names[j]);
            slots[j] = args[nargs + i];
        }
    }
    PyObject *data = slots[0], *dtype_o = slots[1], *label = slots[2], *arena_o = slots[3];
    if (!data) return PyErr_Format(PyExc_TypeError, "Value() missing required argument 'data'");
    double d;
    if (is_value(data))
        return PyErr_Format(PyExc_TypeError, "Value(): data is already a Value; use v.detach() for a new leaf");
    int ok = number_to_double(data, &d);
    if (ok < 0) return nullptr;
    if (ok == 0)
        return PyErr_Format(PyExc_TypeError, "Value(): data must be a real number, got %s", Py_TYPE(data)->tp_name);
    if (label && label != Py_None && !PyUnicode_Check(label))
        return PyErr_Format(PyExc_TypeError, "Value(): label must be a str or None");

    bt::DType dt = default_dtype();
    bool have_dt = dtype_o && dtype_o != Py_None;
    if (have_dt && !parse_dtype(dtype_o, &dt)) return nullptr;
    PyObject* owner;
    if (arena_o && arena_o != Py_None) {
        ArenaBox* box = box_of(arena_o);
        if (!box) return nullptr;
        if (have_dt && box->core->dtype() != dt)
            return PyErr_Format(PyExc_TypeError, "Value(): dtype=%s but the arena holds %s", dtype_name(dt),
                                dtype_name(box->core->dtype()));
        dt = box->core->dtype();
        owner = arena_o;
    } else {
        owner = current_arena(dt);
        if (!owner) return nullptr;
    }
    // The label is encoded before the node exists, so a label that cannot be stored (a lone
    // surrogate) fails the call without leaving a node behind.
    const char* lab = nullptr;
    Py_ssize_t lab_len = 0;
    if (label && label != Py_None && !(lab = PyUnicode_AsUTF8AndSize(label, &lab_len))) return nullptr;
    bt::ArenaBase* arena = box_of(owner)->core.get();
    PyObject* r = guarded([&]() -> PyObject* {
        uint32_t i = dispatch(arena, [&](auto& A) {
            return A.leaf(static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(d));
        });
        return make_value(arena, owner, i);
    });
    if (r && lab_len) arena->set_label(as_pyvalue(r)->idx, std::string(lab, size_t(lab_len)));
    return r;
}

static PyObject* value_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    // Reached only through paths that bypass vectorcall; forward to it.
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    std::vector<PyObject*> flat(args ? n : 0);
    for (Py_ssize_t i = 0; i < n; ++i) flat[i] = PyTuple_GET_ITEM(args, i);
    PyObject* kwnames = nullptr;
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        kwnames = PyTuple_New(PyDict_GET_SIZE(kwargs));
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *val;
        while (PyDict_Next(kwargs, &pos, &key, &val)) {
            Py_INCREF(key);
            PyTuple_SET_ITEM(kwnames, k++, key);
            flat.push_back(val);
        }
    }
    PyObject* r = value_vectorcall(reinterpret_cast<PyObject*>(type), flat.data(), static_cast<size_t>(n), kwnames);
    Py_XDECREF(kwnames);
    return r;
}

static PyNumberMethods value_as_number = {};
PyTypeObject ValueType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void init_value(nb::module_& m) {
    value_as_number.nb_add = nb_add_;
    value_as_number.nb_subtract = nb_sub_;
    value_as_number.nb_multiply = nb_mul_;
    value_as_number.nb_true_divide = nb_div_;
    value_as_number.nb_power = nb_pow_;
    value_as_number.nb_negative = nb_neg_;
    value_as_number.nb_positive = nb_pos_;
    value_as_number.nb_absolute = nb_abs_;
    value_as_number.nb_float = nb_float_;
    value_as_number.nb_bool = nb_bool_;

    ValueType.tp_name = "burtorch.Value";
    ValueType.tp_basicsize = sizeof(PyValue);
    ValueType.tp_dealloc = value_dealloc;
    ValueType.tp_repr = value_repr;
    ValueType.tp_as_number = &value_as_number;
    ValueType.tp_richcompare = value_richcompare;
    ValueType.tp_hash = PyBaseObject_Type.tp_hash;  // identity, kept although == is defined
    ValueType.tp_flags = Py_TPFLAGS_DEFAULT;
    ValueType.tp_doc =
        "Value(data, dtype=None, label=None, arena=None)\n\n"
        "A scalar node of a compute graph: a handle to one slot of an arena. Arithmetic with\n"
        "Values and Python numbers appends nodes; backward() fills the grads.";
    ValueType.tp_methods = value_methods;
    ValueType.tp_getset = value_getset;
    ValueType.tp_new = value_new;
    ValueType.tp_free = PyObject_Free;
    ValueType.tp_vectorcall = value_vectorcall;
    if (PyType_Ready(&ValueType) < 0) throw nb::python_error();
    Py_INCREF(&ValueType);
    m.attr("Value") = nb::handle(reinterpret_cast<PyObject*>(&ValueType));
}

}  // namespace btpy
