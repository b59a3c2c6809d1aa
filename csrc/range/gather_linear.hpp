// A lookup whose rows only one linear layer reads, as its x (a chunk's embedded contexts into
// its first layer), run as one op by a replay on several threads when that layer's W takes its
// SGD step inside the sweep (fused_sgd.hpp).
//
// Run apart on two threads, the lookup's rows are written half by each core and the layer's
// forward then reads all of them on both; in the sweep, its input gradient is written by both
// cores and added into the table by one. Each of those passes waits on lines the other core
// holds. Run as one op, each task looks every row up into its own copy of x, computes its
// output units from it, and in the sweep takes the input gradient's chains through its units,
// steps its rows of W (the rows its forward read) and adds its partial input gradient into the
// table's grads: the first task into the grads themselves, the others into a table-sized buffer
// of their own, added afterwards in task order. Only the table's gradient passes between the
// cores.
//
// y and the step of W have one thread's bits (the same kernels over the same units); the table's
// gradient is a sum of one partial per task, so it is the same on every run for a thread count
// and within rounding of one thread's.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../kernels/linear.hpp"
#include "../record_timer.hpp"
#include "common.hpp"

namespace bt {

// Tasks a replay runs the linear layer `l` and the lookup that feeds it in as one op, or 0 to run
// them apart: more than one thread, W stepped in the sweep, and a layer whose forward and fused
// backward split by output units.
template <typename T>
inline size_t gather_linear_tasks(const Frame<T>& A, const Record& l, const uint32_t* args) {
    if (!A.fused_sgd || !threads::can_split()) return 0;
    const Operands o = decode_operands(args + l.a);
    const uint32_t rows = o.tail[0], nin = o.tail[1], nout = o.tail[2];
    if (A.fused_sgd->find(o.v[1].first(0)) < 0 || rows < gemm::kAxpyRows || rows <= uint32_t(gemm::kMR)) return 0;
    const size_t tasks = linear_tasks(rows, nin, nout);
    return tasks > 1 && !linear_splits_by_rows(rows, nout, tasks) ? tasks : 0;
}

// The pair's operands and sizes: the lookup's n ids of rows of d into a (V x d) table, which are
// the layer's x (rows x nin), W (nout x nin) and b.
struct GatherLinearShape {
    Operands go, lo;
    const uint32_t* ids;
    uint32_t n, d, rows, nin, nout, w;
    size_t nx, table_len;
    GatherLinearShape(const Record& g, const Record& l, const uint32_t* args)
        : go(decode_operands(args + g.a)),
          lo(decode_operands(args + l.a)),
          ids(go.tail + 2),
          n(go.tail[0]),
          d(go.tail[1]),
          rows(lo.tail[0]),
          nin(lo.tail[1]),
          nout(lo.tail[2]),
          w(lo.v[1].first(0)),
          nx(size_t(n) * d),
          table_len(go.v[0].len(0)) {}
    bool has_bias() const { return lo.tail[3] != 0; }
};

// Elements of the buffer the pair needs over `tasks` tasks, from its forward to its sweep:
// [each task's x | each task's partial input gradient | the table-sized sums of all tasks but
// the first].
inline size_t gather_linear_buffer(const Record& g, const Record& l, const uint32_t* args, size_t tasks) {
    const GatherLinearShape s(g, l, args);
    return 2 * tasks * s.nx + (tasks - 1) * s.table_len;
}

// The forward of both: task t looks up every row into its x and computes output units
// [o0, o1) of y from it (the frame's x is never written).
template <typename T>
void gather_linear_forward(const Frame<T>& A, const Record& g, const Record& l, const uint32_t* args, size_t tasks,
                           T* buf) {
    const record_timer::Scope timed(0, record_timer::kGatherLinear);
    const GatherLinearShape s(g, l, args);
    const T* table = A.values() + s.go.v[0].first(0);
    const T* wt = A.transposed(s.w);
    const T* b = s.has_bias() ? A.values() + s.lo.v[2].first(0) : nullptr;
    T* scratch = A.scratch(linear_forward_scratch(s.rows, s.nin, s.nout, wt != nullptr, tasks)).data();
    threads::parallel_tasks(tasks, [&](size_t t) {
        T* x = buf + t * s.nx;
        for (uint32_t i = 0; i < s.n; ++i)
            std::copy(table + size_t(s.ids[i]) * s.d, table + size_t(s.ids[i] + 1) * s.d, x + i * s.d);
        T* sc = scratch;
        for (size_t u = 0; u < t; ++u)
            sc += linear_forward_task_scratch(s.rows, s.nin, s.nout, wt != nullptr, tasks, u);
        const auto [o0, o1] = threads::split(s.nout, tasks, t, kLinearAlign);
        gemm::forward(x, A.weight(s.w), b, A.values() + l.out, s.rows, s.nin, s.nout, o0, o1, sc, wt);
    });
}

// The sweep through both: task t's chains of the input gradient through its units into its
// partial (the first task's as 0 + chain, as the layer alone writes it), its rows of W stepped,
// the partial added row by row (in lookup order) into the table's grads or its own sums.
template <typename T>
void gather_linear_backward(const Frame<T>& A, const Record& g, const Record& l, const uint32_t* args, size_t tasks,
                            T* buf) {
    const record_timer::Scope timed(1, record_timer::kGatherLinear);
    const GatherLinearShape s(g, l, args);
    T* gtable = A.grads() + s.go.v[0].first(0);
    const T* gy = A.grads() + l.out;
    A.applies_sgd(s.w);  // marks W stepped
    const SgdSink<T> sgd = FusedSgd::sink(A.fused_sgd, const_cast<T*>(A.weight(s.w)));
    T* partials = buf + tasks * s.nx;
    T* sums = partials + tasks * s.nx;
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [o0, o1] = threads::split(s.nout, tasks, t, kLinearAlign);
        T* dst = t == 0 ? gtable : sums + (t - 1) * s.table_len;
        if (t > 0) std::fill(dst, dst + s.table_len, T(0));
        if (o0 >= o1) return;
        T* gx = partials + t * s.nx;
        gemm::grad_input_sgd_tiled(gy, buf + t * s.nx, gx, s.rows, s.nin, s.nout, 0, s.nin, false, sgd, t == 0, o0, o1);
        for (uint32_t i = 0; i < s.n; ++i) kernels::add(dst + size_t(s.ids[i]) * s.d, gx + size_t(i) * s.d, s.d);
    });
    for (size_t t = 1; t < tasks; ++t) kernels::add(gtable, sums + (t - 1) * s.table_len, s.table_len);
    if (s.has_bias()) gemm::grad_bias(gy, A.grads() + s.lo.v[2].first(0), s.rows, s.nout, 0, s.nout);
}

// Not inline, as range_forward: a build with BT_SEPARATE_RANGE_KERNELS instantiates both once, in
// bindings/range_kernels_{float,double}.cpp (in the binding unit that replays programs they would
// be a second copy of the code in the extension).
#ifdef BT_SEPARATE_RANGE_KERNELS
#define BT_GATHER_LINEAR(T)                                                                                        \
    extern template void gather_linear_forward<T>(const Frame<T>&, const Record&, const Record&, const uint32_t*,  \
                                                  size_t, T*);                                                     \
    extern template void gather_linear_backward<T>(const Frame<T>&, const Record&, const Record&, const uint32_t*, \
                                                   size_t, T*);
BT_GATHER_LINEAR(float)
BT_GATHER_LINEAR(double)
#undef BT_GATHER_LINEAR
#endif

}  // namespace bt
