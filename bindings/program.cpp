// Recorded programs: tracing (a per-thread mode during which guards and id inputs are noted and
// numbers cannot be read out of traced Values), the Program object, and native replay loops
// over many samples (per-sample gradients, their sum, or parameter-grad accumulation).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <frameobject.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <type_traits>
#include <variant>

#include "../csrc/fused_sgd.hpp"
#include "../csrc/replay_threads.hpp"
#include "common.hpp"
#include "optim_state.hpp"
#include "vector.hpp"

namespace btpy {

PyObject* TraceError = nullptr;

// ---------------------------------------------------------------- the trace mode
struct TraceState {
    nb::object owner;  // the Python Arena being traced
    bt::ArenaBase* arena = nullptr;
    bt::TraceSpec spec;
};
static thread_local TraceState* t_trace = nullptr;

bool tracing() { return t_trace != nullptr; }

static thread_local int t_reading_ids = 0;
IdRead::IdRead() { ++t_reading_ids; }
IdRead::~IdRead() { --t_reading_ids; }

// "file.py:12" of the innermost Python frame (the user's line that made the read or comparison).
static std::string python_line() {
    PyFrameObject* f = PyEval_GetFrame();  // borrowed
    if (!f) return "<unknown line>";
    PyCodeObject* code = PyFrame_GetCode(f);
    std::string file = "<unknown file>";
    PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename");
    if (name && PyUnicode_Check(name)) file = PyUnicode_AsUTF8(name);
    Py_XDECREF(name);
    Py_DECREF(code);
    PyErr_Clear();
    return file + ":" + std::to_string(PyFrame_GetLineNumber(f));
}

bool refuse_while_tracing(bt::ArenaBase* arena, const char* what) {
    if (!t_trace || arena != t_trace->arena) return true;
    PyErr_Format(TraceError,
                 "%s while tracing (%s): a number read out of a traced Value would be baked into the program "
                 "and be wrong on replay. Keep the computation in Values (use comparisons, which are guarded, "
                 "or bt.where-free arithmetic), or run this code eagerly.",
                 what, python_line().c_str());
    return false;
}

void record_guard(PyValue* a, PyValue* b, double c, int py_op, bool result) {
    if (!t_trace || a->arena != t_trace->arena || (b && b->arena != t_trace->arena)) return;
    bt::Guard g;
    switch (py_op) {
        case Py_LT: g.op = bt::GuardOp::lt; break;
        case Py_LE: g.op = bt::GuardOp::le; break;
        case Py_GT: g.op = bt::GuardOp::gt; break;
        case Py_GE: g.op = bt::GuardOp::ge; break;
        default: g.op = bt::GuardOp::nonzero; break;
    }
    g.expected = result;
    g.rhs_const = b == nullptr;
    g.a = a->idx;
    g.b = b ? b->idx : 0;
    g.c = c;
    g.where = python_line();
    t_trace->spec.guards.push_back(std::move(g));
}

// Positions of traced ids among `ids` (an int or an iterable of ints): -1 for a plain int.
// Traced ids are ints carrying `_bt_input` (their position in a sample's id row).
bool traced_id_positions(nb::handle ids, std::vector<int64_t>& pos) {
    pos.clear();
    if (!t_trace) return false;
    bool any = false;
    auto one = [&](nb::handle h) {
        int64_t p = -1;
        if (PyObject_HasAttrString(h.ptr(), "_bt_input")) {
            p = nb::cast<int64_t>(h.attr("_bt_input"));
            any = true;
        }
        pos.push_back(p);
    };
    if (PyLong_Check(ids.ptr()) || PyObject_HasAttrString(ids.ptr(), "_bt_input"))
        one(ids);
    else
        for (nb::handle h : ids) one(h);
    return any;
}

// The record just appended to `arena` holds ids (as many as pos) at the end of its args.
void record_id_inputs(bt::ArenaBase* arena, const std::vector<int64_t>& pos, uint32_t bound) {
    if (!t_trace || arena != t_trace->arena || arena->num_records() == 0) return;
    const uint32_t rec = static_cast<uint32_t>(arena->num_records() - 1);
    const uint32_t n = static_cast<uint32_t>(pos.size());
    for (uint32_t i = 0; i < n; ++i) {
        if (pos[i] < 0) continue;
        if (uint64_t(pos[i]) >= t_trace->spec.num_ids) throw nb::value_error("a traced id's position is out of range");
        t_trace->spec.ids.push_back(bt::IdInput{rec, n - 1 - i, uint32_t(pos[i]), bound});
    }
}

// ---------------------------------------------------------------- programs
struct ProgramBox {
    nb::object owner;  // the Python Arena
    bt::ArenaBase* arena;
    std::variant<bt::Program<float>, bt::Program<double>> prog;
    std::variant<bt::Workspace<float>, bt::Workspace<double>> ws;
    std::vector<bt::Span> wrt_arena;  // wrt nodes as arena spans (where accumulate() adds)
    // one workspace per task of the threaded replay, kept from call to call
    std::variant<std::vector<bt::Workspace<float>>, std::vector<bt::Workspace<double>>> task_ws;

    template <typename F>
    decltype(auto) visit(F&& f) {
        if (arena->dtype() == bt::DType::float64)
            return f(std::get<bt::Program<double>>(prog), std::get<bt::Workspace<double>>(ws));
        return f(std::get<bt::Program<float>>(prog), std::get<bt::Workspace<float>>(ws));
    }
    template <typename F>
    decltype(auto) visit_prog(F&& f) const {
        if (arena->dtype() == bt::DType::float64) return f(std::get<bt::Program<double>>(prog));
        return f(std::get<bt::Program<float>>(prog));
    }

