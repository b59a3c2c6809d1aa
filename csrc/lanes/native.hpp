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

#define BT_NATIVE_UI(name, fwd, dfdx)                         \
    template <typename T>                                     \
    [[gnu::always_inline]] inline T fwd_##name(T x, T c) {    \
        (void)c;                                              \
        return (fwd);                                         \
    }                                                         \
    template <typename T>                                     \
    [[gnu::always_inline]] inline T d_##name(T x, T y, T c) { \
        (void)x;                                              \
        (void)y;                                              \
        (void)c;                                              \
        return (dfdx);                                        \
    }
BT_UNARY_OPS(BT_NATIVE_UI)
BT_UNARY_IMM_OPS(BT_NATIVE_UI)
#undef BT_NATIVE_UI

#define BT_NATIVE_B(name, fwd, dfda, dfdb)                     \
    template <typename T>                                      \
    [[gnu::always_inline]] inline T fwd_##name(T a, T b) {     \
        return (fwd);                                          \
    }                                                          \
    template <typename T>                                      \
    [[gnu::always_inline]] inline T da_##name(T a, T b, T y) { \
        (void)a;                                               \
        (void)b;                                               \
        (void)y;                                               \
        return (dfda);                                         \
    }                                                          \
    template <typename T>                                      \
    [[gnu::always_inline]] inline T db_##name(T a, T b, T y) { \
        (void)a;                                               \
        (void)b;                                               \
        (void)y;                                               \
        return (dfdb);                                         \
    }
BT_BINARY_OPS(BT_NATIVE_B)
#undef BT_NATIVE_B

}  // namespace bt::native
