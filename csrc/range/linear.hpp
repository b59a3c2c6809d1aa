// The linear layer as one record: y = x W^T + b, row by row over a chunk of rows.
// Operands: x (rows * in, any spans), W (one span, out x in), optionally b (one span of out).
// Tail: [rows, in, out, has_bias]. The products themselves are in kernels/linear.hpp.
#pragma once
#include "../kernels/linear.hpp"
#include "common.hpp"

namespace bt {

template <typename T>
inline uint32_t append_linear(Arena<T>& A, const Spans& x, const Spans& W, const Spans* b, uint32_t rows, uint32_t nin,
                              uint32_t nout) {
    const uint32_t tail[4] = {rows, nin, nout, b ? 1u : 0u};
    const size_t ny = size_t(rows) * nout;
    Appended ap =
        b ? append_range(A, Op::linear, {&x, &W, b}, tail, 4, ny) : append_range(A, Op::linear, {&x, &W}, tail, 4, ny);
    forward_appended(A, ap);
    return ap.out;
}
// Scratch: [x gathered (rows * in) | the operand each task's tiles transpose, if any (none when
// the frame keeps W^T: a replay transposes each weight once per call)].
template <typename T>
inline void linear_forward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], nin = o.tail[1], nout = o.tail[2];
    const bool has_b = o.tail[3] != 0;
    const size_t nx = size_t(rows) * nin;
    const T* wt = A.transposed(o.v[1].first(0));
    const size_t tasks = linear_tasks(rows, nin, nout);
    const size_t nw = linear_forward_scratch(rows, nin, nout, wt != nullptr, tasks);
    T* scratch = A.scratch(nx + nw).data();
    const T* xs = contiguous(A.values(), o.v[0], scratch);
    linear_fwd(xs, A.weight(o.v[1].first(0)), has_b ? A.values() + o.v[2].first(0) : nullptr, A.values() + r.out, rows,
               nin, nout, nw ? scratch + nx : nullptr, wt, tasks);
}
// Scratch: [x gathered (rows * in), unless x is one span | gx (rows * in), unless in place |
// the partial input gradients of a fused backward split by units (linear_bwd_scratch)].
template <typename T>
inline void linear_backward(const Frame<T>& A, const Record& r, const Operands& o) {
    const uint32_t rows = o.tail[0], nin = o.tail[1], nout = o.tail[2];
    const bool has_b = o.tail[3] != 0;
    const size_t nx = size_t(rows) * nin;
    T* g = A.grads();
    // The products write gx (gx_add = false), so it is never zeroed here. A first writer whose x
    // is one span (a replay's layer over the previous layer's output) has them write x's grads
    // in place, each element as 0 + its chain (gx_as_sum): the bits scatter_first would write,
    // without a pass through scratch (a noticeable part of a small model's step).
    const bool one_span = o.v[0].n == 1, in_place = A.first_write && one_span;
    const size_t gathered = one_span ? 0 : nx, own_gx = in_place ? 0 : nx;
    const uint32_t w = o.v[1].first(0);
    const FusedSgd* f = A.applies_sgd(w) ? A.fused_sgd : nullptr;
    T* buf = A.scratch(gathered + own_gx + linear_bwd_scratch<T>(rows, nin, nout, f != nullptr)).data();
    const T* xs = contiguous(A.values(), o.v[0], buf);
    T* gx = in_place ? g + o.v[0].first(0) : buf + gathered;
    // the weight's values where the record reads them (a replay reads fused weights in the arena)
    const SgdSink<T> sgd = FusedSgd::sink(f, const_cast<T*>(A.weight(w)));
    bool gw_add = true;
    T* gW = A.weight_grad(w, gw_add);
    linear_bwd(xs, A.weight(w), g + r.out, gx, gW, has_b ? g + o.v[2].first(0) : nullptr, rows, nin, nout,
               f ? &sgd : nullptr, false, gw_add, in_place, buf + gathered + own_gx);
    if (!in_place) scatter_add(g, o.v[0], gx, A.first_write);
}

}  // namespace bt
