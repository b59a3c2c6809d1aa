// The Python `Value` type: a raw CPython type whose arithmetic goes through number slots.
//
// Why not an ordinary nanobind class: a scalar op must cost about one native call. With number
// slots, a fast path for Value-Value operands and a freelist of handle objects, `a + b` is one
// C call that appends a slot and a record and returns a recycled handle (measured 0.076 s vs
// 0.218 s for 1M ops through overloaded nanobind methods).
//
// Comparisons: <, <=, >, >= compare values and return a bool (Python control flow on data);
// == and != stay identity, so Values can be dict keys and set members as in micrograd.
#include <optional>

#include "common.hpp"

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
    return reinterpret_cast<PyObject*>(v);
}

static void value_dealloc(PyObject* o) {
    PyValue* v = reinterpret_cast<PyValue*>(o);
    Py_DECREF(v->owner);
    if (g_nfree < kFreeMax)
        g_free[g_nfree++] = v;
    else
        PyObject_Free(v);
}

bool check_alive(PyValue* v) {
    if (v->arena->alive(v->idx, v->gen)) return true;
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
    if (v->arena->alive(v->idx, v->gen))
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

static double get_data(PyValue* v) {
    return dispatch(v->arena, [&](auto& A) { return double(A.values()[v->idx]); });
}
static double get_grad(PyValue* v) {
    return dispatch(v->arena, [&](auto& A) { return double(A.grads()[v->idx]); });
}
static void set_data(PyValue* v, double d) {
    dispatch(v->arena, [&](auto& A) {
        A.values()[v->idx] = static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(d);
    });
}
static void set_grad(PyValue* v, double d) {
    v->arena->mark_grads_written();
    dispatch(v->arena, [&](auto& A) {
        A.grads()[v->idx] = static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(d);
    });
}

static PyObject* nb_float_(PyObject* x) {
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

// ---------------------------------------------------------------- methods
template <bt::Op op>
static PyObject* m_unary(PyObject* self, PyObject*) {
    return emit_unary(reinterpret_cast<PyValue*>(self), op);
}

static PyObject* m_leaky_relu(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    double slope = 0.01;
    if (nargs > 1) return PyErr_Format(PyExc_TypeError, "leaky_relu() takes at most 1 argument");
    if (nargs == 1) {
        int ok = number_to_double(args[0], &slope);
        if (ok <= 0)
            return ok < 0 ? nullptr : PyErr_Format(PyExc_TypeError, "leaky_relu(): the slope must be a number");
    }
    return emit_imm(reinterpret_cast<PyValue*>(self), Op::leaky_relu, slope);
}

// backward(seed=1.0, wrt=None)
static PyObject* m_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    PyObject* seed_o = nargs > 0 ? args[0] : nullptr;
    PyObject* wrt_o = nargs > 1 ? args[1] : nullptr;
    if (nargs > 2) return PyErr_Format(PyExc_TypeError, "backward() takes at most 2 arguments");
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
            PyObject* k = PyTuple_GET_ITEM(kwnames, i);
            PyObject* val = args[nargs + i];
            if (PyUnicode_CompareWithASCIIString(k, "seed") == 0)
                seed_o = val;
            else if (PyUnicode_CompareWithASCIIString(k, "wrt") == 0)
                wrt_o = val;
            else
                return PyErr_Format(PyExc_TypeError, "backward() got an unexpected keyword argument '%U'", k);
        }
    }
    // 1. convert (Python code may run)
    double seed = 1.0;
    if (seed_o && seed_o != Py_None) {
        int ok = is_value(seed_o) ? 0 : number_to_double(seed_o, &seed);
        if (ok < 0) return nullptr;
        if (ok == 0) return PyErr_Format(PyExc_TypeError, "backward(): seed must be a number");
        if (!std::isfinite(seed))
            return PyErr_Format(PyExc_ValueError, "backward(): seed must be finite, got %R", seed_o);
    }
    nb::object wrt;
    if (wrt_o && wrt_o != Py_None) {
        if (is_value(wrt_o)) return PyErr_Format(PyExc_TypeError, "backward(): wrt must be a sequence of Values");
        PyObject* fast = PySequence_Fast(wrt_o, "backward(): wrt must be a sequence of Values");
        if (!fast) return nullptr;
        wrt = nb::steal(fast);
        if (PySequence_Fast_GET_SIZE(fast) == 0) return PyErr_Format(PyExc_ValueError, "backward(): wrt is empty");
    }
    // 2. check
    if (!check_alive(v)) return nullptr;
    if (!refuse_while_tracing(v->arena, "backward()")) return nullptr;
    uint32_t stop = 0;
    if (wrt.is_valid()) {
        uint32_t lo = UINT32_MAX;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(wrt.ptr());
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject* it = PySequence_Fast_GET_ITEM(wrt.ptr(), i);
            if (!is_value(it))
                return PyErr_Format(PyExc_TypeError, "backward(): wrt must hold Values, got %s", Py_TYPE(it)->tp_name);
            PyValue* w = as_pyvalue(it);
            if (w->arena != v->arena)
                return PyErr_Format(PyExc_ValueError, "backward(): wrt holds a Value of another arena");
            if (!check_alive(w)) return nullptr;
            lo = std::min(lo, w->idx);
        }
        stop = lo;
    }
    // 3. sweep
    // A large graph's sweep runs without the GIL (other Python threads go on; the arena itself
    // must not be used by them meanwhile). Small ones keep it: releasing costs more than they do.
    const bool release = v->arena->num_slots() >= (size_t(1) << 16);
    PyObject* r = guarded([&]() -> PyObject* {
        {
            std::optional<nb::gil_scoped_release> unlocked;
            if (release) unlocked.emplace();
            dispatch(v->arena, [&](auto& A) {
                A.backward(v->idx, static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(seed), stop);
            });
        }
        Py_RETURN_NONE;
    });
    if (r) check_unbounded_growth(v->arena);
    return r;
}