    // Raises unless every node the program reads below its trace is still the one it traced.
    void check_alive() const {
        visit_prog([&](const auto& P) {
            for (const bt::ExternalSpan& e : P.ext)
                if (!arena->alive(e.first + e.len - 1, e.gen)) {
                    PyErr_Format(StaleValueError,
                                 "this program reads %s (and %u nodes after it), which a rewind discarded since it was "
                                 "traced; trace it again",
                                 arena->describe_node(e.first).c_str(), unsigned(e.len - 1));
                    throw nb::python_error();
                }
        });
    }
};

static void trace_begin(nb::handle arena_obj, uint32_t num_ids) {
    ArenaBox* box = box_of(arena_obj.ptr());
    if (!box) throw nb::python_error();
    if (t_trace) throw nb::value_error("already tracing on this thread: programs cannot be traced inside a trace");
    if (!bt::grad_enabled()) throw nb::value_error("cannot trace under no_grad(): a trace records ops");
    auto* st = new TraceState;
    st->owner = nb::borrow(arena_obj);
    st->arena = box->core.get();
    st->spec.base = st->arena->checkpoint();
    st->spec.num_ids = num_ids;
    t_trace = st;
}

static void trace_abort() {
    delete t_trace;
    t_trace = nullptr;
}

// Ends the trace: root is the traced function's result; inputs the float input leaves; wrt the
// nodes whose grads replays report (Values or Vectors, in order).
static ProgramBox* trace_end(nb::handle root_h, nb::handle inputs_h, nb::handle wrt_h) {
    if (!t_trace) throw nb::value_error("not tracing");
    std::unique_ptr<TraceState> st(t_trace);
    t_trace = nullptr;
    bt::ArenaBase* arena = st->arena;
    if (!is_value(root_h.ptr()))
        throw nb::type_error(
            ("the traced function must return a scalar Value, got " + std::string(Py_TYPE(root_h.ptr())->tp_name))
                .c_str());
    PyValue* root = as_pyvalue(root_h.ptr());
    if (root->arena != arena) throw nb::value_error("the traced function returned a Value of another arena (or dtype)");
    if (!check_alive(root)) throw nb::python_error();
    if (const char* why = arena->mark_problem(st->spec.base))
        throw nb::value_error((std::string("the arena was rewound below the trace while tracing: ") + why).c_str());
    st->spec.root = root->idx;
    for (nb::handle h : inputs_h) {
        PyValue* v = as_pyvalue(h.ptr());
        if (!check_alive(v)) throw nb::python_error();
        st->spec.inputs.push_back(v->idx);
    }
    for (nb::handle h : wrt_h) {
        if (is_value(h.ptr())) {
            PyValue* v = as_pyvalue(h.ptr());
            if (v->arena != arena) throw nb::value_error("wrt holds a Value of another arena");
            if (!check_alive(v)) throw nb::python_error();
            st->spec.wrt.emplace_back(v->idx, 1);
        } else {
            VectorBox vb = nb::cast<VectorBox>(h);
            if (vb.arena != arena) throw nb::value_error("wrt holds a Vector of another arena");
            vb.check();
            for (const bt::Span& s : vb.spans) {
                if (s.first < st->spec.base.slots && s.first + s.second > st->spec.base.slots)
                    throw nb::value_error("a wrt vector mixes nodes from before and during the trace");
                st->spec.wrt.push_back(s);
            }
        }
    }
    auto* box = new ProgramBox{st->owner, arena, bt::Program<float>{}, bt::Workspace<float>{}, st->spec.wrt, {}};
    try {
        dispatch(arena, [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            box->prog = bt::Program<T>::build(A, st->spec);
            box->ws = bt::Workspace<T>{};
            box->task_ws = std::vector<bt::Workspace<T>>{};
        });
    } catch (const std::invalid_argument& e) {
        delete box;
        throw nb::value_error(e.what());
    } catch (...) {
        delete box;
        throw;
    }
    return box;
}

// ---- replay arguments: numbers arrive through the buffer protocol (numpy arrays, array.array,
// memoryview, bytes) or, for ids, as Python sequences, so the library needs numpy only where the
// user hands numpy in or asks for numpy out.

// A C-contiguous buffer exported by any object, released when it goes out of scope.
class Buffer {
public:
    enum class Kind { f32, f64, sint, uint };
    Buffer(nb::handle h, bool writable, const char* what) {
        const int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(h.ptr(), &view_, flags) < 0) {
            PyErr_Clear();
            throw nb::type_error((std::string(what) + " must be a C-contiguous " + (writable ? "writable " : "") +
                                  "buffer (a numpy array, array.array or memoryview), got " + Py_TYPE(h.ptr())->tp_name)
                                     .c_str());
        }
        held_ = true;
        const char* f = view_.format ? view_.format : "B";
        if (*f == '@' || *f == '=' || *f == '<') ++f;
        const char c = *f;
        const bool one_char = c != 0 && f[1] == 0;
        if (one_char && c == 'd' && view_.itemsize == 8)
            kind_ = Kind::f64;
        else if (one_char && c == 'f' && view_.itemsize == 4)
            kind_ = Kind::f32;
        else if (one_char && std::strchr("bhilqn", c))
            kind_ = Kind::sint;
        else if (one_char && std::strchr("BHILQN", c))
            kind_ = Kind::uint;
        else
            throw nb::type_error((std::string(what) + ": unsupported element format '" + f + "'").c_str());
    }
    ~Buffer() {
        if (held_) PyBuffer_Release(&view_);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    Kind kind() const { return kind_; }
    int ndim() const { return view_.ndim; }
    size_t items() const { return size_t(view_.len / view_.itemsize); }
    // Rows and columns of a 2-D buffer; a 1-D buffer is one column.
    size_t rows() const { return view_.ndim >= 1 ? size_t(view_.shape[0]) : 1; }
    size_t cols() const { return view_.ndim == 2 ? size_t(view_.shape[1]) : 1; }
    void* data() const { return view_.buf; }
    bool is_integer() const { return kind_ == Kind::sint || kind_ == Kind::uint; }
    // f(p): p the elements as a pointer to their C type (integer buffers only).
    template <class F>
    void with_integers(F&& f) const {
        const bool s = kind_ == Kind::sint;
        switch (view_.itemsize) {
            case 1: return s ? f(static_cast<const int8_t*>(view_.buf)) : f(static_cast<const uint8_t*>(view_.buf));
            case 2: return s ? f(static_cast<const int16_t*>(view_.buf)) : f(static_cast<const uint16_t*>(view_.buf));
            case 4: return s ? f(static_cast<const int32_t*>(view_.buf)) : f(static_cast<const uint32_t*>(view_.buf));
            default: return s ? f(static_cast<const int64_t*>(view_.buf)) : f(static_cast<const uint64_t*>(view_.buf));
        }
    }
    // Element i as a signed 64-bit integer (integer buffers only; unsigned values past INT64_MAX
    // come out negative and fail the bound checks).
    int64_t integer(size_t i) const {
        const char* p = static_cast<const char*>(view_.buf) + i * view_.itemsize;
        const bool s = kind_ == Kind::sint;
        switch (view_.itemsize) {
            case 1:
                return s ? int64_t(*reinterpret_cast<const int8_t*>(p)) : int64_t(*reinterpret_cast<const uint8_t*>(p));
            case 2:
                return s ? int64_t(*reinterpret_cast<const int16_t*>(p))
                         : int64_t(*reinterpret_cast<const uint16_t*>(p));
            case 4:
                return s ? int64_t(*reinterpret_cast<const int32_t*>(p))
                         : int64_t(*reinterpret_cast<const uint32_t*>(p));
            default: return s ? *reinterpret_cast<const int64_t*>(p) : int64_t(*reinterpret_cast<const uint64_t*>(p));
        }
    }

private:
    Py_buffer view_{};
    bool held_ = false;
    Kind kind_ = Kind::uint;
};

template <typename T>
constexpr Buffer::Kind kind_of() {
    return std::is_same_v<T, double> ? Buffer::Kind::f64 : Buffer::Kind::f32;
}

// A writable buffer of `count` elements of T (or null for None).
template <typename T>
struct Output {
    std::unique_ptr<Buffer> buf;
    T* data = nullptr;
    Output(nb::handle h, size_t count, const char* what) {
        if (h.is_none()) return;
        buf = std::make_unique<Buffer>(h, true, what);
        if (buf->kind() != kind_of<T>())
            throw nb::type_error(
                (std::string(what) + " must hold " + (std::is_same_v<T, double> ? "float64" : "float32")).c_str());
        if (buf->items() != count)
            throw nb::value_error((std::string(what) + ": expected " + std::to_string(count) + " elements, got " +
                                   std::to_string(buf->items()))
                                      .c_str());
        data = static_cast<T*>(buf->data());
    }
};

static void check_id(int64_t id, uint32_t bound, size_t sample, size_t pos) {
    if (id < 0 || uint64_t(id) >= bound)
        throw nb::index_error(("sample " + std::to_string(sample) + ": id " + std::to_string(id) + " at position " +
                               std::to_string(pos) + " is out of range [0, " + std::to_string(bound) + ")")
                                  .c_str());
}

// One id read from a Python object (an int or anything with __index__).
static int64_t id_of(PyObject* o) {
    long long v;
    if (PyLong_Check(o)) {
        v = PyLong_AsLongLong(o);
    } else {
        PyObject* i = PyNumber_Index(o);
        if (!i) {
            PyErr_Clear();
            throw nb::type_error((std::string("ids must be ints, got ") + Py_TYPE(o)->tp_name).c_str());
        }
        v = PyLong_AsLongLong(i);
        Py_DECREF(i);
    }
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;  // beyond int64: out of range for any table
    }
    return v;
}

