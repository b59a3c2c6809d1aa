// Range ops: one native call and one record each (layers in range_layers.cpp). Every vector operand may be a Vector, a
// Value, a list (of numbers or Values), a nested list or a numpy array; new constant leaves for numbers go to the arena
// of the op's other operands.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../csrc/record_timer.hpp"
#include "vector.hpp"

namespace btpy {

using bt::Op;

// ---------------------------------------------------------------- elementwise
static VectorBox map_unary(const VectorBox& x, Op op, double imm = 0.0) {
    x.check();
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::append_map_unary(A, op, x.spans, imm); });
}

static VectorBox map_binary(const VectorBox& a, const VectorBox& b, Op op) {
    same_arena(a, b, bt::op_info(op).name);
    a.check();
    b.check();
    if (a.size != b.size)
        throw nb::value_error(("elementwise " + std::string(bt::op_info(op).name) + ": lengths differ (" +
                               std::to_string(a.size) + " vs " + std::to_string(b.size) + ")")
                                  .c_str());
    return emit(a, a.size, a.rows, a.cols, [&](auto& A) { return bt::append_map_binary(A, op, a.spans, b.spans); });
}

// self (op) other, or other (op) self when reflected; a number other is a constant of the record.
static VectorBox arith(const VectorBox& self, nb::handle other, Op op, bool reflected) {
    ConstantsGuard guard;
    double c;
    int ok = (is_value(other.ptr()) || nb::isinstance<VectorBox>(other)) ? 0 : number_to_double(other.ptr(), &c);
    if (ok < 0) throw nb::python_error();
    if (ok > 0) {
        switch (op) {
            case Op::add: return map_unary(self, Op::add_const, c);
            case Op::sub: return reflected ? map_unary(self, Op::rsub_const, c) : map_unary(self, Op::add_const, -c);
            case Op::mul: return map_unary(self, Op::mul_const, c);
            case Op::div: return reflected ? map_unary(self, Op::rdiv_const, c) : map_unary(self, Op::div_const, c);
            case Op::pow: return reflected ? map_unary(self, Op::rpow_const, c) : map_unary(self, Op::pow_const, c);
            default: break;
        }
    }
    VectorBox o = as_vector(other, &self, bt::op_info(op).name);
    return reflected ? map_binary(o, self, op) : map_binary(self, o, op);
}

// ---------------------------------------------------------------- reductions
static nb::object vsum(nb::handle x_h, bool mean) {
    ConstantsGuard guard;
    VectorBox x = as_vector(x_h, nullptr, mean ? "vmean()" : "vsum()");
    x.check();
    const double scale = mean ? 1.0 / double(x.size) : 1.0;
    VectorBox out = emit(x, 1, 0, 0, [&](auto& A) { return bt::append_sum(A, x.spans, scale); });
    return value_at(x, out.first());
}

static nb::object vdot(nb::handle x_h, nb::handle w_h) {
    ConstantsGuard guard;
    auto anchor = pick_anchor({x_h, w_h});
    VectorBox x = as_vector(x_h, anchor_ptr(anchor), "dot()");
    VectorBox w = as_vector(w_h, &x, "dot()");
    same_arena(x, w, "dot()");
    x.check();
    w.check();
    if (x.size != w.size)
        throw nb::value_error(
            ("dot(): lengths differ (" + std::to_string(x.size) + " vs " + std::to_string(w.size) + ")").c_str());
    VectorBox out = emit(x, 1, 0, 0, [&](auto& A) { return bt::append_dot(A, x.spans, w.spans); });
    return value_at(x, out.first());
}

static VectorBox softmax(nb::handle x_h) {
    ConstantsGuard guard;
    VectorBox x = as_vector(x_h, nullptr, "softmax()");
    x.check();
    const uint32_t rows = bt::checked_u32(x.nrows()), n = bt::checked_u32(x.row_len());
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::append_softmax(A, x.spans, rows, n); });
}

static VectorBox copy(const VectorBox& x) {
    x.check();
    return emit(x, x.size, x.rows, x.cols, [&](auto& A) { return bt::append_copy(A, x.spans); });
}

