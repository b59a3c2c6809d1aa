// The thread pool (csrc/threads.hpp), a linear layer split across threads, and the threaded
// replay (csrc/replay_threads.hpp), without Python. scripts/tsan.sh runs this under
// ThreadSanitizer; scripts/sanitize.sh and ctest run it under ASan + UBSan and plainly.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../../csrc/burtorch.hpp"
#include "../../csrc/kernels/linear.hpp"
#include "../../csrc/replay_threads.hpp"
#include "check.hpp"

namespace th = bt::threads;

// Every task runs exactly once, over many short jobs, with and without nesting.
static void test_every_task_once() {
    for (int round = 0; round < 2000; ++round) {
        const size_t n = 1 + round % 13;
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> nested{0};
        th::Pool::instance().run(n, 2, [&](size_t t) {
            hits[t].fetch_add(1);
            th::parallel_tasks(3, [&](size_t) { nested.fetch_add(1); });  // runs serially inside
        });
        for (size_t t = 0; t < n; ++t)
            CHECK(hits[t].load() == 1, "round %d task %zu ran %d times", round, t, hits[t].load());
        CHECK(nested.load() == int(3 * n), "nested tasks %d of %zu", nested.load(), 3 * n);
    }
}

// Task 0 runs on the submitting thread every time, so that a task's data stays on one core from
// region to region; the others go to whichever thread claims them first (which one is a race, so
// it is not checked). When any thread could claim task 0, a helper often took it.
static void test_task_zero_is_the_callers() {
    const auto caller = std::this_thread::get_id();
    int elsewhere = 0;
    for (int round = 0; round < 20000; ++round) {
        std::thread::id first;
        th::Pool::instance().run(2, 2, [&](size_t t) {
            if (t == 0) first = std::this_thread::get_id();
        });
        elsewhere += first != caller;
    }
    CHECK(elsewhere == 0, "task 0 ran on a helper in %d of 20000 regions", elsewhere);
}

static void test_exceptions_reach_the_caller() {
    bool caught = false;
    std::atomic<int> ran{0};
    try {
        th::Pool::instance().run(8, 2, [&](size_t t) {
            ran.fetch_add(1);
            if (t == 5) throw std::runtime_error("task 5");
        });
    } catch (const std::runtime_error& e) {
        caught = std::string(e.what()) == "task 5";
    }
    CHECK(caught && ran.load() == 8, "caught %d, ran %d", int(caught), ran.load());
}

static void test_thread_counts() {
    CHECK(th::thread_count_problem(0) != nullptr && th::thread_count_problem(-3) != nullptr, "0 and -3 refused");
    CHECK(th::thread_count_problem(th::allowed_cores() + 1) != nullptr, "more than the cores refused");
    CHECK(th::thread_count_problem(1) == nullptr, "1 accepted");
    {
        th::CallThreads scope(1);
        CHECK(th::num_threads() == 1, "the call cap applies");
    }
}

// A layer's products split over 2 tasks give the bits of one task.
template <typename T>
static void test_linear_split() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> d(-1, 1);
    const uint32_t rows = 37, in = 200, out = 90;
    std::vector<T> x(rows * in), W(out * in), b(out), gy(rows * out);
    for (auto* v : {&x, &W, &b, &gy})
        for (T& e : *v) e = T(d(rng));
    std::vector<T> y1(rows * out), y2(rows * out);
    std::vector<T> s1(bt::linear_forward_scratch(rows, in, out, false, 1)),
        s2(bt::linear_forward_scratch(rows, in, out, false, 2));
    bt::linear_fwd(x.data(), W.data(), b.data(), y1.data(), rows, in, out, s1.data(), static_cast<const T*>(nullptr),
                   1);
    bt::linear_fwd(x.data(), W.data(), b.data(), y2.data(), rows, in, out, s2.data(), static_cast<const T*>(nullptr),
                   2);
    CHECK(y1 == y2, "forward split differs");
    // the same with W^T supplied (as a replay keeps it): tasks that would transpose W read it
    std::vector<T> wt(size_t(in) * out), y3(rows * out);
    for (uint32_t o = 0; o < out; ++o)
        for (uint32_t i = 0; i < in; ++i) wt[size_t(i) * out + o] = W[size_t(o) * in + i];
    std::vector<T> s3(bt::linear_forward_scratch(rows, in, out, true, 2) + 1);
    bt::linear_fwd(x.data(), W.data(), b.data(), y3.data(), rows, in, out, s3.data(), wt.data(), 2);
    CHECK(y1 == y3, "forward split with W^T differs");
    std::vector<T> gx1(rows * in, T(0)), gx2 = gx1, gW1(out * in, T(0)), gW2 = gW1, gb1(out, T(0)), gb2 = gb1;
    {
        th::CallThreads one(1);
        bt::linear_bwd(x.data(), W.data(), gy.data(), gx1.data(), gW1.data(), gb1.data(), rows, in, out);
    }
    bt::linear_bwd(x.data(), W.data(), gy.data(), gx2.data(), gW2.data(), gb2.data(), rows, in, out);
    CHECK(gx1 == gx2 && gW1 == gW2 && gb1 == gb2, "backward split differs");
}

