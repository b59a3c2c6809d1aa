// The reverse sweep: one loop over records from the root's record down to the lowest record the
// root depends on. No recursion, no visited set, no allocation.
#pragma once
#include <cmath>

#include "forward.hpp"

namespace bt {

// Adds record r's contribution to the grads of its arguments. args: the arena's args array.
// Inlined into the sweeps that call it, as forward_record is.
// Storage: the arena's type; T, what the derivatives are computed in (float for the half types,
// whose values widen on the read and round once on the store into the grad).
template <typename Storage>
[[gnu::always_inline]] inline void backward_record(const Frame<Storage>& A, const Record& r, const uint32_t* args) {
    using T = acc_t<Storage>;
    const Storage* v = A.values();
    Storage* gr = A.grads();
    switch (r.op) {
#define BT_BWD_U(name, fwd, dfdx)         \
    case Op::name: {                      \
        const T x = v[r.a], y = v[r.out]; \
        (void)x;                          \
        (void)y;                          \
        gr[r.a] += gr[r.out] * (dfdx);    \
        return;                           \
    }
        BT_UNARY_OPS(BT_BWD_U)
#undef BT_BWD_U
#define BT_BWD_UI(name, fwd, dfdx)         \
    case Op::name: {                       \
        const T x = v[r.a], y = v[r.out];  \
        const T c = static_cast<T>(r.imm); \
        (void)x;                           \
        (void)y;                           \
        (void)c;                           \
        gr[r.a] += gr[r.out] * (dfdx);     \
        return;                            \
    }
        BT_UNARY_IMM_OPS(BT_BWD_UI)
#undef BT_BWD_UI
#define BT_BWD_B(name, fwd, dfda, dfdb)               \
    case Op::name: {                                  \
        const T a = v[r.a], b = v[r.b], y = v[r.out]; \
        (void)a;                                      \
        (void)b;                                      \
        (void)y;                                      \
        const T g = gr[r.out];                        \
        gr[r.a] += g * (dfda);                        \
        gr[r.b] += g * (dfdb);                        \
        return;                                       \
    }
        BT_BINARY_OPS(BT_BWD_B)
#undef BT_BWD_B
#define BT_BWD_N(name) \
    case Op::name: nary_backward<Storage>(r.op, v, gr, args + r.a, r.b, v + r.out, gr + r.out, A.scratch(0)); return;
        BT_NARY_OPS(BT_BWD_N)
#undef BT_BWD_N
        case Op::leaf:
        case Op::count_: return;
        default: range_backward(A, r, args + r.a); return;
    }
}

// Raises AnomalyError if record k left a non-finite grad in one of its arguments.
template <typename T>
inline void check_contribution(const Arena<T>& A, size_t k) {
    const Record& r = A.record(k);
    const T* g = A.grads();
    for (const auto& span : A.record_args(r))
        for (uint32_t i = 0; i < span.second; ++i)
            if (!std::isfinite(g[span.first + i]))
                throw AnomalyError(std::string("anomaly: the backward of ") + op_info(r.op).name + " (record " +
                                       std::to_string(k) + ", output " + A.describe_node(r.out) + ") produced " +
                                       non_finite_name(g[span.first + i]) + " in the grad of its argument " +
                                       A.describe_node(span.first + i),
                                   k, span.first + i, true);
}

template <typename T>
template <bool Check>
inline void Arena<T>::sweep(size_t top, size_t lo, const FusedSgd* fused) {
    // A record whose outputs all have zero grad contributes nothing: skipping it makes records
    // that do not lead to the root (other graphs interleaved, dead ReLUs) nearly free.
    const T* g = grad_;
    Frame<T> f = frame();
    f.fused_sgd = fused;
    for (size_t k = top + 1; k-- > lo;) {
        const Record& r = recs_[k];
        bool live = g[r.out] != T(0);
        for (uint32_t i = 1; !live && i < r.nout; ++i) live = g[r.out + i] != T(0);
        if (!live) continue;
        backward_record(f, r, args_);
        if constexpr (Check) check_contribution(*this, k);
    }
}

template <typename T>
inline void Arena<T>::backward(uint32_t root, T seed, uint32_t stop_below, const FusedSgd* fused) {
    ++sweeps_since_rewind_;
    int64_t rr = record_of(root);
    if (rr < 0) {  // a leaf: d root / d root = 1, accumulated like any leaf grad
        grad_[root] += seed;
        return;
    }
    const size_t top = static_cast<size_t>(rr);
    size_t lo = recs_[top].lo;
    if (stop_below) lo = std::max(lo, first_record_at_or_above(stop_below));
    // Interior grads of the swept records start from zero. Records above the watermark are zero
    // already (fresh slots, and nothing wrote them since), so a training loop of build ->
    // backward -> rewind never pays for a zeroing pass.
    const size_t zero_end = grads_exposed_ ? top + 1 : std::min(dirty_, top + 1);
    for (size_t k = lo; k < zero_end; ++k) {
        const Record& r = recs_[k];
        std::fill(grad_ + r.out, grad_ + r.out + r.nout, T(0));
    }
    dirty_ = std::max(dirty_, top + 1);
    grad_[root] = seed;
    if (anomaly_enabled())
        sweep<true>(top, lo, fused);
    else
        sweep<false>(top, lo, fused);
}

}  // namespace bt
