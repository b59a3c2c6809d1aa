// Optimizer steps and parameter initialisers over Vectors: the loops are in csrc/optim.hpp and
// csrc/rng.hpp; here only state bookkeeping and checks.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "../csrc/fused_sgd.hpp"
#include "../csrc/threads.hpp"
#include "optim_state.hpp"
#include "vector.hpp"

namespace btpy {

static void check_state(const VectorBox& p, const OptimState& st, uint32_t nbuf) {
    p.check();
    // every step writes the parameters: inside a traced function it would run once, not per replay
    if (!refuse_write_while_tracing(p.arena, "an optimizer step")) throw nb::python_error();
    if (st.dtype != p.dtype() || st.buf.size() != p.size * nbuf || st.nbuf != nbuf ||
        st.master.size() != (OptimState::has_master(p.dtype()) ? p.size : 0))
        throw nb::value_error("optimizer state does not match the parameter vector");
}

using bt::threads::in_blocks;

// Whether an optimizer step split across threads writes the new weights with streaming stores
// (csrc/optim.hpp's write_blocks; the default); off only for burtorch_bench.threads, which times
// both side by side.
static bool g_stream_split_steps = true;

// How a step splits its spans. When the work since the last step also ran on several threads (a
// threaded oracle), the weights are cached on more than one core: a span splits from
// kBlockElements on, and the split writes its new values with streaming stores. Otherwise they
// sit in this core's cache, where the next oracle reads them back: a split would hand half of
// them to another core and back, so it splits only where they no longer fit one core's cache,
// with ordinary stores.
// Read once per step; the mark the step's own split leaves is cleared after it.
static constexpr double kUnsharedSplitElements = double(1 << 20);
struct StepSplit {
    bool shared = bt::threads::shared_work_since();
    double threshold() const { return shared ? bt::threads::kBlockElements : kUnsharedSplitElements; }
    bool stream(size_t n) const {
        return g_stream_split_steps && shared && bt::threads::block_tasks(n, threshold()) > 1;
    }
    ~StepSplit() { (void)bt::threads::shared_work_since(); }
};

// bfloat16 and float16 parameters step on a float32 master copy (OptimState::master), by the same
// double arithmetic as float32 parameters, and the arena gets each new value rounded to nearest:
// a step smaller than half a unit in the last place (2^-9 of the weight in bfloat16, where SGD's
// steps mostly are) would otherwise round back to the old weight and be lost. A weight whose arena
// value is no longer its master rounded was written by someone else (a load, an init) and
// restarts the master from it. step(w, g, offset, n) is the double step over one span; it runs on
// one thread (these models are small).
template <typename T, typename Step>
static void master_step(bt::Arena<T>& A, const VectorBox& p, OptimState& st, Step&& step) {
    std::vector<double> w, g;
    size_t off = 0;
    for (const Span& s : p.spans) {
        T* wa = A.values() + s.first;
        const T* ga = A.grads() + s.first;
        float* mw = st.master.data() + off;
        w.resize(s.second);
        g.resize(s.second);
        for (size_t i = 0; i < s.second; ++i) {
            if (T(mw[i]).bits != wa[i].bits) mw[i] = float(wa[i]);
            w[i] = mw[i];
            g[i] = float(ga[i]);
        }
        step(w.data(), g.data(), off, size_t(s.second));
        for (size_t i = 0; i < s.second; ++i) {
            mw[i] = static_cast<float>(w[i]);
            wa[i] = T(mw[i]);
        }
        off += s.second;
    }
}

static void sgd_step(const VectorBox& p, OptimState& st, double lr, double momentum, double wd, double dampening,
                     bool nesterov) {
    check_state(p, st, momentum != 0.0 ? 1 : 0);
    const bt::SgdConfig c{lr, momentum, wd, dampening, nesterov};
    const bool first = st.steps == 0;
    const StepSplit how;
    size_t off = 0;
    dispatch(p.arena, [&](auto& A) {
        using T = typename std::remove_reference_t<decltype(A)>::value_type;
        if constexpr (bt::is_half_v<T>) {
            return master_step(A, p, st, [&](double* w, const double* g, size_t o, size_t n) {
                bt::sgd_step(w, g, momentum != 0.0 ? st.buf.data() + o : st.buf.data(), n, c, first);
            });
        } else {
            for (const Span& s : p.spans) {
                double* m = st.buf.data() + off;
                const bool stream = how.stream(s.second);
                in_blocks(
                    s.second,
                    [&](size_t b, size_t k) {
                        bt::sgd_step(A.values() + s.first + b, A.grads() + s.first + b, momentum != 0.0 ? m + b : m, k,
                                     c, first, stream);
                    },
                    how.threshold());
                off += momentum != 0.0 ? s.second : 0;
            }
        }
    });
    ++st.steps;
}

// One plain SGD step from the graph of the mean loss `loss` (seed: d mean / d loss), the linear
// weights that only one record reads updated inside the sweep (csrc/fused_sgd.hpp); `zero`: the
// gradients zeroed first (the model's parameters). Returns how many weights were fused.
static size_t sgd_fused_backward(nb::handle loss, const VectorBox& p, OptimState& st, double seed, double lr, double wd,
                                 bool fuse, const VectorBox& zero) {
    check_state(p, st, 0);
    zero.check();
    if (zero.arena != p.arena) throw nb::value_error("the vector to zero and the parameters live in different arenas");
    if (!is_value(loss.ptr())) throw nb::type_error("the loss must be a scalar Value");
    PyValue* v = as_pyvalue(loss.ptr());
    compact_at_safe_point(v);  // as backward(): a sweep's start is a safe point
    if (!check_alive(v)) throw nb::python_error();
    if (v->arena != p.arena) throw nb::value_error("the loss and the parameters live in different arenas");
    if (!refuse_while_tracing(v->arena, "fused_step()")) throw nb::python_error();
    if (!std::isfinite(seed)) throw nb::value_error("the seed must be finite");
    size_t fused = 0;
    {
        // As backward(): a large graph's sweep runs without the GIL.
        std::optional<nb::gil_scoped_release> unlocked;
        if (v->arena->num_slots() >= (size_t(1) << 16)) unlocked.emplace();
        dispatch_wide(p.arena, "the fused SGD step", [&](auto& A) {
            using T = typename std::remove_reference_t<decltype(A)>::value_type;
            fused = bt::sgd_fused_backward(A, v->idx, static_cast<T>(seed), p.spans, zero.spans, lr, wd, fuse);
        });
    }
    ++st.steps;
    return fused;
}

// The rest of SGD.fused_step(compile=True) after the replay (Program._fused_sgd_chunk): every
// parameter but the fused weights steps on its gradient, and a fused weight the sweep did not
// reach steps on a zero gradient. weights: the fused weights' spans, each inside `p`.
static void sgd_step_around_fused(const VectorBox& p, OptimState& st, double lr, double wd,
                                  const std::vector<std::pair<uint32_t, uint32_t>>& weights,
                                  const std::vector<bool>& applied) {
    check_state(p, st, 0);
    if (!std::isfinite(lr) || !std::isfinite(wd)) throw nb::value_error("lr and weight_decay must be finite");
    if (applied.size() != weights.size()) throw nb::value_error("one applied flag per weight");
    std::vector<Span> w;
    for (const auto& [first, len] : weights) {
        bool inside = false;
        for (const Span& s : p.spans) inside |= first >= s.first && size_t(first) + len <= size_t(s.first) + s.second;
        if (!inside || len == 0) throw nb::value_error("a fused weight must lie inside the parameters");
        w.emplace_back(first, len);
    }
    std::vector<size_t> order(w.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w[a].first < w[b].first; });
    std::vector<Span> sorted;
    std::vector<uint8_t> done;
    for (size_t i : order) {
        if (!sorted.empty() && w[i].first < sorted.back().first + sorted.back().second)
            throw nb::value_error("fused weights must not overlap");
        sorted.push_back(w[i]);
        done.push_back(applied[i] ? 1 : 0);
    }
    dispatch_wide(p.arena, "the fused SGD step", [&](auto& A) {
        bt::sgd_step_around_fused(A, bt::subtract_spans(p.spans, sorted), sorted, done, lr, wd);
    });
    ++st.steps;
}

