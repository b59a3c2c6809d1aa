// Vector: a view over slots as a list of spans (with an optional 2-D row-major shape), and the
// range ops that take vectors. Slicing, concatenation and embedding lookup build new span lists
// and copy nothing; each range op is one native call and one record.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "common.hpp"

namespace btpy {

using bt::Op;
using bt::Span;
using bt::Spans;

struct VectorBox {
    nb::object owner;  // the Python Arena
    bt::ArenaBase* arena = nullptr;
    bt::DType dtype = bt::DType::float64;
    Spans spans;
    std::vector<uint32_t> gens;  // per span: generation of its first and of its last slot
    uint32_t size = 0;
    uint32_t rows = 0, cols = 0;  // rows == 0: one-dimensional

    bool alive() const {
        for (size_t i = 0; i < spans.size(); ++i) {
            const Span& s = spans[i];
            if (!arena->alive(s.first, gens[2 * i]) || !arena->alive(s.first + s.second - 1, gens[2 * i + 1]))
                return false;
        }
        return true;
    }
    void check() const {
        if (!alive()) {
            PyErr_SetString(StaleValueError,
                            "this Vector views nodes that a rewind of its arena discarded; keep views you "
                            "need across iterations below the checkpoint you rewind to");
            throw nb::python_error();
        }
    }
    bool contiguous() const { return spans.size() == 1; }
    uint32_t first() const { return spans.empty() ? 0 : spans[0].first; }
    // Slot index of element i.
    uint32_t slot(uint32_t i) const {
        for (const Span& s : spans) {
            if (i < s.second) return s.first + i;
            i -= s.second;
        }
        return UINT32_MAX;
    }
};

// Builds a view from spans (merging adjacent ones) and stamps their generations.
static VectorBox make_vector(const nb::object& owner, bt::ArenaBase* arena, bt::DType dt, const Spans& in,
                             uint32_t rows = 0, uint32_t cols = 0) {
    VectorBox v;
    v.owner = owner;
    v.arena = arena;
    v.dtype = dt;
    for (const Span& s : in) {
        if (s.second == 0) continue;
        if (!v.spans.empty() && v.spans.back().first + v.spans.back().second == s.first) v.spans.back().second += s.second;
        else v.spans.push_back(s);
        v.size += s.second;
    }
    for (const Span& s : v.spans) {
        v.gens.push_back(arena->gen_of(s.first));
        v.gens.push_back(arena->gen_of(s.first + s.second - 1));
    }
    v.rows = rows;
    v.cols = rows ? cols : v.size;
    return v;
}

static VectorBox contiguous_vector(const nb::object& owner, bt::ArenaBase* arena, bt::DType dt, uint32_t first,
                                   uint32_t n, uint32_t rows = 0, uint32_t cols = 0) {
    return make_vector(owner, arena, dt, Spans{{first, n}}, rows, cols);
}

static std::string shape_str(const VectorBox& v) {
    return v.rows ? "(" + std::to_string(v.rows) + ", " + std::to_string(v.cols) + ")" : "(" + std::to_string(v.size) + ",)";
}

static void same_arena(const VectorBox& a, const VectorBox& b, const char* what) {
    if (a.arena == b.arena) return;
    if (a.dtype != b.dtype)
        throw nb::type_error((std::string(what) + ": cannot combine " + dtype_name(a.dtype) + " and " +
                              dtype_name(b.dtype) + " vectors").c_str());
    throw nb::value_error((std::string(what) + ": the vectors live in different arenas").c_str());
}

template <typename F>
static auto dispatch(bt::DType dt, bt::ArenaBase* a, F&& f) {
    if (dt == bt::DType::float64) return f(typed<double>(a));
    return f(typed<float>(a));
}

// Runs a core append inside a capacity guard and wraps the output span as a vector.
template <typename F>
static VectorBox emit(const VectorBox& like, uint32_t n, uint32_t rows, uint32_t cols, F&& append) {
    uint32_t out;
    try {
        out = dispatch(like.dtype, like.arena, append);
    } catch (const bt::CapacityError& e) {
        throw nb::builtin_exception(nb::exception_type::runtime_error, e.what());
    }
    return contiguous_vector(like.owner, like.arena, like.dtype, out, n, rows, cols);
}

static nb::object value_at(const VectorBox& v, uint32_t slot) {
    return nb::steal(make_value(v.arena, v.owner.ptr(), slot, v.dtype));
}

// ---------------------------------------------------------------- construction
static nb::object arena_for(nb::handle arena, nb::handle dtype, bt::DType* dt) {
    *dt = g_default_dtype;
    bool have_dt = !dtype.is_none();
    if (have_dt && !parse_dtype(dtype.ptr(), dt)) throw nb::python_error();
    if (!arena.is_none()) {
        ArenaBox* b = box_of(arena.ptr());
        if (!b) throw nb::python_error();
        if (have_dt && b->dtype != *dt) throw nb::type_error("dtype does not match the arena's dtype");
        *dt = b->dtype;
        return nb::borrow(arena);
    }
    PyObject* a = current_arena(*dt);
    if (!a) throw nb::python_error();
    return nb::borrow(a);
}

// New contiguous leaves from a sequence of numbers or a buffer (bulk copy), optionally shaped.
static VectorBox leaves(nb::handle data, nb::handle shape, nb::handle dtype, nb::handle arena_h) {
    bt::DType dt;
    nb::object owner = arena_for(arena_h, dtype, &dt);
    bt::ArenaBase* arena = box_of(owner.ptr())->core.get();
    uint32_t rows = 0, cols = 0;
    size_t n = 0;
    if (!shape.is_none()) {
        nb::tuple t = nb::tuple(nb::borrow(shape));
        if (t.size() == 1) n = nb::cast<size_t>(t[0]);
        else if (t.size() == 2) {
            rows = nb::cast<uint32_t>(t[0]);
            cols = nb::cast<uint32_t>(t[1]);
            n = size_t(rows) * cols;
            if (rows == 0 || cols == 0) throw nb::value_error("a 2-D shape needs rows > 0 and cols > 0");
        } else throw nb::value_error("shape must have one or two dimensions");
    }
    std::vector<double> vals;
    Py_buffer view;
    bool have_buffer = !data.is_none() && !PyUnicode_Check(data.ptr()) && !PyBytes_Check(data.ptr()) &&
                       PyObject_CheckBuffer(data.ptr()) &&
                       PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0;
    if (have_buffer) {
        std::string fmt = view.format ? view.format : "B";
        size_t cnt = static_cast<size_t>(view.len / view.itemsize);
        bool ok = true;
        vals.resize(cnt);
        if ((fmt == "d" || fmt == "<d" || fmt == "=d") && view.itemsize == 8)
            for (size_t i = 0; i < cnt; ++i) vals[i] = static_cast<const double*>(view.buf)[i];
        else if ((fmt == "f" || fmt == "<f" || fmt == "=f") && view.itemsize == 4)
            for (size_t i = 0; i < cnt; ++i) vals[i] = static_cast<const float*>(view.buf)[i];
        else ok = false;
        PyBuffer_Release(&view);
        if (!ok) throw nb::type_error(("leaves(): buffers must hold float32 or float64, got format '" + fmt + "'").c_str());
    } else if (!data.is_none()) {
        PyErr_Clear();
        if (PyUnicode_Check(data.ptr()) || PyBytes_Check(data.ptr()))
            throw nb::type_error("leaves(): data must be a sequence of numbers, not a string");
        PyObject* fast = PySequence_Fast(data.ptr(), "leaves(): data must be a sequence of numbers");
        if (!fast) throw nb::python_error();
        Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
        vals.resize(static_cast<size_t>(m));
        for (Py_ssize_t i = 0; i < m; ++i) {
            double d;
            if (!number_to_double(PySequence_Fast_GET_ITEM(fast, i), &d)) {
                Py_DECREF(fast);
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "leaves(): item %zd is not a number", i);
                throw nb::python_error();
            }
            vals[static_cast<size_t>(i)] = d;
        }
        Py_DECREF(fast);
    }
    if (!data.is_none()) {
        if (!shape.is_none() && vals.size() != n)
            throw nb::value_error(("leaves(): " + std::to_string(vals.size()) + " values do not fill shape of " +
                                   std::to_string(n) + " elements").c_str());
        n = vals.size();
    }
    if (n == 0) throw nb::value_error("leaves(): a vector needs at least one element");
    if (n > (size_t(1) << 31)) throw nb::value_error("leaves(): too many elements");
    uint32_t first;
    try {
        first = dispatch(dt, arena, [&](auto& A) {
            A.make_room(n, 0, 0);
            uint32_t f = A.new_slots(n);
            auto* v = A.values() + f;
            for (size_t i = 0; i < n; ++i) v[i] = vals.empty() ? 0 : static_cast<std::remove_reference_t<decltype(*v)>>(vals[i]);
            return f;
        });
    } catch (const bt::CapacityError& e) {
        throw nb::builtin_exception(nb::exception_type::runtime_error, e.what());
    }
    return contiguous_vector(owner, arena, dt, first, uint32_t(n), rows, cols);
}

