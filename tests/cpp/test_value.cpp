// The C++ user API (csrc/value.hpp): operators and functions build the same records as the
// Python API, and gradients match central differences.
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "../../csrc/value.hpp"
#include "check.hpp"

using V = bt::Value<double>;

// f over two leaves: value and gradient through the API, checked against central differences.
static void check_grad(const char* name, const std::function<V(V, V)>& f, double x0, double y0) {
    bt::Arena<double> A;
    V x(A, x0), y(A, y0);
    V out = f(x, y);
    out.backward();
    auto value_at = [&](double xv, double yv) {
        bt::Arena<double> B;
        return f(V(B, xv), V(B, yv)).data();
    };
    const double h = 1e-6;
    const double gx = (value_at(x0 + h, y0) - value_at(x0 - h, y0)) / (2 * h);
    const double gy = (value_at(x0, y0 + h) - value_at(x0, y0 - h)) / (2 * h);
    CHECK(std::fabs(x.grad() - gx) <= 1e-5 * (1 + std::fabs(gx)), "%s: d/dx %.10g vs fd %.10g", name, x.grad(), gx);
    CHECK(std::fabs(y.grad() - gy) <= 1e-5 * (1 + std::fabs(gy)), "%s: d/dy %.10g vs fd %.10g", name, y.grad(), gy);
}

int main() {
    // The paper's Figure 1 numbers.
    {
        bt::Arena<double> A;
        V a(A, -41.0), b(A, 2.0);
        V g = bt::sqr((a + b) - (a * b + bt::pow3(b))) * 0.5;
        g.backward();
        CHECK(g.data() == 612.5 && a.grad() == -35 && b.grad() == 1050, "figure 1: %g %g %g", g.data(), a.grad(),
              b.grad());
    }
    check_grad("arith", [](V x, V y) { return (x * y - 3.0 / x + y / 2.0 - x) * 1.5 + 2.0; }, 0.7, -1.3);
    check_grad(
        "functions", [](V x, V y) { return bt::tanh(x) * bt::exp(y) + bt::log(bt::sqr(x) + 1.0) - bt::sin(y); }, 0.4,
        0.9);
    check_grad("pow", [](V x, V y) { return bt::pow(x, 2.5) + bt::pow(2.0, y) + bt::pow(x, y); }, 1.3, 0.6);
    check_grad(
        "reductions",
        [](V x, V y) {
            return bt::reduce_sum(std::vector<V>{x, y, x * y}) + bt::variance(std::vector<V>{x, y, x + y}) +
                   bt::inner_product_with_bias(std::vector<V>{x, y}, std::vector<V>{y, x}, x);
        },
        0.3, -0.8);
    check_grad(
        "compound",
        [](V x, V y) {
            V z = x;
            z += y;
            z *= 3.0;
            return -z + bt::leaky_relu(x - y, 0.1) + bt::relu(y);
        },
        -0.2, 0.5);
    // Scope rewinds: the arena is back where it was, the parameters are untouched.
    {
        bt::Arena<float> A;
        bt::Value<float> w(A, 2.0f);
        const size_t before = A.num_slots();
        for (int i = 0; i < 3; ++i) {
            bt::Scope<float> s(A);
            bt::Value<float> x(A, float(i));
            (w * x).backward();
        }
        CHECK(A.num_slots() == before && A.num_records() == 0, "scope rewinds");
        CHECK(w.grad() == 3.0f, "leaf grads accumulate across scopes: %g", double(w.grad()));
    }
    if (failures) {
        std::printf("value API tests: %d failed\n", failures);
        return 1;
    }
    std::printf("value API tests: all passed\n");
    return 0;
}
