// Making Vectors: leaf construction, views over Values, and the views that join or pick rows
// (cat, hcat, embedding lookup). The Vector type itself is in vector.cpp.
#include <nanobind/stl/vector.h>

#include "vector.hpp"

namespace btpy {

// ---------------------------------------------------------------- construction
static nb::object arena_for(nb::handle arena, nb::handle dtype) {
    bt::DType dt = default_dtype();
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

void init_vector_functions(nb::module_& m) {
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
