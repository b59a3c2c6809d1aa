// In-place optimizer steps over a span of parameters: values and grads in the arena, the
// optimizer's buffers in float64 whatever the arena's dtype (as PyTorch keeps them in the
// parameter's dtype, but FP64 here so FP32 training keeps its moments exact enough). Plain SGD,
// which has no buffer, computes in the parameter's dtype as PyTorch does.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/simd.hpp"

namespace bt {

struct SgdConfig {
    double lr, momentum, weight_decay, dampening;
    bool nesterov;
};

// One parameter's plain SGD update (no momentum) in the parameter's own precision, as
// torch.optim.SGD computes it: d = g + wd * w, then w - lr * d, each one multiply-add (fused
// where the build has FMA) with the hyperparameters rounded to T. The optimizer step and the
// update fused into the backward sweep (fused_sgd.hpp, kernels/gemm.hpp's lanes) compute exactly
// this, so they give the same bits; in FP32 it is also about twice as fast as a round trip
// through double, which bound the step.
template <typename T>
[[gnu::always_inline]] inline T sgd_update(T w, T g, T lr, T wd) {
    return simd::madd(-lr, wd == T(0) ? g : simd::madd(wd, w, g), w);
}

// The plain SGD update as a weight sink of the linear kernels (kernels/gemm.hpp): a linear layer's
// weight gradient is consumed where its chains finish, each element of W becoming
// sgd_update(W, gradient) there (fused_sgd.hpp's step inside the sweep). update_lanes is the same
// expression lane by lane, with the same fused operations, so the bits are the scalar step's.
// Decay: -1, the weight decay is looked at per element (zero or not); 0 or 1, it is known to be
// zero or nonzero (specialized() picks one, for loops that pay for the test).
template <typename T, int Decay = -1>
struct SgdSink {
    using V = typename simd::Simd<T>::V;
    T* W;
    T lr, weight_decay;

    [[gnu::always_inline]] T update(T w, T g) const {
        if constexpr (Decay < 0) return sgd_update(w, g, lr, weight_decay);
        if constexpr (Decay == 0) return simd::madd(-lr, g, w);
        return simd::madd(-lr, simd::madd(weight_decay, w, g), w);
    }
    [[gnu::always_inline]] V update_lanes(V w, V g) const {
        using S = simd::Simd<T>;
        const bool decay = Decay < 0 ? weight_decay != T(0) : Decay == 1;
        return S::madd(S::set1(-lr), decay ? S::madd(S::set1(weight_decay), w, g) : g, w);
    }
    template <class F>
    void specialized(F&& f) const {
        if (weight_decay != T(0))
            f(SgdSink<T, 1>{W, lr, weight_decay});
        else
            f(SgdSink<T, 0>{W, lr, weight_decay});
    }
};

// Linear weights whose plain SGD step (no momentum) is applied inside a sweep (fused_sgd.hpp):
// the one linear record that reads such a weight hands the kernels sink(W) (SgdSink above), so W
// is updated in place after its input gradient has read the old values, instead of its gradient
// being accumulated.
struct FusedSgd {
    double lr = 0.0, weight_decay = 0.0;
    std::vector<uint32_t> weight_slots;  // the first slot of each weight
    // Which weights a record updated: a record the sweep skips (its outputs' grads all zero)
    // leaves its weight to be stepped with a zero gradient afterwards, as the unfused step would.
    mutable std::vector<uint8_t> applied;

