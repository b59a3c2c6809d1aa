// In-place optimizer steps over a span of parameters: values and grads in the arena, the
// optimizer's buffers in float64 whatever the arena's dtype (as PyTorch keeps them in the
// parameter's dtype, but FP64 here so FP32 training keeps its moments exact enough). Plain SGD,
// which has no buffer, computes in the parameter's dtype as PyTorch does.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

// w[i] = next(i) for i in [0, n), next reading w[i] (and its own buffers at i) before w[i] is
// written. stream: the new values go out through streaming stores (simd.hpp), a block at a time
// through an aligned buffer; for a step split across threads after an oracle that ran on all of
// them. Every core then holds the weights it read, so an ordinary store first waits for the
// line to be taken from the other core's cache; on a VM whose two vCPUs are far apart (a round
// trip of 220-310 ns instead of 65) those waits made a two-thread W4 step 1.2-1.34x slower.
// Either way each element is next(i), so the bits do not depend on `stream`.
template <typename T, class Next>
inline void write_each(T* __restrict w, size_t n, bool stream, Next&& next) {
    if (!stream) {
        for (size_t i = 0; i < n; ++i) w[i] = next(i);
        return;
    }
    using S = simd::Simd<T>;
    constexpr size_t B = 1024 / sizeof(T);  // a block of 1 KiB, a whole number of registers
    alignas(64) T buf[B];
    size_t i = 0;
    for (; i < n && reinterpret_cast<uintptr_t>(w + i) % sizeof(typename S::V) != 0; ++i) w[i] = next(i);
    for (; i + B <= n; i += B) {
        for (size_t j = 0; j < B; ++j) buf[j] = next(i + j);
        for (size_t j = 0; j < B; j += S::W) S::stream(w + i + j, S::load(buf + j));
    }
    for (; i < n; ++i) w[i] = next(i);
    simd::stream_fence();
}

// m: the momentum buffer (unused without momentum). first: the first step (m starts at d).
// The options are tested once, outside the loops, so each loop is branch-free and vectorizes
// (the arithmetic per element is unchanged: the same double operations in the same order).
// stream: write the new values with streaming stores (write_each; a step split across threads).
template <typename T>
inline void sgd_step(T* __restrict w, const T* __restrict g, double* __restrict m, size_t n, const SgdConfig& c,
                     bool first, bool stream = false) {
    const double lr = c.lr, wd = c.weight_decay, mu = c.momentum, damp = 1.0 - c.dampening;
    if (mu == 0.0) {
        const T lr_t = static_cast<T>(lr), wd_t = static_cast<T>(wd);
        if (wd_t == T(0))
            write_each(w, n, stream, [&](size_t i) { return sgd_update(w[i], g[i], lr_t, T(0)); });
        else
            write_each(w, n, stream, [&](size_t i) { return sgd_update(w[i], g[i], lr_t, wd_t); });
        return;
    }
    auto update = [&](auto nesterov, auto is_first) {
        write_each(w, n, stream, [&](size_t i) {
            double d = double(g[i]) + wd * double(w[i]);
            const double mi = is_first ? d : mu * m[i] + damp * d;
            m[i] = mi;
            d = nesterov ? d + mu * mi : mi;
            return static_cast<T>(double(w[i]) - lr * d);
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
    auto update = [&](auto decoupled) {
        write_each(w, n, stream, [&](size_t i) {
            double gi = double(g[i]);
            double wi = double(w[i]);
            if constexpr (decltype(decoupled)::value)
                wi -= c.lr * c.weight_decay * wi;
            else
                gi += c.weight_decay * wi;
            m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
            v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
            return static_cast<T>(wi - c.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + c.eps));
        });
    };
    if (c.decoupled)
        update(std::true_type{});
    else
        update(std::false_type{});
}

}  // namespace bt
