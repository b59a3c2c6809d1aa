// The three products of a linear layer (y = x W^T + b and its backward), cache-friendly and
// register-tiled, for float and double, over the SIMD register chosen at build time (simd.hpp).
//
// Layout (as nn.Linear): x is rows x in, W is out x in, b is out, y is rows x out, all
// row-major and contiguous.
//   forward:      y[r, o]   = b[o] + sum_i x[r, i] W[o, i]
//   grad input:   gx[r, i] += sum_o gy[r, o] W[o, i]
//   grad weight:  gW[o, i] += sum_r gy[r, o] x[r, i],   gb[o] += sum_r gy[r, o]
//   (or, with a weight sink: W[o, i] = sink.update(W[o, i], 0 + sum_r gy[r, o] x[r, i]), the
//   gradient consumed where it is finished, as an optimizer step fused into the sweep)
//
// Each product takes a sub-range (forward and grad weight: output units [o0, o1); grad input:
// rows [r0, r1)) so that threads can share one layer. Whatever the split, every element is the
// same chain of fused multiply-adds in index order, started from the value it accumulates into
// (the bias for the forward), so a split gives the same bits as the whole. The one exception is
// the forward over a few rows or outputs (forward_by_dots), which takes dot products along
// `in`; that choice too depends only on the layer's shape, not on the split.
//
// Why no BLAS: on the target shapes these kernels hold their own against the OpenBLAS numpy
// ships (burtorch_bench.gemm_floor compares them, one thread), and they win where a
// BLAS call's overhead dominates: one row, or a few rows of a small layer. And they keep
// `pip install .` free of any binary dependency.
//
// The micro-kernel: an MR x NR tile of the result held in registers (NR = NV SIMD widths along
// the contiguous dimension of the result), updated by one k step at a time: NV loads of a row
// of B and MR broadcasts of A. A is read through two strides, so x, gy and gy^T all serve as
// A without a copy; B is read row by row with a leading dimension, its last vector masked.
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "../huge_buffer.hpp"
#include "simd.hpp"

