// The linear layer's three products (csrc/kernels/gemm.hpp) and the float exp/tanh
// (csrc/kernels/vmath.hpp) on fixed pseudo-random inputs, every result printed as a hexadecimal
// float, one per line: two builds of the kernels (scripts/aarch64_check.sh: NEON and the
// portable lanes) are compared value by value from these files.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/vmath.hpp"

namespace {

// A fixed generator (not <random>'s distributions, whose output may differ between libraries).
uint64_t state = 0x9e3779b97f4a7c15ull;
double next_unit() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return double(state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

template <typename T>
std::vector<T> random_vec(size_t n) {
    std::vector<T> v(n);
    for (T& e : v) e = T(next_unit());
    return v;
}

template <typename T>
void print(const char* what, size_t rows, size_t in, size_t out, const std::vector<T>& v) {
    for (size_t i = 0; i < v.size(); ++i)
        std::printf("%s %zux%zux%zu %zu %a\n", what, rows, in, out, i, static_cast<double>(v[i]));
}

template <typename T>
void products(size_t rows, size_t in, size_t out) {
    const auto x = random_vec<T>(rows * in), W = random_vec<T>(out * in), b = random_vec<T>(out);
    const auto gy = random_vec<T>(rows * out);
    std::vector<T> y(rows * out), gx(rows * in), gW(out * in), gb(out);
    std::vector<T> scratch(bt::gemm::forward_scratch(rows, in, out, 0, out) + 1);
    bt::gemm::forward(x.data(), W.data(), b.data(), y.data(), rows, in, out, 0, out, scratch.data());
    bt::gemm::grad_input(gy.data(), W.data(), gx.data(), rows, in, out, 0, rows);
    bt::gemm::grad_weight(gy.data(), x.data(), gW.data(), gb.data(), rows, in, out, 0, out);
    const char* t = sizeof(T) == 4 ? "f32" : "f64";
    char name[32];
    std::snprintf(name, sizeof name, "%s.forward", t);
    print(name, rows, in, out, y);
    std::snprintf(name, sizeof name, "%s.grad_input", t);
    print(name, rows, in, out, gx);
    std::snprintf(name, sizeof name, "%s.grad_weight", t);
    print(name, rows, in, out, gW);
    std::snprintf(name, sizeof name, "%s.grad_bias", t);
    print(name, rows, in, out, gb);
}

}  // namespace

int main() {
    // The workloads' shapes (W4: 1 or 64 rows, 1024 -> e -> 27; W5: widths 24/72/96) and tails.
    const size_t shapes[][3] = {{1, 12, 4},  {64, 12, 64}, {1, 192, 64}, {64, 64, 27}, {64, 1024, 27},
                                {8, 24, 72}, {64, 96, 24}, {5, 37, 19},  {13, 65, 33}, {3, 1100, 5}};
    for (auto& s : shapes) {
        products<float>(s[0], s[1], s[2]);
        products<double>(s[0], s[1], s[2]);
    }
    const auto v = random_vec<float>(997);
    std::vector<float> e(v.size()), th(v.size());
    for (size_t i = 0; i < v.size(); ++i) e[i] = bt::kernels::exp_float(8.0f * v[i]);
    bt::kernels::tanh_floats(v.data(), th.data(), v.size());
    print("f32.exp", 1, v.size(), 1, e);
    print("f32.tanh", 1, v.size(), 1, th);
    return 0;
}
