// The vectorized float tanh and exp (csrc/kernels/vmath.hpp) against double precision rounded to
// float: at most one float ulp apart over every 37th float of the whole range, both signs, and
// IEEE behaviour at the edges (NaN, infinities, signed zero, underflow and overflow).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../csrc/kernels/vmath.hpp"

static int32_t bits(float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}

int main() {
    int failures = 0;
    long checks = 0;
    std::vector<float> xs, ys;
    for (uint32_t b = 0; b < 0x7f800000u; b += 37) {
        float x;
        std::memcpy(&x, &b, sizeof x);
        xs.push_back(x);
        xs.push_back(-x);
    }
    ys.resize(xs.size());
    bt::kernels::tanh_floats(xs.data(), ys.data(), xs.size());  // the loop the map kernel runs
    for (size_t i = 0; i < xs.size(); ++i) {
        const float want = static_cast<float>(std::tanh(double(xs[i])));
        ++checks;
        if (std::abs(int64_t(bits(ys[i])) - int64_t(bits(want))) > 1 && ++failures <= 10)
            std::fprintf(stderr, "FAIL tanh(%.9g) = %.9g, want %.9g\n", xs[i], ys[i], want);
    }
    const float edge_in[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    float edge_out[5];
    bt::kernels::tanh_floats(edge_in, edge_out, 5);
    checks += 5;
    if (!std::isnan(edge_out[0])) ++failures, std::fprintf(stderr, "FAIL tanh(nan) is not nan\n");
    if (edge_out[1] != 1.0f || edge_out[2] != -1.0f) ++failures, std::fprintf(stderr, "FAIL tanh(+-inf)\n");
    if (bits(edge_out[3]) != bits(0.0f) || bits(edge_out[4]) != bits(-0.0f))
        ++failures, std::fprintf(stderr, "FAIL tanh(+-0)\n");
    for (size_t i = 0; i < xs.size(); ++i) {
        if (!(std::fabs(xs[i]) < 110.0f)) continue;  // beyond: 0 or inf, checked below
        const float got = bt::kernels::exp_float(xs[i]);
        const float want = static_cast<float>(std::exp(double(xs[i])));
        ++checks;
        if (std::abs(int64_t(bits(got)) - int64_t(bits(want))) > 1 && ++failures <= 20)
            std::fprintf(stderr, "FAIL exp(%.9g) = %.9g, want %.9g\n", xs[i], got, want);
    }
    checks += 5;
    if (!std::isnan(bt::kernels::exp_float(NAN))) ++failures, std::fprintf(stderr, "FAIL exp(nan) is not nan\n");
    if (bt::kernels::exp_float(INFINITY) != INFINITY || bt::kernels::exp_float(100.0f) != INFINITY)
        ++failures, std::fprintf(stderr, "FAIL exp overflow\n");
    if (bt::kernels::exp_float(-INFINITY) != 0.0f || bt::kernels::exp_float(-120.0f) != 0.0f)
        ++failures, std::fprintf(stderr, "FAIL exp underflow\n");
    if (bt::kernels::exp_float(0.0f) != 1.0f) ++failures, std::fprintf(stderr, "FAIL exp(0)\n");
    std::printf("test_vmath: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
