// Elementwise math that the compiler can vectorize, for the map records' hot ops.
//
// libm's tanhf and expf are a call per value, which a wide layer's tanh record pays for every
// element and no loop can vectorize. These compute in double, branch-free, so a loop over them becomes SIMD code. tanh:
// e^(2|x|), then (e - 1) / (e + 1), which double precision keeps accurate down to |x| = 1e-4,
// and below that x (1 - x^2 / 3). Rounded to float, both are within one float ulp of the exact
// function (tests/cpp/test_vmath.cpp checks a dense sweep of floats against double precision).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace bt::kernels {

// e^x in double for |x| <= 200 (a float argument's whole useful range), from a degree-8
// polynomial after Cody-Waite reduction: relative error below 1e-9. NaN stays NaN.
inline double exp_reduced(double x) {
    x = std::max(std::min(x, 200.0), -200.0);   // std::min / max return their first argument on NaN
    const double shifter = 6755399441055744.0;  // 1.5 * 2^52: k = round(x / ln 2) without a conversion
    const double kd = x * 1.4426950408889634 + shifter;
    const double k = kd - shifter;
    const double r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    double p = 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const int64_t ki = std::bit_cast<int64_t>(kd) - std::bit_cast<int64_t>(shifter);
    return p * std::bit_cast<double>((ki + 1023) << 52);
}

// e^x for float x, within one float ulp; the loops of softmax rows vectorize over it.
inline float exp_float(float x) { return static_cast<float>(exp_reduced(double(x))); }

inline float tanh_float(float xf) {
    const double x = xf;
    const double a = std::fabs(x);
    const double e = exp_reduced(std::min(2.0 * a, 40.0));  // tanh(20) is 1 in float; NaN stays NaN
    const double big = std::copysign((e - 1.0) / (e + 1.0), x);
    const double small = x * (1.0 - x * x * (1.0 / 3.0));  // keeps the sign of -0
    return static_cast<float>(a < 1e-4 ? small : big);
}

// GCC vectorizes loops 256 bits wide on AVX-512 CPUs unless told otherwise (-mprefer-vector-width,
// which keeps narrow loops, such as a small model's 24-wide rows, off registers they would fill
// by halves). This loop is long and its double division is most of its time, so it gains from
// 512-bit registers (python -m burtorch_bench.threads --only ops times it); the same operations
// lane by lane, so the same bits. Not inlined, so that the caller's preference does not replace this one.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define BT_WIDE_LOOP __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define BT_WIDE_LOOP
#endif

BT_WIDE_LOOP inline void tanh_floats(const float* __restrict x, float* __restrict y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = tanh_float(x[i]);
}
#undef BT_WIDE_LOOP

}  // namespace bt::kernels
