// Scaled dot-product attention: one head (attention), or all heads of a fused q/k/v block over
// S stacked sequences (multi_head_attention). The attention weights are outputs too: they can
// be drawn as heatmaps, and their grads flow like any other node's.
#pragma once
#include <type_traits>

#include "../kernels/simd.hpp"
#include "../kernels/vec.hpp"
#include "common.hpp"
#include "softmax.hpp"

namespace bt {

// Products along a head's hs values. A head is narrow (a small transformer's may be 4 wide), so for the
// common widths HS is a compile-time constant and the loops unroll into a few fused
// multiply-adds; HS = 0 takes the vectorized kernels at any width.
template <int HS, typename T>
BT_ALWAYS_INLINE T head_dot(const T* a, const T* b, uint32_t hs) {
    if constexpr (HS == 0) {
        return kernels::dot(a, b, hs);
    } else {
        T s = T(0);
        for (int c = 0; c < HS; ++c) s += a[c] * b[c];
        return s;
    }
}
template <int HS, typename T>
BT_ALWAYS_INLINE void head_axpy(T* y, T alpha, const T* x, uint32_t hs) {
    if constexpr (HS == 0) {
        kernels::axpy(y, alpha, x, hs);
    } else {
        for (int c = 0; c < HS; ++c) y[c] += alpha * x[c];
    }
}

// Calls f(integral_constant<int, HS>) with HS = hs for the widths that get unrolled code, else 0.
template <class F>
inline void with_head_size(uint32_t hs, F&& f) {
    switch (hs) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 4: return f(std::integral_constant<int, 4>{});
        case 8: return f(std::integral_constant<int, 8>{});
        case 16: return f(std::integral_constant<int, 16>{});
        default: return f(std::integral_constant<int, 0>{});
    }
}

// One head over row-strided q/k/v: row i of Q is Q + i * ld (so the heads of a fused (T x 3C)
// block are read in place). O is written with stride ldo; P is T x T.
template <int HS = 0, typename T>
inline void attn_head_fwd(const T* Q, const T* K, const T* Vv, size_t ld, T* O, size_t ldo, T* P, uint32_t Tn,
                          uint32_t hs, bool causal, T sc) {
    for (uint32_t i = 0; i < Tn; ++i) {
        const uint32_t nj = causal ? i + 1 : Tn;
        T* Pi = P + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) Pi[j] = sc * head_dot<HS>(Q + i * ld, K + j * ld, hs);
        softmax_row(Pi, Pi, nj);
        for (uint32_t j = nj; j < Tn; ++j) Pi[j] = T(0);
        T* Oi = O + i * ldo;
        std::fill(Oi, Oi + hs, T(0));
        for (uint32_t j = 0; j < nj; ++j) head_axpy<HS>(Oi, Pi[j], Vv + j * ld, hs);
    }
}

// Backward of one head. gO has stride ldo, gPext (grads of the weights as nodes) is T x T;
// gQ/gK/gV (stride ld) are accumulated. gP, gS: T x T scratch.
template <int HS = 0, typename T>
inline void attn_head_bwd(const T* Q, const T* K, const T* Vv, size_t ld, const T* P, const T* gO, size_t ldo,
                          const T* gPext, T* gQ, T* gK, T* gV, T* gP, T* gS, uint32_t Tn, uint32_t hs, bool causal,
                          T sc) {
    for (uint32_t i = 0; i < Tn; ++i) {
        const uint32_t nj = causal ? i + 1 : Tn;
        const T* Pi = P + size_t(i) * Tn;
        const T* gOi = gO + i * ldo;
        T* gPi = gP + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) {
            gPi[j] = head_dot<HS>(gOi, Vv + j * ld, hs) + gPext[size_t(i) * Tn + j];
            head_axpy<HS>(gV + j * ld, Pi[j], gOi, hs);
        }
        const T s = kernels::dot(gPi, Pi, nj);
        T* gSi = gS + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) gSi[j] = Pi[j] * (gPi[j] - s) * sc;
        for (uint32_t j = 0; j < nj; ++j) {
            head_axpy<HS>(gQ + i * ld, gSi[j], K + j * ld, hs);
            head_axpy<HS>(gK + j * ld, gSi[j], Q + i * ld, hs);
        }
    }
}

