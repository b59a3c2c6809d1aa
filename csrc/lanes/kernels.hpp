// One record applied across a block of B samples at once (structure of arrays: slot s of the
// frame holds the B lanes' values at v[s * B .. s * B + B), their grads likewise in g).
//
// Every kernel is the one-sample kernel's expression from ops.hpp / reduce.hpp, written as a
// loop over the lanes that the compiler vectorizes (`omp simd`, -fopenmp-simd): each lane does
// the very operations the one-sample replay does, in the same order, so each lane's numbers are
// bitwise those of a one-sample replay of its sample. Library calls (exp, tanh, ...) have no
// vector variants without -ffast-math, so such lanes call the scalar function one after another:
// the same bits again.
//
// The one-sample sweep skips a record whose outputs' grads are all zero; here that test is made
// per lane, and a lane whose output grads are zero keeps its argument grads as they were (adding
// 0 * inf would give nan, adding +0 to -0 would flip its sign).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backward.hpp"

#if defined(__GNUC__) || defined(__clang__)
#define BT_LANES_SIMD _Pragma("omp simd")
#define BT_LANES_RESTRICT __restrict__
#else
#define BT_LANES_SIMD
#define BT_LANES_RESTRICT
#endif

namespace bt::lanes {

// The vector width of the target this translation unit is compiled for, in elements of T. The
// extension is built once per ISA level (each with its own -march) and the level is chosen at
// import, so the width follows the CPU the module runs on.
template <typename T>
constexpr size_t vector_width() {
#if defined(__AVX512F__)
    return 64 / sizeof(T);
#elif defined(__AVX2__)
    return 32 / sizeof(T);
#elif defined(__ARM_NEON) || defined(__SSE2__)
    return 16 / sizeof(T);
#else
    return 4;  // a portable width: plain loops the compiler may still unroll
#endif
}

// Whether the lanes can run record r: the scalar ops (unary, with an immediate, binary) and the
// var-arity reductions. Range records run one sample at a time.
inline bool lane_op(Op op) {
    const OpKind k = op_info(op).kind;
    return k != OpKind::range;
}

// Per-block scratch of the var-arity kernels (reduce_mul's suffix products, n x B).
template <typename T>
struct LaneScratch {
    std::vector<T> buf;
    T* get(size_t n) {
        if (buf.size() < n) buf.resize(n);
        return buf.data();
    }
};

// The running sums' multiply-adds go through madd (reduce.hpp), as in the one-sample kernel.
template <size_t B, typename T>
void mean_and_mean_squares_lanes(const T* v, const uint32_t* idx, size_t n, T* y, T* s) {
    alignas(64) T q[B];
    BT_LANES_SIMD for (size_t l = 0; l < B; ++l) q[l] = T(0);
    for (size_t i = 0; i < n; ++i) {
        const T* xi = v + size_t(idx[i]) * B;
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
            s[l] += xi[l];
            q[l] = madd<T>(xi[l], xi[l], q[l]);
        }
    }
    T* BT_LANES_RESTRICT y1 = y + B;
    BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
        y[l] = s[l] / T(n);
        y1[l] = q[l] / T(n);
    }
}

template <size_t B, typename T>
inline void nary_forward_lanes(Op op, T* v, const uint32_t* idx, size_t n, uint32_t out) {
    T* BT_LANES_RESTRICT y = v + size_t(out) * B;
    auto x = [&](size_t i) -> const T* { return v + size_t(idx[i]) * B; };
    alignas(64) T s[B];
    BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = T(0);
    switch (op) {
        case Op::reduce_sum:
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] += xi[l];
            }
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l];
            return;
        case Op::reduce_sub: {
            const T* x0 = x(0);
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = x0[l];
            for (size_t i = 1; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] -= xi[l];
            }
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l];
            return;
        }
        case Op::reduce_mul:
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = T(1);
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] *= xi[l];
            }
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l];
            return;
        case Op::reduce_mean:
        case Op::reduce_negative_mean: {
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] += xi[l];
            }
            const bool mean = op == Op::reduce_mean;
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = (mean ? s[l] : -s[l]) / T(n);
            return;
        }
        case Op::reduce_sum_of_squares:
        case Op::reduce_mean_squares: {
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = madd<T>(xi[l], xi[l], s[l]);
            }
            if (op == Op::reduce_sum_of_squares) {
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l];
            } else {
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l] / T(n);
            }
            return;
        }
        case Op::inner_product:
        case Op::inner_product_with_bias: {
            const size_t m = n / 2;
            for (size_t i = 0; i < m; ++i) {
                const T *a = x(i), *b = x(m + i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = madd<T>(a[l], b[l], s[l]);
            }
            if (op == Op::inner_product) {
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l];
            } else {
                const T* c = x(2 * m);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = s[l] + c[l];
            }
            return;
        }
        case Op::variance:
        case Op::variance_biased: {
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] += xi[l];
            }
            alignas(64) T mean[B], ss[B];
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
                mean[l] = s[l] / T(n);
                ss[l] = T(0);
            }
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
                    const T d = xi[l] - mean[l];
                    ss[l] = madd<T>(d, d, ss[l]);
                }
            }
            const T d = T(op == Op::variance ? n - 1 : n);
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) y[l] = ss[l] / d;
            return;
        }
        case Op::mean_and_mean_squares: mean_and_mean_squares_lanes<B>(v, idx, n, y, s); return;
        default: return;
    }
}

