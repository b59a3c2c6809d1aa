// Per-sample gradient rows written straight into the caller's matrix, for programs with range
// records (a model's per-sample program: lookup, linear layers, maps, a loss). The one-sample
// replay (program.hpp) sweeps each sample into its frame, where the parameters' grads sit beside
// the activations' (zeroed before the sample, added into by the sweep, copied out as the row, then
// zeroed again): three passes over d values per sample besides the row's own write. Here the
// records that reach the parameters write their part of the row themselves, once:
//   - a linear layer over one row: gW[o, i] = madd(gy[o], x[i], 0) and gb[o] = 0 + gy[o] (the
//     one-sample kernels' chains, which start from the zeroed grads: gemm::grad_weight and
//     grad_bias over one row);
//   - a lookup: each table row 0 + the grads of the positions that read it, in position order
//     (gather.hpp's backward into zeroed grads), zero for the rows no position reads;
//   - the row's columns no record reaches: zeros.
// Everything else (the forward, and the backward of the activations) runs the one-sample
// kernels themselves on the sample's frame, so every value of a row has the bits the one-sample
// replay gives it.
//
// How the row reaches memory (rows_streamed): when the whole output is small against the
// last-level cache, every part goes straight into its place in the matrix with ordinary stores
// (the matrix stays in cache, so the lines a part shares with its neighbours cost nothing
// extra). When it is not, the stores are non-temporal (nothing reads the row back soon, the
// lines the next sample reads stay cached, and no line is read for ownership first): a wide layer's
// weight grads stream there directly, whole cache lines only, and the other parts are made in a
// buffer and streamed out whole lines at a time (a non-temporal store of part of a line costs as
// much as the whole line), spread over the next sample's forward records (Trickle).
//
// A program qualifies when every record of its sweep that reads an external (parameter) slot is
// a linear layer over one row whose W and b are external (and x local), or a lookup of an
// external table; no two of those reach the same parameter; and the wrt spans are external and
// disjoint. Others keep the one-sample replay.
#pragma once
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "../kernels/gemm.hpp"
#include "../kernels/simd.hpp"
#include "../program.hpp"

