// Elementwise range ops: copy, and the scalar op tables of ops.hpp applied over a range in one
// record (the record's c holds the scalar op).
#pragma once
#include <type_traits>

#include "../kernels/vmath.hpp"
#include "common.hpp"

namespace bt {

// ---------------------------------------------------------------- copy
template <typename T>
inline uint32_t append_copy(Arena<T>& A, const Spans& x) {
    Appended ap = append_range(A, Op::copy, {&x}, nullptr, 0, total_len(x));
    forward_appended(A, ap);
    return ap.out;
}
template <typename T>
inline void copy_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    gather(A.values(), o.v[0], A.values() + r.out);
}
template <typename T>
inline void copy_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    scatter_add(A.grads(), o.v[0], A.grads() + r.out);
}

// ---------------------------------------------------------------- unary maps
template <typename T>
inline void map_unary_kernel(Op op, const T* xs, T* ys, size_t n, T c) {
    // float tanh over a range: the vectorized one (within a float ulp of the exact value; the
    // scalar op and double precision keep libm's).
    if constexpr (std::is_same_v<T, float>)
        if (op == Op::tanh) return kernels::tanh_floats(xs, ys, n);
    switch (op) {
#define BT_MAP(name, fwd, ...)           \
    case Op::name:                       \
        for (size_t i = 0; i < n; ++i) { \
            const T x = xs[i];           \
            ys[i] = (fwd);               \
        }                                \
        return;
        BT_UNARY_OPS(BT_MAP)
        BT_UNARY_IMM_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
    (void)c;
}
template <typename T>
inline void map_unary_grad_kernel(Op op, const T* xs, const T* ys, const T* gy, T* gx, size_t n, T c) {
    switch (op) {
#define BT_MAP(name, fwd, dfdx)           \
    case Op::name:                        \
        for (size_t i = 0; i < n; ++i) {  \
            const T x = xs[i], y = ys[i]; \
            (void)x;                      \
            (void)y;                      \
            gx[i] = gy[i] * (dfdx);       \
        }                                 \
        return;
        BT_UNARY_OPS(BT_MAP)
        BT_UNARY_IMM_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
    (void)c;
}

template <typename T>
inline uint32_t append_map_unary(Arena<T>& A, Op op, const Spans& x, double imm) {
    const bool with_imm = op_info(op).kind == OpKind::unary_imm;
    Appended ap = append_range(A, with_imm ? Op::map_imm : Op::map_unary, {&x}, nullptr, 0, total_len(x),
                               static_cast<uint16_t>(op), imm);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: x gathered (n) when not contiguous.
template <typename T>
inline void map_unary_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = r.nout;
    const T* xs = contiguous(A.values(), o.v[0], A.scratch(n).data());
    T* ys = A.values() + r.out;
    for_item_blocks(n, 4, [&](size_t b, size_t e) {
        map_unary_kernel<T>(static_cast<Op>(r.c), xs + b, ys + b, e - b, static_cast<T>(r.imm));
    });
}
// Work per element of a unary map's gradient, against kParallelItemWork. Most of its kernels are
// a multiply or two an element, so the time goes to moving y, gy and gx, which the records around
// it wrote on the caller's core: split in two, tanh's gradient over tens of thousands of floats
// took longer than on one thread, and only from about twice as many did the split pay.
inline constexpr double kMapGradWork = 0.5;

// Scratch, for x in several spans: [x gathered (n) | gx (n)].
template <typename T>
inline void map_unary_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = r.nout;
    const T* ys = A.values() + r.out;
    const T* gy = A.grads() + r.out;
    if (o.v[0].n == 1) {
        // x in one span (a layer's output): each task adds its block's grads into x's in pieces
        // that stay in L1, rather than one thread adding all of them in after the tasks. The same
        // products, then the same additions, so the same bits as through scratch.
        const T* xs = A.values() + o.v[0].first(0);
        T* gx = A.grads() + o.v[0].first(0);
        const bool first = A.first_write;  // x's grads unzeroed: 0 + piece, as scatter_add writes
        for_item_blocks(n, kMapGradWork, [&](size_t b, size_t e) {
            constexpr size_t kPiece = 256;
            T piece[kPiece];
            for (size_t p = b; p < e; p += kPiece) {
                const size_t m = std::min(kPiece, e - p);
                map_unary_grad_kernel<T>(static_cast<Op>(r.c), xs + p, ys + p, gy + p, piece, m, static_cast<T>(r.imm));
                if (first)
                    for (size_t i = 0; i < m; ++i) gx[p + i] = piece[i] + T(0);
                else
                    for (size_t i = 0; i < m; ++i) gx[p + i] += piece[i];
            }
        });
        return;
    }
    T* buf = A.scratch(2 * n).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    T* gx = buf + n;
    for_item_blocks(n, kMapGradWork, [&](size_t b, size_t e) {
        map_unary_grad_kernel<T>(static_cast<Op>(r.c), xs + b, ys + b, gy + b, gx + b, e - b, static_cast<T>(r.imm));
    });
    scatter_add(A.grads(), o.v[0], gx, A.first_write);
}

// ---------------------------------------------------------------- binary maps
template <typename T>
inline uint32_t append_map_binary(Arena<T>& A, Op op, const Spans& a, const Spans& b) {
    Appended ap = append_range(A, Op::map_binary, {&a, &b}, nullptr, 0, total_len(a), static_cast<uint16_t>(op));
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: [a gathered (n) | b gathered (n)].
template <typename T>
inline void map_binary_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = r.nout;
    T* buf = A.scratch(2 * n).data();
    const T* as = contiguous(A.values(), o.v[0], buf);
    const T* bs = contiguous(A.values(), o.v[1], buf + n);
    T* ys = A.values() + r.out;
    switch (static_cast<Op>(r.c)) {
#define BT_MAP(name, fwd, ...)            \
    case Op::name:                        \
        for (size_t i = 0; i < n; ++i) {  \
            const T a = as[i], b = bs[i]; \
            ys[i] = (fwd);                \
        }                                 \
        return;
        BT_BINARY_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
}
// Scratch: [a gathered (n) | b gathered (n) | ga (n) | gb (n)].
template <typename T>
inline void map_binary_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const size_t n = r.nout;
    T* buf = A.scratch(4 * n).data();
    const T* as = contiguous(A.values(), o.v[0], buf);
    const T* bs = contiguous(A.values(), o.v[1], buf + n);
    T* ga = buf + 2 * n;
    T* gb = buf + 3 * n;
    const T* ys = A.values() + r.out;
    const T* gy = A.grads() + r.out;
    switch (static_cast<Op>(r.c)) {
#define BT_MAP(name, fwd, dfda, dfdb)           \
    case Op::name:                              \
        for (size_t i = 0; i < n; ++i) {        \
            const T a = as[i], b = bs[i];       \
            [[maybe_unused]] const T y = ys[i]; \
            (void)a;                            \
            (void)b;                            \
            ga[i] = gy[i] * (dfda);             \
            gb[i] = gy[i] * (dfdb);             \
        }                                       \
        break;
        BT_BINARY_OPS(BT_MAP)
#undef BT_MAP
        default: return;
    }
    scatter_add(A.grads(), o.v[0], ga);
    scatter_add(A.grads(), o.v[1], gb);
}

}  // namespace bt
