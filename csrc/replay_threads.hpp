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
#include <cmath>
#include <cstdint>
#include <vector>

#include "program.hpp"
#include "threads.hpp"

namespace bt {

struct ParallelReplayResult {
    std::vector<size_t> failed;  // samples whose guards failed (nothing added for them)
    long non_finite = -1;        // the first sample whose loss is inf or nan, if any
    double non_finite_value = 0.0;
};

// Adds seed * d loss_s / d wrt for every sample s of `in` to wrt_grads[i] (the arena's grads of
// P.wrt[i]), and writes each loss to values[s] when values is not null. With a non-finite loss
// nothing is added at all (the caller raises). `ws` holds the tasks' workspaces between calls (a
// training loop calls this every step: laying a frame out anew and faulting its pages in each
// time cost a quarter of a W5 b=8 step); it grows to `tasks` entries.
template <typename T>
inline ParallelReplayResult replay_accumulate(const Program<T>& P, const T* arena_values, T* const* wrt_grads,
                                              const Samples& in, T seed, double* values, size_t tasks,
                                              std::vector<Workspace<T>>& ws) {
    ParallelReplayResult out;
    if (in.n == 0) return out;
    tasks = std::max<size_t>(1, std::min(tasks, in.n));
    if (ws.size() < tasks) ws.resize(tasks);
    std::vector<ReplayResult> res(tasks);
    std::vector<T> root(tasks, T(0));
    const size_t k = P.inputs.size(), nid = P.num_ids;
    threads::Pool::instance().run(tasks, int(tasks), [&](size_t t) {
        Workspace<T>& W = ws[t];
        prepare(P, W, arena_values);  // external grads start at zero
        const auto [s0, s1] = threads::split(in.n, tasks, t);
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
    for (size_t t = 0; t < tasks; ++t)  // block order: the same sum on every run
        for (size_t i = 0; i < P.wrt.size(); ++i) {
            const T* g = ws[t].g.data() + P.wrt[i].first;
            T* dst = wrt_grads[i];
            for (uint32_t j = 0; j < P.wrt[i].second; ++j) dst[j] += g[j];
        }
    return out;
}

}  // namespace bt
