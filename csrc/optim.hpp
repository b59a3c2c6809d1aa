// In-place optimizer steps over a span of parameters: values and grads in the arena, the
// optimizer's buffers in float64 whatever the arena's dtype (as PyTorch keeps them in the
// parameter's dtype, but FP64 here so FP32 training keeps its moments exact enough).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace bt {

struct SgdConfig {
    double lr, momentum, weight_decay, dampening;
    bool nesterov;
};

// m: the momentum buffer (unused without momentum). first: the first step (m starts at d).
// The options are tested once, outside the loops, so each loop is branch-free and vectorizes
// (the arithmetic per element is unchanged: the same double operations in the same order).
template <typename T>
inline void sgd_step(T* __restrict w, const T* __restrict g, double* __restrict m, size_t n, const SgdConfig& c,
                     bool first) {
    const double lr = c.lr, wd = c.weight_decay, mu = c.momentum, damp = 1.0 - c.dampening;
    if (mu == 0.0) {
        for (size_t i = 0; i < n; ++i) {
            const double d = double(g[i]) + wd * double(w[i]);
            w[i] = static_cast<T>(double(w[i]) - lr * d);
        }
        return;
    }
    auto update = [&](auto nesterov, auto is_first) {
        for (size_t i = 0; i < n; ++i) {
            double d = double(g[i]) + wd * double(w[i]);
            const double mi = is_first ? d : mu * m[i] + damp * d;
            m[i] = mi;
            d = nesterov ? d + mu * mi : mi;
            w[i] = static_cast<T>(double(w[i]) - lr * d);
        }
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
template <typename T>
inline void adam_step(T* __restrict w, const T* __restrict g, double* __restrict m, double* __restrict v, size_t n,
                      const AdamConfig& c, uint64_t step) {
    const double c1 = 1.0 - std::pow(c.beta1, double(step)), c2 = 1.0 - std::pow(c.beta2, double(step));
    auto update = [&](auto decoupled) {
        for (size_t i = 0; i < n; ++i) {
            double gi = double(g[i]);
            double wi = double(w[i]);
            if constexpr (decltype(decoupled)::value)
                wi -= c.lr * c.weight_decay * wi;
            else
                gi += c.weight_decay * wi;
            m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
            v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
            w[i] = static_cast<T>(wi - c.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + c.eps));
        }
    };
    if (c.decoupled)
        update(std::true_type{});
    else
        update(std::false_type{});
}

}  // namespace bt
