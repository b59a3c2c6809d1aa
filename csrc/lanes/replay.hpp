// Lane replay: a recorded program run over a block of samples at once, each record applied across
// the block's lanes (lanes/kernels.hpp), for the replays that hand out each sample's value and
// gradient (Reduce::values, rows, sum). Every lane computes bitwise what program.hpp's one-sample
// replay computes for its sample:
//   - the frame is program.hpp's, widened: slot s holds B lanes (values and grads);
//   - guards are checked per lane after the forward; a lane whose guard comes out differently is
//     reported failed and nothing is written for it, exactly as the one-sample replay reports that
//     sample (the caller recomputes it); its neighbours' lanes are unaffected;
//   - Reduce::sum adds the samples' grads into `sum` in ascending sample order, one sample after
//     another, as the one-sample replay does (the fixed order of a mean over samples).
// A block is B = vector width x an unroll (the largest whose frame fits a cache budget), so the
// per-record dispatch is paid once for many samples. The last block of N not a multiple of B is
// padded with copies of its last sample, whose lanes are never read out. Outputs of a megabyte and
// more leave through streaming stores (kStreamBytes).
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

#include "../kernels/simd.hpp"
#include "../program.hpp"
#include "kernels.hpp"

namespace bt::lanes {

// Whether replays may use the lanes (on by default): off, every sample replays alone, which the
// tests compare against.
inline std::atomic<bool>& enabled_flag() {
    static std::atomic<bool> on{true};
    return on;
}
inline bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }
inline void set_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

// Whether program P runs in lanes: every record a lane op (no range record, hence no id rewrite,
// no transposed or in-place weights).
template <typename T>
bool eligible(const Program<T>& P) {
    for (const Record& r : P.recs)
        if (!lane_op(r.op)) return false;
    return P.id_slots.empty() && P.arena_weights.empty() && P.transposed_weights.empty();
}

// Frame bytes (values and grads) from which a wider block stops paying: the block's frame should
// stay in the core's private caches.
inline constexpr size_t kFrameBudget = size_t(256) << 10;

// Outputs (values and rows together) from which a replay writes them with streaming stores
// (detail::StreamOut): larger than the core's private L2, they cannot stay in it, and where the
// caller's arrays are not in any cache (out= arrays reused across other work usually are not),
// ordinary stores first fetch every line for ownership, a second memory pass the streaming stores
// skip. Smaller outputs take ordinary stores and stay in cache for the caller.
inline constexpr size_t kStreamBytes = size_t(1) << 20;

// Lanes per block for a frame of `slots` slots: the vector width times 16, 4 or 1.
template <typename T>
size_t block_lanes(size_t slots) {
    constexpr size_t W = vector_width<T>();
    for (size_t u : {size_t(16), size_t(4)})
        if (slots * W * u * 2 * sizeof(T) <= kFrameBudget) return W * u;
    return W;
}

