// Reductions of a vector to one node: sum (times a scale: vsum, vmean) and dot.
#pragma once
#include "../kernels/vec.hpp"
#include "common.hpp"

namespace bt {

template <typename T>
inline uint32_t append_sum(Arena<T>& A, const Spans& x, double scale) {
    Appended ap = append_range(A, Op::sum_range, {&x}, nullptr, 0, 1, 0, scale);
    forward_appended(A, ap);
    return ap.out;
}
template <typename T>
inline void sum_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    T s = T(0);
    for (uint32_t i = 0; i < o.v[0].n; ++i) s += kernels::sum(A.values() + o.v[0].first(i), o.v[0].len(i));
    A.values()[r.out] = s * static_cast<T>(r.imm);
}
template <typename T>
inline void sum_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const T d = A.grads()[r.out] * static_cast<T>(r.imm);
    for (uint32_t s = 0; s < o.v[0].n; ++s) {
        T* p = A.grads() + o.v[0].first(s);
        for (uint32_t i = 0; i < o.v[0].len(s); ++i) p[i] += d;
    }
}

template <typename T>
inline uint32_t append_dot(Arena<T>& A, const Spans& x, const Spans& w) {
    Appended ap = append_range(A, Op::dot_range, {&x, &w}, nullptr, 0, 1);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: [x gathered (n) | w gathered (n)].
template <typename T>
inline void dot_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = o.v[0].total();
    T* buf = A.scratch(2 * n).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    const T* ws = contiguous(A.values(), o.v[1], buf + n);
    A.values()[r.out] = kernels::dot(xs, ws, n);
}
// Scratch: [x gathered (n) | w gathered (n) | gx (n) | gw (n)].
template <typename T>
inline void dot_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = o.v[0].total();
    T* buf = A.scratch(4 * n).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    const T* ws = contiguous(A.values(), o.v[1], buf + n);
    T* gx = buf + 2 * n;
    T* gw = buf + 3 * n;
    const T g = A.grads()[r.out];
    for (size_t i = 0; i < n; ++i) {
        gx[i] = g * ws[i];
        gw[i] = g * xs[i];
    }
    scatter_add(A.grads(), o.v[0], gx);
    scatter_add(A.grads(), o.v[1], gw);
}

}  // namespace bt