// Float inputs: X (n x k doubles) checked finite. Points into the caller's buffer when it holds
// float64, else into `copy`.
template <typename P>
static const double* float_inputs(const P& prog, const Buffer* X, size_t n, std::vector<double>& copy) {
    const size_t k = prog.inputs.size();
    if (!k) return nullptr;
    const double* xs;
    if (X->kind() == Buffer::Kind::f64) {
        xs = static_cast<const double*>(X->data());
    } else {
        copy.resize(n * k);
        for (size_t i = 0; i < n * k; ++i)
            copy[i] = X->kind() == Buffer::Kind::f32 ? double(static_cast<const float*>(X->data())[i])
                                                     : double(X->integer(i));
        xs = copy.data();
    }
    for (size_t s = 0; s < n; ++s)
        for (size_t j = 0; j < k; ++j)
            if (!std::isfinite(xs[s * k + j]))
                throw nb::value_error(("sample " + std::to_string(s) + ", input " + std::to_string(j) +
                                       " is not finite; a replay would propagate it silently into every output")
                                          .c_str());
    return xs;
}

// The oracle's accumulation (mode "arena") over `threads` blocks of samples, one workspace each,
// with the GIL released (csrc/replay_threads.hpp): each block sums its samples' grads apart,
// then the sums are added to the arena's grads in block order.
// step (with zero): the parameters stepped instead when every sample replays (*stepped then).
template <typename T>
static std::vector<size_t> run_replay_threads(ProgramBox& box, const bt::Program<T>& P, bt::Arena<T>& A,
                                              const bt::Samples& in, bool zero, double seed, double* values,
                                              int threads, const bt::ReduceStep<T>* step = nullptr,
                                              bool* stepped = nullptr) {
    if (const char* why = bt::threads::thread_count_problem(threads)) throw nb::value_error(why);
    std::vector<T*> dst;
    for (const bt::Span& w : box.wrt_arena) dst.push_back(A.grads() + w.first);
    bt::ParallelReplayResult res;
    {
        nb::gil_scoped_release unlocked;
        res = bt::replay_accumulate(P, A.values(), dst.data(), in, static_cast<T>(seed), values, size_t(threads),
                                    std::get<std::vector<bt::Workspace<T>>>(box.task_ws), zero, step);
    }
    if (stepped) *stepped = res.stepped;
    if (res.non_finite >= 0) {  // nothing was added: the grads are as they were
        if (zero && !step)      // as the one-thread replay leaves them: zeroed (a step leaves them be)
            for (size_t i = 0; i < dst.size(); ++i) std::fill(dst[i], dst[i] + P.wrt[i].second, T(0));
        PyErr_Format(PyExc_FloatingPointError,
                     "the loss is %s for sample %ld; lower the learning rate or check the data",
                     std::isnan(res.non_finite_value) ? "nan" : "inf", res.non_finite);
        throw nb::python_error();
    }
    box.arena->mark_grads_written();
    return std::move(res.failed);
}

// Points the linear weights that a replay reads in the arena (Program::arena_weights) at their
// grads in the arena too, when each lies inside one wrt span: the replay then adds their
// gradients there, in the order it would add them in its frame, and nothing is copied out. They
// start at zero: the first record to reach one writes it instead of adding (the same bits), so
// it is neither zeroed first nor read. Returns those weights' frame spans, ascending. Their frame
// grads stay zero: no other record reads them.
template <typename T>
static std::vector<bt::Span> grads_in_place(const ProgramBox& box, const bt::Program<T>& P, bt::Workspace<T>& W,
                                            T* ag) {
    std::vector<bt::Span> direct;
    W.wg_index.clear();
    for (const bt::Span& w : P.arena_weights)
        for (size_t i = 0; i < P.wrt.size(); ++i)
            if (w.first >= P.wrt[i].first && w.first + w.second <= P.wrt[i].first + P.wrt[i].second) {
                T* g = ag + box.wrt_arena[i].first + (w.first - P.wrt[i].first);
                W.wg_index.push_back(bt::WeightGrad<T>{w.first, g, w.second, true});
                direct.push_back(w);
                break;
            }
    return direct;  // arena_weights are sorted and disjoint
}

// The wrt grads of the frame into the arena (at ag), zeroing them as they are read (the next call
// need not), but for the frame spans `skip` (sorted; their grads are elsewhere or stay as they
// were).
template <typename T>
static void take_wrt_grads_but(const ProgramBox& box, const bt::Program<T>& P, bt::Workspace<T>& W, T* ag,
                               const std::vector<bt::Span>& skip) {
    for (size_t i = 0; i < P.wrt.size(); ++i) {
        uint32_t at = P.wrt[i].first;
        const uint32_t end = at + P.wrt[i].second;
        auto take = [&](uint32_t stop) {
            if (stop <= at) return;
            const auto g = W.g.begin() + at;
            std::copy(g, g + (stop - at), ag + box.wrt_arena[i].first + (at - P.wrt[i].first));
            std::fill(g, g + (stop - at), T(0));
        };
        for (const bt::Span& d : skip)
            if (d.first >= at && d.first < end) {
                take(d.first);
                at = d.first + d.second;
            }
        take(end);
    }
    W.wrt_grads_zero = true;
}

// The in-place grads no record wrote (a sweep that skipped their record) or that a failed
// replay left partly written: zeroed, as a call that starts from zero leaves them.
template <typename T>
static void zero_grads_in_place(const bt::Workspace<T>& W, bool all) {
    for (const bt::WeightGrad<T>& w : W.wg_index)
        if (all || w.unwritten) std::fill(w.grad, w.grad + w.len, T(0));
}

