// What streamed (non-temporal) stores of a per-sample row cost beside the sample's compute: the
// question behind per_sample_grads' store schedule (csrc/lanes/rows.hpp). Each of N "samples"
// runs a compute slice on data that stays in the first-level cache and streams `lines` cache
// lines of a large output, reused from call to call (W4 e=4's row: 5,963 floats, 373 lines).
// The compute comes in two kinds: with ordinary stores (two loads, a multiply-add and a store per
// step, like the lookup's copy or the input grads) and in registers only (loads and multiply-adds
// into accumulators, like a dot product). The streamed lines go out in one burst after the
// compute, or spread over it in k pieces. Printed: milliseconds per N samples (medians of 15
// runs) and each schedule over max(compute alone, stores alone), the best any overlap can do.
// Build (with the C++ tests) and run:
//   cmake -S . -B build/cpp -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON && cmake --build build/cpp
//   taskset -c 1 build/cpp/stream_overlap [steps per sample, default 1000 and 2000]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/simd.hpp"

using S = bt::simd::Simd<float>;
using V = S::V;

constexpr size_t kSamples = 1024, kLines = 373, kLineFloats = 64 / sizeof(float);
constexpr size_t kScratch = 4096;  // floats: 16 KB, in the first-level cache

struct Work {
    std::vector<float> scratch = std::vector<float>(kScratch, 1.0f);
    V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};

    // steps [s0, s1) of the compute: with ordinary stores (y[k] = madd(a[i], m, b[j])) or into
    // registers only (four accumulators over loads)
    void compute(size_t s0, size_t s1, bool stores) {
        const V m = S::set1(0.999f);
        float* x = scratch.data();
        constexpr size_t mask = kScratch - 1;
        if (stores) {
            for (size_t s = s0; s < s1; ++s) {
                const size_t i = (s * S::W) & mask, j = (s * S::W + kScratch / 2) & mask;
                S::store(x + ((s * S::W + kScratch / 4) & mask), S::madd(S::load(x + i), m, S::load(x + j)));
            }
            return;
        }
        V a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
        for (size_t s = s0; s < s1; s += 4) {
            a0 = S::madd(S::load(x + ((s * S::W) & mask)), m, a0);
            a1 = S::madd(S::load(x + (((s + 1) * S::W) & mask)), m, a1);
            a2 = S::madd(S::load(x + (((s + 2) * S::W) & mask)), m, a2);
            a3 = S::madd(S::load(x + (((s + 3) * S::W) & mask)), m, a3);
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    }
};

// lines [l0, l1) of a sample's row, streamed
static void stream_lines(float* row, size_t l0, size_t l1, V v) {
    for (size_t f = l0 * kLineFloats; f < l1 * kLineFloats; f += S::W) S::stream(row + f, v);
}

// One call: every sample's compute (`steps`, or none) and its row's lines (or none), the lines
// in `pieces` pieces between equal slices of the compute (pieces = 0: one burst after it).
static double call(float* out, Work& w, size_t steps, bool stores, bool lines, size_t pieces) {
    const V v = S::set1(2.0f);
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t n = 0; n < kSamples; ++n) {
        float* row = out + n * kLines * kLineFloats;
        if (!lines) {
            w.compute(0, steps, stores);
        } else if (pieces == 0) {
            w.compute(0, steps, stores);
            stream_lines(row, 0, kLines, v);
        } else {
            for (size_t p = 0; p < pieces; ++p) {
                w.compute(steps * p / pieces, steps * (p + 1) / pieces, stores);
                stream_lines(row, kLines * p / pieces, kLines * (p + 1) / pieces, v);
            }
        }
    }
    bt::simd::stream_fence();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static double median_ms(float* out, Work& w, size_t steps, bool stores, bool lines, size_t pieces) {
    std::vector<double> runs;
    for (int r = 0; r < 15; ++r) runs.push_back(call(out, w, steps, stores, lines, pieces));
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
}

int main(int argc, char** argv) {
    std::vector<size_t> step_counts;
    for (int a = 1; a < argc; ++a) step_counts.push_back(size_t(std::strtoul(argv[a], nullptr, 10)));
    if (step_counts.empty()) step_counts = {1000, 2000};
    // 24 MB, reused by every call; its lines start at a multiple of 64 bytes (streamed stores
    // need their vector's alignment)
    const size_t n_out = kSamples * kLines * kLineFloats;
    std::vector<float> buffer(n_out + kLineFloats, 1.0f);
    float* out = buffer.data();
    while (reinterpret_cast<uintptr_t>(out) % 64) ++out;
    Work w;
    const double st = median_ms(out, w, 0, false, true, 0);
    std::printf("%zu samples, %zu streamed lines each (%.1f MB), SIMD %s; ms per call, medians of 15\n", kSamples,
                kLines, double(n_out * sizeof(float)) / 1e6, bt::simd::isa);
    std::printf("stores alone: %.3f ms\n", st);
    std::printf("%-18s %7s %10s %8s %8s %8s %8s %8s\n", "compute", "steps", "alone", "burst", "4", "16", "64",
                "per line");
    for (bool stores : {true, false})
        for (size_t steps : step_counts) {
            const double c = median_ms(out, w, steps, stores, false, 0), best = std::max(c, st);
            std::printf("%-18s %7zu %10.3f", stores ? "with stores" : "in registers", steps, c);
            for (size_t pieces : {size_t(0), size_t(4), size_t(16), size_t(64), kLines})
                std::printf(" %8.2f", median_ms(out, w, steps, stores, true, pieces) / best);
            std::printf("\n");
        }
    std::printf("(the schedules' columns: time over max(compute alone, stores alone))\n");
    return 0;
}
