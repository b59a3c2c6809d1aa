// A lookup feeding a linear layer, as one record: y = x W^T + b, or tanh of it, where row r of x
// is the table rows ids[r P], ..., ids[r P + P - 1] side by side (P = in / d positions of d
// values: a chunk's embedded contexts into its first layer). Operands: the table (one span,
// V x d), W (one span, out x in), optionally b (one span of out). Tail: [rows, in, out, flags, d,
// ids (rows P)], flags: kLookupBias | kLookupTanh.
//
// With tanh the record's outputs are the activations and the pre-activations are never stored:
// the task that computes a block of units applies tanh to it, and in the sweep turns the
// activations' gradient into the pre-activations' for its own block (map.hpp's kernels, so the
// bits of the layer followed by a tanh record). Split by units on two threads, a tanh record of
// its own read h, half of it written on the other core, and its gradient wrote gh for both
// halves of the sweep to read, so the tanh records took more than twice as long on two threads as
// on one (python -m burtorch_bench.threads --only records shows them).
//
// A chunk of many rows repeats the table's few rows at every position, so from rows >= 1.5 V the
// record computes through per-position tables instead of x. With W_p the d columns of W that
// position p reads:
//   forward:  T_p = table W_p^T (V x out);  y[r] = b + T_0[ids(r, 0)] + ... + T_{P-1}[ids(r, P-1)]
//   backward: G_p = the rows of gy summed by ids(., p) (V x out);
//             g(table) += G_0 W_0 + G_1 W_1 + ...;  gW_p += G_p^T table (or W_p takes its SGD step)
// V rows of work per position instead of `rows`, and no input gradient to scatter. With a small
// vocabulary the tables win clearly from about twice V rows, the two paths are even near V, and
// below it the tables lose; hence the 1.5 V threshold. Below 1.5 V rows the record gathers x and
// runs the linear layer's own products (kernels/linear.hpp), with their bits.
//
// Either way the path depends on the shape alone, so eager appends and replays compute the same
// bits. Tasks split the tables by output units, forward and backward alike, so each core reads
// and steps the same rows of W: y, G_p and W's step (or gW) are one chain an element, the same
// bits on any thread count; the table's gradient, a sum over the units, is added up in parts,
// one a task, in task order: the same on every run for a given thread count, and within rounding
// of one thread's. Each G_p W_p reads W_p before W_p steps.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "../kernels/linear.hpp"
#include "common.hpp"
#include "map.hpp"

