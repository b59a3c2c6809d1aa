// Converting Python arguments: numbers, dtypes, sequences of Values and numbers, integer ids.
// Everything here may run Python code (a user type's __float__, __index__ or __iter__), so it
// all happens before an entry point checks liveness (see common.hpp).
#include <climits>
#include <cstring>
#include <exception>
#include <string>

#include "common.hpp"

namespace btpy {

const char* dtype_name(bt::DType d) {
    switch (d) {
        case bt::DType::float64: return "float64";
        case bt::DType::bfloat16: return "bfloat16";
        case bt::DType::float16: return "float16";
        default: return "float32";
    }
}

bool parse_dtype(PyObject* o, bt::DType* out) {
    for (int k = 0; k < kDTypes; ++k)
        if (o == g_dtype_objects[k]) {
            *out = static_cast<bt::DType>(k);
            return true;
        }
    // "float32", "float64", "bfloat16", "float16", and objects named so (numpy dtypes and scalar types).
    PyObject* name = nullptr;
    if (PyUnicode_Check(o)) {
        name = o;
        Py_INCREF(name);
    } else if (PyObject_HasAttrString(o, "__name__")) {
        name = PyObject_GetAttrString(o, "__name__");
    } else if (PyObject_HasAttrString(o, "name")) {
        name = PyObject_GetAttrString(o, "name");
    }
    if (name && PyUnicode_Check(name)) {
        int found = -1;
        for (int k = 0; k < kDTypes; ++k)
            if (PyUnicode_CompareWithASCIIString(name, dtype_name(static_cast<bt::DType>(k))) == 0) found = k;
        Py_DECREF(name);
        if (found >= 0) {
            *out = static_cast<bt::DType>(found);
            return true;
        }
    } else {
        Py_XDECREF(name);
        PyErr_Clear();
    }
    PyErr_Format(PyExc_TypeError, "dtype must be burtorch.float32, float64, bfloat16 or float16, got %R", o);
    return false;
}

int number_to_double(PyObject* o, double* out) {
    if (PyFloat_Check(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (PyLong_Check(o)) {
        *out = PyLong_AsDouble(o);
        return (*out == -1.0 && PyErr_Occurred()) ? -1 : 1;
    }
    // numpy scalars and other number-like objects, but not containers (arrays broadcast on
    // their side), not complex numbers and not strings.
    PyNumberMethods* nm = Py_TYPE(o)->tp_as_number;
    if (nm && (nm->nb_float || nm->nb_index) && !PySequence_Check(o) && !PyComplex_Check(o)) {
        *out = PyFloat_AsDouble(o);
        if (*out == -1.0 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;  // its __float__ raised: report it
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    return 0;
}

// ---------------------------------------------------------------- index buffers
namespace {
struct BufferPool {
    std::deque<std::vector<uint32_t>> buffers;  // a deque: growing it never moves leased buffers
    size_t depth = 0;
};
thread_local BufferPool t_pool;
}  // namespace

IndexBuffer::IndexBuffer() {
    if (t_pool.depth == t_pool.buffers.size()) t_pool.buffers.emplace_back();
    buf_ = &t_pool.buffers[t_pool.depth++];
    buf_->clear();
}
IndexBuffer::~IndexBuffer() { --t_pool.depth; }

// ---------------------------------------------------------------- constants of a failed op
namespace {
thread_local ConstantsGuard* t_guard = nullptr;
}

ConstantsGuard::ConstantsGuard() : outer_(t_guard), exceptions_(std::uncaught_exceptions()) { t_guard = this; }

ConstantsGuard::~ConstantsGuard() {
    t_guard = outer_;
    if (blocks_.empty()) return;
    // Raw entry points fail by returning nullptr with a Python error set, nanobind ones by throwing.
    if (std::uncaught_exceptions() <= exceptions_ && !PyErr_Occurred()) return;
    for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) {
        const size_t end = size_t(b->first) + b->n;
        if (b->arena->num_slots() == end && b->arena->alive(uint32_t(end - 1), b->gen))
            b->arena->drop_top_slots(b->first);
    }
}

void ConstantsGuard::created(PyObject* owner, bt::ArenaBase* arena, uint32_t first, size_t n) {
    if (!t_guard || n == 0) return;
    t_guard->blocks_.push_back(
        Block{nb::borrow(owner), arena, first, uint32_t(n), arena->gen_of(uint32_t(first + n - 1))});
}

// ---------------------------------------------------------------- sequences of Values and numbers
bool collect_sequence(PyObject* seq, const char* what, Collected& out, bool allow_empty) {
    if (is_value(seq)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of Values, got a single Value", what);
        return false;
    }
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of Values, got a string", what);
        return false;
    }
    PyObject* fast = PySequence_Fast(seq, "");
    if (!fast) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: expected a sequence of Values, got %s", what, Py_TYPE(seq)->tp_name);
        }
        return false;
    }
    out.keep = nb::steal(fast);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n == 0 && !allow_empty) {
        PyErr_Format(PyExc_ValueError, "%s: needs at least one Value, got an empty sequence", what);
        return false;
    }
    PyObject** items = PySequence_Fast_ITEMS(fast);
    out.items.assign(items, items + n);
    out.numbers.assign(size_t(n), 0.0);
    out.is_number.assign(size_t(n), false);
    bool snapshot = PyTuple_Check(out.keep.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* it = out.items[size_t(i)];
        if (is_value(it)) continue;
        if (!snapshot && !PyFloat_Check(it) && !PyLong_Check(it)) {
            // Its __float__ is Python code that may change the list (and free items `items`
            // borrows): keep a tuple of the items as they are now, untouched by anything it does.
            nb::object t = nb::steal(PyList_AsTuple(out.keep.ptr()));
            if (!t.is_valid()) return false;
            out.keep = std::move(t);
            PyObject** kept = PySequence_Fast_ITEMS(out.keep.ptr());
            out.items.assign(kept, kept + n);
            it = out.items[size_t(i)];
            snapshot = true;
        }
        double c;
        int ok = number_to_double(it, &c);
        if (ok < 0) return false;
        if (ok == 0) {
            PyErr_Format(PyExc_TypeError, "%s: item %zd is a %s, not a Value or a number", what, i,
                         Py_TYPE(it)->tp_name);
            return false;
        }
        out.numbers[size_t(i)] = c;
        out.is_number[size_t(i)] = true;
    }
    return true;
}

