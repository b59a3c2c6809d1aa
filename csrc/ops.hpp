// Op codes and the scalar ops: forward and derivative of each op side by side.
//
// Adding a scalar op = one row in one of the tables below. The enum, the forward and backward
// of scalar records and of elementwise map records, the Value method and the module function are
// all generated from the rows; the Python package re-exports the function by name
// (src/burtorch/__init__.py) and tests/op_table.py gives its test points. In the rows: x is the argument, y the op's
// output, c the record's immediate; for binary ops a and b are the arguments. The derivative expressions may use y
// (already computed) so that e.g. exp and tanh reuse their forward value instead of recomputing it.
#pragma once
#include <cmath>
#include <cstdint>

namespace bt {

// ---- unary:  X(name, forward(x), dy/dx(x, y)) ----
#define BT_UNARY_OPS(X)                                               \
    X(neg, -x, T(-1))                                                 \
    X(relu, x > T(0) ? x : T(0), x > T(0) ? T(1) : T(0))              \
    X(tanh, std::tanh(x), T(1) - y * y)                               \
    X(exp, std::exp(x), y)                                            \
    X(log, std::log(x), T(1) / x)                                     \
    X(neg_log, -std::log(x), T(-1) / x)                               \
    X(sigmoid, T(1) / (T(1) + std::exp(-x)), y * (T(1) - y))          \
    X(inv, T(1) / x, -y * y)                                          \
    X(sqr, x* x, T(2) * x)                                            \
    X(pow3, x * x * x, T(3) * x * x)                                  \
    X(sqrt, std::sqrt(x), T(0.5) / y)                                 \
    X(inv_sqrt, T(1) / std::sqrt(x), T(-0.5) * y / x)                 \
    X(abs, std::fabs(x), x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0))) \
    X(sin, std::sin(x), std::cos(x))                                  \
    X(cos, std::cos(x), -std::sin(x))                                 \
    X(softplus, softplus_(x), T(1) / (T(1) + std::exp(-x)))

// ---- unary with an immediate constant c:  X(name, forward(x, c), dy/dx(x, y, c)) ----
#define BT_UNARY_IMM_OPS(X)                          \
    X(add_const, x + c, T(1))                        \
    X(mul_const, x* c, c)                            \
    X(div_const, x / c, T(1) / c)                    \
    X(rsub_const, c - x, T(-1))                      \
    X(rdiv_const, c / x, -y / x)                     \
    X(pow_const, pow_imm(x, c), dpow_imm(x, c))      \
    X(rpow_const, std::pow(c, x), dpow_exp(c, x, y)) \
    X(leaky_relu, x > T(0) ? x : c * x, x > T(0) ? T(1) : c)

// ---- binary:  X(name, forward(a, b), dy/da, dy/db) ----
#define BT_BINARY_OPS(X)                                                \
    X(add, a + b, T(1), T(1))                                           \
    X(sub, a - b, T(1), T(-1))                                          \
    X(mul, a* b, b, a)                                                  \
    X(div, a / b, T(1) / b, -y / b)                                     \
    X(pow, std::pow(a, b), b* std::pow(a, b - T(1)), dpow_exp(a, b, y)) \
    X(mean, (a + b) * T(0.5), T(0.5), T(0.5))                           \
    X(add_squares, a* a + b * b, T(2) * a, T(2) * b)                    \
    X(mean_squares, (a * a + b * b) * T(0.5), a, b)                     \
    X(negative_mean, (a + b) * T(-0.5), T(-0.5), T(-0.5))

// ---- var-arity reductions over n arguments (one record, args in the shared args array) ----
// Forward and backward live in reduce.hpp; the list is here so that all op codes are in one place.
#define BT_NARY_OPS(X)         \
    X(reduce_sum)              \
    X(reduce_sub)              \
    X(reduce_mul)              \
    X(reduce_mean)             \
    X(reduce_sum_of_squares)   \
    X(reduce_mean_squares)     \
    X(reduce_negative_mean)    \
    X(inner_product)           \
    X(inner_product_with_bias) \
    X(variance)                \
    X(variance_biased)         \
    X(mean_and_mean_squares)

// ---- range ops over vectors (one record writes a span of outputs); see range/ (dispatch.hpp) ----
#define BT_RANGE_OPS(X)     \
    X(copy)                 \
    X(map_unary)            \
    X(map_imm)              \
    X(map_binary)           \
    X(sum_range)            \
    X(dot_range)            \
    X(linear)               \
    X(softmax)              \
    X(cross_entropy)        \
    X(layer_norm)           \
    X(attention)            \
    X(multi_head_attention) \
    X(gather)               \
    X(lookup_linear)

enum class Op : uint16_t {
    leaf = 0,
#define BT_ENUM(name, ...) name,
    BT_UNARY_OPS(BT_ENUM) BT_UNARY_IMM_OPS(BT_ENUM) BT_BINARY_OPS(BT_ENUM) BT_NARY_OPS(BT_ENUM) BT_RANGE_OPS(BT_ENUM)
#undef BT_ENUM
        count_
};

enum class OpKind : uint8_t { leaf, unary, unary_imm, binary, nary, range };

struct OpInfo {
    const char* name;
    OpKind kind;
};

inline const OpInfo& op_info(Op op) {
    static const OpInfo table[] = {
        {"leaf", OpKind::leaf},
#define BT_U(name, ...) {#name, OpKind::unary},
#define BT_UI(name, ...) {#name, OpKind::unary_imm},
#define BT_B(name, ...) {#name, OpKind::binary},
#define BT_N(name, ...) {#name, OpKind::nary},
#define BT_R(name, ...) {#name, OpKind::range},
        BT_UNARY_OPS(BT_U) BT_UNARY_IMM_OPS(BT_UI) BT_BINARY_OPS(BT_B) BT_NARY_OPS(BT_N) BT_RANGE_OPS(BT_R)
#undef BT_U
#undef BT_UI
#undef BT_B
#undef BT_N
#undef BT_R
    };
    return table[static_cast<uint32_t>(op)];
}

// Range ops whose operand 1 is a linear layer's W (out x in, one span), which their products
// alone read: the layer itself, and a lookup feeding one (range/lookup_linear.hpp).
inline bool reads_linear_weight(Op op) { return op == Op::linear || op == Op::lookup_linear; }

// ---- helpers used by the tables ----

template <typename T>
inline T softplus_(T x) {
    // log(1 + e^x) without overflow for large x
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// x ** c with the exact fast paths PyTorch also takes for small integer exponents.
template <typename T>
inline T pow_imm(T x, T c) {
    if (c == T(2)) return x * x;
    if (c == T(3)) return x * x * x;
    if (c == T(1)) return x;
    if (c == T(0)) return T(1);
    if (c == T(-1)) return T(1) / x;
    if (c == T(0.5)) return std::sqrt(x);
    return std::pow(x, c);
}

template <typename T>
inline T dpow_imm(T x, T c) {
    if (c == T(0)) return T(0);
    return c * pow_imm(x, c - T(1));
}

// d(a**b)/db = a**b * log(a); taken as 0 where a == 0 and b >= 0 (as PyTorch does), where the
// formula would give 0 * -inf.
template <typename T>
inline T dpow_exp(T a, T b, T y) {
    if (a == T(0) && b >= T(0)) return T(0);
    return y * std::log(a);
}

}  // namespace bt
