// Vectors: construction (leaves, views of Values), views that copy nothing (slices, columns,
// concatenation, embedding lookup) and bulk data access. Range ops on Vectors are in range.cpp.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "vector.hpp"

namespace btpy {

void bind_vector_ops(nb::class_<VectorBox>& V);  // range.cpp

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
    for (const Span& s : v.spans) v.gens.push_back(arena->gen_of(s.first + s.second - 1));
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
// Numbers parsed from a list, a nested list or a buffer, with their shape (rows == 0: 1-D).
struct NumberArray {
    std::vector<double> v;
    size_t rows = 0, cols = 0;
};

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
static NumberArray parse_numbers(PyObject* o, const char* what) {
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
static uint32_t new_leaves(bt::ArenaBase* arena, const std::vector<double>& vals, size_t n) {
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
    PyObject* a = current_arena(g_default_dtype);
    if (!a) throw nb::python_error();
    *arena = box_of(a)->core.get();
    return nb::borrow(a);
}

VectorBox as_vector(nb::handle h, const VectorBox* anchor, const char* what) {
    PyObject* o = h.ptr();
    if (nb::isinstance<VectorBox>(h)) return nb::cast<const VectorBox&>(h);
    if (is_value(o)) {
        PyValue* v = as_pyvalue(o);
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

// ---------------------------------------------------------------- construction
static nb::object arena_for(nb::handle arena, nb::handle dtype) {
    bt::DType dt = g_default_dtype;
    const bool have_dt = !dtype.is_none();
    if (have_dt && !parse_dtype(dtype.ptr(), &dt)) throw nb::python_error();
    if (!arena.is_none()) {
        ArenaBox* b = box_of(arena.ptr());
        if (!b) throw nb::python_error();
        if (have_dt && b->core->dtype() != dt) throw nb::type_error("dtype does not match the arena's dtype");
        return nb::borrow(arena);
    }
    PyObject* a = current_arena(dt);
    if (!a) throw nb::python_error();
    return nb::borrow(a);
}

// Dimensions from a shape argument: (n,) or (rows, cols), each a positive int.
static std::pair<size_t, size_t> parse_shape(nb::handle shape) {
    PyObject* s = shape.ptr();
    if (PyLong_Check(s)) {
        nb::object t = nb::steal(PyTuple_Pack(1, s));
        return parse_shape(t);
    }
    if (!PyTuple_Check(s) && !PyList_Check(s))
        throw nb::type_error("shape must be an int or a tuple of one or two ints");
    const Py_ssize_t nd = PySequence_Fast_GET_SIZE(s);
    if (nd < 1 || nd > 2) throw nb::value_error("shape must have one or two dimensions");
    size_t d[2] = {0, 0};
    for (Py_ssize_t i = 0; i < nd; ++i) {
        PyObject* it = PySequence_Fast_GET_ITEM(s, i);
        if (!PyLong_Check(it) || PyBool_Check(it)) throw nb::type_error("shape entries must be ints");
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(it, &overflow);
        if (overflow || x <= 0 || x > (1ll << 31))
            throw nb::value_error(
                ("shape entries must be in [1, 2**31], got " + std::string(nb::str(nb::handle(it)).c_str())).c_str());
        d[i] = size_t(x);
    }
    return nd == 1 ? std::pair<size_t, size_t>{0, d[0]} : std::pair<size_t, size_t>{d[0], d[1]};
}

// New contiguous leaf nodes from numbers (a list, a nested list, an array: the shape is kept) or
// zeros of a shape.
static VectorBox leaves(nb::handle data, nb::handle shape, nb::handle dtype, nb::handle arena_h) {
    NumberArray a;
    if (!data.is_none()) {
        if (is_value(data.ptr()) || nb::isinstance<VectorBox>(data))
            throw nb::type_error(
                "leaves(): data must be numbers; for new leaves holding a node's values use "
                "bt.leaves(x.data) (a Vector) or x.detach() (a Value)");
        a = parse_numbers(data.ptr(), "leaves()");
    }
    nb::object owner = arena_for(arena_h, dtype);
    bt::ArenaBase* arena = box_of(owner.ptr())->core.get();
    size_t rows = a.rows, cols = a.cols, n = a.v.size();
    if (!shape.is_none()) {
        auto [r, c] = parse_shape(shape);
        const size_t want = (r ? r : 1) * c;
        if (r && want / r != c) throw nb::value_error("leaves(): shape overflows");
        if (!data.is_none() && n != want)
            throw nb::value_error(("leaves(): " + std::to_string(n) + " values do not fill a shape of " +
                                   std::to_string(want) + " elements")
                                      .c_str());
        rows = r;
        cols = c;
        n = want;
    } else if (data.is_none()) {
        throw nb::type_error("leaves() needs data or a shape");
    }
    if (n == 0) throw nb::value_error("leaves(): a vector needs at least one element");
    if (n > (size_t(1) << 31)) throw nb::value_error("leaves(): too many elements (at most 2**31)");
    uint32_t first = new_leaves(arena, a.v, n);
    return contiguous_vector(owner, arena, first, n, uint32_t(rows), uint32_t(rows ? cols : 0));
}

// A view over the given Values (numbers become constant leaves). No values are copied.
static VectorBox vector_of(nb::handle seq) {
    ConstantsGuard guard;
    Collected c;
    if (!collect_sequence(seq.ptr(), "vector()", c, false)) throw nb::python_error();
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    IndexBuffer idx;
    if (!place_collected(c, "vector()", *idx, &arena, &owner)) throw nb::python_error();
    Spans s;
    for (uint32_t i : *idx) s.push_back({i, 1});
    return make_vector(nb::borrow(owner), arena, s);
}

// ---------------------------------------------------------------- views (no records)
static nb::object getitem(const VectorBox& v, nb::handle key) {
    if (PySlice_Check(key.ptr())) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
        v.check();
        const Py_ssize_t cnt = PySlice_AdjustIndices(Py_ssize_t(v.length()), &start, &stop, step);
        if (step != 1) throw nb::value_error("Vector slices must have step 1 (a view is a list of spans)");
        if (cnt <= 0) throw nb::index_error("empty slice of a Vector");
        if (v.rows)  // a slice of rows of a matrix
            return nb::cast(slice_elems(v, size_t(start) * v.cols, size_t(stop) * v.cols, uint32_t(cnt), v.cols));
        return nb::cast(slice_elems(v, size_t(start), size_t(stop)));
    }
    if (PyFloat_Check(key.ptr()) || PyBool_Check(key.ptr()) || !PyIndex_Check(key.ptr()))
        throw nb::type_error("Vector indices must be integers or slices");
    Py_ssize_t i = PyNumber_AsSsize_t(key.ptr(), PyExc_IndexError);  // may run __index__
    if (i == -1 && PyErr_Occurred()) throw nb::python_error();
    v.check();
    const Py_ssize_t len = Py_ssize_t(v.length());
    if (i < 0) i += len;
    if (i < 0 || i >= len) throw nb::index_error("Vector index out of range");
    if (v.rows) return nb::cast(slice_elems(v, size_t(i) * v.cols, size_t(i + 1) * v.cols));
    return value_at(v, v.slot(size_t(i)));
}

// The vectors of a cat/hcat argument, converted (lists, arrays, Values) and then checked.
static std::vector<VectorBox> vector_list(nb::handle seq, const char* what) {
    if (nb::isinstance<VectorBox>(seq) || is_value(seq.ptr()))
        throw nb::type_error((std::string(what) + ": expected a sequence of Vectors").c_str());
    nb::object fast = nb::steal(PySequence_Fast(seq.ptr(), ""));
    if (!fast.is_valid()) {
        PyErr_Clear();
        throw nb::type_error(
            (std::string(what) + ": expected a sequence of Vectors, got " + Py_TYPE(seq.ptr())->tp_name).c_str());
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
    if (n == 0) throw nb::value_error((std::string(what) + ": needs at least one vector").c_str());
    std::vector<VectorBox> vs;
    const VectorBox* anchor = nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {  // the first Vector anchors lists of numbers
        nb::handle it = PySequence_Fast_GET_ITEM(fast.ptr(), i);
        if (nb::isinstance<VectorBox>(it)) {
            anchor = &nb::cast<const VectorBox&>(it);
            break;
        }
    }
    for (Py_ssize_t i = 0; i < n; ++i) vs.push_back(as_vector(PySequence_Fast_GET_ITEM(fast.ptr(), i), anchor, what));
    for (const VectorBox& v : vs) {
        same_arena(vs[0], v, what);
        v.check();
    }
    return vs;
}

// Concatenation: the spans of each vector in turn.
static VectorBox cat(nb::handle seq) {
    ConstantsGuard guard;
    std::vector<VectorBox> vs = vector_list(seq, "cat()");
    Spans s;
    for (const VectorBox& v : vs) s.insert(s.end(), v.spans.begin(), v.spans.end());
    return make_vector(vs[0].owner, vs[0].arena, s);
}

// Side-by-side concatenation of matrices with equal rows (multi-head attention's heads): row r
// of the result is row r of each input in turn.
static VectorBox hcat(nb::handle seq) {
    ConstantsGuard guard;
    std::vector<VectorBox> vs = vector_list(seq, "hcat()");
    const uint32_t rows = vs[0].rows;
    size_t cols = 0;
    for (const VectorBox& v : vs) {
        if (!v.rows || v.rows != rows)
            throw nb::value_error("hcat(): all inputs must be matrices with the same number of rows");
        cols += v.cols;
    }
    Spans s;
    for (uint32_t r = 0; r < rows; ++r)
        for (const VectorBox& v : vs) slice_spans(v, size_t(r) * v.cols, size_t(r + 1) * v.cols, s);
    return make_vector(vs[0].owner, vs[0].arena, s, rows, bt::checked_u32(cols));
}

// Columns [a, b) of a matrix: one span per row.
static VectorBox col_slice(const VectorBox& v, int64_t a, int64_t b) {
    v.check();
    if (!v.rows) throw nb::value_error("columns(): the vector is not a matrix; reshape it first");
    if (a < 0 || a >= b || b > int64_t(v.cols)) throw nb::index_error("columns(): column range out of bounds");
    Spans s;
    for (uint32_t r = 0; r < v.rows; ++r)
        slice_spans(v, size_t(r) * v.cols + size_t(a), size_t(r) * v.cols + size_t(b), s);
    return make_vector(v.owner, v.arena, s, v.rows, uint32_t(b - a));
}

// Embedding lookup: rows `ids` of a (V x d) table, as a (len(ids) x d) view. No record: the
// consumers of the view read the table's slots, so gradients land in the table directly. While
// tracing with traced ids (program inputs) it is a gather record instead (csrc/range/gather.hpp).
static VectorBox embedding(const VectorBox& table, nb::handle ids_h) {
    if (!table.rows) throw nb::value_error("embedding(): the table must be a matrix (V x d)");
    std::vector<uint32_t> ids;
    {
        IdRead reading;
        ids = parse_ids(ids_h, table.rows, "embedding()", "token id");
    }
    if (ids.empty()) throw nb::value_error("embedding(): no token ids");
    std::vector<int64_t> traced;
    const bool record = traced_id_positions(ids_h, traced);
    table.check();
    if (record) {  // ids that are program inputs: a gather record, so a replay can change them
        if (!table.contiguous()) throw nb::value_error("embedding(): a traced lookup needs a contiguous table");
        const uint32_t n = bt::checked_u32(ids.size());
        VectorBox out = emit(table, size_t(n) * table.cols, n, table.cols,
                             [&](auto& A) { return bt::append_gather(A, table.spans, table.cols, ids.data(), n); });
        record_id_inputs(table.arena, traced, table.rows);
        return out;
    }
    Spans s;
    s.reserve(table.contiguous() ? ids.size() : 0);
    for (uint32_t id : ids) slice_spans(table, size_t(id) * table.cols, size_t(id + 1) * table.cols, s);
    return make_vector(table.owner, table.arena, s, bt::checked_u32(ids.size()), table.cols);
}

static VectorBox reshape(const VectorBox& v, int64_t rows, int64_t cols) {
    // Each dimension is checked before the product: (7, 0x6db6db6db6db6db7) multiplies to 1 modulo 2**64.
    if (rows <= 0 || cols <= 0 || uint64_t(rows) > v.size || uint64_t(cols) > v.size ||
        uint64_t(rows) * uint64_t(cols) != v.size)
        throw nb::value_error(("cannot reshape " + std::to_string(v.size) + " elements to (" + std::to_string(rows) +
                               ", " + std::to_string(cols) + ")")
                                  .c_str());
    VectorBox r = v;
    r.rows = uint32_t(rows);
    r.cols = uint32_t(cols);
    return r;
}

// ---------------------------------------------------------------- data access
static nb::list tolist(const VectorBox& v, bool grads) {
    v.check();
    if (!grads && !refuse_while_tracing(v.arena, "reading a Vector's numbers (tolist(), numpy())"))
        throw nb::python_error();
    nb::list out;
    each_slot_ptr(v, grads, [&](auto* p) { out.append(double(*p)); });
    return out;
}

static void assign(const VectorBox& v, nb::handle data, bool grads) {
    NumberArray a = parse_numbers(data.ptr(), grads ? "set_grad()" : "set_data()");  // Python code first
    if (a.v.size() != v.size)
        throw nb::value_error(
            ("assigning " + std::to_string(a.v.size()) + " numbers to a Vector of " + std::to_string(v.size)).c_str());
    v.check();
    if (grads) v.arena->mark_grads_written();
    size_t i = 0;
    each_slot_ptr(v, grads, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(a.v[i++]); });
}

static void fill_grad(const VectorBox& v, double value) {
    v.check();
    if (value != 0.0) v.arena->mark_grads_written();
    each_slot_ptr(v, true, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(value); });
}

static void scale_grad(const VectorBox& v, double c) {
    v.check();
    // A finite factor keeps zero grads zero; inf or nan turns them into nan, which the next sweep
    // must reset like any other write to interior grads.
    if (!std::isfinite(c)) v.arena->mark_grads_written();
    each_slot_ptr(v, true, [&](auto* p) { *p *= static_cast<std::remove_reference_t<decltype(*p)>>(c); });
}

static nb::object to_numpy(nb::handle self, const std::string& what, bool writable) {
    const VectorBox& v = nb::cast<const VectorBox&>(self);
    if (what != "values" && what != "grads")
        throw nb::value_error(("what must be 'values' or 'grads', got '" + what + "'").c_str());
    v.check();
    if (!v.contiguous()) {
        // A view with gaps: hand out a copy, never a view that silently misses elements.
        if (writable) throw nb::value_error("numpy(writable=True) needs a contiguous Vector; this view has gaps");
        nb::module_ np = nb::module_::import_("numpy");
        nb::object arr = np.attr("array")(tolist(v, what == "grads"),
                                          nb::arg("dtype") = v.dtype() == bt::DType::float64 ? "float64" : "float32");
        if (v.rows) arr = arr.attr("reshape")(v.rows, v.cols);
        return arr;
    }
    nb::object arr = v.owner.attr("numpy")(v.first(), v.first() + v.size, what, writable);
    if (v.rows) arr = arr.attr("reshape")(v.rows, v.cols);
    return arr;
}

// The single node of a one-element Vector (so a model's scalar output works like a Value).
static nb::object only_value(const VectorBox& v, const char* what) {
    if (v.size != 1)
        throw nb::value_error(
            (std::string(what) + " needs a one-element Vector, this one has shape " + shape_str(v)).c_str());
    v.check();
    return value_at(v, v.slot(0));
}

static std::string vector_repr(const VectorBox& v) {
    if (!v.alive()) return "Vector(<stale>)";
    std::string s = "Vector(shape=" + shape_str(v) + ", spans=" + std::to_string(v.spans.size());
    if (v.dtype() == bt::DType::float32) s += ", dtype=float32";
    s += ", data=[";
    size_t i = 0;
    each_slot_ptr(v, false, [&](auto* p) {
        if (i < 6) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", double(*p));
            s += buf;
        }
        ++i;
    });
    if (v.size > 6) s += ", ...";
    return s + "])";
}

// ---------------------------------------------------------------- registration
void init_vector(nb::module_& m) {
    auto V = nb::class_<VectorBox>(
        m, "Vector",
        "A view over nodes: a list of spans of slots, optionally shaped (rows, cols) row-major.\n\n"
        "Slicing, concatenation and embedding lookup make new views and copy nothing; range ops\n"
        "(linear, softmax, ...) take Vectors and append one record each.");
    V.def("__len__", [](const VectorBox& v) { return v.length(); })
        .def("__getitem__", &getitem, nb::sig("def __getitem__(self, key: int | slice, /) -> Value | Vector"))
        .def_prop_ro(
            "size", [](const VectorBox& v) { return v.size; }, "Number of elements.")
        .def_prop_ro(
            "shape",
            [](const VectorBox& v) { return v.rows ? nb::make_tuple(v.rows, v.cols) : nb::make_tuple(v.size); },
            nb::sig("def shape(self) -> tuple[int] | tuple[int, int]"), "(size,) or (rows, cols).")
        .def_prop_ro(
            "spans", [](const VectorBox& v) { return v.spans; }, "The (first slot, length) spans viewed.")
        .def_prop_ro(
            "arena", [](const VectorBox& v) { return v.owner; }, nb::sig("def arena(self) -> Arena"))
        .def_prop_ro(
            "dtype", [](const VectorBox& v) { return nb::borrow(g_dtype_objects[int(v.dtype())]); },
            nb::sig("def dtype(self) -> DType"))
        .def_prop_ro("alive", &VectorBox::alive)
        .def_prop_ro("contiguous", &VectorBox::contiguous)
        .def_prop_ro(
            "data", [](const VectorBox& v) { return tolist(v, false); }, nb::sig("def data(self) -> list[float]"),
            "The values as a list of floats.")
        .def_prop_ro(
            "grad", [](const VectorBox& v) { return tolist(v, true); }, nb::sig("def grad(self) -> list[float]"),
            "The grads as a list of floats.")
        .def(
            "tolist",
            [](const VectorBox& v, const std::string& what) {
                if (what != "values" && what != "grads") throw nb::value_error("what must be 'values' or 'grads'");
                return tolist(v, what == "grads");
            },
            nb::arg("what") = "values", nb::sig("def tolist(self, what: str = 'values') -> list[float]"))
        .def(
            "set_data", [](const VectorBox& v, nb::handle d) { assign(v, d, false); }, nb::arg("values"),
            nb::sig("def set_data(self, values: Sequence[float] | Sequence[Sequence[float]] | ArrayLike) -> None"),
            "Overwrites the values (e.g. to load weights): numbers, a nested list or an array.")
        .def(
            "set_grad", [](const VectorBox& v, nb::handle d) { assign(v, d, true); }, nb::arg("grads"),
            nb::sig("def set_grad(self, grads: Sequence[float] | Sequence[Sequence[float]] | ArrayLike) -> None"))
        .def("zero_grad", [](const VectorBox& v) { fill_grad(v, 0.0); })
        .def("scale_grad", &scale_grad, nb::arg("factor"))
        .def("numpy", &to_numpy, nb::arg("what") = "values", nb::arg("writable") = false,
             nb::sig("def numpy(self, what: str = 'values', writable: bool = False) -> Any"),
             "A numpy array of the values (or grads): zero-copy for a contiguous Vector, a copy otherwise.")
        .def("reshape", &reshape, nb::arg("rows"), nb::arg("cols"))
        .def("flatten",
             [](const VectorBox& v) {
                 VectorBox r = v;
                 r.rows = 0;
                 r.cols = uint32_t(r.size);
                 return r;
             })
        .def("columns", &col_slice, nb::arg("start"), nb::arg("stop"), "Columns [start, stop) of a matrix, as a view.")
        .def(
            "values",
            [](const VectorBox& v) {
                v.check();
                nb::list out;
                for (const Span& s : v.spans)
                    for (uint32_t i = 0; i < s.second; ++i) out.append(value_at(v, s.first + i));
                return out;
            },
            nb::sig("def values(self) -> list[Value]"), "The elements as a list of Value handles.")
        .def(
            "item", [](const VectorBox& v) { return nb::cast<double>(only_value(v, "item()").attr("data")); },
            "The value of a one-element Vector as a float.")
        .def("__float__", [](const VectorBox& v) { return nb::cast<double>(only_value(v, "float()").attr("data")); })
        .def(
            "backward",
            [](const VectorBox& v, nb::handle seed, nb::handle wrt) {
                only_value(v, "backward()").attr("backward")(seed.is_none() ? nb::float_(1.0) : nb::borrow(seed), wrt);
            },
            nb::arg("seed") = nb::none(), nb::arg("wrt") = nb::none(),
            nb::sig("def backward(self, seed: float | None = None, wrt: Sequence[Value] | None = None) -> None"),
            "Reverse sweep from the node of a one-element Vector (a model's scalar output).")
        .def("__repr__", &vector_repr);
    bind_vector_ops(V);

    m.def("leaves", &leaves, nb::arg("data") = nb::none(), nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(),
          nb::arg("arena") = nb::none(),
          nb::sig("def leaves(data: Sequence[float] | Sequence[Sequence[float]] | ArrayLike | None = None, "
                  "shape: int | Sequence[int] | None = None, dtype: DType | str | None = None, "
                  "arena: Arena | None = None) -> Vector"),
          R"doc(New contiguous leaf nodes, from numbers or as zeros of a shape.

    leaves([1, 2, 3]); leaves([[1, 2], [3, 4]]); leaves(np.ones((4, 3))); leaves(shape=(4, 8))

Args:
    data: numbers -- a list, a nested list of rows of one length, or a float/int/bool array of one
        or two dimensions (any strides); its shape is kept.
    shape: (n,) or (rows, cols); with data, it must hold as many elements (it may reshape them).
    dtype: burtorch.float32 or float64 (default: the default dtype, or the arena's).
    arena: the arena to append to (default: the thread's current arena of the dtype).

Returns:
    A contiguous Vector of the new leaves.

Raises:
    TypeError: data that is not numbers (strings, Values, nested lists of Values).
    ValueError: ragged rows, more than two dimensions, a shape that does not fit the data, no elements.
    MemoryError: the arena is full.)doc");
    m.def("vector", &vector_of, nb::arg("values"), nb::sig("def vector(values: Sequence[Value | float]) -> Vector"),
          R"doc(A view over existing Values, copying nothing (adjacent slots merge into one span).

Args:
    values: Values of one arena; numbers among them become constant leaves.

Returns:
    A one-dimensional Vector.)doc");
    m.def("cat", &cat, nb::arg("vectors"), nb::sig("def cat(vectors: Sequence[VectorLike]) -> Vector"),
          R"doc(The concatenation of vectors as a view: their spans one after another, no copy.

Args:
    vectors: Vectors (lists and arrays become constant leaves) of one arena.

Returns:
    A one-dimensional Vector.)doc");
    m.def("hcat", &hcat, nb::arg("matrices"), nb::sig("def hcat(matrices: Sequence[VectorLike]) -> Vector"),
          R"doc(Matrices side by side as a view (row r is row r of each in turn): how per-head attention
outputs are concatenated without a copy.

Args:
    matrices: matrices with equal numbers of rows, of one arena.

Returns:
    A (rows x sum of cols) Vector.)doc");
    m.def("embedding", &embedding, nb::arg("table"), nb::arg("ids"),
          nb::sig("def embedding(table: Vector, ids: int | Sequence[int] | ArrayLike) -> Vector"),
          R"doc(Rows of a table as a view: no copy and no record; consumers read the table's slots, so
gradients land in the table directly.

Args:
    table: a (V x d) matrix.
    ids: an int, a sequence of ints or an integer array, each in [0, V).

Returns:
    A (len(ids) x d) Vector.

Raises:
    IndexError: an id outside [0, V).
    TypeError: ids that are not integers.)doc");
}

}  // namespace btpy
