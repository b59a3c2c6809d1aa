// Softmax per row, and cross-entropy with integer targets (log-softmax + NLL in one record).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "../kernels/vmath.hpp"

#include "../kernels/vec.hpp"
#include "common.hpp"

namespace bt {

// e^(x[j] - m) for j < n into y (x and y may be the same row): vectorized for float
// (kernels/vmath.hpp, within a float ulp), libm's exp for double.
template <typename T>
inline void exp_shifted(const T* x, T m, T* y, uint32_t n) {
    if constexpr (std::is_same_v<T, float>)
        for (uint32_t j = 0; j < n; ++j) y[j] = kernels::exp_float(x[j] - m);
    else
        for (uint32_t j = 0; j < n; ++j) y[j] = std::exp(x[j] - m);
}

template <typename T>
inline void softmax_row(const T* x, T* y, uint32_t n) {
    T m = -std::numeric_limits<T>::infinity();
    for (uint32_t j = 0; j < n; ++j) m = std::max(m, x[j]);
    exp_shifted(x, m, y, n);
    T s = T(0);
    for (uint32_t j = 0; j < n; ++j) s += y[j];  // in order, as before the exps were vectorized
    const T inv = T(1) / s;
    for (uint32_t j = 0; j < n; ++j) y[j] *= inv;
}

// ---------------------------------------------------------------- softmax. Tail: [rows, n].
template <typename T>
inline uint32_t append_softmax(Arena<T>& A, const Spans& x, uint32_t rows, uint32_t n) {
    const uint32_t tail[2] = {rows, n};
    Appended ap = append_range(A, Op::softmax, {&x}, tail, 2, size_t(rows) * n);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: x gathered (rows * n).
template <typename T>
inline void softmax_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], n = o.tail[1];
    const T* xs = contiguous(A.values(), o.v[0], A.scratch(size_t(rows) * n).data());
    T* y = A.values() + r.out;
    for_item_blocks(rows, 8.0 * n, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) softmax_row(xs + i * n, y + i * n, n);
    });
}
// Scratch: gx (rows * n).
template <typename T>
inline void softmax_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], n = o.tail[1];
    T* gx = A.scratch(size_t(rows) * n).data();
    const T* y = A.values() + r.out;
    const T* gy = A.grads() + r.out;
    for_item_blocks(rows, 4.0 * n, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
            const T* yr = y + i * n;
            const T* gr = gy + i * n;
            const T s = kernels::dot(gr, yr, n);
            for (uint32_t j = 0; j < n; ++j) gx[i * n + j] = yr[j] * (gr[j] - s);
        }
    });
    scatter_add(A.grads(), o.v[0], gx, A.first_write);
}

// ---------------------------------------------------------------- cross-entropy
// loss = mean over rows of (logsumexp(z_r) - z_r[t_r]). Tail: [rows, V, t_0 .. t_{rows-1}]; the
// targets live in the record, so a recorded program can replay it with new targets.
template <typename T>
inline T logsumexp(const T* z, uint32_t n) {
    T m = -std::numeric_limits<T>::infinity();
    for (uint32_t j = 0; j < n; ++j) m = std::max(m, z[j]);
    T s = T(0);
    T e[64];  // the exps a block at a time (vectorized), summed in order
    for (uint32_t j0 = 0; j0 < n; j0 += 64) {
        const uint32_t k = std::min<uint32_t>(64, n - j0);
        exp_shifted(z + j0, m, e, k);
        for (uint32_t j = 0; j < k; ++j) s += e[j];
    }
    return m + std::log(s);
}