// gr[idx[i]] += d[l] in the lanes where live (the lanes' one-sample update, as a select).
template <size_t B, typename T>
[[gnu::always_inline]] inline void add_where(T* gi, const T* live_g, const T* d) {
    BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gi[l] = live_g[l] != T(0) ? gi[l] + d[l] : gi[l];
}

template <size_t B, typename T>
inline void nary_backward_lanes(Op op, const T* v, T* gr, const uint32_t* idx, size_t n, uint32_t out,
                                LaneScratch<T>& scratch) {
    const T* g0 = gr + size_t(out) * B;
    auto x = [&](size_t i) -> const T* { return v + size_t(idx[i]) * B; };
    auto gx = [&](size_t i) -> T* { return gr + size_t(idx[i]) * B; };
    alignas(64) T d[B], live[B];
    BT_LANES_SIMD for (size_t l = 0; l < B; ++l) live[l] = g0[l];
    switch (op) {
        case Op::reduce_sum:
            for (size_t i = 0; i < n; ++i) add_where<B>(gx(i), live, g0);
            return;
        case Op::reduce_sub: {
            add_where<B>(gx(0), live, g0);
            for (size_t i = 1; i < n; ++i) {
                T* gi = gx(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gi[l] = live[l] != T(0) ? gi[l] - g0[l] : gi[l];
            }
            return;
        }
        case Op::reduce_mul: {
            T* suf = scratch.get(n * B);
            alignas(64) T suffix[B], prefix[B];
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) suffix[l] = prefix[l] = T(1);
            for (size_t i = n; i-- > 0;) {
                const T* xi = x(i);
                T* si = suf + i * B;
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
                    si[l] = suffix[l];
                    suffix[l] *= xi[l];
                }
            }
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                const T* si = suf + i * B;
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) d[l] = g0[l] * (prefix[l] * si[l]);
                add_where<B>(gx(i), live, d);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) prefix[l] *= xi[l];
            }
            return;
        }
        case Op::reduce_mean:
        case Op::reduce_negative_mean: {
            const bool mean = op == Op::reduce_mean;
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) d[l] = (mean ? g0[l] : -g0[l]) / T(n);
            for (size_t i = 0; i < n; ++i) add_where<B>(gx(i), live, d);
            return;
        }
        case Op::reduce_sum_of_squares:
        case Op::reduce_mean_squares: {
            alignas(64) T c[B];
            if (op == Op::reduce_sum_of_squares) {
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) c[l] = T(2) * g0[l];
            } else {
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) c[l] = T(2) * g0[l] / T(n);
            }
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                T* gi = gx(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gi[l] = live[l] != T(0) ? gi[l] + c[l] * xi[l] : gi[l];
            }
            return;
        }
        case Op::inner_product:
        case Op::inner_product_with_bias: {
            const size_t m = n / 2;
            for (size_t i = 0; i < m; ++i) {
                // x and w may be one slot: the one-sample kernel reads both values first, then
                // adds into x's grad, then into w's; values never change in a sweep, so two
                // passes over the lanes in that order do the same.
                const T *a = x(i), *b = x(m + i);
                T *ga = gx(i), *gb = gx(m + i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) ga[l] = live[l] != T(0) ? ga[l] + g0[l] * b[l] : ga[l];
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gb[l] = live[l] != T(0) ? gb[l] + g0[l] * a[l] : gb[l];
            }
            if (op == Op::inner_product_with_bias) add_where<B>(gx(2 * m), live, g0);
            return;
        }
        case Op::variance:
        case Op::variance_biased: {
            alignas(64) T s[B], mean[B];
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] = T(0);
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) s[l] += xi[l];
            }
            const T den = T(op == Op::variance ? n - 1 : n);
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
                mean[l] = s[l] / T(n);
                d[l] = T(2) * g0[l] / den;
            }
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                T* gi = gx(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gi[l] =
                    live[l] != T(0) ? gi[l] + d[l] * (xi[l] - mean[l]) : gi[l];
            }
            return;
        }
        case Op::mean_and_mean_squares: {
            const T* g1 = g0 + B;
            alignas(64) T dq[B];
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
                // live when either output carries a gradient
                live[l] = (g0[l] != T(0) || g1[l] != T(0)) ? T(1) : T(0);
                d[l] = g0[l] / T(n);
                dq[l] = T(2) * g1[l] / T(n);
            }
            for (size_t i = 0; i < n; ++i) {
                const T* xi = x(i);
                T* gi = gx(i);
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gi[l] =
                    live[l] != T(0) ? gi[l] + (d[l] + dq[l] * xi[l]) : gi[l];
            }
            return;
        }
        default: return;
    }
}