// ---------------------------------------------------------------- registration
void bind_vector_ops(nb::class_<VectorBox>& V) {
    V.def(
         "sum", [](nb::handle v) { return vsum(v, false); }, nb::sig("def sum(self) -> Value"),
         "Sum of the elements, one record.")
        .def(
            "mean", [](nb::handle v) { return vsum(v, true); }, nb::sig("def mean(self) -> Value"),
            "Mean of the elements, one record.")
        .def(
            "dot", [](nb::handle v, nb::handle other) { return vdot(v, other); },
            nb::sig("def dot(self, other: VectorLike) -> Value"), "Inner product with another vector, one record.")
        .def(
            "softmax", [](nb::handle v) { return softmax(v); }, nb::sig("def softmax(self) -> Vector"),
            "Softmax of the vector, or of each row of a matrix.")
        .def("copy", &copy, "Materialises the view into fresh contiguous nodes (one record).")
        .def(
            "leaky_relu", [](const VectorBox& v, double slope) { return map_unary(v, Op::leaky_relu, slope); },
            nb::arg("slope") = 0.01)
        .def("__neg__", [](const VectorBox& v) { return map_unary(v, Op::neg); })
        .def(
            "__add__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::add, false); },
            nb::sig("def __add__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__radd__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::add, true); },
            nb::sig("def __radd__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__sub__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::sub, false); },
            nb::sig("def __sub__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__rsub__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::sub, true); },
            nb::sig("def __rsub__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__mul__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::mul, false); },
            nb::sig("def __mul__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__rmul__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::mul, true); },
            nb::sig("def __rmul__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__truediv__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::div, false); },
            nb::sig("def __truediv__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__rtruediv__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::div, true); },
            nb::sig("def __rtruediv__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__pow__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::pow, false); },
            nb::sig("def __pow__(self, other: VectorLike | float, /) -> Vector"))
        .def(
            "__rpow__", [](const VectorBox& a, nb::handle b) { return arith(a, b, Op::pow, true); },
            nb::sig("def __rpow__(self, other: VectorLike | float, /) -> Vector"));
#define BT_VEC_U(name, ...) V.def(#name, [](const VectorBox& v) { return map_unary(v, Op::name); });
    BT_UNARY_OPS(BT_VEC_U)
#undef BT_VEC_U
}

// burtorch.record_times: switches the per-record timer (csrc/record_timer.hpp) on, from zero.
static void record_times_start() {
    namespace rt = bt::record_timer;
    if (rt::on.load())
        throw std::runtime_error(
            "record_times() is already timing; one at a time (they would share one set of totals)");
    rt::reset();
    rt::on.store(true);
}

// Switches it off: (op, "forward" or "backward", calls, seconds) for every kind that ran.
static std::vector<std::tuple<std::string, std::string, uint64_t, double>> record_times_stop() {
    namespace rt = bt::record_timer;
    rt::on.store(false);
    std::vector<std::tuple<std::string, std::string, uint64_t, double>> rows;
    for (int d = 0; d < 2; ++d)
        for (int k = 0; k < rt::kKinds; ++k) {
            const uint64_t calls = rt::totals.calls[d][k].load();
            if (calls == 0) continue;
            const std::string op =
                k == rt::kGatherLinear ? "lookup+linear" : bt::op_info(bt::Op(int(bt::Op::copy) + k)).name;
            rows.emplace_back(op, d == 0 ? "forward" : "backward", calls, double(rt::totals.ns[d][k].load()) * 1e-9);
        }
    return rows;
}

void init_range(nb::module_& m) {
    m.def("_record_times_start", &record_times_start);
    m.def("_record_times_stop", &record_times_stop);
    m.def("softmax", &softmax, nb::arg("x"), nb::sig("def softmax(x: VectorLike) -> Vector"),
          R"doc(Softmax of a vector, or of each row of a matrix: one record.

Args:
    x: a vector or a matrix.

Returns:
    A Vector of x's shape.)doc");
    m.def(
        "vsum", [](nb::handle x) { return vsum(x, false); }, nb::arg("x"), nb::sig("def vsum(x: VectorLike) -> Value"),
        "The sum of a vector's elements: one record, a scalar Value.");
    m.def(
        "vmean", [](nb::handle x) { return vsum(x, true); }, nb::arg("x"), nb::sig("def vmean(x: VectorLike) -> Value"),
        "The mean of a vector's elements: one record, a scalar Value.");
    m.def("dot", &vdot, nb::arg("x"), nb::arg("w"), nb::sig("def dot(x: VectorLike, w: VectorLike) -> Value"),
          "The inner product of two vectors of one length: one record, a scalar Value.");
}

}  // namespace btpy