bool place_collected(const Collected& c, const char* what, std::vector<uint32_t>& out, bt::ArenaBase** arena,
                     PyObject** owner) {
    out.clear();
    if (!*arena) {
        for (PyObject* it : c.items)
            if (is_value(it)) {
                *arena = as_pyvalue(it)->arena;
                *owner = as_pyvalue(it)->owner;
                break;
            }
        if (!*arena) {
            *owner = current_arena(default_dtype());
            if (!*owner) return false;
            *arena = box_of(*owner)->core.get();
        }
    }
    size_t numbers = 0;
    for (size_t i = 0; i < c.items.size(); ++i) {
        if (c.is_number[i]) {
            ++numbers;
            continue;
        }
        PyValue* v = as_pyvalue(c.items[i]);
        if (v->arena != *arena) {
            if (v->arena->dtype() != (*arena)->dtype())
                PyErr_Format(PyExc_TypeError, "%s: item %zu is a %s Value, the others are %s", what, i,
                             dtype_name(v->arena->dtype()), dtype_name((*arena)->dtype()));
            else
                PyErr_Format(PyExc_ValueError, "%s: item %zu lives in another arena", what, i);
            return false;
        }
        if (!check_alive(v)) return false;
    }
    bt::ArenaBase* a = *arena;
    const size_t first = a->num_slots();
    PyObject* r = guarded([&]() -> PyObject* {
        dispatch(a, [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            A.make_room(numbers, 0, 0);  // all constants or none
            out.reserve(c.items.size());
            for (size_t i = 0; i < c.items.size(); ++i)
                out.push_back(c.is_number[i] ? A.leaf(static_cast<T>(c.numbers[i])) : as_pyvalue(c.items[i])->idx);
        });
        Py_RETURN_NONE;
    });
    if (!r) return false;
    Py_DECREF(r);
    ConstantsGuard::created(*owner, a, uint32_t(first), numbers);
    return true;
}