namespace bt::lanes {

// The size in bytes of the last-level data cache as the OS reports it: Linux's sysfs (the
// highest level of cpu0's data or unified caches), then sysconf, then 8 MiB. sysfs comes first
// because sysconf reads the CPU's cpuid, which under a hypervisor may describe the host's caches
// rather than this machine's share of them.
inline size_t last_level_cache_bytes() {
    static const size_t bytes = [] {
        size_t best = 0;
#if defined(__linux__)
        int best_level = 0;
        for (int i = 0; i < 16; ++i) {
            const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
            std::ifstream lf(dir + "level"), tf(dir + "type"), sf(dir + "size");
            int level = 0;
            std::string type, size;
            if (!(lf >> level) || !(tf >> type) || !(sf >> size)) break;
            if (type == "Instruction" || level < best_level || size.empty()) continue;
            size_t v = 0, k = 0;
            for (; k < size.size() && size[k] >= '0' && size[k] <= '9'; ++k) v = v * 10 + size_t(size[k] - '0');
            const char unit = k < size.size() ? size[k] : 'B';
            v <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
            if (v) {
                best = v;
                best_level = level;
            }
        }
#endif
#if defined(_SC_LEVEL3_CACHE_SIZE)
        if (!best) {
            const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
            if (v > 0) best = size_t(v);
        }
#endif
        return best ? best : size_t(8) << 20;
    }();
    return bytes;
}

// How replay_rows stores rows: by the output's size (automatic), or always with ordinary or
// non-temporal stores (for tests and benchmarks; the bits are the same). discard: each row made
// in the buffer and nothing stored, the output left as it was (for benchmarks: the compute alone).
enum class RowsStore : int { automatic = 0, plain = 1, stream = 2, discard = 3 };

inline std::atomic<int>& rows_store_flag() {
    static std::atomic<int> flag{int(RowsStore::automatic)};
    return flag;
}
inline RowsStore rows_store() { return RowsStore(rows_store_flag().load(std::memory_order_relaxed)); }
inline void set_rows_store(RowsStore s) { rows_store_flag().store(int(s), std::memory_order_relaxed); }

// An output allocated for the call at least this large comes straight from mmap (glibc's largest
// dynamic mmap threshold), its pages faulted in by the rows' first stores.
inline constexpr size_t kFreshPagesBytes = size_t(32) << 20;

// Whether rows totalling `bytes` stream past the caches: when they take more than a quarter of the
// last-level cache. Below that, ordinary stores win by a little (the matrix stays in cache, and the
// caller reads it from there); above it they lose by much more, since the last-level cache is
// shared with the program's frame and weights, the second level's victims, and every other core,
// and rows stored through it evict the lines each sample's forward and backward read again (the
// crossover measured on W4 lies between a quarter and a third of it: docs/guides/programs.md).
// Except into fresh pages (an output the call allocated, kFreshPagesBytes or more): the kernel
// zeroes each page through the cache as the first store faults it in, and ordinary stores then
// find its lines there.
inline bool rows_streamed(size_t bytes, bool reused) {
    switch (rows_store()) {
        case RowsStore::plain: return false;
        case RowsStore::stream:
        case RowsStore::discard: return true;
        default: return bytes > last_level_cache_bytes() / 4 && (reused || bytes < kFreshPagesBytes);
    }
}

// What a record of the sweep does to the row: its own backward (touches no parameter), a linear
// layer's, or a lookup's.
enum class RowKind : uint8_t { other, linear, gather };

struct RowRecord {
    RowKind kind = RowKind::other;
    int64_t col_w = -1;  // the row's column of the record's first parameter grad (W, or the table); -1: not wrt
    int64_t col_b = -1;  // a linear layer's b (-1: none, or not wrt)
};

template <typename T>
struct RowsPlan {
    const Program<T>* laid_out_for = nullptr;
    int usable = -1;
    std::vector<RowRecord> recs;                   // per entry of P.sweep
    std::vector<Span> zero_local;                  // P.sweep_grads' local slots
    std::vector<T> xs, gx;                         // a linear layer's x gathered, its gx
    std::vector<Span> zero_cols;                   // the row's columns no record writes
    std::vector<int64_t> narrow;                   // per record of P.recs: its W^T's place in wt, or -1
    std::vector<T> wt;                             // narrow layers' W^T (in x out), made per call
    std::vector<int64_t> ce;                       // per record of P.recs: its place in ce_exps, or -1
    std::vector<char> after_lookup;                // per record of P.recs: a layer run with the lookup before it
    std::vector<T> ce_exps, ce_gz;                 // a one-row cross-entropy's exps and sum; its gz
    std::vector<T> zeros;                          // +0s, one table row of the widest lookup (gather_row)
    std::vector<T> row[2];                         // the rows being made and streamed out (streamed rows)
    std::vector<uint64_t> written[2];              // per entry of P.sweep: a lookup's table rows not zero in row[b]
    std::vector<std::pair<size_t, size_t>> holes;  // its columns stored into the matrix directly
};

namespace rows_detail {

// The column of frame slots [first, first + len) in a row, -1 when outside every wrt span, -2
// when it straddles one (the program then does not qualify).
template <typename T>
int64_t column_of(const Program<T>& P, uint32_t first, uint32_t len) {
    size_t col = 0;
    for (const Span& w : P.wrt) {
        const uint32_t we = w.first + w.second;
        if (first >= w.first && first + len <= we) return int64_t(col + (first - w.first));
        if (first < we && first + len > w.first) return -2;
        col += w.second;
    }
    return -1;
}

template <typename T>
bool plan(const Program<T>& P, RowsPlan<T>& L) {
    const uint32_t ne = P.n_ext;
    // wrt: external, pairwise disjoint (a slot twice in a row would need two writes)
    std::vector<char> in_wrt(ne, 0);
    for (const Span& w : P.wrt) {
        if (size_t(w.first) + w.second > ne) return false;
        for (uint32_t j = w.first; j < w.first + w.second; ++j) {
            if (in_wrt[j]) return false;
            in_wrt[j] = 1;
        }
    }
    std::vector<char> reached(ne, 0);  // external slots whose grads a record writes
    auto claim = [&](uint32_t first, uint32_t len) {
        for (uint32_t j = first; j < first + len; ++j) {
            if (reached[j]) return false;
            reached[j] = 1;
        }
        return true;
    };
    L.recs.assign(P.sweep.size(), RowRecord{});
    for (size_t i = 0; i < P.sweep.size(); ++i) {
        const Record& r = P.recs[P.sweep[i]];
        const uint32_t* a = P.args.data() + r.a;
        bool reads_ext = false;
        for_each_arg_span(r, a, [&](uint32_t f, uint32_t) { reads_ext |= f < ne; });
        if (!reads_ext) continue;
        if (op_info(r.op).kind != OpKind::range) return false;
        const Operands o = decode_operands(a);
        RowRecord& rr = L.recs[i];
        if (r.op == Op::linear) {
            const bool has_b = o.tail[3] != 0;
            if (o.tail[0] != 1 || o.v[1].n != 1 || (has_b && o.v[2].n != 1)) return false;
            for (uint32_t k = 0; k < o.v[0].n; ++k)
                if (o.v[0].first(k) < ne) return false;  // x's grads would reach a parameter
            const uint32_t w = o.v[1].first(0), nw = o.v[1].len(0);
            if (size_t(w) + nw > ne || nw != size_t(o.tail[1]) * o.tail[2] || !claim(w, nw)) return false;
            rr.kind = RowKind::linear;
            rr.col_w = column_of(P, w, nw);
            if (has_b) {
                const uint32_t b = o.v[2].first(0), nb = o.v[2].len(0);
                if (size_t(b) + nb > ne || nb != o.tail[2] || !claim(b, nb)) return false;
                rr.col_b = column_of(P, b, nb);
            }
            if (rr.col_w == -2 || rr.col_b == -2) return false;
        } else if (r.op == Op::gather) {
            const uint32_t t = o.v[0].first(0), nt = o.v[0].len(0);
            if (o.v[0].n != 1 || size_t(t) + nt > ne || !claim(t, nt)) return false;
            rr.kind = RowKind::gather;
            rr.col_w = column_of(P, t, nt);
            if (rr.col_w == -2) return false;
        } else {
            return false;
        }
    }
    // the columns no record writes: zero in every row
    std::vector<char> written(P.num_wrt, 0);
    auto mark = [&](int64_t col, size_t len) {
        if (col >= 0) std::fill_n(written.begin() + col, len, char(1));
    };
    for (size_t i = 0; i < P.sweep.size(); ++i) {
        const RowRecord& rr = L.recs[i];
        if (rr.kind == RowKind::other) continue;
        const Operands o = decode_operands(P.args.data() + P.recs[P.sweep[i]].a);
        if (rr.kind == RowKind::linear) {
            mark(rr.col_w, size_t(o.tail[1]) * o.tail[2]);
            mark(rr.col_b, o.tail[2]);
        } else {
            mark(rr.col_w, o.v[0].len(0));
        }
    }
    L.zero_cols.clear();
    for (size_t c = 0; c < written.size();) {
        if (written[c]) {
            ++c;
            continue;
        }
        const size_t c0 = c;
        while (c < written.size() && !written[c]) ++c;
        L.zero_cols.emplace_back(uint32_t(c0), uint32_t(c - c0));
    }
    // linear layers over one row narrow enough for their forward to run across output units
    L.narrow.assign(P.recs.size(), -1);
    size_t nwt = 0;
    for (size_t k = 0; k < P.recs.size(); ++k) {
        const Record& r = P.recs[k];
        if (r.op != Op::linear) continue;
        const Operands o = decode_operands(P.args.data() + r.a);
        const uint32_t in = o.tail[1], out = o.tail[2];
        if (o.tail[0] != 1 || o.v[0].n != 1 || o.v[1].n != 1 || (o.tail[3] && o.v[2].n != 1)) continue;
        if (in > 4 * size_t(simd::Simd<T>::W) || 2 * size_t(out) < size_t(simd::Simd<T>::W)) continue;
        L.narrow[k] = int64_t(nwt);
        nwt += size_t(in) * out;
    }
    L.wt.resize(nwt);
    // a linear layer over one row whose x is the whole output of the lookup just before it, each
    // table row a whole number of four-vector steps: both in one pass (gather_linear_forward)
    L.after_lookup.assign(P.recs.size(), 0);
    for (size_t k = 1; k < P.recs.size(); ++k) {
        const Record &r = P.recs[k], &g = P.recs[k - 1];
        if (r.op != Op::linear || g.op != Op::gather || L.narrow[k] >= 0) continue;
        const Operands o = decode_operands(P.args.data() + r.a), og = decode_operands(P.args.data() + g.a);
        const size_t d = og.tail[1];
        if (o.tail[0] != 1 || o.v[0].n != 1 || o.v[1].n != 1 || (o.tail[3] && o.v[2].n != 1) || og.v[0].n != 1)
            continue;
        if (o.v[0].first(0) != g.out || o.tail[1] != size_t(og.tail[0]) * d || d % (4 * size_t(simd::Simd<T>::W)))
            continue;
        L.after_lookup[k] = 1;
    }
    // cross-entropies over one row of logits (one span): the backward reuses the forward's exps
    L.ce.assign(P.recs.size(), -1);
    size_t nce = 0, wide = 0;
    for (size_t k = 0; k < P.recs.size(); ++k) {
        const Record& r = P.recs[k];
        if (r.op != Op::cross_entropy) continue;
        const Operands o = decode_operands(P.args.data() + r.a);
        if (o.tail[0] != 1 || o.v[0].n != 1) continue;
        L.ce[k] = int64_t(nce);
        nce += size_t(o.tail[1]) + 1;
        wide = std::max<size_t>(wide, o.tail[1]);
    }
    size_t widest = 0;  // the widest row of a lookup's table
    for (const Record& r : P.recs)
        if (r.op == Op::gather) widest = std::max<size_t>(widest, decode_operands(P.args.data() + r.a).tail[1]);
    L.zeros.assign(widest, T(0));
    L.ce_exps.resize(nce);
    L.ce_gz.resize(wide);
    L.zero_local.clear();
    for (const Span& s : P.sweep_grads) {  // the external grads stay zero: nothing here adds into them
        const uint32_t b = std::max(s.first, ne), e = s.first + s.second;
        if (b < e) L.zero_local.emplace_back(b, e - b);
    }
    return true;
}

// dst[i] = f(i) for i < n (f(i0) gives the vector of elements i0 .. i0 + W - 1, f(i0, l) the first
// l of them): whole vectors stored aligned to the vector's size (no store splits two cache
// lines), streamed when `stream`, the ends stored masked.
template <typename T, class F>
BT_ALWAYS_INLINE void put(T* dst, size_t n, bool stream, F f) {
    using S = simd::Simd<T>;
    constexpr size_t W = size_t(S::W);
    size_t i = 0;
    if (n >= W && reinterpret_cast<uintptr_t>(dst) % sizeof(T) == 0) {
        const size_t mis = (reinterpret_cast<uintptr_t>(dst) / sizeof(T)) % W;
        if (mis) {
            i = W - mis;
            S::store(dst, f(size_t(0), int(i)), int(i));
        }
        if (stream)
            for (; i + W <= n; i += W) S::stream(dst + i, f(i));
    }
    for (; i + W <= n; i += W) S::store(dst + i, f(i));
    if (i < n) S::store(dst + i, f(i, int(n - i)), int(n - i));
}

template <typename T>
void put_zeros(T* dst, size_t n, bool stream) {
    using S = simd::Simd<T>;
    put(dst, n, stream, [](size_t, int = 0) { return S::zero(); });
}

template <typename T>
void put_copy(T* dst, const T* src, size_t n, bool stream) {
    using S = simd::Simd<T>;
    put(dst, n, stream, [src](size_t i, int l = S::W) { return l == S::W ? S::load(src + i) : S::load(src + i, l); });
}

// A linear layer over one row, y = x W^T + b, for a narrow input: gemm::forward's dot products
// (forward_by_dots: per output unit, four interleaved chains of madd along `in` per vector lane,
// the chains added pairwise, the lanes summed in order from zero, then + b), run with a vector
// across output units instead of along `in`, from wt = W^T. Each unit gets the same operations
// in the same order; the one-sample kernel spends most of such a layer's time on each unit's
// horizontal sum. Lanes past `in` (in < one vector) hold +0 there, which leaves the sum as it is
// (it starts from +0, so it is never -0), so they are skipped.
template <typename T>
void narrow_linear_forward(const Frame<T>& f, const Record& r, const uint32_t* args, const T* wt) {
    using S = simd::Simd<T>;
    using V = typename S::V;
    constexpr size_t w = size_t(S::W), A = 4;
    const Operands o = decode_operands(args + r.a);
    const size_t n = o.tail[1], out = o.tail[2];
    const T* x = f.values() + o.v[0].first(0);
    const T* b = o.tail[3] ? f.values() + o.v[2].first(0) : nullptr;
    T* y = f.values() + r.out;
    const size_t main = n / (A * w) * (A * w), lanes = std::min(w, n);
    for (size_t o0 = 0; o0 < out; o0 += w) {
        const int m = int(std::min(w, out - o0));
        auto col = [&](size_t i) { return m == S::W ? S::load(wt + i * out + o0) : S::load(wt + i * out + o0, m); };
        V sum = S::zero();
        for (size_t q = 0; q < lanes; ++q) {
            V acc[A] = {S::zero(), S::zero(), S::zero(), S::zero()};
            for (size_t i = q; i < main; i += A * w)
                for (size_t a = 0; a < A; ++a) acc[a] = S::madd(S::set1(x[i + a * w]), col(i + a * w), acc[a]);
            size_t a = 0;
            for (size_t i = main; i < n; ++a, i += w)  // the masked tail: lanes past n add 0 * 0
                acc[a] =
                    i + q < n ? S::madd(S::set1(x[i + q]), col(i + q), acc[a]) : S::madd(S::zero(), S::zero(), acc[a]);
            sum = S::add(sum, S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
        }
        if (b) sum = S::add(sum, m == S::W ? S::load(b + o0) : S::load(b + o0, m));
        if (m == S::W)
            S::store(y + o0, sum);
        else
            S::store(y + o0, sum, m);
    }
}

// A lookup's forward, gather_forward on one thread (one sample's lookup is far below its split):
// each table row copied by vectors in line rather than by a call to memmove per row.
template <typename T>
void gather_rows_forward(const Frame<T>& f, const Record& r, const uint32_t* args) {
    using S = simd::Simd<T>;
    constexpr size_t w = size_t(S::W);
    const Operands o = decode_operands(args + r.a);
    const size_t n = o.tail[0], d = o.tail[1];
    const uint32_t* ids = o.tail + 2;
    const T* table = f.values() + o.v[0].first(0);
    T* y = f.values() + r.out;
    for (size_t i = 0; i < n; ++i) {
        const T* src = table + size_t(ids[i]) * d;
        T* dst = y + i * d;
        size_t j = 0;
        for (; j + w <= d; j += w) S::store(dst + j, S::load(src + j));
        if (j < d) S::store(dst + j, S::load(src + j, int(d - j)), int(d - j));
    }
}

// One group of NO output units of gather_linear_forward: per unit, gemm::dots' chains (acc[j][q]
// takes the vectors of x at positions q mod 4, in order), x's vectors read from the table rows the
// ids select and, for the first group (COPY), stored into the lookup's output as gather_forward
// copies them; then dots' reduction (the chains added pairwise, the lanes summed in order from 0).
template <typename T, int NO, bool COPY>
BT_ALWAYS_INLINE void gather_dots(const T* table, const uint32_t* ids, size_t n, size_t d, const T* w, size_t in, T* x,
                                  T* res) {
    using S = simd::Simd<T>;
    using V = typename S::V;
    constexpr size_t W = size_t(S::W), A = 4;
    V acc[NO][A];
    for (int j = 0; j < NO; ++j)
        for (size_t q = 0; q < A; ++q) acc[j][q] = S::zero();
    const T* wr[NO];  // each unit's row of W, at the current position's columns
    for (int j = 0; j < NO; ++j) wr[j] = w + j * in;
    for (size_t p = 0; p < n; ++p) {
        const T* src = table + size_t(ids[p]) * d;
        for (size_t k = 0; k < d; k += A * W)
#pragma GCC unroll 4
            for (size_t q = 0; q < A; ++q) {
                const V xv = S::load(src + k + q * W);
                if constexpr (COPY) S::store(x + k + q * W, xv);
#pragma GCC unroll 4
                for (int j = 0; j < NO; ++j) acc[j][q] = S::madd(xv, S::load(wr[j] + k + q * W), acc[j][q]);
            }
        x += d;
        for (int j = 0; j < NO; ++j) wr[j] += d;
    }
#if defined(BT_SIMD_AVX512)
    if constexpr (NO == 4 && std::is_same_v<T, float>) {
        // The four units' lane sums side by side, four lanes of one register: the 4 x 16 lanes
        // transposed within each 128-bit lane (u[i] holds, in its 128-bit lane k, lane 4k + i of
        // the four units), then added from +0 in lane order: each unit the same chain of adds.
        __m512 v[4];
        for (int j = 0; j < 4; ++j) v[j] = S::add(S::add(acc[j][0], acc[j][1]), S::add(acc[j][2], acc[j][3]));
        const __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(v[0], v[1]));
        const __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(v[0], v[1]));
        const __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(v[2], v[3]));
        const __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(v[2], v[3]));
        const __m512 u[4] = {_mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)), _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2)),
                             _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3))};
        __m128 sum = _mm_setzero_ps();
        for (int i = 0; i < 4; ++i) sum = _mm_add_ps(sum, _mm512_castps512_ps128(u[i]));
        for (int i = 0; i < 4; ++i) sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(u[i], 1));
        for (int i = 0; i < 4; ++i) sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(u[i], 2));
        for (int i = 0; i < 4; ++i) sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(u[i], 3));
        _mm_storeu_ps(res, sum);
        return;
    }
