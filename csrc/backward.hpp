// The reverse sweep: one loop over records from the root's record down, no recursion.
#pragma once
#include "forward.hpp"
#include "range_ops.hpp"

namespace bt {

template <typename T>
inline void Arena<T>::sweep_record(const Record& r) {
    T* v = value_.data();
    T* gr = grad_.data();
    switch (r.op) {
#define BT_BWD_U(name, fwd, dfdx)            \
    case Op::name: {                         \
        const T x = v[r.a], y = v[r.out];    \
        (void)x;                             \
        (void)y;                             \
        gr[r.a] += gr[r.out] * (dfdx);       \
        return;                              \
    }
        BT_UNARY_OPS(BT_BWD_U)
#undef BT_BWD_U
#define BT_BWD_UI(name, fwd, dfdx)                        \
    case Op::name: {                                      \
        const T x = v[r.a], y = v[r.out];                 \
        (void)x;                                          \
        const T c = static_cast<T>(r.imm);                \
        (void)y;                                          \
        (void)c;                                          \
        gr[r.a] += gr[r.out] * (dfdx);                    \
        return;                                           \
    }
        BT_UNARY_IMM_OPS(BT_BWD_UI)
#undef BT_BWD_UI
#define BT_BWD_B(name, fwd, dfda, dfdb)                   \
    case Op::name: {                                      \
        const T a = v[r.a], b = v[r.b], y = v[r.out];     \
        (void)a; (void)b;                                 \
        const T g = gr[r.out];                            \
        (void)y;                                          \
        gr[r.a] += g * (dfda);                            \
        gr[r.b] += g * (dfdb);                            \
        return;                                           \
    }
        BT_BINARY_OPS(BT_BWD_B)
#undef BT_BWD_B
#define BT_BWD_N(name)                                                                      \
    case Op::name:                                                                          \
        nary_backward<T>(r.op, v, gr, args_.data() + r.a, r.b, v + r.out, gr + r.out, scratch_); \
        return;
        BT_NARY_OPS(BT_BWD_N)
#undef BT_BWD_N
        case Op::leaf:
        case Op::count_: return;
        default:
            range_backward<T>(*this, r);
            return;
    }
}

template <typename T>
inline void Arena<T>::backward(uint32_t root, T seed, uint32_t stop_below) {
    int64_t rr = record_of(root);
    if (rr < 0) {  // a leaf: d root / d root = 1, accumulated like any leaf grad
        grad_[root] += seed;
        return;
    }
    size_t top = static_cast<size_t>(rr);
    size_t lo = stop_below ? first_record_at_or_above(stop_below) : 0;
    // Interior grads of the swept range start from zero; records created since the last sweep
    // are zero already (new_slots), so only the part an earlier sweep touched is cleared.
    size_t zero_end = std::min(dirty_, top + 1);
    for (size_t k = lo; k < zero_end; ++k) {
        const Record& r = records_[k];
        std::fill(grad_.data() + r.out, grad_.data() + r.out + r.nout, T(0));
    }
    if (dirty_ < top + 1) dirty_ = top + 1;
    grad_[root] = seed;
    // A record whose outputs all have zero grad contributes nothing: skipping it makes a sweep
    // over records unreachable from the root (other graphs below it, dead ReLUs) nearly free.
    const T* g = grad_.data();
    for (size_t k = top + 1; k-- > lo;) {
        const Record& r = records_[k];
        bool live = g[r.out] != T(0);
        for (uint32_t i = 1; !live && i < r.nout; ++i) live = g[r.out + i] != T(0);
        if (live) sweep_record(r);
    }
}

}  // namespace bt
