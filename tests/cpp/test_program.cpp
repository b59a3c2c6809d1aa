// Replay engine tests without Python (built like test_core.cpp; run under scripts/sanitize.sh):
// a program traced from the arena replays bitwise what eager appends compute, with new inputs,
// with parameters below the trace, with ids rewritten, and with wrt pruning; guards report.
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "../../csrc/burtorch.hpp"
#include "check.hpp"

using bt::Arena;
using bt::Op;

// f(a, b) = tanh(a * w + b) * (a - 2) with a parameter w below the trace; eager value and grads.
static uint32_t build(Arena<double>& A, uint32_t a, uint32_t b, uint32_t w) {
    uint32_t t = A.unary(Op::tanh, A.binary(Op::add, A.binary(Op::mul, a, w), b));
    return A.binary(Op::mul, t, A.unary_imm(Op::add_const, a, -2.0));
}

static void test_scalar_replay_matches_eager() {
    Arena<double> A;
    const uint32_t w = A.leaf(0.7);
    bt::TraceSpec s;
    s.base = A.checkpoint();
    const uint32_t a = A.leaf(0.3), b = A.leaf(-1.1);
    s.root = build(A, a, b, w);
    s.inputs = {a, b};
    s.wrt = {{a, 1}, {b, 1}, {w, 1}};
    auto P = bt::Program<double>::build(A, s);
    A.rewind(s.base);
    CHECK(P.recs.size() == 5 && P.n_ext == 1, "records %zu, external %u", P.recs.size(), P.n_ext);
    bt::Workspace<double> W;
    bt::prepare(P, W, A.values());
    const double xs[3][2] = {{0.3, -1.1}, {2.5, 0.4}, {-0.8, 1.9}};
    for (auto& x : xs) {
        bt::set_sample<double>(P, W, x, nullptr);
        CHECK(bt::run_forward(P, W) == -1, "no guards, none fails");
        bt::zero_external_grads(P, W);
        bt::run_backward(P, W, 1.0);
        double g[3];
        bt::read_wrt_grads(P, W, g, false);
        // eager
        auto cp = A.checkpoint();
        const uint32_t ea = A.leaf(x[0]), eb = A.leaf(x[1]);
        A.grads()[w] = 0.0;
        A.mark_grads_written();
        const uint32_t y = build(A, ea, eb, w);
        A.backward(y, 1.0, 0);
        CHECK(W.v[P.root] == A.values()[y], "value %g vs %g", W.v[P.root], A.values()[y]);
        CHECK(g[0] == A.grads()[ea] && g[1] == A.grads()[eb] && g[2] == A.grads()[w], "grads differ at %g", x[0]);
        A.rewind(cp);
    }
}

static void test_pruning_and_guards() {
    Arena<double> A;
    bt::TraceSpec s;
    s.base = A.checkpoint();
    const uint32_t a = A.leaf(1.0), b = A.leaf(2.0);
    const uint32_t dead = A.unary(Op::exp, a);
    (void)dead;
    const uint32_t pa = A.unary(Op::sin, a), pb = A.unary(Op::cos, b);
    s.root = A.binary(Op::add, pa, pb);
    s.inputs = {a, b};
    s.wrt = {{a, 1}};
    s.guards.push_back(bt::Guard{bt::GuardOp::gt, true, true, a, 0, 0.0, "here"});
    auto P = bt::Program<double>::build(A, s);
    CHECK(P.traced_records == 4 && P.recs.size() == 3, "dead exp dropped: %zu records", P.recs.size());
    CHECK(P.sweep.size() == 2, "the sweep skips cos(b): %zu", P.sweep.size());
    bt::Workspace<double> W;
    bt::prepare(P, W, A.values());
    const double ok[2] = {0.5, 1.0}, bad[2] = {-0.5, 1.0};
    bt::set_sample<double>(P, W, ok, nullptr);
    CHECK(bt::run_forward(P, W) == -1, "a > 0 holds");
    bt::run_backward(P, W, 1.0);
    double g;
    bt::read_wrt_grads(P, W, &g, false);
    CHECK(g == std::cos(0.5), "d/da sin(a) = cos(a): %g", g);
    bt::set_sample<double>(P, W, bad, nullptr);
    CHECK(bt::run_forward(P, W) == 0, "a > 0 fails for a = -0.5");
}