#endif
    for (int j = 0; j < NO; ++j) {
        T l[W];
        S::store(l, S::add(S::add(acc[j][0], acc[j][1]), S::add(acc[j][2], acc[j][3])));
        T s = T(0);
        for (size_t q = 0; q < W; ++q) s += l[q];
        res[j] = s;
    }
}

// A lookup (gather_rows_forward) and the linear layer over its whole output that follows it (one
// row, y = x W^T + b), in one pass: gemm::forward's path for one row (forward_by_dots: four
// units at a time, then one at a time, then + b), each unit's dot product taken from the table
// rows themselves, the first group of units storing the lookup's output on the way (later records
// read it). The same operations in the same order as the two records one after the other.
template <typename T>
void gather_linear_forward(const Frame<T>& f, const Record& g, const Record& r, const uint32_t* args) {
    const Operands og = decode_operands(args + g.a), o = decode_operands(args + r.a);
    const size_t n = og.tail[0], d = og.tail[1], in = o.tail[1], out = o.tail[2];
    const uint32_t* ids = og.tail + 2;
    const T* table = f.values() + og.v[0].first(0);
    T* x = f.values() + g.out;
    const T* w = f.weight(o.v[1].first(0));
    T* y = f.values() + r.out;
    size_t u = 0;  // the first group stores x on the way
    if (out >= 4) {
        gather_dots<T, 4, true>(table, ids, n, d, w, in, x, y);
        for (u = 4; u + 4 <= out; u += 4) gather_dots<T, 4, false>(table, ids, n, d, w + u * in, in, x, y + u);
    } else if (out > 0) {
        gather_dots<T, 1, true>(table, ids, n, d, w, in, x, y);
        u = 1;
    }
    for (; u < out; ++u) gather_dots<T, 1, false>(table, ids, n, d, w + u * in, in, x, y + u);
    if (out == 0) gather_rows_forward(f, g, args);
    if (o.tail[3]) {
        const T* b = f.values() + o.v[2].first(0);
        for (u = 0; u < out; ++u) y[u] += b[u];
    }
}