namespace bt::gemm {

using simd::Simd;

// The forward takes dot products along `in` for a few rows or a few outputs of a wide input
// (W is read once, in order, and no scratch is needed); otherwise it runs tiles. Dots win for a
// few rows or outputs of a wide input; tiles win elsewhere, and at any size for narrow inputs,
// where a dot product is mostly its final reduction. `out` is the
// layer's, not a sub-range's, so a split does not change the path.
inline bool forward_by_dots(size_t rows, size_t in, size_t out) {
    return rows < 2 || (in >= 64 && (rows < 8 || out < 8));
}

// Register tile: MR rows of accumulators times NV vectors. 32 registers on AVX-512 and on
// aarch64's NEON hold 8 x 2 accumulators with room for loads; 16 on AVX2 hold 6 x 2.
#if defined(BT_SIMD_AVX512) || defined(BT_SIMD_NEON)
inline constexpr int kMR = 8;
#elif defined(BT_SIMD_AVX2)
inline constexpr int kMR = 6;
#else
inline constexpr int kMR = 4;
#endif
inline constexpr int kNV = 2;

template <typename T>
using Vec = typename Simd<T>::V;

// Lanes of vector v in a panel `width` wide.
template <typename T>
BT_ALWAYS_INLINE int lanes(int width, int v) {
    return std::min(Simd<T>::W, width - v * Simd<T>::W);
}

// The first n lanes at p (the rest zero), and their store: a whole register unmasked. A masked
// load costs more than a plain one, so full-width tiles load unmasked (here and in accumulate).
template <typename T>
BT_ALWAYS_INLINE Vec<T> load_lanes(const T* p, int n) {
    return n == Simd<T>::W ? Simd<T>::load(p) : Simd<T>::load(p, n);
}
template <typename T>
BT_ALWAYS_INLINE void store_lanes(T* p, Vec<T> v, int n) {
    n == Simd<T>::W ? Simd<T>::store(p, v) : Simd<T>::store(p, v, n);
}

// Cache lines a tile brings into L2 while it runs, one per k step for its first `lines` steps:
// what the tiles after it will read from memory (a row block of W, say), named by the caller,
// so that those reads overlap this tile's arithmetic instead of stalling the next one.
// The lines come in pairs `stride` bytes apart: 128 (one contiguous run), or a row of a wider
// matrix, for a block one panel wide (NR elements, 128 bytes).
struct Ahead {
    const char* p = nullptr;
    size_t lines = 0;
    size_t stride = 128;
};

// acc[m][v] += sum_{k < K} A(m, k) * B(k, v-th vector), A(m, k) = a[m * am + k * ak],
// B(k, .) = b + k * ldb, `width` valid columns (the rest load as zeros).
// Written with fold expressions over constant indices, not loops: with loop indices GCC keeps
// the tile in memory and stores every accumulator on each k step (SIMD types may alias
// anything), at a third of the speed. The lambdas that expand the folds are forced inline: left
// to itself GCC made the outer one a call per tile, so the tile went through memory between its
// init, its k loop and its finish (build/cpp/gemm_kernels shows the difference). `ahead`: lines
// to prefetch meanwhile.
template <typename T, int MR, int NV>
BT_ALWAYS_INLINE void accumulate(Vec<T> (&acc)[MR][NV], const T* a, size_t am, size_t ak, const T* b, size_t ldb,
                                 size_t K, int width, Ahead ahead = {}) {
    using S = Simd<T>;
    const int last = width - (NV - 1) * S::W;
    const bool full = last == S::W;
    [&]<int... E>(std::integer_sequence<int, E...>) BT_LAMBDA_INLINE {
        Vec<T> c[MR][NV];
        ((c[E / NV][E % NV] = acc[E / NV][E % NV]), ...);
        for (size_t k = 0; k < K; ++k) {
            if (k < ahead.lines)  // prefetcht1: into L2
                __builtin_prefetch(ahead.p + (k >> 1) * ahead.stride + (k & 1) * 64, 0, 2);
            Vec<T> bv[NV];
            [&]<int... V>(std::integer_sequence<int, V...>) BT_LAMBDA_INLINE {
                ((bv[V] = V + 1 < NV || full ? S::load(b + V * S::W) : S::load(b + V * S::W, last)), ...);
            }(std::make_integer_sequence<int, NV>{});
            ((c[E / NV][E % NV] = S::madd(S::set1(a[(E / NV) * am]), bv[E % NV], c[E / NV][E % NV])), ...);
            a += ak;
            b += ldb;
        }
        ((acc[E / NV][E % NV] = c[E / NV][E % NV]), ...);
    }(std::make_integer_sequence<int, MR * NV>{});
}

// Calls f(integral_constant<int, mr>) for a runtime mr in 1..M.
template <int M, class F>
BT_ALWAYS_INLINE void with_rows(int mr, F&& f) {
    if constexpr (M >= 1) {
        if (mr == M) return f(std::integral_constant<int, M>{});
        with_rows<M - 1>(mr, f);
    }
}

// Elements of B packed at once: 512 KiB, half of a core's L2 here, so that the packed panels
// stay there while every row block reads them.
template <typename T>
inline constexpr size_t kPackElements = (size_t(512) << 10) / sizeof(T);

// Per-thread buffers for packed operands: grown to the largest call, then reused (no allocation
// in a training loop's steady state). Each pool worker packs into its own.
template <typename T, int Which>
inline T* pack_buffer(size_t n) {
    thread_local HugeBuffer<T> buf;
    buf.resize(n);
    return buf.data();
}

// Elements between the starts of two packed panels of K rows: K NR plus one cache line, so
// that panels do not start a multiple of 4 KiB apart. Packing B writes one row of every panel
// in turn; with K NR a multiple of 4 KiB, as on power-of-two layers, those writes all fall into
// one L1 set, and the panels of a wide W evict each other's lines before they are filled.
template <typename T>
inline constexpr size_t panel_stride(size_t K) {
    return K * kNV * Simd<T>::W + 64 / sizeof(T);
}

// B (K x N, leading dimension ldb) made contiguous panel by panel: panel p (columns
// [p NR, p NR + NR)) at dst + p panel_stride(K), its row k at + k NR (a vector cut by N is zero-filled past
// N; vectors wholly past N are left unwritten: the tiles' masked loads never read them). The tiles then
// read each panel as one stream instead of K rows `ldb` apart (rows a page apart alias in L1 and
// miss the TLB at every k step). B is read row by row, in memory order.
template <typename T>
inline void pack_panels(const T* b, size_t ldb, size_t K, size_t N, T* dst) {
    using S = Simd<T>;
    constexpr int NR = kNV * S::W;
    const size_t panels = (N + NR - 1) / NR;
    for (size_t k = 0; k < K; ++k, b += ldb)
        for (size_t p = 0; p < panels; ++p) {
            const int width = int(std::min<size_t>(NR, N - p * NR));
            T* d = dst + p * panel_stride<T>(K) + k * NR;
            for (int v = 0; v < kNV && v * S::W < width; ++v)  // vectors wholly past N are never read
                S::store(d + v * S::W, load_lanes(b + p * NR + v * S::W, lanes<T>(width, v)));
        }
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (both at most kTransposeBlock: 16
// with AVX-512, 8 with AVX2): one block of a transpose, moved as that many vectors through
// registers instead of element by element (a scalar transpose is a large part of a narrow
// layer's forward, and it runs on every chunk's forward). Only the rows x cols block is read and written. Moving values
// changes no bit.
#if defined(BT_SIMD_AVX512)
#define BT_REGISTER_TRANSPOSE 1
inline constexpr int kTransposeBlock = 16;
BT_ALWAYS_INLINE void transpose_block(const float* src, size_t lds, int rows, int cols, float* dst, size_t ldd) {
    using S = Simd<float>;
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < rows ? S::load(src + j * lds, cols) : S::zero();
    // 1: within 128-bit lanes, interleave row pairs; 2: interleave pairs of those as doubles, so
    // that lane L of u[4g + q] holds rows 4g .. 4g + 3 at column 4L + q; 3: a 4 x 4 transpose of
    // the lanes of u[q], u[4 + q], u[8 + q], u[12 + q] gives columns q, 4 + q, 8 + q, 12 + q.
    // (The all-lanes masked forms: GCC 12's plain ones start from an "undefined" register that
    // -Wmaybe-uninitialized reports once inlined. With a full mask they are the same instructions.)
    const __mmask16 all = 0xffff;
    const __mmask8 all8 = 0xff;
    __m512 t[16], u[16];
    for (int m = 0; m < 8; ++m) {
        const __m512 a = r[2 * m], b = r[2 * m + 1];
        t[2 * m] = _mm512_mask_unpacklo_ps(a, all, a, b);
        t[2 * m + 1] = _mm512_mask_unpackhi_ps(a, all, a, b);
    }
    for (int g = 0; g < 4; ++g) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(a, all8, a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(a, all8, a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(b, all8, b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(b, all8, b, d));
    }
    auto lanes4 = [all](__m512 a, __m512 b, auto imm) {
        return _mm512_mask_shuffle_f32x4(a, all, a, b, decltype(imm)::value);
    };
    using Lo = std::integral_constant<int, 0x44>;
    using Hi = std::integral_constant<int, 0xEE>;
    using Even = std::integral_constant<int, 0x88>;
    using Odd = std::integral_constant<int, 0xDD>;
    for (int q = 0; q < 4; ++q) {
        const __m512 v0 = lanes4(u[q], u[4 + q], Lo{}), v1 = lanes4(u[q], u[4 + q], Hi{});
        const __m512 v2 = lanes4(u[8 + q], u[12 + q], Lo{}), v3 = lanes4(u[8 + q], u[12 + q], Hi{});
        r[q] = lanes4(v0, v2, Even{});
        r[4 + q] = lanes4(v0, v2, Odd{});
        r[8 + q] = lanes4(v1, v3, Even{});
        r[12 + q] = lanes4(v1, v3, Odd{});
    }
    for (int c = 0; c < cols; ++c) S::store(dst + c * ldd, r[c], rows);
}
#elif defined(BT_SIMD_AVX2)
#define BT_REGISTER_TRANSPOSE 1
inline constexpr int kTransposeBlock = 8;
BT_ALWAYS_INLINE void transpose_block(const float* src, size_t lds, int rows, int cols, float* dst, size_t ldd) {
    using S = Simd<float>;
    __m256 r[8], t[8], u[8];
    for (int j = 0; j < 8; ++j) r[j] = j < rows ? load_lanes(src + j * lds, cols) : S::zero();
    // 1: interleave row pairs within 128-bit halves; 2: pairs of those as 64-bit elements, so
    // that half h of u[4g + q] holds rows 4g .. 4g + 3 at column 4h + q; 3: the halves of u[q]
    // and u[4 + q] give columns q and 4 + q.
    for (int m = 0; m < 4; ++m) {
        t[2 * m] = _mm256_unpacklo_ps(r[2 * m], r[2 * m + 1]);
        t[2 * m + 1] = _mm256_unpackhi_ps(r[2 * m], r[2 * m + 1]);
    }
    for (int g = 0; g < 2; ++g) {
        u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int q = 0; q < 4; ++q) {
        r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
    for (int c = 0; c < cols; ++c) store_lanes(dst + c * ldd, r[c], rows);
}
#endif

// The same panels from B given transposed (B(k, n) = bt[n * ldb + k]): floats with AVX-512 or
// AVX2 in blocks transposed in registers; otherwise each row of bt is read once, in order, and spread
// down its panel's column, KB rows of the panel at a time. Columns past N are left unwritten:
// the tiles' masked loads never read them.
template <typename T>
inline void pack_panels_transposed(const T* bt, size_t ldb, size_t K, size_t N, T* dst) {
    constexpr int NR = kNV * Simd<T>::W;
    const size_t panels = (N + NR - 1) / NR;
#if defined(BT_REGISTER_TRANSPOSE)
    if constexpr (std::is_same_v<T, float>) {
        constexpr int B = kTransposeBlock;
        for (size_t p = 0; p < panels; ++p) {
            T* d = dst + p * panel_stride<T>(K);
            const int c1 = int(std::min<size_t>(NR, N - p * NR));
            for (int c0 = 0; c0 < c1; c0 += B)
                for (size_t k0 = 0; k0 < K; k0 += B)
                    transpose_block(bt + (p * NR + c0) * ldb + k0, ldb, std::min(B, c1 - c0),
                                    int(std::min<size_t>(B, K - k0)), d + k0 * NR + c0, NR);
        }
        return;
    }
#endif
    constexpr size_t KB = 64;  // rows of the panel filled per pass: its lines stay in L1 until full
    for (size_t p = 0; p < panels; ++p) {
        T* d = dst + p * panel_stride<T>(K);
        const size_t c1 = std::min<size_t>(NR, N - p * NR);
        for (size_t k0 = 0; k0 < K; k0 += KB) {
            const size_t k1 = std::min(K, k0 + KB);
            for (size_t c = 0; c < c1; ++c) {
                const T* row = bt + (p * NR + c) * ldb;
                for (size_t k = k0; k < k1; ++k) d[k * NR + c] = row[k];
            }
        }
    }
}

// dst[k * kMR + m] = A(m, k) for m < mr: a row block of an A read across k with a stride (gy^T
// in the weight gradient), packed so that each k step broadcasts from one cache line.
template <typename T>
inline void pack_rows(const T* a, size_t am, size_t ak, size_t K, int mr, T* dst) {
    for (size_t k = 0; k < K; ++k, dst += kMR)
        for (int m = 0; m < mr; ++m) dst[m] = a[m * am + k * ak];
}

// Share `part` of `parts` of the cache lines of rows [m0, m1) of a row-major matrix (ld elements
// a row, rows contiguous); nothing past its last row.
template <typename T>
inline Ahead ahead_rows(const T* base, size_t ld, size_t m0, size_t m1, size_t part, size_t parts) {
    if (m0 >= m1) return {};
    const size_t lines = ((m1 - m0) * ld * sizeof(T) + 63) / 64, share = (lines + parts - 1) / parts;
    const size_t first = std::min(lines, part * share);
    return {reinterpret_cast<const char*>(base + m0 * ld) + first * 64, std::min(share, lines - first)};
}

// For tiles taken row block by row block (m_outer) across N columns: the next row block of a
// row-major matrix of `rows` rows whose row m the tiles of row m read or write in place (A's rows
// of W in the forward, the rows of gW or W a weight gradient finishes into), shared between the
// tiles of this block.
template <typename T>
inline auto ahead_of_rows(const T* base, size_t ld, size_t rows, size_t N) {
    constexpr size_t NR = kNV * Simd<T>::W;
    const size_t panels = (N + NR - 1) / NR;
    return [=](size_t m0, size_t n0) {
        return ahead_rows(base, ld, m0 + kMR, std::min(rows, m0 + 2 * kMR), n0 / NR, panels);
    };
}

struct NoAhead {
    Ahead operator()(size_t, size_t) const { return {}; }
};

// The tiles of an M x N result; see for_each_tile. B is either rows ldb apart or (packed) panels
// of K rows of NR, panel_stride(K) apart: one instantiation serves both (a second, per kind of
// B, had grown the module's code by a third).
template <typename T, class Init, class Finish, class AheadOf>
inline void run_tiles(size_t M, size_t N, size_t K, const T* a, size_t am, size_t ak, const T* b, size_t ldb,
                      bool packed, bool m_outer, Init& init, Finish& finish, AheadOf& ahead_of) {
    constexpr int NR = kNV * Simd<T>::W;
    if (packed) ldb = NR;
    auto b_at = [&](size_t n0) { return packed ? b + (n0 / NR) * panel_stride<T>(K) : b + n0; };
    auto one = [&](size_t m0, size_t n0, const T* am0, size_t am_, size_t ak_, const T* bn0) {
        const int mr = int(std::min<size_t>(kMR, M - m0));
        const int width = int(std::min<size_t>(NR, N - n0));
        auto run = [&](auto mr_c, auto nv_c) {
            constexpr int R = decltype(mr_c)::value, NV = decltype(nv_c)::value;
            Vec<T> acc[R][NV];
            init(acc, m0, n0, width);
            accumulate<T, R, NV>(acc, am0, am_, ak_, bn0, ldb, K, width, ahead_of(m0, n0));
            finish(acc, m0, n0, width);
        };
        with_rows<kMR>(mr, [&](auto mr_c) {
            if (width > Simd<T>::W)
                run(mr_c, std::integral_constant<int, kNV>{});
            else
                run(mr_c, std::integral_constant<int, 1>{});
        });
    };
    if (m_outer) {
        // A's row block is packed once per block when it is strided along k and read by
        // several panels.
        const bool pack_a = ak != 1 && N > size_t(NR) && K > 1;
        T* ap = pack_a ? pack_buffer<T, 1>(K * kMR) : nullptr;
        for (size_t m0 = 0; m0 < M; m0 += kMR) {
            const T* am0 = a + m0 * am;
            size_t am_ = am, ak_ = ak;
            if (ap) {
                pack_rows(am0, am, ak, K, int(std::min<size_t>(kMR, M - m0)), ap);
                am0 = ap, am_ = 1, ak_ = kMR;
            }
            for (size_t n0 = 0; n0 < N; n0 += NR) one(m0, n0, am0, am_, ak_, b_at(n0));
        }
    } else {
        for (size_t n0 = 0; n0 < N; n0 += NR)
            for (size_t m0 = 0; m0 < M; m0 += kMR) one(m0, n0, a + m0 * am, am, ak, b_at(n0));
    }
}

// Every MR x NR tile of an M x N result: init(acc, m0, n0, width), accumulate over K,
// finish(acc, m0, n0, width). `m_outer` picks which operand stays in cache across tiles:
// true keeps A's rows (B streams once per row block), false keeps a panel of B.
// Operands read by more than one tile are packed first (B's panels, and A's row blocks when A
// is strided along k); packing moves values, never the order of the multiply-adds, so every
// element's chain, and its bits, are unchanged.
// `b_trans`: b holds B transposed (B(k, n) = b[n * ldb + k]); it is then always packed.
// `ahead_of(m0, n0)`: the lines the tile at (m0, n0) prefetches (none by default).
template <typename T, class Init, class Finish, class AheadOf = NoAhead>
inline void for_each_tile(size_t M, size_t N, size_t K, const T* a, size_t am, size_t ak, const T* b, size_t ldb,
                          bool m_outer, bool b_trans, Init&& init, Finish&& finish, AheadOf ahead_of = {}) {
    constexpr int NR = kNV * Simd<T>::W;
    // B is packed when more than one row block reads it and it fits the packing budget (callers
    // with a long K block it: grad_input).
    const size_t panels = (N + NR - 1) / NR;
    const bool pack_b =
        b_trans || (M > size_t(kMR) && ldb != size_t(NR) && K > 1 && panels * K * NR <= kPackElements<T>);
    T* bp = pack_b ? pack_buffer<T, 0>(panels * panel_stride<T>(K)) : nullptr;
    if (b_trans)
        pack_panels_transposed(b, ldb, K, N, bp);
    else if (bp)
        pack_panels(b, ldb, K, N, bp);
    run_tiles<T>(M, N, K, a, am, ak, bp ? bp : b, ldb, bp != nullptr, m_outer, init, finish, ahead_of);
}

// The same over a B already packed by pack_panels (K rows, panel_stride(K) apart).
template <typename T, class Init, class Finish, class AheadOf = NoAhead>
inline void for_each_packed_tile(size_t M, size_t N, size_t K, const T* a, size_t am, size_t ak, const T* packed,
                                 bool m_outer, Init&& init, Finish&& finish, AheadOf ahead_of = {}) {
    run_tiles<T>(M, N, K, a, am, ak, packed, 0, true, m_outer, init, finish, ahead_of);
}

// ---- tile initialisers and finishers -----------------------------------------------------
// acc <- the tile of C (row-major, leading dimension ldc) at (m0, n0).
template <typename T>
auto from_tile(const T* C, size_t ldc) {
    return [=](auto& acc, size_t m0, size_t n0, int width) {
        constexpr int R = std::extent_v<std::remove_reference_t<decltype(acc)>, 0>;
        constexpr int NV = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
        for (int m = 0; m < R; ++m)
            for (int v = 0; v < NV; ++v)
                acc[m][v] = load_lanes(C + (m0 + m) * ldc + n0 + v * Simd<T>::W, lanes<T>(width, v));
    };
}
// The tile -> C. as_sum: 0 + acc instead, what adding the chain into zeroed memory stores (a
// chain from zero ends at -0 only where it underflows, and 0 + -0 is +0). A flag rather than a
// finisher of its own: each finisher type instantiates the whole tile loop again (code size,
// and a training process's peak memory with it).
template <typename T>
auto to_tile(T* C, size_t ldc, bool as_sum = false) {
    return [=](auto& acc, size_t m0, size_t n0, int width) {
        constexpr int R = std::extent_v<std::remove_reference_t<decltype(acc)>, 0>;
        constexpr int NV = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
        for (int m = 0; m < R; ++m)
            for (int v = 0; v < NV; ++v)
                store_lanes(C + (m0 + m) * ldc + n0 + v * Simd<T>::W,
                            as_sum ? Simd<T>::add(acc[m][v], Simd<T>::zero()) : acc[m][v], lanes<T>(width, v));
    };
}

// The same afterwards, over rows [r0, r1) and columns [i0, i1) of C.
template <typename T>
inline void add_zero(T* C, size_t ldc, size_t r0, size_t r1, size_t i0, size_t i1) {
    for (size_t r = r0; r < r1; ++r)
        for (size_t i = i0; i < i1; ++i) C[r * ldc + i] += T(0);
}

// acc <- zeros: the start of a chain whose gradient would accumulate into a zeroed gW.
template <typename T>
auto zero_tile() {
    return [](auto& acc, size_t, size_t, int) {
        for (auto& row : acc)
            for (auto& v : row) v = Simd<T>::zero();
    };
}
// ---- weight sinks --------------------------------------------------------------------------
// Where a weight gradient's finished chains can go instead of gW: a sink updates W in place from
// each element's gradient as soon as it is complete (an optimizer's step fused into the sweep:
// optim.hpp's SgdSink). Each chain starts from zero, as it would in a zeroed gW, so the sink sees
// the gradient gW would have held, and W is never read by a product after its update. A sink
// type S (of value type T) has:
//   T* W;                                 the weight matrix (out x in, row-major)
//   T update(T w, T g) const;             one element's new value from its gradient g
//   Vec<T> update_lanes(Vec<T> w, Vec<T> g) const;   the same lane by lane, with the same
//                                          operations (so tiles and scalar paths agree to the bit)
//   void specialized(F f) const;          f(s): s an equivalent sink whose update may be fixed at
//                                          compile time (such as a zero weight decay), for loops
//                                          that pay for a branch per element
// The kernels copy a sink into a local before their loops: stores through W could otherwise alias
// its fields.

// No sink: the kernels' default, which adds the chains into gW.
struct NoSink {};
template <class Sink>
inline constexpr bool kHasSink = !std::is_same_v<Sink, NoSink>;

// The sink's update on the tile of W (row-major, leading dimension ldw) at (m0, n0), acc its
// gradient. Every row of the tile is loaded before any is stored: rows ldw apart often share
// their low address bits (4 KiB on a 1024-wide layer), and a load after a store to such an
// address waits for it.
template <typename T, class Sink>
auto sink_to_tile(const Sink& sink, T* W, size_t ldw) {
    return [=](auto& acc, size_t m0, size_t n0, int width) {
        using S = Simd<T>;
        constexpr int R = std::extent_v<std::remove_reference_t<decltype(acc)>, 0>;
        constexpr int NV = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
        const Sink s = sink;  // a local: the stores below could otherwise alias the closure's copy
        Vec<T> w[R][NV];
        for (int m = 0; m < R; ++m)
            for (int v = 0; v < NV; ++v) w[m][v] = load_lanes(W + (m0 + m) * ldw + n0 + v * S::W, lanes<T>(width, v));
        for (int m = 0; m < R; ++m)
            for (int v = 0; v < NV; ++v)
                store_lanes(W + (m0 + m) * ldw + n0 + v * S::W, s.update_lanes(w[m][v], acc[m][v]), lanes<T>(width, v));
    };
}

// ---- transposes into scratch ---------------------------------------------------------------
// dst (cols x rows, leading dimension ld) = src^T, src rows x cols with leading dimension lds.
// Blocked so that both sides stay in cache lines. Within a block the inner loop walks along a
// row of the side with the wider leading dimension, so the 16 accesses that step across rows are
// those of the narrower one: 16 steps of a 4 KiB row (a 1024-wide layer) all fall into one L1
// set, and writing y from y^T that way would take most of a wide forward's time.
template <typename T>
inline void transpose(const T* src, size_t rows, size_t cols, size_t lds, T* dst, size_t ld) {
    constexpr size_t B = 16;
#if defined(BT_REGISTER_TRANSPOSE)
    if constexpr (std::is_same_v<T, float>) {
        constexpr size_t R = kTransposeBlock;
        for (size_t r0 = 0; r0 < rows; r0 += R)
            for (size_t c0 = 0; c0 < cols; c0 += R)
                transpose_block(src + r0 * lds + c0, lds, int(std::min(R, rows - r0)), int(std::min(R, cols - c0)),
                                dst + c0 * ld + r0, ld);
        return;
    }
#endif
    for (size_t r0 = 0; r0 < rows; r0 += B)
        for (size_t c0 = 0; c0 < cols; c0 += B) {
            const size_t r1 = std::min(rows, r0 + B), c1 = std::min(cols, c0 + B);
            if (ld >= lds)  // dst's stride is the wider: write its rows in order, read down src
                for (size_t c = c0; c < c1; ++c)
                    for (size_t r = r0; r < r1; ++r) dst[c * ld + r] = src[r * lds + c];
            else  // read src's rows in order, write down dst
                for (size_t r = r0; r < r1; ++r)
                    for (size_t c = c0; c < c1; ++c) dst[c * ld + r] = src[r * lds + c];
        }
}

// ---- dot products along `in` (forward over a few rows) ------------------------------------
// res[j] = sum_i a[i] * w[j * ldw + i] for j < NO, four interleaved accumulators per output
// (FMA latency), reduced in a fixed order. One output alone gets exactly the same arithmetic.
template <typename T, int NO>
BT_ALWAYS_INLINE void dots(const T* a, const T* w, size_t ldw, size_t n, T* res) {
    using S = Simd<T>;
    constexpr int A = 4;
    Vec<T> acc[NO][A];
    for (int j = 0; j < NO; ++j)
        for (int q = 0; q < A; ++q) acc[j][q] = S::zero();
    size_t i = 0;
    for (; i + A * S::W <= n; i += A * S::W)
#pragma GCC unroll 4
        for (int q = 0; q < A; ++q) {
            const Vec<T> av = S::load(a + i + q * S::W);
#pragma GCC unroll 4
            for (int j = 0; j < NO; ++j) acc[j][q] = S::madd(av, S::load(w + j * ldw + i + q * S::W), acc[j][q]);
        }
    for (int q = 0; i < n; ++q, i += S::W) {
        const int l = int(std::min<size_t>(S::W, n - i));
        const Vec<T> av = S::load(a + i, l);
        for (int j = 0; j < NO; ++j) acc[j][q] = S::madd(av, S::load(w + j * ldw + i, l), acc[j][q]);
    }
    for (int j = 0; j < NO; ++j) {
        T l[S::W];
        S::store(l, S::add(S::add(acc[j][0], acc[j][1]), S::add(acc[j][2], acc[j][3])));
        T s = T(0);
        for (int q = 0; q < S::W; ++q) s += l[q];
        res[j] = s;
    }
}

// ---- chained axpys (few rows) ---------------------------------------------------------------
// y[i] = madd(alpha[NJ-1], x_{NJ-1}[i], ... madd(alpha[0], x_0[i], y[i])), x_j = x + j * ldx: the
// same chain, in the same order, as the tiles build, so either path gives the same bits.
template <typename T, int NJ>
BT_ALWAYS_INLINE void axpy_chain(T* y, const T* alpha, const T* x, size_t ldx, size_t n) {
    using S = Simd<T>;
    Vec<T> a[NJ];
    for (int j = 0; j < NJ; ++j) a[j] = S::set1(alpha[j]);
    size_t i = 0;
    for (; i + S::W <= n; i += S::W) {
        Vec<T> acc = S::load(y + i);
#pragma GCC unroll 4
        for (int j = 0; j < NJ; ++j) acc = S::madd(a[j], S::load(x + j * ldx + i), acc);
        S::store(y + i, acc);
    }
    if (i < n) {
        const int l = int(n - i);
        Vec<T> acc = S::load(y + i, l);
        for (int j = 0; j < NJ; ++j) acc = S::madd(a[j], S::load(x + j * ldx + i, l), acc);
        S::store(y + i, acc, l);
    }
}

// Row counts below which the gradients stream W (or gW) row by row with chained axpys instead
// of tiles: a tile's rows would be mostly empty, and rows of W are read in order. grad_input
// does the same for fewer than 8 outputs, where a tile would load and store its block of gx
// for a handful of k steps.
inline constexpr size_t kAxpyRows = 4;

// ---- the products ----------------------------------------------------------------------------

// Scratch (elements of T) the forward needs for these rows and output units.
// Which operand the tiled forward transposes for n_out output units: W (in * n_out moves) or
// x (rows * in moves into packed panels, plus the rows * n_out of y^T transposed into y),
// whichever moves less. Scratch: W^T (in * n_out) or y^T (n_out * rows).
inline bool forward_transposes_w(size_t rows, size_t in, size_t n_out) { return in * n_out <= rows * (in + n_out); }

inline size_t forward_scratch(size_t rows, size_t in, size_t out, size_t o0, size_t o1) {
    if (forward_by_dots(rows, in, out)) return 0;
    return forward_transposes_w(rows, in, o1 - o0) ? in * (o1 - o0) : (o1 - o0) * rows;
}

// y[r, o] = b[o] + sum_i x[r, i] W[o, i] (b may be null) for all rows and o in [o0, o1).
// `scratch` holds forward_scratch(rows, in, out, o0, o1) elements (may be null when that is 0).
// `wt`, if given, is W^T (in x out, leading dimension out): the tiles that would transpose W into
// scratch read it instead (the same products, so the same bits).
template <typename T>
inline void forward(const T* x, const T* W, const T* b, T* y, size_t rows, size_t in, size_t out, size_t o0, size_t o1,
                    T* scratch, const T* wt = nullptr) {
    if (o0 >= o1) return;
    if (forward_by_dots(rows, in, out)) {
        // Four rows of W at a time (read from memory once, then from cache for every row of x).
        size_t o = o0;
        for (; o + 4 <= o1; o += 4)
            for (size_t r = 0; r < rows; ++r) dots<T, 4>(x + r * in, W + o * in, in, in, y + r * out + o);
        for (; o < o1; ++o)
            for (size_t r = 0; r < rows; ++r) dots<T, 1>(x + r * in, W + o * in, in, in, y + r * out + o);
        if (b)
            for (size_t r = 0; r < rows; ++r)
                for (o = o0; o < o1; ++o) y[r * out + o] += b[o];
        return;
    }
    // Vectors run along a contiguous dimension of the result, so one operand is transposed
    // into scratch: W (giving y row by row, vectors along o) or x (giving y^T, vectors along
    // rows, stored transposed). Both are the same chain of multiply-adds over i from b[o], so
    // which one runs does not change a bit.
    const size_t n_out = o1 - o0;
    if (forward_transposes_w(rows, in, n_out)) {
        // W's rows are the columns of B = W^T: within the packing budget they go straight into
        // packed panels (one pass over W), not into a transposed copy that is then packed again
        // (two passes; the copy is kept for blocks too large to pack, and W^T a caller supplies).
        constexpr size_t NR = kNV * Simd<T>::W;
        const bool direct = !wt && (n_out + NR - 1) / NR * NR * in <= kPackElements<T>;
        const T* wt_block = wt ? wt + o0 : direct ? W + o0 * in : scratch;  // W[o0:o1]^T, in x n_out
        const size_t ldw = wt ? out : direct ? in : n_out;
        if (!wt && !direct) transpose(W + o0 * in, n_out, in, in, scratch, n_out);
        auto init = [=](auto& acc, size_t, size_t n0, int width) {
            constexpr int R = std::extent_v<std::remove_reference_t<decltype(acc)>, 0>;
            constexpr int NV = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
            for (int v = 0; v < NV; ++v) {
                const Vec<T> bv = b ? load_lanes(b + o0 + n0 + v * Simd<T>::W, lanes<T>(width, v)) : Simd<T>::zero();
                for (int m = 0; m < R; ++m) acc[m][v] = bv;
            }
        };
        for_each_tile<T>(rows, n_out, in, x, in, 1, wt_block, ldw, false, direct, init, to_tile(y + o0, out));
        return;
    }
    // y^T (n_out x rows) is built in scratch, tile by tile with vector stores, then transposed
    // into y; x is read transposed straight into the packed panels.
    auto init = [=](auto& acc, size_t m0, size_t, int) {
        constexpr int R = std::extent_v<std::remove_reference_t<decltype(acc)>, 0>;
        constexpr int NV = std::extent_v<std::remove_reference_t<decltype(acc)>, 1>;
        for (int m = 0; m < R; ++m)
            for (int v = 0; v < NV; ++v) acc[m][v] = Simd<T>::set1(b ? b[o0 + m0 + m] : T(0));
    };
    // A = W[o0:o1] (row o at o * in), B = x^T; rows of W stay in cache while x^T streams. The
    // next row block of W comes into L2 meanwhile, shared between the tiles of this one.
    for_each_tile<T>(n_out, rows, in, W + o0 * in, in, 1, x, in, true, true, init, to_tile(scratch, rows),
                     ahead_of_rows(W + o0 * in, in, n_out, rows));
    transpose(scratch, n_out, rows, rows, y + o0, out);
}

// Rows of W (k steps) grad_input packs at a time for n columns: the packing budget's worth.
template <typename T>
inline size_t grad_input_block(size_t n) {
    constexpr size_t NR = kNV * Simd<T>::W;
    return std::max<size_t>(kMR, kPackElements<T> / ((n + NR - 1) / NR * NR));
}

// gx[r, i] += sum_o gy[r, o] W[o, i] for r in [r0, r1) and i in [i0, i1) (i1 past `in` means
// `in`). Threads split a wide layer by columns i, so each reads only its columns of W.
// add = false: that block of gx is written, not added to (its old contents are never read), with
// the bits the sum into a zeroed gx would have: each chain starts from zero either way. But a
// chain that underflows ends at -0, where 0 + chain is +0: as_sum stores 0 + chain, so that gx
// written in place of grads a sum into zeroed ones would give has their bits, sign of zero
// included (a replay's first writer writes its input's grads so).
template <typename T>
inline void grad_input(const T* gy, const T* W, T* gx, size_t rows, size_t in, size_t out, size_t r0, size_t r1,
                       size_t i0 = 0, size_t i1 = size_t(-1), bool add = true, bool as_sum = false) {
    (void)rows;
    i1 = std::min(i1, in);
    if (r0 >= r1 || i0 >= i1) return;
    const size_t n = i1 - i0;
    if (r1 - r0 < kAxpyRows || out < 8) {
        if (!add)
            for (size_t r = r0; r < r1; ++r) std::fill(gx + r * in + i0, gx + r * in + i1, T(0));
        size_t o = 0;
        for (; o + 4 <= out; o += 4)
            for (size_t r = r0; r < r1; ++r)
                axpy_chain<T, 4>(gx + r * in + i0, gy + r * out + o, W + o * in + i0, in, n);
        for (; o < out; ++o)
            for (size_t r = r0; r < r1; ++r)
                axpy_chain<T, 1>(gx + r * in + i0, gy + r * out + o, W + o * in + i0, in, n);
        if (!add && as_sum) add_zero(gx, in, r0, r1, i0, i1);
        return;
    }
    T* C = gx + r0 * in + i0;
    // A = gy rows, B = W's columns [i0, i1); W is taken a block of its rows at a time (packed,
    // within the packing budget) and each block's products added into gx: the same chain per
    // element, in order. Row blocks outer: a row block of gy stays in L1 while the packed block
    // streams past it from L2 (panels outer would re-read all of gy's block from L2 for every
    // panel; build/cpp/gemm_kernels compares the two orders).
    constexpr size_t NR = kNV * Simd<T>::W;
    const size_t kc = grad_input_block<T>(n);
    const size_t panels = (n + NR - 1) / NR, tiles = (r1 - r0 + kMR - 1) / kMR * panels;
    for (size_t k0 = 0; k0 < out; k0 += kc) {
        const size_t K = std::min(kc, out - k0);
        const T* a = gy + r0 * out + k0;
        // While these tiles run, the next block of W's rows comes into L2, a share per tile, so
        // that packing it reads L2, not memory. Only whole rows: then the block is one range.
        const size_t next = n == in ? std::min(kc, out - k0 - K) : 0;
        auto ahead = [=](size_t m0, size_t n0) {
            return ahead_rows(W, in, k0 + K, k0 + K + next, (m0 / kMR) * panels + n0 / NR, tiles);
        };
        const bool sum = !add && as_sum;
        if (k0 == 0 && !add)
            for_each_tile<T>(r1 - r0, n, K, a, out, 1, W + i0, in, true, false, zero_tile<T>(), to_tile(C, in, sum),
                             ahead);
        else
            for_each_tile<T>(r1 - r0, n, K, a, out, 1, W + k0 * in + i0, in, true, false, from_tile<T>(C, in),
                             to_tile(C, in, sum), ahead);
    }
}

// gb[o] += sum_r gy[r, o] for o in [o0, o1), rows in order.
template <typename T>
inline void grad_bias(const T* gy, T* gb, size_t rows, size_t out, size_t o0, size_t o1) {
    for (size_t r = 0; r < rows; ++r) {
        const T* g = gy + r * out;
        for (size_t o = o0; o < o1; ++o) gb[o] += g[o];
    }
}

// Columns of a one-row-block gradient held on the stack at a time by the sink's path.
inline constexpr size_t kSgdBlock = 256;

// gW[o, i] += sum_r gy[r, o] x[r, i] and gb[o] += sum_r gy[r, o] (gb may be null) for o in
// [o0, o1). With a sink (`sgd` not null), W's rows [o0, o1) take its update instead and gW is not
// touched: the update has the bits of "gradient into a zeroed gW, then the step".
// gw_add = false: those rows of gW are written, with the bits the sum into zeroed rows would
// have (each chain starts from zero either way), and their old contents are never read.
// [i0, i1): only those columns of gW (or W), for a chunk of rows (rows >= kAxpyRows); gb whole.
template <typename T, class Sink = NoSink>
inline void grad_weight(const T* gy, const T* x, T* gW, T* gb, size_t rows, size_t in, size_t out, size_t o0, size_t o1,
                        const Sink* sgd = nullptr, bool gw_add = true, size_t i0 = 0, size_t i1 = size_t(-1)) {
    i1 = std::min(i1, in);
    if (o0 >= o1 || i0 >= i1) return;
    if constexpr (!kHasSink<Sink>) sgd = nullptr;
    if (rows >= kAxpyRows) {
        // A = gy^T (A(o, r) = gy[r * out + o]), B = x's columns; the result (gW, or W with the
        // SGD step) streams through once, row block by row block, the next block of whole rows
        // prefetched meanwhile.
        const size_t n = i1 - i0;
        T* base = gW;
        if constexpr (kHasSink<Sink>)
            if (sgd) base = sgd->W;
        T* C = base + o0 * in + i0;
        const auto whole_rows = ahead_of_rows(C, in, o1 - o0, in);
        auto ahead = [=, full = n == in](size_t m0, size_t n0) { return full ? whole_rows(m0, n0) : Ahead{}; };
        if constexpr (kHasSink<Sink>)
            if (sgd) {
                for_each_tile<T>(o1 - o0, n, rows, gy + o0, 1, out, x + i0, in, true, false, zero_tile<T>(),
                                 sink_to_tile(*sgd, C, in), ahead);
                if (gb) grad_bias(gy, gb, rows, out, o0, o1);
                return;
            }
        if (gw_add)
            for_each_tile<T>(o1 - o0, n, rows, gy + o0, 1, out, x + i0, in, true, false, from_tile<T>(C, in),
                             to_tile(C, in), ahead);
        else
            for_each_tile<T>(o1 - o0, n, rows, gy + o0, 1, out, x + i0, in, true, false, zero_tile<T>(), to_tile(C, in),
                             ahead);
        if (gb) grad_bias(gy, gb, rows, out, o0, o1);
        return;
    }
    // A few rows (whole rows of W only): chains of multiply-adds along each row.
    if (!gw_add && !sgd) std::fill(gW + o0 * in, gW + o1 * in, T(0));  // the chains add
    {
        auto chain = [&](T* y, const T* g, const T* xs, size_t n) {
            switch (rows) {
                case 0: break;
                case 1: axpy_chain<T, 1>(y, g, xs, in, n); break;
                case 2: axpy_chain<T, 2>(y, g, xs, in, n); break;
                default: axpy_chain<T, 3>(y, g, xs, in, n); break;
            }
        };
        for (size_t o = o0; o < o1; ++o) {
            T g[kAxpyRows];
            for (size_t r = 0; r < rows; ++r) g[r] = gy[r * out + o];
            if (!sgd) {
                chain(gW + o * in, g, x, in);
                continue;
            }
            if constexpr (kHasSink<Sink>) {
                const Sink sink = *sgd;
                T* w = sink.W + o * in;
                for (size_t c0 = 0; c0 < in; c0 += kSgdBlock) {
                    const size_t n = std::min(kSgdBlock, in - c0);
                    alignas(64) T acc[kSgdBlock] = {};
                    chain(acc, g, x + c0, n);
                    for (size_t j = 0; j < n; ++j) w[c0 + j] = sink.update(w[c0 + j], acc[j]);
                }
            }
        }
    }
    if (gb) grad_bias(gy, gb, rows, out, o0, o1);
}

// The input gradient and the sink's update of the weight over columns [i0, i1) of W in one pass,
// for a chunk of rows (> kMR, so that the tiles pay for packing): gx[r, i] (+)= sum_o gy[r, o]
// W[o, i] from the old W, then W[o, i] = sink.update(W[o, i], sum_r gy[r, o] x[r, i]). Each block
// of W's rows is packed for the input gradient's tiles and then, still in L2, takes its update.
// Threads split a layer by columns for both products (linear_bwd), so a task steps only the
// columns of W it has just read: one parallel region instead of two, and no core steps rows of
// W whose columns the other is still reading. Every element's chain is the one grad_input and
// grad_weight build (gx: o ascending, whatever the blocks; W: r ascending from zero), so the bits
// are theirs. x's columns are packed once, as B of every block's SGD tiles; while those run, each
// brings the same tile of the next block into L2.
// [o0, o1): only those output units (rows of W): gx gets the chains through them alone, and only
// they step (threads split a wide layer so by units, each task with a partial gx: linear_bwd).
template <typename T, class Sink>
inline void grad_input_sgd_tiled(const T* gy, const T* x, T* gx, size_t rows, size_t in, size_t out, size_t i0,
                                 size_t i1, bool add, const Sink& sgd, bool as_sum = false, size_t o0 = 0,
                                 size_t o1 = size_t(-1)) {
    i1 = std::min(i1, in);
    o1 = std::min(o1, out);
    if (i0 >= i1 || rows == 0 || o0 >= o1) return;
    constexpr size_t NR = kNV * Simd<T>::W;
    const size_t n = i1 - i0, panels = (n + NR - 1) / NR;
    // W's block, its packed copy, x's packed columns and gx's block all stay in L2 during a
    // block: half the packing budget's rows, as the full budget would spill them (the blocks do
    // not change a chain).
    const size_t kc = std::max<size_t>(kMR, grad_input_block<T>(n) / 2);
    T* xp = pack_buffer<T, 2>(panels * panel_stride<T>(rows));
    pack_panels(x + i0, in, rows, n, xp);
    T* wp = pack_buffer<T, 0>(panels * panel_stride<T>(std::min(kc, o1 - o0)));
    T* C = gx + i0;
    T* const W = sgd.W;
    for (size_t k0 = o0; k0 < o1; k0 += kc) {
        const size_t K = std::min(kc, o1 - k0), next = std::min(kc, o1 - k0 - K);
        pack_panels(W + k0 * in + i0, in, K, n, wp);
        const bool sum = !add && as_sum;
        if (k0 == o0 && !add)
            for_each_packed_tile<T>(rows, n, K, gy + k0, out, 1, wp, true, zero_tile<T>(), to_tile(C, in, sum));
        else
            for_each_packed_tile<T>(rows, n, K, gy + k0, out, 1, wp, true, from_tile<T>(C, in), to_tile(C, in, sum));
        // The update's tile at (m0, n0) of this block brings the tile at (m0, n0) of the next one.
        auto ahead = [=](size_t m0, size_t n0) {
            if (m0 >= next) return Ahead{};
            const size_t r = std::min<size_t>(kMR, next - m0);
            return Ahead{reinterpret_cast<const char*>(W + (k0 + K + m0) * in + i0 + n0), 2 * r, in * sizeof(T)};
        };
        for_each_packed_tile<T>(K, n, rows, gy + k0, 1, out, xp, true, zero_tile<T>(),
                                sink_to_tile(sgd, W + k0 * in + i0, in), ahead);
    }
}

// For a few rows (rows < kAxpyRows), the input gradient and the sink's update of the weight in
// one pass over columns [i0, i1) of W: gx[r, i] += sum_o gy[r, o] W[o, i] from the old W, then
// W[o, i] = sink.update(W[o, i], sum_r gy[r, o] x[r, i]). Each row of W is read once and written
// once, where grad_input then grad_weight would read it twice. Every element's chains are the
// ones those two build (o ascending from gx; r ascending from zero), so the bits are theirs.
template <typename T, int R, class Sink>
inline void grad_input_sgd_rows(const T* gy, const T* x, T* gx, size_t in, size_t out, size_t i0, size_t i1,
                                const Sink sink) {
    using S = Simd<T>;
    T* const W = sink.W;  // a local: stores through W could otherwise alias the sink's own fields
    // NB rows of W [o0, o0 + NB) over the lanes at column i (all of them, or the last i1 - i).
    auto lanes = [&](size_t o0, size_t i, auto nb, auto full) {
        constexpr int NB = decltype(nb)::value;
        const int l = int(i1 - i);
        auto load = [&](const T* p) { return full ? S::load(p) : S::load(p, l); };
        auto store = [&](T* p, Vec<T> v) { full ? S::store(p, v) : S::store(p, v, l); };
        Vec<T> acc[R], xs[R];
        for (int r = 0; r < R; ++r) {
            acc[r] = load(gx + r * in + i);
            xs[r] = load(x + r * in + i);
        }
        // All of the block's rows are loaded before any is stored: rows `in` floats apart often
        // share their low address bits, and a load issued after a store to such an address
        // waits for it (4K aliasing).
        Vec<T> w[NB];
        for (int j = 0; j < NB; ++j) w[j] = load(W + (o0 + j) * in + i);
        for (int j = 0; j < NB; ++j) {
            const size_t o = o0 + j;
            Vec<T> g = S::zero();
            for (int r = 0; r < R; ++r) {
                const Vec<T> a = S::set1(gy[r * out + o]);
                acc[r] = S::madd(a, w[j], acc[r]);
                g = S::madd(a, xs[r], g);
            }
            w[j] = sink.update_lanes(w[j], g);
        }
        for (int j = 0; j < NB; ++j) store(W + (o0 + j) * in + i, w[j]);
        for (int r = 0; r < R; ++r) store(gx + r * in + i, acc[r]);
    };
    // Blocks of four rows of W per sweep of the columns (gx is loaded and stored once per four),
    // then the last rows one by one: each gx element still adds the rows in ascending order.
    auto sweep = [&](size_t o0, auto nb) {
        size_t i = i0;
        for (; i + S::W <= i1; i += S::W) lanes(o0, i, nb, std::true_type{});
        if (i < i1) lanes(o0, i, nb, std::false_type{});
    };
    size_t o0 = 0;
    for (; o0 + 4 <= out; o0 += 4) sweep(o0, std::integral_constant<int, 4>{});
    for (; o0 < out; ++o0) sweep(o0, std::integral_constant<int, 1>{});
}

template <typename T, class Sink>
inline void grad_input_sgd(const T* gy, const T* x, T* gx, size_t rows, size_t in, size_t out, size_t i0, size_t i1,
                           const Sink& sgd) {
    i1 = std::min(i1, in);
    if (i0 >= i1) return;
    static_assert(kAxpyRows == 4, "grad_input_sgd handles 1 .. kAxpyRows - 1 rows");
    // an update fixed at compile time: this loop's body is a few multiply-adds per element
    sgd.specialized([&](const auto& sink) {
        switch (rows) {
            case 1: return grad_input_sgd_rows<T, 1>(gy, x, gx, in, out, i0, i1, sink);
            case 2: return grad_input_sgd_rows<T, 2>(gy, x, gx, in, out, i0, i1, sink);
            case 3: return grad_input_sgd_rows<T, 3>(gy, x, gx, in, out, i0, i1, sink);
            default: return;  // rows < kAxpyRows only
        }
    });
}

}  // namespace bt::gemm