// ---------------------------------------------------------------- one head
// q, k, v are T x hs each. Outputs: T x hs (the head's output), then the T x T weights P.
// Tail: [T, hs, causal]; imm: the scale.
template <typename T>
inline uint32_t append_attention(Arena<T>& A, const Spans& q, const Spans& kk, const Spans& v, uint32_t Tn, uint32_t hs,
                                 bool causal, double scale) {
    const uint32_t tail[3] = {Tn, hs, causal ? 1u : 0u};
    const size_t nout = size_t(Tn) * hs + size_t(Tn) * Tn;
    Appended ap = append_range(A, Op::attention, {&q, &kk, &v}, tail, 3, nout, 0, scale);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: [q | k | v gathered (T * hs each)].
template <typename T>
inline void attention_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t Tn = o.tail[0], hs = o.tail[1];
    const bool causal = o.tail[2] != 0;
    const size_t th = size_t(Tn) * hs;
    T* scratch = A.scratch(3 * th).data();
    const T* Q = contiguous(A.values(), o.v[0], scratch);
    const T* K = contiguous(A.values(), o.v[1], scratch + th);
    const T* Vv = contiguous(A.values(), o.v[2], scratch + 2 * th);
    T* O = A.values() + r.out;
    with_head_size(hs, [&](auto w) {
        attn_head_fwd<decltype(w)::value>(Q, K, Vv, hs, O, hs, O + th, Tn, hs, causal, static_cast<T>(r.imm));
    });
}
// Scratch: [q | k | v gathered (T * hs each) | gq | gk | gv (T * hs each) | gP (T * T) | gS (T * T)].
template <typename T>
inline void attention_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t Tn = o.tail[0], hs = o.tail[1];
    const bool causal = o.tail[2] != 0;
    const size_t th = size_t(Tn) * hs, tt = size_t(Tn) * Tn;
    T* buf = A.scratch(6 * th + 2 * tt).data();
    const T* Q = contiguous(A.values(), o.v[0], buf);
    const T* K = contiguous(A.values(), o.v[1], buf + th);
    const T* Vv = contiguous(A.values(), o.v[2], buf + 2 * th);
    T* gQ = buf + 3 * th;
    std::fill(gQ, gQ + 3 * th, T(0));
    const T* y = A.values() + r.out;
    const T* gy = A.grads() + r.out;
    with_head_size(hs, [&](auto w) {
        attn_head_bwd<decltype(w)::value>(Q, K, Vv, hs, y + th, gy, hs, gy + th, gQ, gQ + th, gQ + 2 * th, buf + 6 * th,
                                          buf + 6 * th + tt, Tn, hs, causal, static_cast<T>(r.imm));
    });
    scatter_add(A.grads(), o.v[0], gQ);
    scatter_add(A.grads(), o.v[1], gQ + th);
    scatter_add(A.grads(), o.v[2], gQ + 2 * th);
}