// cross_entropy_forward over one row of V logits (logsumexp, then - z[t], then the mean over the
// one row), keeping e^(z - max) and their sum in `e` (V + 1) for the backward.
template <typename T>
void cross_entropy_row_forward(const Frame<T>& f, const Record& r, const uint32_t* args, T* e) {
    const Operands o = decode_operands(args + r.a);
    const uint32_t V = o.tail[1], t = o.tail[2];
    const T* z = f.values() + o.v[0].first(0);
    // The max in four chains (then combined), not one: the same value, but for which of +0 and -0
    // it is when both occur, which changes none of the bits below (z - m and m + log(s), where
    // log(s) >= +0, are the same for either); NaNs are passed over alike.
    T m0 = -std::numeric_limits<T>::infinity(), m1 = m0, m2 = m0, m3 = m0;
    uint32_t j4 = 0;
    for (; j4 + 4 <= V; j4 += 4) {
        m0 = std::max(m0, z[j4]);
        m1 = std::max(m1, z[j4 + 1]);
        m2 = std::max(m2, z[j4 + 2]);
        m3 = std::max(m3, z[j4 + 3]);
    }
    for (; j4 < V; ++j4) m0 = std::max(m0, z[j4]);
    const T m = std::max(std::max(m0, m1), std::max(m2, m3));
    T s = T(0);
    for (uint32_t j0 = 0; j0 < V; j0 += 64) {  // logsumexp's blocks
        const uint32_t k = std::min<uint32_t>(64, V - j0);
        exp_shifted(z + j0, m, e + j0, k);
        for (uint32_t j = 0; j < k; ++j) s += e[j0 + j];
    }
    e[V] = s;
    const T row_loss = m + std::log(s) - z[t];
    T loss = T(0);
    loss += row_loss;
    f.values()[r.out] = loss / T(1);
}