// From kUnitsSplitBytes of weights the fused SGD backward on two tasks splits by output units:
// W takes the very step of one task; gx is the first task's chain through its units (from gx,
// with gx_add) plus the second task's from zero, summed in task order, the same on every run,
// and within rounding of one task's single chain.
template <typename T>
static void test_fused_backward_by_units(uint32_t out) {
    if (th::num_threads() < 2) return;
    const uint32_t rows = 64, in = 1024;
    CHECK(bt::linear_tasks(rows, in, out) == 2 && bt::sgd_backward_by_units<T>(rows, in, out, 2),
          "a %u x %u layer of %zu-byte weights splits by units", out, in, sizeof(T));
    CHECK(!bt::sgd_backward_by_units<T>(rows, in, out / 2, 2), "half of it does not");
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> d(-1, 1);
    std::vector<T> x(size_t(rows) * in), W0(size_t(out) * in), gy(size_t(rows) * out), g0(size_t(rows) * in);
    for (auto* v : {&x, &W0, &gy, &g0})
        for (T& e : *v) e = T(d(rng));
    const T lr = T(0.05), wd = T(0.01);
    std::vector<T> partials(bt::linear_bwd_scratch<T>(rows, in, out, true));
    CHECK(partials.size() == size_t(rows) * in, "one partial gx for the second task");
    const size_t o_mid = th::split(out, 2, 0, bt::kLinearAlign).second;
    for (bool add : {false, true}) {
        auto run = [&](int threads, std::vector<T>& gx, std::vector<T>& W) {
            gx = add ? g0 : std::vector<T>(g0.size(), T(-7));  // add = false: the old gx is never read
            W = W0;
            th::CallThreads scope(threads);
            const bt::SgdSink<T> sgd{W.data(), lr, wd};
            bt::linear_bwd<T>(x.data(), W.data(), gy.data(), gx.data(), nullptr, nullptr, rows, in, out, &sgd, add,
                              true, false, partials.data());
        };
        std::vector<T> gx1, W1, gx2, W2, gx3, W3;
        run(1, gx1, W1);
        run(2, gx2, W2);
        run(2, gx3, W3);
        CHECK(W1 == W2, "add %d: the step is one task's", int(add));
        CHECK(gx2 == gx3, "add %d: two runs differ", int(add));
        // the two partial chains, each as grad_input builds it over its units alone
        std::vector<T> gy0(size_t(rows) * o_mid), gy1(size_t(rows) * (out - o_mid));
        for (uint32_t r = 0; r < rows; ++r) {
            std::copy(gy.begin() + size_t(r) * out, gy.begin() + size_t(r) * out + o_mid, gy0.begin() + r * o_mid);
            std::copy(gy.begin() + size_t(r) * out + o_mid, gy.begin() + size_t(r + 1) * out,
                      gy1.begin() + r * (out - o_mid));
        }
        std::vector<T> p0 = g0, p1(g0.size());
        bt::gemm::grad_input(gy0.data(), W0.data(), p0.data(), rows, in, o_mid, 0, rows, 0, size_t(-1), add);
        bt::gemm::grad_input(gy1.data(), W0.data() + o_mid * in, p1.data(), rows, in, out - o_mid, 0, rows, 0,
                             size_t(-1), false);
        size_t same = 0;
        T worst = 0, scale = 0;
        for (size_t i = 0; i < gx2.size(); ++i) {
            same += gx2[i] == p0[i] + p1[i];
            worst = std::max(worst, T(std::fabs(gx2[i] - gx1[i])));
            scale = std::max(scale, T(std::fabs(gx1[i])));
        }
        CHECK(same == gx2.size(), "add %d: %zu of %zu elements are the sum of the two chains", int(add), same,
              gx2.size());
        const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
        CHECK(double(worst) <= tol * double(scale), "add %d: %g from one task's (scale %g)", int(add), double(worst),
              double(scale));
    }
}