// The replay itself, shared by both entry points: n samples whose inputs are converted and checked.
// mode: "values" (forward only), "rows" (each sample's wrt grads into row s of out), "sum" (added
// into out, float64), "arena" (accumulated across samples on top of the wrt nodes' grads in the
// arena, or on zero when `zero`, and written back: the additions of the eager oracle, in its
// order). Returns the samples whose guards failed: nothing is written for them; the caller
// recomputes them eagerly or with a new trace.
template <typename T>
static std::vector<size_t> run_replay(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, const bt::Samples& in,
                                      bt::Reduce reduce, bool to_arena, bool zero, double seed, double* values, T* rows,
                                      double* sum, bool stream = false, int threads = 1) {
    box.check_alive();
    bt::Arena<T>& A = typed<T>(box.arena);
    if (to_arena && threads > 1 && in.n > 1) return run_replay_threads(box, P, A, in, zero, seed, values, threads);
    bt::prepare(P, W, A.values(), in.n);
    T* ag = A.grads();
    if (to_arena && !zero)  // continue from the grads already there, so additions happen in the eager order
        for (size_t i = 0; i < P.wrt.size(); ++i)
            std::copy(ag + box.wrt_arena[i].first, ag + box.wrt_arena[i].first + P.wrt[i].second,
                      W.g.begin() + P.wrt[i].first);
    // Starting from zero, the weights read in place accumulate their grads in place too.
    const std::vector<bt::Span> direct = to_arena && zero ? grads_in_place(box, P, W, ag) : std::vector<bt::Span>{};
    // Afterwards the frame is itself again; a replay that throws leaves those grads zeroed, as a
    // failed call that starts from zero leaves every grad.
    struct Undirect {
        bt::Workspace<T>& W;
        int unwinding = std::uncaught_exceptions();
        ~Undirect() {
            zero_grads_in_place(W, std::uncaught_exceptions() > unwinding);
            W.wg_index.clear();
        }
    } undirect{W};
    bt::ReplayResult res = bt::replay(P, W, in, reduce, static_cast<T>(seed), values, rows, sum, to_arena, stream);
    if (to_arena) {
        if (res.non_finite >= 0) {
            if (zero)
                for (size_t i = 0; i < P.wrt.size(); ++i)
                    std::fill(ag + box.wrt_arena[i].first, ag + box.wrt_arena[i].first + P.wrt[i].second, T(0));
            const T y = W.v[P.root];
            PyErr_Format(PyExc_FloatingPointError,
                         "the loss is %s for sample %ld; lower the learning rate or check the data",
                         std::isnan(y) ? "nan" : "inf", res.non_finite);
            throw nb::python_error();
        }
        take_wrt_grads_but(box, P, W, ag, direct);
        box.arena->mark_grads_written();
    }
    return std::move(res.failed);
}

static bt::Reduce parse_mode(const std::string& mode, bool* to_arena) {
    *to_arena = mode == "arena";
    if (mode == "values") return bt::Reduce::values;
    if (mode == "rows") return bt::Reduce::rows;
    if (mode == "sum") return bt::Reduce::sum;
    if (mode == "arena") return bt::Reduce::accumulate;
    throw nb::value_error("mode must be 'values', 'rows', 'sum' or 'arena'");
}

// Where the gradients go: out is (n x num_wrt) of the program's dtype for rows, (num_wrt) float64
// for sum, unused otherwise.
template <typename T>
struct GradOutputs {
    Output<T> rows;
    Output<double> sum;
    GradOutputs(bt::Reduce reduce, nb::handle out, size_t n, size_t num_wrt)
        : rows(reduce == bt::Reduce::rows ? out : nb::none(), n * num_wrt, "out"),
          sum(reduce == bt::Reduce::sum ? out : nb::none(), num_wrt, "out") {
        if ((reduce == bt::Reduce::rows || reduce == bt::Reduce::sum) && out.is_none())
            throw nb::value_error("out is required for modes 'rows' and 'sum'");
    }
};

static nb::list to_list(const std::vector<size_t>& v, size_t offset) {
    nb::list l;
    for (size_t s : v) l.append(s + offset);
    return l;
}

// _replay(X, ids, mode, seed, values, out, zero): X (n x k float inputs) and ids (n x num_ids)
// as buffers (or None when the program takes none).
template <typename T>
static nb::list replay_rows_typed(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, nb::handle X_h,
                                  nb::handle ids_h, const std::string& mode, double seed, nb::handle values_h,
                                  nb::handle out_h, bool zero) {
    bool to_arena = false;
    const bt::Reduce reduce = parse_mode(mode, &to_arena);
    std::unique_ptr<Buffer> X, I;
    if (!X_h.is_none()) X = std::make_unique<Buffer>(X_h, false, "X");
    if (!ids_h.is_none()) I = std::make_unique<Buffer>(ids_h, false, "ids");
    const size_t k = P.inputs.size(), nid = P.num_ids;
    if (X && X->ndim() != 2) throw nb::value_error("X must be 2-D (samples x float inputs)");
    if (I && I->ndim() != 2) throw nb::value_error("ids must be 2-D (samples x ids)");
    if (I && !I->is_integer()) throw nb::type_error("ids must hold integers");
    const size_t kx = X ? X->cols() : 0, ki = I ? I->cols() : 0;
    if (kx != k)
        throw nb::value_error(
            ("the program takes " + std::to_string(k) + " float inputs per sample, got " + std::to_string(kx)).c_str());
    if (ki != nid)
        throw nb::value_error(
            ("the program takes " + std::to_string(nid) + " ids per sample, got " + std::to_string(ki)).c_str());
    const size_t nx = X ? X->rows() : 0, ni = I ? I->rows() : 0;
    if (X && I && k && nid && nx != ni)
        throw nb::value_error("the float inputs and the ids have different numbers of samples");
    const size_t n = (X && (k || !I)) ? nx : ni;
    std::vector<double> xcopy;
    bt::Samples in;
    in.n = n;
    in.x = float_inputs(P, X.get(), n, xcopy);
    std::vector<uint32_t> ids(n * nid);
    for (size_t s = 0; s < n; ++s)
        for (size_t j = 0; j < nid; ++j) {
            const int64_t id = I->integer(s * nid + j);
            check_id(id, P.id_bound[j], s, j);
            ids[s * nid + j] = uint32_t(id);
        }
    in.ids = ids.data();
    Output<double> values(values_h, n, "values");
    GradOutputs<T> out(reduce, out_h, n, P.num_wrt);
    return to_list(run_replay(box, P, W, in, reduce, to_arena, zero, seed, values.data, out.rows.data, out.sum.data),
                   0);
}

// The usual sample, a tuple or list of exact ints and of lists (or tuples) of exact ints, read
// straight from the objects' item arrays: no new references, no protocol calls (nothing here runs
// Python code, so the batch cannot change meanwhile). 1: read; 0: not of `shape`; -1: a part of
// another kind (a numpy int, a range, ...), which the general path below reads.
// An exact int's value, read inline when it fits one digit (every id of a real vocabulary): the
// call into libpython per id was a tenth of a W4 e = 4 step of 64 samples. Beyond int64: -1,
// out of range for any table.
static inline int64_t exact_int_value(PyObject* o) {
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(o)))
        return int64_t(PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(o)));
#else
    const Py_ssize_t size = Py_SIZE(o);  // the digit count, negative for a negative int
    if (size == 0) return 0;
    if (size == 1) return int64_t(reinterpret_cast<PyLongObject*>(o)->ob_digit[0]);
    if (size == -1) return -int64_t(reinterpret_cast<PyLongObject*>(o)->ob_digit[0]);
#endif
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    return overflow ? -1 : v;
}

static int read_plain_sample_ids(PyObject* sample, const std::vector<int64_t>& shape, std::vector<int64_t>& out) {
    if (!PyList_CheckExact(sample) && !PyTuple_CheckExact(sample)) return -1;
    if (size_t(PySequence_Fast_GET_SIZE(sample)) != shape.size()) return 0;
    PyObject** parts = PySequence_Fast_ITEMS(sample);
    auto plain_id = [&out](PyObject* o) {
        if (!PyLong_CheckExact(o)) return false;
        out.push_back(exact_int_value(o));
        return true;
    };
    for (size_t q = 0; q < shape.size(); ++q) {
        PyObject* part = parts[q];
        if (shape[q] == 0) {
            if (!plain_id(part)) return -1;
            continue;
        }
        if (!PyList_CheckExact(part) && !PyTuple_CheckExact(part)) return -1;
        if (PySequence_Fast_GET_SIZE(part) != shape[q]) return 0;
        PyObject** items = PySequence_Fast_ITEMS(part);
        for (int64_t t = 0; t < shape[q]; ++t)
            if (!plain_id(items[t])) return -1;
    }
    return 1;
}