// cross_entropy_backward over that row: softmax_row's max, exps and sum are the forward's (the
// same operations on the same logits), then y = e * (1 / s), times d, and - d at the target.
template <typename T>
void cross_entropy_row_backward(const Frame<T>& f, const Record& r, const uint32_t* args, const T* e, T* gz) {
    const Operands o = decode_operands(args + r.a);
    const uint32_t V = o.tail[1], t = o.tail[2];
    const T d = f.grads()[r.out] / T(1);
    const T inv = T(1) / e[V];
    for (uint32_t j = 0; j < V; ++j) {
        T y = e[j];
        y *= inv;
        gz[j] = y * d;
    }
    gz[t] -= d;
    // scatter_add's operations into the logits' one span (0 + gz where first written), in line
    T* g = f.grads() + o.v[0].first(0);
    if (f.first_write)
        for (uint32_t j = 0; j < V; ++j) g[j] = gz[j] + T(0);
    else
        for (uint32_t j = 0; j < V; ++j) g[j] += gz[j];
}

// A streamed row's parts made in a buffer, on their way into the matrix: streamed out a few
// vectors at a time between the records of the next sample, so that the stores go out while
// that sample computes rather than in one burst that stalls on the write-combining buffers.
// Pieces end on the matrix's vector boundaries (whole lines streamed), but for a part's ends.
template <typename T>
struct Trickle {
    struct Part {
        T* dst;
        const T* src;
        size_t n;
    };
    std::vector<Part> parts;
    size_t at = 0, off = 0;  // the next element: parts[at], offset off
    size_t step = 0;         // vectors per call of some()

    void some(size_t vectors) {
        constexpr size_t w = size_t(simd::Simd<T>::W);
        while (at < parts.size() && vectors) {
            const Part& p = parts[at];
            size_t end = p.n;
            if (off + vectors * w < p.n) {
                end = off + vectors * w;
                end += (w - (reinterpret_cast<uintptr_t>(p.dst + end) / sizeof(T)) % w) % w;
                end = std::min(end, p.n);
            }
            put_copy(p.dst + off, p.src + off, end - off, true);
            const size_t used = (end - off + w - 1) / w;
            vectors = used >= vectors ? 0 : vectors - used;
            off = end;
            if (off == p.n) {
                ++at;
                off = 0;
            }
        }
    }
    void rest() { some(~size_t(0) / (2 * simd::Simd<T>::W)); }
    // Queues `out`'s row but for the holes (columns stored there directly), from `row`, to go out
    // over `calls` calls of some(); whatever the previous row still had goes out first.
    void queue(T* out, const T* row, size_t nw, std::vector<std::pair<size_t, size_t>>& holes, size_t calls) {
        rest();
        parts.clear();
        at = off = 0;
        std::sort(holes.begin(), holes.end());
        size_t c = 0, total = 0;
        auto add = [&](size_t c0, size_t c1) {
            if (c1 > c0) parts.push_back({out + c0, row + c0, c1 - c0});
            total += c1 > c0 ? c1 - c0 : 0;
        };
        for (const auto& [h0, h1] : holes) {
            add(c, h0);
            c = h1;
        }
        add(c, nw);
        constexpr size_t w = size_t(simd::Simd<T>::W);
        step = (total / w + calls) / std::max<size_t>(calls, 1) + 1;
    }
};

// run_forward for a rows_usable program (which fuses no lookup with its layer: that needs a
// fused SGD step), narrow layers across their output units. Returns the first failing guard, or -1.
template <typename T, class Between>
long forward_rows(const Program<T>& P, Workspace<T>& W, RowsPlan<T>& L, Between between) {
    const Frame<T> f = W.frame();
    const uint32_t* args = W.args.data();
    for (size_t k = 0; k < P.recs.size(); ++k) {
        const Record& r = P.recs[k];
        if (k + 1 < P.recs.size() && L.after_lookup[k + 1]) {
            // the lookup runs with the layer after it
        } else if (L.after_lookup[k]) {
            const record_timer::Scope timed(0, record_timer::kind_of(r.op));
            gather_linear_forward(f, P.recs[k - 1], r, args);
        } else if (L.narrow[k] >= 0) {
            const record_timer::Scope timed(0, record_timer::kind_of(r.op));
            narrow_linear_forward(f, r, args, L.wt.data() + L.narrow[k]);
        } else if (r.op == Op::gather) {
            const record_timer::Scope timed(0, record_timer::kind_of(r.op));
            gather_rows_forward(f, r, args);
        } else if (L.ce[k] >= 0) {
            const record_timer::Scope timed(0, record_timer::kind_of(r.op));
            cross_entropy_row_forward(f, r, args, L.ce_exps.data() + L.ce[k]);
        } else {
            forward_record(f, r, args);
        }
        between();
    }
    for (size_t i = 0; i < P.guards.size(); ++i)
        if (!guard_holds(P.guards[i], W.v.data())) return long(i);
    return -1;
}