namespace bt {

inline constexpr uint32_t kLookupBias = 1, kLookupTanh = 2;

struct LookupLinearShape {
    uint32_t rows, nin, nout, d, P, V, table, w;
    bool has_bias, tanh;
    const uint32_t* ids;  // rows P of them, row by row
    explicit LookupLinearShape(const Operands& o)
        : rows(o.tail[0]),
          nin(o.tail[1]),
          nout(o.tail[2]),
          d(o.tail[4]),
          P(o.tail[1] / o.tail[4]),
          V(o.v[0].len(0) / o.tail[4]),
          table(o.v[0].first(0)),
          w(o.v[1].first(0)),
          has_bias((o.tail[3] & kLookupBias) != 0),
          tanh((o.tail[3] & kLookupTanh) != 0),
          ids(o.tail + 5) {}
    bool by_tables() const { return size_t(3) * V <= size_t(2) * rows; }
    size_t nx() const { return size_t(rows) * nin; }
    size_t ny() const { return size_t(rows) * nout; }
    size_t table_size() const { return size_t(V) * nout; }  // one T_p or G_p
    uint32_t id(size_t r, size_t p) const { return ids[r * P + p]; }
};

template <typename T>
inline uint32_t append_lookup_linear(Arena<T>& A, const Spans& table, const Spans& W, const Spans* b, uint32_t d,
                                     const uint32_t* ids, uint32_t rows, uint32_t nin, uint32_t nout, bool tanh) {
    const uint32_t tail[5] = {rows, nin, nout, (b ? kLookupBias : 0u) | (tanh ? kLookupTanh : 0u), d};
    const size_t ny = size_t(rows) * nout, nids = size_t(rows) * (nin / d);
    Appended ap = b ? append_range(A, Op::lookup_linear, {&table, &W, b}, tail, 5, ny, 0, 0.0, ids, nids)
                    : append_range(A, Op::lookup_linear, {&table, &W}, tail, 5, ny, 0, 0.0, ids, nids);
    forward_appended(A, ap);
    return ap.out;
}

// The activation's forward and, from the activations y, the pre-activations' gradient, as the
// tanh map record computes them: 0 + (gy (1 - y^2)) is what that record writes into the grads
// of a layer's output that nothing else reads.
template <typename T>
inline void lookup_tanh(const T* pre, T* y, size_t n) {
    map_unary_kernel<T>(Op::tanh, pre, y, n, T(0));
}
template <typename T>
inline void lookup_tanh_grad(const T* y, const T* gy, T* g, size_t n) {
    for (size_t i = 0; i < n; ++i) g[i] = gy[i] * (T(1) - y[i] * y[i]) + T(0);
}

// x (rows x in) from the table, row by row.
template <typename T>
inline void lookup_rows(const LookupLinearShape& s, const T* table, T* x) {
    const size_t n = size_t(s.rows) * s.P;
    for (size_t i = 0; i < n; ++i)
        std::copy(table + size_t(s.ids[i]) * s.d, table + size_t(s.ids[i] + 1) * s.d, x + i * s.d);
}

// How many tasks the tables' products split into (whether they split at all goes by their
// multiply-adds, as a linear layer's does), each a block of output units. Below 256 units, one
// task per thread; from 256, blocks of kLookupFineUnits, more tasks than threads, which the
// threads claim as they come free. Split in halves, the helper's half took clearly longer than
// the caller's (it reads gy and the rows of W that records on the caller's core just wrote), and
// the record waited for it; with small tasks the caller takes the larger share. Below 256 units
// the tasks' products are too small for that to pay (steps took longer).
inline constexpr size_t kLookupFineFrom = 256;
// Units a fine task takes: narrower products lose more at their edges than they balance.
inline constexpr size_t kLookupFineUnits = 64;
inline size_t lookup_table_tasks(const LookupLinearShape& s) {
    const size_t most = (size_t(s.nout) + kLinearAlign - 1) / kLinearAlign;
    const size_t fine = (size_t(s.nout) + kLookupFineUnits - 1) / kLookupFineUnits;
    const size_t tasks = threads::tasks_for(double(s.V) * s.nin * s.nout, kLinearParallelWork, most);
    return tasks > 1 && s.nout >= kLookupFineFrom ? std::min(std::max(fine, tasks), most) : tasks;
}

template <typename T>
inline void lookup_linear_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const LookupLinearShape s(o);
    const T* table = A.values() + s.table;
    const T* W = A.weight(s.w);
    const T* b = s.has_bias ? A.values() + o.v[2].first(0) : nullptr;
    T* y = A.values() + r.out;
    if (!s.by_tables()) {
        // Scratch: [x | linear_fwd's partials | the pre-activations (with tanh)]
        const size_t tasks = linear_tasks(s.rows, s.nin, s.nout);
        const size_t nw = linear_forward_scratch(s.rows, s.nin, s.nout, false, tasks);
        T* x = A.scratch(s.nx() + nw + (s.tanh ? s.ny() : 0)).data();
        lookup_rows(s, table, x);
        T* pre = s.tanh ? x + s.nx() + nw : y;
        linear_fwd<T>(x, W, b, pre, s.rows, s.nin, s.nout, nw ? x + s.nx() : nullptr, nullptr, tasks);
        if (s.tanh) lookup_tanh(pre, y, s.ny());
        return;
    }
    // Task t: output units [o0, o1) of y, from its columns of each T_p. On several tasks each
    // builds its T_p and its block of y in scratch of its own, [T_p (V x n) | y's block (rows x n)]
    // at (V + rows) o0, and copies the block out once (through tanh, with it): added into y
    // itself, the tasks' columns met within the cache lines that straddle o0 (y's slots are not
    // line-aligned) 16 times a row, and two threads took longer than one on narrow layers.
    const size_t tasks = lookup_table_tasks(s);
    const bool own_block = tasks > 1 || s.tanh;
    T* scratch = A.scratch(own_block ? (size_t(s.V) + s.rows) * s.nout : s.table_size()).data();
    auto units = [&](size_t o0, size_t o1, T* tp, T* acc, size_t ld) {
        const size_t n = o1 - o0;
        for (size_t i = 0; i < s.rows; ++i) {
            if (b)
                std::copy(b + o0, b + o1, acc + i * ld);
            else
                std::fill(acc + i * ld, acc + i * ld + n, T(0));
        }
        for (size_t p = 0; p < s.P; ++p) {
            gemm::for_each_tile<T>(s.V, n, s.d, table, s.d, 1, W + o0 * s.nin + p * s.d, s.nin, true, true,
                                   gemm::zero_tile<T>(), gemm::to_tile(tp, n));
            for (size_t i = 0; i < s.rows; ++i) kernels::add(acc + i * ld, tp + size_t(s.id(i, p)) * n, n);
        }
    };
    auto block = [&](size_t o0, size_t o1) {
        const size_t n = o1 - o0;
        T* tp = scratch + (size_t(s.V) + s.rows) * o0;
        T* acc = tp + size_t(s.V) * n;
        units(o0, o1, tp, acc, n);
        for (size_t i = 0; i < s.rows; ++i) {
            T* out = y + i * s.nout + o0;
            if (s.tanh)
                lookup_tanh(acc + i * n, out, n);
            else
                std::copy(acc + i * n, acc + (i + 1) * n, out);
        }
    };
    if (tasks <= 1) return own_block ? block(0, s.nout) : units(0, s.nout, scratch, y, s.nout);
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [o0, o1] = threads::split(s.nout, tasks, t, kLinearAlign);
        if (o0 < o1) block(o0, o1);
    });
}

