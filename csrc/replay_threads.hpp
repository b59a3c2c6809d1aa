// Replaying one program over a batch on several threads: the gradient oracle's accumulation of
// parameter grads (program.hpp's replay(), one workspace per task).
//
// The batch is cut into `tasks` contiguous blocks of samples, one per task, each with its own
// workspace (frame values, grads, scratch, args, transposed weights): the program and the
// arena's values are only read, so tasks share nothing they write. A task sums its block's
// parameter grads in its own workspace; at the end the blocks' sums are added to the arena's
// grads in block order. Blocks depend on the sample count and the task count alone, so a given
// thread count gives the same bits on every run.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optim.hpp"
#include "program.hpp"
#include "threads.hpp"

namespace bt {

// Elements (parameters x blocks) above which the final sum of the blocks' grads is split.
inline constexpr double kReduceParallelWork = 1 << 15;

// A plain SGD step taken where the blocks' grads are added (SGD.fused_step over chunks on several
// threads): each wrt element becomes sgd_update(w, g, lr, weight_decay) with g the batch's
// gradient, which is then not written to the arena's grads. The same expression as the step after
// the oracle, so the same bits, and one pass over the parameters instead of a pass to write the
// grads and a parallel region to read them back.
template <typename T>
struct ReduceStep {
    T* const* wrt_values;  // the arena's values of P.wrt[i]
    T lr, weight_decay;
};

struct ParallelReplayResult {
    std::vector<size_t> failed;  // samples whose guards failed (nothing added for them)
    long non_finite = -1;        // the first sample whose loss is inf or nan, if any
    double non_finite_value = 0.0;
    bool stepped = false;  // the ReduceStep was taken (not when a sample failed: grads are written then)
};

// Adds seed * d loss_s / d wrt for every sample s of `in` to wrt_grads[i] (the arena's grads of
// P.wrt[i]), and writes each loss to values[s] when values is not null. With a non-finite loss
// nothing is added at all (the caller raises). `ws` holds the tasks' workspaces between calls (a
// training loop calls this every step: laying a frame out anew and faulting its pages in each
// time would cost a large part of a small step); it grows to `tasks` entries.
// zero: the arena's grads are taken as zero (not read) and overwritten with the sum. Nothing is
// written to them when a loss is not finite. step (with zero only): the sum steps the parameters
// instead, when every sample replayed (see ReduceStep).
template <typename T>
inline ParallelReplayResult replay_accumulate(const Program<T>& P, const T* arena_values, T* const* wrt_grads,
                                              const Samples& in, T seed, double* values, size_t tasks,
                                              std::vector<Workspace<T>>& ws, bool zero = false,
                                              const ReduceStep<T>* step = nullptr) {
    ParallelReplayResult out;
    if (in.n == 0) return out;
    tasks = std::max<size_t>(1, std::min(tasks, in.n));
    if (ws.size() < tasks) ws.resize(tasks);
    std::vector<ReplayResult> res(tasks);
    std::vector<T> root(tasks, T(0));
    const size_t k = P.inputs.size(), nid = P.num_ids;
    threads::Pool::instance().run(tasks, int(tasks), [&](size_t t) {
        Workspace<T>& W = ws[t];
        const auto [s0, s1] = threads::split(in.n, tasks, t);
        prepare(P, W, arena_values, s1 - s0);  // external grads start at zero
        Samples block;
        block.n = s1 - s0;
        block.x = in.x ? in.x + s0 * k : nullptr;
        block.ids = in.ids ? in.ids + s0 * nid : nullptr;
        res[t] = replay(P, W, block, Reduce::accumulate, seed, values ? values + s0 : nullptr, static_cast<T*>(nullptr),
                        nullptr, true);
        root[t] = W.v[P.root];
        for (size_t& s : res[t].failed) s += s0;
        if (res[t].non_finite >= 0) res[t].non_finite += long(s0);
    });
    for (size_t t = 0; t < tasks; ++t) {
        out.failed.insert(out.failed.end(), res[t].failed.begin(), res[t].failed.end());
        if (res[t].non_finite >= 0 && out.non_finite < 0) {
            out.non_finite = res[t].non_finite;
            out.non_finite_value = double(root[t]);
        }
    }
    if (out.non_finite >= 0) return out;
    out.stepped = step && zero && out.failed.empty();
    // The blocks' sums are added element by element in block order (the same sum on every run),
    // the elements split between the tasks: a serial pass over every block's copy of the
    // parameters' grads cost as much as the replay itself on a wide layer.
    std::vector<size_t> at(P.wrt.size() + 1, 0);  // where wrt node i starts in the joined range
    for (size_t i = 0; i < P.wrt.size(); ++i) at[i + 1] = at[i] + P.wrt[i].second;
    const size_t total = at.back();
    // split over the threads this call was given (not the global count), unless it is small
    const size_t parts = double(total) * double(tasks) < kReduceParallelWork ? 1 : tasks;
    // acc[j] = (init[j] or 0) + block 0's g[j] + block 1's ..., each block's g zeroed as it is read:
    // one pass over every buffer, a strip at a time so that the partial sums stay in L1.
    constexpr size_t kStrip = 256;
    auto sum_strip = [&](T* acc, const T* init, size_t src, size_t n) {
        for (size_t j = 0; j < n; ++j) acc[j] = init ? init[j] : T(0);
        for (size_t t = 0; t < tasks; ++t) {
            T* g = ws[t].g.data() + src;
            for (size_t j = 0; j < n; ++j) acc[j] += g[j];
            std::fill(g, g + n, T(0));
        }
    };
    auto add_blocks = [&](T* dst, size_t src, size_t len) {
        T acc[kStrip];
        for (size_t s0 = 0; s0 < len; s0 += kStrip) {
            const size_t n = std::min(kStrip, len - s0);
            sum_strip(acc, zero ? nullptr : dst + s0, src + s0, n);
            std::copy(acc, acc + n, dst + s0);
        }
    };
    // Stepping: w[j] = sgd_update(w[j], that sum). Split across threads, the new values go out
    // through streaming stores (optim.hpp's write_blocks): every core read the weights during the
    // replay, and an ordinary store first waits for the line to leave the other core's cache.
    auto step_blocks = [&](T* w, size_t src, size_t len) {
        write_blocks(w, len, parts > 1, [&](size_t i0, size_t i1, T* o) {
            T acc[kStrip];
            for (size_t s0 = i0; s0 < i1; s0 += kStrip) {
                const size_t n = std::min(kStrip, i1 - s0);
                sum_strip(acc, nullptr, src + s0, n);
                for (size_t j = 0; j < n; ++j)
                    o[s0 - i0 + j] = sgd_update(w[s0 + j], acc[j], step->lr, step->weight_decay);
            }
        });
    };
    threads::Pool::instance().run(parts, int(parts), [&](size_t p) {
        const auto [b, e] = threads::split(total, parts, p, 16);
        size_t i = size_t(std::upper_bound(at.begin(), at.end(), b) - at.begin()) - 1;
        for (size_t j0 = b; j0 < e; ++i) {
            const size_t j1 = std::min(e, at[i + 1]);
            const size_t off = j0 - at[i], len = j1 - j0;
            if (out.stepped)
                step_blocks(step->wrt_values[i] + off, size_t(P.wrt[i].first) + off, len);
            else
                add_blocks(wrt_grads[i] + off, size_t(P.wrt[i].first) + off, len);
            j0 = j1;
        }
    });
    for (size_t t = 0; t < tasks; ++t) ws[t].wrt_grads_zero = true;
    return out;
}

}  // namespace bt