// gx[i] = the chain madd(gy[o], W[o, i], .) over o in order from zero (then 0 + it, as_sum):
// gemm::grad_input over one row written (add = false), each element the same chain, but held in
// registers over all of W's rows instead of zeroed, then loaded and stored per four rows, then
// passed over again for as_sum.
template <typename T>
void grad_input_row(const T* gy, const T* W, T* gx, size_t in, size_t out, bool as_sum) {
    using S = simd::Simd<T>;
    using V = typename S::V;
    constexpr size_t w = size_t(S::W), U = 4;
    size_t i = 0;
    for (; i + U * w <= in; i += U * w) {
        V acc[U];
        for (size_t u = 0; u < U; ++u) acc[u] = S::zero();
        for (size_t o = 0; o < out; ++o) {
            const V a = S::set1(gy[o]);
            const T* wo = W + o * in + i;
            for (size_t u = 0; u < U; ++u) acc[u] = S::madd(a, S::load(wo + u * w), acc[u]);
        }
        for (size_t u = 0; u < U; ++u) S::store(gx + i + u * w, as_sum ? S::add(acc[u], S::zero()) : acc[u]);
    }
    for (; i < in; i += w) {
        const int l = int(std::min(w, in - i));
        V acc = S::zero();
        for (size_t o = 0; o < out; ++o) acc = S::madd(S::set1(gy[o]), S::load(W + o * in + i, l), acc);
        S::store(gx + i, as_sum ? S::add(acc, S::zero()) : acc, l);
    }
}

// x's grads and W's together, for a layer whose `in` is a whole number of vectors: per vector of
// columns [i, i + w) (U at a time), gx's chains over W's rows o (grad_input_row's, element by
// element the same) and, in the same loop over o, W's grads gW[o, i..] = madd(gy[o], x[i..], 0)
// stored at gw + o * in + i (streamed when `stream`). The stores of W's grads, which dominate,
// then issue among the multiply-adds instead of in one burst after them. Columns [i0, i1) only
// (gw + i0 aligned to the vector when streamed): the caller does the columns outside.
template <typename T>
void linear_row_fused(const T* gy, const T* W, const T* x, T* gx, T* gw, size_t in, size_t out, size_t i0, size_t i1,
                      bool as_sum, bool stream) {
    using S = simd::Simd<T>;
    using V = typename S::V;
    constexpr size_t w = size_t(S::W), U = 4;
    auto put_w = [stream](T* p, V v) { stream ? S::stream(p, v) : S::store(p, v); };
    size_t i = i0;
    for (; i + U * w <= i1; i += U * w) {
        V acc[U], xv[U];
        for (size_t u = 0; u < U; ++u) {
            acc[u] = S::zero();
            xv[u] = S::load(x + i + u * w);
        }
        for (size_t o = 0; o < out; ++o) {
            const V a = S::set1(gy[o]);
            const T* wo = W + o * in + i;
            T* go = gw + o * in + i;
            for (size_t u = 0; u < U; ++u) {
                acc[u] = S::madd(a, S::load(wo + u * w), acc[u]);
                put_w(go + u * w, S::madd(a, xv[u], S::zero()));
            }
        }
        for (size_t u = 0; u < U; ++u) S::store(gx + i + u * w, as_sum ? S::add(acc[u], S::zero()) : acc[u]);
    }
    for (; i + w <= i1; i += w) {
        V acc = S::zero();
        const V xv = S::load(x + i);
        for (size_t o = 0; o < out; ++o) {
            const V a = S::set1(gy[o]);
            acc = S::madd(a, S::load(W + o * in + i), acc);
            put_w(gw + o * in + i, S::madd(a, xv, S::zero()));
        }
        S::store(gx + i, as_sum ? S::add(acc, S::zero()) : acc);
    }
}

