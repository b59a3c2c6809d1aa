// Var-arity ops (reduce_*, inner products, variance): forward and backward side by side.
// Arguments are n slot indices; inner products take 2n (x then w), with bias 2n + 1.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "half.hpp"
#include "huge_buffer.hpp"
#include "ops.hpp"

namespace bt {

// s + a * b for the reductions' running sums, fused exactly where the target has FMA. Left to the
// compiler, whether such a sum is fused depends on the CPU tuning (some tunings split multiply-add
// chains to shorten their latency), and the lane replay, which must agree with this kernel bit for
// bit, compiles the same expression as a vector loop: spelling the rounding out keeps both equal.
template <typename C>
[[gnu::always_inline]] inline C madd(C a, C b, C s) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
    if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) return std::fma(a, b, s);
#endif
    return s + a * b;  // no FMA on this target: nothing to fuse
}

// Number of output slots an nary op writes.
inline uint32_t nary_outputs(Op op) { return op == Op::mean_and_mean_squares ? 2 : 1; }

// Forward: writes the op's outputs to y[0..nary_outputs(op)).
template <typename T>
void nary_forward(Op op, const T* v, const uint32_t* idx, size_t n, T* y) {
    using C = acc_t<T>;  // sums accumulate in float for the half types
    C s = C(0);
    switch (op) {
        case Op::reduce_sum:
            for (size_t i = 0; i < n; ++i) s += v[idx[i]];
            y[0] = s;
            return;
        case Op::reduce_sub:  // x0 - x1 - x2 - ...
            s = v[idx[0]];
            for (size_t i = 1; i < n; ++i) s -= v[idx[i]];
            y[0] = s;
            return;
        case Op::reduce_mul:
            s = C(1);
            for (size_t i = 0; i < n; ++i) s *= v[idx[i]];
            y[0] = s;
            return;
        case Op::reduce_mean:
        case Op::reduce_negative_mean:
            for (size_t i = 0; i < n; ++i) s += v[idx[i]];
            y[0] = (op == Op::reduce_mean ? s : -s) / C(n);
            return;
        case Op::reduce_sum_of_squares:
        case Op::reduce_mean_squares:
            for (size_t i = 0; i < n; ++i) s = madd<C>(v[idx[i]], v[idx[i]], s);
            y[0] = op == Op::reduce_sum_of_squares ? s : s / C(n);
            return;
        case Op::inner_product:
        case Op::inner_product_with_bias: {
            size_t m = n / 2;
            for (size_t i = 0; i < m; ++i) s = madd<C>(v[idx[i]], v[idx[m + i]], s);
            y[0] = op == Op::inner_product ? s : s + v[idx[2 * m]];
            return;
        }
        case Op::variance:
        case Op::variance_biased: {
            for (size_t i = 0; i < n; ++i) s += v[idx[i]];
            C mean = s / C(n), ss = C(0);
            for (size_t i = 0; i < n; ++i) {
                const C d = v[idx[i]] - mean;
                ss = madd<C>(d, d, ss);
            }
            y[0] = ss / C(op == Op::variance ? n - 1 : n);
            return;
        }
        case Op::mean_and_mean_squares: {
            C q = C(0);
            for (size_t i = 0; i < n; ++i) {
                s += v[idx[i]];
                q = madd<C>(v[idx[i]], v[idx[i]], q);
            }
            y[0] = s / C(n);
            y[1] = q / C(n);
            return;
        }
        default: return;
    }
}

// Backward: adds the op's contribution to the argument grads. y are the outputs, g their grads.
template <typename T>
void nary_backward(Op op, const T* v, T* gr, const uint32_t* idx, size_t n, const T* y, const T* g,
                   HugeBuffer<T>& scratch) {
    using C = acc_t<T>;
    const C g0 = g[0];
    switch (op) {
        case Op::reduce_sum:
            for (size_t i = 0; i < n; ++i) gr[idx[i]] += g0;
            return;
        case Op::reduce_sub:
            gr[idx[0]] += g0;
            for (size_t i = 1; i < n; ++i) gr[idx[i]] -= g0;
            return;
        case Op::reduce_mul: {
            // d/dx_i = prod_{j<i} x_j * prod_{j>i} x_j: prefix and suffix products, exact with zeros.
            if (scratch.size() < n) scratch.resize(n);
            C suffix = C(1);
            for (size_t i = n; i-- > 0;) {
                scratch[i] = suffix;
                suffix *= v[idx[i]];
            }
            C prefix = C(1);
            for (size_t i = 0; i < n; ++i) {
                gr[idx[i]] += g0 * (prefix * scratch[i]);
                prefix *= v[idx[i]];
            }
            return;
        }
        case Op::reduce_mean:
        case Op::reduce_negative_mean: {
            C d = (op == Op::reduce_mean ? g0 : -g0) / C(n);
            for (size_t i = 0; i < n; ++i) gr[idx[i]] += d;
            return;
        }
        case Op::reduce_sum_of_squares:
        case Op::reduce_mean_squares: {
            C d = op == Op::reduce_sum_of_squares ? C(2) * g0 : C(2) * g0 / C(n);
            for (size_t i = 0; i < n; ++i) gr[idx[i]] += d * v[idx[i]];
            return;
        }
        case Op::inner_product:
        case Op::inner_product_with_bias: {
            size_t m = n / 2;
            for (size_t i = 0; i < m; ++i) {
                C x = v[idx[i]], w = v[idx[m + i]];  // read both first: x and w may be one slot
                gr[idx[i]] += g0 * w;
                gr[idx[m + i]] += g0 * x;
            }
            if (op == Op::inner_product_with_bias) gr[idx[2 * m]] += g0;
            return;
        }
        case Op::variance:
        case Op::variance_biased: {
            C s = C(0);
            for (size_t i = 0; i < n; ++i) s += v[idx[i]];
            C mean = s / C(n);
            C d = C(2) * g0 / C(op == Op::variance ? n - 1 : n);
            for (size_t i = 0; i < n; ++i) gr[idx[i]] += d * (v[idx[i]] - mean);
            return;
        }
        case Op::mean_and_mean_squares: {
            C dm = g0 / C(n), dq = C(2) * g[1] / C(n);
            for (size_t i = 0; i < n; ++i) gr[idx[i]] += dm + dq * v[idx[i]];
            return;
        }
        default: return;
    }
    (void)y;
}

}  // namespace bt
