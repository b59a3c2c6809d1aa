// Core tests without Python, built with ASan + UBSan by scripts/sanitize.sh.
// Every scalar op of the tables in ops.hpp is checked against central differences, so a new
// op row is covered here without touching this file.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../csrc/burtorch.hpp"
#include "check.hpp"

using bt::Arena;
using bt::Op;

static bool close(double a, double b, double tol) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

// Value and d/dx_i of one op applied to xs, through the arena.
static double run(Op op, const std::vector<double>& xs, double imm, std::vector<double>* grads) {
    Arena<double> A;
    std::vector<uint32_t> idx;
    for (double x : xs) idx.push_back(A.leaf(x));
    uint32_t y;
    switch (bt::op_info(op).kind) {
        case bt::OpKind::unary: y = A.unary(op, idx[0]); break;
        case bt::OpKind::unary_imm: y = A.unary_imm(op, idx[0], imm); break;
        case bt::OpKind::binary: y = A.binary(op, idx[0], idx[1]); break;
        default: y = A.nary(op, idx.data(), idx.size()); break;
    }
    A.backward(y, 1.0, 0);
    if (grads) {
        grads->clear();
        for (uint32_t i : idx) grads->push_back(A.grads()[i]);
    }
    return A.values()[y];
}

static void check_op(Op op, std::vector<double> xs, double imm) {
    std::vector<double> g;
    run(op, xs, imm, &g);
    const double h = 1e-6;
    for (size_t i = 0; i < xs.size(); ++i) {
        auto up = xs, dn = xs;
        up[i] += h;
        dn[i] -= h;
        double fd = (run(op, up, imm, nullptr) - run(op, dn, imm, nullptr)) / (2 * h);
        CHECK(close(g[i], fd, 1e-5), "%s arg %zu at %g: grad %.10g vs fd %.10g", bt::op_info(op).name, i, xs[i], g[i],
              fd);
    }
}

static void test_all_ops() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> pos(0.3, 2.5), sign(0, 1);
    for (uint32_t o = 1; o < static_cast<uint32_t>(Op::count_); ++o) {
        Op op = static_cast<Op>(o);
        auto kind = bt::op_info(op).kind;
        if (kind == bt::OpKind::range) continue;
        for (int t = 0; t < 20; ++t) {
            // positive arguments keep every op in its domain (log, sqrt, pow); a random sign
            // for the first argument of ops defined everywhere
            double x = pos(rng);
            bool any_sign = op != Op::log && op != Op::neg_log && op != Op::sqrt && op != Op::inv_sqrt &&
                            op != Op::pow && op != Op::pow_const && op != Op::rpow_const;
            if (any_sign && sign(rng) < 0.5) x = -x;
            double imm = (op == Op::rpow_const) ? 1.7 : (op == Op::pow_const ? 2.3 : 0.8);
            if (kind == bt::OpKind::nary) {
                size_t n = (op == Op::inner_product) ? 6 : (op == Op::inner_product_with_bias ? 7 : 5);
                std::vector<double> xs;
                for (size_t i = 0; i < n; ++i) xs.push_back(pos(rng) * (sign(rng) < 0.5 ? -1 : 1));
                check_op(op, xs, imm);
            } else if (kind == bt::OpKind::binary) {
                check_op(op, {x, pos(rng)}, imm);
            } else {
                check_op(op, {x}, imm);
            }
        }
    }
}

static void test_checkpoint_rewind_and_generations() {
    Arena<float> A;
    uint32_t p = A.leaf(2.0f);
    bt::Mark m = A.checkpoint();
    for (int it = 0; it < 100; ++it) {
        uint32_t x = A.leaf(3.0f);
        uint32_t y = A.binary(Op::mul, p, x);
        uint64_t gen = A.gen_of(y);
        A.backward(y, 1.0f, 0);
        CHECK(A.grads()[p] == 3.0f * (it + 1), "leaf grads accumulate across iterations");
        CHECK(A.mark_problem(m) == nullptr, "checkpoint stays valid");
        A.rewind(m);
        CHECK(!A.alive(y, gen), "a rewound slot is stale");
        CHECK(A.alive(p, 0), "a slot below the checkpoint stays alive");
        CHECK(A.num_slots() == 1 && A.num_records() == 0, "rewind truncates");
    }
    uint32_t a = A.leaf(1.0f);
    bt::Mark m2 = A.checkpoint();
    A.rewind(m);
    A.leaf(5.0f);  // same size as at m2, new epoch
    CHECK(A.mark_problem(m2) != nullptr, "a checkpoint above a rewind is discarded");
    (void)a;
}

static void test_capacity_is_all_or_nothing() {
    bt::Capacity cap;
    cap.slots = 8;
    cap.records = 8;
    cap.args = 8;
    Arena<double> A(cap);
    uint32_t x = A.leaf(1.0);
    for (int i = 0; i < 7; ++i) x = A.unary(Op::tanh, x);
    bool threw = false;
    try {
        A.unary(Op::tanh, x);
    } catch (const bt::CapacityError&) {
        threw = true;
    }
    CHECK(threw, "capacity overflow throws");
    CHECK(A.num_slots() == 8 && A.num_records() == 7, "a refused op leaves nothing behind");
}