// The frame's storage, aligned to a cache line: a slot is B lanes, a multiple of the vector width,
// so with the base aligned no vector load or store of a kernel straddles two lines (from malloc's
// 16-byte alignment most would).
template <typename T>
struct LineAligned {
    using value_type = T;
    static constexpr std::align_val_t kAlign{64};
    LineAligned() = default;
    template <typename U>
    LineAligned(const LineAligned<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
    void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
    template <typename U>
    bool operator==(const LineAligned<U>&) const {
        return true;
    }
};

// One thread's lane state for one program.
template <typename T>
struct LaneWorkspace {
    std::vector<T, LineAligned<T>> v, g;
    LaneScratch<T> scratch;
    const Program<T>* laid_out_for = nullptr;
    size_t B = 0;
    int eligible = -1;  // -1: not yet known for laid_out_for
    // Per entry of P.sweep: backward_lanes' `first` bits; and the grad spans a block zeroes before
    // its sweep: Program::sweep_grads but the slots a first writer writes.
    std::vector<uint8_t> first;
    std::vector<Span> zero;
    // The root's grad is local and zeroed before each sweep: the seed is then stored (0 + seed,
    // the same bits) rather than added into a line memset just wrote, and `zero` leaves it out.
    bool seed_stores = false;
    // A block function compiled from P at run time (lanes/native.hpp, src/burtorch/native/), or
    // null: it runs a block's forward and (grads != 0) backward in place of the record loops,
    // leaving the root's and the guards' values in v and the wrt nodes' grads in g, bitwise what
    // the record loops leave there. Set by whoever loaded it, after checking those bits.
    using NativeBlock = void (*)(T* v, T* g, size_t B, int grads, T seed);
    NativeBlock native = nullptr;
    // Its rows mode (with native only): a full block of a program without guards, its rows of X
    // read and its values and rows of grads written in the same loop (x: the block's first row;
    // values, rows: where the block's go), what load_rows, the values' copy and store_rows do
    // around `native` otherwise.
    using NativeRows = void (*)(T* v, T* g, size_t B, T seed, const double* x, double* values, T* rows);
    NativeRows native_rows = nullptr;
};

// Which scalar records of P's sweep reach an argument's grad first (in the sweep's order, the
// seed at the root before them all), and so the grads left to zero. Var-arity records add into
// every argument, so theirs are zeroed.
template <typename T>
void plan_first_writes(const Program<T>& P, LaneWorkspace<T>& L) {
    const size_t fs = P.frame_size();
    std::vector<char> reached(fs, 0), written(fs, 0);
    reached[P.root] = 1;
    L.first.assign(P.sweep.size(), 0);
    for (size_t i = P.sweep.size(); i-- > 0;) {
        const Record& r = P.recs[P.sweep[i]];
        const OpKind k = op_info(r.op).kind;
        if (k == OpKind::unary || k == OpKind::unary_imm || k == OpKind::binary) {
            if (!reached[r.a] && r.a >= P.n_ext) L.first[i] |= 1, written[r.a] = 1;
            reached[r.a] = 1;
            if (k == OpKind::binary && r.b != r.a) {
                if (!reached[r.b] && r.b >= P.n_ext) L.first[i] |= 2, written[r.b] = 1;
                reached[r.b] = 1;
            }
        } else {
            for_each_arg_span(r, P.args.data() + r.a, [&](uint32_t f, uint32_t len) {
                std::fill(reached.begin() + f, reached.begin() + f + len, char(1));
            });
        }
    }
    L.zero.clear();
    L.seed_stores = false;
    for (const Span& sp : P.sweep_grads)
        for (uint32_t j = sp.first; j < sp.first + sp.second; ++j) {
            if (written[j]) continue;
            if (j == P.root && j >= P.n_ext) {
                L.seed_stores = true;
                continue;
            }
            if (!L.zero.empty() && L.zero.back().first + L.zero.back().second == j)
                ++L.zero.back().second;
            else
                L.zero.emplace_back(j, 1u);
        }
}

template <typename T>
bool usable(const Program<T>& P, LaneWorkspace<T>& L) {
    if (L.laid_out_for != &P) {
        L.laid_out_for = &P;
        L.eligible = eligible(P) ? 1 : 0;
        L.B = 0;
        if (L.eligible) plan_first_writes(P, L);
    }
    return L.eligible == 1;
}

namespace detail {

// Sample rows in and out of the lanes: row l of a (rows x K) row-major array is lane l of K
// slots. K known at compile time (the common 1-4 columns) lets the compiler unroll the columns
// and vectorize over the lanes; other widths take the generic loop.
template <size_t K, typename T>
void rows_to_lanes(T* const* dst, const double* x, size_t m, size_t k) {
    const size_t kk = K ? K : k;
    for (size_t l = 0; l < m; ++l)
        for (size_t i = 0; i < kk; ++i) dst[i][l] = static_cast<T>(x[l * kk + i]);
}

template <size_t K, typename T>
void lanes_to_rows(const T* const* src, T* out, size_t m, size_t k) {
    const size_t kk = K ? K : k;
    for (size_t l = 0; l < m; ++l)
        for (size_t j = 0; j < kk; ++j) out[l * kk + j] = src[j][l];
}

template <typename T>
void load_rows(T* const* dst, const double* x, size_t m, size_t k) {
    switch (k) {
        case 1: return rows_to_lanes<1>(dst, x, m, k);
        case 2: return rows_to_lanes<2>(dst, x, m, k);
        case 3: return rows_to_lanes<3>(dst, x, m, k);
        case 4: return rows_to_lanes<4>(dst, x, m, k);
        default: return rows_to_lanes<0>(dst, x, m, k);
    }
}

template <typename T>
void store_rows(const T* const* src, T* out, size_t m, size_t k) {
    switch (k) {
        case 1: return lanes_to_rows<1>(src, out, m, k);
        case 2: return lanes_to_rows<2>(src, out, m, k);
        case 3: return lanes_to_rows<3>(src, out, m, k);
        case 4: return lanes_to_rows<4>(src, out, m, k);
        default: return lanes_to_rows<0>(src, out, m, k);
    }
}

// Asks for the cache lines of [p, p + bytes): the next block's rows of X (read) and of the outputs
// (write). A block's reads of X come in a burst at its start and its stores in a burst at its end;
// asked for one block ahead, the lines arrive while this block computes, instead of stalling those
// bursts line by line when the caller's arrays are not in cache (out= arrays reused between calls
// usually are not: other work ran in between).
template <bool Write>
inline void prefetch_lines(const void* p, size_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
    const char* c = static_cast<const char*>(p);
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, Write ? 1 : 0, 3);
#else
    (void)p;
    (void)bytes;
#endif
}

// One output array written block after block with streaming stores (simd.hpp; ordinary ones on
// targets without): whole registers at addresses aligned to the register's size. A block puts its
// elements in `buf` after what is left of the previous block's short of a whole register (the
// carry), so every line but the array's first and last is written whole and never fetched (rows
// of 2 doubles start 16 bytes into a line as often as not, so a block's end rarely falls on a
// line's end). The carry moves and the ends are stored with whole (masked) registers: per-element
// loops there become library calls per block.
template <typename T>
struct StreamOut {
    using S = simd::Simd<T>;
    static constexpr size_t W = size_t(S::W);
    T* dst = nullptr;
    size_t done = 0;  // dst[0, done) written; the carry, buf[W - nc, W), goes to dst[done, done + nc)
    size_t nc = 0;
    std::vector<T, LineAligned<T>> buf;  // W (the carry ends at W), a block's elements, W of slack

