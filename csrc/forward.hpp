// Appending scalar ops, and the forward of any record: compute its outputs from its arguments.
//
// The forward of a record is the one piece that both appending (eager mode) and replaying a
// recorded program run, so that both compute the very same numbers.
#pragma once
#include <cmath>

#include "arena.hpp"
#include "range/dispatch.hpp"
#include "reduce.hpp"

namespace bt {

template <typename T>
inline T unary_forward(Op op, T x) {
    if constexpr (is_half_v<T>) {
        return T(unary_forward<float>(op, float(x)));
    } else {  // computed in float
        switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: return (fwd);
            BT_UNARY_OPS(BT_FWD)
#undef BT_FWD
            default: return T(0);
        }
    }
}

template <typename T>
inline T unary_imm_forward(Op op, T x, acc_t<T> c) {
    if constexpr (is_half_v<T>) {
        return T(unary_imm_forward<float>(op, float(x), float(c)));
    } else {
        switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: return (fwd);
            BT_UNARY_IMM_OPS(BT_FWD)
#undef BT_FWD
            default: return T(0);
        }
    }
}

template <typename T>
inline T binary_forward(Op op, T a, T b) {
    if constexpr (is_half_v<T>) {
        return T(binary_forward<float>(op, float(a), float(b)));
    } else {
        switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: return (fwd);
            BT_BINARY_OPS(BT_FWD)
#undef BT_FWD
            default: return T(0);
        }
    }
}

// How a non-finite number reads in an anomaly message.
template <typename T>
inline const char* non_finite_name(T x) {
    return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
}

// "node 3 'x', node 5" for the first few arguments of a record (anomaly messages).
inline std::string describe_args(const ArenaBase& A, const Record& r) {
    std::string s;
    int shown = 0;
    for (const auto& span : A.record_args(r))
        for (uint32_t i = 0; i < span.second; ++i) {
            if (shown == 3) return s + ", ...";
            s += (shown++ ? ", " : "") + A.describe_node(span.first + i);
        }
    return s;
}

// Raises AnomalyError if an output of the op just appended is not finite (anomaly mode only).
template <typename T>
inline void check_outputs(const Arena<T>& A, Op op, uint32_t out, uint32_t nout) {
    const T* v = A.values() + out;
    for (uint32_t i = 0; i < nout; ++i) {
        if (std::isfinite(v[i])) continue;
        const bool recorded = grad_enabled();
        const size_t rec = A.num_records() - (recorded ? 1 : 0);
        std::string msg = std::string("anomaly: the forward of ") + op_info(op).name + " (record " +
                          std::to_string(rec) + ") produced " + non_finite_name(v[i]) + " in " +
                          A.describe_node(out + i);
        if (recorded) msg += ", from " + describe_args(A, A.record(rec));
        throw AnomalyError(msg, rec, out + i, false);
    }
}

template <typename T>
inline uint32_t Arena<T>::unary(Op op, uint32_t x) {
    uint32_t out = push_scalar(op, x, 0, lo_[x], 0.0, unary_forward<T>(op, val_[x]));
    if (anomaly_enabled()) check_outputs(*this, op, out, 1);
    return out;
}

template <typename T>
inline uint32_t Arena<T>::unary_imm(Op op, uint32_t x, double imm) {
    uint32_t out = push_scalar(op, x, 0, lo_[x], imm, unary_imm_forward<T>(op, val_[x], static_cast<acc_t<T>>(imm)));
    if (anomaly_enabled()) check_outputs(*this, op, out, 1);
    return out;
}

template <typename T>
inline uint32_t Arena<T>::binary(Op op, uint32_t a, uint32_t b) {
    uint32_t out = push_scalar(op, a, b, std::min(lo_[a], lo_[b]), 0.0, binary_forward<T>(op, val_[a], val_[b]));
    if (anomaly_enabled()) check_outputs(*this, op, out, 1);
    return out;
}

template <typename T>
inline uint32_t Arena<T>::nary(Op op, const uint32_t* idx, size_t n) {
    uint32_t lo = kNoRecord;
    for (size_t i = 0; i < n; ++i) lo = std::min(lo, lo_[idx[i]]);
    Appended ap = append(op, nary_outputs(op), n, lo, 0, 0.0, [&](uint32_t* dst) { std::copy(idx, idx + n, dst); });
    nary_forward<T>(op, val_, ap.args, n, val_ + ap.out);
    if (anomaly_enabled()) check_outputs(*this, op, ap.out, ap.rec.nout);
    return ap.out;
}

// Recomputes the outputs of record r from the current values of its arguments. One switch over
// every op code (as backward_record has): a replay of scalar records pays one indirect jump per
// record, not a jump on the kind and another on the op. Inlined into the loops that call it (a
// replay of scalar records would otherwise pay a call and a return per record as well).
template <typename T>
[[gnu::always_inline]] inline void forward_record(const Frame<T>& A, const Record& r, const uint32_t* args) {
    T* v = A.values();
    switch (r.op) {
#define BT_FWD_U(name, fwd, ...) \
    case Op::name: {             \
        const T x = v[r.a];      \
        v[r.out] = (fwd);        \
        return;                  \
    }
        BT_UNARY_OPS(BT_FWD_U)
#undef BT_FWD_U
#define BT_FWD_UI(name, fwd, ...)          \
    case Op::name: {                       \
        const T x = v[r.a];                \
        const T c = static_cast<T>(r.imm); \
        v[r.out] = (fwd);                  \
        return;                            \
    }
        BT_UNARY_IMM_OPS(BT_FWD_UI)
#undef BT_FWD_UI
#define BT_FWD_B(name, fwd, ...)        \
    case Op::name: {                    \
        const T a = v[r.a], b = v[r.b]; \
        v[r.out] = (fwd);               \
        return;                         \
    }
        BT_BINARY_OPS(BT_FWD_B)
#undef BT_FWD_B
#define BT_FWD_N(name) case Op::name:
        BT_NARY_OPS(BT_FWD_N)
#undef BT_FWD_N
        nary_forward<T>(r.op, v, args + r.a, r.b, v + r.out);
        return;
        case Op::leaf:
        case Op::count_: return;
        default: range_forward(A, r, args + r.a); return;
    }
}

}  // namespace bt