    // The index of the weight starting at w_slot, or -1.
    int64_t find(uint32_t w_slot) const {
        for (size_t i = 0; i < weight_slots.size(); ++i)
            if (weight_slots[i] == w_slot) return int64_t(i);
        return -1;
    }
    // The kernels' sink for the weight whose values are at W (null f: a sink never used).
    template <typename T>
    static SgdSink<T> sink(const FusedSgd* f, T* W) {
        return SgdSink<T>{W, T(f ? f->lr : 0.0), T(f ? f->weight_decay : 0.0)};
    }
};

// Runs body(i0, i1, out) over [0, n), which writes the new values of parameters [i0, i1) to
// out[0 .. i1 - i0), reading w[i] (and the optimizer's buffers at i) first, so that w ends up
// holding them. Without `stream`, out is w itself. With it, the new values go out through
// streaming stores (simd.hpp), a block at a time through an aligned buffer: for a step split
// across threads right after an oracle that ran on them. Every core then holds the weights it
// read, so an ordinary store first waits for the line to be taken from the other core's cache,
// which on a VM whose vCPUs are far apart slows a two-thread step noticeably; streaming stores
// do not wait for the line. Each element's arithmetic is body's either way,
// so the bits do not depend on `stream`. (The body is a plain loop over its range, not a call
// per element: GCC vectorized Adam's arithmetic only in that form.)
template <typename T, class Body>
inline void write_blocks(T* w, size_t n, bool stream, Body&& body) {
    if (!stream) return body(size_t(0), n, w);
    using S = simd::Simd<T>;
    constexpr size_t B = 1024 / sizeof(T);  // a block of 1 KiB, a whole number of registers
    alignas(64) T buf[B];
    size_t i = 0;
    while (i < n && reinterpret_cast<uintptr_t>(w + i) % sizeof(typename S::V) != 0) ++i;
    body(size_t(0), i, w);
    for (; i + B <= n; i += B) {
        body(i, i + B, buf);
        for (size_t j = 0; j < B; j += S::W) S::stream(w + i + j, S::load(buf + j));
    }
    body(i, n, w + i);
    simd::stream_fence();
}

// m: the momentum buffer (unused without momentum). first: the first step (m starts at d).
// The options are tested once, outside the loops, so each loop is branch-free and vectorizes
// (the arithmetic per element is unchanged: the same double operations in the same order).
// stream: write the new values with streaming stores (write_blocks; a step split across threads).
template <typename T>
inline void sgd_step(T* __restrict w, const T* __restrict g, double* __restrict m, size_t n, const SgdConfig& c,
                     bool first, bool stream = false) {
    const double lr = c.lr, wd = c.weight_decay, mu = c.momentum, damp = 1.0 - c.dampening;
    if (mu == 0.0) {
        const T lr_t = static_cast<T>(lr), wd_t = static_cast<T>(wd);
        auto plain = [&](auto decay) {
            const T wd_used = decay ? wd_t : T(0);
            write_blocks(w, n, stream, [&](size_t i0, size_t i1, T* out) {
                for (size_t i = i0; i < i1; ++i) out[i - i0] = sgd_update(w[i], g[i], lr_t, wd_used);
            });
        };
        wd_t == T(0) ? plain(std::false_type{}) : plain(std::true_type{});
        return;
    }
    auto update = [&](auto nesterov, auto is_first) {
        write_blocks(w, n, stream, [&](size_t i0, size_t i1, T* out) {
            for (size_t i = i0; i < i1; ++i) {
                double d = double(g[i]) + wd * double(w[i]);
                const double mi = is_first ? d : mu * m[i] + damp * d;
                m[i] = mi;
                d = nesterov ? d + mu * mi : mi;
                out[i - i0] = static_cast<T>(double(w[i]) - lr * d);
            }
        });
    };
    using std::false_type, std::true_type;
    if (c.nesterov)
        first ? update(true_type{}, true_type{}) : update(true_type{}, false_type{});
    else
        first ? update(false_type{}, true_type{}) : update(false_type{}, false_type{});
}

struct AdamConfig {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled;  // AdamW: decay the weights, not the gradient
};

// m, v: first and second moments; step: the 1-based step count (bias corrections).
// stream: as sgd_step's.
template <typename T>
inline void adam_step(T* __restrict w, const T* __restrict g, double* __restrict m, double* __restrict v, size_t n,
                      const AdamConfig& c, uint64_t step, bool stream = false) {
    const double c1 = 1.0 - std::pow(c.beta1, double(step)), c2 = 1.0 - std::pow(c.beta2, double(step));
    const double lr = c.lr, wd = c.weight_decay, b1 = c.beta1, b2 = c.beta2, eps = c.eps;
    auto update = [&](auto decoupled) {
        write_blocks(w, n, stream, [&](size_t i0, size_t i1, T* out) {
            for (size_t i = i0; i < i1; ++i) {
                double gi = double(g[i]);
                double wi = double(w[i]);
                if constexpr (decltype(decoupled)::value)
                    wi -= lr * wd * wi;
                else
                    gi += wd * wi;
                const double mi = b1 * m[i] + (1.0 - b1) * gi, vi = b2 * v[i] + (1.0 - b2) * gi * gi;
                m[i] = mi;
                v[i] = vi;
                out[i - i0] = static_cast<T>(wi - lr * (mi / c1) / (std::sqrt(vi / c2) + eps));
            }
        });
    };
    if (c.decoupled)
        update(std::true_type{});
    else
        update(std::false_type{});
}

}  // namespace bt
