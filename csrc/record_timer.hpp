// Wall time per kind of range record, forward and backward, while a Python caller has switched it
// on (burtorch.record_times): where a step's time goes, record by record. Switched off, a record
// pays one relaxed load and a branch.
//
// Only the outermost record on a thread is timed (an op that appends another inside its own
// forward would count twice). Records replayed on several threads at once (a compiled oracle's
// blocks of samples) each add their own time, so such totals are CPU time, not wall time; a
// record split across threads inside the op is timed once, on the thread that runs it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

#include "ops.hpp"

namespace bt::record_timer {

// Range ops, in BT_RANGE_OPS order, then a lookup replayed with its linear layer as one op
// (range/gather_linear.hpp), which no single range op stands for.
#define BT_COUNT(name, ...) +1
inline constexpr int kRangeOps = 0 BT_RANGE_OPS(BT_COUNT);
#undef BT_COUNT
inline constexpr int kGatherLinear = kRangeOps;
inline constexpr int kKinds = kRangeOps + 1;

inline int kind_of(Op op) { return int(op) - int(Op::copy); }

struct Totals {
    std::atomic<uint64_t> ns[2][kKinds];
    std::atomic<uint64_t> calls[2][kKinds];
};
inline std::atomic<bool> on{false};
inline Totals totals{};
inline thread_local int depth = 0;

inline void reset() {
    for (int d = 0; d < 2; ++d)
        for (int k = 0; k < kKinds; ++k) {
            totals.ns[d][k].store(0, std::memory_order_relaxed);
            totals.calls[d][k].store(0, std::memory_order_relaxed);
        }
}

// Times its own lifetime as one record of `kind`, in direction 0 (forward) or 1 (backward).
class Scope {
public:
    Scope(int direction, int kind) : direction_(direction), kind_(kind) {
        if (!on.load(std::memory_order_relaxed) || depth > 0) return;
        timing_ = true;
        ++depth;
        t0_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
        if (!timing_) return;
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
        --depth;
        totals.ns[direction_][kind_].fetch_add(uint64_t(ns.count()), std::memory_order_relaxed);
        totals.calls[direction_][kind_].fetch_add(1, std::memory_order_relaxed);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    int direction_, kind_;
    bool timing_ = false;
    std::chrono::steady_clock::time_point t0_{};
};

}  // namespace bt::record_timer
