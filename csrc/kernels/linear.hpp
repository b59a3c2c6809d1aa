// The linear layer's three products over a chunk of rows: y = x W^T + b (forward), and
// gx += gy W, gW += gy^T x, gb += column sums of gy (backward).
// x: rows * in values; W: out * in, row-major (rows of W are output units, as nn.Linear's);
// b: out, or absent. Output rows * out. The products are the register-tiled kernels of gemm.hpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gemm.hpp"

namespace bt {

// Whether the forward's tiles read W transposed (in x out). A caller that keeps W^T across many
// calls (a program replaying many samples with fixed weights) can hand it in instead of scratch.
inline bool linear_forward_transposes_w(uint32_t rows, uint32_t in, uint32_t out) {
    return !gemm::forward_by_dots(rows, in, out) && gemm::forward_transposes_w(rows, in, out);
}

// Scratch (elements) the forward needs: the operand its tiles transpose, none for dot products
// or when W^T is supplied.
inline size_t linear_forward_scratch(uint32_t rows, uint32_t in, uint32_t out, bool have_wt = false) {
    if (have_wt && linear_forward_transposes_w(rows, in, out)) return 0;
    return gemm::forward_scratch(rows, in, out, 0, out);
}

// wt: W^T (in x out) when the caller has it (only read when the tiles would transpose W).
template <typename T>
inline void linear_fwd(const T* x, const T* W, const T* b, T* y, uint32_t rows, uint32_t in, uint32_t out,
                       T* scratch, const T* wt = nullptr) {
    gemm::forward(x, W, b, y, rows, in, out, 0, out, scratch, wt);
}

template <typename T>
inline void linear_bwd(const T* x, const T* W, const T* gy, T* gx, T* gW, T* gb, uint32_t rows, uint32_t in,
                       uint32_t out) {
    gemm::grad_input(gy, W, gx, rows, in, out, 0, rows);
    gemm::grad_weight(gy, x, gW, gb, rows, in, out, 0, out);
}

}  // namespace bt
