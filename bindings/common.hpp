// Shared declarations of the binding layer: the Value object, the Arena box and the helpers
// that check what a Python user can get wrong before anything reaches the core.
#pragma once
#include <Python.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <vector>

#include "../csrc/backward.hpp"

namespace nb = nanobind;

namespace btpy {

// The payload of a Python `Arena` object.
struct ArenaBox {
    std::unique_ptr<bt::ArenaBase> core;
    bt::DType dtype;
    ArenaBox(bt::DType dt, const bt::Capacity& cap) : dtype(dt) {
        if (dt == bt::DType::float64) core = std::make_unique<bt::Arena<double>>(cap);
        else core = std::make_unique<bt::Arena<float>>(cap);
    }
};

// A scalar handle: (arena, slot index, generation tag). 40 bytes + the object header.
struct PyValue {
    PyObject_HEAD
    bt::ArenaBase* arena;
    PyObject* owner;  // the Python Arena object that owns `arena` (strong reference)
    uint32_t idx;
    uint32_t gen;
    bt::DType dtype;
};

extern PyTypeObject ValueType;
extern PyObject* StaleValueError;
extern bool g_labels_on;
extern PyObject* g_dtype_objects[2];
extern bt::DType g_default_dtype;

inline bool is_value(PyObject* o) { return Py_TYPE(o) == &ValueType; }

template <typename T>
inline bt::Arena<T>& typed(bt::ArenaBase* a) { return *static_cast<bt::Arena<T>*>(a); }

// New handle to slot idx of arena (owner = its Python Arena object).
PyObject* make_value(bt::ArenaBase* arena, PyObject* owner, uint32_t idx, bt::DType dtype);

// Appends a unary op (or one with an immediate constant) on a live Value; nullptr on error.
PyObject* emit_unary(PyValue* x, bt::Op op);
PyObject* emit_imm(PyValue* x, bt::Op op, double c);

// Raises StaleValueError and returns false if v's slot was rewound away.
bool check_alive(PyValue* v);

// The thread's current arena for a dtype (innermost `with arena:`, else the thread's default).
PyObject* current_arena(bt::DType dt);  // borrowed
ArenaBox* box_of(PyObject* arena_obj);

const char* dtype_name(bt::DType d);
// Parses bt.float32 / bt.float64 / "float32" / "float64" / numpy-like objects with a name.
bool parse_dtype(PyObject* o, bt::DType* out);

// Converts a Python number (not a Value) to double; returns false without an error set if `o`
// is not a number at all (so that callers can return NotImplemented).
bool number_to_double(PyObject* o, double* out);

// Collects the slot indices of a sequence of Values (numbers become constant leaves) into
// `out`; all must live in one arena, which is returned through arena/owner. Returns false with
// a Python error set.
bool collect_values(PyObject* seq, const char* what, std::vector<uint32_t>& out,
                    bt::ArenaBase** arena, PyObject** owner, bt::DType* dtype, bool allow_empty);

// Calls f(), turning C++ exceptions into Python ones; returns nullptr on error.
template <typename F>
inline PyObject* guarded(F&& f) {
    try {
        return f();
    } catch (const bt::CapacityError& e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const std::bad_alloc&) {
        PyErr_SetString(PyExc_MemoryError, "burtorch: out of memory");
    } catch (nb::python_error& e) {
        e.restore();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

void init_arena(nb::module_& m);
void init_value(nb::module_& m);
void init_functions(nb::module_& m);
void init_ranges(nb::module_& m);

}  // namespace btpy
