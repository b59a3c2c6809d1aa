// The Value type's methods (unary ops, backward, item, detach, zero_grad) and attributes (data,
// grad, label, op, children, ...).
#include <cmath>
#include <string>

#include "value.hpp"

namespace btpy {

using bt::Op;

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
    // 2. check (a sweep's start is a safe point to close a hole left by the previous step's graph)
    compact_at_safe_point(v);
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
    if (!check_alive(v) || !refuse_write_while_tracing(v->arena, "zero_grad()")) return nullptr;
    set_grad(v, 0.0);
    Py_RETURN_NONE;
}

#define BT_METHOD_U(name, ...) {#name, m_unary<Op::name>, METH_NOARGS, "The " #name " of this Value, as a new node."},
PyMethodDef value_methods[] = {
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
    if (!refuse_write_while_tracing(v->arena, what[0] == 'd' ? "setting Value.data" : "setting Value.grad")) return -1;
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
    resolve(reinterpret_cast<PyValue*>(self));
    return PyLong_FromUnsignedLong(reinterpret_cast<PyValue*>(self)->idx);
}
extern PyObject* g_dtype_objects[kDTypes];
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
    return PyBool_FromLong(value_alive(v));
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

PyGetSetDef value_getset[] = {
    {"data", g_data, s_data, "The node's value (a Python float). Writable.", nullptr},
    {"grad", g_grad, s_grad, "The node's gradient. Writable.", nullptr},
    {"index", g_index, nullptr, "The node's slot index in its arena.", nullptr},
    {"dtype", g_dtype, nullptr, "burtorch.float32 or burtorch.float64.", nullptr},
    {"arena", g_arena, nullptr, "The Arena holding this node.", nullptr},
    {"alive", g_alive, nullptr, "False once a rewind discarded this node.", nullptr},
    {"label", g_label, s_label, "The node's label, or None. Writable.", nullptr},
    {"op", g_op, nullptr, "Name of the op that produced this node ('leaf' for leaves).", nullptr},
    {"is_leaf", g_is_leaf, nullptr, "True if no op produced this node.", nullptr},
    {"children", g_children, nullptr, "The argument nodes of the op that produced this node.", nullptr},
    {"_prev", g_children, nullptr, "micrograd's name for children.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

}  // namespace btpy