// pow_imm's branches on the exponent c (ops.hpp), taken once for the block instead of once per
// lane: f receives the branch's expression, the same one pow_imm evaluates, so the bits agree
// and the lane loop has no branch to keep it from vectorizing.
template <typename T, typename F>
[[gnu::always_inline]] inline void with_pow_imm(T c, F&& f) {
    if (c == T(2))
        f([](T x) { return x * x; });
    else if (c == T(3))
        f([](T x) { return x * x * x; });
    else if (c == T(1))
        f([](T x) { return x; });
    else if (c == T(0))
        f([](T) { return T(1); });
    else if (c == T(-1))
        f([](T x) { return T(1) / x; });
    else if (c == T(0.5))
        f([](T x) { return std::sqrt(x); });
    else
        f([c](T x) { return std::pow(x, c); });
}

template <size_t B, typename T>
inline void pow_const_forward_lanes(T* v, const Record& r) {
    const T* BT_LANES_RESTRICT xs = v + size_t(r.a) * B;
    T* BT_LANES_RESTRICT ys = v + size_t(r.out) * B;
    with_pow_imm(static_cast<T>(r.imm), [&](auto p) { BT_LANES_SIMD for (size_t l = 0; l < B; ++l) ys[l] = p(xs[l]); });
}

// dpow_imm(x, c) = c == 0 ? 0 : c * pow_imm(x, c - 1), its branches likewise taken per block.
template <size_t B, typename T>
inline void pow_const_backward_lanes(const T* v, T* g, const Record& r, bool wa) {
    const T* xs = v + size_t(r.a) * B;
    const T* BT_LANES_RESTRICT go = g + size_t(r.out) * B;
    T* BT_LANES_RESTRICT ga = g + size_t(r.a) * B;
    const T c = static_cast<T>(r.imm);
    if (c == T(0)) {
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
            const T base = wa ? T(0) : ga[l];
            ga[l] = go[l] != T(0) ? base + go[l] * T(0) : base;
        }
        return;
    }
    with_pow_imm(c - T(1), [&](auto p) {
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {
            const T base = wa ? T(0) : ga[l];
            ga[l] = go[l] != T(0) ? base + go[l] * (c * p(xs[l])) : base;
        }
    });
}

// The forward of record r across the B lanes (r is a lane_op).
template <size_t B, typename T>
[[gnu::always_inline]] inline void forward_lanes(T* v, const Record& r, const uint32_t* args) {
    if (r.op == Op::pow_const) return pow_const_forward_lanes<B>(v, r);
    switch (r.op) {
// One body for the unary ops with and without an immediate (c is 0 and unused for the former).
#define BT_LFWD_UI(name, fwd, ...)                           \
    case Op::name: {                                         \
        const T* BT_LANES_RESTRICT xs = v + size_t(r.a) * B; \
        T* BT_LANES_RESTRICT ys = v + size_t(r.out) * B;     \
        const T c = static_cast<T>(r.imm);                   \
        (void)c;                                             \
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {       \
            const T x = xs[l];                               \
            ys[l] = (fwd);                                   \
        }                                                    \
        return;                                              \
    }
        BT_UNARY_OPS(BT_LFWD_UI)
        BT_UNARY_IMM_OPS(BT_LFWD_UI)
#undef BT_LFWD_UI
#define BT_LFWD_B(name, fwd, ...)                        \
    case Op::name: {                                     \
        const T* as = v + size_t(r.a) * B;               \
        const T* bs = v + size_t(r.b) * B;               \
        T* BT_LANES_RESTRICT ys = v + size_t(r.out) * B; \
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {   \
            const T a = as[l], b = bs[l];                \
            ys[l] = (fwd);                               \
        }                                                \
        return;                                          \
    }
        BT_BINARY_OPS(BT_LFWD_B)
#undef BT_LFWD_B
#define BT_LFWD_N(name) case Op::name:
        BT_NARY_OPS(BT_LFWD_N)
#undef BT_LFWD_N
        nary_forward_lanes<B>(r.op, v, args + r.a, r.b, r.out);
        return;
        default: return;  // leaf; range records never reach the lanes
    }
}

