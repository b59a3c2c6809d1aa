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
    forward_appended(A, ap);
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
    for_item_blocks(rows, 8.0 * C, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
            const T* xr = xs + i * C;
            T m, rs;
            row_stats(xr, C, static_cast<T>(r.imm), &m, &rs);
            for (uint32_t j = 0; j < C; ++j) y[i * C + j] = (xr[j] - m) * rs * g[j] + b[j];
        }
    });
}
// Scratch: [x gathered (rows * C) | gx (rows * C) | mean and rstd of each row (2 * rows)].
// Rows split across threads for gx; gamma's and beta's grads sum over rows, so they split by
// column instead, each column adding its rows in order, as one thread would.
template <typename T>
inline void layer_norm_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], C = o.tail[1];
    const size_t n = size_t(rows) * C;
    T* buf = A.scratch(2 * n + 2 * size_t(rows)).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    T* gx = buf + n;
    T* stats = buf + 2 * n;
    T* g = A.grads();
    const T* gy = g + r.out;
    const T* gam = A.values() + o.v[1].first(0);
    T* ggam = g + o.v[1].first(0);
    T* gbet = g + o.v[2].first(0);
    for_item_blocks(rows, 12.0 * C, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
            const T* xr = xs + i * C;
            const T* gr = gy + i * C;
            T m, rs;
            row_stats(xr, C, static_cast<T>(r.imm), &m, &rs);
            stats[2 * i] = m;
            stats[2 * i + 1] = rs;
            T mean_d = T(0), mean_dx = T(0);
            for (uint32_t j = 0; j < C; ++j) {
                const T xhat = (xr[j] - m) * rs;
                const T d = gr[j] * gam[j];
                mean_d += d;
                mean_dx += d * xhat;
            }
            mean_d /= T(C);
            mean_dx /= T(C);
            for (uint32_t j = 0; j < C; ++j) {
                const T xhat = (xr[j] - m) * rs;
                gx[i * C + j] = rs * (gr[j] * gam[j] - mean_d - xhat * mean_dx);
            }
        }
    });
    for_item_blocks(
        C, 4.0 * rows,
        [&](size_t b, size_t e) {
            for (uint32_t i = 0; i < rows; ++i) {
                const T* xr = xs + size_t(i) * C;
                const T* gr = gy + size_t(i) * C;
                const T m = stats[2 * i], rs = stats[2 * i + 1];
                for (size_t j = b; j < e; ++j) {
                    ggam[j] += gr[j] * ((xr[j] - m) * rs);
                    gbet[j] += gr[j];
                }
            }
        },
        64);
    scatter_add(g, o.v[0], gx);
}

}  // namespace bt