// A linear layer over one row whose W (and b) are parameters: x's grads as linear_backward
// makes them, W's and b's into the row.
template <typename T>
void linear_row(const Frame<T>& f, const Record& r, const uint32_t* args, bool live, bool writes, const RowRecord& rr,
                T* row, T* direct, std::vector<std::pair<size_t, size_t>>& holes, RowsPlan<T>& L) {
    using S = simd::Simd<T>;
    const Operands o = decode_operands(args + r.a);
    const uint32_t in = o.tail[1], out = o.tail[2];
    const bool has_b = o.tail[3] != 0;
    T* g = f.grads();
    if (!live) {  // as run_backward skips it: W's and b's grads stay zero
        if (writes) zero_spans(g, o.v[0]);
        if (rr.col_w >= 0) put_zeros(row + rr.col_w, size_t(in) * out, false);
        if (has_b && rr.col_b >= 0) put_zeros(row + rr.col_b, out, false);
        return;
    }
    const T* gy = g + r.out;
    const bool one_span = o.v[0].n == 1, in_place = writes && one_span;
    if (!one_span && L.xs.size() < in) L.xs.resize(in);
    const T* x = contiguous(f.values(), o.v[0], L.xs.data());
    T* gx = g + (one_span ? o.v[0].first(0) : 0);
    if (!in_place) {
        if (L.gx.size() < in) L.gx.resize(in);
        gx = L.gx.data();
    }
    // linear_bwd over one row: the input gradient written (from zero), as a sum where in place
    // (gemm::grad_input's chains, kept in registers)
    constexpr size_t w = size_t(S::W);
    const T* Wt = f.weight(o.v[1].first(0));
    // W's grads made beside x's in one pass where `in` is whole vectors (at least one unrolled step)
    const bool fused = rr.col_w >= 0 && in % w == 0 && in >= 4 * w;
    if (fused) {
        // x's grads and W's in one pass (linear_row_fused) over the columns [h, e) whose vectors of
        // W's grads are aligned (all rows alike, `in` being whole vectors); the columns outside
        // (less than a vector each side) by the loops below.
        T* const base = direct ? direct : row;
        size_t h = 0;
        if (reinterpret_cast<uintptr_t>(base) % sizeof(T) == 0)
            h = (w - (reinterpret_cast<uintptr_t>(base + rr.col_w) / sizeof(T)) % w) % w;
        const size_t e = h + (in - h) / w * w;
        linear_row_fused(gy, Wt, x, gx, base + rr.col_w, in, out, h, e, in_place, direct != nullptr);
        for (size_t i : {size_t(0), e}) {  // gx's columns outside [h, e): masked vectors
            const size_t n = i == 0 ? h : in - e;
            if (!n) continue;
            typename S::V acc = S::zero();
            for (size_t u = 0; u < out; ++u) acc = S::madd(S::set1(gy[u]), S::load(Wt + u * in + i, int(n)), acc);
            S::store(gx + i, in_place ? S::add(acc, S::zero()) : acc, int(n));
        }
        for (uint32_t u = 0; u < out; ++u) {
            const typename S::V a = S::set1(gy[u]);
            const size_t c0 = size_t(rr.col_w) + size_t(u) * in;
            if (direct) holes.emplace_back(c0 + h, c0 + e);
            auto chain = [a, x](size_t i, int l = S::W) {
                return S::madd(a, l == S::W ? S::load(x + i) : S::load(x + i, l), S::zero());
            };
            put(row + c0, h, false, chain);
            put(row + c0 + e, in - e, false, [&](size_t i, int l = S::W) { return chain(e + i, l); });
        }
        if (!in_place) scatter_add(g, o.v[0], gx, writes);
    } else {
        grad_input_row(gy, Wt, gx, in, out, in_place);
        if (!in_place) scatter_add(g, o.v[0], gx, writes);
    }
    if (rr.col_w >= 0 && !fused)
        for (uint32_t u = 0; u < out; ++u) {
            const typename S::V a = S::set1(gy[u]);
            const size_t c0 = size_t(rr.col_w) + size_t(u) * in;
            // Into the matrix directly (when it is streamed): the whole cache lines of this row of
            // W's grads, [c0 + h, c0 + e); the lines it shares with its neighbours go through `row`.
            size_t h = in, e = in;
            if (direct && reinterpret_cast<uintptr_t>(direct) % sizeof(T) == 0 && in >= 4 * w) {
                h = (w - (reinterpret_cast<uintptr_t>(direct + c0) / sizeof(T)) % w) % w;
                e = h + (in - h) / w * w;
                for (size_t i = h; i < e; i += w) S::stream(direct + c0 + i, S::madd(a, S::load(x + i), S::zero()));
                holes.emplace_back(c0 + h, c0 + e);
            }
            auto chain = [a, x](size_t i, int l = S::W) {
                return S::madd(a, l == S::W ? S::load(x + i) : S::load(x + i, l), S::zero());
            };
            put(row + c0, h, false, chain);
            put(row + c0 + e, in - e, false, [&](size_t i, int l = S::W) { return chain(e + i, l); });
        }
    if (has_b && rr.col_b >= 0)
        for (uint32_t u = 0; u < out; ++u) row[rr.col_b + u] = T(0) + gy[u];
}

// A lookup of a parameter table: its grads as gather_backward sums them into zeroed grads: every
// element of the table's part of the row 0 + the grads of the positions that read it, in position
// order, or +0 when none does (or the lookup gets no gradient). The positions are walked in order;
// the first to read a table row adds its grads to +0s (a row of L.zeros, picked by a select, not a
// branch, so that nothing depends on the ids' pattern) and stores them, the next ones add into
// what is there; then the table rows no position read are zeroed (walking the bits of those
// rows). Tables of more than 64 rows: the part zeroed first, then every position adds in.
// `written` (a reused buffer's, else null): the table rows that buffer may hold other than zeros
// in, from the row made in it before; the others are zero already and are not stored again.
template <typename T>
void gather_row(const Frame<T>& f, const Record& r, const uint32_t* args, bool live, const RowRecord& rr, T* row,
                const T* zeros, uint64_t* written) {
    using S = simd::Simd<T>;
    if (rr.col_w < 0) return;
    const Operands o = decode_operands(args + r.a);
    const uint32_t n = o.tail[0], d = o.tail[1];
    const size_t nt = o.v[0].len(0);
    T* gt = row + rr.col_w;
    if (written && nt / std::max<size_t>(d, 1) > 64) written = nullptr;
    if (!live || d == 0) {
        put_zeros(gt, nt, false);
        if (written) *written = 0;
        return;
    }
    const uint32_t* ids = o.tail + 2;
    const T* gy = f.grads() + r.out;
    constexpr size_t w = size_t(S::W);
    const size_t main = d / w * w, rows = nt / d;
    const int tail = int(d - main);
    auto add_in = [&](T* dst, const T* prev, const T* src) {
        for (size_t j = 0; j < main; j += w) S::store(dst + j, S::add(S::load(prev + j), S::load(src + j)));
        if (tail) S::store(dst + main, S::add(S::load(prev + main, tail), S::load(src + main, tail)), tail);
    };
    if (rows > 64) {
        put_zeros(gt, nt, false);
        for (uint32_t i = 0; i < n; ++i) add_in(gt + size_t(ids[i]) * d, gt + size_t(ids[i]) * d, gy + size_t(i) * d);
        return;
    }
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const uint64_t bit = uint64_t(1) << ids[i];
        T* dst = gt + size_t(ids[i]) * d;
        add_in(dst, (seen & bit) ? dst : zeros, gy + size_t(i) * d);
        seen |= bit;
    }
    uint64_t unseen = ~seen & (rows == 64 ? ~uint64_t(0) : (uint64_t(1) << rows) - 1);
    if (written) {
        unseen &= *written;
        *written = seen;
    }
    // (stores of whole vectors through the masked store, all lanes on: a plain loop of them
    // becomes a call to memset, whose setup outweighs a table row's few vectors)
    for (; unseen; unseen &= unseen - 1) {
        T* dst = gt + size_t(std::countr_zero(unseen)) * d;
        for (size_t j = 0; j < main; j += w) S::store(dst + j, S::zero(), int(w));
        if (tail) S::store(dst + main, S::zero(), tail);
    }
}

}  // namespace rows_detail