static void test_gather_ids_rewritten() {
    Arena<double> A;
    const uint32_t table = A.new_slots(6);  // 3 x 2
    for (uint32_t i = 0; i < 6; ++i) A.values()[table + i] = 0.5 * i - 1.0;
    bt::TraceSpec s;
    s.base = A.checkpoint();
    s.num_ids = 2;
    const uint32_t ids[2] = {2, 0};
    const uint32_t rows = bt::append_gather(A, bt::Spans{{table, 6}}, 2, ids, 2);
    s.ids.push_back(bt::IdInput{uint32_t(A.num_records() - 1), 1, 0, 3});
    s.ids.push_back(bt::IdInput{uint32_t(A.num_records() - 1), 0, 1, 3});
    const uint32_t t[2] = {1, 0};
    s.root = bt::append_cross_entropy(A, bt::Spans{{rows, 4}}, 2, 2, t);
    s.wrt = {{table, 6}};
    auto P = bt::Program<double>::build(A, s);
    A.rewind(s.base);
    bt::Workspace<double> W;
    bt::prepare(P, W, A.values());
    const uint32_t new_ids[2] = {1, 1};
    bt::set_sample<double>(P, W, nullptr, new_ids);
    bt::run_forward(P, W);
    bt::run_backward(P, W, 1.0);
    double g[6];
    bt::read_wrt_grads(P, W, g, false);
    // eager with the new ids
    const uint32_t er = bt::append_gather(A, bt::Spans{{table, 6}}, 2, new_ids, 2);
    const uint32_t ey = bt::append_cross_entropy(A, bt::Spans{{er, 4}}, 2, 2, t);
    A.backward(ey, 1.0, 0);
    CHECK(W.v[P.root] == A.values()[ey], "loss %g vs %g", W.v[P.root], A.values()[ey]);
    for (int i = 0; i < 6; ++i)
        CHECK(g[i] == A.grads()[table + i], "table grad %d: %g vs %g", i, g[i], A.grads()[table + i]);
    CHECK(g[0] == 0.0 && g[4] == 0.0, "rows 0 and 2 not looked up");
}

// replay() over many samples: rows of per-sample grads equal eager sweeps, a workspace reused by
// a second call (and by a partial program's narrower zeroing) gives the same numbers.
static void test_replay_rows_and_partial_reuse() {
    Arena<double> A;
    const uint32_t w = A.leaf(0.7);
    bt::TraceSpec s;
    s.base = A.checkpoint();
    const uint32_t a = A.leaf(0.3), b = A.leaf(-1.1);
    s.root = build(A, a, b, w);
    s.inputs = {a, b};
    s.wrt = {{a, 1}, {b, 1}, {w, 1}};
    bt::TraceSpec only_w = s;
    only_w.wrt = {{w, 1}};
    auto P = bt::Program<double>::build(A, s);
    auto Pw = bt::Program<double>::build(A, only_w);
    A.rewind(s.base);
    const double xs[3][2] = {{0.3, -1.1}, {2.5, 0.4}, {-0.8, 1.9}};
    bt::Samples in;
    in.n = 3;
    in.x = &xs[0][0];
    bt::Workspace<double> W, Ww;
    for (int call = 0; call < 2; ++call) {
        double rows[3][3], values[3], rows_w[3];
        bt::prepare(P, W, A.values());
        auto res = bt::replay(P, W, in, bt::Reduce::rows, 1.0, values, &rows[0][0], nullptr, false);
        bt::prepare(Pw, Ww, A.values());
        bt::replay(Pw, Ww, in, bt::Reduce::rows, 1.0, nullptr, rows_w, nullptr, false);
        CHECK(res.failed.empty() && res.non_finite == -1, "nothing fails");
        for (int i = 0; i < 3; ++i) {
            auto cp = A.checkpoint();
            const uint32_t ea = A.leaf(xs[i][0]), eb = A.leaf(xs[i][1]);
            A.grads()[w] = 0.0;
            A.mark_grads_written();
            const uint32_t y = build(A, ea, eb, w);
            A.backward(y, 1.0, 0);
            CHECK(values[i] == A.values()[y], "value of sample %d", i);
            CHECK(rows[i][0] == A.grads()[ea] && rows[i][1] == A.grads()[eb] && rows[i][2] == A.grads()[w],
                  "grads of sample %d", i);
            CHECK(rows_w[i] == A.grads()[w], "partial grad of sample %d: %g vs %g", i, rows_w[i], A.grads()[w]);
            A.rewind(cp);
        }
        CHECK(Pw.sweep_grads.size() <= P.sweep_grads.size(), "the partial program zeroes no more");
    }
}

