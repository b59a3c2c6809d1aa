// A plain SGD step (no momentum) fused into the reverse sweep.
//
// A linear weight that one record alone reads takes its update where its gradient is made: the
// record's backward first computes the input gradient from the old W, then writes
// W = sgd_update(W, gradient) tile by tile. The gradient of W is never stored, zeroed or read
// back, so a step passes over W three times (forward, input gradient, update) instead of eight
// (zeroing, forward, input gradient, gradient read and write, step read of W and gW, step write).
//
// Every other parameter takes the ordinary route (zeroed, accumulated by the sweep, stepped after
// it), and the updated values have the bits of zero_grad + backward + sgd_step: the fused chain
// starts from zero as the zeroed gradient would, and the update is the same expression.
// The condition that makes this exact is checked, not assumed: a weight is fused only when no
// other argument of any swept record overlaps it (a shared or re-read weight would see its new
// values too early), and the sweep must be the whole step (one graph for the whole batch).
#pragma once
#include <algorithm>
#include <vector>

#include "backward.hpp"
#include "optim.hpp"
#include "range/common.hpp"
#include "threads.hpp"

namespace bt {

// The W operands of linear records (reads_linear_weight) swept from `root` that lie inside
// `params` and that no other argument of a swept record touches, by first slot (sorted, each
// once).
template <typename T>
std::vector<Span> fusable_weights(const Arena<T>& A, uint32_t root, const std::vector<Span>& params) {
    std::vector<Span> cand;
    const int64_t top = A.record_of(root);
    if (top < 0) return cand;
    const size_t lo = A.record(size_t(top)).lo;
    auto inside_params = [&](const Span& w) {
        for (const Span& p : params)
            if (w.first >= p.first && w.first + w.second <= p.first + p.second) return true;
        return false;
    };
    for (size_t k = lo; k <= size_t(top); ++k) {
        const Record& r = A.record(k);
        if (!reads_linear_weight(r.op)) continue;
        const Operands o = decode_operands(A.args() + r.a);
        if (o.v[1].n != 1) continue;
        const Span w{o.v[1].first(0), o.v[1].len(0)};
        if (w.second > 0 && inside_params(w)) cand.push_back(w);
    }
    if (cand.empty()) return cand;
    std::sort(cand.begin(), cand.end());
    // A candidate read anywhere else (another record, or another operand of its own) is out;
    // so is a weight that two linear records read. Arguments past the last candidate (the
    // activations, above the parameters) are skipped at once.
    uint32_t end = 0;
    for (const Span& w : cand) end = std::max(end, w.first + w.second);
    std::vector<uint32_t> uses(cand.size(), 0);
    std::vector<bool> other(cand.size(), false);
    for (size_t k = lo; k <= size_t(top); ++k) {
        const Record& r = A.record(k);
        const bool is_linear = reads_linear_weight(r.op);
        A.visit_args(r, [&](uint32_t operand, uint32_t first, uint32_t len) {
            if (first >= end) return;
            for (size_t c = 0; c < cand.size(); ++c) {
                const Span& w = cand[c];
                if (first >= w.first + w.second || first + len <= w.first) continue;
                ++uses[c];
                if (!(is_linear && operand == 1 && first == w.first && len == w.second)) other[c] = true;
            }
        });
    }
    std::vector<Span> out;
    for (size_t c = 0; c < cand.size(); ++c)
        if (uses[c] == 1 && !other[c]) out.push_back(cand[c]);
    return out;
}

// params minus the (sorted, disjoint) spans `cut`.
inline std::vector<Span> subtract_spans(const std::vector<Span>& params, const std::vector<Span>& cut) {
    std::vector<Span> out;
    for (const Span& p : params) {
        uint32_t at = p.first;
        const uint32_t end = p.first + p.second;
        for (const Span& c : cut) {
            if (c.first + c.second <= at || c.first >= end) continue;
            if (c.first > at) out.emplace_back(at, c.first - at);
            at = std::max(at, c.first + c.second);
        }
        if (at < end) out.emplace_back(at, end - at);
    }
    return out;
}

// The rest of a fused step: the parameters `rest` (params minus the fused weights) step on their
// gradients, and a fused weight whose record the sweep skipped (applied[i] = 0) steps on a zero
// gradient, as the unfused step would.
template <typename T>
void sgd_step_around_fused(Arena<T>& A, const std::vector<Span>& rest, const std::vector<Span>& weights,
                           const std::vector<uint8_t>& applied, double lr, double weight_decay) {
    T* g = A.grads();
    T* v = A.values();
    auto step = [&](const Span& s, bool zero_grad) {
        threads::in_blocks(s.second, [&](size_t b, size_t n) {
            T* w = v + s.first + b;
            const T* gw = g + s.first + b;
            for (size_t i = 0; i < n; ++i) w[i] = sgd_update(w[i], zero_grad ? T(0) : gw[i], T(lr), T(weight_decay));
        });
    };
    for (const Span& s : rest) step(s, false);
    for (size_t i = 0; i < weights.size(); ++i)
        if (!applied[i]) step(weights[i], true);
}

// One plain SGD step of `params` on the mean loss whose graph ends at `root` (seed: d mean /
// d root): the gradients of `zero` (the model's parameters) are zeroed and filled by the sweep,
// except those of fused weights, which are left as they were; then every parameter moves.
// `fuse` false runs the same step unfused (zero, sweep, step). Returns how many weights fused.
template <typename T>
size_t sgd_fused_backward(Arena<T>& A, uint32_t root, T seed, const std::vector<Span>& params,
                          const std::vector<Span>& zero, double lr, double weight_decay, bool fuse = true) {
    // Under detect_anomaly the sweep checks every argument's gradient, a fused weight's included:
    // that check needs the gradient stored, so the step runs unfused.
    const std::vector<Span> weights =
        fuse && !anomaly_enabled() ? fusable_weights(A, root, params) : std::vector<Span>{};
    FusedSgd fused{lr, weight_decay, {}, std::vector<uint8_t>(weights.size(), 0)};
    for (const Span& w : weights) fused.weight_slots.push_back(w.first);
    const std::vector<Span> rest = subtract_spans(params, weights);
    T* g = A.grads();
    for (const Span& s : subtract_spans(zero, weights)) std::fill(g + s.first, g + s.first + s.second, T(0));
    A.backward(root, seed, 0, weights.empty() ? nullptr : &fused);
    sgd_step_around_fused(A, rest, weights, fused.applied, lr, weight_decay);
    return weights.size();
}

}  // namespace bt