// One sample's ids, read into `out` part by part (an int part as one id, a sequence part as its
// shape[q] ids), when the sample has `shape` (per part: 0 for an int, L for a sequence of L
// ints); false, with `out` unspecified, when it has another shape. A part that is neither an
// int nor a sequence of ints raises TypeError.
// An id's __index__ may run Python code that changes the very lists being read (a sample list
// and its parts stay the same objects through PySequence_Fast): every item is read after
// checking the length again, and a change is a ValueError, never a read past the end.
static bool read_sample_ids(PyObject* sample, const std::vector<int64_t>& shape, std::vector<int64_t>& out) {
    out.clear();
    if (const int plain = read_plain_sample_ids(sample, shape, out); plain >= 0) return plain == 1;
    out.clear();  // a part of another kind: read the whole sample again
    nb::object parts = nb::steal(PySequence_Fast(sample, "a sample must be a sequence of id parts"));
    if (!parts.is_valid()) throw nb::python_error();
    if (size_t(PySequence_Fast_GET_SIZE(parts.ptr())) != shape.size()) return false;
    auto changed = [] { return nb::value_error("the batch changed during the replay"); };
    for (size_t q = 0; q < shape.size(); ++q) {
        if (size_t(PySequence_Fast_GET_SIZE(parts.ptr())) != shape.size()) throw changed();
        nb::object part = nb::borrow(PySequence_Fast_GET_ITEM(parts.ptr(), Py_ssize_t(q)));
        const bool scalar = !PySequence_Check(part.ptr()) && PyIndex_Check(part.ptr());
        if (shape[q] == 0) {
            if (!scalar) return false;
            out.push_back(id_of(part.ptr()));
            continue;
        }
        if (scalar || !PySequence_Check(part.ptr())) return false;
        nb::object seq = nb::steal(PySequence_Fast(part.ptr(), "an id part must be an int or a sequence of ints"));
        if (!seq.is_valid()) throw nb::python_error();
        if (PySequence_Fast_GET_SIZE(seq.ptr()) != shape[q]) return false;
        for (Py_ssize_t t = 0; t < shape[q]; ++t) {
            if (PySequence_Fast_GET_SIZE(seq.ptr()) != shape[q]) throw changed();
            nb::object id = nb::borrow(PySequence_Fast_GET_ITEM(seq.ptr(), t));
            out.push_back(id_of(id.ptr()));
        }
    }
    return true;
}

static size_t ids_of_shape(const std::vector<int64_t>& shape) {
    size_t want = 0;
    for (int64_t p : shape) want += p > 0 ? size_t(p) : 1;
    return want;
}

// The ids of a batch of samples of `shape`: a list of samples (read_sample_ids), or an
// ArrayBatch's parts, a tuple of C-contiguous integer buffers with one row per sample (a 1-D
// part holds an id per sample, a 2-D one a row of ids), read with no Python object per id.
class BatchIds {
public:
    BatchIds(nb::handle batch, const std::vector<int64_t>& shape) : batch_(batch), shape_(shape) {
        if (PyList_Check(batch.ptr())) {
            n_ = size_t(PyList_GET_SIZE(batch.ptr()));
            return;
        }
        if (!PyTuple_Check(batch.ptr())) throw nb::type_error("batch must be a list of samples or an ArrayBatch");
        if (size_t(PyTuple_GET_SIZE(batch.ptr())) != shape.size())
            throw nb::value_error("an ArrayBatch must have one array per id part of the program's samples");
        for (size_t q = 0; q < shape.size(); ++q) {
            const Buffer& b = *parts_.emplace_back(
                std::make_unique<Buffer>(PyTuple_GET_ITEM(batch.ptr(), Py_ssize_t(q)), false, "an ArrayBatch part"));
            if (!b.is_integer()) throw nb::type_error("an ArrayBatch part must hold integers");
            if (shape[q] == 0 ? b.ndim() != 1 : b.ndim() != 2 || b.cols() != size_t(shape[q]))
                throw nb::value_error("an ArrayBatch part does not have the shape of the program's samples");
            if (q > 0 && b.rows() != n_)
                throw nb::value_error("the parts of an ArrayBatch must have one row per sample");
            n_ = b.rows();
        }
    }
    size_t size() const { return n_; }
    // Sample s's ids, part by part, into `out`; false when it has another shape (a list's only).
    bool read(size_t s, std::vector<int64_t>& out) const {
        if (parts_.empty()) {
            if (s >= size_t(PyList_GET_SIZE(batch_.ptr())))
                throw nb::value_error("the batch changed during the replay");
            nb::object sample = nb::borrow(PyList_GET_ITEM(batch_.ptr(), Py_ssize_t(s)));
            return read_sample_ids(sample.ptr(), shape_, out);
        }
        out.clear();
        for (size_t q = 0; q < parts_.size(); ++q) {
            const size_t w = shape_[q] > 0 ? size_t(shape_[q]) : 1;
            for (size_t t = 0; t < w; ++t) out.push_back(parts_[q]->integer(s * w + t));
        }
        return true;
    }
    bool arrays() const { return !parts_.empty(); }
    // An ArrayBatch's part q for samples [s, s + k): their k w ids, in order, into dst, each
    // checked against bound[i] (sample s + i / w, at position pos0 + i of its program's ids).
    // One pass over a block of the array, with no per-sample step.
    void read_block(size_t q, size_t s, size_t k, const uint32_t* bound, uint32_t* dst, size_t pos0) const {
        const size_t w = shape_[q] > 0 ? size_t(shape_[q]) : 1, n = k * w;
        parts_[q]->with_integers([&](const auto* p) {
            p += s * w;
            bool ok = true;
            for (size_t i = 0; i < n; ++i) {
                const int64_t id = int64_t(p[i]);  // unsigned past INT64_MAX: negative, out of range
                ok &= id >= 0 && uint64_t(id) < bound[i];
                dst[i] = uint32_t(id);
            }
            if (!ok)
                for (size_t i = 0; i < n; ++i) check_id(int64_t(p[i]), bound[i], s + i / w, pos0 + i);
        });
    }
    // Whether a list was resized meanwhile (an id's __index__ may run Python code).
    void check_unchanged() const {
        if (parts_.empty() && size_t(PyList_GET_SIZE(batch_.ptr())) != n_)
            throw nb::value_error("the batch changed during the replay");
    }

private:
    nb::handle batch_;
    const std::vector<int64_t>& shape_;
    std::vector<std::unique_ptr<Buffer>> parts_;
    size_t n_ = 0;
};

