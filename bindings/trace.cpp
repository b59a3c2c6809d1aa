// Tracing: a per-thread mode during which guards and id inputs are noted and numbers cannot be
// read out of traced Values, ended by building the Program.
#include <nanobind/stl/string.h>

#include <frameobject.h>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "../csrc/trace.hpp"
#include "program.hpp"
#include "vector.hpp"

namespace btpy {

PyObject* TraceError = nullptr;

// ---------------------------------------------------------------- the trace mode
// The trace itself is csrc/trace.hpp's (one per thread); the binding adds the Python Arena it
// traces, kept alive until the trace ends, and the user's source line of each guard.
static thread_local PyObject* t_trace_owner = nullptr;  // a strong reference while tracing

bool tracing() { return bt::current_trace() != nullptr; }

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
    if (!bt::trace_of(arena)) return true;
    PyErr_Format(TraceError,
                 "%s while tracing (%s): a number read out of a traced Value would be baked into the program "
                 "and be wrong on replay. Keep the computation in Values (use comparisons, which are guarded, "
                 "or bt.where-free arithmetic), or run this code eagerly.",
                 what, python_line().c_str());
    return false;
}

bool refuse_write_while_tracing(bt::ArenaBase* /*arena*/, const char* what) {
    // Any arena: a write into another arena is as much a side effect that replays would not repeat.
    if (!tracing()) return true;
    PyErr_Format(TraceError,
                 "%s while tracing (%s): the write would happen once, while tracing, and be dropped by every "
                 "replay. Write values and grads outside the traced function.",
                 what, python_line().c_str());
    return false;
}

void record_guard(PyValue* a, PyValue* b, double c, int py_op, bool result) {
    bt::Trace* t = bt::trace_of(a->arena);
    if (!t || (b && b->arena != t->arena())) return;
    bt::GuardOp op = bt::GuardOp::nonzero;
    switch (py_op) {
        case Py_LT: op = bt::GuardOp::lt; break;
        case Py_LE: op = bt::GuardOp::le; break;
        case Py_GT: op = bt::GuardOp::gt; break;
        case Py_GE: op = bt::GuardOp::ge; break;
        default: break;
    }
    t->guard(op, result, a->idx, b ? &b->idx : nullptr, c, python_line());
}

// Positions of traced ids among `ids` (an int or an iterable of ints): -1 for a plain int.
// Traced ids are ints carrying `_bt_input` (their position in a sample's id row).
bool traced_id_positions(nb::handle ids, std::vector<int64_t>& pos) {
    pos.clear();
    if (!tracing()) return false;
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
    bt::Trace* t = bt::trace_of(arena);
    if (!t) return;
    try {
        t->id_inputs(pos, bound);
    } catch (const std::invalid_argument& e) {
        throw nb::value_error(e.what());
    }
}

static void trace_begin(nb::handle arena_obj, uint32_t num_ids) {
    ArenaBox* box = box_of(arena_obj.ptr());
    if (!box) throw nb::python_error();
    bt::begin_trace(box->core.get(), num_ids);  // std::invalid_argument: a ValueError
    t_trace_owner = nb::borrow(arena_obj).release().ptr();
}

// Closes the thread's trace (if any) and lets go of its arena object.
static std::unique_ptr<bt::Trace> close_trace(nb::object* owner = nullptr) {
    std::unique_ptr<bt::Trace> t = bt::end_trace();
    nb::object o = nb::steal(t_trace_owner);
    t_trace_owner = nullptr;
    if (owner) *owner = std::move(o);
    return t;
}

static void trace_abort() { close_trace(); }

// Ends the trace: root is the traced function's result; inputs the float input leaves; wrt the
// nodes whose grads replays report (Values or Vectors, in order).
static ProgramBox* trace_end(nb::handle root_h, nb::handle inputs_h, nb::handle wrt_h) {
    nb::object owner;
    std::unique_ptr<bt::Trace> st = close_trace(&owner);
    if (!st) throw nb::value_error("not tracing");
    bt::ArenaBase* arena = st->arena();
    if (!is_value(root_h.ptr()))
        throw nb::type_error(
            ("the traced function must return a scalar Value, got " + std::string(Py_TYPE(root_h.ptr())->tp_name))
                .c_str());
    PyValue* root = as_pyvalue(root_h.ptr());
    if (root->arena != arena) throw nb::value_error("the traced function returned a Value of another arena (or dtype)");
    if (!check_alive(root)) throw nb::python_error();
    if (const char* why = st->rewound())
        throw nb::value_error((std::string("the arena was rewound below the trace while tracing: ") + why).c_str());
    st->set_root(root->idx);
    for (nb::handle h : inputs_h) {
        PyValue* v = as_pyvalue(h.ptr());
        if (!check_alive(v)) throw nb::python_error();
        st->add_input(v->idx);
    }
    for (nb::handle h : wrt_h) {
        if (is_value(h.ptr())) {
            PyValue* v = as_pyvalue(h.ptr());
            if (v->arena != arena) throw nb::value_error("wrt holds a Value of another arena");
            if (!check_alive(v)) throw nb::python_error();
            st->add_wrt(bt::Span{v->idx, 1});
        } else {
            if (!nb::isinstance<VectorBox>(h))
                throw nb::type_error(
                    ("wrt must hold Values or Vectors, got " + std::string(Py_TYPE(h.ptr())->tp_name)).c_str());
            VectorBox vb = nb::cast<VectorBox>(h);
            if (vb.arena != arena) throw nb::value_error("wrt holds a Vector of another arena");
            vb.check();
            for (const bt::Span& s : vb.spans) st->add_wrt(s);  // std::invalid_argument: a ValueError
        }
    }
    const bt::TraceSpec& spec = st->spec();
    auto* box = new ProgramBox{owner, arena, bt::Replayer<float>{}};
    try {
        dispatch_wide(arena, "recording a program", [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            box->run = bt::Replayer<T>{bt::Program<T>::build(A, spec), {}, spec.wrt, {}};
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