// A view over the given Values (numbers become constant leaves). No values are copied.
static VectorBox vector_of(nb::handle seq) {
    bt::ArenaBase* arena = nullptr;
    PyObject* owner = nullptr;
    bt::DType dt;
    std::vector<uint32_t> idx;
    if (!collect_values(seq.ptr(), "vector", idx, &arena, &owner, &dt, false)) throw nb::python_error();
    Spans s;
    for (uint32_t i : idx) s.push_back({i, 1});
    return make_vector(nb::borrow(owner), arena, dt, s);
}

// ---------------------------------------------------------------- views (no records)
static VectorBox slice_elems(const VectorBox& v, uint32_t a, uint32_t b, uint32_t rows = 0, uint32_t cols = 0) {
    Spans out;
    uint32_t pos = 0;
    for (const Span& s : v.spans) {
        uint32_t lo = std::max(a, pos), hi = std::min(b, pos + s.second);
        if (lo < hi) out.push_back({s.first + (lo - pos), hi - lo});
        pos += s.second;
    }
    return make_vector(v.owner, v.arena, v.dtype, out, rows, cols);
}

static nb::object getitem(const VectorBox& v, nb::handle key) {
    v.check();
    if (PySlice_Check(key.ptr())) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
        Py_ssize_t len = v.rows ? v.rows : v.size;
        Py_ssize_t cnt = PySlice_AdjustIndices(len, &start, &stop, step);
        if (step != 1) throw nb::value_error("Vector slices must have step 1 (a view is a list of spans)");
        if (cnt <= 0) throw nb::index_error("empty slice of a Vector");
        if (v.rows)  // a slice of rows of a matrix
            return nb::cast(slice_elems(v, uint32_t(start) * v.cols, uint32_t(stop) * v.cols, uint32_t(cnt), v.cols));
        return nb::cast(slice_elems(v, uint32_t(start), uint32_t(stop)));
    }
    Py_ssize_t i = PyNumber_AsSsize_t(key.ptr(), PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        throw nb::type_error("Vector indices must be integers or slices");
    }
    Py_ssize_t len = v.rows ? v.rows : v.size;
    if (i < 0) i += len;
    if (i < 0 || i >= len) throw nb::index_error("Vector index out of range");
    if (v.rows) return nb::cast(slice_elems(v, uint32_t(i) * v.cols, uint32_t(i + 1) * v.cols));
    return value_at(v, v.slot(uint32_t(i)));
}

