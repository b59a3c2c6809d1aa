// Optimizer steps and parameter initialisers over Vectors: the loops are in csrc/optim.hpp and
// csrc/rng.hpp; here only state bookkeeping and checks.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../csrc/threads.hpp"
#include "vector.hpp"

namespace btpy {

struct OptimState {
    bt::DType dtype;
    std::vector<double> buf;  // nbuf buffers of the parameters' size, one after another
    uint32_t nbuf;
    uint64_t steps = 0;
};

static void check_state(const VectorBox& p, const OptimState& st, uint32_t nbuf) {
    p.check();
    if (st.dtype != p.dtype() || st.buf.size() != p.size * nbuf || st.nbuf != nbuf)
        throw nb::value_error("optimizer state does not match the parameter vector");
}

// Runs step(first, count) over [0, n) in blocks across the thread pool when n is large: each
// element's update reads and writes only that element, so blocks give the same bits as one loop.
template <class F>
static void in_blocks(size_t n, F&& step) {
    const size_t tasks = bt::threads::tasks_for(double(n), double(1 << 16), n);
    if (tasks <= 1) return step(size_t(0), n);
    bt::threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [b, e] = bt::threads::split(n, tasks, t, 64);
        step(b, e - b);
    });
}

static void sgd_step(const VectorBox& p, OptimState& st, double lr, double momentum, double wd, double dampening,
                     bool nesterov) {
    check_state(p, st, momentum != 0.0 ? 1 : 0);
    const bt::SgdConfig c{lr, momentum, wd, dampening, nesterov};
    const bool first = st.steps == 0;
    size_t off = 0;
    dispatch(p.arena, [&](auto& A) {
        for (const Span& s : p.spans) {
            double* m = st.buf.data() + off;
            in_blocks(s.second, [&](size_t b, size_t k) {
                bt::sgd_step(A.values() + s.first + b, A.grads() + s.first + b, momentum != 0.0 ? m + b : m, k, c,
                             first);
            });
            off += momentum != 0.0 ? s.second : 0;
        }
    });
    ++st.steps;
}

static void adam_step(const VectorBox& p, OptimState& st, double lr, double b1, double b2, double eps, double wd,
                      bool decoupled) {
    check_state(p, st, 2);
    const bt::AdamConfig c{lr, b1, b2, eps, wd, decoupled};
    ++st.steps;
    size_t off = 0;
    dispatch(p.arena, [&](auto& A) {
        for (const Span& s : p.spans) {
            double* m = st.buf.data() + off;
            double* v = st.buf.data() + p.size + off;
            in_blocks(s.second, [&](size_t b, size_t k) {
                bt::adam_step(A.values() + s.first + b, A.grads() + s.first + b, m + b, v + b, k, c, st.steps);
            });
            off += s.second;
        }
    });
}

static void init_fill(const VectorBox& v, const std::string& kind, double a, double b, uint64_t seed) {
    if (kind != "uniform" && kind != "normal" && kind != "constant")
        throw nb::value_error("init kind must be 'uniform', 'normal' or 'constant'");
    v.check();
    bt::Rng rng(seed);
    each_slot_ptr(v, false, [&](auto* p) {
        const double x = kind == "uniform" ? a + (b - a) * rng.uniform() : kind == "normal" ? rng.normal(a, b) : a;
        *p = static_cast<std::remove_reference_t<decltype(*p)>>(x);
    });
}

void init_optim(nb::module_& m) {
    m.def("init_", &init_fill, nb::arg("vector"), nb::arg("kind"), nb::arg("a"), nb::arg("b"), nb::arg("seed"),
          "Fills values in place: uniform on [a, b), normal(mean=a, std=b) or the constant a.");
    nb::class_<OptimState>(m, "OptimState", "Buffers of an optimizer (float64), kept beside its parameter vector.")
        .def(
            "__init__",
            [](OptimState* s, const VectorBox& p, uint32_t nbuf) {
                new (s) OptimState{p.dtype(), std::vector<double>(p.size * nbuf, 0.0), nbuf, 0};
            },
            nb::arg("params"), nb::arg("buffers"))
        .def_ro("steps", &OptimState::steps)
        .def("state", [](const OptimState& s) { return s.buf; })
        .def(
            "load_state",
            [](OptimState& s, std::vector<double> buf, uint64_t steps) {
                if (buf.size() != s.buf.size()) throw nb::value_error("optimizer state size mismatch");
                s.buf = std::move(buf);
                s.steps = steps;
            },
            nb::arg("buffers"), nb::arg("steps"));
    m.def("sgd_step", &sgd_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("momentum"),
          nb::arg("weight_decay"), nb::arg("dampening"), nb::arg("nesterov"));
    m.def("adam_step", &adam_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("beta1"),
          nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("decoupled"));
}

}  // namespace btpy
