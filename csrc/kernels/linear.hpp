// The linear layer's three products over a chunk of rows: y = x W^T + b (forward), and
// gx += gy W, gW += gy^T x, gb += column sums of gy (backward).
// x: rows * in values; W: out * in, row-major (rows of W are output units, as nn.Linear's);
// b: out, or absent. Output rows * out.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "vec.hpp"

namespace bt {

// x: rows * in values; W: one span of out * in (row-major, rows of W are output units);
// b: one span of out, or absent. Output rows * out.
// Three regimes, one result (up to the rounding of sums in another order):
//  - one to three rows: out dot products over contiguous rows of W (a matvec; W read once per row);
//  - several rows of a narrow layer (in <= 64): W is transposed once into scratch and each output
//    row is built from rows of W^T (wt_rows_product), which vectorizes without the horizontal reductions
//    that dominate short dot products;
//  - several rows of a wide layer: output unit by output unit, so each row of W is loaded once
//    (from memory) for all rows of x (from cache), four rows of x per pass. (Measured: 4 x 4
//    register tiles and slicing the inner dimension gained nothing on top of this here; the
//    remaining cost is streaming x from L2 once per output unit, which only GEMM-style blocking
//    of all three dimensions would cut.)
template <typename T>
inline bool linear_uses_transpose(uint32_t rows, uint32_t in) { return rows >= 4 && in <= 64; }

// y_r[0..N) = b + sum_i x_r[i] * Wt[i][0..N) for R rows r of x (stride in) and N consecutive
// outputs (Wt row stride `stride`; y rows have that stride too), summed in i order in registers:
// one store per output instead of one per (output, input) as axpys over a row of y in memory
// would make, whose store-to-load chain bounded the narrow layers' forward. Two rows at a time
// share each load of Wt and give the FMA units twice the independent chains.
template <uint32_t N, uint32_t R, typename T>
inline void wt_block(const T* __restrict x, const T* __restrict wt, const T* b, T* __restrict y, uint32_t in,
                     uint32_t stride, uint32_t n = N) {
    T acc[R][N];
    for (uint32_t r = 0; r < R; ++r)
        for (uint32_t j = 0; j < n; ++j) acc[r][j] = b ? b[j] : T(0);
    for (uint32_t i = 0; i < in; ++i) {
        const T* w = wt + size_t(i) * stride;
        for (uint32_t r = 0; r < R; ++r) {
            const T xi = x[size_t(r) * in + i];
            for (uint32_t j = 0; j < n; ++j) acc[r][j] += xi * w[j];
        }
    }
    for (uint32_t r = 0; r < R; ++r)
        for (uint32_t j = 0; j < n; ++j) y[size_t(r) * stride + j] = acc[r][j];
}

// R rows of x times W^T (Wt: in x out, row-major), in blocks of 64, 32, 16 and 8 outputs (fixed
// sizes the compiler keeps in vector registers), the last few one by one. Each output is the same
// sum in the same order whatever its block.
template <uint32_t R, typename T>
inline void wt_rows_product(const T* x, const T* wt, const T* b, T* y, uint32_t in, uint32_t out) {
    uint32_t o = 0;
    for (; o + 64 <= out; o += 64) wt_block<64, R>(x, wt + o, b ? b + o : nullptr, y + o, in, out);
    if (o + 32 <= out) wt_block<32, R>(x, wt + o, b ? b + o : nullptr, y + o, in, out), o += 32;
    if (o + 16 <= out) wt_block<16, R>(x, wt + o, b ? b + o : nullptr, y + o, in, out), o += 16;
    if (o + 8 <= out) wt_block<8, R>(x, wt + o, b ? b + o : nullptr, y + o, in, out), o += 8;
    if (o < out) wt_block<8, R>(x, wt + o, b ? b + o : nullptr, y + o, in, out, out - o);
}

// wt (cols x rows) = W (rows x cols) transposed.
template <typename T>
inline void transpose(const T* W, T* wt, uint32_t rows, uint32_t cols) {
    for (uint32_t o = 0; o < rows; ++o)
        for (uint32_t i = 0; i < cols; ++i) wt[size_t(i) * rows + o] = W[size_t(o) * cols + i];
}

template <typename T>
inline void linear_fwd(const T* x, const T* W, const T* b, T* y, uint32_t rows, uint32_t in, uint32_t out,
                       T* wt_scratch, const T* wt_ready = nullptr) {
    if (rows < 4) {
        for (uint32_t r = 0; r < rows; ++r)
            for (uint32_t o = 0; o < out; ++o)
                y[size_t(r) * out + o] = (b ? b[o] : T(0)) + kernels::dot(W + size_t(o) * in, x + size_t(r) * in, in);
        return;
    }
    if (wt_ready || wt_scratch) {
        const T* wt = wt_ready;
        if (!wt) {
            transpose(W, wt_scratch, out, in);
            wt = wt_scratch;
        }
        uint32_t r = 0;
        for (; r + 2 <= rows; r += 2) wt_rows_product<2>(x + size_t(r) * in, wt, b, y + size_t(r) * out, in, out);
        if (r < rows) wt_rows_product<1>(x + size_t(r) * in, wt, b, y + size_t(r) * out, in, out);
        return;
    }
    for (uint32_t o = 0; o < out; ++o) {
        const T* w = W + size_t(o) * in;
        const T bo = b ? b[o] : T(0);
        uint32_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            T s[4];
            kernels::dot4(w, x + size_t(r) * in, x + size_t(r + 1) * in, x + size_t(r + 2) * in, x + size_t(r + 3) * in, in, s);
            for (int j = 0; j < 4; ++j) y[size_t(r + j) * out + o] = bo + s[j];
        }
        for (; r < rows; ++r) y[size_t(r) * out + o] = bo + kernels::dot(w, x + size_t(r) * in, in);
    }
}

