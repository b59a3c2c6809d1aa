// Range ops: one record writes a span of output slots from vector operands.
//
// A vector operand is a list of spans (first slot, length) over the arena, so a concatenation,
// a slice or an embedding lookup is a new span list and copies no values. In `args` a range
// record stores
//   [k] then k times [nspans, first0, len0, first1, len1, ...] then an op-specific tail
// which ArenaBase::record_args() decodes for every range op alike. Outputs are always one
// contiguous span. Inputs that are not contiguous are gathered into scratch space (O(n), small
// next to the O(n * m) kernels), so every kernel runs over contiguous memory.
//
// Each op: an append function (forward) and a case in range_backward, side by side.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "arena.hpp"
#include "kernels.hpp"
#include "kernels/gemm.hpp"
#include "ops.hpp"

namespace bt {

using Span = ArenaBase::Span;
using Spans = std::vector<Span>;

// A decoded view of one vector operand inside a record's args.
struct SpanList {
    const uint32_t* p = nullptr;  // points at first0
    uint32_t n = 0;               // number of spans
    uint32_t first(uint32_t s) const { return p[2 * s]; }
    uint32_t len(uint32_t s) const { return p[2 * s + 1]; }
    uint32_t total() const {
        uint32_t t = 0;
        for (uint32_t s = 0; s < n; ++s) t += len(s);
        return t;
    }
};

inline uint32_t total_len(const Spans& s) {
    uint32_t t = 0;
    for (const Span& x : s) t += x.second;
    return t;
}

// Reads up to k operands starting at p; returns a pointer to the op-specific tail.
inline const uint32_t* decode_operands(const uint32_t* p, SpanList* out, uint32_t k) {
    uint32_t kk = *p++;
    for (uint32_t v = 0; v < kk; ++v) {
        uint32_t n = *p++;
        if (v < k) {
            out[v].n = n;
            out[v].p = p;
        }
        p += 2 * n;
    }
    return p;
}

// ---- moving values between span lists and contiguous buffers ----
template <typename T>
inline void gather(const T* src, const SpanList& s, T* dst) {
    for (uint32_t i = 0; i < s.n; ++i) {
        std::copy(src + s.first(i), src + s.first(i) + s.len(i), dst);
        dst += s.len(i);
    }
}
template <typename T>
inline void scatter_add(T* dst, const SpanList& s, const T* src) {
    for (uint32_t i = 0; i < s.n; ++i) {
        T* d = dst + s.first(i);
        for (uint32_t j = 0; j < s.len(i); ++j) d[j] += src[j];
        src += s.len(i);
    }
}
// Contiguous pointer to an operand: the slots themselves if it is one span, else a gathered copy.
template <typename T>
inline const T* contiguous(const T* base, const SpanList& s, T* scratch) {
    if (s.n == 1) return base + s.first(0);
    gather(base, s, scratch);
    return scratch;
}

// Appends a range record: operands, tail, nout fresh output slots. All-or-nothing on capacity.
template <typename T>
inline uint32_t append_range(Arena<T>& A, Op op, std::initializer_list<const Spans*> ops, const uint32_t* tail,
                             size_t ntail, uint32_t nout, uint32_t c = 0, double imm = 0.0,
                             const uint32_t* tail2 = nullptr, size_t ntail2 = 0) {
    size_t nargs = 1 + ntail + ntail2;
    for (const Spans* o : ops) nargs += 1 + 2 * o->size();
    A.make_room(nout, 1, nargs);
    uint32_t first;
    uint32_t* p = A.grow_args(nargs, &first);
    *p++ = static_cast<uint32_t>(ops.size());
    for (const Spans* o : ops) {
        *p++ = static_cast<uint32_t>(o->size());
        for (const Span& s : *o) {
            *p++ = s.first;
            *p++ = s.second;
        }
    }
    for (size_t i = 0; i < ntail; ++i) *p++ = tail[i];
    for (size_t i = 0; i < ntail2; ++i) *p++ = tail2[i];
    uint32_t out = A.new_slots(nout);
    A.push_record(op, out, nout, first, static_cast<uint32_t>(nargs), c, imm);
    return out;
}

// The operands of the record just appended, decoded from args (forward kernels read them the
// same way backward does, and no temporary lists are built).
template <typename T>
inline const uint32_t* last_operands(Arena<T>& A, SpanList* out, uint32_t k) {
    return decode_operands(A.args_mut() + A.record(A.num_records() - 1).a, out, k);
}

// ---------------------------------------------------------------- copy
template <typename T>
inline uint32_t range_copy(Arena<T>& A, const Spans& x) {
    uint32_t n = total_len(x);
    uint32_t out = append_range(A, Op::copy, {&x}, nullptr, 0, n);
    T* v = A.values();
    uint32_t o = out;
    for (const Span& s : x)
        for (uint32_t i = 0; i < s.second; ++i) v[o++] = v[s.first + i];
    return out;
}

// ---------------------------------------------------------------- elementwise maps
// The scalar op tables of ops.hpp, applied over a range in one record (c = the scalar op).
template <typename T>
inline void map_unary_fwd(Op op, const T* xs, T* ys, size_t n, T c) {
    switch (op) {
#define BT_MAP(name, fwd, ...)              \
    case Op::name:                          \
        for (size_t i = 0; i < n; ++i) {    \
            const T x = xs[i];              \
            ys[i] = (fwd);                  \
        }                                   \
        return;
        BT_UNARY_OPS(BT_MAP)
        BT_UNARY_IMM_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
    (void)c;
}
template <typename T>
inline void map_unary_bwd(Op op, const T* xs, const T* ys, const T* gy, T* gx, size_t n, T c) {
    switch (op) {
#define BT_MAP(name, fwd, dfdx)                  \
    case Op::name:                               \
        for (size_t i = 0; i < n; ++i) {         \
            const T x = xs[i], y = ys[i];        \
            (void)x;                             \
            (void)y;                             \
            gx[i] += gy[i] * (dfdx);             \
        }                                        \
        return;
        BT_UNARY_OPS(BT_MAP)
        BT_UNARY_IMM_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
    (void)c;
}

template <typename T>
inline uint32_t range_map_unary(Arena<T>& A, Op op, const Spans& x, double imm) {
    uint32_t n = total_len(x);
    const bool with_imm = op_info(op).kind == OpKind::unary_imm;
    uint32_t out = append_range(A, with_imm ? Op::map_imm : Op::map_unary, {&x}, nullptr, 0, n,
                                static_cast<uint32_t>(op), imm);
    SpanList in[1];
    last_operands(A, in, 1);
    T* scratch = A.scratch(n).data();
    const T* xs = contiguous(A.values(), in[0], scratch);
    map_unary_fwd<T>(op, xs, A.values() + out, n, static_cast<T>(imm));
    return out;
}

template <typename T>
inline uint32_t range_map_binary(Arena<T>& A, Op op, const Spans& a, const Spans& b) {
    uint32_t n = total_len(a);
    uint32_t out = append_range(A, Op::map_binary, {&a, &b}, nullptr, 0, n, static_cast<uint32_t>(op));
    SpanList in[2];
    last_operands(A, in, 2);
    T* scratch = A.scratch(2 * size_t(n)).data();
    const T* as = contiguous(A.values(), in[0], scratch);
    const T* bs = contiguous(A.values(), in[1], scratch + n);
    T* ys = A.values() + out;
    switch (op) {
#define BT_MAP(name, fwd, ...)                   \
    case Op::name:                               \
        for (size_t i = 0; i < n; ++i) {         \
            const T a = as[i], b = bs[i];        \
            ys[i] = (fwd);                       \
        }                                        \
        break;
        BT_BINARY_OPS(BT_MAP)
#undef BT_MAP
        default: break;
    }
    return out;
}

// ---------------------------------------------------------------- reductions
template <typename T>
inline uint32_t range_sum(Arena<T>& A, const Spans& x, double scale) {
    uint32_t out = append_range(A, Op::sum_range, {&x}, nullptr, 0, 1, 0, scale);
    T s = T(0);
    for (const Span& sp : x) s += k::sum(A.values() + sp.first, sp.second);
    A.values()[out] = s * static_cast<T>(scale);
    return out;
}

template <typename T>
inline uint32_t range_dot(Arena<T>& A, const Spans& x, const Spans& w) {
    uint32_t n = total_len(x);
    uint32_t out = append_range(A, Op::dot_range, {&x, &w}, nullptr, 0, 1);
    SpanList in[2];
    last_operands(A, in, 2);
    T* scratch = A.scratch(2 * size_t(n)).data();
    const T* xs = contiguous(A.values(), in[0], scratch);
    const T* ws = contiguous(A.values(), in[1], scratch + n);
    A.values()[out] = k::dot(xs, ws, n);
    return out;
}

// ---------------------------------------------------------------- linear: y = W x + b, per row
// x: rows * in values; W: one span of out * in (row-major, rows of W are output units);
// b: one span of out, or absent. Output rows * out. The products are the register-tiled
// kernels of kernels/gemm.hpp; the forward's scratch holds the operand it transposes.
// Whether the forward may need scratch (in * out): when some layer width would run tiles.
template <typename T>
inline bool linear_uses_transpose(uint32_t rows, uint32_t in) { return !gemm::forward_by_dots(rows, in, SIZE_MAX); }

template <typename T>
inline void linear_fwd(const T* x, const T* W, const T* b, T* y, uint32_t rows, uint32_t in, uint32_t out,
                       T* wt_scratch) {
    gemm::forward(x, W, b, y, rows, in, out, 0, out, wt_scratch);
}

// Backward of linear: gx += gy W, gW += gy^T x, gb += column sums of gy.
template <typename T>
inline void linear_bwd(const T* x, const T* W, const T* gy, T* gx, T* gW, T* gb, uint32_t rows, uint32_t in,
                       uint32_t out) {
    gemm::grad_input(gy, W, gx, rows, in, out, 0, rows);
    gemm::grad_weight(gy, x, gW, gb, rows, in, out, 0, out);
}

template <typename T>
inline uint32_t range_linear(Arena<T>& A, const Spans& x, const Spans& W, const Spans* b, uint32_t rows,
                             uint32_t nin, uint32_t nout) {
    uint32_t tail[4] = {rows, nin, nout, b ? 1u : 0u};
    uint32_t y = b ? append_range(A, Op::linear, {&x, &W, b}, tail, 4, rows * nout)
                   : append_range(A, Op::linear, {&x, &W}, tail, 4, rows * nout);
    SpanList in[1];
    last_operands(A, in, 1);
    const size_t nx = size_t(rows) * nin, nw = linear_uses_transpose<T>(rows, nin) ? size_t(nin) * nout : 0;
    T* scratch = A.scratch(nx + nw).data();
    const T* xs = contiguous(A.values(), in[0], scratch);
    linear_fwd(xs, A.values() + W[0].first, b ? A.values() + (*b)[0].first : nullptr, A.values() + y, rows, nin,
               nout, nw ? scratch + nx : nullptr);
    return y;
}

// ---------------------------------------------------------------- softmax over rows
template <typename T>
inline void softmax_row(const T* x, T* y, uint32_t n) {
    T m = -std::numeric_limits<T>::infinity();
    for (uint32_t j = 0; j < n; ++j) m = std::max(m, x[j]);
    T s = T(0);
    for (uint32_t j = 0; j < n; ++j) {
        y[j] = std::exp(x[j] - m);
        s += y[j];
    }
    const T inv = T(1) / s;
    for (uint32_t j = 0; j < n; ++j) y[j] *= inv;
}

template <typename T>
inline uint32_t range_softmax(Arena<T>& A, const Spans& x, uint32_t rows, uint32_t n) {
    uint32_t tail[2] = {rows, n};
    uint32_t out = append_range(A, Op::softmax, {&x}, tail, 2, rows * n);
    SpanList in[1];
    last_operands(A, in, 1);
    T* scratch = A.scratch(size_t(rows) * n).data();
    const T* xs = contiguous(A.values(), in[0], scratch);
    for (uint32_t r = 0; r < rows; ++r) softmax_row(xs + size_t(r) * n, A.values() + out + size_t(r) * n, n);
    return out;
}

// ---------------------------------------------------------------- cross-entropy with integer targets
// loss = mean over rows of (logsumexp(z_r) - z_r[t_r]): log-softmax and NLL in one record.
template <typename T>
inline T logsumexp(const T* z, uint32_t n) {
    T m = -std::numeric_limits<T>::infinity();
    for (uint32_t j = 0; j < n; ++j) m = std::max(m, z[j]);
    T s = T(0);
    for (uint32_t j = 0; j < n; ++j) s += std::exp(z[j] - m);
    return m + std::log(s);
}

template <typename T>
inline uint32_t range_cross_entropy(Arena<T>& A, const Spans& logits, uint32_t rows, uint32_t V,
                                    const uint32_t* targets) {
    uint32_t dims[2] = {rows, V};
    uint32_t out = append_range(A, Op::cross_entropy, {&logits}, dims, 2, 1, 0, 0.0, targets, rows);
    SpanList in[1];
    last_operands(A, in, 1);
    T* scratch = A.scratch(size_t(rows) * V).data();
    const T* z = contiguous(A.values(), in[0], scratch);
    T loss = T(0);
    for (uint32_t r = 0; r < rows; ++r) {
        const T* zr = z + size_t(r) * V;
        loss += logsumexp(zr, V) - zr[targets[r]];
    }
    A.values()[out] = loss / T(rows);
    return out;
}

// ---------------------------------------------------------------- layer norm over rows
template <typename T>
inline void row_stats(const T* x, uint32_t C, T eps, T* mean, T* rstd) {
    T m = k::sum(x, C) / T(C);
    T v = T(0);
    for (uint32_t j = 0; j < C; ++j) v += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = T(1) / std::sqrt(v / T(C) + eps);
}

template <typename T>
inline uint32_t range_layer_norm(Arena<T>& A, const Spans& x, const Spans& gamma, const Spans& beta, uint32_t rows,
                                 uint32_t C, double eps) {
    uint32_t tail[2] = {rows, C};
    uint32_t out = append_range(A, Op::layer_norm, {&x, &gamma, &beta}, tail, 2, rows * C, 0, eps);
    SpanList in[1];
    last_operands(A, in, 1);
    T* scratch = A.scratch(size_t(rows) * C).data();
    const T* xs = contiguous(A.values(), in[0], scratch);
    const T* g = A.values() + gamma[0].first;
    const T* b = A.values() + beta[0].first;
    T* y = A.values() + out;
    for (uint32_t r = 0; r < rows; ++r) {
        const T* xr = xs + size_t(r) * C;
        T m, rs;
        row_stats(xr, C, static_cast<T>(eps), &m, &rs);
        for (uint32_t j = 0; j < C; ++j) y[size_t(r) * C + j] = (xr[j] - m) * rs * g[j] + b[j];
    }
    return out;
}

// ---------------------------------------------------------------- attention
// One head over row-strided q/k/v: row i of Q is Q + i * ld (so the heads of a fused (T x 3C)
// q/k/v block are read in place). O is written with stride ldo; P is T x T.
template <typename T>
inline void attn_head_fwd(const T* Q, const T* K, const T* Vv, size_t ld, T* O, size_t ldo, T* P, uint32_t Tn,
                          uint32_t hs, bool causal, T sc) {
    for (uint32_t i = 0; i < Tn; ++i) {
        const uint32_t nj = causal ? i + 1 : Tn;
        T* Pi = P + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) Pi[j] = sc * k::dot(Q + i * ld, K + j * ld, hs);
        softmax_row(Pi, Pi, nj);
        for (uint32_t j = nj; j < Tn; ++j) Pi[j] = T(0);
        T* Oi = O + i * ldo;
        std::fill(Oi, Oi + hs, T(0));
        for (uint32_t j = 0; j < nj; ++j) k::axpy(Oi, Pi[j], Vv + j * ld, hs);
    }
}

// Backward of one head. gO has stride ldo, gPext (grads of the weights as nodes) is T x T;
// gQ/gK/gV (stride ld) are accumulated. gP, gS: T x T scratch.
template <typename T>
inline void attn_head_bwd(const T* Q, const T* K, const T* Vv, size_t ld, const T* P, const T* gO, size_t ldo,
                          const T* gPext, T* gQ, T* gK, T* gV, T* gP, T* gS, uint32_t Tn, uint32_t hs, bool causal,
                          T sc) {
    for (uint32_t i = 0; i < Tn; ++i) {
        const uint32_t nj = causal ? i + 1 : Tn;
        const T* Pi = P + size_t(i) * Tn;
        const T* gOi = gO + i * ldo;
        T* gPi = gP + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) {
            gPi[j] = k::dot(gOi, Vv + j * ld, hs) + gPext[size_t(i) * Tn + j];
            k::axpy(gV + j * ld, Pi[j], gOi, hs);
        }
        const T s = k::dot(gPi, Pi, nj);
        T* gSi = gS + size_t(i) * Tn;
        for (uint32_t j = 0; j < nj; ++j) gSi[j] = Pi[j] * (gPi[j] - s) * sc;
        for (uint32_t j = 0; j < nj; ++j) {
            k::axpy(gQ + i * ld, gSi[j], K + j * ld, hs);
            k::axpy(gK + j * ld, gSi[j], Q + i * ld, hs);
        }
    }
}

// One head: q, k, v are T x hs each. Outputs: T x hs (the head's output), then T x T weights P
// (kept as nodes: they can be drawn as heatmaps, and their grads flow like any other node's).
template <typename T>
inline uint32_t range_attention(Arena<T>& A, const Spans& q, const Spans& kk, const Spans& v, uint32_t Tn,
                                uint32_t hs, bool causal, double scale) {
    uint32_t tail[3] = {Tn, hs, causal ? 1u : 0u};
    const size_t th = size_t(Tn) * hs;
    uint32_t out = append_range(A, Op::attention, {&q, &kk, &v}, tail, 3, uint32_t(th + size_t(Tn) * Tn), 0, scale);
    SpanList in[3];
    last_operands(A, in, 3);
    T* scratch = A.scratch(3 * th).data();
    const T* Q = contiguous(A.values(), in[0], scratch);
    const T* K = contiguous(A.values(), in[1], scratch + th);
    const T* Vv = contiguous(A.values(), in[2], scratch + 2 * th);
    T* O = A.values() + out;
    attn_head_fwd(Q, K, Vv, hs, O, hs, O + th, Tn, hs, causal, static_cast<T>(scale));
    return out;
}

// All heads at once from a fused (T x 3C) q/k/v block (columns: queries of heads 0..H-1, keys,
// values). Outputs: the heads' outputs side by side (T x C, i.e. already concatenated), then the
// H weight matrices (H x T x T).
// S sequences of T rows each may be stacked ((S*T) x 3C): attention stays within a sequence.
// Outputs: (S*T) x C, then per sequence the H weight matrices (S x H x T x T).
template <typename T>
inline uint32_t range_mha(Arena<T>& A, const Spans& qkv, uint32_t Tn, uint32_t C, uint32_t H, bool causal,
                          double scale, uint32_t S = 1) {
    uint32_t tail[5] = {Tn, C, H, causal ? 1u : 0u, S};
    const size_t tc = size_t(Tn) * C, tt = size_t(Tn) * Tn;
    uint32_t out = append_range(A, Op::multi_head_attention, {&qkv}, tail, 5, uint32_t(S * (tc + H * tt)), 0, scale);
    SpanList in[1];
    last_operands(A, in, 1);
    T* scratch = A.scratch(3 * tc * S).data();
    const T* X0 = contiguous(A.values(), in[0], scratch);
    const uint32_t hs = C / H;
    T* O0 = A.values() + out;
    T* P0 = O0 + S * tc;
    for (uint32_t sq = 0; sq < S; ++sq) {
        const T* X = X0 + sq * 3 * tc;
        T* O = O0 + sq * tc;
        for (uint32_t h = 0; h < H; ++h)
            attn_head_fwd(X + h * hs, X + C + h * hs, X + 2 * C + h * hs, 3 * size_t(C), O + h * hs, C,
                          P0 + (size_t(sq) * H + h) * tt, Tn, hs, causal, static_cast<T>(scale));
    }
    return out;
}

// ---------------------------------------------------------------- the backward of every range op
template <typename T>
inline void range_backward(Arena<T>& A, const Record& r) {
    T* val = A.values();
    T* g = A.grads();
    SpanList in[3];
    const uint32_t* tail = decode_operands(A.args_mut() + r.a, in, 3);
    const T* gy = g + r.out;
    const T* y = val + r.out;
    switch (r.op) {
        case Op::copy:
            scatter_add(g, in[0], gy);
            return;
        case Op::map_unary:
        case Op::map_imm: {
            const uint32_t n = r.nout;
            T* buf = A.scratch(2 * size_t(n)).data();
            const T* xs = contiguous(val, in[0], buf);
            T* gx = buf + n;
            std::fill(gx, gx + n, T(0));
            map_unary_bwd<T>(static_cast<Op>(r.c), xs, y, gy, gx, n, static_cast<T>(r.imm));
            scatter_add(g, in[0], gx);
            return;
        }
        case Op::map_binary: {
            const uint32_t n = r.nout;
            T* buf = A.scratch(4 * size_t(n)).data();
            const T* as = contiguous(val, in[0], buf);
            const T* bs = contiguous(val, in[1], buf + n);
            T* ga = buf + 2 * size_t(n);
            T* gb = buf + 3 * size_t(n);
            switch (static_cast<Op>(r.c)) {
#define BT_MAP(name, fwd, dfda, dfdb)                            \
    case Op::name:                                               \
        for (size_t i = 0; i < n; ++i) {                         \
            const T a = as[i], b = bs[i], yy = y[i];             \
            (void)a;                                             \
            (void)b;                                             \
            [[maybe_unused]] const T& y = yy;                    \
            ga[i] = gy[i] * (dfda);                              \
            gb[i] = gy[i] * (dfdb);                              \
        }                                                        \
        break;
                BT_BINARY_OPS(BT_MAP)
#undef BT_MAP
                default: break;
            }
            scatter_add(g, in[0], ga);
            scatter_add(g, in[1], gb);
            return;
        }
        case Op::sum_range: {
            const T d = gy[0] * static_cast<T>(r.imm);
            for (uint32_t s = 0; s < in[0].n; ++s) {
                T* p = g + in[0].first(s);
                for (uint32_t i = 0; i < in[0].len(s); ++i) p[i] += d;
            }
            return;
        }
        case Op::dot_range: {
            const uint32_t n = in[0].total();
            T* buf = A.scratch(4 * size_t(n)).data();
            const T* xs = contiguous(val, in[0], buf);
            const T* ws = contiguous(val, in[1], buf + n);
            T* gx = buf + 2 * size_t(n);
            T* gw = buf + 3 * size_t(n);
            for (uint32_t i = 0; i < n; ++i) {
                gx[i] = gy[0] * ws[i];
                gw[i] = gy[0] * xs[i];
            }
            scatter_add(g, in[0], gx);
            scatter_add(g, in[1], gw);
            return;
        }
        case Op::linear: {
            const uint32_t rows = tail[0], nin = tail[1], nout = tail[2];
            const bool has_b = tail[3] != 0;
            const size_t nx = size_t(rows) * nin;
            T* buf = A.scratch(2 * nx).data();
            const T* xs = contiguous(val, in[0], buf);
            T* gx = buf + nx;
            std::fill(gx, gx + nx, T(0));
            linear_bwd(xs, val + in[1].first(0), gy, gx, g + in[1].first(0), has_b ? g + in[2].first(0) : nullptr,
                       rows, nin, nout);
            scatter_add(g, in[0], gx);
            return;
        }
        case Op::softmax: {
            const uint32_t rows = tail[0], n = tail[1];
            T* gx = A.scratch(size_t(rows) * n).data();
            for (uint32_t rr = 0; rr < rows; ++rr) {
                const T* yr = y + size_t(rr) * n;
                const T* gr = gy + size_t(rr) * n;
                const T s = k::dot(gr, yr, n);
                for (uint32_t j = 0; j < n; ++j) gx[size_t(rr) * n + j] = yr[j] * (gr[j] - s);
            }
            scatter_add(g, in[0], gx);
            return;
        }
        case Op::cross_entropy: {
            const uint32_t rows = tail[0], V = tail[1];
            const uint32_t* targets = tail + 2;
            const size_t n = size_t(rows) * V;
            T* buf = A.scratch(2 * n).data();
            const T* z = contiguous(val, in[0], buf);
            T* gz = buf + n;
            const T d = gy[0] / T(rows);
            for (uint32_t rr = 0; rr < rows; ++rr) {
                softmax_row(z + size_t(rr) * V, gz + size_t(rr) * V, V);
                for (uint32_t j = 0; j < V; ++j) gz[size_t(rr) * V + j] *= d;
                gz[size_t(rr) * V + targets[rr]] -= d;
            }
            scatter_add(g, in[0], gz);
            return;
        }
        case Op::layer_norm: {
            const uint32_t rows = tail[0], C = tail[1];
            const size_t n = size_t(rows) * C;
            T* buf = A.scratch(2 * n).data();
            const T* xs = contiguous(val, in[0], buf);
            T* gx = buf + n;
            const T* gam = val + in[1].first(0);
            T* ggam = g + in[1].first(0);
            T* gbet = g + in[2].first(0);
            for (uint32_t rr = 0; rr < rows; ++rr) {
                const T* xr = xs + size_t(rr) * C;
                const T* gr = gy + size_t(rr) * C;
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
                    gx[size_t(rr) * C + j] = rs * (gr[j] * gam[j] - mean_d - xhat * mean_dx);
                }
            }
            scatter_add(g, in[0], gx);
            return;
        }
        case Op::attention: {
            const uint32_t Tn = tail[0], hs = tail[1];
            const bool causal = tail[2] != 0;
            const size_t th = size_t(Tn) * hs, tt = size_t(Tn) * Tn;
            T* buf = A.scratch(6 * th + 2 * tt).data();
            const T* Q = contiguous(val, in[0], buf);
            const T* K = contiguous(val, in[1], buf + th);
            const T* Vv = contiguous(val, in[2], buf + 2 * th);
            T* gQ = buf + 3 * th;
            std::fill(gQ, gQ + 3 * th, T(0));
            attn_head_bwd(Q, K, Vv, hs, y + th, gy, hs, gy + th, gQ, gQ + th, gQ + 2 * th, buf + 6 * th,
                          buf + 6 * th + tt, Tn, hs, causal, static_cast<T>(r.imm));
            scatter_add(g, in[0], gQ);
            scatter_add(g, in[1], gQ + th);
            scatter_add(g, in[2], gQ + 2 * th);
            return;
        }
        case Op::multi_head_attention: {
            const uint32_t Tn = tail[0], C = tail[1], H = tail[2], S = tail[4];
            const bool causal = tail[3] != 0;
            const uint32_t hs = C / H;
            const size_t tc = size_t(Tn) * C, tt = size_t(Tn) * Tn, all = 3 * tc * S;
            T* buf = A.scratch(2 * all + 2 * tt).data();
            const T* X0 = contiguous(val, in[0], buf);
            T* gX0 = buf + all;
            std::fill(gX0, gX0 + all, T(0));
            T* gP = buf + 2 * all;
            for (uint32_t sq = 0; sq < S; ++sq) {
                const T* X = X0 + sq * 3 * tc;
                T* gX = gX0 + sq * 3 * tc;
                const T* gO = gy + sq * tc;
                for (uint32_t h = 0; h < H; ++h) {
                    const size_t p = S * tc + (size_t(sq) * H + h) * tt;
                    attn_head_bwd(X + h * hs, X + C + h * hs, X + 2 * C + h * hs, 3 * size_t(C), y + p, gO + h * hs, C,
                                  gy + p, gX + h * hs, gX + C + h * hs, gX + 2 * C + h * hs, gP, gP + tt, Tn, hs,
                                  causal, static_cast<T>(r.imm));
                }
            }
            scatter_add(g, in[0], gX0);
            return;
        }
        default: return;
    }
}

}  // namespace bt