// A lookup whose rows only a linear layer reads (W4's first layer over a chunk), replayed with
// W stepped in the sweep: on two threads the pair runs as one op (range/gather_linear.hpp). The
// loss, W's step and the bias grads have one thread's bits; the table's grads are one partial
// per task summed in order: the same on every run, within rounding of one thread's.
template <typename T>
static void test_lookup_into_a_layer(uint32_t out, uint32_t d = 64, uint32_t block = 16) {
    if (th::num_threads() < 2) return;
    using bt::Op;
    using bt::Spans;
    const uint32_t V = 27, rows = 64, in = block * d, n = rows * block;
    bt::Arena<T> A;
    const uint32_t table = A.new_slots(V * d), w = A.new_slots(size_t(out) * in), b = A.new_slots(out);
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    for (uint32_t i = table; i < b + out; ++i) A.values()[i] = T(u(rng) * (i >= w && i < b ? 0.1 : 1.0));
    std::vector<uint32_t> ids(n), targets(rows);
    for (uint32_t& id : ids) id = uint32_t(rng() % V);
    for (uint32_t& t : targets) t = uint32_t(rng() % out);
    bt::TraceSpec s;
    s.base = A.checkpoint();
    s.num_ids = n;
    const uint32_t x = bt::append_gather(A, Spans{{table, V * d}}, d, ids.data(), n);
    for (uint32_t i = 0; i < n; ++i) s.ids.push_back(bt::IdInput{uint32_t(A.num_records() - 1), n - 1 - i, i, V});
    const Spans bias{{b, out}};
    const uint32_t y = bt::append_linear(A, Spans{{x, n * d}}, Spans{{w, out * in}}, &bias, rows, in, out);
    const uint32_t h = bt::append_map_unary(A, Op::tanh, Spans{{y, rows * out}}, 0.0);
    s.root = bt::append_cross_entropy(A, Spans{{h, rows * out}}, rows, out, targets.data());
    s.wrt = {{table, V * d}, {w, out * in}, {b, out}};
    const auto P = bt::Program<T>::build(A, s);
    A.rewind(s.base);
    CHECK(P.gather_linears.size() == 1, "the lookup and the layer pair up (%zu pairs)", P.gather_linears.size());
    const uint32_t w_slot = bt::decode_operands(P.args.data() + P.recs[P.gather_linears[0].linear].a).v[1].first(0);
    const std::vector<T> start(A.values(), A.values() + b + out);
    for (uint32_t& id : ids) id = uint32_t(rng() % V);  // a new batch for the replays
    struct Run {
        T loss;
        std::vector<T> table_g, b_g, W;
        size_t tasks;
    };
    auto run = [&](int threads) {
        std::copy(start.begin(), start.end(), A.values());
        th::CallThreads scope(threads);
        bt::FusedSgd fused{0.1, 0.01, {w_slot}, {0}};
        bt::Workspace<T> Wk;
        bt::prepare(P, Wk, A.values(), 1);
        Wk.fused_sgd = &fused;
        bt::set_sample<T>(P, Wk, nullptr, ids.data());
        bt::run_forward(P, Wk);
        bt::run_backward(P, Wk, T(1));
        CHECK(fused.applied[0] == 1, "%d threads: W stepped", threads);
        const uint32_t tg = P.wrt[0].first, bg = P.wrt[2].first;
        return Run{Wk.v[P.root], std::vector<T>(Wk.g.begin() + tg, Wk.g.begin() + tg + V * d),
                   std::vector<T>(Wk.g.begin() + bg, Wk.g.begin() + bg + out),
                   std::vector<T>(A.values() + w, A.values() + w + size_t(out) * in), Wk.pair_tasks[0]};
    };
    const Run one = run(1), two = run(2), again = run(2);
    CHECK(one.tasks == 0 && two.tasks == 2, "one thread runs them apart (%zu), two as one op (%zu)", one.tasks,
          two.tasks);
    CHECK(one.loss == two.loss && one.W == two.W && one.b_g == two.b_g, "loss, W's step, bias grads: one thread's");
    CHECK(two.table_g == again.table_g && two.W == again.W, "two runs differ");
    T worst = 0, scale = 0;
    size_t same = 0;
    for (size_t i = 0; i < one.table_g.size(); ++i) {
        worst = std::max(worst, T(std::fabs(two.table_g[i] - one.table_g[i])));
        scale = std::max(scale, T(std::fabs(one.table_g[i])));
        same += two.table_g[i] == one.table_g[i];
    }
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
    CHECK(scale > 0 && double(worst) <= tol * double(scale), "table grads %g from one thread's (scale %g)",
          double(worst), double(scale));
    CHECK(same < one.table_g.size(), "the table's grads are summed from two partials (all %zu equal)", same);
}

