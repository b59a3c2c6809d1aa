// bt.float128: the quadruple-precision scalar Value over csrc/quad.hpp (where the compiler has
// __float128; absent from the module otherwise).
#include "../csrc/quad.hpp"

#include <nanobind/stl/string.h>

#include <cmath>
#include <limits>
#include <string>

#include "common.hpp"

namespace btpy {

#ifdef BT_HAS_FLOAT128

// A named namespace, not an anonymous one: the bindings compile as unity batches, where the
// helpers of one file must not meet another file's.
namespace quadpy {

namespace q = bt::quad;

struct QValue {
    q::NodePtr node;
};

// An int exactly (|n| < 2**63), a float exactly, or anything with as_integer_ratio() (Fraction,
// Decimal) as numerator / denominator rounded once; nullptr when `o` is none of those.
bool to_f128(nb::handle o, q::f128* out) {
    PyObject* p = o.ptr();
    if (PyBool_Check(p)) return false;
    if (PyLong_Check(p)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
        if (overflow) throw nb::value_error("float128: an int operand must lie within +-2**63");
        *out = static_cast<q::f128>(v);
        return true;
    }
    if (PyFloat_Check(p)) {
        const double d = PyFloat_AS_DOUBLE(p);
        if (!std::isfinite(d)) throw nb::value_error("float128: operands must be finite");
        *out = static_cast<q::f128>(d);
        return true;
    }
    if (nb::hasattr(o, "as_integer_ratio") && nb::hasattr(o, "denominator")) {
        nb::tuple r = nb::cast<nb::tuple>(o.attr("as_integer_ratio")());
        q::f128 num, den;
        if (!to_f128(r[0], &num) || !to_f128(r[1], &den)) return false;
        *out = num / den;
        return true;
    }
    return false;
}

q::NodePtr operand(nb::handle o) {
    if (nb::isinstance<QValue>(o)) return nb::cast<QValue&>(o).node;
    q::f128 v;
    if (!to_f128(o, &v)) return nullptr;
    return q::leaf(v);
}

nb::object wrap(q::NodePtr n) { return nb::cast(QValue{std::move(n)}); }

template <q::NodePtr (*F)(const q::NodePtr&, const q::NodePtr&), bool Reflected>
nb::object binary(const QValue& self, nb::handle other) {
    q::NodePtr o = operand(other);
    if (!o) return nb::borrow(Py_NotImplemented);
    return wrap(Reflected ? F(o, self.node) : F(self.node, o));
}

template <bool Reflected>
nb::object divide(const QValue& self, nb::handle other) {
    q::NodePtr o = operand(other);
    if (!o) return nb::borrow(Py_NotImplemented);
    const q::NodePtr& den = Reflected ? self.node : o;
    if (den->value == 0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "float128 division by zero");
        throw nb::python_error();
    }
    return wrap(Reflected ? q::div(o, self.node) : q::div(self.node, o));
}

nb::object fraction(q::f128 x) {
    const q::Exact e = q::exact(x);
    nb::object fr = nb::module_::import_("fractions").attr("Fraction");
    nb::object sig = nb::steal(PyLong_FromString(q::to_decimal(e.significand).c_str(), nullptr, 10));
    nb::object r = fr(sig) * nb::steal(PyNumber_Power(fr(2).ptr(), nb::int_(e.exponent).ptr(), Py_None));
    return e.negative ? nb::object(-r) : r;
}

double to_double(q::f128 x) { return static_cast<double>(x); }

}  // namespace quadpy

void init_quad(nb::module_& m) {
    using namespace quadpy;
    nb::class_<QValue>(m, "float128",
                       "A scalar node in IEEE binary128 (quadruple precision: 113 significand bits), with "
                       "reverse-mode gradients: +, -, *, /, ** (int), relu, backward. A graph of its own, "
                       "apart from the arenas (the scalar path only). float128(x) is a leaf: an int "
                       "(|x| < 2**63) or float converts exactly, a Fraction rounds once.")
        .def(
            "__init__",
            [](QValue* self, nb::handle x) {
                q::NodePtr n = nb::isinstance<QValue>(x) ? q::leaf(nb::cast<QValue&>(x).node->value) : operand(x);
                if (!n)
                    throw nb::type_error(("float128(): expected an int, float, Fraction or float128, got " +
                                          std::string(Py_TYPE(x.ptr())->tp_name))
                                             .c_str());
                new (self) QValue{std::move(n)};
            },
            nb::arg("x"))
        .def_prop_ro(
            "data", [](const QValue& s) { return to_double(s.node->value); }, "The value rounded to a float.")
        .def_prop_ro(
            "grad", [](const QValue& s) { return to_double(s.node->grad); },
            "The gradient from the last backward() of a graph holding this node, rounded to a float.")
        .def(
            "data_fraction", [](const QValue& s) { return fraction(s.node->value); },
            "The exact binary128 value as a fractions.Fraction.")
        .def(
            "grad_fraction", [](const QValue& s) { return fraction(s.node->grad); },
            "The exact binary128 gradient as a fractions.Fraction.")
        .def(
            "backward", [](const QValue& s) { q::backward(s.node); },
            "Sets the gradient of this node with respect to every node of its graph (not accumulated: "
            "each call starts from zero).")
        .def("relu", [](const QValue& s) { return wrap(q::relu(s.node)); })
        .def("__neg__", [](const QValue& s) { return wrap(q::neg(s.node)); })
        .def("__add__", binary<q::add, false>, nb::is_operator())
        .def("__radd__", binary<q::add, true>, nb::is_operator())
        .def("__sub__", binary<q::sub, false>, nb::is_operator())
        .def("__rsub__", binary<q::sub, true>, nb::is_operator())
        .def("__mul__", binary<q::mul, false>, nb::is_operator())
        .def("__rmul__", binary<q::mul, true>, nb::is_operator())
        .def("__truediv__", divide<false>, nb::is_operator())
        .def("__rtruediv__", divide<true>, nb::is_operator())
        .def(
            "__pow__",
            [](const QValue& s, nb::handle n) -> nb::object {
                if (PyBool_Check(n.ptr()) || !PyLong_Check(n.ptr())) return nb::borrow(Py_NotImplemented);
                int overflow = 0;
                const long e = PyLong_AsLongAndOverflow(n.ptr(), &overflow);
                if (overflow || e < -1024 || e > 1024)
                    throw nb::value_error("float128 ** n: n must be an int in [-1024, 1024]");
                if (e < 0 && s.node->value == 0) throw nb::value_error("float128: 0 to a negative power");
                return wrap(q::pow(s.node, static_cast<int>(e)));
            },
            nb::is_operator())
        .def("__repr__", [](const QValue& s) {
            return "float128(" + nb::cast<std::string>(nb::repr(nb::float_(to_double(s.node->value)))) + ")";
        });
}

#else

void init_quad(nb::module_&) {}

#endif

}  // namespace btpy
