// Contiguous-range kernels. Plain loops over restrict pointers that the compiler vectorizes.
#pragma once
#include <cstddef>

namespace bt::k {

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

template <typename T>
inline T sum(const T* x, size_t n) {
    T s = T(0);
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
}

}  // namespace bt::k
