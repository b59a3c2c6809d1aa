// Tracing: a per-thread mode during which guards and id inputs are noted and numbers cannot be
// read out of traced Values, ended by building the Program.
#include <nanobind/stl/string.h>

#include <frameobject.h>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "program.hpp"
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

bool refuse_write_while_tracing(bt::ArenaBase* /*arena*/, const char* what) {
    // Any arena: a write into another arena is as much a side effect that replays would not repeat.
    if (!t_trace) return true;
    PyErr_Format(TraceError,
                 "%s while tracing (%s): the write would happen once, while tracing, and be dropped by every "
                 "replay. Write values and grads outside the traced function.",
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
            if (!nb::isinstance<VectorBox>(h))
                throw nb::type_error(
                    ("wrt must hold Values or Vectors, got " + std::string(Py_TYPE(h.ptr())->tp_name)).c_str());
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
    auto* box = new ProgramBox{st->owner, arena, bt::Replayer<float>{}};
    try {
        dispatch(arena, [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            box->run = bt::Replayer<T>{bt::Program<T>::build(A, st->spec), {}, st->spec.wrt, {}};
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

void init_trace(nb::module_& m) {
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
}

}  // namespace btpy
