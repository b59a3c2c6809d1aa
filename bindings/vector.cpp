// The Vector type: views that copy nothing (items, slices, columns, reshapes) and bulk data
// access. Making Vectors is in vector_make.cpp, converting arguments in vector_convert.cpp,
// range ops on Vectors in range.cpp.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "vector.hpp"

namespace btpy {

void bind_vector_ops(nb::class_<VectorBox>& V);  // range.cpp

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
    if (!refuse_write_while_tracing(v.arena, grads ? "set_grad()" : "set_data()")) throw nb::python_error();
    if (grads) v.arena->mark_grads_written();
    size_t i = 0;
    each_slot_ptr(v, grads, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(a.v[i++]); });
}

static void fill_grad(const VectorBox& v, double value) {
    v.check();
    if (!refuse_write_while_tracing(v.arena, "zero_grad()")) throw nb::python_error();
    if (value != 0.0) v.arena->mark_grads_written();
    each_slot_ptr(v, true, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(value); });
}

static void scale_grad(const VectorBox& v, double c) {
    v.check();
    if (!refuse_write_while_tracing(v.arena, "scale_grad()")) throw nb::python_error();
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
}

}  // namespace btpy
