// The linear layer's three products over a chunk of rows: y = x W^T + b (forward), and
// gx += gy W, gW += gy^T x, gb += column sums of gy (backward).
// x: rows * in values; W: out * in, row-major (rows of W are output units, as nn.Linear's);
// b: out, or absent. Output rows * out. The products are the register-tiled kernels of gemm.hpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gemm.hpp"

namespace bt {

// Scratch (elements) the forward needs: the operand its tiles transpose, none for dot products.
inline size_t linear_forward_scratch(uint32_t rows, uint32_t in, uint32_t out) {
    return gemm::forward_scratch(rows, in, out, 0, out);
}

template <typename T>
inline void linear_fwd(const T* x, const T* W, const T* b, T* y, uint32_t rows, uint32_t in, uint32_t out,
                       T* scratch) {
    gemm::forward(x, W, b, y, rows, in, out, 0, out, scratch);
}

template <typename T>
inline void linear_bwd(const T* x, const T* W, const T* gy, T* gx, T* gW, T* gb, uint32_t rows, uint32_t in,
                       uint32_t out) {
    gemm::grad_input(gy, W, gx, rows, in, out, 0, rows);
    gemm::grad_weight(gy, x, gW, gb, rows, in, out, 0, out);
}

}  // namespace bt