    void reserve(size_t block) { buf.assign(block + 2 * W, T(0)); }
    void start(T* out, size_t at) {
        dst = out;
        done = at;
        nc = 0;
    }
    // Where a block puts its elements before put(their count).
    T* block() { return buf.data() + W; }
    void put(size_t n) {
        const T* from = buf.data() + W - nc;
        size_t total = nc + n;
        if (reinterpret_cast<uintptr_t>(dst) % sizeof(T) != 0) {  // never for numpy's arrays of T
            std::copy(from, from + total, dst + done);
            done += total;
            nc = 0;
            return;
        }
        const size_t off = reinterpret_cast<uintptr_t>(dst + done) % (W * sizeof(T)) / sizeof(T);
        if (off) {  // up to the first aligned address: where the array or a resumed stream starts
            const size_t h = std::min(W - off, total);
            S::store(dst + done, S::load(from), int(h));
            done += h;
            from += h;
            total -= h;
        }
        const size_t full = total - total % W;
        for (size_t j = 0; j < full; j += W) S::stream(dst + done + j, S::load(from + j));
        done += full;
        nc = total - full;
        if (nc) S::store(buf.data() + W - nc, S::load(from + full));  // within buf: its slack
    }
    // Writes the carry (an ordinary masked store).
    void flush() {
        if (nc) S::store(dst + done, S::load(buf.data() + W - nc), int(nc));
        done += nc;
        nc = 0;
    }
};

// Stream: the outputs go out through StreamOut (the caller decides, from their size).
template <size_t B, bool Stream, typename T>
void replay_blocks(const Program<T>& P, LaneWorkspace<T>& L, const T* arena_values, const Samples& in, Reduce reduce,
                   T seed, double* values, T* rows, double* sum, ReplayResult& res) {
    const size_t fs = P.frame_size();
    if (L.B != B) {  // lay the frame out: constants broadcast to every lane
        L.v.assign(fs * B, T(0));
        L.g.assign(fs * B, T(0));
        for (uint32_t s = 0; s < P.n_local; ++s) std::fill_n(L.v.begin() + size_t(P.n_ext + s) * B, B, P.local_init[s]);
        L.B = B;
    }
    T* v = L.v.data();
    T* g = L.g.data();
    for (const ExternalSpan& e : P.ext)  // parameters change between calls
        for (uint32_t j = 0; j < e.len; ++j) std::fill_n(v + size_t(e.at + j) * B, B, arena_values[e.first + j]);
    const uint32_t* args = P.args.data();
    const size_t k = P.inputs.size(), nw = P.num_wrt;
    std::vector<char> bad(B);
    std::vector<T*> xin;  // each input's lanes, in the order of a row of X
    for (uint32_t in_slot : P.inputs) xin.push_back(v + size_t(in_slot) * B);
    std::vector<const T*> gw;  // each wrt node's lane grads, in the order of a row
    for (const Span& sp : P.wrt)
        for (uint32_t t = 0; t < sp.second; ++t) gw.push_back(g + size_t(sp.first + t) * B);
    const bool rows_out = reduce == Reduce::rows && nw;
    constexpr bool stream = Stream;
    // a block's values and rows made in L1, then streamed out
    StreamOut<double> value_out;
    StreamOut<T> row_out;
    if (stream && values) value_out.reserve(B);
    if (stream && rows_out) row_out.reserve(B * nw);
    value_out.start(values, 0);
    row_out.start(rows, 0);
    // The block function, read once: a block's forward and sweep must come from the same side
    // (the frame holds no intermediate the sweep could read after the block function's forward).
    const typename LaneWorkspace<T>::NativeBlock native = L.native;
    const typename LaneWorkspace<T>::NativeRows native_rows = native ? L.native_rows : nullptr;
    // its rows mode: per-sample values and rows, no guard to check
    const bool fused = native_rows && rows_out && values && P.guards.empty() && in.x;
    for (size_t s0 = 0; s0 < in.n; s0 += B) {
        const size_t m = std::min(B, in.n - s0);  // real lanes; the rest repeat sample s0 + m - 1
        if (s0 + B < in.n) {
            const size_t s1 = s0 + B, m1 = std::min(B, in.n - s1);
            if (k) prefetch_lines<false>(in.x + s1 * k, m1 * k * sizeof(double));
            if (values && !stream) prefetch_lines<true>(values + s1, m1 * sizeof(double));
            if (rows_out && !stream) prefetch_lines<true>(rows + s1 * nw, m1 * nw * sizeof(T));
        }
        if (fused && m == B) {
            double* vb = stream ? value_out.block() : values + s0;
            T* rb = stream ? row_out.block() : rows + s0 * nw;
            native_rows(v, g, B, seed, in.x + s0 * k, vb, rb);
            if (stream) {
                value_out.put(m);
                row_out.put(m * nw);
            }
            continue;
        }
        if (k) load_rows(xin.data(), in.x + s0 * k, m, k);
        for (size_t i = 0; i < k; ++i)
            for (size_t l = m; l < B; ++l) xin[i][l] = xin[i][m - 1];
        if (native)
            native(v, g, B, reduce == Reduce::values ? 0 : 1, seed);
        else
            for (const Record& r : P.recs) forward_lanes<B>(v, r, args);
        bool any_bad = false;
        std::fill(bad.begin(), bad.end(), char(0));
        for (const Guard& gd : P.guards)
            for (size_t l = 0; l < m; ++l) {
                const double a = double(v[size_t(gd.a) * B + l]);
                const double b = gd.rhs_const ? gd.c : double(v[size_t(gd.b) * B + l]);
                bool r = false;
                switch (gd.op) {
                    case GuardOp::lt: r = a < b; break;
                    case GuardOp::le: r = a <= b; break;
                    case GuardOp::gt: r = a > b; break;
                    case GuardOp::ge: r = a >= b; break;
                    case GuardOp::nonzero: r = a != 0.0; break;
                }
                if (r != gd.expected) bad[l] = 1, any_bad = true;
            }
        if (any_bad)
            for (size_t l = 0; l < m; ++l)
                if (bad[l]) res.failed.push_back(s0 + l);
        const T* y = v + size_t(P.root) * B;
        if (stream && any_bad) {  // this block's lanes one by one: the streams resume after it
            value_out.flush();
            row_out.flush();
            value_out.start(values, s0 + B);
            row_out.start(rows, (s0 + B) * nw);
        }
        if (values && !any_bad && stream) {
            double* BT_LANES_RESTRICT vb = value_out.block();
            BT_LANES_SIMD for (size_t l = 0; l < B; ++l) vb[l] = double(y[l]);
            value_out.put(m);
        } else if (values && !any_bad)
            for (size_t l = 0; l < m; ++l) values[s0 + l] = double(y[l]);
        else if (values)
            for (size_t l = 0; l < m; ++l)
                if (!bad[l]) values[s0 + l] = double(y[l]);
        if (reduce == Reduce::values) continue;
        if (!native) {  // else the block function left the wrt grads in g
            // The grads a one-sample sweep starts from: its local ones zeroed, the wrt ones taken
            // (zeroed) after the previous sample; every external grad is zeroed here (the others are
            // never read out).
            for (const Span& sp : L.zero) std::fill_n(g + size_t(sp.first) * B, size_t(sp.second) * B, T(0));
            std::fill_n(g, size_t(P.n_ext) * B, T(0));
            T* gr = g + size_t(P.root) * B;
            if (L.seed_stores)
                std::fill_n(gr, B, T(0) + seed);
            else
                BT_LANES_SIMD for (size_t l = 0; l < B; ++l) gr[l] += seed;
            for (size_t i = P.sweep.size(); i-- > 0;)
                backward_lanes<B>(v, g, P.recs[P.sweep[i]], args, L.scratch, L.first[i]);
        }
        if (reduce == Reduce::rows && !any_bad) {  // sample after sample, each row in turn
            if (rows_out && stream) {
                store_rows(gw.data(), row_out.block(), m, nw);
                row_out.put(m * nw);
            } else if (nw) {
                store_rows(gw.data(), rows + s0 * nw, m, nw);
            }
        } else if (reduce == Reduce::rows) {
            size_t j = 0;
            for (const Span& sp : P.wrt)
                for (uint32_t t = 0; t < sp.second; ++t, ++j) {
                    const T* gs = g + size_t(sp.first + t) * B;
                    T* out = rows + s0 * nw + j;
                    for (size_t l = 0; l < m; ++l)
                        if (!bad[l]) out[l * nw] = gs[l];
                }
        } else if (reduce == Reduce::sum) {
            size_t j = 0;
            for (const Span& sp : P.wrt)
                for (uint32_t t = 0; t < sp.second; ++t, ++j) {
                    const T* gs = g + size_t(sp.first + t) * B;
                    double acc = sum[j];
                    for (size_t l = 0; l < m; ++l)  // ascending samples: the one-sample order
                        if (!bad[l]) acc += double(gs[l]);
                    sum[j] = acc;
                }
        }
        // the wrt grads of the frame stay as they are: the next block zeroes what it reads
    }
    if (stream) {
        if (values) value_out.flush();
        if (rows_out) row_out.flush();
        simd::stream_fence();  // the streamed lines ordered before what the caller does next
    }
}

}  // namespace detail