// Concatenation: the spans of each vector in turn.
static VectorBox cat(const std::vector<const VectorBox*>& vs) {
    if (vs.empty()) throw nb::value_error("cat(): needs at least one vector");
    Spans s;
    for (const VectorBox* v : vs) {
        same_arena(*vs[0], *v, "cat");
        v->check();
        s.insert(s.end(), v->spans.begin(), v->spans.end());
    }
    return make_vector(vs[0]->owner, vs[0]->arena, vs[0]->dtype, s);
}

// Side-by-side concatenation of matrices with equal rows (multi-head attention's heads): row r
// of the result is row r of each input in turn.
static VectorBox hcat(const std::vector<const VectorBox*>& vs) {
    if (vs.empty()) throw nb::value_error("hcat(): needs at least one matrix");
    const uint32_t rows = vs[0]->rows;
    uint32_t cols = 0;
    for (const VectorBox* v : vs) {
        same_arena(*vs[0], *v, "hcat");
        v->check();
        if (!v->rows || v->rows != rows) throw nb::value_error("hcat(): all inputs must be matrices with the same number of rows");
        cols += v->cols;
    }
    Spans s;
    for (uint32_t r = 0; r < rows; ++r)
        for (const VectorBox* v : vs) {
            VectorBox row = slice_elems(*v, r * v->cols, (r + 1) * v->cols);
            s.insert(s.end(), row.spans.begin(), row.spans.end());
        }
    return make_vector(vs[0]->owner, vs[0]->arena, vs[0]->dtype, s, rows, cols);
}

// Columns [a, b) of a matrix: one span per row.
static VectorBox col_slice(const VectorBox& v, uint32_t a, uint32_t b) {
    v.check();
    if (!v.rows) throw nb::value_error("columns(): the vector is not a matrix; reshape it first");
    if (a >= b || b > v.cols) throw nb::index_error("columns(): column range out of bounds");
    Spans s;
    for (uint32_t r = 0; r < v.rows; ++r) {
        VectorBox row = slice_elems(v, r * v.cols + a, r * v.cols + b);
        s.insert(s.end(), row.spans.begin(), row.spans.end());
    }
    return make_vector(v.owner, v.arena, v.dtype, s, v.rows, b - a);
}

// Embedding lookup: rows `ids` of a (V x d) table, as a (len(ids) x d) view. No record: the
// consumers of the view read the table's slots, so gradients land in the table directly.
static VectorBox embedding(const VectorBox& table, nb::handle ids_h) {
    table.check();
    if (!table.rows) throw nb::value_error("embedding(): the table must be a matrix (V x d)");
    std::vector<uint32_t> ids;
    if (PyLong_Check(ids_h.ptr())) ids.push_back(0), ids[0] = nb::cast<uint32_t>(ids_h);
    else {
        for (nb::handle h : nb::iter(ids_h)) {
            long long id = PyLong_AsLongLong(h.ptr());
            if (id == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                throw nb::type_error("embedding(): token ids must be integers");
            }
            if (id < 0 || id >= (long long)table.rows)
                throw nb::index_error(("embedding(): token id " + std::to_string(id) + " is out of range for a table of " +
                                       std::to_string(table.rows) + " rows").c_str());
            ids.push_back(uint32_t(id));
        }
    }
    if (ids.empty()) throw nb::value_error("embedding(): no token ids");
    Spans s;
    for (uint32_t id : ids) {
        VectorBox row = slice_elems(table, id * table.cols, (id + 1) * table.cols);
        s.insert(s.end(), row.spans.begin(), row.spans.end());
    }
    return make_vector(table.owner, table.arena, table.dtype, s, uint32_t(ids.size()), table.cols);
}