static void adam_step(const VectorBox& p, OptimState& st, double lr, double b1, double b2, double eps, double wd,
                      bool decoupled) {
    check_state(p, st, 2);
    const bt::AdamConfig c{lr, b1, b2, eps, wd, decoupled};
    ++st.steps;
    const StepSplit how;
    size_t off = 0;
    dispatch(p.arena, [&](auto& A) {
        using T = typename std::remove_reference_t<decltype(A)>::value_type;
        if constexpr (bt::is_half_v<T>) {
            return master_step(A, p, st, [&](double* w, const double* g, size_t o, size_t n) {
                bt::adam_step(w, g, st.buf.data() + o, st.buf.data() + p.size + o, n, c, st.steps);
            });
        } else {
            for (const Span& s : p.spans) {
                double* m = st.buf.data() + off;
                double* v = st.buf.data() + p.size + off;
                const bool stream = how.stream(s.second);
                in_blocks(
                    s.second,
                    [&](size_t b, size_t k) {
                        bt::adam_step(A.values() + s.first + b, A.grads() + s.first + b, m + b, v + b, k, c, st.steps,
                                      stream);
                    },
                    how.threshold());
                off += s.second;
            }
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
                new (s) OptimState{p.dtype(), std::vector<double>(p.size * nbuf, 0.0), nbuf, 0, {}};
                // zeros: the first step starts each master from its weight (master_step)
                if (OptimState::has_master(p.dtype())) s->master.assign(p.size, 0.0f);
            },
            nb::arg("params"), nb::arg("buffers"))
        .def_ro("steps", &OptimState::steps)
        .def("state",
             [](const OptimState& s) {
                 std::vector<double> out = s.buf;
                 out.insert(out.end(), s.master.begin(), s.master.end());
                 return out;
             })
        .def(
            "load_state",
            [](OptimState& s, std::vector<double> buf, uint64_t steps) {
                if (buf.size() != s.buf.size() + s.master.size())
                    throw nb::value_error("optimizer state size mismatch");
                for (size_t i = 0; i < s.master.size(); ++i) {
                    const double x = buf[s.buf.size() + i];
                    if (static_cast<double>(static_cast<float>(x)) != x && std::isfinite(x))
                        throw nb::value_error("optimizer state: a master weight is not a float32 number");
                }
                for (size_t i = 0; i < s.master.size(); ++i) s.master[i] = static_cast<float>(buf[s.buf.size() + i]);
                buf.resize(s.buf.size());
                s.buf = std::move(buf);
                s.steps = steps;
            },
            nb::arg("buffers"), nb::arg("steps"));
    m.def(
        "_set_split_step_streaming",
        [](bool on) {
            const bool old = g_stream_split_steps;
            g_stream_split_steps = on;
            return old;
        },
        nb::arg("on"));
    m.def("sgd_step", &sgd_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("momentum"),
          nb::arg("weight_decay"), nb::arg("dampening"), nb::arg("nesterov"));
    m.def("sgd_step_around_fused", &sgd_step_around_fused, nb::arg("params"), nb::arg("state"), nb::arg("lr"),
          nb::arg("weight_decay"), nb::arg("weights"), nb::arg("applied"),
          "The rest of a compiled fused SGD step: every parameter but the fused weights steps on its gradient; "
          "a fused weight its sweep did not reach steps on a zero gradient.");
    m.def("sgd_fused_backward", &sgd_fused_backward, nb::arg("loss"), nb::arg("params"), nb::arg("state"),
          nb::arg("seed"), nb::arg("lr"), nb::arg("weight_decay"), nb::arg("fuse"), nb::arg("zero"),
          nb::sig("def sgd_fused_backward(loss: Value, params: Vector, state: OptimState, seed: float, lr: float, "
                  "weight_decay: float, fuse: bool, zero: Vector) -> int"));
    m.def("adam_step", &adam_step, nb::arg("params"), nb::arg("state"), nb::arg("lr"), nb::arg("beta1"),
          nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("decoupled"));
}

}  // namespace btpy