static PyObject* m_item(PyObject* self, PyObject*) { return nb_float_(self); }

static PyObject* m_detach(PyObject* self, PyObject*) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    if (!check_alive(v)) return nullptr;
    return guarded([&]() -> PyObject* {
        uint32_t out = dispatch(v->arena, [&](auto& A) { return A.leaf(A.values()[v->idx]); });
        return make_value(v->arena, v->owner, out);
    });
}

static PyObject* m_zero_grad(PyObject* self, PyObject*) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    if (!check_alive(v)) return nullptr;
    set_grad(v, 0.0);
    Py_RETURN_NONE;
}

#define BT_METHOD_U(name, ...) {#name, m_unary<Op::name>, METH_NOARGS, "The " #name " of this Value, as a new node."},
static PyMethodDef value_methods[] = {
    BT_UNARY_OPS(BT_METHOD_U){"leaky_relu", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_leaky_relu)),
                              METH_FASTCALL, "leaky_relu(slope=0.01): x if x > 0 else slope * x."},
    {"backward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(m_backward)), METH_FASTCALL | METH_KEYWORDS,
     "backward(seed=1.0, wrt=None): reverse sweep from this node.\n\n"
     "Interior grads of the swept records are reset, then hold d self / d node; leaf grads\n"
     "accumulate until zeroed. wrt: Values whose grads are wanted; the sweep stops below the\n"
     "lowest of them (early exit)."},
    {"item", m_item, METH_NOARGS, "The value as a Python float."},
    {"detach", m_detach, METH_NOARGS, "A new leaf holding this node's value."},
    {"zero_grad", m_zero_grad, METH_NOARGS, "Sets this node's grad to 0."},
    {nullptr, nullptr, 0, nullptr}};
#undef BT_METHOD_U

// ---------------------------------------------------------------- attributes
static PyValue* alive_self(PyObject* self) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    return check_alive(v) ? v : nullptr;
}