// A lookup feeding a layer as one record (range/lookup_linear.hpp), through its per-position
// tables (rows >= 1.5 V), in an eager fused SGD step: on two threads its tasks split forward and
// sweep by blocks of output units. Every result has one thread's bits but the table's gradient
// (and so its step), a sum over the units in one part a task: within rounding of one thread's,
// and the same bits on every two-thread run.
template <typename T>
static void test_lookup_linear_tables(uint32_t out, uint32_t d, uint32_t block) {
    if (th::num_threads() < 2) return;
    using bt::Op;
    using bt::Spans;
    const uint32_t V = 13, rows = 40, in = block * d;
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    std::vector<uint32_t> ids(size_t(rows) * block), targets(rows);
    for (uint32_t& id : ids) id = uint32_t(rng() % V);
    for (uint32_t& t : targets) t = uint32_t(rng() % out);
    std::vector<T> start(size_t(V) * d + size_t(out) * in + out);
    for (T& v : start) v = T(u(rng));
    struct Run {
        T loss;
        std::vector<T> values, grads;
    };
    auto run = [&](int threads, bool inside) {
        th::CallThreads scope(threads);
        bt::Arena<T> A;
        const uint32_t table = A.new_slots(V * d), w = A.new_slots(size_t(out) * in), b = A.new_slots(out);
        std::copy(start.begin(), start.end(), A.values() + table);
        const Spans bias{{b, out}};
        const uint32_t y = bt::append_lookup_linear(A, Spans{{table, V * d}}, Spans{{w, out * in}}, &bias, d,
                                                    ids.data(), rows, in, out, inside);
        const uint32_t h = inside ? y : bt::append_map_unary(A, Op::tanh, Spans{{y, rows * out}}, 0.0);
        const uint32_t root = bt::append_cross_entropy(A, Spans{{h, rows * out}}, rows, out, targets.data());
        const std::vector<bt::Span> params{{table, uint32_t(start.size())}};
        const size_t fused = bt::sgd_fused_backward(A, root, T(1), params, params, 0.1, 0.01);
        CHECK(fused == 1, "%d threads: W fused (%zu)", threads, fused);
        return Run{A.values()[root], std::vector<T>(A.values() + table, A.values() + table + start.size()),
                   std::vector<T>(A.grads() + table, A.grads() + table + start.size())};
    };
    const Run one = run(1, false), two = run(2, false), again = run(2, false);
    for (const int threads : {1, 2}) {
        const Run& apart = threads == 1 ? one : two;
        const Run inside = run(threads, true);
        CHECK(inside.loss == apart.loss && inside.values == apart.values && inside.grads == apart.grads,
              "%d threads: the tanh inside the record is not the tanh record's bits", threads);
    }
    CHECK(one.loss == two.loss, "the loss differs on two threads");
    CHECK(two.values == again.values && two.grads == again.grads, "two runs on two threads differ");
    const size_t nt = size_t(V) * d;
    CHECK(std::equal(one.values.begin() + nt, one.values.end(), two.values.begin() + nt) &&
              std::equal(one.grads.begin() + nt, one.grads.end(), two.grads.begin() + nt),
          "W's step and the bias: not one thread's bits");
    T worst = 0, scale = 0;
    for (size_t i = 0; i < nt; ++i) {
        worst = std::max(worst, T(std::fabs(two.grads[i] - one.grads[i])));
        scale = std::max(scale, T(std::fabs(one.grads[i])));
    }
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
    CHECK(scale > 0 && double(worst) <= tol * double(scale), "table grads %g from one thread's (scale %g)",
          double(worst), double(scale));
    CHECK(!std::equal(one.grads.begin(), one.grads.begin() + nt, two.grads.begin()),
          "the table's grads are summed from parts (all equal)");
}