// ---------------------------------------------------------------- range ops (one record each)
static VectorBox map_unary(const VectorBox& x, Op op, double imm = 0.0) {
    x.check();
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::range_map_unary(A, op, x.spans, imm); });
}

static VectorBox map_binary(const VectorBox& a, const VectorBox& b, Op op) {
    same_arena(a, b, bt::op_info(op).name);
    a.check();
    b.check();
    if (a.size != b.size)
        throw nb::value_error(("elementwise " + std::string(bt::op_info(op).name) + ": lengths differ (" +
                               std::to_string(a.size) + " vs " + std::to_string(b.size) + ")").c_str());
    return emit(a, a.size, a.rows, a.cols, [&](auto& A) { return bt::range_map_binary(A, op, a.spans, b.spans); });
}

static nb::object scalar_out(const VectorBox& like, uint32_t slot) { return value_at(like, slot); }

static nb::object vsum(const VectorBox& x, double scale) {
    x.check();
    VectorBox out = emit(x, 1, 0, 0, [&](auto& A) { return bt::range_sum(A, x.spans, scale); });
    return scalar_out(x, out.first());
}

static nb::object vdot(const VectorBox& x, const VectorBox& w) {
    same_arena(x, w, "dot");
    x.check();
    w.check();
    if (x.size != w.size) throw nb::value_error("dot(): lengths differ");
    VectorBox out = emit(x, 1, 0, 0, [&](auto& A) { return bt::range_dot(A, x.spans, w.spans); });
    return scalar_out(x, out.first());
}

static VectorBox linear(const VectorBox& x, const VectorBox& W, const VectorBox* b) {
    same_arena(x, W, "linear");
    x.check();
    W.check();
    if (!W.rows) throw nb::value_error("linear(): W must be a matrix (out x in)");
    if (!W.contiguous()) throw nb::value_error("linear(): W must be contiguous (a parameter block), not a view with gaps");
    const uint32_t in = W.cols, out = W.rows;
    uint32_t rows = x.rows ? x.rows : 1;
    if ((x.rows ? x.cols : x.size) != in)
        throw nb::value_error(("linear(): x has shape " + shape_str(x) + " but W expects " + std::to_string(in) +
                               " inputs (W is " + shape_str(W) + ")").c_str());
    if (b) {
        same_arena(x, *b, "linear");
        b->check();
        if (b->size != out || !b->contiguous())
            throw nb::value_error(("linear(): the bias must be a contiguous vector of " + std::to_string(out) + " elements").c_str());
    }
    return emit(x, rows * out, x.rows ? rows : 0, out,
                [&](auto& A) { return bt::range_linear(A, x.spans, W.spans, b ? &b->spans : nullptr, rows, in, out); });
}

static VectorBox softmax(const VectorBox& x) {
    x.check();
    uint32_t rows = x.rows ? x.rows : 1, n = x.cols;
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::range_softmax(A, x.spans, rows, n); });
}

static nb::object cross_entropy(const VectorBox& logits, nb::handle targets_h) {
    logits.check();
    std::vector<uint32_t> t;
    const uint32_t rows = logits.rows ? logits.rows : 1, V = logits.cols;
    auto take = [&](nb::handle h) {
        long long id = PyLong_AsLongLong(h.ptr());
        if (id == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            throw nb::type_error("cross_entropy(): targets must be integers");
        }
        if (id < 0 || id >= (long long)V)
            throw nb::index_error(("cross_entropy(): target " + std::to_string(id) + " is out of range for " +
                                   std::to_string(V) + " classes").c_str());
        t.push_back(uint32_t(id));
    };
    if (PyLong_Check(targets_h.ptr())) take(targets_h);
    else for (nb::handle h : nb::iter(targets_h)) take(h);
    if (t.size() != rows)
        throw nb::value_error(("cross_entropy(): " + std::to_string(t.size()) + " targets for " + std::to_string(rows) +
                               " rows of logits").c_str());
    VectorBox out = emit(logits, 1, 0, 0, [&](auto& A) { return bt::range_cross_entropy(A, logits.spans, rows, V, t.data()); });
    return scalar_out(logits, out.first());
}

static VectorBox layer_norm(const VectorBox& x, const VectorBox& gamma, const VectorBox& beta, double eps) {
    same_arena(x, gamma, "layer_norm");
    same_arena(x, beta, "layer_norm");
    x.check();
    gamma.check();
    beta.check();
    const uint32_t C = x.cols, rows = x.rows ? x.rows : 1;
    if (gamma.size != C || beta.size != C || !gamma.contiguous() || !beta.contiguous())
        throw nb::value_error(("layer_norm(): gamma and beta must be contiguous vectors of " + std::to_string(C) + " elements").c_str());
    if (!(eps > 0) || !std::isfinite(eps)) throw nb::value_error("layer_norm(): eps must be a positive finite number");
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::range_layer_norm(A, x.spans, gamma.spans, beta.spans, rows, C, eps); });
}