// The reverse step of record r across the B lanes: each lane whose output grad is nonzero adds
// the record's contribution to its arguments' grads, as the one-sample sweep does.
// first (scalar records only): bit 0, this record is the sweep's first to reach a's grad, bit 1
// b's; it then writes 0 + its contribution there (what adding into the zeroed grad gives, bit for
// bit), or 0 in a lane it does not reach, so those grads need no zeroing before the sweep.
template <size_t B, typename T>
[[gnu::always_inline]] inline void backward_lanes(const T* v, T* g, const Record& r, const uint32_t* args,
                                                  LaneScratch<T>& scratch, uint8_t first = 0) {
    const bool wa = (first & 1) != 0, wb = (first & 2) != 0;
    (void)wb;
    if (r.op == Op::pow_const) return pow_const_backward_lanes<B>(v, g, r, wa);
    switch (r.op) {
// One body for the unary ops with and without an immediate (c is 0 and unused for the former).
#define BT_LBWD_UI(name, fwd, dfdx)                               \
    case Op::name: {                                              \
        const T* xs = v + size_t(r.a) * B;                        \
        const T* ys = v + size_t(r.out) * B;                      \
        const T* BT_LANES_RESTRICT go = g + size_t(r.out) * B;    \
        T* BT_LANES_RESTRICT ga = g + size_t(r.a) * B;            \
        const T c = static_cast<T>(r.imm);                        \
        (void)c;                                                  \
        BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {            \
            const T x = xs[l], y = ys[l];                         \
            (void)x;                                              \
            (void)y;                                              \
            const T base = wa ? T(0) : ga[l];                     \
            ga[l] = go[l] != T(0) ? base + go[l] * (dfdx) : base; \
        }                                                         \
        return;                                                   \
    }
        BT_UNARY_OPS(BT_LBWD_UI)
        BT_UNARY_IMM_OPS(BT_LBWD_UI)
#undef BT_LBWD_UI
        // a and b may be one slot (x * x): then both contributions go into it, a's first
#define BT_LBWD_B(name, fwd, dfda, dfdb)                             \
    case Op::name: {                                                 \
        const T* as = v + size_t(r.a) * B;                           \
        const T* bs = v + size_t(r.b) * B;                           \
        const T* ys = v + size_t(r.out) * B;                         \
        const T* BT_LANES_RESTRICT go = g + size_t(r.out) * B;       \
        if (r.a == r.b) {                                            \
            T* BT_LANES_RESTRICT ga = g + size_t(r.a) * B;           \
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {           \
                const T a = as[l], b = bs[l], y = ys[l], gg = go[l]; \
                (void)a;                                             \
                (void)b;                                             \
                (void)y;                                             \
                T t = wa ? T(0) : ga[l];                             \
                t = gg != T(0) ? t + gg * (dfda) : t;                \
                t = gg != T(0) ? t + gg * (dfdb) : t;                \
                ga[l] = t;                                           \
            }                                                        \
        } else {                                                     \
            T* BT_LANES_RESTRICT ga = g + size_t(r.a) * B;           \
            T* BT_LANES_RESTRICT gb = g + size_t(r.b) * B;           \
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) {           \
                const T a = as[l], b = bs[l], y = ys[l], gg = go[l]; \
                (void)a;                                             \
                (void)b;                                             \
                (void)y;                                             \
                const T ba = wa ? T(0) : ga[l];                      \
                const T bb = wb ? T(0) : gb[l];                      \
                ga[l] = gg != T(0) ? ba + gg * (dfda) : ba;          \
                gb[l] = gg != T(0) ? bb + gg * (dfdb) : bb;          \
            }                                                        \
        }                                                            \
        return;                                                      \
    }
        BT_BINARY_OPS(BT_LBWD_B)
#undef BT_LBWD_B
#define BT_LBWD_N(name) case Op::name:
        BT_NARY_OPS(BT_LBWD_N)
#undef BT_LBWD_N
        nary_backward_lanes<B>(r.op, v, g, args + r.a, r.b, r.out, scratch);
        return;
        default: return;
    }
}

}  // namespace bt::lanes