// Which layers split on two threads: by multiply-adds from a few rows on, by weights below
// gemm::kAxpyRows rows, where a split hands W between the cores every step and pays only for a W
// beyond one core's cache.
static void test_which_layers_split() {
    if (th::num_threads() < 2) return;
    CHECK(bt::linear_tasks(64, 1024, 64) == 2, "a 64-row layer of 64K weights splits");
    CHECK(bt::linear_tasks(4, 1024, 128) == 2, "a 4-row layer of 128K weights splits");
    CHECK(bt::linear_tasks(1, 1024, 128) == 1, "a one-row layer of 128K weights stays on one thread");
    CHECK(bt::linear_tasks(3, 1024, 512) == 1, "a 3-row layer of 512K weights stays on one thread");
    CHECK(bt::linear_tasks(1, 1024, 1024) == 2, "a one-row layer of 1M weights splits");
    CHECK(bt::linear_tasks(64, 24, 4) == 1, "a small layer stays on one thread");
}

// f(a, b) = tanh(a * w + b) * (a - 2), w a parameter: the threaded oracle over 101 samples equals
// the serial loop within rounding, repeats bitwise, and one task is the serial loop exactly.
static void test_threaded_replay() {
    using bt::Op;
    bt::Arena<double> A;
    const uint32_t w = A.leaf(0.7);
    bt::TraceSpec s;
    s.base = A.checkpoint();
    const uint32_t a = A.leaf(0.3), b = A.leaf(-1.1);
    const uint32_t t = A.unary(Op::tanh, A.binary(Op::add, A.binary(Op::mul, a, w), b));
    s.root = A.binary(Op::mul, t, A.unary_imm(Op::add_const, a, -2.0));
    s.inputs = {a, b};
    s.wrt = {{w, 1}};
    const auto P = bt::Program<double>::build(A, s);
    A.rewind(s.base);
    const size_t n = 101;
    std::vector<double> xs(2 * n);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37 * double(i));
    double serial = 0.0;  // the single-thread loop's order of additions
    {
        bt::Workspace<double> W;
        bt::prepare(P, W, A.values());
        for (size_t i = 0; i < n; ++i) {
            bt::set_sample<double>(P, W, &xs[2 * i], nullptr);
            bt::run_forward(P, W);
            bt::run_backward(P, W, 0.5);
        }
        serial = W.g[P.wrt[0].first];
    }
    std::vector<bt::Workspace<double>> ws;  // reused across calls and task counts, as the bindings do
    for (size_t tasks : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(2)}) {
        double first = 0.0;
        for (int rep = 0; rep < 50; ++rep) {
            double g = 0.0;
            double* dst[1] = {&g};
            std::vector<double> values(n);
            bt::Samples in;
            in.n = n;
            in.x = xs.data();
            auto r = bt::replay_accumulate(P, A.values(), dst, in, 0.5, values.data(), tasks, ws);
            CHECK(r.failed.empty() && r.non_finite < 0, "no guards, finite");
            if (rep == 0) first = g;
            CHECK(g == first, "tasks %zu: run %d gives %.17g, first %.17g", tasks, rep, g, first);
        }
        if (tasks == 1) CHECK(first == serial, "one task %.17g vs serial %.17g", first, serial);
        CHECK(std::fabs(first - serial) <= 1e-12 * std::fabs(serial), "tasks %zu: %.17g vs %.17g", tasks, first,
              serial);
    }
}