// ---------------------------------------------------------------- integer ids
static uint32_t checked_id(long long id, uint32_t bound, const char* what, const char* noun) {
    if (id < 0 || id >= (long long)bound)
        throw nb::index_error((std::string(what) + ": " + noun + " " + std::to_string(id) + " is out of range [0, " +
                               std::to_string(bound) + ")")
                                  .c_str());
    return uint32_t(id);
}

static long long as_int(PyObject* h, const char* what, const char* noun) {
    if (PyFloat_Check(h) || PyBool_Check(h) || is_value(h))
        throw nb::type_error(
            (std::string(what) + ": each " + noun + " must be an int, got " + Py_TYPE(h)->tp_name).c_str());
    PyObject* i = PyNumber_Index(h);  // may run __index__
    if (!i) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            throw nb::type_error(
                (std::string(what) + ": each " + noun + " must be an int, got " + Py_TYPE(h)->tp_name).c_str());
        }
        throw nb::python_error();
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) return overflow > 0 ? LLONG_MAX : LLONG_MIN;
    return v;
}

std::vector<uint32_t> parse_ids(nb::handle h, uint32_t bound, const char* what, const char* noun) {
    std::vector<uint32_t> ids;
    PyObject* o = h.ptr();
    if (PyLong_Check(o) || (!PySequence_Check(o) && !PyObject_CheckBuffer(o) && PyIndex_Check(o))) {
        ids.push_back(checked_id(as_int(o, what, noun), bound, what, noun));
        return ids;
    }
    if (PyUnicode_Check(o) || PyBytes_Check(o))
        throw nb::type_error((std::string(what) + ": " + noun + "s must be ints, got a string").c_str());
    // Integer buffers (numpy arrays of ids) without a Python object per element.
    if (PyObject_CheckBuffer(o)) {
        Py_buffer view;
        if (PyObject_GetBuffer(o, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
            const char* f = view.format ? view.format : "B";
            if (*f == '<' || *f == '=' || *f == '@') ++f;
            const size_t n = view.itemsize ? size_t(view.len / view.itemsize) : 0;
            bool ok = true;
            auto read = [&](auto* p) {
                for (size_t i = 0; i < n; ++i) ids.push_back(checked_id((long long)p[i], bound, what, noun));
            };
            try {
                if (f[1] != '\0')
                    ok = false;
                else if (*f == 'b')
                    read(static_cast<const int8_t*>(view.buf));
                else if (*f == 'B')
                    read(static_cast<const uint8_t*>(view.buf));
                else if (*f == 'h')
                    read(static_cast<const int16_t*>(view.buf));
                else if (*f == 'H')
                    read(static_cast<const uint16_t*>(view.buf));
                else if ((*f == 'i' || *f == 'l') && view.itemsize == 4)
                    read(static_cast<const int32_t*>(view.buf));
                else if ((*f == 'I' || *f == 'L') && view.itemsize == 4)
                    read(static_cast<const uint32_t*>(view.buf));
                else if ((*f == 'l' || *f == 'q') && view.itemsize == 8)
                    read(static_cast<const int64_t*>(view.buf));
                else if ((*f == 'L' || *f == 'Q') && view.itemsize == 8) {
                    const uint64_t* p = static_cast<const uint64_t*>(view.buf);
                    for (size_t i = 0; i < n; ++i)
                        ids.push_back(
                            checked_id(p[i] > uint64_t(LLONG_MAX) ? LLONG_MAX : (long long)p[i], bound, what, noun));
                } else
                    ok = false;
            } catch (...) {
                PyBuffer_Release(&view);
                throw;
            }
            PyBuffer_Release(&view);
            if (ok) return ids;
            throw nb::type_error((std::string(what) + ": " + noun + "s must be integers, got an array of format '" +
                                  (view.format ? view.format : "B") + "'")
                                     .c_str());
        }
        PyErr_Clear();
    }
    PyObject* it = PyObject_GetIter(o);
    if (!it) {
        PyErr_Clear();
        throw nb::type_error(
            (std::string(what) + ": expected an int or a sequence of ints, got " + Py_TYPE(o)->tp_name).c_str());
    }
    nb::object iter = nb::steal(it);
    while (PyObject* item = PyIter_Next(it)) {
        nb::object hold = nb::steal(item);
        ids.push_back(checked_id(as_int(item, what, noun), bound, what, noun));
    }
    if (PyErr_Occurred()) throw nb::python_error();
    return ids;
}

}  // namespace btpy
