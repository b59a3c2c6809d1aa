// Recorded programs: tracing (a per-thread mode during which guards and id inputs are noted and
// numbers cannot be read out of traced Values), the Program object, and native replay loops
// over many samples (per-sample gradients, their sum, or parameter-grad accumulation).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <frameobject.h>
#include <map>
#include <variant>

#include "../csrc/replay_threads.hpp"
#include "common.hpp"
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
    if (PyLong_Check(ids.ptr()) || PyObject_HasAttrString(ids.ptr(), "_bt_input")) one(ids);
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
        throw nb::type_error(("the traced function must return a scalar Value, got " +
                              std::string(Py_TYPE(root_h.ptr())->tp_name)).c_str());
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
    auto* box = new ProgramBox{st->owner, arena, bt::Program<float>{}, bt::Workspace<float>{}, st->spec.wrt};
    try {
        dispatch(arena, [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            box->prog = bt::Program<T>::build(A, st->spec);
            box->ws = bt::Workspace<T>{};
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

// ---- argument checking for replays
using F64Rows = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using IdRows = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <typename P>
static void check_shapes(const P& prog, const F64Rows& X, const IdRows& ids, size_t* n_out) {
    const size_t nx = X.shape(0), ni = ids.shape(0);
    if (X.shape(1) != prog.inputs.size())
        throw nb::value_error(("the program takes " + std::to_string(prog.inputs.size()) + " float inputs per sample, got " +
                               std::to_string(X.shape(1))).c_str());
    if (ids.shape(1) != prog.num_ids)
        throw nb::value_error(("the program takes " + std::to_string(prog.num_ids) + " ids per sample, got " +
                               std::to_string(ids.shape(1))).c_str());
    if (prog.inputs.size() && prog.num_ids && nx != ni)
        throw nb::value_error("the float inputs and the ids have different numbers of samples");
    const size_t n = prog.inputs.size() ? nx : ni;
    const double* xs = X.data();
    const size_t k = X.shape(1);
    for (size_t s = 0; s < (k ? n : 0); ++s)
        for (size_t j = 0; j < k; ++j)
            if (!std::isfinite(xs[s * k + j]))
                throw nb::value_error(("sample " + std::to_string(s) + ", input " + std::to_string(j) +
                                       " is not finite; a replay would propagate it silently into every output")
                                          .c_str());
    for (size_t s = 0; s < (prog.num_ids ? n : 0); ++s)
        for (size_t j = 0; j < prog.num_ids; ++j) {
            const int64_t id = ids.data()[s * prog.num_ids + j];
            if (id < 0 || uint64_t(id) >= prog.id_bound[j])
                throw nb::index_error(("sample " + std::to_string(s) + ": id " + std::to_string(id) + " at position " +
                                       std::to_string(j) + " is out of range [0, " + std::to_string(prog.id_bound[j]) + ")")
                                          .c_str());
        }
    *n_out = n;
}

// The replay loop over n samples. mode: "values" (forward only), "rows" (each sample's wrt grads
// into row s of out), "sum" (added into out), "arena" (accumulated across samples on top of the
// wrt nodes' grads in the arena, and written back: the additions of the eager oracle, in its order). values (float64, n) receives each sample's root value.
// Returns the samples whose guards failed: nothing is written for them; the caller recomputes
// them eagerly or with a new trace.
template <typename T>
static nb::list replay_typed(ProgramBox& box, bt::Program<T>& P, bt::Workspace<T>& W, const F64Rows& X,
                             const IdRows& ids, const std::string& mode, double seed, nb::handle values_h,
                             nb::handle out_h) {
    size_t n = 0;
    check_shapes(P, X, ids, &n);
    const int m = mode == "values" ? 0 : mode == "rows" ? 1 : mode == "sum" ? 2 : mode == "arena" ? 3 : -1;
    if (m < 0) throw nb::value_error("mode must be 'values', 'rows', 'sum' or 'arena'");
    double* values = nullptr;
    if (!values_h.is_none()) {
        auto va = nb::cast<nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(values_h);
        if (va.shape(0) != n) throw nb::value_error("values: wrong length");
        values = va.data();
    }
    T* rows = nullptr;
    double* sum = nullptr;
    if (m == 1) {
        auto oa = nb::cast<nb::ndarray<T, nb::ndim<2>, nb::c_contig, nb::device::cpu>>(out_h);
        if (oa.shape(0) != n || oa.shape(1) != P.num_wrt) throw nb::value_error("out: wrong shape");
        rows = oa.data();
    } else if (m == 2) {
        auto oa = nb::cast<nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(out_h);
        if (oa.shape(0) != P.num_wrt) throw nb::value_error("out: wrong length");
        sum = oa.data();
    }
    bt::prepare(P, W, static_cast<bt::Arena<T>*>(box.arena)->values());
    T* ag = static_cast<bt::Arena<T>*>(box.arena)->grads();
    if (m == 3)  // continue from the grads already there, so additions happen in the eager order
        for (size_t i = 0; i < P.wrt.size(); ++i)
            std::copy(ag + box.wrt_arena[i].first, ag + box.wrt_arena[i].first + P.wrt[i].second, W.g.begin() + P.wrt[i].first);
    const size_t k = P.inputs.size(), nid = P.num_ids;
    std::vector<T> x(k);
    std::vector<uint32_t> idrow(nid);
    const double* xs = X.data();
    const int64_t* is = ids.data();
    nb::list failed;
    for (size_t s = 0; s < n; ++s) {
        for (size_t j = 0; j < k; ++j) x[j] = static_cast<T>(xs[s * k + j]);
        for (size_t j = 0; j < nid; ++j) idrow[j] = static_cast<uint32_t>(is[s * nid + j]);
        bt::set_sample(P, W, x.data(), idrow.data());
        if (bt::run_forward(P, W) >= 0) {
            failed.append(s);
            continue;
        }
        const T y = W.v[P.root];
        if (values) values[s] = double(y);
        if (m == 0) continue;
        if (m == 3 && !std::isfinite(y))
        {
            PyErr_Format(PyExc_FloatingPointError, "the loss is %s for sample %zu; lower the learning rate or check the data",
                         std::isnan(y) ? "nan" : "inf", s);
            throw nb::python_error();
        }
        if (m != 3) bt::zero_external_grads(P, W);
        bt::run_backward(P, W, static_cast<T>(seed));
        if (m == 1) bt::read_wrt_grads(P, W, rows + s * P.num_wrt, false);
        else if (m == 2) bt::read_wrt_grads(P, W, sum, true);
    }
    if (m == 3) {
        for (size_t i = 0; i < P.wrt.size(); ++i)
            std::copy(W.g.begin() + P.wrt[i].first, W.g.begin() + P.wrt[i].first + P.wrt[i].second,
                      ag + box.wrt_arena[i].first);
        box.arena->mark_grads_written();
    }
    return failed;
}

static nb::list replay(ProgramBox& box, const F64Rows& X, const IdRows& ids, const std::string& mode, double seed,
                       nb::handle values_h, nb::handle out_h) {
    box.check_alive();
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    return box.visit([&](auto& P, auto& W) { return replay_typed(box, P, W, X, ids, mode, seed, values_h, out_h); });
}

// The oracle's accumulation (mode "arena") over `threads` blocks of samples, one workspace each,
// with the GIL released (csrc/replay_threads.hpp). Returns the samples whose guards failed.
static nb::list replay_threads(ProgramBox& box, const F64Rows& X, const IdRows& ids, double seed, nb::handle values_h,
                               int threads) {
    box.check_alive();
    if (!std::isfinite(seed)) throw nb::value_error("seed must be finite");
    if (const char* why = bt::threads::thread_count_problem(threads)) throw nb::value_error(why);
    return box.visit([&](auto& P, auto&) {
        using T = typename std::remove_reference_t<decltype(P)>::value_type;
        size_t n = 0;
        check_shapes(P, X, ids, &n);
        double* values = nullptr;
        if (!values_h.is_none()) {
            auto va = nb::cast<nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(values_h);
            if (va.shape(0) != n) throw nb::value_error("values: wrong length");
            values = va.data();
        }
        const size_t k = P.inputs.size(), nid = P.num_ids;
        std::vector<T> xs(n * k);
        std::vector<uint32_t> idrows(n * nid);
        for (size_t i = 0; i < n * k; ++i) xs[i] = static_cast<T>(X.data()[i]);
        for (size_t i = 0; i < n * nid; ++i) idrows[i] = static_cast<uint32_t>(ids.data()[i]);
        auto& A = *static_cast<bt::Arena<T>*>(box.arena);
        std::vector<T*> dst;
        for (const bt::Span& w : box.wrt_arena) dst.push_back(A.grads() + w.first);
        bt::ParallelReplayResult res;
        {
            nb::gil_scoped_release unlocked;
            res = bt::replay_accumulate(P, A.values(), dst.data(), n, xs.data(), idrows.data(), static_cast<T>(seed),
                                        values, size_t(threads));
        }
        if (res.nonfinite != SIZE_MAX) {
            PyErr_Format(PyExc_FloatingPointError, "the loss is %s for sample %zu; lower the learning rate or check the data",
                         std::isnan(res.nonfinite_value) ? "nan" : "inf", res.nonfinite);
            throw nb::python_error();
        }
        box.arena->mark_grads_written();
        nb::list failed;
        for (size_t s : res.failed) failed.append(s);
        return failed;
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
        .def_prop_ro("num_inputs", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs.size(); }); })
        .def_prop_ro("num_ids", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.num_ids); }); })
        .def_prop_ro("num_wrt", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.num_wrt; }); })
        .def_prop_ro("frame_size", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.frame_size()); }); })
        .def_prop_ro("num_external", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.n_ext); }); })
        .def_prop_ro("swept", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.sweep.size(); }); },
                     "Records the reverse sweep visits (those leading from the root to a wrt node).")
        .def_prop_ro("traced_records", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.traced_records; }); },
                     "Records the trace appended, before records the root does not depend on were dropped.")
        .def_prop_ro("dtype", [](const ProgramBox& b) { return nb::borrow(g_dtype_objects[int(b.arena->dtype())]); })
        .def_prop_ro("arena", [](const ProgramBox& b) { return b.owner; })
        .def_prop_ro("alive", [](const ProgramBox& b) {
            return b.visit_prog([&](const auto& p) {
                for (const bt::ExternalSpan& e : p.ext)
                    if (!b.arena->alive(e.first + e.len - 1, e.gen)) return false;
                return true;
            });
        }, "False once a rewind discarded a node the program reads.")
        .def_prop_ro("guards", [](const ProgramBox& b) {
            return b.visit_prog([](const auto& p) {
                nb::list out;
                static const char* ops[] = {"<", "<=", ">", ">=", "!= 0"};
                for (const bt::Guard& g : p.guards) out.append(nb::make_tuple(g.where, ops[int(g.op)], g.expected));
                return out;
            });
        }, "(line, comparison, outcome during the trace) of each guard, in order.")
        .def("ops", [](const ProgramBox& b) {
            return b.visit_prog([](const auto& p) {
                std::map<std::string, size_t> c;
                for (const bt::Record& r : p.recs) ++c[record_name(r)];
                nb::dict d;
                for (auto& [k, v] : c) d[nb::str(k.c_str())] = v;
                return d;
            });
        }, "Number of records per op (map records as map_unary:tanh, ...).")
        .def("record", [](const ProgramBox& b, int64_t i) {
            return b.visit_prog([&](const auto& p) {
                if (i < 0 || size_t(i) >= p.recs.size()) throw nb::index_error("record index out of range");
                const bt::Record& r = p.recs[size_t(i)];
                nb::list spans;
                bt::for_each_arg_span(r, p.args.data() + r.a, [&](uint32_t f, uint32_t n) { spans.append(nb::make_tuple(f, n)); });
                return nb::make_tuple(record_name(r), r.out, r.nout, spans, r.imm);
            });
        }, nb::arg("i"), "(op, first output frame slot, number of outputs, argument spans [(frame slot, count)], immediate).")
        .def_prop_ro("root", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.root; }); })
        .def_prop_ro("input_slots", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs; }); })
        .def("_replay", &replay, nb::arg("X"), nb::arg("ids"), nb::arg("mode"), nb::arg("seed"), nb::arg("values").none(),
             nb::arg("out").none())
        .def("_replay_threads", &replay_threads, nb::arg("X"), nb::arg("ids"), nb::arg("seed"), nb::arg("values").none(),
             nb::arg("threads"));
}

}  // namespace btpy