// kLaneRows rows of logits at once, transposed (t[j * kLaneRows + k] is row k's logit j), so that
// each of a row's V steps runs across the rows in SIMD lanes: its max, then its exps and their
// sum, in the order logsumexp and softmax_row take them, so every row gets their bits. Row by
// row, the max and the sum are chains of V dependent operations, each step waiting for the last;
// in lanes, the rows' chains overlap.
inline constexpr size_t kLaneRows = 16;
inline constexpr uint32_t kLaneRowsMaxWidth = 256;  // t lives on the stack: 16 KiB in float
template <typename T>
struct LaneRows {
    T t[kLaneRowsMaxWidth * kLaneRows];
    T m[kLaneRows], s[kLaneRows];
    uint32_t V;
    LaneRows(const T* z, uint32_t V_) : V(V_) {
        for (uint32_t j = 0; j < V; ++j)
            for (size_t k = 0; k < kLaneRows; ++k) t[j * kLaneRows + k] = z[k * V + j];
        for (size_t k = 0; k < kLaneRows; ++k) m[k] = -std::numeric_limits<T>::infinity();
        for (uint32_t j = 0; j < V; ++j)
            for (size_t k = 0; k < kLaneRows; ++k) m[k] = std::max(m[k], t[j * kLaneRows + k]);
    }
    // t becomes e^(t - m) row by row; s, their sums in j order.
    void exps_and_sums() {
        for (size_t k = 0; k < kLaneRows; ++k) s[k] = T(0);
        for (uint32_t j = 0; j < V; ++j) {
            T* tj = t + size_t(j) * kLaneRows;
            if constexpr (std::is_same_v<T, float>)
                for (size_t k = 0; k < kLaneRows; ++k) tj[k] = kernels::exp_float(tj[k] - m[k]);
            else
                for (size_t k = 0; k < kLaneRows; ++k) tj[k] = std::exp(tj[k] - m[k]);
            for (size_t k = 0; k < kLaneRows; ++k) s[k] += tj[k];
        }
    }
};

template <typename T>
inline uint32_t append_cross_entropy(Arena<T>& A, const Spans& logits, uint32_t rows, uint32_t V,
                                     const uint32_t* targets) {
    const uint32_t dims[2] = {rows, V};
    Appended ap = append_range(A, Op::cross_entropy, {&logits}, dims, 2, 1, 0, 0.0, targets, rows);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: [logits gathered (rows * V) | each row's loss (rows)].
template <typename T>
inline void cross_entropy_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], V = o.tail[1];
    const uint32_t* targets = o.tail + 2;
    const size_t n = size_t(rows) * V;
    T* buf = A.scratch(n + rows).data();
    const T* z = contiguous(A.values(), o.v[0], buf);
    T* row_loss = buf + n;
    for_item_blocks(rows, 8.0 * V, [&](size_t b, size_t e) {
        size_t i = b;
        if (V <= kLaneRowsMaxWidth)
            for (; i + kLaneRows <= e; i += kLaneRows) {
                LaneRows<T> L(z + i * V, V);
                L.exps_and_sums();
                for (size_t k = 0; k < kLaneRows; ++k)
                    row_loss[i + k] = L.m[k] + std::log(L.s[k]) - z[(i + k) * V + targets[i + k]];
            }
        for (; i < e; ++i) row_loss[i] = logsumexp(z + i * V, V) - z[i * V + targets[i]];
    });
    T loss = T(0);
    for (uint32_t i = 0; i < rows; ++i) loss += row_loss[i];  // in row order, whatever the split
    A.values()[r.out] = loss / T(rows);
}
// Scratch: [logits gathered (rows * V) | gz (rows * V)].
template <typename T>
inline void cross_entropy_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], V = o.tail[1];
    const uint32_t* targets = o.tail + 2;
    const size_t n = size_t(rows) * V;
    T* buf = A.scratch(2 * n).data();
    const T* z = contiguous(A.values(), o.v[0], buf);
    T* gz = buf + n;
    const T d = A.grads()[r.out] / T(rows);
    for_item_blocks(rows, 8.0 * V, [&](size_t b, size_t e) {
        size_t i = b;
        if (V <= kLaneRowsMaxWidth)
            for (; i + kLaneRows <= e; i += kLaneRows) {
                LaneRows<T> L(z + i * V, V);
                L.exps_and_sums();
                for (size_t k = 0; k < kLaneRows; ++k) {
                    const T inv = T(1) / L.s[k];
                    T* g = gz + (i + k) * V;
                    for (uint32_t j = 0; j < V; ++j) g[j] = L.t[j * kLaneRows + k] * inv * d;
                    g[targets[i + k]] -= d;
                }
            }
        for (; i < e; ++i) {
            softmax_row(z + i * V, gz + i * V, V);
            for (uint32_t j = 0; j < V; ++j) gz[i * V + j] *= d;
            gz[i * V + targets[i]] -= d;
        }
    });
    scatter_add(A.grads(), o.v[0], gz, A.first_write);
}

}  // namespace bt