// _replay_samples(batch, start, shape, mode, seed, values, out, zero, stream) -> (stop, failed):
// replays batch[start:stop], the samples from `start` on whose id parts have `shape` (per part: 0
// for an int, L for a sequence of L ints). values has len(batch) entries and out len(batch) rows;
// sample i writes entry i. failed holds indices into batch. stream: out is a reused buffer
// (rows go out with non-temporal stores).
template <typename T>
static nb::tuple replay_samples_typed(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, nb::handle batch_h,
                                      size_t start, const std::vector<int64_t>& shape, const std::string& mode,
                                      double seed, nb::handle values_h, nb::handle out_h, bool zero, bool stream,
                                      int threads) {
    bool to_arena = false;
    const bt::Reduce reduce = parse_mode(mode, &to_arena);
    const BatchIds batch(batch_h, shape);
    const size_t N = batch.size();
    if (start >= N) throw nb::index_error("start is past the end of the batch");
    const size_t want = ids_of_shape(shape);
    if (want != P.num_ids || P.inputs.size())
        throw nb::value_error("the shape does not match the program's ids (or the program takes float inputs)");
    std::vector<uint32_t> ids;
    ids.reserve(64 * want);
    std::vector<int64_t> one;
    size_t stop = start;
    // A list may change while __index__ runs Python code: every access rechecks its length.
    for (; stop < N; ++stop) {
        if (!batch.read(stop, one)) {
            if (stop == start)
                throw nb::type_error(
                    ("sample " + std::to_string(start) + " does not have the shape of its program").c_str());
            break;
        }
        for (size_t pos = 0; pos < want; ++pos) {
            check_id(one[pos], P.id_bound[pos], stop, pos);
            ids.push_back(uint32_t(one[pos]));
        }
    }
    batch.check_unchanged();
    bt::Samples in;
    in.n = stop - start;
    in.ids = ids.data();
    Output<double> values(values_h, N, "values");
    GradOutputs<T> out(reduce, out_h, N, P.num_wrt);
    const std::vector<size_t> failed =
        run_replay(box, P, W, in, reduce, to_arena, zero, seed, values.data ? values.data + start : nullptr,
                   out.rows.data ? out.rows.data + start * P.num_wrt : nullptr, out.sum.data, stream, threads);
    return nb::make_tuple(stop, to_list(failed, start));
}

// The ids of chunks [0, stop) of k consecutive samples from `start` (up to `count` chunks), each
// chunk packed as the program's compound sample: part q of every sample of the chunk, in order.
// stop: the first chunk with a sample of another shape (0: the first one has).
template <typename T>
static size_t chunk_ids(const bt::Program<T>& P, const BatchIds& batch, size_t start, size_t k, size_t count,
                        const std::vector<int64_t>& shape, std::vector<uint32_t>& ids) {
    const size_t N = batch.size();
    if (k == 0 || count == 0) throw nb::value_error("k and count must be positive");
    if (start > N || count > (N - start) / k) throw nb::index_error("the chunks run past the end of the batch");
    const size_t per = ids_of_shape(shape);
    if (per * k != P.num_ids || P.inputs.size())
        throw nb::value_error("k samples of this shape do not match the program's ids (or it takes float inputs)");
    // Where part q of sample j of a chunk goes in the compound: part q's block, then j's slot.
    std::vector<size_t> block_at(shape.size()), width(shape.size());
    for (size_t q = 0, at = 0; q < shape.size(); ++q) {
        width[q] = shape[q] > 0 ? size_t(shape[q]) : 1;
        block_at[q] = at;
        at += k * width[q];
    }
    ids.assign(count * P.num_ids, 0);
    if (batch.arrays()) {  // every sample has the shape: part q of a chunk is one block of its array
        for (size_t c = 0; c < count; ++c)
            for (size_t q = 0; q < shape.size(); ++q)
                batch.read_block(q, start + c * k, k, P.id_bound.data() + block_at[q],
                                 ids.data() + c * P.num_ids + block_at[q], block_at[q]);
        return count;
    }
    std::vector<int64_t> one;
    size_t stop = 0;
    for (; stop < count; ++stop) {
        uint32_t* dst = ids.data() + stop * P.num_ids;
        bool fits = true;
        for (size_t j = 0; fits && j < k; ++j) {
            const size_t s = start + stop * k + j;
            fits = batch.read(s, one);
            for (size_t q = 0, i = 0; fits && q < shape.size(); ++q)
                for (size_t t = 0; t < width[q]; ++t, ++i) {
                    const size_t pos = block_at[q] + j * width[q] + t;
                    if (one[i] < 0 || uint64_t(one[i]) >= P.id_bound[pos]) check_id(one[i], P.id_bound[pos], s, pos);
                    dst[pos] = uint32_t(one[i]);
                }
        }
        if (!fits) break;
    }
    batch.check_unchanged();
    return stop;
}

// _replay_chunks(batch, start, k, count, shape, seed, values, zero, threads) -> (stop, failed):
// the oracle's accumulation ("arena" mode) over chunks of k consecutive samples from `start`, up
// to `count` of them, each chunk one sample of a program traced over a chunk (the compound
// sample: part q of every sample of the chunk, concatenated in order). The ids are packed here,
// so a chunked step runs no Python per sample. Replays chunks [0, stop), up to the first chunk
// with a sample of another shape (stop = 0: the first one has; nothing was replayed); values
// (count entries) receives each chunk's loss; failed holds chunk indices.
template <typename T>
static nb::tuple replay_chunks_typed(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, nb::handle batch_h,
                                     size_t start, size_t k, size_t count, const std::vector<int64_t>& shape,
                                     double seed, nb::handle values_h, bool zero, int threads) {
    std::vector<uint32_t> ids;
    const size_t stop = chunk_ids(P, BatchIds(batch_h, shape), start, k, count, shape, ids);
    if (stop == 0) return nb::make_tuple(0, nb::list());
    bt::Samples in;
    in.n = stop;
    in.ids = ids.data();
    Output<double> values(values_h, count, "values");
    const std::vector<size_t> failed = run_replay(box, P, W, in, bt::Reduce::accumulate, true, zero, seed, values.data,
                                                  static_cast<T*>(nullptr), nullptr, false, threads);
    return nb::make_tuple(stop, to_list(failed, 0));
}

// _sgd_chunks(batch, k, count, shape, seed, values, params, state, lr, weight_decay, threads) ->
// (stop, failed, stepped): SGD.fused_step(model, batch, chunk=k, compile=True) on several
// threads, the batch being `count` chunks of k samples of `shape`. As _replay_chunks from sample 0
// with the grads taken as zero, then, when every chunk replayed, a plain SGD step of `params` (the
// program's wrt, span for span) taken where the threads' grads are added (csrc/replay_threads.hpp's
// ReduceStep): the parameters stepped and counted in `state`, their grads left as they were. When
// a chunk's guard fails the grads are written as _replay_chunks writes them (stepped false: the
// caller replays that chunk eagerly and steps). A chunk of another shape, or parameters that are
// not the program's wrt: nothing is replayed (stop < count; stop = 0 for the latter). A
// non-finite loss raises and changes nothing.
template <typename T>
static nb::tuple sgd_chunks_typed(ProgramBox& box, bt::Program<T>& P, nb::handle batch_h, size_t k, size_t count,
                                  const std::vector<int64_t>& shape, double seed, nb::handle values_h,
                                  const VectorBox& params, OptimState& state, double lr, double wd, int threads) {
    box.check_alive();
    params.check();
    if (params.arena != box.arena) throw nb::value_error("the parameters and the program live in different arenas");
    if (state.dtype != params.dtype() || state.nbuf != 0 || !state.buf.empty())
        throw nb::value_error("the optimizer state is not plain SGD's for these parameters");
    // Adjacent spans joined, overlapping ones kept apart (not program.hpp's merged()): SGD.step
    // steps an element of two overlapping parameter spans twice, so those must not pass as the wrt.
    auto joined = [](std::vector<bt::Span> spans) {
        std::sort(spans.begin(), spans.end());
        std::vector<bt::Span> out;
        for (const bt::Span& sp : spans)
            if (!out.empty() && out.back().first + out.back().second == sp.first)
                out.back().second += sp.second;
            else if (sp.second)
                out.push_back(sp);
        return out;
    };
    if (joined(params.spans) != joined(box.wrt_arena)) return nb::make_tuple(0, nb::list(), false);
    std::vector<uint32_t> ids;
    const size_t stop = chunk_ids(P, BatchIds(batch_h, shape), 0, k, count, shape, ids);
    if (stop < count) return nb::make_tuple(stop, nb::list(), false);
    bt::Samples in;
    in.n = stop;
    in.ids = ids.data();
    Output<double> values(values_h, count, "values");
    bt::Arena<T>& A = typed<T>(box.arena);
    std::vector<T*> w;
    for (const bt::Span& s : box.wrt_arena) w.push_back(A.values() + s.first);
    const bt::ReduceStep<T> step{w.data(), static_cast<T>(lr), static_cast<T>(wd)};
    bool stepped = false;
    const std::vector<size_t> failed =
        run_replay_threads(box, P, A, in, true, seed, values.data, threads, &step, &stepped);
    if (stepped) ++state.steps;
    return nb::make_tuple(stop, to_list(failed, 0), stepped);
}

