// The paper's Figure 1 graph from C++ through burtorch's header-only API (csrc/value.hpp):
// 100,000 iterations of build -> backward -> discard, timed, as workload W1 does from Python.
//
//   cmake -S . -B build/cpp -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON && cmake --build build/cpp
//   build/cpp/figure1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "value.hpp"

int main() {
    using V = bt::Value<double>;
    bt::Arena<double> arena;
    const bt::Mark start = arena.checkpoint();
    double g_value = 0, ga = 0, gb = 0;
    std::vector<double> seconds;
    for (int run = 0; run < 7; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < 100000; ++it) {
            bt::Scope<double> scope(arena);  // this iteration's nodes are discarded at the brace
            V a(arena, -41.0), b(arena, 2.0);
            V c = a + b;
            V d = a * b + bt::pow3(b);
            V e = c - d;
            V f = bt::sqr(e);
            V g = f * 0.5;
            g.backward();
            g_value = g.data();
            ga = a.grad();
            gb = b.grad();
        }
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf("g = %g, dg/da = %g, dg/db = %g (expected 612.5, -35, 1050)\n", g_value, ga, gb);
    std::printf("100,000 iterations of build + backward + rewind: %.4f s (median of 7; min %.4f, max %.4f)\n",
                seconds[3], seconds.front(), seconds.back());
    (void)start;
    return (g_value == 612.5 && ga == -35 && gb == 1050) ? 0 : 1;
}