// Replays samples [0, n) of `in` in blocks of lanes (P must be usable with L, reduce one of
// values, rows, sum), with replay()'s meaning of values, rows and sum. Returns the failed samples.
template <typename T>
ReplayResult replay(const Program<T>& P, LaneWorkspace<T>& L, const T* arena_values, const Samples& in, Reduce reduce,
                    T seed, double* values, T* rows, double* sum) {
    ReplayResult res;
    constexpr size_t W = vector_width<T>();
    const size_t B = block_lanes<T>(P.frame_size());
    const size_t out_bytes =
        (values ? in.n * sizeof(double) : 0) + (reduce == Reduce::rows ? in.n * P.num_wrt * sizeof(T) : 0);
    // only the widest blocks stream: a frame that fits them is a short program, whose time the
    // outputs' memory traffic dominates; the narrower blocks' kernels are not instantiated twice
    if (B == W * 16 && out_bytes >= kStreamBytes)
        detail::replay_blocks<W * 16, true>(P, L, arena_values, in, reduce, seed, values, rows, sum, res);
    else if (B == W * 16)
        detail::replay_blocks<W * 16, false>(P, L, arena_values, in, reduce, seed, values, rows, sum, res);
    else if (B == W * 4)
        detail::replay_blocks<W * 4, false>(P, L, arena_values, in, reduce, seed, values, rows, sum, res);
    else
        detail::replay_blocks<W, false>(P, L, arena_values, in, reduce, seed, values, rows, sum, res);
    return res;
}

}  // namespace bt::lanes