// SGD.fused_step(model, batch, chunk >= len(batch), compile=True): the whole batch (k samples of
// `shape`) replayed once as one chunk of this program, every linear weight that it reads in
// place, that one record alone reads and that lies inside `params` updated inside the sweep
// (csrc/fused_sgd.hpp), as the eager fused step updates it. The other wrt grads (the model's
// parameters, `zero`'s spans) are written with the batch's gradient; the fused weights' grads
// are left as they were. Returns (replayed, loss, weights, applied): replayed is false, with
// nothing changed, when a sample has another shape or a guard comes out differently (the
// caller steps eagerly); weights are the fused weights' arena spans and applied which of them
// the sweep reached (sgd_step_around_fused steps the rest). A non-finite loss changes nothing.
template <typename T>
static nb::tuple fused_sgd_chunk_typed(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, nb::handle batch_h,
                                       const std::vector<int64_t>& shape, const VectorBox& params, double lr,
                                       double wd) {
    box.check_alive();
    params.check();
    if (params.arena != box.arena) throw nb::value_error("the parameters and the program live in different arenas");
    const BatchIds batch(batch_h, shape);  // an ArrayBatch's buffers are taken once a call
    std::vector<uint32_t> ids;
    auto nothing = [] { return nb::make_tuple(false, 0.0, nb::list(), nb::list()); };
    if (chunk_ids(P, batch, 0, batch.size(), 1, shape, ids) == 0) return nothing();
    bt::Arena<T>& A = typed<T>(box.arena);
    // the weights to fuse, as frame spans and as arena spans
    std::vector<bt::Span> frame_w, arena_w;
    // linear records reading each in-place weight (arena_weights: sorted, disjoint), in one pass
    std::vector<uint32_t> readers(P.arena_weights.size(), 0);
    for (const bt::Record& r : P.recs) {
        if (!bt::reads_linear_weight(r.op)) continue;
        const uint32_t first = bt::decode_operands(P.args.data() + r.a).v[1].first(0);
        const auto it = std::lower_bound(P.arena_weights.begin(), P.arena_weights.end(), bt::Span{first, 0});
        if (it != P.arena_weights.end() && it->first == first) ++readers[size_t(it - P.arena_weights.begin())];
    }
    if (!bt::anomaly_enabled())
        for (size_t k = 0; k < P.arena_weights.size(); ++k) {
            const bt::Span& w = P.arena_weights[k];
            if (readers[k] != 1) continue;
            for (size_t i = 0; i < P.wrt.size(); ++i)
                if (w.first >= P.wrt[i].first && w.first + w.second <= P.wrt[i].first + P.wrt[i].second) {
                    const bt::Span a{box.wrt_arena[i].first + (w.first - P.wrt[i].first), w.second};
                    bool inside = false;
                    for (const bt::Span& p : params.spans)
                        inside |= a.first >= p.first && a.first + a.second <= p.first + p.second;
                    if (inside) {
                        frame_w.push_back(w);
                        arena_w.push_back(a);
                    }
                    break;
                }
        }
    bt::FusedSgd fused{lr, wd, {}, std::vector<uint8_t>(frame_w.size(), 0)};
    for (const bt::Span& w : frame_w) fused.weight_slots.push_back(w.first);
    bt::prepare(P, W, A.values(), 1);
    struct Unfuse {
        bt::Workspace<T>& W;
        ~Unfuse() { W.fused_sgd = nullptr; }
    } unfuse{W};
    W.fused_sgd = frame_w.empty() ? nullptr : &fused;
    bt::Samples in;
    in.n = 1;
    in.ids = ids.data();
    double loss = 0.0;
    const bt::ReplayResult res =
        bt::replay(P, W, in, bt::Reduce::accumulate, T(1), &loss, static_cast<T*>(nullptr), nullptr, true);
    if (!res.failed.empty()) return nothing();  // its guard failed: nothing was swept
    if (res.non_finite >= 0) {
        PyErr_Format(PyExc_FloatingPointError, "the loss is %s for a batch; lower the learning rate or check the data",
                     std::isnan(loss) ? "nan" : "inf");
        throw nb::python_error();
    }
    // the batch's grads into the arena, but for the fused weights' (their frame grads are zero)
    take_wrt_grads_but(box, P, W, A.grads(), frame_w);
    box.arena->mark_grads_written();
    nb::list spans, applied;
    for (size_t i = 0; i < arena_w.size(); ++i) {
        spans.append(nb::make_tuple(arena_w[i].first, arena_w[i].second));
        applied.append(bool(fused.applied[i]));
    }
    return nb::make_tuple(true, loss, spans, applied);
}

static nb::tuple fused_sgd_chunk(ProgramBox& box, nb::handle batch, const std::vector<int64_t>& shape,
                                 const VectorBox& params, double lr, double weight_decay) {
    if (!std::isfinite(lr) || !std::isfinite(weight_decay)) throw nb::value_error("lr and weight_decay must be finite");
    return box.visit(
        [&](auto& P, auto& W) { return fused_sgd_chunk_typed(box, P, W, batch, shape, params, lr, weight_decay); });
}

static nb::list replay(ProgramBox& box, nb::handle X, nb::handle ids, const std::string& mode, double seed,
                       nb::handle values, nb::handle out, bool zero) {
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    return box.visit(
        [&](auto& P, auto& W) { return replay_rows_typed(box, P, W, X, ids, mode, seed, values, out, zero); });
}

static nb::tuple replay_samples(ProgramBox& box, nb::handle batch, size_t start, const std::vector<int64_t>& shape,
                                const std::string& mode, double seed, nb::handle values, nb::handle out, bool zero,
                                bool stream, int threads) {
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    if (const char* why = bt::threads::thread_count_problem(threads)) throw nb::value_error(why);
    return box.visit([&](auto& P, auto& W) {
        return replay_samples_typed(box, P, W, batch, start, shape, mode, seed, values, out, zero, stream, threads);
    });
}

static nb::tuple replay_chunks(ProgramBox& box, nb::handle batch, size_t start, size_t k, size_t count,
                               const std::vector<int64_t>& shape, double seed, nb::handle values, bool zero,
                               int threads) {
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    if (const char* why = bt::threads::thread_count_problem(threads)) throw nb::value_error(why);
    return box.visit([&](auto& P, auto& W) {
        return replay_chunks_typed(box, P, W, batch, start, k, count, shape, seed, values, zero, threads);
    });
}