// SGD's step taken where replay_accumulate adds the tasks' grads (ReduceStep): the parameters get
// the bits of the grads it writes otherwise, each followed by sgd_update, on every task count; the
// layer is wide enough (41,120 weights) for the adding pass to split across the threads.
static void test_replay_steps_where_the_grads_add() {
    using bt::Op;
    using bt::Spans;
    using T = float;
    const uint32_t in = 256, out = 160, n = 7;
    bt::Arena<T> A;
    const uint32_t w = A.new_slots(size_t(out) * in), b = A.new_slots(out);
    std::mt19937 rng(9);
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    for (uint32_t i = w; i < b + out; ++i) A.values()[i] = T(u(rng) * 0.2);
    std::vector<uint32_t> target(1, 3);
    bt::TraceSpec s;
    s.base = A.checkpoint();
    for (uint32_t i = 0; i < in; ++i) s.inputs.push_back(A.leaf(0));
    const Spans bias{{b, out}};
    const uint32_t y = bt::append_linear(A, Spans{{s.inputs[0], in}}, Spans{{w, out * in}}, &bias, 1, in, out);
    const uint32_t h = bt::append_map_unary(A, Op::tanh, Spans{{y, out}}, 0.0);
    s.root = bt::append_cross_entropy(A, Spans{{h, out}}, 1, out, target.data());
    s.wrt = {{w, out * in}, {b, out}};
    const auto P = bt::Program<T>::build(A, s);
    A.rewind(s.base);
    const std::vector<T> start(A.values() + w, A.values() + b + out);
    std::vector<double> xs(size_t(n) * in);
    for (double& x : xs) x = u(rng);
    bt::Samples batch;
    batch.n = n;
    batch.x = xs.data();
    const T lr = T(0.3), wd = T(0.01);
    std::vector<bt::Workspace<T>> ws;
    for (size_t tasks : {size_t(1), size_t(2), size_t(3)}) {
        std::copy(start.begin(), start.end(), A.values() + w);
        std::vector<T> g(start.size(), T(-7));  // taken as zero (zero = true), overwritten
        T* grads[2] = {g.data(), g.data() + size_t(out) * in};
        auto r = bt::replay_accumulate(P, A.values(), grads, batch, T(1) / T(n), nullptr, tasks, ws, true);
        CHECK(r.failed.empty() && r.non_finite < 0 && !r.stepped, "tasks %zu: grads written", tasks);
        std::vector<T> expect(start.size());
        for (size_t j = 0; j < start.size(); ++j) expect[j] = bt::sgd_update(start[j], g[j], lr, wd);
        std::fill(g.begin(), g.end(), T(-7));
        T* values[2] = {A.values() + w, A.values() + b};
        const bt::ReduceStep<T> step{values, lr, wd};
        r = bt::replay_accumulate(P, A.values(), grads, batch, T(1) / T(n), nullptr, tasks, ws, true, &step);
        CHECK(r.stepped, "tasks %zu: stepped", tasks);
        CHECK(std::equal(expect.begin(), expect.end(), A.values() + w), "tasks %zu: the step's bits", tasks);
        CHECK(std::all_of(g.begin(), g.end(), [](T v) { return v == T(-7); }), "tasks %zu: a step writes no grads",
              tasks);
    }
}

// A child made by fork() while the parent's pool has workers gets a pool of its own that works.
static void test_fork_child_has_a_working_pool() {
    th::Pool::instance().run(4, 2, [](size_t) {});  // the parent's workers exist
    const pid_t pid = fork();
    if (pid == 0) {
        std::atomic<int> ran{0};
        th::Pool::instance().run(16, 2, [&](size_t) { ran.fetch_add(1); });
        _exit(ran.load() == 16 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's pool failed (status %d)", status);
}

int main() {
    th::set_num_threads(std::min(2, th::allowed_cores()));
    test_every_task_once();
    test_task_zero_is_the_callers();
    test_exceptions_reach_the_caller();
    test_thread_counts();
    test_linear_split<float>();
    test_linear_split<double>();
    test_which_layers_split();
    test_fused_backward_by_units<float>(400);
    test_fused_backward_by_units<double>(200);
    test_lookup_into_a_layer<float>(64);    // the forward's tiles read x by rows
    test_lookup_into_a_layer<double>(256);  // the forward reads x transposed
    // rows of 7 ids' values (x 35 wide, its last panel cut): lookups across the panels' edges
    test_lookup_into_a_layer<float>(64, 7, 5);
    test_lookup_into_a_layer<double>(256, 7, 5);
    test_lookup_linear_tables<float>(96, 64, 8);
    test_lookup_linear_tables<double>(40, 23, 8);  // table columns and units cut within a panel
    test_lookup_linear_tables<float>(272, 16, 8);  // from 256 units: more tasks than threads
    test_threaded_replay();
    test_replay_steps_where_the_grads_add();
    test_fork_child_has_a_working_pool();
    std::printf("test_threads: %d failures\n", failures);
    return failures ? 1 : 0;
}
