// Vectors from what users pass: the view type's helpers, numbers parsed from lists and buffers,
// and as_vector (a Vector, Values, numbers or an array, wherever a Vector is expected).
#include <cmath>
#include <cstdio>
#include <cstring>

#include "vector.hpp"

namespace btpy {

// ---------------------------------------------------------------- the view type
void VectorBox::check() const {
    if (!alive()) {
        PyErr_SetString(StaleValueError,
                        "this Vector views nodes that a rewind of its arena discarded; keep views you "
                        "need across iterations below the checkpoint you rewind to");
        throw nb::python_error();
    }
}

VectorBox make_vector(const nb::object& owner, bt::ArenaBase* arena, const Spans& in, uint32_t rows, uint32_t cols) {
    VectorBox v;
    v.owner = owner;
    v.arena = arena;
    for (const Span& s : in) {
        if (s.second == 0) continue;
        if (!v.spans.empty() && uint64_t(v.spans.back().first) + v.spans.back().second == s.first)
            v.spans.back().second += s.second;
        else
            v.spans.push_back(s);
        v.size += s.second;
    }
    uint32_t top = 0;
    for (const Span& s : v.spans) {
        v.gens.push_back(arena->gen_of(s.first + s.second - 1));
        top = std::max(top, s.first + s.second - 1);
    }
    if (!v.spans.empty()) v.pin.take(arena, top);
    v.rows = rows;
    v.cols = rows ? cols : uint32_t(std::min<size_t>(v.size, UINT32_MAX));
    return v;
}

VectorBox contiguous_vector(const nb::object& owner, bt::ArenaBase* arena, uint32_t first, size_t n, uint32_t rows,
                            uint32_t cols) {
    return make_vector(owner, arena, Spans{{first, bt::checked_u32(n)}}, rows, cols);
}

void slice_spans(const VectorBox& v, size_t a, size_t b, Spans& out) {
    size_t pos = 0;
    for (const Span& s : v.spans) {
        if (pos >= b) break;
        const size_t lo = std::max(a, pos), hi = std::min(b, pos + s.second);
        if (lo < hi) out.push_back({s.first + uint32_t(lo - pos), uint32_t(hi - lo)});
        pos += s.second;
    }
}

VectorBox slice_elems(const VectorBox& v, size_t a, size_t b, uint32_t rows, uint32_t cols) {
    Spans out;
    slice_spans(v, a, b, out);
    return make_vector(v.owner, v.arena, out, rows, cols);
}

std::string shape_str(const VectorBox& v) {
    std::string s = "(";
    s += std::to_string(v.rows ? v.rows : v.size);
    s += v.rows ? ", " + std::to_string(v.cols) + ")" : std::string(",)");
    return s;
}

void same_arena(const VectorBox& a, const VectorBox& b, const char* what) {
    if (a.arena == b.arena) return;
    if (a.dtype() != b.dtype())
        throw nb::type_error((std::string(what) + ": cannot combine " + dtype_name(a.dtype()) + " and " +
                              dtype_name(b.dtype()) + " vectors")
                                 .c_str());
    throw nb::value_error((std::string(what) + ": the vectors live in different arenas").c_str());
}

nb::object value_at(const VectorBox& v, uint32_t slot) {
    PyObject* o = make_value(v.arena, v.owner.ptr(), slot);
    if (!o) throw nb::python_error();
    return nb::steal(o);
}

// ---------------------------------------------------------------- numbers from Python

// A list, a tuple or an array of at least one dimension (numpy scalars have the buffer protocol
// too, with zero dimensions: they are numbers).
static bool is_sequence_like(PyObject* o) {
    if (PyList_Check(o) || PyTuple_Check(o)) return true;
    if (PyBytes_Check(o) || PyByteArray_Check(o) || is_value(o) || !PyObject_CheckBuffer(o)) return false;
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return false;
    }
    const bool arr = view.ndim >= 1 && view.shape && view.strides;  // see numbers_from_buffer
    PyBuffer_Release(&view);
    return arr;
}