static void test_copy_range_op() {
    Arena<double> A;
    uint32_t a = A.leaf(1.0), b = A.leaf(2.0), c = A.leaf(3.0);
    std::vector<bt::Span> spans = {{c, 1}, {a, 2}};
    uint32_t out = bt::append_copy(A, spans);
    CHECK(A.values()[out] == 3.0 && A.values()[out + 1] == 1.0 && A.values()[out + 2] == 2.0, "copy values");
    uint32_t s =
        A.nary(Op::inner_product, std::vector<uint32_t>{out, out + 1, out + 2, out, out + 1, out + 2}.data(), 6);
    A.backward(s, 1.0, 0);
    CHECK(A.grads()[a] == 2.0 && A.grads()[b] == 4.0 && A.grads()[c] == 6.0, "copy backward");
    auto args = A.record_args(A.record(A.record_of(out)));
    CHECK(args.size() == 2 && args[0].first == c && args[1].second == 2, "range args decode");
}

// The kernels' working buffers: growing keeps the contents and zero-fills the rest, as a
// vector's resize does, on the heap below kHugeBufferFrom and in 2 MiB-aligned mappings above.
static void test_huge_buffer() {
    bt::HugeBuffer<float> b;
    CHECK(b.data() == nullptr && b.size() == 0, "an empty buffer owns nothing");
    b.resize(1000);  // heap
    for (size_t i = 0; i < 1000; ++i) b[i] = float(i);
    const size_t big = (size_t(256) << 10) / sizeof(float) * 3 + 5;  // mapped (but sanitized), not a page multiple
    b.resize(big);
    CHECK(b.size() == big, "grown to the size asked");
#if !defined(BT_SANITIZED)
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % bt::kHugePage == 0, "a large buffer starts on a 2 MiB boundary");
#endif
    bool kept = true, zero = true;
    for (size_t i = 0; i < 1000; ++i) kept &= b[i] == float(i);
    for (size_t i = 1000; i < big; ++i) zero &= b[i] == 0.f;
    CHECK(kept && zero, "growing keeps the contents and zero-fills the rest");
    b[big - 1] = 7.f;  // the last element is writable (ASan sees any overrun of the heap case)
    float* const at = b.data();
    b.resize(10);
    CHECK(b.data() == at && b.size() == big, "it never shrinks");
    b.resize(big + 1000);  // within the 2 MiB the mapping was rounded up to (sanitized: on the heap)
    CHECK(b.size() == big + 1000 && b[big - 1] == 7.f && b[big + 999] == 0.f, "growing within the mapping");
#if !defined(BT_SANITIZED)
    CHECK(b.data() == at, "growing within the mapping keeps it");
#endif
    b[big + 999] = 5.f;
    b.resize(4 * big);  // past the mapping: a new one, the contents copied over
    CHECK(b[big - 1] == 7.f && b[big + 999] == 5.f && b[4 * big - 1] == 0.f, "a mapped buffer grows like a heap one");
#if !defined(BT_SANITIZED)
    CHECK(b.data() != at && reinterpret_cast<uintptr_t>(b.data()) % bt::kHugePage == 0, "past the mapping: a new one");
#endif
    bt::HugeBuffer<float> moved(std::move(b));
    CHECK(b.data() == nullptr && moved.size() == 4 * big && moved[big - 1] == 7.f, "moving hands the memory over");
    bt::HugeBuffer<float> other;
    other.resize(3);
    other = std::move(moved);
    CHECK(moved.data() == nullptr && other.size() == 4 * big && other[big - 1] == 7.f, "move-assigning too");
}

// y = x W^T with x = W itself (y = W W^T): x's grads are W's, and this record's gx lands on
// them after W's own gradient, so each grad is fl(gW + gx), gW and gx being the kernels' chains
// of multiply-adds in index order (rebuilt here with the build's own scalar madd: fused where the
// kernels fuse). Guards the order against
// a change that would add gx inside the products' tasks (moved ahead of gW, 1,261 of the 1,600
// grads differ).
static void test_linear_of_its_own_weight() {
    const uint32_t n = 40;
    Arena<float> A;
    const uint32_t w = A.new_slots(n * n), c = A.new_slots(n * n);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (uint32_t i = 0; i < 2 * n * n; ++i) A.values()[w + i] = u(rng);  // W, then c
    const uint32_t y = bt::append_linear(A, bt::Spans{{w, n * n}}, bt::Spans{{w, n * n}}, nullptr, n, n, n);
    A.backward(bt::append_dot(A, bt::Spans{{y, n * n}}, bt::Spans{{c, n * n}}), 1.0f, 0);  // gy = c
    const float* W = A.values() + w;
    const float* gy = A.values() + c;
    int wrong = 0;
    for (uint32_t o = 0; o < n; ++o)
        for (uint32_t i = 0; i < n; ++i) {
            float gw = 0.f, gx = 0.f;  // gW[o, i] = sum_r gy[r, o] x[r, i]; gx[o, i] = sum_k gy[o, k] W[k, i]
            for (uint32_t r = 0; r < n; ++r) gw = bt::simd::madd(gy[r * n + o], W[r * n + i], gw);
            for (uint32_t k = 0; k < n; ++k) gx = bt::simd::madd(gy[o * n + k], W[k * n + i], gx);
            wrong += A.grads()[w + o * n + i] != gw + gx;
        }
    CHECK(wrong == 0, "linear(W, W): %d of %u grads differ from gW + gx in that order", wrong, n * n);
}

int main() {
    test_huge_buffer();
    test_linear_of_its_own_weight();
    test_all_ops();
    test_checkpoint_rewind_and_generations();
    test_capacity_is_all_or_nothing();
    test_copy_range_op();
    if (failures) {
        std::printf("core tests: %d failed\n", failures);
        return 1;
    }
    std::printf("core tests: all passed\n");
    return 0;
}
