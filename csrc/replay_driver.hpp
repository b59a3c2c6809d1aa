// Driving a recorded program over a batch: what the gradient oracle's replays do around
// program.hpp's replay() (per-sample rows, their sum, or accumulation into the arena's grads on
// one or several threads), packing a batch's ids into chunks (one compound sample per chunk),
// and the two SGD steps a replay can take itself (where the threads' grads add, and inside the
// sweep for the linear weights one record alone reads).
//
// Nothing here knows Python: the bindings convert arguments and call these, and a C++ user can
// call them the same way. Errors are exceptions: std::invalid_argument for a bad argument,
// std::out_of_range for an id or chunk past its bound, NonFiniteLoss for a loss that is inf or nan.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fused_sgd.hpp"
#include "lanes/replay.hpp"
#include "lanes/rows.hpp"
#include "program.hpp"
#include "replay_threads.hpp"

namespace bt {

// A replay's loss was inf or nan: nothing was added to the arena's grads (they are zeroed when
// the call took them as zero).
struct NonFiniteLoss : std::domain_error {
    using std::domain_error::domain_error;
};

// A program with what its replays keep from call to call: its workspace, one workspace per task
// of the threaded replay, and its wrt nodes as arena spans (where an accumulating replay adds).
template <typename T>
struct Replayer {
    Program<T> prog;
    Workspace<T> ws;
    std::vector<Span> wrt_arena;
    std::vector<Workspace<T>> task_ws;
    lanes::LaneWorkspace<T> lane_ws;  // the lane replay's frame (lanes/replay.hpp)
    lanes::RowsPlan<T> rows_plan;     // per-sample rows written by their records (lanes/rows.hpp)
};

// The default of the drivers' Unlock parameter: a type constructed around the part that runs on
// the thread pool (the bindings pass one that releases the GIL there).
struct NoUnlock {};

// Raises std::out_of_range unless id < bound (sample `sample`, position `pos` of its ids).
inline void check_sample_id(int64_t id, uint32_t bound, size_t sample, size_t pos) {
    if (id < 0 || uint64_t(id) >= bound)
        throw std::out_of_range("sample " + std::to_string(sample) + ": id " + std::to_string(id) + " at position " +
                                std::to_string(pos) + " is out of range [0, " + std::to_string(bound) + ")");
}

// "values", "rows", "sum" or "arena" (accumulation into the arena's grads: *to_arena).
inline Reduce parse_reduce(std::string_view mode, bool* to_arena) {
    *to_arena = mode == "arena";
    if (mode == "values") return Reduce::values;
    if (mode == "rows") return Reduce::rows;
    if (mode == "sum") return Reduce::sum;
    if (mode == "arena") return Reduce::accumulate;
    throw std::invalid_argument("mode must be 'values', 'rows', 'sum' or 'arena'");
}

inline void check_thread_count(int threads) {
    if (const char* why = threads::thread_count_problem(threads)) throw std::invalid_argument(why);
}

// Ids per sample of a sample shape (per id part: 0 for one id, L for a row of L ids).
inline size_t ids_of_shape(const std::vector<int64_t>& shape) {
    size_t want = 0;
    for (int64_t p : shape) want += p > 0 ? size_t(p) : 1;
    return want;
}

namespace replay_detail {

[[noreturn]] inline void non_finite(bool nan, long sample) {
    throw NonFiniteLoss(std::string("the loss is ") + (nan ? "nan" : "inf") + " for sample " + std::to_string(sample) +
                        "; lower the learning rate or check the data");
}

// Points the linear weights that a replay reads in the arena (Program::arena_weights) at their
// grads in the arena too, when each lies inside one wrt span: the replay then adds their
// gradients there, in the order it would add them in its frame, and nothing is copied out. They
// start at zero: the first record to reach one writes it instead of adding (the same bits), so
// it is neither zeroed first nor read. Returns those weights' frame spans, ascending. Their frame
// grads stay zero: no other record reads them.
template <typename T>
std::vector<Span> grads_in_place(Replayer<T>& R, T* ag) {
    const Program<T>& P = R.prog;
    std::vector<Span> direct;
    R.ws.wg_index.clear();
    for (const Span& w : P.arena_weights)
        for (size_t i = 0; i < P.wrt.size(); ++i)
            if (w.first >= P.wrt[i].first && w.first + w.second <= P.wrt[i].first + P.wrt[i].second) {
                T* g = ag + R.wrt_arena[i].first + (w.first - P.wrt[i].first);
                R.ws.wg_index.push_back(WeightGrad<T>{w.first, g, w.second, true});
                direct.push_back(w);
                break;
            }
    return direct;  // arena_weights are sorted and disjoint
}

// The in-place grads no record wrote (a sweep that skipped their record) or that a failed
// replay left partly written: zeroed, as a call that starts from zero leaves them.
template <typename T>
void zero_grads_in_place(const Workspace<T>& W, bool all) {
    for (const WeightGrad<T>& w : W.wg_index)
        if (all || w.unwritten) std::fill(w.grad, w.grad + w.len, T(0));
}

}  // namespace replay_detail

// The wrt grads of the frame into the arena (at ag), zeroing them as they are read (the next call
// need not), but for the frame spans `skip` (sorted; their grads are elsewhere or stay as they
// were).
template <typename T>
void take_wrt_grads_but(Replayer<T>& R, T* ag, const std::vector<Span>& skip) {
    const Program<T>& P = R.prog;
    Workspace<T>& W = R.ws;
    for (size_t i = 0; i < P.wrt.size(); ++i) {
        uint32_t at = P.wrt[i].first;
        const uint32_t end = at + P.wrt[i].second;
        auto take = [&](uint32_t stop) {
            if (stop <= at) return;
            const auto g = W.g.begin() + at;
            std::copy(g, g + (stop - at), ag + R.wrt_arena[i].first + (at - P.wrt[i].first));
            std::fill(g, g + (stop - at), T(0));
        };
        for (const Span& d : skip)
            if (d.first >= at && d.first < end) {
                take(d.first);
                at = d.first + d.second;
            }
        take(end);
    }
    W.wrt_grads_zero = true;
}

// The oracle's accumulation (Reduce::accumulate into the arena) over `threads` blocks of
// samples, one workspace each (replay_threads.hpp): each block sums its samples' grads apart,
// then the sums are added to the arena's grads in block order. An Unlock lives while the pool runs.
// step (with zero): the parameters stepped instead when every sample replays (*stepped then).
template <class Unlock = NoUnlock, typename T>
std::vector<size_t> replay_accumulate_threads(Replayer<T>& R, Arena<T>& A, const Samples& in, bool zero, double seed,
                                              double* values, int threads, const ReduceStep<T>* step = nullptr,
                                              bool* stepped = nullptr) {
    check_thread_count(threads);
    const Program<T>& P = R.prog;
    std::vector<T*> dst;
    for (const Span& w : R.wrt_arena) dst.push_back(A.grads() + w.first);
    ParallelReplayResult res;
    {
        [[maybe_unused]] Unlock unlocked;
        res = replay_accumulate(P, A.values(), dst.data(), in, static_cast<T>(seed), values, size_t(threads), R.task_ws,
                                zero, step);
    }
    if (stepped) *stepped = res.stepped;
    if (res.non_finite >= 0) {  // nothing was added: the grads are as they were
        if (zero && !step)      // as the one-thread replay leaves them: zeroed (a step leaves them be)
            for (size_t i = 0; i < dst.size(); ++i) std::fill(dst[i], dst[i] + P.wrt[i].second, T(0));
        replay_detail::non_finite(std::isnan(res.non_finite_value), res.non_finite);
    }
    A.mark_grads_written();
    return std::move(res.failed);
}

// n samples (inputs converted and checked) replayed by `reduce`: Reduce::values (forward only),
// rows (each sample's wrt grads into row s of `rows`), sum (added into `sum`, float64), or, with
// to_arena, accumulated across samples on top of the wrt nodes' grads in the arena (or on zero
// when `zero`) and written back: the additions of the eager oracle, in its order. Returns the
// samples whose guards failed: nothing is written for them; the caller recomputes them eagerly
// or with a new trace.
template <class Unlock = NoUnlock, typename T>
std::vector<size_t> replay_samples(Replayer<T>& R, Arena<T>& A, const Samples& in, Reduce reduce, bool to_arena,
                                   bool zero, double seed, double* values, T* rows, double* sum, bool stream = false,
                                   int threads = 1) {
    Program<T>& P = R.prog;
    Workspace<T>& W = R.ws;
    if (to_arena && threads > 1 && in.n > 1)
        return replay_accumulate_threads<Unlock>(R, A, in, zero, seed, values, threads);
    // Samples that each hand out their own value and grads run in blocks of SIMD lanes when the
    // program has only scalar and var-arity records: the same numbers, sample for sample.
    if (!to_arena && in.n > 1 && lanes::enabled() && lanes::usable(P, R.lane_ws))
        return std::move(
            lanes::replay(P, R.lane_ws, A.values(), in, reduce, static_cast<T>(seed), values, rows, sum).failed);
    // Per-sample rows of a program with range records: the records that reach the parameters
    // write their parts of each row themselves, once (the same bits as the replay below).
    if (!to_arena && reduce == Reduce::rows && in.n > 1 && lanes::enabled() && lanes::rows_usable(P, R.rows_plan))
        return std::move(
            lanes::replay_rows(P, W, R.rows_plan, A.values(), in, static_cast<T>(seed), values, rows, stream).failed);
    prepare(P, W, A.values(), in.n);
    T* ag = A.grads();
    if (to_arena && !zero)  // continue from the grads already there, so additions happen in the eager order
        for (size_t i = 0; i < P.wrt.size(); ++i)
            std::copy(ag + R.wrt_arena[i].first, ag + R.wrt_arena[i].first + P.wrt[i].second,
                      W.g.begin() + P.wrt[i].first);
    // Starting from zero, the weights read in place accumulate their grads in place too.
    const std::vector<Span> direct = to_arena && zero ? replay_detail::grads_in_place(R, ag) : std::vector<Span>{};
    // Afterwards the frame is itself again; a replay that throws leaves those grads zeroed, as a
    // failed call that starts from zero leaves every grad.
    struct Undirect {
        Workspace<T>& W;
        int unwinding = std::uncaught_exceptions();
        ~Undirect() {
            replay_detail::zero_grads_in_place(W, std::uncaught_exceptions() > unwinding);
            W.wg_index.clear();
        }
    } undirect{W};
    ReplayResult res = replay(P, W, in, reduce, static_cast<T>(seed), values, rows, sum, to_arena, stream);
    if (to_arena) {
        if (res.non_finite >= 0) {
            if (zero)
                for (size_t i = 0; i < P.wrt.size(); ++i)
                    std::fill(ag + R.wrt_arena[i].first, ag + R.wrt_arena[i].first + P.wrt[i].second, T(0));
            replay_detail::non_finite(std::isnan(W.v[P.root]), res.non_finite);
        }
        take_wrt_grads_but(R, ag, direct);
        A.mark_grads_written();
    }
    return std::move(res.failed);
}

// The ids of chunks [0, stop) of k consecutive samples from `start` (up to `count` chunks), each
// chunk packed as the program's compound sample: part q of every sample of the chunk, in order.
// stop: the first chunk with a sample of another shape (0: the first one has).
// The batch is read through `batch`: size(); arrays() (every sample has the shape, and
// read_block(q, s, k, bound, dst, pos0) copies part q of samples [s, s + k) into dst, checked
// against bound); read(s, ids) (sample s's ids, part by part; false for another shape); and
// check_unchanged() (raises if the batch changed while it was read).
template <class Batch, typename T>
size_t pack_chunks(const Program<T>& P, const Batch& batch, size_t start, size_t k, size_t count,
                   const std::vector<int64_t>& shape, std::vector<uint32_t>& ids) {
    const size_t N = batch.size();
    if (k == 0 || count == 0) throw std::invalid_argument("k and count must be positive");
    if (start > N || count > (N - start) / k) throw std::out_of_range("the chunks run past the end of the batch");
    const size_t per = ids_of_shape(shape);
    if (per * k != P.num_ids || P.inputs.size())
        throw std::invalid_argument(
            "k samples of this shape do not match the program's ids (or it takes float inputs)");
    // Where part q of sample j of a chunk goes in the compound: part q's block, then j's slot.
    std::vector<size_t> block_at(shape.size()), width(shape.size());
    for (size_t q = 0, at = 0; q < shape.size(); ++q) {
        width[q] = shape[q] > 0 ? size_t(shape[q]) : 1;
        block_at[q] = at;
        at += k * width[q];
    }
    ids.assign(count * P.num_ids, 0);
    if (batch.arrays()) {  // every sample has the shape: part q of a chunk is one block of its array
        for (size_t c = 0; c < count; ++c)
            for (size_t q = 0; q < shape.size(); ++q)
                batch.read_block(q, start + c * k, k, P.id_bound.data() + block_at[q],
                                 ids.data() + c * P.num_ids + block_at[q], block_at[q]);
        return count;
    }
    std::vector<int64_t> one;
    size_t stop = 0;
    for (; stop < count; ++stop) {
        uint32_t* dst = ids.data() + stop * P.num_ids;
        bool fits = true;
        for (size_t j = 0; fits && j < k; ++j) {
            const size_t s = start + stop * k + j;
            fits = batch.read(s, one);
            for (size_t q = 0, i = 0; fits && q < shape.size(); ++q)
                for (size_t t = 0; t < width[q]; ++t, ++i) {
                    const size_t pos = block_at[q] + j * width[q] + t;
                    if (one[i] < 0 || uint64_t(one[i]) >= P.id_bound[pos])
                        check_sample_id(one[i], P.id_bound[pos], s, pos);
                    dst[pos] = uint32_t(one[i]);
                }
        }
        if (!fits) break;
    }
    batch.check_unchanged();
    return stop;
}

// Whether `params` are the program's wrt, span for span: adjacent spans joined, overlapping ones
// kept apart (not program.hpp's merged()), since SGD.step steps an element of two overlapping
// parameter spans twice, so those must not pass as the wrt.
inline bool same_spans_joined(std::vector<Span> a, std::vector<Span> b) {
    auto joined = [](std::vector<Span>& spans) {
        std::sort(spans.begin(), spans.end());
        std::vector<Span> out;
        for (const Span& sp : spans)
            if (!out.empty() && out.back().first + out.back().second == sp.first)
                out.back().second += sp.second;
            else if (sp.second)
                out.push_back(sp);
        return out;
    };
    return joined(a) == joined(b);
}

// A plain SGD step of the program's wrt over `in` (chunks, one compound sample each) replayed on
// several threads, the step taken where the threads' grads add (replay_threads.hpp's
// ReduceStep): the parameters stepped (*stepped), their grads left as they were. When a chunk's
// guard fails the grads are written as an accumulating replay from zero writes them (*stepped
// false). Returns the chunks whose guards failed.
template <class Unlock = NoUnlock, typename T>
std::vector<size_t> sgd_step_threads(Replayer<T>& R, Arena<T>& A, const Samples& in, double seed, double* values,
                                     double lr, double weight_decay, int threads, bool* stepped) {
    std::vector<T*> w;
    for (const Span& s : R.wrt_arena) w.push_back(A.values() + s.first);
    const ReduceStep<T> step{w.data(), static_cast<T>(lr), static_cast<T>(weight_decay)};
    return replay_accumulate_threads<Unlock>(R, A, in, true, seed, values, threads, &step, stepped);
}

// What fused_sgd_replay did: replayed is false, with nothing changed, when a guard came out
// differently; weights are the fused weights' arena spans and applied which of them the sweep
// reached (the rest take the ordinary step).
struct FusedReplayResult {
    bool replayed = false;
    double loss = 0.0;
    std::vector<Span> weights;
    std::vector<uint8_t> applied;
};

// One sample (the whole batch as one compound sample, its ids checked) replayed with every linear
// weight that it reads in place, that one record alone reads and that lies inside `params` (arena
// spans) updated inside the sweep (fused_sgd.hpp), as the eager fused step updates it. The other
// wrt grads are written with the sample's gradient; the fused weights' grads are left as they
// were. A non-finite loss raises NonFiniteLoss and changes nothing.
template <typename T>
FusedReplayResult fused_sgd_replay(Replayer<T>& R, Arena<T>& A, const uint32_t* ids, const std::vector<Span>& params,
                                   double lr, double weight_decay) {
    const Program<T>& P = R.prog;
    Workspace<T>& W = R.ws;
    FusedReplayResult out;
    // the weights to fuse, as frame spans and as arena spans
    std::vector<Span> frame_w;
    // linear records reading each in-place weight (arena_weights: sorted, disjoint), in one pass
    std::vector<uint32_t> readers(P.arena_weights.size(), 0);
    for (const Record& r : P.recs) {
        if (!reads_linear_weight(r.op)) continue;
        const uint32_t first = decode_operands(P.args.data() + r.a).v[1].first(0);
        const auto it = std::lower_bound(P.arena_weights.begin(), P.arena_weights.end(), Span{first, 0});
        if (it != P.arena_weights.end() && it->first == first) ++readers[size_t(it - P.arena_weights.begin())];
    }
    if (!anomaly_enabled())
        for (size_t k = 0; k < P.arena_weights.size(); ++k) {
            const Span& w = P.arena_weights[k];
            if (readers[k] != 1) continue;
            for (size_t i = 0; i < P.wrt.size(); ++i)
                if (w.first >= P.wrt[i].first && w.first + w.second <= P.wrt[i].first + P.wrt[i].second) {
                    const Span a{R.wrt_arena[i].first + (w.first - P.wrt[i].first), w.second};
                    bool inside = false;
                    for (const Span& p : params)
                        inside |= a.first >= p.first && a.first + a.second <= p.first + p.second;
                    if (inside) {
                        frame_w.push_back(w);
                        out.weights.push_back(a);
                    }
                    break;
                }
        }
    FusedSgd fused{lr, weight_decay, {}, std::vector<uint8_t>(frame_w.size(), 0)};
    for (const Span& w : frame_w) fused.weight_slots.push_back(w.first);
    prepare(P, W, A.values(), 1);
    struct Unfuse {
        Workspace<T>& W;
        ~Unfuse() { W.fused_sgd = nullptr; }
    } unfuse{W};
    W.fused_sgd = frame_w.empty() ? nullptr : &fused;
    Samples in;
    in.n = 1;
    in.ids = ids;
    const ReplayResult res =
        replay(P, W, in, Reduce::accumulate, T(1), &out.loss, static_cast<T*>(nullptr), nullptr, true);
    if (!res.failed.empty()) return FusedReplayResult{};  // its guard failed: nothing was swept
    if (res.non_finite >= 0)
        throw NonFiniteLoss(std::string("the loss is ") + (std::isnan(out.loss) ? "nan" : "inf") +
                            " for a batch; lower the learning rate or check the data");
    // the batch's grads into the arena, but for the fused weights' (their frame grads are zero)
    take_wrt_grads_but(R, A.grads(), frame_w);
    A.mark_grads_written();
    out.replayed = true;
    out.applied = std::move(fused.applied);
    return out;
}

}  // namespace bt
