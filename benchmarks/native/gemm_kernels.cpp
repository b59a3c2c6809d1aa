// The linear layer's three products (csrc/kernels/gemm.hpp) without Python: microseconds and
// GFLOP/s of each, float32, on the W4 / W5 shapes. Medians of 9 runs.
// Build and run (with the C++ tests):
//   cmake -S . -B build/cpp -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON && cmake --build build/cpp
//   taskset -c 1 build/cpp/gemm_kernels
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/gemm.hpp"

template <class F>
static double median_seconds(F&& f, int calls) {
    std::vector<double> runs;
    for (int r = 0; r < 9; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) f();
        runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
}

// The core's multiply-add peak: independent accumulators (enough to hide the FMA latency on two
// pipes), each updated n times by one fused multiply-add of a full SIMD register. They and the two
// operands must fit the register file: 16 accumulators on AVX2's 16 registers spilled to memory
// and measured well below the peak the GEMM kernels themselves reached.
static double fma_peak_gflops() {
    using S = bt::simd::Simd<float>;
    constexpr int A = S::W == 16 ? 16 : 12;
    S::V acc[A];
    for (int i = 0; i < A; ++i) acc[i] = S::set1(0.001f * float(i));
    const S::V x = S::set1(0.9999f), y = S::set1(1e-4f);
    const long n = 20'000'000;
    const auto t0 = std::chrono::steady_clock::now();
    for (long k = 0; k < n; ++k)
#pragma GCC unroll 16
        for (int i = 0; i < A; ++i) acc[i] = S::madd(acc[i], x, y);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float sink[S::W];
    S::V total = acc[0];
    for (int i = 1; i < A; ++i) total = S::add(total, acc[i]);
    S::store(sink, total);
    if (sink[0] == 12345.f) std::printf(" ");  // keeps the loop
    return double(n) * A * S::W * 2 / s * 1e-9;
}

int main() {
    namespace g = bt::gemm;
    std::printf("FMA peak of this core (independent multiply-adds): %.0f GFLOP/s\n", fma_peak_gflops());
    // W4's fc1 at 64 rows, and at 32 (one thread's chunk of a two-thread step), its fc2, W5's layers
    const size_t shapes[][3] = {{64, 1024, 1024}, {64, 1024, 512}, {64, 1024, 128}, {64, 1024, 64}, {32, 1024, 64},
                                {64, 1024, 27},   {64, 1024, 4},   {1, 1024, 1024}, {1, 1024, 4},   {512, 24, 72},
                                {512, 96, 24},    {64, 24, 96},    {8, 24, 72}};
    std::printf("%s kernels, %dx%d register tile\n", bt::simd::isa, g::kMR, g::kNV);
    std::printf("%-16s %12s %12s %12s %12s\n", "rows x in x out", "forward", "grad input", "grad weight", "total us");
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& s : shapes) {
        const size_t R = s[0], I = s[1], O = s[2];
        std::vector<float> x(R * I), W(O * I), b(O), y(R * O), gy(R * O), gx(R * I), gW(O * I), gb(O);
        for (auto* v : {&x, &W, &b, &gy}) std::generate(v->begin(), v->end(), [&] { return u(rng); });
        std::vector<float> scratch(g::forward_scratch(R, I, O, 0, O) + 1);
        const int calls = int(std::max<size_t>(1, 20'000'000 / (R * I * O)));
        const double tf = median_seconds(
            [&] { g::forward(x.data(), W.data(), b.data(), y.data(), R, I, O, 0, O, scratch.data()); }, calls);
        const double tx = median_seconds([&] { g::grad_input(gy.data(), W.data(), gx.data(), R, I, O, 0, R); }, calls);
        const double tw =
            median_seconds([&] { g::grad_weight(gy.data(), x.data(), gW.data(), gb.data(), R, I, O, 0, O); }, calls);
        const double flop = 2.0 * double(R * I * O) * 1e-9;
        char name[32];
        std::snprintf(name, sizeof name, "%zux%zux%zu", R, I, O);
        std::printf("%-16s %6.1f (%3.0f) %6.1f (%3.0f) %6.1f (%3.0f) %12.1f\n", name, tf * 1e6, flop / tf, tx * 1e6,
                    flop / tx, tw * 1e6, flop / tw, (tf + tx + tw) * 1e6);
    }
    std::printf("(in brackets: GFLOP/s)\n");
    return 0;
}
