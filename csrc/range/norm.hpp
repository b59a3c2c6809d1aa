// Layer normalisation of each row (biased variance, as PyTorch's): y = (x - mean) * rstd * g + b.
// Operands: x (rows * C), gamma and beta (one span of C each). Tail: [rows, C]; imm: eps.
#pragma once
#include <cmath>

#include "../kernels/vec.hpp"
#include "common.hpp"

namespace bt {

template <typename T>
inline void row_stats(const T* x, uint32_t C, T eps, T* mean, T* rstd) {
    T m = kernels::sum(x, C) / T(C);
    T v = T(0);
    for (uint32_t j = 0; j < C; ++j) v += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = T(1) / std::sqrt(v / T(C) + eps);
}

template <typename T>
inline uint32_t append_layer_norm(Arena<T>& A, const Spans& x, const Spans& gamma, const Spans& beta, uint32_t rows,
                                  uint32_t C, double eps) {
    const uint32_t tail[2] = {rows, C};
    Appended ap = append_range(A, Op::layer_norm, {&x, &gamma, &beta}, tail, 2, size_t(rows) * C, 0, eps);
    layer_norm_forward(A.frame(), ap.rec, decode_operands(ap.args));
    return ap.out;
}
// Scratch: x gathered (rows * C).
template <typename T>
inline void layer_norm_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], C = o.tail[1];
    const T* xs = contiguous(A.values(), o.v[0], A.scratch(size_t(rows) * C).data());
    const T* g = A.values() + o.v[1].first(0);
    const T* b = A.values() + o.v[2].first(0);
    T* y = A.values() + r.out;
    for (uint32_t i = 0; i < rows; ++i) {
        const T* xr = xs + size_t(i) * C;
        T m, rs;
        row_stats(xr, C, static_cast<T>(r.imm), &m, &rs);
        for (uint32_t j = 0; j < C; ++j) y[size_t(i) * C + j] = (xr[j] - m) * rs * g[j] + b[j];
    }
}
// Scratch: [x gathered (rows * C) | gx (rows * C)].
template <typename T>
inline void layer_norm_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], C = o.tail[1];
    const size_t n = size_t(rows) * C;
    T* buf = A.scratch(2 * n).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    T* gx = buf + n;
    T* g = A.grads();
    const T* gy = g + r.out;
    const T* gam = A.values() + o.v[1].first(0);
    T* ggam = g + o.v[1].first(0);
    T* gbet = g + o.v[2].first(0);
    for (uint32_t i = 0; i < rows; ++i) {
        const T* xr = xs + size_t(i) * C;
        const T* gr = gy + size_t(i) * C;
        T m, rs;
        row_stats(xr, C, static_cast<T>(r.imm), &m, &rs);
        T mean_d = T(0), mean_dx = T(0);
        for (uint32_t j = 0; j < C; ++j) {
            const T xhat = (xr[j] - m) * rs;
            const T d = gr[j] * gam[j];
            mean_d += d;
            mean_dx += d * xhat;
            ggam[j] += gr[j] * xhat;
            gbet[j] += gr[j];
        }
        mean_d /= T(C);
        mean_dx /= T(C);
        for (uint32_t j = 0; j < C; ++j) {
            const T xhat = (xr[j] - m) * rs;
            gx[size_t(i) * C + j] = rs * (gr[j] * gam[j] - mean_d - xhat * mean_dx);
        }
    }
    scatter_add(g, o.v[0], gx);
}

}  // namespace bt