// Reads a 1-D or 2-D buffer of floats, ints or bools (any strides) into out. 1: done, 0: not a
// usable buffer (no error set).
static int numbers_from_buffer(PyObject* o, NumberArray& out, const char* what) {
    if (!PyObject_CheckBuffer(o) || PyBytes_Check(o) || PyByteArray_Check(o)) return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return 0;
    }
    struct Release {
        Py_buffer* v;
        ~Release() { PyBuffer_Release(v); }
    } release{&view};
    // Strides were asked for, yet some exporters leave them out: numpy's datetime64 scalar hands
    // out its 8 raw bytes with neither strides nor a numeric meaning. Such a buffer is no array.
    if (view.ndim >= 1 && (!view.shape || !view.strides)) return 0;
    const char* f = view.format ? view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    if (view.ndim < 1 || view.ndim > 2)
        throw nb::value_error(
            (std::string(what) + ": arrays must have 1 or 2 dimensions, got " + std::to_string(view.ndim)).c_str());
    const size_t rows = view.ndim == 2 ? size_t(view.shape[0]) : 1;
    const size_t cols = size_t(view.shape[view.ndim - 1]);
    const Py_ssize_t rs = view.ndim == 2 ? view.strides[0] : 0, cs = view.strides[view.ndim - 1];
    out.v.resize(rows * cols);
    out.rows = view.ndim == 2 ? rows : 0;
    out.cols = cols;
    auto read = [&](auto tag) {
        using S = decltype(tag);
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) {
                S x;
                std::memcpy(&x, static_cast<const char*>(view.buf) + Py_ssize_t(r) * rs + Py_ssize_t(c) * cs,
                            sizeof(S));
                out.v[r * cols + c] = double(x);
            }
    };
    const bool one = f[0] != '\0' && f[1] == '\0';
    const Py_ssize_t sz = view.itemsize;
    if (one && *f == 'd' && sz == 8)
        read(double());
    else if (one && *f == 'f' && sz == 4)
        read(float());
    else if (one && (*f == 'b'))
        read(int8_t());
    else if (one && (*f == 'B' || *f == '?'))
        read(uint8_t());
    else if (one && *f == 'h')
        read(int16_t());
    else if (one && *f == 'H')
        read(uint16_t());
    else if (one && (*f == 'i' || *f == 'l') && sz == 4)
        read(int32_t());
    else if (one && (*f == 'I' || *f == 'L') && sz == 4)
        read(uint32_t());
    else if (one && (*f == 'l' || *f == 'q') && sz == 8)
        read(int64_t());
    else if (one && (*f == 'L' || *f == 'Q') && sz == 8)
        read(uint64_t());
    else
        throw nb::type_error((std::string(what) + ": arrays must hold real numbers (float or int), got format '" +
                              (view.format ? view.format : "B") + "'")
                                 .c_str());
    return 1;
}

// One row of numbers (a sequence of numbers), appended to out.
static void numbers_from_row(PyObject* seq, std::vector<double>& out, const char* what, size_t row, bool nested) {
    nb::object fast = nb::steal(PySequence_Fast(seq, ""));
    if (!fast.is_valid()) throw nb::python_error();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* it = PySequence_Fast_GET_ITEM(fast.ptr(), i);
        double d;
        int ok = is_value(it) ? 0 : number_to_double(it, &d);
        if (ok < 0) throw nb::python_error();
        if (ok == 0) {
            std::string where =
                nested ? "row " + std::to_string(row) + ", item " + std::to_string(i) : "item " + std::to_string(i);
            std::string why = is_value(it)
                                  ? "a Value (nested lists of Values are not supported; use bt.vector or bt.cat)"
                                  : std::string("a ") + Py_TYPE(it)->tp_name + ", not a number";
            throw nb::type_error((std::string(what) + ": " + where + " is " + why).c_str());
        }
        out.push_back(d);
    }
}