// Backward of linear: gx += gy W, gW += gy^T x, gb += column sums of gy. With several rows the
// loops run output unit by output unit (four at a time for gx, four rows at a time for gW), so
// W and gW stream through once while x and gx stay in cache.
template <typename T>
inline void linear_bwd(const T* x, const T* W, const T* gy, T* gx, T* gW, T* gb, uint32_t rows, uint32_t in,
                       uint32_t out) {
    if (rows < 4) {
        for (uint32_t rr = 0; rr < rows; ++rr) {
            const T* gyr = gy + size_t(rr) * out;
            const T* xr = x + size_t(rr) * in;
            T* gxr = gx + size_t(rr) * in;
            for (uint32_t o = 0; o < out; ++o) {
                const T go = gyr[o];
                kernels::axpy(gxr, go, W + size_t(o) * in, in);
                kernels::axpy(gW + size_t(o) * in, go, xr, in);
                if (gb) gb[o] += go;
            }
        }
        return;
    }
    auto G = [&](uint32_t r, uint32_t o) { return gy[size_t(r) * out + o]; };
    uint32_t o = 0;
    for (; o + 4 <= out; o += 4) {
        const T *w0 = W + size_t(o) * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
        for (uint32_t r = 0; r < rows; ++r)
            kernels::axpy4(gx + size_t(r) * in, G(r, o), w0, G(r, o + 1), w1, G(r, o + 2), w2, G(r, o + 3), w3, in);
    }
    for (; o < out; ++o)
        for (uint32_t r = 0; r < rows; ++r) kernels::axpy(gx + size_t(r) * in, G(r, o), W + size_t(o) * in, in);
    for (o = 0; o < out; ++o) {
        T* gw = gW + size_t(o) * in;
        uint32_t r = 0;
        for (; r + 4 <= rows; r += 4)
            kernels::axpy4(gw, G(r, o), x + size_t(r) * in, G(r + 1, o), x + size_t(r + 1) * in, G(r + 2, o),
                     x + size_t(r + 2) * in, G(r + 3, o), x + size_t(r + 3) * in, in);
        for (; r < rows; ++r) kernels::axpy(gw, G(r, o), x + size_t(r) * in, in);
    }
    if (gb)
        for (o = 0; o < out; ++o) {
            T sacc = T(0);
            for (uint32_t r = 0; r < rows; ++r) sacc += G(r, o);
            gb[o] += sacc;
        }
}

}  // namespace bt