// Scratch: [x (rows x in) | gx (rows x in) | linear_bwd's partials | with tanh, the
// pre-activations' gradient], as a linear layer over the looked-up rows; then gx's rows go into
// the table's grads in lookup order.
template <typename T>
inline void lookup_linear_backward_direct(const Frame<T>& A, const Record& r, const Operands& o,
                                          const LookupLinearShape& s, const FusedSgd* f, T* gW, bool gw_add) {
    T* g = A.grads();
    const size_t nb = linear_bwd_scratch<T>(s.rows, s.nin, s.nout, f != nullptr);
    T* buf = A.scratch(2 * s.nx() + nb + (s.tanh ? s.ny() : 0)).data();
    T* x = buf;
    T* gx = buf + s.nx();
    const T* gy = g + r.out;
    if (s.tanh) {
        T* gpre = buf + 2 * s.nx() + nb;
        lookup_tanh_grad(A.values() + r.out, gy, gpre, s.ny());
        gy = gpre;
    }
    lookup_rows(s, A.values() + s.table, x);
    const SgdSink<T> sgd = FusedSgd::sink(f, const_cast<T*>(A.weight(s.w)));
    linear_bwd(x, A.weight(s.w), gy, gx, gW, s.has_bias ? g + o.v[2].first(0) : nullptr, s.rows, s.nin, s.nout,
               f ? &sgd : nullptr, false, gw_add, false, buf + 2 * s.nx());
    T* gt = g + s.table;
    const size_t n = size_t(s.rows) * s.P;
    for (size_t i = 0; i < n; ++i) kernels::add(gt + size_t(s.ids[i]) * s.d, gx + i * s.d, s.d);
}

