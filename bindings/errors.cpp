// One Python exception type per kind of core error, for raw CPython entry points (guarded) and
// nanobind functions (a registered translator) alike.
#include <typeinfo>

#include "common.hpp"

namespace btpy {

PyObject* StaleValueError = nullptr;
PyObject* AnomalyError = nullptr;

// What a failed nb::cast (an argument of a type the function cannot use) raises, as TypeError; the
// functions that can name the argument check it themselves first.
static const char* const kBadCast = "burtorch: an argument has a type this function cannot use";

void set_error_from_current_exception() {
    try {
        throw;
    } catch (nb::python_error& e) {
        e.restore();
    } catch (const nb::builtin_exception& e) {
        PyObject* type = PyExc_RuntimeError;
        switch (e.type()) {
            case nb::exception_type::index_error: type = PyExc_IndexError; break;
            case nb::exception_type::key_error: type = PyExc_KeyError; break;
            case nb::exception_type::value_error: type = PyExc_ValueError; break;
            case nb::exception_type::type_error: type = PyExc_TypeError; break;
            case nb::exception_type::stop_iteration: type = PyExc_StopIteration; break;
            case nb::exception_type::buffer_error: type = PyExc_BufferError; break;
            case nb::exception_type::import_error: type = PyExc_ImportError; break;
            case nb::exception_type::attribute_error: type = PyExc_AttributeError; break;
            default: break;
        }
        PyErr_SetString(type, e.what());
    } catch (const bt::CapacityError& e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const std::bad_alloc&) {
        PyErr_SetString(PyExc_MemoryError, "burtorch: out of memory");
    } catch (const bt::AnomalyError& e) {
        PyErr_SetString(AnomalyError, e.what());
    } catch (const bt::NonFiniteLoss& e) {
        PyErr_SetString(PyExc_FloatingPointError, e.what());
    } catch (const std::bad_cast&) {  // nb::cast of an object of another type
        PyErr_SetString(PyExc_TypeError, kBadCast);
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "burtorch: unknown C++ exception");
    }
}

void init_errors(nb::module_& m) {
    StaleValueError = PyErr_NewExceptionWithDoc(
        "burtorch.StaleValueError", "A Value or Vector refers to nodes that a rewind of their arena discarded.",
        PyExc_RuntimeError, nullptr);
    AnomalyError = PyErr_NewExceptionWithDoc(
        "burtorch.AnomalyError",
        "Raised under detect_anomaly() by the first record whose forward value or backward contribution is\n"
        "not finite; the message names the op, the record index and the node (with its label).",
        PyExc_FloatingPointError, nullptr);
    if (!StaleValueError || !AnomalyError) throw nb::python_error();
    m.attr("StaleValueError") = nb::handle(StaleValueError);
    m.attr("AnomalyError") = nb::handle(AnomalyError);
    // nanobind would map CapacityError (a std::length_error) to ValueError: capacity is memory.
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const bt::CapacityError& e) {
            PyErr_SetString(PyExc_MemoryError, e.what());
        } catch (const bt::AnomalyError& e) {
            PyErr_SetString(AnomalyError, e.what());
        } catch (const bt::NonFiniteLoss& e) {  // a std::domain_error, which nanobind makes a ValueError
            PyErr_SetString(PyExc_FloatingPointError, e.what());
        } catch (const std::bad_cast&) {  // nanobind would raise RuntimeError('std::bad_cast')
            PyErr_SetString(PyExc_TypeError, kBadCast);
        }
    });
}

}  // namespace btpy
