// The thread's arenas (`with arena:` stacks and the default arenas), checkpoints and rewinds of
// them, the default dtype, labels, and the per-thread grad and anomaly modes.
#include <nanobind/stl/string.h>

#include <string>

#include "arena.hpp"

namespace btpy {

PyObject* g_dtype_objects[kDTypes] = {nullptr, nullptr, nullptr, nullptr};
bt::DType g_default_dtype = bt::DType::float64;
bool g_labels_on = false;

// ---------------------------------------------------------------- the thread's arenas
// Per thread and dtype: a stack of arenas entered with `with arena:` and a default arena; per
// thread, the stack of every entered arena (any dtype), whose top decides the default dtype. All
// live in the thread-state dict (strong references that die with the thread, with the GIL held);
// the thread_local struct only caches borrowed pointers into that dict.
namespace {
struct ThreadArenas {
    PyObject* dict = nullptr;
    PyObject* stack[kDTypes + 1] = {};  // lists: per dtype, then kEntered
    PyObject* fallback[kDTypes] = {};   // the default arenas
};
thread_local ThreadArenas t_arenas;
const char* const kStackKeys[kDTypes + 1] = {"burtorch.arena_stack.float32", "burtorch.arena_stack.float64",
                                             "burtorch.arena_stack.bfloat16", "burtorch.arena_stack.float16",
                                             "burtorch.arena_stack"};
constexpr int kEntered = kDTypes;  // the stack of every entered arena
const char* const kDefaultKeys[kDTypes] = {"burtorch.default_arena.float32", "burtorch.default_arena.float64",
                                           "burtorch.default_arena.bfloat16", "burtorch.default_arena.float16"};

// The thread's cache, refreshed when the thread state (hence its dict) changed.
ThreadArenas* thread_arenas() {
    PyObject* dict = PyThreadState_GetDict();
    if (!dict) {
        PyErr_SetString(PyExc_RuntimeError, "burtorch: no thread state dict");
        return nullptr;
    }
    if (dict != t_arenas.dict) t_arenas = ThreadArenas{dict, {}, {}};
    return &t_arenas;
}

PyObject* stack_of(ThreadArenas* t, int d) {
    if (t->stack[d]) return t->stack[d];
    PyObject* l = PyDict_GetItemString(t->dict, kStackKeys[d]);  // borrowed
    if (!l) {
        l = PyList_New(0);
        if (!l) return nullptr;
        int rc = PyDict_SetItemString(t->dict, kStackKeys[d], l);
        Py_DECREF(l);  // the dict keeps it
        if (rc < 0) return nullptr;
    }
    return t->stack[d] = l;
}
}  // namespace

PyObject* current_arena(bt::DType dt) {
    const int d = static_cast<int>(dt);
    ThreadArenas* t = thread_arenas();
    if (!t) return nullptr;
    PyObject* st = stack_of(t, d);
    if (!st) return nullptr;
    if (Py_ssize_t n = PyList_GET_SIZE(st)) return PyList_GET_ITEM(st, n - 1);
    if (t->fallback[d]) return t->fallback[d];
    PyObject* a = PyDict_GetItemString(t->dict, kDefaultKeys[d]);  // borrowed
    if (!a) {
        a = PyObject_CallOneArg(g_arena_type, g_dtype_objects[d]);
        if (!a) return nullptr;
        box_of(a)->owner_thread = PyThread_get_thread_ident();
        box_of(a)->core->reclaim_thread = box_of(a)->owner_thread;
        int rc = PyDict_SetItemString(t->dict, kDefaultKeys[d], a);
        Py_DECREF(a);  // the dict keeps it alive
        if (rc < 0) return nullptr;
    }
    return t->fallback[d] = a;
}

void enter_arena(nb::handle self) {
    ArenaBox* b = box_of(self.ptr());
    if (!b) throw nb::python_error();
    ThreadArenas* t = thread_arenas();
    PyObject* st = t ? stack_of(t, int(b->core->dtype())) : nullptr;
    PyObject* all = st ? stack_of(t, kEntered) : nullptr;
    if (!all || PyList_Append(all, self.ptr()) < 0) throw nb::python_error();
    if (PyList_Append(st, self.ptr()) < 0) {
        PyList_SetSlice(all, PyList_GET_SIZE(all) - 1, PyList_GET_SIZE(all), nullptr);
        throw nb::python_error();
    }
}

// Takes the innermost entry of `self` off the stack of every entered arena (none: nothing to do).
static void leave_entered(ThreadArenas* t, PyObject* self) {
    PyObject* all = stack_of(t, kEntered);
    if (!all) throw nb::python_error();
    for (Py_ssize_t i = PyList_GET_SIZE(all) - 1; i >= 0; --i)
        if (PyList_GET_ITEM(all, i) == self) {
            if (PyList_SetSlice(all, i, i + 1, nullptr) < 0) throw nb::python_error();
            return;
        }
}

bt::DType default_dtype() {
    ThreadArenas* t = thread_arenas();
    PyObject* all = t ? stack_of(t, kEntered) : nullptr;
    if (!all) {
        PyErr_Clear();  // no thread state dict: nothing can have been entered
        return g_default_dtype;
    }
    const Py_ssize_t n = PyList_GET_SIZE(all);
    return n ? box_of(PyList_GET_ITEM(all, n - 1))->core->dtype() : g_default_dtype;
}

void exit_arena(nb::handle self) {
    ArenaBox* b = box_of(self.ptr());
    if (!b) throw nb::python_error();
    ThreadArenas* t = thread_arenas();
    PyObject* st = t ? stack_of(t, int(b->core->dtype())) : nullptr;
    if (!st) throw nb::python_error();
    leave_entered(t, self.ptr());
    const Py_ssize_t n = PyList_GET_SIZE(st);
    if (n && PyList_GET_ITEM(st, n - 1) == self.ptr()) {
        if (PyList_SetSlice(st, n - 1, n, nullptr) < 0) throw nb::python_error();
        return;
    }
    for (Py_ssize_t i = n - 1; i >= 0; --i)
        if (PyList_GET_ITEM(st, i) == self.ptr()) {
            // Leave the stack consistent (the arena is no longer current), then say what happened.
            if (PyList_SetSlice(st, i, i + 1, nullptr) < 0) throw nb::python_error();
            throw std::runtime_error("arenas were exited in another order than entered");
        }
    throw std::runtime_error("this arena is not entered on this thread (entered in another thread, or exited twice)");
}

// ---------------------------------------------------------------- checkpoints
Checkpoint take_checkpoint(nb::handle a0, nb::handle a1) {
    Checkpoint cp;
    nb::handle hs[2] = {a0, a1};
    for (int k = 0; k < 2; ++k)
        if (hs[k].is_valid()) {
            ArenaBox* b = box_of(hs[k].ptr());
            if (!b) throw nb::python_error();
            cp.arena[k] = nb::borrow(hs[k]);
            cp.mark[k] = b->core->checkpoint();
            if (cp.mark[k].slots)
                cp.pin[k].take(b->core.get(), cp.mark[k].slots - 1,
                               SlotPin::Holder::checkpoint);  // a live checkpoint stays reachable
        }
    return cp;
}

void check_owner(const ArenaBox& b, const char* what) {
    if (b.owner_thread == 0 || b.owner_thread == PyThread_get_thread_ident()) return;
    throw std::runtime_error(std::string("cannot ") + what +
                             " another thread's default arena: each thread's default arena is private to it "
                             "(its nodes may be in use there); share work between threads through an "
                             "Arena made with bt.Arena() and entered with `with arena:`");
}

void rewind_to(const Checkpoint& cp) {
    for (int k = 0; k < 2; ++k)  // validate everything before changing anything
        if (cp.arena[k].is_valid()) check_owner(*box_of(cp.arena[k].ptr()), "rewind");
    for (int k = 0; k < 2; ++k)
        if (cp.arena[k].is_valid())
            if (const char* why = box_of(cp.arena[k].ptr())->core->mark_problem(cp.mark[k]))
                throw nb::value_error((std::string("cannot rewind: ") + why).c_str());
    for (int k = 0; k < 2; ++k)
        if (cp.arena[k].is_valid()) box_of(cp.arena[k].ptr())->core->rewind(cp.mark[k]);
}

void init_arena_scope(nb::module_& m) {
    m.def(
        "current_arena",
        [](nb::handle dtype) {
            bt::DType d = default_dtype();
            if (!dtype.is_none() && !parse_dtype(dtype.ptr(), &d)) throw nb::python_error();
            PyObject* a = current_arena(d);
            if (!a) throw nb::python_error();
            return nb::borrow(a);
        },
        nb::arg("dtype") = nb::none(), nb::sig("def current_arena(dtype: DType | str | None = None) -> Arena"),
        "The thread's current arena for a dtype (the default dtype if none).");
    m.def(
        "checkpoint",
        [](nb::handle arena) {
            if (!arena.is_none()) return take_checkpoint(arena, nb::handle());
            PyObject* a32 = current_arena(bt::DType::float32);
            PyObject* a64 = a32 ? current_arena(bt::DType::float64) : nullptr;
            if (!a64) throw nb::python_error();
            return take_checkpoint(a32, a64);
        },
        nb::arg("arena") = nb::none(), nb::sig("def checkpoint(arena: Arena | None = None) -> Checkpoint"),
        "A checkpoint of the thread's current float32 and float64 arenas (or of one arena).");
    m.def("rewind", &rewind_to, nb::arg("checkpoint"),
          "Discards every node created after the checkpoint; their handles become stale.");
    m.def(
        "set_default_dtype",
        [](nb::handle dtype) {
            bt::DType d;
            if (!parse_dtype(dtype.ptr(), &d)) throw nb::python_error();
            g_default_dtype = d;
        },
        nb::arg("dtype"), nb::sig("def set_default_dtype(dtype: DType | str) -> None"),
        "The dtype of new Values and leaves when none is given, outside any `with arena:` (float64 at start).\n"
        "Inside one, the innermost entered arena's dtype applies.");
    m.def(
        "get_default_dtype", []() { return nb::borrow(g_dtype_objects[int(default_dtype())]); },
        nb::sig("def get_default_dtype() -> DType"),
        "The dtype of new Values, leaves and modules: the innermost entered arena's on this thread,\n"
        "else the one set_default_dtype set.");
    m.def("set_labels", [](bool on) { g_labels_on = on; }, nb::arg("enabled"));
    m.def("labels_enabled", []() { return g_labels_on; });

    // Per-thread modes (csrc/modes.hpp); the Python context managers nest them.
    m.def(
        "_push_mode",
        [](const std::string& which, int delta) {
            int& depth = which == "no_grad"   ? bt::t_modes.no_grad
                         : which == "anomaly" ? bt::t_modes.anomaly
                                              : throw nb::value_error("unknown mode");
            if (depth + delta < 0) throw nb::value_error("mode exited more often than entered");
            if (which == "no_grad" && delta > 0 && tracing())
                throw nb::value_error(
                    "no_grad() inside a trace: its nodes would be constants of the program; "
                    "compute them outside the traced function");
            depth += delta;
        },
        nb::arg("which"), nb::arg("delta"));
    m.def(
        "is_grad_enabled", []() { return bt::grad_enabled(); },
        "False inside `with burtorch.no_grad():` (ops record nothing).");
    m.def(
        "is_anomaly_enabled", []() { return bt::anomaly_enabled(); }, "True inside `with burtorch.detect_anomaly():`.");
}

}  // namespace btpy