// Setters convert the number first (its __float__ may run Python code that rewinds the arena),
// then check that the node is still alive, then write.
static int set_number(PyObject* self, PyObject* val, const char* what, void (*write)(PyValue*, double)) {
    if (!val) {
        PyErr_Format(PyExc_TypeError, "cannot delete Value.%s", what);
        return -1;
    }
    double d = 0.0;
    if (!is_value(val)) {
        int ok = number_to_double(val, &d);
        if (ok <= 0) {
            if (ok == 0) PyErr_Format(PyExc_TypeError, "Value.%s must be set to a number", what);
            return -1;
        }
    } else {
        if (!check_alive(as_pyvalue(val))) return -1;
        d = get_data(as_pyvalue(val));
    }
    PyValue* v = reinterpret_cast<PyValue*>(self);
    if (!check_alive(v)) return -1;
    write(v, d);
    return 0;
}
static PyObject* g_data(PyObject* self, void*) { return nb_float_(self); }
static int s_data(PyObject* self, PyObject* val, void*) { return set_number(self, val, "data", set_data); }
static PyObject* g_grad(PyObject* self, void*) {
    PyValue* v = alive_self(self);
    return v ? PyFloat_FromDouble(get_grad(v)) : nullptr;
}
static int s_grad(PyObject* self, PyObject* val, void*) { return set_number(self, val, "grad", set_grad); }
static PyObject* g_index(PyObject* self, void*) {
    return PyLong_FromUnsignedLong(reinterpret_cast<PyValue*>(self)->idx);
}
extern PyObject* g_dtype_objects[2];
static PyObject* g_dtype(PyObject* self, void*) {
    PyObject* d = g_dtype_objects[static_cast<int>(reinterpret_cast<PyValue*>(self)->arena->dtype())];
    Py_INCREF(d);
    return d;
}
static PyObject* g_arena(PyObject* self, void*) {
    PyObject* o = reinterpret_cast<PyValue*>(self)->owner;
    Py_INCREF(o);
    return o;
}
static PyObject* g_alive(PyObject* self, void*) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    return PyBool_FromLong(v->arena->alive(v->idx, v->gen));
}
static PyObject* g_label(PyObject* self, void*) {
    PyValue* v = alive_self(self);
    if (!v) return nullptr;
    const std::string* s = v->arena->label(v->idx);
    if (!s) Py_RETURN_NONE;
    return PyUnicode_FromStringAndSize(s->data(), static_cast<Py_ssize_t>(s->size()));
}
static int s_label(PyObject* self, PyObject* val, void*) {
    PyValue* v = alive_self(self);
    if (!v) return -1;
    if (val && val != Py_None && !PyUnicode_Check(val)) {
        PyErr_SetString(PyExc_TypeError, "Value.label must be a str or None");
        return -1;
    }
    if (!g_labels_on) return 0;  // labels switched off: nothing is stored
    if (!val || val == Py_None) {
        v->arena->set_label(v->idx, std::string());
        return 0;
    }
    Py_ssize_t n;
    const char* s = PyUnicode_AsUTF8AndSize(val, &n);
    if (!s) return -1;
    v->arena->set_label(v->idx, std::string(s, static_cast<size_t>(n)));
    return 0;
}
static PyObject* g_op(PyObject* self, void*) {
    PyValue* v = alive_self(self);
    if (!v) return nullptr;
    int64_t r = v->arena->record_of(v->idx);
    return PyUnicode_FromString(r < 0 ? "leaf" : bt::op_info(v->arena->record(r).op).name);
}
static PyObject* g_is_leaf(PyObject* self, void*) {
    PyValue* v = alive_self(self);
    if (!v) return nullptr;
    return PyBool_FromLong(v->arena->record_of(v->idx) < 0);
}
// The Values this node was computed from (in argument order), as a tuple.
static PyObject* g_children(PyObject* self, void*) {
    PyValue* v = alive_self(self);
    if (!v) return nullptr;
    int64_t r = v->arena->record_of(v->idx);
    if (r < 0) return PyTuple_New(0);
    return guarded([&]() -> PyObject* {
        auto spans = v->arena->record_args(v->arena->record(r));
        size_t n = 0;
        for (auto& s : spans) n += s.second;
        PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(n));
        if (!t) return nullptr;
        Py_ssize_t k = 0;
        for (auto& s : spans)
            for (uint32_t i = 0; i < s.second; ++i) {
                PyObject* c = make_value(v->arena, v->owner, s.first + i);
                if (!c) {
                    Py_DECREF(t);
                    return nullptr;
                }
                PyTuple_SET_ITEM(t, k++, c);
            }
        return t;
    });
}

static PyGetSetDef value_getset[] = {
    {"data", g_data, s_data, "The node's value (a Python float). Writable.", nullptr},
    {"grad", g_grad, s_grad, "The node's gradient. Writable.", nullptr},
    {"index", g_index, nullptr, "The node's slot index in its arena.", nullptr},
    {"dtype", g_dtype, nullptr, "burtorch.float32 or burtorch.float64.", nullptr},
    {"arena", g_arena, nullptr, "The Arena holding this node.", nullptr},
    {"alive", g_alive, nullptr, "False once a rewind discarded this node.", nullptr},
    {"label", g_label, s_label, "The node's label, or None (stored only while labels are on).", nullptr},
    {"op", g_op, nullptr, "Name of the op that produced this node ('leaf' for leaves).", nullptr},
    {"is_leaf", g_is_leaf, nullptr, "True if no op produced this node.", nullptr},
    {"children", g_children, nullptr, "The argument nodes of the op that produced this node.", nullptr},
    {"_prev", g_children, nullptr, "micrograd's name for children.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---------------------------------------------------------------- repr and construction
static PyObject* value_repr(PyObject* self) {
    PyValue* v = reinterpret_cast<PyValue*>(self);
    if (!v->arena->alive(v->idx, v->gen))
        return PyUnicode_FromFormat("Value(<stale: slot %u was rewound away>)", v->idx);
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

    bt::DType dt = g_default_dtype;
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
    if (label && label != Py_None && g_labels_on && !(lab = PyUnicode_AsUTF8AndSize(label, &lab_len))) return nullptr;
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
