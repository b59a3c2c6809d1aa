// The linear layer's three products over a chunk of rows: y = x W^T + b (forward), and
// gx += gy W, gW += gy^T x, gb += column sums of gy (backward).
// x: rows * in values; W: out * in, row-major (rows of W are output units, as nn.Linear's);
// b: out, or absent. Output rows * out. The products are the register-tiled kernels of gemm.hpp.
//
// Large layers split across the thread pool (threads.hpp): the forward and the weight gradient
// by output units (a layer with few outputs: by rows and by input columns), the input gradient
// by input columns (wide layers) or by rows, and a wide layer's fused SGD backward both products
// by input columns in one region; so each task owns whole output elements and gives the same
// bits as one thread (gemm.hpp keeps every element one chain whatever the split). The one
// exception is the fused SGD backward of a layer whose W outgrows kUnitsSplitBytes: it splits by
// output units, and sums the tasks' partial input gradients in task order (see there).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../threads.hpp"
#include "gemm.hpp"
#include "vec.hpp"

namespace bt {

// Multiply-adds (rows * in * out) above which a layer's products are split across threads: about
// the work that outweighs waking a helper. The threshold is not sensitive: several times as much
// made no clear difference to two-thread training steps. `python -m burtorch_bench.threads`
// times layers on both sides of it with one and two threads.
inline constexpr double kLinearParallelWork = 1 << 16;
// Output units per task are a multiple of this, so no task cuts a register tile's columns.
inline constexpr size_t kLinearAlign = 16;
// Input columns per task from which the input gradient splits by columns rather than rows.
inline constexpr size_t kColumnSplitWidth = 64;

// Weights (in * out) from which a layer over fewer than gemm::kAxpyRows rows splits. There each
// weight takes part in a multiply-add or two per product, so the work is moving W, and a split
// moves it between the cores every step: the forward splits by output units (rows of W), the
// input gradient by input columns (W's columns), each the only split that keeps every element
// one chain, so each core then reads the quarter of W the other one wrote. That pays only when W
// does not fit one core's cache: below that, one-row steps on two threads took longer than on
// one.
inline constexpr double kFewRowsParallelWeights = 1 << 20;

// A layer with fewer outputs than two aligned blocks a task (a character model's 27 logits)
// splits otherwise:
// by units the tasks came out uneven (16 and 11 of 27) and short, and on two threads both of its
// products took as long as on one or longer. Its forward splits by rows (each task all of W, a
// few rows of x), its weight gradient by input columns; each element is still one chain. A row
// task keeps at least kFewOutputsMinRows rows, so that its forward takes the path (tiles or dot
// products) that all the rows take.
inline constexpr size_t kFewOutputsMinRows = 8;
// Multiply-adds from which such a layer splits at all: four times kLinearParallelWork. Its tasks
// each read all of W and the rows of x or gy that the layer before wrote on the caller's core,
// so a narrow input's products took as long on two threads as on one or longer; only a wider
// input gains from the split.
inline constexpr double kFewOutputsParallelWork = 4 * kLinearParallelWork;
inline bool few_outputs(uint32_t rows, uint32_t out, size_t tasks) {
    return size_t(out) < 2 * kLinearAlign * tasks && rows >= 2 * kFewOutputsMinRows;
}

// The work a layer's split is measured by, against kLinearParallelWork: its multiply-adds, or for
// a few rows its weights, scaled to the same threshold.
inline double linear_work(uint32_t rows, uint32_t in, uint32_t out) {
    if (rows < gemm::kAxpyRows) return double(in) * out * (kLinearParallelWork / kFewRowsParallelWeights);
    return double(rows) * in * out;
}

// Tasks the forward (and the weight gradient) of this layer splits into.
inline size_t linear_tasks(uint32_t rows, uint32_t in, uint32_t out) {
    const size_t units = (size_t(out) + kLinearAlign - 1) / kLinearAlign;
    const size_t by_units = threads::tasks_for(linear_work(rows, in, out), kLinearParallelWork, units);
    if (by_units > 1 && few_outputs(rows, out, by_units))
        return threads::tasks_for(linear_work(rows, in, out), kFewOutputsParallelWork, rows / kFewOutputsMinRows);
    return by_units;
}

// Whether the forward's tiles read W transposed (in x out). A caller that keeps W^T across many
// calls (a program replaying many samples with fixed weights) can hand it in instead of scratch.
inline bool linear_forward_transposes_w(uint32_t rows, uint32_t in, uint32_t out) {
    return !gemm::forward_by_dots(rows, in, out) && gemm::forward_transposes_w(rows, in, out);
}

// Scratch (elements) one task's forward over output units [o0, o1) needs: the operand its tiles
// transpose; none for dot products, nor when they would transpose W and W^T is supplied.
inline size_t linear_task_scratch(uint32_t rows, uint32_t in, uint32_t out, size_t o0, size_t o1, bool have_wt) {
    if (have_wt && !gemm::forward_by_dots(rows, in, out) && gemm::forward_transposes_w(rows, in, o1 - o0)) return 0;
    return gemm::forward_scratch(rows, in, out, o0, o1);
}

// Whether `tasks` tasks of this layer's forward (and weight gradient) split it by rows (and input
// columns) rather than by output units.
inline bool linear_splits_by_rows(uint32_t rows, uint32_t out, size_t tasks) {
    return tasks > 1 && few_outputs(rows, out, tasks);
}

// Scratch (elements) task t of `tasks` of the forward needs.
inline size_t linear_forward_task_scratch(uint32_t rows, uint32_t in, uint32_t out, bool have_wt, size_t tasks,
                                          size_t t) {
    if (linear_splits_by_rows(rows, out, tasks)) {
        const auto [r0, r1] = threads::split(rows, tasks, t);
        return linear_task_scratch(uint32_t(r1 - r0), in, out, 0, out, have_wt);
    }
    const auto [o0, o1] = threads::split(out, tasks, t, kLinearAlign);
    return linear_task_scratch(rows, in, out, o0, o1, have_wt);
}

// Scratch (elements) the forward needs over `tasks` tasks, each its own.
inline size_t linear_forward_scratch(uint32_t rows, uint32_t in, uint32_t out, bool have_wt = false, size_t tasks = 1) {
    size_t n = 0;
    for (size_t t = 0; t < tasks; ++t) n += linear_forward_task_scratch(rows, in, out, have_wt, tasks, t);
    return n;
}

// wt: W^T (in x out) when the caller has it (only read when the tiles would transpose W).
template <typename T>
inline void linear_fwd(const T* x, const T* W, const T* b, T* y, uint32_t rows, uint32_t in, uint32_t out, T* scratch,
                       const T* wt = nullptr, size_t tasks = 1) {
    if (tasks <= 1) return gemm::forward(x, W, b, y, rows, in, out, 0, out, scratch, wt);
    std::vector<size_t> at(tasks, 0);
    for (size_t t = 1; t < tasks; ++t)
        at[t] = at[t - 1] + linear_forward_task_scratch(rows, in, out, wt != nullptr, tasks, t - 1);
    const bool by_rows = linear_splits_by_rows(rows, out, tasks);
    threads::parallel_tasks(tasks, [&](size_t t) {
        T* const sc = scratch ? scratch + at[t] : nullptr;
        if (by_rows) {
            const auto [r0, r1] = threads::split(rows, tasks, t);
            gemm::forward(x + r0 * in, W, b, y + r0 * out, uint32_t(r1 - r0), in, out, 0, out, sc, wt);
        } else {
            const auto [o0, o1] = threads::split(out, tasks, t, kLinearAlign);
            gemm::forward(x, W, b, y, rows, in, out, o0, o1, sc, wt);
        }
    });
}

// Weights (bytes) from which a chunk's fused SGD backward on several threads splits by output
// units, as the forward does, instead of by input columns: each task then steps only the rows of
// W its forward task reads (by columns, half of each core's rows had last been stepped by the
// other core). Each task takes gx's chains through its own units; the partial input gradients
// are then summed in task order. So gx is the same from run to run for a thread count, but not
// one chain: within rounding of one thread's (the tests hold it to 1e-5 relative in float, 1e-12
// in double). Against the column split on two threads, fused steps gained once W is large
// enough to fill a good part of L2 and lost on small layers, hence the byte threshold.
inline constexpr size_t kUnitsSplitBytes = size_t(3) << 19;

// Whether the fused SGD backward of this layer over `tasks` tasks splits by output units.
template <typename T>
inline bool sgd_backward_by_units(uint32_t rows, uint32_t in, uint32_t out, size_t tasks) {
    return tasks > 1 && rows > uint32_t(gemm::kMR) && !linear_splits_by_rows(rows, out, tasks) &&
           size_t(in) * out * sizeof(T) >= kUnitsSplitBytes;
}

// Scratch (elements) linear_bwd needs: the partial input gradients of all tasks but the first,
// when a fused SGD backward splits by units (none otherwise).
template <typename T>
inline size_t linear_bwd_scratch(uint32_t rows, uint32_t in, uint32_t out, bool sgd) {
    const size_t tasks = linear_tasks(rows, in, out);
    return sgd && sgd_backward_by_units<T>(rows, in, out, tasks) ? (tasks - 1) * size_t(rows) * in : 0;
}

// The paths of linear_bwd that have both products run in one pass over W, its rows updated by
// `sink` as they are read (gemm.hpp's weight sinks): for a few rows; by units with partial input
// gradients; or by columns on several threads. False: none applies, and linear_bwd runs the two
// products apart (grad_weight then hands the sink each finished chain).
template <typename T, class Sink>
inline bool linear_bwd_sink(const T* x, const T* gy, T* gx, T* gb, uint32_t rows, uint32_t in, uint32_t out,
                            const Sink& sink, bool gx_add, bool gx_as_sum, T* partials) {
    if (rows < gemm::kAxpyRows) {
        if (!gx_add) std::fill(gx, gx + size_t(rows) * in, T(0));  // a few rows
        // One pass over W for both products; tasks own columns of gx and W alike.
        const size_t tc = threads::tasks_for(linear_work(rows, in, out), kLinearParallelWork,
                                             (size_t(in) + kLinearAlign - 1) / kLinearAlign);
        if (tc <= 1)
            gemm::grad_input_sgd(gy, x, gx, rows, in, out, 0, in, sink);
        else
            threads::parallel_tasks(tc, [&](size_t t) {
                const auto [i0, i1] = threads::split(in, tc, t, kLinearAlign);
                gemm::grad_input_sgd(gy, x, gx, rows, in, out, i0, i1, sink);
            });
        if (!gx_add && gx_as_sum) gemm::add_zero(gx, in, 0, rows, 0, in);  // a few rows
        if (gb) gemm::grad_bias(gy, gb, rows, out, 0, out);
        return true;
    }
    const size_t tw = linear_tasks(rows, in, out);
    if (partials && sgd_backward_by_units<T>(rows, in, out, tw)) {
        // Task t: gx's chains through units [o0, o1) (the first task's into gx itself, as the
        // whole chain would go; the others' from zero into their partials), and those rows' step.
        const size_t nx = size_t(rows) * in;
        threads::parallel_tasks(tw, [&](size_t t) {
            const auto [o0, o1] = threads::split(out, tw, t, kLinearAlign);
            if (t == 0)
                gemm::grad_input_sgd_tiled(gy, x, gx, rows, in, out, 0, in, gx_add, sink, gx_as_sum, o0, o1);
            else
                gemm::grad_input_sgd_tiled(gy, x, partials + (t - 1) * nx, rows, in, out, 0, in, false, sink, false, o0,
                                           o1);
        });
        // The first task's gx stores 0 + chain where gx_as_sum asks, so no sum below ends at -0.
        threads::parallel_tasks(tw, [&](size_t t) {
            const auto [b, e] = threads::split(nx, tw, t, 64);
            for (size_t u = 1; u < tw; ++u) kernels::add(gx + b, partials + (u - 1) * nx + b, e - b);
        });
        if (gb) gemm::grad_bias(gy, gb, rows, out, 0, out);
        return true;
    }
    if (tw > 1 && rows > size_t(gemm::kMR) && size_t(in) >= kColumnSplitWidth * tw) {
        // Both products in one region, split by columns (gemm::grad_input_sgd_tiled), when the
        // input is wide enough for the input gradient to split by columns anyway: one parallel
        // region instead of two, which on two threads saved a wait without losing elsewhere. On
        // one thread the two products apart stay faster, hence tw > 1.
        const size_t tc = std::min<size_t>(tw, (size_t(in) + kLinearAlign - 1) / kLinearAlign);
        threads::parallel_tasks(tc, [&](size_t t) {
            const auto [i0, i1] = threads::split(in, tc, t, kLinearAlign);
            gemm::grad_input_sgd_tiled(gy, x, gx, rows, in, out, i0, i1, gx_add, sink, gx_as_sum);
        });
        if (gb) gemm::grad_bias(gy, gb, rows, out, 0, out);
        return true;
    }
    return false;
}

// With a sink (`sgd` not null: gemm.hpp's weight sinks, such as optim.hpp's SgdSink), W takes
// its update in place of accumulating gW (gW unused): the input gradient reads each row of the
// old W before that row is updated.
// gx_add = false: gx is written, not added to (the tasks start their own blocks from zero, so the
// caller need not zero it first on one thread); gw_add = false: the same for gW. gx_as_sum: gx
// so written holds 0 + each chain, as a sum into zeroed grads would (gemm::grad_input).
// partials: linear_bwd_scratch elements; without them a split by units is taken by columns.
template <typename T, class Sink = gemm::NoSink>
inline void linear_bwd(const T* x, const T* W, const T* gy, T* gx, T* gW, T* gb, uint32_t rows, uint32_t in,
                       uint32_t out, const Sink* sgd = nullptr, bool gx_add = true, bool gw_add = true,
                       bool gx_as_sum = false, T* partials = nullptr) {
    if constexpr (!gemm::kHasSink<Sink>) sgd = nullptr;
    if constexpr (gemm::kHasSink<Sink>)
        if (sgd && linear_bwd_sink(x, gy, gx, gb, rows, in, out, *sgd, gx_add, gx_as_sum, partials)) return;
    const size_t tw = linear_tasks(rows, in, out);
    if (tw <= 1) {
        gemm::grad_input(gy, W, gx, rows, in, out, 0, rows, 0, size_t(-1), gx_add, gx_as_sum);
        gemm::grad_weight(gy, x, gW, gb, rows, in, out, 0, out, sgd, gw_add);
        return;
    }
    // A wide gx splits by columns, so each task reads (and packs) only its columns of W; a
    // narrow one by rows, whose tiles stay full width.
    const bool by_columns = size_t(in) >= kColumnSplitWidth * tw;
    const size_t ti = by_columns ? std::min<size_t>(tw, (size_t(in) + kLinearAlign - 1) / kLinearAlign)
                                 : std::min<size_t>(tw, (size_t(rows) + 7) / 8);
    auto input_task = [&](size_t t) {
        if (by_columns) {
            const auto [i0, i1] = threads::split(in, ti, t, kLinearAlign);
            gemm::grad_input(gy, W, gx, rows, in, out, 0, rows, i0, i1, gx_add, gx_as_sum);
        } else {
            const auto [r0, r1] = threads::split(rows, ti, t);
            gemm::grad_input(gy, W, gx, rows, in, out, r0, r1, 0, size_t(-1), gx_add, gx_as_sum);
        }
    };
    const bool w_by_columns = linear_splits_by_rows(rows, out, tw);
    auto weight_task = [&](size_t t) {
        if (w_by_columns) {
            const auto [i0, i1] = threads::split(in, tw, t, kLinearAlign);
            gemm::grad_weight(gy, x, gW, t == 0 ? gb : nullptr, rows, in, out, 0, out, sgd, gw_add, i0, i1);
        } else {
            const auto [o0, o1] = threads::split(out, tw, t, kLinearAlign);
            gemm::grad_weight(gy, x, gW, gb, rows, in, out, o0, o1, sgd, gw_add);
        }
    };
    if (sgd) {
        threads::parallel_tasks(ti, input_task);
        threads::parallel_tasks(tw, weight_task);
        return;
    }
    // One region for both products: blocks of gx first, then unit blocks of gW (tasks are taken
    // in order, so the larger input-gradient blocks of a one-row layer start first).
    threads::parallel_tasks(ti + tw, [&](size_t t) { t < ti ? input_task(t) : weight_task(t - ti); });
}

}  // namespace bt
