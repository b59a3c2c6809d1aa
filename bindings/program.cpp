// The Program object and its native replays over many samples (per-sample gradients, their sum,
// parameter-grad accumulation, chunked SGD steps): arguments converted here, the replays driven
// by csrc/replay_driver.hpp.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "optim_state.hpp"
#include "program.hpp"
#include "vector.hpp"

namespace btpy {

// The GIL is released while a replay runs on the thread pool.
using Unlock = nb::gil_scoped_release;

// Float inputs: X (n x k doubles) checked finite. Points into the caller's buffer when it holds
// float64, else into `copy`.
template <typename P>
static const double* float_inputs(const P& prog, const Buffer* X, size_t n, std::vector<double>& copy) {
    const size_t k = prog.inputs.size();
    if (!k) return nullptr;
    const double* xs;
    if (X->kind() == Buffer::Kind::f64) {
        xs = static_cast<const double*>(X->data());
    } else {
        copy.resize(n * k);
        for (size_t i = 0; i < n * k; ++i)
            copy[i] = X->kind() == Buffer::Kind::f32 ? double(static_cast<const float*>(X->data())[i])
                                                     : double(X->integer(i));
        xs = copy.data();
    }
    // one branch-free pass that vectorizes (an int reduction); the sample and input are looked
    // for only on failure
    int non_finite = 0;
    const size_t total = n * k;
#pragma omp simd reduction(| : non_finite)
    for (size_t i = 0; i < total; ++i) non_finite |= !(std::fabs(xs[i]) <= std::numeric_limits<double>::max());
    if (!non_finite) return xs;
    for (size_t s = 0; s < n; ++s)
        for (size_t j = 0; j < k; ++j)
            if (!std::isfinite(xs[s * k + j]))
                throw nb::value_error(("sample " + std::to_string(s) + ", input " + std::to_string(j) +
                                       " is not finite; a replay would propagate it silently into every output")
                                          .c_str());
    return xs;
}

// Where the gradients go: out is (n x num_wrt) of the program's dtype for rows, (num_wrt) float64
// for sum, unused otherwise.
template <typename T>
struct GradOutputs {
    Output<T> rows;
    Output<double> sum;
    GradOutputs(bt::Reduce reduce, nb::handle out, size_t n, size_t num_wrt)
        : rows(reduce == bt::Reduce::rows ? out : nb::none(), n * num_wrt, "out"),
          sum(reduce == bt::Reduce::sum ? out : nb::none(), num_wrt, "out") {
        if ((reduce == bt::Reduce::rows || reduce == bt::Reduce::sum) && out.is_none())
            throw nb::value_error("out is required for modes 'rows' and 'sum'");
    }
};

static nb::list to_list(const std::vector<size_t>& v, size_t offset) {
    nb::list l;
    for (size_t s : v) l.append(s + offset);
    return l;
}

// _replay(X, ids, mode, seed, values, out, zero): X (n x k float inputs) and ids (n x num_ids)
// as buffers (or None when the program takes none).
template <typename T>
static nb::list replay_rows_typed(ProgramBox& box, bt::Replayer<T>& R, nb::handle X_h, nb::handle ids_h,
                                  const std::string& mode, double seed, nb::handle values_h, nb::handle out_h,
                                  bool zero) {
    const bt::Program<T>& P = R.prog;
    bool to_arena = false;
    const bt::Reduce reduce = bt::parse_reduce(mode, &to_arena);
    std::unique_ptr<Buffer> X, I;
    if (!X_h.is_none()) X = std::make_unique<Buffer>(X_h, false, "X");
    if (!ids_h.is_none()) I = std::make_unique<Buffer>(ids_h, false, "ids");
    const size_t k = P.inputs.size(), nid = P.num_ids;
    if (X && X->ndim() != 2) throw nb::value_error("X must be 2-D (samples x float inputs)");
    if (I && I->ndim() != 2) throw nb::value_error("ids must be 2-D (samples x ids)");
    if (I && !I->is_integer()) throw nb::type_error("ids must hold integers");
    const size_t kx = X ? X->cols() : 0, ki = I ? I->cols() : 0;
    if (kx != k)
        throw nb::value_error(
            ("the program takes " + std::to_string(k) + " float inputs per sample, got " + std::to_string(kx)).c_str());
    if (ki != nid)
        throw nb::value_error(
            ("the program takes " + std::to_string(nid) + " ids per sample, got " + std::to_string(ki)).c_str());
    const size_t nx = X ? X->rows() : 0, ni = I ? I->rows() : 0;
    if (X && I && k && nid && nx != ni)
        throw nb::value_error("the float inputs and the ids have different numbers of samples");
    const size_t n = (X && (k || !I)) ? nx : ni;
    std::vector<double> xcopy;
    bt::Samples in;
    in.n = n;
    in.x = float_inputs(P, X.get(), n, xcopy);
    std::vector<uint32_t> ids(n * nid);
    // a program without ids (the (n, 0) array .map passes) skips the loop: over many samples its
    // empty iterations alone cost a noticeable part of a small program's lane replay
    for (size_t s = 0; nid && s < n; ++s)
        for (size_t j = 0; j < nid; ++j) {
            const int64_t id = I->integer(s * nid + j);
            bt::check_sample_id(id, P.id_bound[j], s, j);
            ids[s * nid + j] = uint32_t(id);
        }
    in.ids = ids.data();
    Output<double> values(values_h, n, "values");
    GradOutputs<T> out(reduce, out_h, n, P.num_wrt);
    box.check_alive();
    return to_list(bt::replay_samples<Unlock>(R, typed<T>(box.arena), in, reduce, to_arena, zero, seed, values.data,
                                              out.rows.data, out.sum.data),
                   0);
}

// _replay_samples(batch, start, shape, mode, seed, values, out, zero, stream) -> (stop, failed):
// replays batch[start:stop], the samples from `start` on whose id parts have `shape` (per part: 0
// for an int, L for a sequence of L ints). values has len(batch) entries and out len(batch) rows;
// sample i writes entry i. failed holds indices into batch. stream: out is a reused buffer
// (rows go out with non-temporal stores).
template <typename T>
static nb::tuple replay_samples_typed(ProgramBox& box, bt::Replayer<T>& R, nb::handle batch_h, size_t start,
                                      const std::vector<int64_t>& shape, const std::string& mode, double seed,
                                      nb::handle values_h, nb::handle out_h, bool zero, bool stream, int threads) {
    const bt::Program<T>& P = R.prog;
    bool to_arena = false;
    const bt::Reduce reduce = bt::parse_reduce(mode, &to_arena);
    const BatchIds batch(batch_h, shape);
    const size_t N = batch.size();
    if (start >= N) throw nb::index_error("start is past the end of the batch");
    const size_t want = bt::ids_of_shape(shape);
    if (want != P.num_ids || P.inputs.size())
        throw nb::value_error("the shape does not match the program's ids (or the program takes float inputs)");
    std::vector<uint32_t> ids;
    ids.reserve(64 * want);
    std::vector<int64_t> one;
    size_t stop = start;
    // A list may change while __index__ runs Python code: every access rechecks its length.
    for (; stop < N; ++stop) {
        if (!batch.read(stop, one)) {
            if (stop == start)
                throw nb::type_error(
                    ("sample " + std::to_string(start) + " does not have the shape of its program").c_str());
            break;
        }
        for (size_t pos = 0; pos < want; ++pos) {
            bt::check_sample_id(one[pos], P.id_bound[pos], stop, pos);
            ids.push_back(uint32_t(one[pos]));
        }
    }
    batch.check_unchanged();
    bt::Samples in;
    in.n = stop - start;
    in.ids = ids.data();
    Output<double> values(values_h, N, "values");
    GradOutputs<T> out(reduce, out_h, N, P.num_wrt);
    box.check_alive();
    const std::vector<size_t> failed = bt::replay_samples<Unlock>(
        R, typed<T>(box.arena), in, reduce, to_arena, zero, seed, values.data ? values.data + start : nullptr,
        out.rows.data ? out.rows.data + start * P.num_wrt : nullptr, out.sum.data, stream, threads);
    return nb::make_tuple(stop, to_list(failed, start));
}

// _replay_chunks(batch, start, k, count, shape, seed, values, zero, threads) -> (stop, failed):
// the oracle's accumulation ("arena" mode) over chunks of k consecutive samples from `start`, up
// to `count` of them, each chunk one sample of a program traced over a chunk (the compound
// sample: part q of every sample of the chunk, concatenated in order). The ids are packed here,
// so a chunked step runs no Python per sample. Replays chunks [0, stop), up to the first chunk
// with a sample of another shape (stop = 0: the first one has; nothing was replayed); values
// (count entries) receives each chunk's loss; failed holds chunk indices.
template <typename T>
static nb::tuple replay_chunks_typed(ProgramBox& box, bt::Replayer<T>& R, nb::handle batch_h, size_t start, size_t k,
                                     size_t count, const std::vector<int64_t>& shape, double seed, nb::handle values_h,
                                     bool zero, int threads) {
    std::vector<uint32_t> ids;
    const size_t stop = bt::pack_chunks(R.prog, BatchIds(batch_h, shape), start, k, count, shape, ids);
    if (stop == 0) return nb::make_tuple(0, nb::list());
    bt::Samples in;
    in.n = stop;
    in.ids = ids.data();
    Output<double> values(values_h, count, "values");
    box.check_alive();
    const std::vector<size_t> failed =
        bt::replay_samples<Unlock>(R, typed<T>(box.arena), in, bt::Reduce::accumulate, true, zero, seed, values.data,
                                   static_cast<T*>(nullptr), nullptr, false, threads);
    return nb::make_tuple(stop, to_list(failed, 0));
}

// _sgd_chunks(batch, k, count, shape, seed, values, params, state, lr, weight_decay, threads) ->
// (stop, failed, stepped): SGD.fused_step(model, batch, chunk=k, compile=True) on several
// threads, the batch being `count` chunks of k samples of `shape` (bt::sgd_step_threads): the
// parameters stepped and counted in `state`, or, when a chunk's guard fails, the grads written as
// _replay_chunks writes them (stepped false: the caller replays that chunk eagerly and steps). A
// chunk of another shape, or parameters that are not the program's wrt: nothing is replayed
// (stop < count; stop = 0 for the latter). A non-finite loss raises and changes nothing.
template <typename T>
static nb::tuple sgd_chunks_typed(ProgramBox& box, bt::Replayer<T>& R, nb::handle batch_h, size_t k, size_t count,
                                  const std::vector<int64_t>& shape, double seed, nb::handle values_h,
                                  const VectorBox& params, OptimState& state, double lr, double wd, int threads) {
    box.check_alive();
    params.check();
    if (params.arena != box.arena) throw nb::value_error("the parameters and the program live in different arenas");
    if (state.dtype != params.dtype() || state.nbuf != 0 || !state.buf.empty())
        throw nb::value_error("the optimizer state is not plain SGD's for these parameters");
    if (!bt::same_spans_joined(params.spans, R.wrt_arena)) return nb::make_tuple(0, nb::list(), false);
    std::vector<uint32_t> ids;
    const size_t stop = bt::pack_chunks(R.prog, BatchIds(batch_h, shape), 0, k, count, shape, ids);
    if (stop < count) return nb::make_tuple(stop, nb::list(), false);
    bt::Samples in;
    in.n = stop;
    in.ids = ids.data();
    Output<double> values(values_h, count, "values");
    bool stepped = false;
    const std::vector<size_t> failed =
        bt::sgd_step_threads<Unlock>(R, typed<T>(box.arena), in, seed, values.data, lr, wd, threads, &stepped);
    if (stepped) ++state.steps;
    return nb::make_tuple(stop, to_list(failed, 0), stepped);
}

// SGD.fused_step(model, batch, chunk >= len(batch), compile=True): the whole batch (k samples of
// `shape`) replayed once as one chunk of this program by bt::fused_sgd_replay. Returns (replayed,
// loss, weights, applied): replayed is false, with nothing changed, when a sample has another
// shape or a guard comes out differently (the caller steps eagerly); weights are the fused
// weights' arena spans and applied which of them the sweep reached (sgd_step_around_fused steps
// the rest). A non-finite loss changes nothing.
template <typename T>
static nb::tuple fused_sgd_chunk_typed(ProgramBox& box, bt::Replayer<T>& R, nb::handle batch_h,
                                       const std::vector<int64_t>& shape, const VectorBox& params, double lr,
                                       double wd) {
    box.check_alive();
    params.check();
    if (params.arena != box.arena) throw nb::value_error("the parameters and the program live in different arenas");
    const BatchIds batch(batch_h, shape);  // an ArrayBatch's buffers are taken once a call
    std::vector<uint32_t> ids;
    auto nothing = [] { return nb::make_tuple(false, 0.0, nb::list(), nb::list()); };
    if (bt::pack_chunks(R.prog, batch, 0, batch.size(), 1, shape, ids) == 0) return nothing();
    const bt::FusedReplayResult res = bt::fused_sgd_replay(R, typed<T>(box.arena), ids.data(), params.spans, lr, wd);
    if (!res.replayed) return nothing();
    nb::list spans, applied;
    for (size_t i = 0; i < res.weights.size(); ++i) {
        spans.append(nb::make_tuple(res.weights[i].first, res.weights[i].second));
        applied.append(bool(res.applied[i]));
    }
    return nb::make_tuple(true, res.loss, spans, applied);
}

static void check_finite(double x, const char* what) {
    if (!std::isfinite(x)) throw nb::value_error(what);
}

static nb::tuple fused_sgd_chunk(ProgramBox& box, nb::handle batch, const std::vector<int64_t>& shape,
                                 const VectorBox& params, double lr, double weight_decay) {
    check_finite(lr, "lr and weight_decay must be finite");
    check_finite(weight_decay, "lr and weight_decay must be finite");
    return box.visit([&](auto& R) { return fused_sgd_chunk_typed(box, R, batch, shape, params, lr, weight_decay); });
}

static nb::list replay(ProgramBox& box, nb::handle X, nb::handle ids, const std::string& mode, double seed,
                       nb::handle values, nb::handle out, bool zero) {
    check_finite(seed, "seed must be finite");
    return box.visit([&](auto& R) { return replay_rows_typed(box, R, X, ids, mode, seed, values, out, zero); });
}

static nb::tuple replay_samples(ProgramBox& box, nb::handle batch, size_t start, const std::vector<int64_t>& shape,
                                const std::string& mode, double seed, nb::handle values, nb::handle out, bool zero,
                                bool stream, int threads) {
    check_finite(seed, "seed must be finite");
    bt::check_thread_count(threads);
    return box.visit([&](auto& R) {
        return replay_samples_typed(box, R, batch, start, shape, mode, seed, values, out, zero, stream, threads);
    });
}

static nb::tuple replay_chunks(ProgramBox& box, nb::handle batch, size_t start, size_t k, size_t count,
                               const std::vector<int64_t>& shape, double seed, nb::handle values, bool zero,
                               int threads) {
    check_finite(seed, "seed must be finite");
    bt::check_thread_count(threads);
    return box.visit([&](auto& R) {
        return replay_chunks_typed(box, R, batch, start, k, count, shape, seed, values, zero, threads);
    });
}

static nb::tuple sgd_chunks(ProgramBox& box, nb::handle batch, size_t k, size_t count,
                            const std::vector<int64_t>& shape, double seed, nb::handle values, const VectorBox& params,
                            OptimState& state, double lr, double weight_decay, int threads) {
    check_finite(seed, "seed must be finite");
    check_finite(lr, "lr and weight_decay must be finite");
    check_finite(weight_decay, "lr and weight_decay must be finite");
    bt::check_thread_count(threads);
    if (threads < 2 || count < 2 || k < 1)
        throw nb::value_error("_sgd_chunks steps where the threads' grads add: two threads and two chunks at least");
    return box.visit([&](auto& R) {
        return sgd_chunks_typed(box, R, batch, k, count, shape, seed, values, params, state, lr, weight_decay, threads);
    });
}

static std::string record_name(const bt::Record& r) {
    std::string name = bt::op_info(r.op).name;
    if (r.op == bt::Op::map_unary || r.op == bt::Op::map_imm || r.op == bt::Op::map_binary)
        name += std::string(":") + bt::op_info(static_cast<bt::Op>(r.c)).name;
    return name;
}

void init_program(nb::module_& m) {
    nb::class_<ProgramBox> P(m, "Program",
                             "A recorded program: the records of one trace, replayable natively with new inputs.\n"
                             "Made by burtorch.trace / value_and_grad / grad_oracle(compile=True).");
    P.def("__len__", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.recs.size(); }); })
        .def_prop_ro("num_inputs",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs.size(); }); })
        .def_prop_ro("num_ids",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.num_ids); }); })
        .def_prop_ro("num_wrt",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.num_wrt; }); })
        .def_prop_ro(
            "frame_size",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.frame_size()); }); })
        .def_prop_ro("num_external",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return size_t(p.n_ext); }); })
        .def_prop_ro(
            "lookups_into_layers",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.gather_linears.size(); }); },
            "Lookups whose rows only the next linear record reads, as its input (a traced embedding, reshaped,\n"
            "into bt.linear). On several threads, an SGD.fused_step replay runs each with its layer as one op:\n"
            "every thread looks all the rows up itself, so they never pass between the cores. A lookup_linear\n"
            "record is already one op and counts none.")
        .def_prop_ro(
            "weights_read_in_place",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    size_t n = 0;
                    for (const bt::Span& w : p.arena_weights) n += w.second;
                    return n;
                });
            },
            "External values a replay reads where they live in the arena rather than copying them into its frame:\n"
            "linear layers' weights that no other op reads.")
        .def_prop_ro(
            "swept", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.sweep.size(); }); },
            "Records the reverse sweep visits (those leading from the root to a wrt node).")
        .def_prop_ro(
            "traced_records",
            [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.traced_records; }); },
            "Records the trace appended, before records the root does not depend on were dropped.")
        .def_prop_ro("dtype", [](const ProgramBox& b) { return nb::borrow(g_dtype_objects[int(b.arena->dtype())]); })
        .def_prop_ro("arena", [](const ProgramBox& b) { return b.owner; })
        .def_prop_ro(
            "alive",
            [](const ProgramBox& b) {
                return b.visit_prog([&](const auto& p) {
                    for (const bt::ExternalSpan& e : p.ext)
                        if (!b.arena->alive(e.first + e.len - 1, e.gen)) return false;
                    return true;
                });
            },
            "False once a rewind discarded a node the program reads.")
        .def_prop_ro(
            "guards",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    nb::list out;
                    static const char* ops[] = {"<", "<=", ">", ">=", "!= 0"};
                    for (const bt::Guard& g : p.guards) out.append(nb::make_tuple(g.where, ops[int(g.op)], g.expected));
                    return out;
                });
            },
            "(line, comparison, outcome during the trace) of each guard, in order.")
        .def(
            "ops",
            [](const ProgramBox& b) {
                return b.visit_prog([](const auto& p) {
                    std::map<std::string, size_t> c;
                    for (const bt::Record& r : p.recs) ++c[record_name(r)];
                    nb::dict d;
                    for (auto& [k, v] : c) d[nb::str(k.c_str())] = v;
                    return d;
                });
            },
            "Number of records per op (map records as map_unary:tanh, ...).")
        .def(
            "record",
            [](const ProgramBox& b, int64_t i) {
                return b.visit_prog([&](const auto& p) {
                    if (i < 0 || size_t(i) >= p.recs.size()) throw nb::index_error("record index out of range");
                    const bt::Record& r = p.recs[size_t(i)];
                    nb::list spans;
                    bt::for_each_arg_span(r, p.args.data() + r.a,
                                          [&](uint32_t f, uint32_t n) { spans.append(nb::make_tuple(f, n)); });
                    return nb::make_tuple(record_name(r), r.out, r.nout, spans, r.imm);
                });
            },
            nb::arg("i"),
            "(op, first output frame slot, number of outputs, argument spans [(frame slot, count)], immediate).")
        .def_prop_ro("root", [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.root; }); })
        .def_prop_ro("input_slots",
                     [](const ProgramBox& b) { return b.visit_prog([](const auto& p) { return p.inputs; }); })
        .def("_replay", &replay, nb::arg("X").none(), nb::arg("ids").none(), nb::arg("mode"), nb::arg("seed"),
             nb::arg("values").none() = nb::none(), nb::arg("out").none() = nb::none(), nb::arg("zero") = false)
        .def("_replay_samples", &replay_samples, nb::arg("batch"), nb::arg("start"), nb::arg("shape"), nb::arg("mode"),
             nb::arg("seed"), nb::arg("values").none() = nb::none(), nb::arg("out").none() = nb::none(),
             nb::arg("zero") = false, nb::arg("stream") = false, nb::arg("threads") = 1)
        .def("_replay_chunks", &replay_chunks, nb::arg("batch"), nb::arg("start"), nb::arg("k"), nb::arg("count"),
             nb::arg("shape"), nb::arg("seed"), nb::arg("values").none() = nb::none(), nb::arg("zero") = false,
             nb::arg("threads") = 1)
        .def("_sgd_chunks", &sgd_chunks, nb::arg("batch"), nb::arg("k"), nb::arg("count"), nb::arg("shape"),
             nb::arg("seed"), nb::arg("values").none(), nb::arg("params"), nb::arg("state"), nb::arg("lr"),
             nb::arg("weight_decay"), nb::arg("threads"))
        .def("_fused_sgd_chunk", &fused_sgd_chunk, nb::arg("batch"), nb::arg("shape"), nb::arg("params"), nb::arg("lr"),
             nb::arg("weight_decay"));
}

}  // namespace btpy
