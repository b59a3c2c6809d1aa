// Replaying one program over a batch on several threads: the gradient oracle's accumulation of
// parameter grads (program.hpp's per-sample steps, driven from here).
//
// The batch is cut into `tasks` contiguous blocks of samples, one per task, each with its own
// workspace (frame values, grads, scratch, args): the program and the arena's values are only
// read, so tasks share nothing they write. A task sums its block's parameter grads in its own
// workspace; at the end the blocks' sums are added to the arena's grads in block order. Blocks
// depend on the sample count and the task count alone, so a given thread count gives the same
// bits on every run (and one task is exactly the single-thread loop's order of additions).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "program.hpp"
#include "threads.hpp"

namespace bt {

struct ParallelReplayResult {
    std::vector<size_t> failed;          // samples whose guards failed (nothing added for them)
    size_t nonfinite = SIZE_MAX;         // the first sample whose loss is inf or nan, if any
    double nonfinite_value = 0.0;
};

// Samples [0, n): float inputs xs (k per sample), ids (P.num_ids per sample, already checked).
// Adds seed * d loss_s / d wrt for every sample s to wrt_grads[i] (the arena's grads of P.wrt[i]),
// and writes each loss to values[s] when values is not null. With a non-finite loss nothing is
// added at all (the caller raises).
template <typename T>
inline ParallelReplayResult replay_accumulate(const Program<T>& P, const T* arena_values, T* const* wrt_grads,
                                              size_t n, const T* xs, const uint32_t* ids, T seed, double* values,
                                              size_t tasks) {
    ParallelReplayResult out;
    if (n == 0) return out;
    tasks = std::max<size_t>(1, std::min(tasks, n));
    std::vector<Workspace<T>> ws(tasks);
    std::vector<std::vector<size_t>> failed(tasks);
    std::vector<size_t> bad(tasks, SIZE_MAX);
    std::vector<T> bad_value(tasks, T(0));
    const size_t k = P.inputs.size(), nid = P.num_ids;
    threads::Pool::instance().run(tasks, int(tasks), [&](size_t t) {
        Workspace<T>& W = ws[t];
        prepare(P, W, arena_values);
        const auto [s0, s1] = threads::split(n, tasks, t);
        for (size_t s = s0; s < s1; ++s) {
            set_sample(P, W, xs + s * k, ids + s * nid);
            if (run_forward(P, W) >= 0) {
                failed[t].push_back(s);
                continue;
            }
            const T y = W.v[P.root];
            if (values) values[s] = double(y);
            if (!std::isfinite(y)) {
                bad[t] = s;
                bad_value[t] = y;
                return;
            }
            run_backward(P, W, seed);
        }
    });
    for (size_t t = 0; t < tasks; ++t) {
        out.failed.insert(out.failed.end(), failed[t].begin(), failed[t].end());
        if (bad[t] != SIZE_MAX && out.nonfinite == SIZE_MAX) {
            out.nonfinite = bad[t];
            out.nonfinite_value = double(bad_value[t]);
        }
    }
    if (out.nonfinite != SIZE_MAX) return out;
    for (size_t t = 0; t < tasks; ++t)  // block order: the same sum on every run
        for (size_t i = 0; i < P.wrt.size(); ++i) {
            const T* g = ws[t].g.data() + P.wrt[i].first;
            T* dst = wrt_grads[i];
            for (uint32_t j = 0; j < P.wrt[i].second; ++j) dst[j] += g[j];
        }
    return out;
}

}  // namespace bt