static nb::object attention(const VectorBox& q, const VectorBox& k, const VectorBox& v, bool causal, nb::handle scale_h,
                            bool return_weights) {
    same_arena(q, k, "attention");
    same_arena(q, v, "attention");
    q.check();
    k.check();
    v.check();
    if (!q.rows || q.rows != k.rows || q.rows != v.rows || q.cols != k.cols || q.cols != v.cols)
        throw nb::value_error(("attention(): q, k, v must be matrices of one shape (T x head_size), got " + shape_str(q) +
                               ", " + shape_str(k) + ", " + shape_str(v)).c_str());
    const uint32_t Tn = q.rows, hs = q.cols;
    double scale = scale_h.is_none() ? 1.0 / std::sqrt(double(hs)) : nb::cast<double>(scale_h);
    if (!std::isfinite(scale)) throw nb::value_error("attention(): scale must be finite");
    VectorBox all = emit(q, Tn * hs + Tn * Tn, 0, 0,
                         [&](auto& A) { return bt::range_attention(A, q.spans, k.spans, v.spans, Tn, hs, causal, scale); });
    VectorBox out = contiguous_vector(q.owner, q.arena, q.dtype, all.first(), Tn * hs, Tn, hs);
    if (!return_weights) return nb::cast(out);
    VectorBox w = contiguous_vector(q.owner, q.arena, q.dtype, all.first() + Tn * hs, Tn * Tn, Tn, Tn);
    return nb::make_tuple(out, w);
}

static nb::object multi_head_attention(const VectorBox& qkv, uint32_t heads, bool causal, nb::handle scale_h,
                                       bool return_weights, uint32_t sequences) {
    qkv.check();
    if (!qkv.rows || qkv.cols % 3 != 0)
        throw nb::value_error(("multi_head_attention(): qkv must be a (T x 3C) matrix, got " + shape_str(qkv)).c_str());
    if (sequences == 0 || qkv.rows % sequences != 0)
        throw nb::value_error(("multi_head_attention(): " + std::to_string(qkv.rows) + " rows do not split into " +
                               std::to_string(sequences) + " sequences").c_str());
    const uint32_t S = sequences, Tn = qkv.rows / S, C = qkv.cols / 3;
    if (heads == 0 || C % heads != 0)
        throw nb::value_error(("multi_head_attention(): " + std::to_string(C) + " channels do not split into " +
                               std::to_string(heads) + " heads").c_str());
    double scale = scale_h.is_none() ? 1.0 / std::sqrt(double(C / heads)) : nb::cast<double>(scale_h);
    if (!std::isfinite(scale)) throw nb::value_error("multi_head_attention(): scale must be finite");
    VectorBox all = emit(qkv, S * (Tn * C + heads * Tn * Tn), 0, 0,
                         [&](auto& A) { return bt::range_mha(A, qkv.spans, Tn, C, heads, causal, scale, S); });
    VectorBox out = contiguous_vector(qkv.owner, qkv.arena, qkv.dtype, all.first(), S * Tn * C, S * Tn, C);
    if (!return_weights) return nb::cast(out);
    nb::list ws;  // one (T x T) matrix per sequence and head, sequence-major
    for (uint32_t k = 0; k < S * heads; ++k)
        ws.append(contiguous_vector(qkv.owner, qkv.arena, qkv.dtype, all.first() + S * Tn * C + k * Tn * Tn, Tn * Tn, Tn, Tn));
    return nb::make_tuple(out, ws);
}

static VectorBox copy(const VectorBox& x) {
    x.check();
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::range_copy(A, x.spans); });
}

// ---------------------------------------------------------------- data access
template <typename F>
static void each_slot_ptr(const VectorBox& v, bool grads, F&& f) {
    dispatch(v.dtype, v.arena, [&](auto& A) {
        auto* base = grads ? A.grads() : A.values();
        for (const Span& s : v.spans)
            for (uint32_t i = 0; i < s.second; ++i) f(base + s.first + i);
        return 0;
    });
}

static nb::list tolist(const VectorBox& v, bool grads) {
    v.check();
    nb::list out;
    each_slot_ptr(v, grads, [&](auto* p) { out.append(double(*p)); });
    return out;
}

static void assign(const VectorBox& v, nb::handle data, bool grads) {
    v.check();
    nb::list vals = nb::list(nb::borrow(data));  // any iterable of numbers
    if (vals.size() != v.size)
        throw nb::value_error(("assigning " + std::to_string(vals.size()) + " numbers to a Vector of " + std::to_string(v.size)).c_str());
    std::vector<double> d(v.size);
    for (size_t i = 0; i < v.size; ++i)
        if (!number_to_double(vals[i].ptr(), &d[i])) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "item %zu is not a number", i);
            throw nb::python_error();
        }
    size_t i = 0;
    each_slot_ptr(v, grads, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(d[i++]); });
}

static void fill_grad(const VectorBox& v, double value) {
    v.check();
    each_slot_ptr(v, true, [&](auto* p) { *p = static_cast<std::remove_reference_t<decltype(*p)>>(value); });
}

