// csrc/quad.hpp: binary128 values and gradients of the paper's Figure 1 graph (integers, so exact),
// a division's gradients against their exact rationals, the exact decomposition, and a deep chain
// swept and released without recursion. Built only where the compiler has __float128.
#include "../../csrc/quad.hpp"

#include <cstdio>

#include "check.hpp"

#ifdef BT_HAS_FLOAT128

namespace q = bt::quad;

static void test_figure_1() {
    // g = ((a + b) - (a*b + b**3))**2 * 0.5 at a = -41, b = 2: g = 612.5, dg/da = -35, dg/db = 1050.
    q::NodePtr a = q::leaf(-41), b = q::leaf(2);
    q::NodePtr d = q::add(q::mul(a, b), q::pow(b, 3));
    q::NodePtr g = q::mul(q::pow(q::sub(q::add(a, b), d), 2), q::leaf(0.5));
    q::backward(g);
    CHECK(g->value == q::f128(612.5), "g = %g", double(g->value));
    CHECK(a->grad == -35, "dg/da = %g", double(a->grad));
    CHECK(b->grad == 1050, "dg/db = %g", double(b->grad));
    q::backward(g);  // set, not accumulated
    CHECK(a->grad == -35, "a second sweep gives dg/da = %g", double(a->grad));
}

static void test_division_and_exact() {
    // f = x / y at x = 1, y = 3: df/dx = 1/3, df/dy = -1/9, each rounded once to 113 bits.
    q::NodePtr x = q::leaf(1), y = q::leaf(3);
    q::NodePtr f = q::div(x, y);
    q::backward(f);
    const q::Exact e = q::exact(x->grad);
    // 1/3 rounded: an odd 113-bit significand s with s * 2**e within 2**-114 relative of 1/3.
    CHECK(!e.negative && (e.significand >> 112) == 1 && (e.significand & 1) == 1, "1/3's significand");
    CHECK(e.exponent == -114, "1/3's exponent %d", e.exponent);
    const q::f128 err = q::f128(3) * x->grad - 1;  // |3 s 2**e - 1| <= 3 * 2**-114 * (1/3)
    CHECK(err < q::ipow(2, -112) && -err < q::ipow(2, -112), "1/3 within half an ulp");
    CHECK(y->grad == -(x->grad * x->grad) || y->grad == -x->grad / 3, "df/dy = -1/9 rounded");
    const q::Exact half = q::exact(q::f128(-0.5));
    CHECK(half.negative && half.significand == 1 && half.exponent == -1, "-0.5 = -1 * 2**-1");
    CHECK(q::to_decimal(q::exact(q::f128(1e30)).significand) != "0", "a large value decomposes");
}

static void test_deep_chain() {
    q::NodePtr x = q::leaf(0.5);
    q::NodePtr y = x;
    for (int i = 0; i < 300000; ++i) y = q::add(y, x);
    q::backward(y);
    CHECK(x->grad == 300001, "d(sum)/dx = %g", double(x->grad));
    y.reset();  // released iteratively: no stack overflow
    CHECK(x.use_count() == 1, "the chain is gone");
}

int main() {
    test_figure_1();
    test_division_and_exact();
    test_deep_chain();
    std::printf("test_quad: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}

#else

int main() {
    std::printf("test_quad: no __float128 in this compiler; nothing to test\n");
    return 0;
}

#endif