static nb::tuple sgd_chunks(ProgramBox& box, nb::handle batch, size_t k, size_t count,
                            const std::vector<int64_t>& shape, double seed, nb::handle values, const VectorBox& params,
                            OptimState& state, double lr, double weight_decay, int threads) {
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    if (!std::isfinite(lr) || !std::isfinite(weight_decay)) throw nb::value_error("lr and weight_decay must be finite");
    if (const char* why = bt::threads::thread_count_problem(threads)) throw nb::value_error(why);
    if (threads < 2 || count < 2 || k < 1)
        throw nb::value_error("_sgd_chunks steps where the threads' grads add: two threads and two chunks at least");
    return box.visit([&](auto& P, auto&) {
        return sgd_chunks_typed(box, P, batch, k, count, shape, seed, values, params, state, lr, weight_decay, threads);
    });
}

static std::string record_name(const bt::Record& r) {
    std::string name = bt::op_info(r.op).name;
    if (r.op == bt::Op::map_unary || r.op == bt::Op::map_imm || r.op == bt::Op::map_binary)
        name += std::string(":") + bt::op_info(static_cast<bt::Op>(r.c)).name;
    return name;
}

void init_program(nb::module_& m) {
    TraceError = PyErr_NewExceptionWithDoc(
        "burtorch.TraceError",
        "Raised while tracing a program when Python code reads a number out of a traced Value (its\n"
        "value would be baked into the program), or uses a mode a replay cannot reproduce.",
        PyExc_RuntimeError, nullptr);
    m.attr("TraceError") = nb::handle(TraceError);

    m.def("_trace_begin", &trace_begin, nb::arg("arena"), nb::arg("num_ids"));
    m.def("_trace_abort", &trace_abort);
    m.def("_trace_end", &trace_end, nb::arg("root"), nb::arg("inputs"), nb::arg("wrt"), nb::rv_policy::take_ownership);
    m.def("_reading_ids", []() { return t_reading_ids > 0; });
    m.def("_where", []() { return python_line(); });
    m.def("is_tracing", &tracing, "True while a program is being traced on this thread.");

    nb::class_<ProgramBox> P(m, "Program",
                             "A recorded program: the records of one trace, replayable natively with new inputs.\n"
                             "Made by burtorch.trace / value_and_grad / grad_oracle(compile=True).");
    P.def("__len__", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.recs.size(); }); })
        .def_prop_ro("num_inputs",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs.size(); }); })
        .def_prop_ro("num_ids",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.num_ids); }); })
        .def_prop_ro("num_wrt",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.num_wrt; }); })
        .def_prop_ro(
            "frame_size",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.frame_size()); }); })
        .def_prop_ro("num_external",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.n_ext); }); })
        .def_prop_ro(
            "lookups_into_layers",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.gather_linears.size(); }); },
            "Lookups whose rows only the next linear record reads, as its input (a traced embedding, reshaped,\n"
            "into bt.linear). On several threads, an SGD.fused_step replay runs each with its layer as one op:\n"
            "every thread looks all the rows up itself, so they never pass between the cores. A lookup_linear\n"
            "record is already one op and counts none.")
        .def_prop_ro(
            "weights_read_in_place",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    size_t n = 0;
                    for (const bt::Span& w : p.arena_weights) n += w.second;
                    return n;
                });
            },
            "External values a replay reads where they live in the arena rather than copying them into its frame:\n"
            "linear layers' weights that no other op reads.")
        .def_prop_ro(
            "swept", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.sweep.size(); }); },
            "Records the reverse sweep visits (those leading from the root to a wrt node).")
        .def_prop_ro(
            "traced_records",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.traced_records; }); },
            "Records the trace appended, before records the root does not depend on were dropped.")
        .def_prop_ro("dtype", [](const ProgramBox& b) { return nb::borrow(g_dtype_objects[int(b.arena->dtype())]); })
        .def_prop_ro("arena", [](const ProgramBox& b) { return b.owner; })
        .def_prop_ro(
            "alive",
            [](const ProgramBox& b) {
                return b.visit_prog([&](const auto& p) {
                    for (const bt::ExternalSpan& e : p.ext)
                        if (!b.arena->alive(e.first + e.len - 1, e.gen)) return false;
                    return true;
                });
            },
            "False once a rewind discarded a node the program reads.")
        .def_prop_ro(
            "guards",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    nb::list out;
                    static const char* ops[] = {"<", "<=", ">", ">=", "!= 0"};
                    for (const bt::Guard& g : p.guards) out.append(nb::make_tuple(g.where, ops[int(g.op)], g.expected));
                    return out;
                });
            },
            "(line, comparison, outcome during the trace) of each guard, in order.")
        .def(
            "ops",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    std::map<std::string, size_t> c;
                    for (const bt::Record& r : p.recs) ++c[record_name(r)];
                    nb::dict d;
                    for (auto& [k, v] : c) d[nb::str(k.c_str())] = v;
                    return d;
                });
            },
            "Number of records per op (map records as map_unary:tanh, ...).")
        .def(
            "record",
            [](const ProgramBox& b, int64_t i) {
                return b.visit_prog([&](const auto& p) {
                    if (i < 0 || size_t(i) >= p.recs.size()) throw nb::index_error("record index out of range");
                    const bt::Record& r = p.recs[size_t(i)];
                    nb::list spans;
                    bt::for_each_arg_span(r, p.args.data() + r.a,
                                          [&](uint32_t f, uint32_t n) { spans.append(nb::make_tuple(f, n)); });
                    return nb::make_tuple(record_name(r), r.out, r.nout, spans, r.imm);
                });
            },
            nb::arg("i"),
            "(op, first output frame slot, number of outputs, argument spans [(frame slot, count)], immediate).")
        .def_prop_ro("root", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.root; }); })
        .def_prop_ro("input_slots",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs; }); })
        .def("_replay", &replay, nb::arg("X").none(), nb::arg("ids").none(), nb::arg("mode"), nb::arg("seed"),
             nb::arg("values").none() = nb::none(), nb::arg("out").none() = nb::none(), nb::arg("zero") = false)
        .def("_replay_samples", &replay_samples, nb::arg("batch"), nb::arg("start"), nb::arg("shape"), nb::arg("mode"),
             nb::arg("seed"), nb::arg("values").none() = nb::none(), nb::arg("out").none() = nb::none(),
             nb::arg("zero") = false, nb::arg("stream") = false, nb::arg("threads") = 1)
        .def("_replay_chunks", &replay_chunks, nb::arg("batch"), nb::arg("start"), nb::arg("k"), nb::arg("count"),
             nb::arg("shape"), nb::arg("seed"), nb::arg("values").none() = nb::none(), nb::arg("zero") = false,
             nb::arg("threads") = 1)
        .def("_sgd_chunks", &sgd_chunks, nb::arg("batch"), nb::arg("k"), nb::arg("count"), nb::arg("shape"),
             nb::arg("seed"), nb::arg("values").none(), nb::arg("params"), nb::arg("state"), nb::arg("lr"),
             nb::arg("weight_decay"), nb::arg("threads"))
        .def("_fused_sgd_chunk", &fused_sgd_chunk, nb::arg("batch"), nb::arg("shape"), nb::arg("params"), nb::arg("lr"),
             nb::arg("weight_decay"));
}

}  // namespace btpy
