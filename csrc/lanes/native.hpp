// The op table's expressions as functions, for lane programs compiled to native code at run time
// (src/burtorch/native/ generates a block function from a program's records and compiles it
// against this header). Each function is the expression of one row of ops.hpp, generated from
// the same X-macros the interpreter's kernels expand (lanes/kernels.hpp), so the generated code
// and the interpreter evaluate the same expressions: built with -ffp-contract=off (both), the
// same expression gives the same bits whether one kernel runs it per record or a generated loop
// runs all records fused, with the intermediates in registers.
//
//   unary (with or without an immediate c):  fwd_<op>(x, c), d_<op>(x, y, c) = dy/dx
//   binary:                                  fwd_<op>(a, b), da_<op>(a, b, y), db_<op>(a, b, y)
//
// pow_const's fast paths are pow_imm's branches on c: the generated code passes c as a literal,
// so after inlining the compiler keeps the one branch with_pow_imm (kernels.hpp) would take.
// The var-arity reductions are spelled out by the generator in kernels.hpp's order of
// operations, their multiply-adds through madd (reduce.hpp) as there.
#pragma once
#include <cstddef>

#include "../ops.hpp"
#include "../reduce.hpp"

namespace bt::native {

// The ABI between the core and a generated library (lanes/replay.hpp's LaneWorkspace::native and
// native_rows): burtorch_lanes_block(T* v, T* g, size_t B, int grads, T seed) with v, g the lane
// frame (slot s at s * B), and burtorch_lanes_rows(T* v, T* g, size_t B, T seed, const double* x,
// double* values, T* rows).
inline constexpr int kAbiVersion = 2;

// fn(p1, p2[, p3]) = expr, each op's formula from the op table; a parameter the formula does not
// use is cast away.
#define BT_NATIVE_FN2(fn, p1, p2, expr)              \
    template <typename T>                            \
    [[gnu::always_inline]] inline T fn(T p1, T p2) { \
        (void)p1;                                    \
        (void)p2;                                    \
        return (expr);                               \
    }
#define BT_NATIVE_FN3(fn, p1, p2, p3, expr)                \
    template <typename T>                                  \
    [[gnu::always_inline]] inline T fn(T p1, T p2, T p3) { \
        (void)p1;                                          \
        (void)p2;                                          \
        (void)p3;                                          \
        return (expr);                                     \
    }
#define BT_NATIVE_UI(name, fwd, dfdx)    \
    BT_NATIVE_FN2(fwd_##name, x, c, fwd) \
    BT_NATIVE_FN3(d_##name, x, y, c, dfdx)
#define BT_NATIVE_B(name, fwd, dfda, dfdb)  \
    BT_NATIVE_FN2(fwd_##name, a, b, fwd)    \
    BT_NATIVE_FN3(da_##name, a, b, y, dfda) \
    BT_NATIVE_FN3(db_##name, a, b, y, dfdb)
BT_UNARY_OPS(BT_NATIVE_UI)
BT_UNARY_IMM_OPS(BT_NATIVE_UI)
BT_BINARY_OPS(BT_NATIVE_B)
#undef BT_NATIVE_UI
#undef BT_NATIVE_B
#undef BT_NATIVE_FN2
#undef BT_NATIVE_FN3

}  // namespace bt::native