static void scale_grad(const VectorBox& v, double c) {
    v.check();
    each_slot_ptr(v, true, [&](auto* p) { *p *= static_cast<std::remove_reference_t<decltype(*p)>>(c); });
}

static nb::object to_numpy(nb::handle self, const std::string& what, bool writable) {
    const VectorBox& v = nb::cast<const VectorBox&>(self);
    v.check();
    if (!v.contiguous()) {
        // A view with gaps: hand out a copy, never a view that silently misses elements.
        nb::module_ np = nb::module_::import_("numpy");
        nb::list l = tolist(v, what == "grads");
        nb::object arr = np.attr("array")(l, nb::arg("dtype") = v.dtype == bt::DType::float64 ? "float64" : "float32");
        if (v.rows) arr = arr.attr("reshape")(v.rows, v.cols);
        if (writable) throw nb::value_error("numpy(writable=True) needs a contiguous Vector; this view has gaps");
        return arr;
    }
    nb::object arr = v.owner.attr("numpy")(v.first(), v.first() + v.size, what, writable);
    if (v.rows) arr = arr.attr("reshape")(v.rows, v.cols);
    return arr;
}

// ---------------------------------------------------------------- optimizers (in place, native)
struct OptimState {
    bt::DType dtype;
    std::vector<double> buf;  // per element: nbuffers values, interleaved
    uint32_t nbuf;
    uint64_t steps = 0;
};

template <typename T>
static void sgd_kernel(T* w, T* g, double* m, size_t n, double lr, double momentum, double wd, double dampening,
                       bool nesterov, bool first) {
    for (size_t i = 0; i < n; ++i) {
        double d = double(g[i]) + wd * double(w[i]);
        if (momentum != 0.0) {
            m[i] = first ? d : momentum * m[i] + (1.0 - dampening) * d;
            d = nesterov ? d + momentum * m[i] : m[i];
        }
        w[i] = static_cast<T>(double(w[i]) - lr * d);
    }
}

template <typename T>
static void adam_kernel(T* w, T* g, double* m, double* v, size_t n, double lr, double b1, double b2, double eps,
                        double wd, bool decoupled, uint64_t step) {
    const double c1 = 1.0 - std::pow(b1, double(step)), c2 = 1.0 - std::pow(b2, double(step));
    for (size_t i = 0; i < n; ++i) {
        double gi = double(g[i]);
        double wi = double(w[i]);
        if (decoupled) wi -= lr * wd * wi;
        else gi += wd * wi;
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        w[i] = static_cast<T>(wi - lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps));
    }
}

static void check_state(const VectorBox& p, OptimState& st, uint32_t nbuf) {
    p.check();
    if (st.dtype != p.dtype || st.buf.size() != size_t(p.size) * nbuf || st.nbuf != nbuf)
        throw nb::value_error("optimizer state does not match the parameter vector");
}

static void sgd_step(const VectorBox& p, OptimState& st, double lr, double momentum, double wd, double dampening, bool nesterov) {
    check_state(p, st, momentum != 0.0 ? 1 : 0);
    const bool first = st.steps == 0;
    size_t off = 0;
    dispatch(p.dtype, p.arena, [&](auto& A) {
        for (const Span& s : p.spans) {
            sgd_kernel(A.values() + s.first, A.grads() + s.first, st.buf.data() + off, s.second, lr, momentum, wd,
                       dampening, nesterov, first);
            off += momentum != 0.0 ? s.second : 0;
        }
        return 0;
    });
    ++st.steps;
}

static void adam_step(const VectorBox& p, OptimState& st, double lr, double b1, double b2, double eps, double wd, bool decoupled) {
    check_state(p, st, 2);
    ++st.steps;
    size_t off = 0;
    const size_t n = p.size;
    dispatch(p.dtype, p.arena, [&](auto& A) {
        for (const Span& s : p.spans) {
            adam_kernel(A.values() + s.first, A.grads() + s.first, st.buf.data() + off, st.buf.data() + n + off, s.second,
                        lr, b1, b2, eps, wd, decoupled, st.steps);
            off += s.second;
        }
        return 0;
    });
}

// ---------------------------------------------------------------- initialisers (native RNG)
// splitmix64-seeded xorshift: the stream depends on the seed alone, not on the C++ library.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

static void init_fill(const VectorBox& v, const std::string& kind, double a, double b, uint64_t seed) {
    v.check();
    Rng rng(seed);
    if (kind != "uniform" && kind != "normal" && kind != "constant")
        throw nb::value_error("init kind must be 'uniform', 'normal' or 'constant'");
    each_slot_ptr(v, false, [&](auto* p) {
        double x;
        if (kind == "uniform") x = a + (b - a) * rng.uniform();
        else if (kind == "normal") {  // Box-Muller; one draw per element keeps the stream simple
            double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
            x = a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        } else x = a;
        *p = static_cast<std::remove_reference_t<decltype(*p)>>(x);
    });
}

