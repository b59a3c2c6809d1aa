// What value.cpp (the Value type, its number slots and construction) and value_members.cpp (its
// methods and attributes) share.
#pragma once
#include <type_traits>

#include "common.hpp"

namespace btpy {

inline double get_data(PyValue* v) {
    return dispatch(v->arena, [&](auto& A) { return double(A.values()[v->idx]); });
}
inline double get_grad(PyValue* v) {
    return dispatch(v->arena, [&](auto& A) { return double(A.grads()[v->idx]); });
}
inline void set_data(PyValue* v, double d) {
    dispatch(v->arena, [&](auto& A) {
        A.values()[v->idx] = static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(d);
    });
}
inline void set_grad(PyValue* v, double d) {
    v->arena->mark_grads_written();
    dispatch(v->arena, [&](auto& A) {
        A.grads()[v->idx] = static_cast<typename std::remove_reference_t<decltype(A)>::value_type>(d);
    });
}

// float(v): the value, refused while v is being traced (value.cpp).
PyObject* nb_float_(PyObject* x);

extern PyMethodDef value_methods[];  // value_members.cpp
extern PyGetSetDef value_getset[];   // value_members.cpp

}  // namespace btpy
