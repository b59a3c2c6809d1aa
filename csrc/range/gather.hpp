// Row lookup as a record: outputs rows ids[0..n) of a (V x d) table, copied; backward adds each
// output row's grad into its table row. Eager embedding stays a view (no record, no copy); a
// trace records this instead so that the ids are part of the program and a replay can change
// them. Operands: the table (one span of V * d). Tail: [n, d, id_0 .. id_{n-1}].
#pragma once
#include "common.hpp"

namespace bt {

template <typename T>
inline uint32_t append_gather(Arena<T>& A, const Spans& table, uint32_t d, const uint32_t* ids, uint32_t n) {
    const uint32_t dims[2] = {n, d};
    Appended ap = append_range(A, Op::gather, {&table}, dims, 2, size_t(n) * d, 0, 0.0, ids, n);
    forward_appended(A, ap);
    return ap.out;
}
template <typename T>
inline void gather_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t n = o.tail[0], d = o.tail[1];
    const uint32_t* ids = o.tail + 2;
    const T* table = A.values() + o.v[0].first(0);
    T* y = A.values() + r.out;
    auto rows = [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i)
            std::copy(table + size_t(ids[i]) * d, table + size_t(ids[i] + 1) * d, y + i * d);
    };
    // A chunk's lookup (64 samples x 16 ids x 64 values) splits by output rows, as the gathers of
    // common.hpp do. The backward stays on one thread: split by the table's columns, each task
    // read half of every row of the grads the layer above had just written on both cores, and
    // that took longer than one thread adding them all.
    const size_t tasks = threads::tasks_for(double(n) * d, kParallelGather, n);
    if (tasks <= 1) return rows(0, n);
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [i0, i1] = threads::split(n, tasks, t);
        rows(i0, i1);
    });
}
template <typename T>
inline void gather_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t n = o.tail[0], d = o.tail[1];
    const uint32_t* ids = o.tail + 2;
    T* gt = A.grads() + o.v[0].first(0);
    const T* gy = A.grads() + r.out;
    for (uint32_t i = 0; i < n; ++i) {
        T* row = gt + size_t(ids[i]) * d;
        const T* src = gy + size_t(i) * d;
        for (uint32_t j = 0; j < d; ++j) row[j] += src[j];
    }
}

}  // namespace bt
