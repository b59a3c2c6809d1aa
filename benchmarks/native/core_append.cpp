// The native share of one scalar op: append (value + record) and the backward sweep, no Python.
// Build and run (with the C++ tests):
//   cmake -S . -B build/cpp -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON && cmake --build build/cpp
//   build/cpp/core_append
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "burtorch.hpp"

int main() {
    const int N = 1'000'000, R = 7;
    bt::Arena<double> A;
    uint32_t a = A.leaf(1.0), b = A.leaf(2.0);
    bt::Mark m = A.checkpoint();
    std::vector<double> fwd, bwd;
    for (int r = 0; r < R; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        uint32_t y = a;
        for (int i = 0; i < N; ++i) y = A.binary(bt::Op::add, y, b);
        auto t1 = std::chrono::steady_clock::now();
        A.backward(y, 1.0, 0);
        auto t2 = std::chrono::steady_clock::now();
        A.rewind(m);
        fwd.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / N);
        bwd.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / N);
    }
    std::sort(fwd.begin(), fwd.end());
    std::sort(bwd.begin(), bwd.end());
    std::printf(
        "append one binary op (value + record): %.2f ns   backward per record: %.2f ns   (medians of %d x %d)\n",
        fwd[R / 2], bwd[R / 2], R, N);
}