// ---------------------------------------------------------------- registration
void init_ranges(nb::module_& m) {
    auto V = nb::class_<VectorBox>(m, "Vector",
        "A view over nodes: a list of spans of slots, optionally shaped (rows, cols) row-major.\n\n"
        "Slicing, concatenation and embedding lookup make new views and copy nothing; range ops\n"
        "(linear, softmax, ...) take Vectors and append one record each.");
    V.def("__len__", [](const VectorBox& v) { return v.rows ? v.rows : v.size; })
        .def("__getitem__", &getitem)
        .def_prop_ro("size", [](const VectorBox& v) { return v.size; }, "Number of elements.")
        .def_prop_ro("shape", [](const VectorBox& v) {
            return v.rows ? nb::make_tuple(v.rows, v.cols) : nb::make_tuple(v.size);
        })
        .def_prop_ro("spans", [](const VectorBox& v) { return v.spans; }, "The (first slot, length) spans viewed.")
        .def_prop_ro("arena", [](const VectorBox& v) { return v.owner; })
        .def_prop_ro("dtype", [](const VectorBox& v) { return nb::borrow(g_dtype_objects[int(v.dtype)]); })
        .def_prop_ro("alive", &VectorBox::alive)
        .def_prop_ro("contiguous", &VectorBox::contiguous)
        .def_prop_ro("data", [](const VectorBox& v) { return tolist(v, false); }, "The values as a list of floats.")
        .def_prop_ro("grad", [](const VectorBox& v) { return tolist(v, true); }, "The grads as a list of floats.")
        .def("tolist", [](const VectorBox& v, const std::string& what) { return tolist(v, what == "grads"); },
             nb::arg("what") = "values")
        .def("set_data", [](const VectorBox& v, nb::handle d) { assign(v, d, false); }, nb::arg("values"),
             "Overwrites the values (e.g. to load weights).")
        .def("set_grad", [](const VectorBox& v, nb::handle d) { assign(v, d, true); }, nb::arg("grads"))
        .def("zero_grad", [](const VectorBox& v) { fill_grad(v, 0.0); })
        .def("scale_grad", &scale_grad, nb::arg("factor"))
        .def("numpy", &to_numpy, nb::arg("what") = "values", nb::arg("writable") = false,
             "A numpy array of the values (or grads): zero-copy for a contiguous Vector, a copy otherwise.")
        .def("reshape", [](const VectorBox& v, uint32_t rows, uint32_t cols) {
            if (size_t(rows) * cols != v.size)
                throw nb::value_error(("cannot reshape " + std::to_string(v.size) + " elements to (" + std::to_string(rows) +
                                       ", " + std::to_string(cols) + ")").c_str());
            VectorBox r = v;
            r.rows = rows;
            r.cols = cols;
            return r;
        }, nb::arg("rows"), nb::arg("cols"))
        .def("flatten", [](const VectorBox& v) { VectorBox r = v; r.rows = 0; r.cols = r.size; return r; })
        .def("columns", &col_slice, nb::arg("start"), nb::arg("stop"), "Columns [start, stop) of a matrix, as a view.")
        .def("values", [](const VectorBox& v) {
            v.check();
            nb::list out;
            for (const Span& s : v.spans)
                for (uint32_t i = 0; i < s.second; ++i) out.append(value_at(v, s.first + i));
            return out;
        }, "The elements as a list of Value handles.")
        .def("sum", [](const VectorBox& v) { return vsum(v, 1.0); })
        .def("mean", [](const VectorBox& v) { return vsum(v, 1.0 / v.size); })
        .def("dot", &vdot, nb::arg("other"))
        .def("softmax", &softmax)
        .def("copy", &copy, "Materialises the view into fresh contiguous nodes (one record).")
        .def("leaky_relu", [](const VectorBox& v, double slope) { return map_unary(v, Op::leaky_relu, slope); },
             nb::arg("slope") = 0.01)
        .def("__neg__", [](const VectorBox& v) { return map_unary(v, Op::neg); })
        .def("__add__", [](const VectorBox& a, const VectorBox& b) { return map_binary(a, b, Op::add); })
        .def("__sub__", [](const VectorBox& a, const VectorBox& b) { return map_binary(a, b, Op::sub); })
        .def("__mul__", [](const VectorBox& a, const VectorBox& b) { return map_binary(a, b, Op::mul); })
        .def("__truediv__", [](const VectorBox& a, const VectorBox& b) { return map_binary(a, b, Op::div); })
        .def("__add__", [](const VectorBox& a, double c) { return map_unary(a, Op::add_const, c); })
        .def("__radd__", [](const VectorBox& a, double c) { return map_unary(a, Op::add_const, c); })
        .def("__sub__", [](const VectorBox& a, double c) { return map_unary(a, Op::add_const, -c); })
        .def("__rsub__", [](const VectorBox& a, double c) { return map_unary(a, Op::rsub_const, c); })
        .def("__mul__", [](const VectorBox& a, double c) { return map_unary(a, Op::mul_const, c); })
        .def("__rmul__", [](const VectorBox& a, double c) { return map_unary(a, Op::mul_const, c); })
        .def("__truediv__", [](const VectorBox& a, double c) { return map_unary(a, Op::div_const, c); })
        .def("__rtruediv__", [](const VectorBox& a, double c) { return map_unary(a, Op::rdiv_const, c); })
        .def("__pow__", [](const VectorBox& a, double c) { return map_unary(a, Op::pow_const, c); })
        .def("__repr__", [](const VectorBox& v) {
            if (!v.alive()) return std::string("Vector(<stale>)");
            std::string s = "Vector(shape=" + shape_str(v) + ", spans=" + std::to_string(v.spans.size());
            if (v.dtype == bt::DType::float32) s += ", dtype=float32";
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
        });
#define BT_VEC_U(name, ...) V.def(#name, [](const VectorBox& v) { return map_unary(v, Op::name); });
    BT_UNARY_OPS(BT_VEC_U)
#undef BT_VEC_U

    m.def("leaves", &leaves, nb::arg("data") = nb::none(), nb::arg("shape") = nb::none(), nb::arg("dtype") = nb::none(),
          nb::arg("arena") = nb::none(),
          "New contiguous leaf nodes from numbers (a sequence or a float32/float64 buffer such as a numpy\n"
          "array), or zeros of a shape: leaves([1, 2, 3]), leaves(shape=(4, 8)), leaves(data, shape=(2, 2)).");
    m.def("vector", &vector_of, nb::arg("values"), "A view over existing Values (adjacent slots merge into spans).");
    m.def("cat", [](std::vector<const VectorBox*> vs) { return cat(vs); }, nb::arg("vectors"),
          "Concatenation of vectors as a view (no copy).");
    m.def("hcat", [](std::vector<const VectorBox*> vs) { return hcat(vs); }, nb::arg("matrices"),
          "Side-by-side concatenation of matrices with equal rows, as a view (no copy).");
    m.def("embedding", &embedding, nb::arg("table"), nb::arg("ids"),
          "Rows `ids` of a (V x d) table as a (len(ids) x d) view: no copy, no record.");
    m.def("linear", [](const VectorBox& x, const VectorBox& W, const VectorBox* b) { return linear(x, W, b); },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(),
          "W x + b for a vector x (in,), or row by row for a matrix x (rows x in); W is (out x in). One record.");
    m.def("softmax", &softmax, nb::arg("x"), "Softmax of a vector, or of each row of a matrix. One record.");
    m.def("cross_entropy", &cross_entropy, nb::arg("logits"), nb::arg("targets"),
          "Mean over rows of -log softmax(logits)[target]: log-softmax and NLL in one record.");
    m.def("layer_norm", &layer_norm, nb::arg("x"), nb::arg("gamma"), nb::arg("beta"), nb::arg("eps") = 1e-5,
          "Layer normalisation of each row (biased variance, as PyTorch). One record.");
    m.def("attention", &attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("causal") = true,
          nb::arg("scale") = nb::none(), nb::arg("return_weights") = false,
          "Scaled dot-product attention of one head: q, k, v are (T x head_size). One record whose\n"
          "outputs are the (T x head_size) result followed by the (T x T) attention weights.");
    m.def("multi_head_attention", &multi_head_attention, nb::arg("qkv"), nb::arg("heads"), nb::arg("causal") = true,
          nb::arg("scale") = nb::none(), nb::arg("return_weights") = false, nb::arg("sequences") = 1,
          "All heads of attention from a fused (T x 3C) q/k/v matrix in one record: the (T x C) output\n"
          "holds the heads side by side; return_weights=True also returns the H (T x T) weight matrices.\n"
          "sequences=S: the rows are S stacked sequences of T = rows / S; attention stays within each.");
    m.def("vsum", [](const VectorBox& x) { return vsum(x, 1.0); }, nb::arg("x"), "Sum of a vector, one record.");
    m.def("vmean", [](const VectorBox& x) { return vsum(x, 1.0 / x.size); }, nb::arg("x"), "Mean of a vector, one record.");
    m.def("dot", &vdot, nb::arg("x"), nb::arg("w"), "Inner product of two vectors, one record.");

    m.def("init_", &init_fill, nb::arg("vector"), nb::arg("kind"), nb::arg("a"), nb::arg("b"), nb::arg("seed"),
          "Fills values in place: uniform on [a, b), normal(mean=a, std=b) or the constant a.");

    nb::class_<OptimState>(m, "OptimState")
        .def("__init__", [](OptimState* s, const VectorBox& p, uint32_t nbuf) {
            new (s) OptimState{p.dtype, std::vector<double>(size_t(p.size) * nbuf, 0.0), nbuf, 0};
        }, nb::arg("params"), nb::arg("buffers"))
        .def_ro("steps", &OptimState::steps)
        .def("state", [](const OptimState& s) { return s.buf; })
        .def("load_state", [](OptimState& s, std::vector<double> buf, uint64_t steps) {
            if (buf.size() != s.buf.size()) throw nb::value_error("optimizer state size mismatch");
            s.buf = std::move(buf);
            s.steps = steps;
        });
    m.def("sgd_step", &sgd_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("momentum"),
          nb::arg("weight_decay"), nb::arg("dampening"), nb::arg("nesterov"));
    m.def("adam_step", &adam_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("beta1"),
          nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("decoupled"));
}

}  // namespace btpy