// The trace and the replay driver as a C++ user drives them (csrc/trace.hpp, replay_driver.hpp):
// a trace with a guard, its program accumulating the grads of w over samples into the arena as
// eager sweeps from zero would, and a sample whose guard fails reported, nothing added for it.
static void test_trace_and_replay_driver() {
    Arena<double> A;
    const uint32_t w = A.leaf(0.7);
    bt::begin_trace(&A, 0);
    bool refused = false;
    try {
        bt::begin_trace(&A, 0);
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    CHECK(refused, "a trace inside a trace is refused");
    CHECK(bt::trace_of(&A) != nullptr, "the arena is being traced");
    const uint32_t a = A.leaf(0.3), b = A.leaf(-1.1);
    const uint32_t y = build(A, a, b, w);
    bt::trace_of(&A)->guard(bt::GuardOp::gt, true, a, nullptr, 0.0, "test");  // a > 0 held
    std::unique_ptr<bt::Trace> t = bt::end_trace();
    CHECK(t && !bt::current_trace() && !t->rewound(), "the trace ends");
    t->set_root(y);
    t->add_input(a);
    t->add_input(b);
    t->add_wrt(bt::Span{w, 1});
    bt::Replayer<double> R{bt::Program<double>::build(A, t->spec()), {}, t->spec().wrt, {}};
    A.rewind(t->spec().base);
    const double xs[3][2] = {{0.3, -1.1}, {-2.5, 0.4}, {0.8, 1.9}};  // sample 1 fails the guard
    bt::Samples in;
    in.n = 3;
    in.x = &xs[0][0];
    double values[3] = {0, 0, 0};
    const std::vector<size_t> failed = bt::replay_samples(R, A, in, bt::Reduce::accumulate, true, true, 1.0, values,
                                                          static_cast<double*>(nullptr), nullptr);
    CHECK(failed.size() == 1 && failed[0] == 1, "sample 1's guard fails");
    const double replayed = A.grads()[w];
    double eager = 0.0;
    for (int k : {0, 2}) {  // the eager oracle's additions, in its order
        auto cp = A.checkpoint();
        const uint32_t ea = A.leaf(xs[k][0]), eb = A.leaf(xs[k][1]);
        A.grads()[w] = eager;
        A.mark_grads_written();
        const uint32_t ey = build(A, ea, eb, w);
        A.backward(ey, 1.0, 0);
        CHECK(values[k] == A.values()[ey], "sample %d: value %g vs %g", k, values[k], A.values()[ey]);
        eager = A.grads()[w];
        A.rewind(cp);
    }
    CHECK(replayed == eager, "accumulated grad %g vs eager %g", replayed, eager);
    CHECK(bt::ids_of_shape({0, 3, 0}) == 5, "a shape's ids");
    bool out_of_range = false;
    try {
        bt::check_sample_id(7, 7, 0, 0);
    } catch (const std::out_of_range&) {
        out_of_range = true;
    }
    CHECK(out_of_range, "an id at its bound is out of range");
}

int main() {
    test_scalar_replay_matches_eager();
    test_pruning_and_guards();
    test_gather_ids_rewritten();
    test_replay_rows_and_partial_reuse();
    test_trace_and_replay_driver();
    if (failures) {
        std::fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    std::printf("test_program: all passed\n");
    return 0;
}