// Whether P's per-sample rows can be written by replay_rows (planned once per program).
template <typename T>
bool rows_usable(const Program<T>& P, RowsPlan<T>& L) {
    if (L.laid_out_for != &P) {
        L.laid_out_for = &P;
        L.usable = rows_detail::plan(P, L) ? 1 : 0;
    }
    return L.usable == 1;
}

// replay(P, W, in, Reduce::rows, ...) for a program rows_usable: each sample's row of `rows`
// (num_wrt wide) written once, its value into `values` (if not null), with ordinary or non-temporal
// stores (rows_streamed; `reused`: rows was written before the call). Returns the samples whose
// guards failed (nothing written for them).
template <typename T>
ReplayResult replay_rows(const Program<T>& P, Workspace<T>& W, RowsPlan<T>& L, const T* arena_values, const Samples& in,
                         T seed, double* values, T* rows, bool reused) {
    ReplayResult res;
    prepare(P, W, arena_values, in.n);
    const size_t k = P.inputs.size(), nid = P.num_ids, nw = P.num_wrt;
    const bool stream = rows_streamed(in.n * nw * sizeof(T), reused);
    const bool discard = rows_store() == RowsStore::discard;
    const Frame<T> f = W.frame();
    Frame<T> first = f;
    first.first_write = true;
    const uint32_t* args = W.args.data();
    T* g = W.g.data();
    // Streamed, the parts of a row other than a wide layer's whole lines are made in a buffer
    // (whose columns no record writes stay zero), and go out while the next sample computes: two
    // buffers, one being made while the other is streamed out.
    rows_detail::Trickle<T> trickle;
    int cur = 0;
    if (stream)
        for (int b = 0; b < 2; ++b) {
            L.row[b].assign(nw, T(0));
            L.written[b].assign(P.sweep.size(), 0);
        }
    auto between = [&] {
        if (stream) trickle.some(trickle.step);
    };
    for (size_t k = 0; k < P.recs.size(); ++k)  // the narrow layers' W^T, for this call's weights
        if (L.narrow[k] >= 0) {
            const Operands o = decode_operands(args + P.recs[k].a);
            const size_t in = o.tail[1], out = o.tail[2];
            const T* Wk = f.weight(o.v[1].first(0));
            T* t = L.wt.data() + L.narrow[k];
            for (size_t u = 0; u < out; ++u)
                for (size_t i = 0; i < in; ++i) t[i * out + u] = Wk[u * in + i];
        }
    for (size_t s = 0; s < in.n; ++s) {
        set_sample(P, W, in.x + s * k, in.ids + s * nid);
        if (rows_detail::forward_rows(P, W, L, between) >= 0) {
            res.failed.push_back(s);
            continue;
        }
        if (values) values[s] = double(W.v[P.root]);
        T* const out = rows + s * nw;
        T* const row = stream ? L.row[cur].data() : out;
        T* const direct = stream && !discard ? out : nullptr;
        L.holes.clear();
        if (!stream)
            for (const Span& c : L.zero_cols) rows_detail::put_zeros(out + c.first, c.second, false);
        for (const Span& sp : L.zero_local) std::fill_n(g + sp.first, sp.second, T(0));
        g[P.root] += seed;
        for (size_t i = P.sweep.size(); i-- > 0;) {
            const Record& r = P.recs[P.sweep[i]];
            bool live = g[r.out] != T(0);
            for (uint32_t j = 1; !live && j < r.nout; ++j) live = g[r.out + j] != T(0);
            const bool writes = P.first_write[P.sweep[i]] != 0;
            const RowRecord& rr = L.recs[i];
            if (rr.kind == RowKind::linear)
                rows_detail::linear_row(f, r, args, live, writes, rr, row, direct, L.holes, L);
            else if (rr.kind == RowKind::gather)
                rows_detail::gather_row(f, r, args, live, rr, row, L.zeros.data(),
                                        stream ? &L.written[cur][i] : nullptr);
            else if (live && L.ce[P.sweep[i]] >= 0) {
                const record_timer::Scope timed(1, record_timer::kind_of(r.op));
                rows_detail::cross_entropy_row_backward(writes ? first : f, r, args,
                                                        L.ce_exps.data() + L.ce[P.sweep[i]], L.ce_gz.data());
            } else if (live)
                backward_record(writes ? first : f, r, args);
            else if (writes)
                zero_spans(g, decode_operands(args + r.a).v[0]);
        }
        if (!stream || discard) continue;
        // the row from `row` into the matrix, but for what went there directly: over the next
        // sample's forward records (measured better than over all its records, which put stores
        // beside the weight grads' own, or than one burst)
        trickle.queue(out, row, nw, L.holes, P.recs.size());
        cur ^= 1;
    }
    if (stream) {
        trickle.rest();
        simd::stream_fence();
    }
    // the frame's external grads were never written: zero, as prepare() left them
    W.wrt_grads_zero = true;
    return res;
}

// n elements of dst set to v with non-temporal stores (whole aligned vectors; the ends
// ordinary), then fenced: the least a streamed output costs to write (benchmarks' write floor).
template <typename T>
void stream_fill(T* dst, size_t n, T v) {
    using S = simd::Simd<T>;
    const typename S::V x = S::set1(v);
    rows_detail::put(dst, n, true, [x](size_t, int = 0) { return x; });
    simd::stream_fence();
}

}  // namespace bt::lanes
