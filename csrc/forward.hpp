// Appending ops to an arena: compute the output value now, record how to differentiate it later.
#pragma once
#include "arena.hpp"
#include "reduce.hpp"

namespace bt {

template <typename T>
inline uint32_t Arena<T>::unary(Op op, uint32_t xi) {
    const T x = value_[xi];
    T y;
    switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: y = (fwd); break;
        BT_UNARY_OPS(BT_FWD)
#undef BT_FWD
        default: y = T(0); break;
    }
    make_room(1, 1, 0);
    uint32_t out = leaf(y);
    records_.push(Record{op, out, 1, xi, 0, 0, 0.0});
    return out;
}

template <typename T>
inline uint32_t Arena<T>::unary_imm(Op op, uint32_t xi, double imm) {
    const T x = value_[xi];
    const T c = static_cast<T>(imm);
    T y;
    switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: y = (fwd); break;
        BT_UNARY_IMM_OPS(BT_FWD)
#undef BT_FWD
        default: y = T(0); break;
    }
    make_room(1, 1, 0);
    uint32_t out = leaf(y);
    records_.push(Record{op, out, 1, xi, 0, 0, imm});
    return out;
}

template <typename T>
inline uint32_t Arena<T>::binary(Op op, uint32_t ai, uint32_t bi) {
    const T a = value_[ai], b = value_[bi];
    T y;
    switch (op) {
#define BT_FWD(name, fwd, ...) \
    case Op::name: y = (fwd); break;
        BT_BINARY_OPS(BT_FWD)
#undef BT_FWD
        default: y = T(0); break;
    }
    make_room(1, 1, 0);
    uint32_t out = leaf(y);
    records_.push(Record{op, out, 1, ai, bi, 0, 0.0});
    return out;
}

template <typename T>
inline uint32_t Arena<T>::nary(Op op, const uint32_t* idx, size_t n) {
    uint32_t nout = nary_outputs(op);
    T y[2];
    nary_forward<T>(op, value_.data(), idx, n, y);
    make_room(nout, 1, n);
    uint32_t a = push_args(idx, n);
    uint32_t out = new_slots(nout);
    for (uint32_t k = 0; k < nout; ++k) value_[out + k] = y[k];
    records_.push(Record{op, out, nout, a, static_cast<uint32_t>(n), 0, 0.0});
    return out;
}

}  // namespace bt