// Numbers and shape from a sequence, a nested sequence (rows of equal length) or a buffer.
NumberArray parse_numbers(PyObject* o, const char* what) {
    NumberArray a;
    if (numbers_from_buffer(o, a, what)) return a;
    if (PyUnicode_Check(o) || PyBytes_Check(o))
        throw nb::type_error((std::string(what) + ": expected numbers, got a string").c_str());
    nb::object fast = nb::steal(PySequence_Fast(o, ""));
    if (!fast.is_valid()) {
        PyErr_Clear();
        throw nb::type_error((std::string(what) + ": expected a sequence of numbers, a nested list or an array, got " +
                              Py_TYPE(o)->tp_name)
                                 .c_str());
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
    PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
    if (n > 0 && is_sequence_like(items[0])) {  // rows
        a.rows = size_t(n);
        for (Py_ssize_t r = 0; r < n; ++r) {
            const size_t before = a.v.size();
            NumberArray row;
            if (numbers_from_buffer(items[r], row, what)) {
                if (row.rows) throw nb::value_error((std::string(what) + ": at most 2 dimensions").c_str());
                a.v.insert(a.v.end(), row.v.begin(), row.v.end());
            } else if (PyList_Check(items[r]) || PyTuple_Check(items[r])) {
                numbers_from_row(items[r], a.v, what, size_t(r), true);
            } else {
                throw nb::type_error((std::string(what) + ": row " + std::to_string(r) + " is a " +
                                      Py_TYPE(items[r])->tp_name + ", not a sequence of numbers")
                                         .c_str());
            }
            const size_t len = a.v.size() - before;
            if (r == 0)
                a.cols = len;
            else if (len != a.cols)
                throw nb::value_error((std::string(what) + ": the rows of a nested list must have one length; row " +
                                       std::to_string(r) + " has " + std::to_string(len) + ", row 0 has " +
                                       std::to_string(a.cols))
                                          .c_str());
        }
        if (a.cols == 0) throw nb::value_error((std::string(what) + ": rows must not be empty").c_str());
        return a;
    }
    numbers_from_row(fast.ptr(), a.v, what, 0, false);
    a.cols = a.v.size();
    return a;
}

// New contiguous leaves holding `vals` in `arena` (no Python code; inside the capacity guard).
uint32_t new_leaves(bt::ArenaBase* arena, const std::vector<double>& vals, size_t n) {
    return dispatch(arena, [&](auto& A) {
        using T = typename std::remove_reference_t<decltype(A)>::value_type;
        A.make_room(n, 0, 0);
        uint32_t f = A.new_slots(n);
        T* v = A.values() + f;
        for (size_t i = 0; i < n; ++i) v[i] = vals.empty() ? T(0) : static_cast<T>(vals[i]);
        return f;
    });
}

static nb::object anchor_owner(const VectorBox* anchor, bt::ArenaBase** arena) {
    if (anchor) {
        *arena = anchor->arena;
        return anchor->owner;
    }
    PyObject* a = current_arena(default_dtype());
    if (!a) throw nb::python_error();
    *arena = box_of(a)->core.get();
    return nb::borrow(a);
}

VectorBox as_vector(nb::handle h, const VectorBox* anchor, const char* what) {
    PyObject* o = h.ptr();
    if (nb::isinstance<VectorBox>(h)) return nb::cast<const VectorBox&>(h);
    if (is_value(o)) {
        PyValue* v = as_pyvalue(o);
        resolve(v);
        return make_vector(nb::borrow(v->owner), v->arena, Spans{{v->idx, 1}});
    }
    if (o == Py_None) throw nb::type_error((std::string(what) + ": expected a Vector, got None").c_str());
    // A list or tuple with Values in it: a view of those nodes.
    if (PyList_Check(o) || PyTuple_Check(o)) {
        bool has_value = false;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o) && !has_value; ++i)
            has_value = is_value(PySequence_Fast_GET_ITEM(o, i));
        if (has_value) {
            Collected c;
            if (!collect_sequence(o, what, c, false)) throw nb::python_error();
            bt::ArenaBase* arena = anchor ? anchor->arena : nullptr;
            PyObject* owner = anchor ? anchor->owner.ptr() : nullptr;
            IndexBuffer idx;
            if (!place_collected(c, what, *idx, &arena, &owner)) throw nb::python_error();
            Spans s;
            for (uint32_t i : *idx) s.push_back({i, 1});
            return make_vector(nb::borrow(owner), arena, s);
        }
    }
    if (!is_sequence_like(o) && !PySequence_Check(o))
        throw nb::type_error((std::string(what) +
                              ": expected a Vector, a list of numbers or Values, or an array, got " +
                              Py_TYPE(o)->tp_name)
                                 .c_str());
    NumberArray a = parse_numbers(o, what);
    if (a.v.empty()) throw nb::value_error((std::string(what) + ": got an empty sequence").c_str());
    bt::ArenaBase* arena;
    nb::object owner = anchor_owner(anchor, &arena);
    uint32_t first = new_leaves(arena, a.v, a.v.size());
    ConstantsGuard::created(owner.ptr(), arena, first, a.v.size());
    return contiguous_vector(owner, arena, first, a.v.size(), uint32_t(a.rows), uint32_t(a.rows ? a.cols : 0));
}

}  // namespace btpy
