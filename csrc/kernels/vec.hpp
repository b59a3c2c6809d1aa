// Contiguous vector kernels: plain loops over restrict pointers that the compiler vectorizes.
#pragma once
#include <cstddef>

namespace bt::kernels {

// Reductions carry `omp simd reduction` so that they vectorize without -ffast-math (compiled
// with -fopenmp-simd: no OpenMP runtime). The summation order is fixed per build, so results
// are deterministic run to run.
template <typename T>
inline T dot(const T* __restrict a, const T* __restrict b, size_t n) {
    T s = T(0);
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

// y += alpha * x
template <typename T>
inline void axpy(T* __restrict y, T alpha, const T* __restrict x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// y += x
template <typename T>
inline void add(T* __restrict y, const T* __restrict x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

// Four dot products sharing one w: w is loaded once for four rows of x.
template <typename T>
inline void dot4(const T* __restrict w, const T* __restrict x0, const T* __restrict x1, const T* __restrict x2,
                 const T* __restrict x3, size_t n, T* out) {
    T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (size_t i = 0; i < n; ++i) {
        const T wi = w[i];
        s0 += wi * x0[i];
        s1 += wi * x1[i];
        s2 += wi * x2[i];
        s3 += wi * x3[i];
    }
    out[0] = s0;
    out[1] = s1;
    out[2] = s2;
    out[3] = s3;
}

// y += a0 x0 + a1 x1 + a2 x2 + a3 x3: one load and store of y for four updates.
template <typename T>
inline void axpy4(T* __restrict y, T a0, const T* __restrict x0, T a1, const T* __restrict x1, T a2,
                  const T* __restrict x2, T a3, const T* __restrict x3, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
}

template <typename T>
inline T sum(const T* x, size_t n) {
    T s = T(0);
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
}

}  // namespace bt::kernels