// ---------------------------------------------------------------- all heads of a fused block
// qkv: (S*T) x 3C, columns: queries of heads 0..H-1, keys, values; attention stays within each
// of the S stacked sequences. Outputs: (S*T) x C (the heads side by side, i.e. already
// concatenated), then per sequence the H weight matrices (S x H x T x T).
// Tail: [T, C, H, causal, S]; imm: the scale.
template <typename T>
inline uint32_t append_mha(Arena<T>& A, const Spans& qkv, uint32_t Tn, uint32_t C, uint32_t H, bool causal,
                           double scale, uint32_t S) {
    const uint32_t tail[5] = {Tn, C, H, causal ? 1u : 0u, S};
    const size_t nout = size_t(S) * (size_t(Tn) * C + size_t(H) * Tn * Tn);
    Appended ap = append_range(A, Op::multi_head_attention, {&qkv}, tail, 5, nout, 0, scale);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: qkv gathered (S * T * 3C).
template <typename T>
inline void mha_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t Tn = o.tail[0], C = o.tail[1], H = o.tail[2], S = o.tail[4];
    const bool causal = o.tail[3] != 0;
    const size_t tc = size_t(Tn) * C, tt = size_t(Tn) * Tn;
    const T* X0 = contiguous(A.values(), o.v[0], A.scratch(3 * tc * S).data());
    const uint32_t hs = C / H;
    T* O0 = A.values() + r.out;
    T* P0 = O0 + S * tc;
    // Each (sequence, head) pair writes its own columns of O and its own weight matrix.
    for_item_blocks(size_t(S) * H, 4.0 * tt * hs, [&](size_t b, size_t e) {
        with_head_size(hs, [&](auto w) {
            for (size_t u = b; u < e; ++u) {
                const uint32_t sq = uint32_t(u / H), h = uint32_t(u % H);
                const T* X = X0 + sq * 3 * tc;
                attn_head_fwd<decltype(w)::value>(X + h * hs, X + C + h * hs, X + 2 * C + h * hs, 3 * size_t(C),
                                                  O0 + sq * tc + h * hs, C, P0 + (size_t(sq) * H + h) * tt, Tn, hs,
                                                  causal, static_cast<T>(r.imm));
            }
        });
    });
}
// Scratch: [qkv gathered (S * T * 3C) | its grad (S * T * 3C) | per task: gP (T * T) | gS (T * T)].
template <typename T>
inline void mha_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t Tn = o.tail[0], C = o.tail[1], H = o.tail[2], S = o.tail[4];
    const bool causal = o.tail[3] != 0;
    const uint32_t hs = C / H;
    const size_t tc = size_t(Tn) * C, tt = size_t(Tn) * Tn, all = 3 * tc * S;
    const size_t units = size_t(S) * H;
    const size_t tasks = threads::tasks_for(double(units) * 8.0 * tt * hs, kParallelItemWork, units);
    T* buf = A.scratch(2 * all + 2 * tt * tasks).data();
    const T* X0 = contiguous(A.values(), o.v[0], buf);
    T* gX0 = buf + all;
    std::fill(gX0, gX0 + all, T(0));
    const T* y = A.values() + r.out;
    const T* gy = A.grads() + r.out;
    // Each (sequence, head) pair adds only into its own columns of its sequence's rows of gX.
    auto run = [&](size_t t) {
        T* gP = buf + 2 * all + 2 * tt * t;
        // plain locals: the lambda below captures them (see range/common.hpp's scatter_first)
        const std::pair<size_t, size_t> be = threads::split(units, tasks, t);
        const size_t b = be.first, e = be.second;
        with_head_size(hs, [&](auto w) {
            for (size_t u = b; u < e; ++u) {
                const uint32_t sq = uint32_t(u / H), h = uint32_t(u % H);
                const T* X = X0 + sq * 3 * tc;
                T* gX = gX0 + sq * 3 * tc;
                const T* gO = gy + sq * tc;
                const size_t p = S * tc + (size_t(sq) * H + h) * tt;
                attn_head_bwd<decltype(w)::value>(X + h * hs, X + C + h * hs, X + 2 * C + h * hs, 3 * size_t(C), y + p,
                                                  gO + h * hs, C, gy + p, gX + h * hs, gX + C + h * hs,
                                                  gX + 2 * C + h * hs, gP, gP + tt, Tn, hs, causal,
                                                  static_cast<T>(r.imm));
            }
        });
    };
    if (tasks <= 1)
        run(0);
    else
        threads::parallel_tasks(tasks, run);
    scatter_add(A.grads(), o.v[0], gX0);
}

}  // namespace bt