template <typename T>
inline void lookup_linear_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const LookupLinearShape s(o);
    const FusedSgd* f = A.applies_sgd(s.w) ? A.fused_sgd : nullptr;
    bool gw_add = true;
    T* gW = A.weight_grad(s.w, gw_add);
    if (!s.by_tables()) return lookup_linear_backward_direct(A, r, o, s, f, gW, gw_add);
    const T* table = A.values() + s.table;
    T* W = const_cast<T*>(A.weight(s.w));  // a fused step writes it in place
    T* gt = A.grads() + s.table;
    const T* gy = A.grads() + r.out;
    // Each position is self-contained over a block of units: G_p's columns, then their part of
    // H_p = G_p W_p (the table's gradient from p, read from the old W_p), then those rows of gW_p
    // or of W_p's step. Tasks take the forward's blocks of units. They took positions before
    // (the table's gradient, H_0 + H_1 + ..., then had one thread's bits), but the forward split
    // W by rows and the sweep by columns, so every step each core read and stepped rows of W that
    // the other one had just read: with the blocks of units, compiled fused steps on two threads
    // run faster on wide layers and no slower on narrow ones.
    const size_t tasks = lookup_table_tasks(s);
    const size_t nh = size_t(s.V) * s.d;
    // Units [o0, o1) of position p: G_p's columns, their part of H_p into hp, and those rows of
    // W_p's step (or of gW_p).
    // gb: row 0 of the block's gradient (its pre-activations'), rows ldg apart.
    auto position = [&](size_t p, size_t o0, size_t o1, const T* gb, size_t ldg, T* gp, T* hp) {
        const size_t n = o1 - o0;
        std::fill(gp, gp + size_t(s.V) * n, T(0));
        for (size_t i = 0; i < s.rows; ++i) kernels::add(gp + size_t(s.id(i, p)) * n, gb + i * ldg, n);
        T* wp = W + o0 * s.nin + p * s.d;
        gemm::for_each_tile<T>(s.V, s.d, n, gp, n, 1, wp, s.nin, true, false, gemm::zero_tile<T>(),
                               gemm::to_tile(hp, s.d));
        // gW_p += G_p^T table, or W_p's step; each chain over the table's rows from zero (or from gW)
        if (f) {
            gemm::for_each_tile<T>(n, s.d, s.V, gp, 1, n, table, s.d, true, false, gemm::zero_tile<T>(),
                                   gemm::sink_to_tile(FusedSgd::sink(f, wp), wp, s.nin));
        } else {
            T* gwp = gW + o0 * s.nin + p * s.d;
            if (gw_add)
                gemm::for_each_tile<T>(n, s.d, s.V, gp, 1, n, table, s.d, true, false, gemm::from_tile<T>(gwp, s.nin),
                                       gemm::to_tile(gwp, s.nin));
            else
                gemm::for_each_tile<T>(n, s.d, s.V, gp, 1, n, table, s.d, true, false, gemm::zero_tile<T>(),
                                       gemm::to_tile(gwp, s.nin));
        }
    };
    // The gradient of units [o0, o1) before the activation: gy's own columns, or with tanh a
    // block (rows x n) in own, and then the bias's part from it.
    T* gbias = s.has_bias ? A.grads() + o.v[2].first(0) : nullptr;
    auto grad_block = [&](size_t o0, size_t o1, T* own) -> std::pair<const T*, size_t> {
        if (!s.tanh) return {gy + o0, s.nout};
        const size_t n = o1 - o0;
        const T* y = A.values() + r.out;
        for (size_t i = 0; i < s.rows; ++i) lookup_tanh_grad(y + i * s.nout + o0, gy + i * s.nout + o0, own + i * n, n);
        if (gbias) gemm::grad_bias(own, gbias + o0, s.rows, n, 0, n);
        return {own, n};
    };
    const size_t nown = s.tanh ? s.ny() : 0;
    if (tasks <= 1) {
        T* scratch = A.scratch(s.table_size() + nh + nown).data();
        const auto [gb, ldg] = grad_block(0, s.nout, scratch + s.table_size() + nh);
        for (size_t p = 0; p < s.P; ++p) {
            position(p, 0, s.nout, gb, ldg, scratch, scratch + s.table_size());
            kernels::add(gt, scratch + s.table_size(), nh);
        }
    } else {
        // Scratch: each task's sum of its parts of H_0, H_1, ... (V x d), added in task order.
        T* partial = A.scratch(tasks * nh).data();
        threads::parallel_tasks(tasks, [&](size_t t) {
            const auto [o0, o1] = threads::split(s.nout, tasks, t, kLinearAlign);
            T* sum = partial + nh * t;
            std::fill(sum, sum + nh, T(0));
            if (o0 >= o1) return;
            const size_t n = o1 - o0;
            T* gp = gemm::pack_buffer<T, 3>(size_t(s.V) * n + nh + (s.tanh ? size_t(s.rows) * n : 0));
            T* hp = gp + size_t(s.V) * n;
            const auto [gb, ldg] = grad_block(o0, o1, hp + nh);
            for (size_t p = 0; p < s.P; ++p) {
                position(p, o0, o1, gb, ldg, gp, hp);
                kernels::add(sum, hp, nh);
            }
        });
        for (size_t t = 0; t < tasks; ++t) kernels::add(gt, partial + nh * t, nh);
    }
    if (gbias && !s.tanh) gemm::grad_bias(gy, gbias, s.rows, s.nout, 0, s.nout);
}

}  // namespace bt
