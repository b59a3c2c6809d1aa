// In-place optimizer steps over a span of parameters: values and grads in the arena, the
// optimizer's buffers in float64 whatever the arena's dtype (as PyTorch keeps them in the
// parameter's dtype, but FP64 here so FP32 training keeps its moments exact enough).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace bt {

struct SgdConfig {
    double lr, momentum, weight_decay, dampening;
    bool nesterov;
};

// m: the momentum buffer (unused without momentum). first: the first step (m starts at d).
template <typename T>
inline void sgd_step(T* w, const T* g, double* m, size_t n, const SgdConfig& c, bool first) {
    for (size_t i = 0; i < n; ++i) {
        double d = double(g[i]) + c.weight_decay * double(w[i]);
        if (c.momentum != 0.0) {
            m[i] = first ? d : c.momentum * m[i] + (1.0 - c.dampening) * d;
            d = c.nesterov ? d + c.momentum * m[i] : m[i];
        }
        w[i] = static_cast<T>(double(w[i]) - c.lr * d);
    }
}

struct AdamConfig {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled;  // AdamW: decay the weights, not the gradient
};

// m, v: first and second moments; step: the 1-based step count (bias corrections).
template <typename T>
inline void adam_step(T* w, const T* g, double* m, double* v, size_t n, const AdamConfig& c, uint64_t step) {
    const double c1 = 1.0 - std::pow(c.beta1, double(step)), c2 = 1.0 - std::pow(c.beta2, double(step));
    for (size_t i = 0; i < n; ++i) {
        double gi = double(g[i]);
        double wi = double(w[i]);
        if (c.decoupled) wi -= c.lr * c.weight_decay * wi;
        else gi += c.weight_decay * wi;
        m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
        v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
        w[i] = static_cast<T>(wi - c.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + c.eps));
    }
}

}  // namespace bt
