// Recorded programs: the records a trace appended, copied out of the arena and renumbered so they
// run against a private frame, then replayed with new inputs (forward, then the reverse sweep).
//
// Frame layout: [external slots | local slots]. External slots are the nodes below the trace
// (parameters, captured Values): their values are copied in from the arena per call (read only;
// but for the linear weights no other record reads, which stay in the arena: arena_weights) and
// their grads accumulate in the frame. Local slots are the trace's own nodes, in creation
// order, so every span that was contiguous in the arena is contiguous in the frame and a replay
// runs the same kernels on the same numbers as the eager appends did (bitwise equal results).
//
// The program itself is immutable after build(); everything a replay writes lives in a
// Workspace (values, grads, scratch, and a copy of the args whose id entries a replay rewrites),
// so threads can replay one program at once, each with its own workspace.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "backward.hpp"
#include "range/gather_linear.hpp"

namespace bt {

// A comparison Python code made on traced values: replay re-evaluates it and reports a mismatch.
enum class GuardOp : uint8_t { lt, le, gt, ge, nonzero };

struct Guard {
    GuardOp op;
    bool expected;   // the outcome during the trace
    bool rhs_const;  // compares against the number c instead of slot b
    uint32_t a, b;   // slots (arena slots while tracing, frame slots in a program)
    double c;
    std::string where;  // "file.py:12": the line that made the comparison
};

template <typename T>
inline bool guard_holds(const Guard& g, const T* v) {
    const double a = double(v[g.a]);
    const double b = g.rhs_const ? g.c : double(v[g.b]);
    bool r = false;
    switch (g.op) {
        case GuardOp::lt: r = a < b; break;
        case GuardOp::le: r = a <= b; break;
        case GuardOp::gt: r = a > b; break;
        case GuardOp::ge: r = a >= b; break;
        case GuardOp::nonzero: r = a != 0.0; break;
    }
    return r == g.expected;
}

// An integer input (token id, class target) of a program: entry `from_end` counted from the end
// of record `rec`'s args (ids live in the tails of gather and cross_entropy records). `position`
// is its index in a sample's id row; ids must be < bound.
struct IdInput {
    uint32_t rec;
    uint32_t from_end;
    uint32_t position;
    uint32_t bound;
};

// What a trace hands to Program::build (all in arena slots and record indices).
struct TraceSpec {
    Mark base;                     // the arena when tracing began: everything above is the trace's
    std::vector<uint32_t> inputs;  // float inputs, in order
    uint32_t num_ids = 0;          // length of a sample's id row
    std::vector<IdInput> ids;
    std::vector<Guard> guards;
    uint32_t root = 0;
    std::vector<Span> wrt;  // the nodes whose gradient a replay reports, in this order
};

// Arena slots [first, first + len) live at frame slot `at`; gen stamps its last slot, so a rewind
// that removed or reused the region is detected before a replay reads it.
struct ExternalSpan {
    uint32_t first, len, at;
    uint64_t gen;
};

// Calls f(first, len) for each argument span of record r whose args start at p (= args + r.a).
template <typename F>
inline void for_each_arg_span(const Record& r, const uint32_t* p, F&& f) {
    switch (op_info(r.op).kind) {
        case OpKind::leaf: return;
        case OpKind::unary:
        case OpKind::unary_imm: f(r.a, 1u); return;
        case OpKind::binary:
            f(r.a, 1u);
            f(r.b, 1u);
            return;
        case OpKind::nary:
            for (uint32_t i = 0; i < r.b; ++i) f(p[i], 1u);
            return;
        case OpKind::range: {
            const uint32_t k = *p++;
            for (uint32_t v = 0; v < k; ++v) {
                const uint32_t n = *p++;
                for (uint32_t s = 0; s < n; ++s, p += 2) f(p[0], p[1]);
            }
            return;
        }
    }
}

template <typename T>
class Program {
public:
    using value_type = T;
    // Copies the trace's records out of the arena (which may be rewound afterwards). Records the
    // root and the guards do not depend on are dropped; the reverse sweep visits only records
    // that lead from the root to a wrt node. Throws std::invalid_argument if the trace is unusable.
    static Program build(const Arena<T>& A, const TraceSpec& s);

    uint32_t n_ext = 0, n_local = 0;
    std::vector<ExternalSpan> ext;
    std::vector<Record> recs;     // forward order; Record::a of nary/range records indexes `args`
    std::vector<uint32_t> args;   // renumbered argument entries
    std::vector<uint32_t> sweep;  // indices into recs that the reverse sweep visits, ascending
    // Local grad spans (merged) that the sweep reads or adds into: zeroed before each sample's
    // sweep. Every other local grad is never read, so a partial program zeroes only its own few.
    std::vector<Span> sweep_grads;
    // Per record (indexed like recs): 1 if the reverse sweep reaches it before any other record
    // adds into the grads of its first operand (writes_first_operand), which it then writes
    // instead (0 + its contribution: the bits of an add into zero), so sweep_grads leaves them out.
    std::vector<uint8_t> first_write;
    // Linear layers whose forward transposes an external W (constant during a call): (W's frame
    // slot, rows of W, columns), each W once. prepare() transposes them once per call of two
    // samples or more.
    struct TransposedWeight {
        uint32_t slot, rows, cols;
    };
    std::vector<TransposedWeight> transposed_weights;
    // External spans that no record reads but as the W of linear records (frame spans, sorted):
    // a replay reads them where they live in the arena instead of copying them into its frame
    // (a wide layer's weights are most of what prepare() would copy).
    std::vector<Span> arena_weights;
    // Lookups whose rows only one linear layer reads, as its x, both in the sweep: (the lookup's
    // record, the layer's). A replay on several threads that steps the layer's W in its sweep
    // runs each pair as one op (range/gather_linear.hpp). pair_of: each record's pair, or -1.
    struct GatherLinear {
        uint32_t gather, linear;
    };
    std::vector<GatherLinear> gather_linears;
    std::vector<int32_t> pair_of;
    std::vector<T> local_init;  // values of the local slots at trace time (constants stay)
    std::vector<uint32_t> inputs;
    uint32_t num_ids = 0;
    std::vector<uint32_t> id_bound;                       // per id position: the exclusive bound (UINT32_MAX: unused)
    std::vector<std::pair<uint32_t, uint32_t>> id_slots;  // (index into args, id position)
    std::vector<Guard> guards;
    std::vector<Span> wrt;  // frame spans
    size_t num_wrt = 0;
    // The external slots that are not wrt nodes, as merged spans: prepare() zeroes their grads on
    // every call, while the wrt nodes' grads are zeroed by whatever reads them out.
    std::vector<Span> ext_not_wrt;
    uint32_t root = 0;
    size_t traced_records = 0;  // records the trace appended (before dropping dead ones)

    uint32_t frame_size() const { return n_ext + n_local; }
    bool is_external(uint32_t frame_slot) const { return frame_slot < n_ext; }
};

// One thread's replay state for a program. It is laid out for one program on first use (sizes,
// constants, args) and reused by every later call with that program.
template <typename T>
struct Workspace {
    std::vector<T> v, g;
    HugeBuffer<T> scratch;
    std::vector<uint32_t> args;
    std::vector<T> wt;                                    // the program's transposed weights, back to back
    std::vector<std::pair<uint32_t, const T*>> wt_index;  // (W's frame slot, its transposed copy in wt)
    std::vector<std::pair<uint32_t, const T*>> w_index;   // (W's frame slot, W in the arena): arena_weights
    std::vector<WeightGrad<T>> wg_index;                  // W's grad in the arena, by W's frame slot; or empty
    const FusedSgd* fused_sgd = nullptr;                  // weights a replay steps inside its sweep; or none
    // Per Program::gather_linears entry: the tasks this call's forward ran it in as one op (0:
    // apart), and where its buffer starts in pair_buf (it holds x from the forward to the sweep).
    std::vector<size_t> pair_tasks, pair_at;
    std::vector<T> pair_buf;
    const Program<T>* laid_out_for = nullptr;
    // Whether every external wrt grad is zero: set by the passes that read those grads out and
    // zero them as they go (take_wrt_grads, the threaded sum), cleared by prepare(). prepare()
    // then zeroes only the other external grads instead of one more pass over every parameter's.
    bool wrt_grads_zero = false;
    Frame<T> frame() {
        return Frame<T>{v.data(),
                        g.data(),
                        &scratch,
                        wt_index.empty() ? nullptr : &wt_index,
                        fused_sgd,
                        w_index.empty() ? nullptr : &w_index,
                        wg_index.empty() ? nullptr : &wg_index};
    }
};

// Range ops whose backward adds only into the grads of their first operand's spans (besides
// external parameters, such as a linear layer's W and b), each of them once, with one kernel
// pass that can write instead (Frame::first_write).
inline bool writes_first_operand(Op op) {
    return op == Op::linear || op == Op::map_unary || op == Op::softmax || op == Op::cross_entropy;
}

// sweep_grads from the merged spans the sweep touches: all of them but the first operands of
// first writers. Walks the sweep in its own (reverse) order, marking each grad slot once a record
// has added into it (the root's, by the seed, from the start); a record of writes_first_operand
// whose first operand is local, its spans disjoint, no slot of them marked, and no other operand
// of it overlapping them, becomes their first writer (P.first_write). Every grad such a record
// writes is then complete before anything reads it; if the sweep skips the record (its outputs'
// grads are all zero), run_backward zeroes those spans in its place.
template <typename T>
inline std::vector<Span> grads_to_zero(Program<T>& P, const std::vector<Span>& touched, uint32_t root) {
    P.first_write.assign(P.recs.size(), 0);
    // one bit a slot (a frame of a large chunk holds millions: bytes would raise the peak memory)
    std::vector<bool> added(P.frame_size(), false), zero(P.frame_size(), false);
    for (const Span& t : touched) std::fill(zero.begin() + t.first, zero.begin() + t.first + t.second, true);
    added[root] = true;
    for (size_t i = P.sweep.size(); i-- > 0;) {
        const Record& r = P.recs[P.sweep[i]];
        const uint32_t* a = P.args.data() + r.a;
        bool first = op_info(r.op).kind == OpKind::range && writes_first_operand(r.op);
        if (first) {
            // operand 0's spans: local, each slot once, none added into yet
            const Operands o = decode_operands(a);
            std::vector<bool> mine;  // slots of operand 0, relative to its lowest
            uint32_t lo = UINT32_MAX, hi = 0;
            for (uint32_t k = 0; k < o.v[0].n; ++k) {
                lo = std::min(lo, o.v[0].first(k));
                hi = std::max(hi, o.v[0].first(k) + o.v[0].len(k));
            }
            first = o.v[0].n > 0 && lo >= P.n_ext;
            if (first) mine.assign(hi - lo, false);
            for (uint32_t k = 0; first && k < o.v[0].n; ++k)
                for (uint32_t j = o.v[0].first(k); first && j < o.v[0].first(k) + o.v[0].len(k); ++j) {
                    first = !added[j] && !mine[j - lo];
                    mine[j - lo] = true;
                }
            // the other operands (W, b, ...) stay clear of it
            for (uint32_t q = 1; first && q < o.k && q < 4; ++q)
                for (uint32_t k = 0; first && k < o.v[q].n; ++k)
                    for (uint32_t j = o.v[q].first(k); first && j < o.v[q].first(k) + o.v[q].len(k); ++j)
                        first = j < lo || j >= hi || !mine[j - lo];
            first = first && o.k <= 4;
            if (first) {
                P.first_write[P.sweep[i]] = 1;
                for (uint32_t k = 0; k < o.v[0].n; ++k)
                    std::fill(zero.begin() + o.v[0].first(k), zero.begin() + o.v[0].first(k) + o.v[0].len(k), false);
            }
        }
        for_each_arg_span(
            r, a, [&](uint32_t f, uint32_t len) { std::fill(added.begin() + f, added.begin() + f + len, true); });
    }
    std::vector<Span> out;
    for (uint32_t j = 0; j < P.frame_size();) {
        if (!zero[j]) {
            ++j;
            continue;
        }
        const uint32_t b = j;
        while (j < P.frame_size() && zero[j]) ++j;
        out.emplace_back(b, j - b);
    }
    return out;
}

// Sorts and merges spans (overlapping or adjacent ones become one).
inline std::vector<Span> merged(std::vector<Span> spans) {
    std::sort(spans.begin(), spans.end());
    std::vector<Span> out;
    for (const Span& sp : spans) {
        if (!out.empty() && sp.first <= out.back().first + out.back().second)
            out.back().second = std::max(out.back().first + out.back().second, sp.first + sp.second) - out.back().first;
        else
            out.push_back(sp);
    }
    return out;
}

// The linear weights (frame spans) sorted, each once; none if two differ but overlap (a weight
// read at two different extents is left to the copy).
inline std::vector<Span> distinct_weights(std::vector<Span> w) {
    std::sort(w.begin(), w.end());
    w.erase(std::unique(w.begin(), w.end()), w.end());
    for (size_t i = 1; i < w.size(); ++i)
        if (w[i].first < w[i - 1].first + w[i - 1].second) return {};
    return w;
}

// Of the candidate weights `cand` (sorted, disjoint frame spans), those that nothing reads but
// linear records as their W operand, exactly: no other operand, record, guard or the root.
template <typename T>
std::vector<Span> only_read_as_weights(const Program<T>& P, const std::vector<Span>& cand) {
    if (cand.empty()) return {};
    std::vector<char> out(cand.size(), 0);
    auto hit = [&](uint32_t first, uint32_t len) {  // marks the candidates [first, first + len) meets
        auto it = std::upper_bound(cand.begin(), cand.end(), first,
                                   [](uint32_t x, const Span& c) { return x < c.first + c.second; });
        for (; it != cand.end() && it->first < first + len; ++it) out[size_t(it - cand.begin())] = 1;
    };
    for (const Record& r : P.recs) {
        if (op_info(r.op).kind != OpKind::range) {
            for_each_arg_span(r, P.args.data() + r.a, hit);
            continue;
        }
        const uint32_t* p = P.args.data() + r.a;
        const uint32_t kops = *p++;
        for (uint32_t v = 0; v < kops; ++v) {
            const uint32_t n = *p++;
            const bool w_of_linear = reads_linear_weight(r.op) && v == 1 && n == 1;
            for (uint32_t i = 0; i < n; ++i, p += 2) {
                if (w_of_linear && std::binary_search(cand.begin(), cand.end(), Span{p[0], p[1]})) continue;
                hit(p[0], p[1]);
            }
        }
    }
    hit(P.root, 1);
    for (const Guard& g : P.guards) {
        hit(g.a, 1);
        if (!g.rhs_const) hit(g.b, 1);
    }
    std::vector<Span> keep;
    for (size_t i = 0; i < cand.size(); ++i)
        if (!out[i]) keep.push_back(cand[i]);
    return keep;
}

// Program::gather_linears: each linear record whose x is exactly the output of a gather record,
// when nothing else (no other operand or record, the root, a guard) reads those slots and both
// records are in the sweep.
template <typename T>
void find_gather_linears(Program<T>& P) {
    P.pair_of.assign(P.recs.size(), -1);
    for (size_t k = 0; k < P.recs.size(); ++k) {
        const Record& l = P.recs[k];
        if (l.op != Op::linear) continue;
        const Operands lo = decode_operands(P.args.data() + l.a);
        if (lo.v[0].n != 1) continue;
        const uint32_t x0 = lo.v[0].first(0), xn = lo.v[0].len(0);
        if (size_t(lo.tail[0]) * lo.tail[1] != xn || x0 < P.n_ext) continue;
        size_t g = k;
        while (g-- > 0 && !(P.recs[g].op == Op::gather && P.recs[g].out == x0 && P.recs[g].nout == xn)) {}
        if (g == size_t(-1)) continue;
        const Operands go = decode_operands(P.args.data() + P.recs[g].a);
        if (size_t(go.tail[0]) * go.tail[1] != xn || go.v[0].n != 1) continue;
        if (!std::binary_search(P.sweep.begin(), P.sweep.end(), uint32_t(g)) ||
            !std::binary_search(P.sweep.begin(), P.sweep.end(), uint32_t(k)))
            continue;
        // x's readers: the layer's first operand alone
        size_t spans = 0;
        bool other = false;
        auto meets = [&](uint32_t f, uint32_t len) { return f < x0 + xn && x0 < f + len; };
        for (const Record& r : P.recs)
            for_each_arg_span(r, P.args.data() + r.a, [&](uint32_t f, uint32_t len) {
                if (!meets(f, len)) return;
                ++spans;
                other |= f != x0 || len != xn;
            });
        other |= meets(P.root, 1);
        for (const Guard& gd : P.guards) other |= meets(gd.a, 1) || (!gd.rhs_const && meets(gd.b, 1));
        for (const Span& w : P.wrt) other |= meets(w.first, w.second);
        if (other || spans != 1) continue;
        P.pair_of[g] = P.pair_of[k] = int32_t(P.gather_linears.size());
        P.gather_linears.push_back({uint32_t(g), uint32_t(k)});
    }
    if (P.gather_linears.empty()) P.pair_of.clear();
}

template <typename T>
Program<T> Program<T>::build(const Arena<T>& A, const TraceSpec& s) {
    Program P;
    const uint32_t base = s.base.slots;
    const size_t r0 = s.base.records, r1 = A.num_records();
    const uint32_t top = static_cast<uint32_t>(A.num_slots());
    if (s.base.slots > top || r0 > r1) throw std::invalid_argument("the arena was rewound below the trace");
    P.traced_records = r1 - r0;
    P.n_local = top - base;
    const uint32_t* aargs = A.args();

    // 1. Records the root and the guards depend on (reverse pass over the trace's records).
    std::vector<char> needed(P.n_local, 0);
    auto need = [&](uint32_t slot, uint32_t len) {
        for (uint32_t i = 0; i < len; ++i)
            if (slot + i >= base && slot + i < top) needed[slot + i - base] = 1;
    };
    need(s.root, 1);
    for (const Guard& g : s.guards) {
        need(g.a, 1);
        if (!g.rhs_const) need(g.b, 1);
    }
    std::vector<char> keep(r1 - r0, 0);
    for (size_t k = r1; k-- > r0;) {
        const Record& r = A.record(k);
        bool live = false;
        for (uint32_t i = 0; i < r.nout && !live; ++i) live = r.out + i >= base && needed[r.out + i - base];
        if (!live) continue;
        keep[k - r0] = 1;
        for_each_arg_span(r, aargs + r.a, need);
    }

    // 2. External slots: every slot below the trace that a kept record, the root, a guard or a
    //    wrt node refers to, as merged arena intervals.
    std::vector<Span> refs;
    auto ref = [&](uint32_t first, uint32_t len) {
        if (first < base) refs.emplace_back(first, std::min(len, base - first));
    };
    ref(s.root, 1);
    for (const Guard& g : s.guards) {
        ref(g.a, 1);
        if (!g.rhs_const) ref(g.b, 1);
    }
    for (const Span& w : s.wrt) ref(w.first, w.second);
    for (size_t k = r0; k < r1; ++k)
        if (keep[k - r0]) for_each_arg_span(A.record(k), aargs + A.record(k).a, ref);
    std::sort(refs.begin(), refs.end());
    for (const Span& sp : refs) {
        if (!P.ext.empty() && sp.first <= P.ext.back().first + P.ext.back().len) {
            ExternalSpan& e = P.ext.back();
            e.len = std::max(e.first + e.len, sp.first + sp.second) - e.first;
        } else {
            P.ext.push_back(ExternalSpan{sp.first, sp.second, 0, 0});
        }
    }
    for (ExternalSpan& e : P.ext) {
        e.at = P.n_ext;
        e.gen = A.gen_of(e.first + e.len - 1);
        P.n_ext += e.len;
    }
    if (uint64_t(P.n_ext) + P.n_local > UINT32_MAX - 1) throw CapacityError("the program's frame is too large");

    auto map = [&](uint32_t slot) -> uint32_t {
        if (slot >= base) return P.n_ext + (slot - base);
        auto it = std::upper_bound(P.ext.begin(), P.ext.end(), slot,
                                   [](uint32_t x, const ExternalSpan& e) { return x < e.first; });
        --it;  // every referenced slot lies in one interval
        return it->at + (slot - it->first);
    };
    // A span of the frame for an arena span, split where it crosses from external to local slots.
    auto map_span = [&](uint32_t first, uint32_t len, std::vector<uint32_t>& out) {
        uint32_t count = 0;
        if (first < base && first + len > base) {
            out.push_back(map(first));
            out.push_back(base - first);
            out.push_back(map(base));
            out.push_back(first + len - base);
            count = 2;
        } else {
            out.push_back(map(first));
            out.push_back(len);
            count = 1;
        }
        return count;
    };

    // 3. Kept records, renumbered.
    std::vector<uint32_t> new_index(r1 - r0, UINT32_MAX);
    for (size_t k = r0; k < r1; ++k) {
        if (!keep[k - r0]) continue;
        Record r = A.record(k);
        const uint32_t* p = aargs + r.a;
        new_index[k - r0] = static_cast<uint32_t>(P.recs.size());
        r.out = map(r.out);
        r.lo = 0;
        switch (op_info(r.op).kind) {
            case OpKind::leaf: break;
            case OpKind::unary:
            case OpKind::unary_imm: r.a = map(r.a); break;
            case OpKind::binary:
                r.a = map(r.a);
                r.b = map(r.b);
                break;
            case OpKind::nary: {
                r.a = static_cast<uint32_t>(P.args.size());
                for (uint32_t i = 0; i < r.b; ++i) P.args.push_back(map(p[i]));
                break;
            }
            case OpKind::range: {
                const uint32_t* end = p + r.b;
                r.a = static_cast<uint32_t>(P.args.size());
                const uint32_t kops = *p++;
                P.args.push_back(kops);
                for (uint32_t v = 0; v < kops; ++v) {
                    const uint32_t n = *p++;
                    const size_t count_at = P.args.size();
                    P.args.push_back(0);
                    uint32_t spans = 0;
                    for (uint32_t i = 0; i < n; ++i, p += 2) spans += map_span(p[0], p[1], P.args);
                    P.args[count_at] = spans;
                }
                P.args.insert(P.args.end(), p, end);  // the op's tail, unchanged
                r.b = static_cast<uint32_t>(P.args.size() - r.a);
                break;
            }
        }
        P.recs.push_back(r);
    }

    // 4. The reverse sweep: kept records with an argument that depends on a wrt node.
    std::vector<char> dep(P.frame_size(), 0);
    for (const Span& w : s.wrt)
        for (uint32_t i = 0; i < w.second; ++i) {
            const uint32_t f = map(w.first + i);
            dep[f] = 1;
            (void)f;
        }
    for (size_t k = 0; k < P.recs.size(); ++k) {
        const Record& r = P.recs[k];
        bool d = false;
        for_each_arg_span(r, P.args.data() + r.a, [&](uint32_t first, uint32_t len) {
            for (uint32_t i = 0; i < len && !d; ++i) d = dep[first + i];
        });
        if (!d) continue;
        P.sweep.push_back(static_cast<uint32_t>(k));
        std::fill(dep.begin() + r.out, dep.begin() + r.out + r.nout, char(1));
    }
    std::vector<Span> touched;
    for (uint32_t k : P.sweep) {
        const Record& r = P.recs[k];
        touched.emplace_back(r.out, r.nout);
        for_each_arg_span(r, P.args.data() + r.a, [&](uint32_t first, uint32_t len) {
            if (first >= P.n_ext) touched.emplace_back(first, len);
        });
    }

    // 5. Inputs, ids, guards, wrt, root.
    P.local_init.assign(A.values() + base, A.values() + top);
    for (uint32_t in : s.inputs) {
        if (in < base || in >= top) throw std::invalid_argument("a program input is not a node of the trace");
        P.inputs.push_back(map(in));
    }
    P.num_ids = s.num_ids;
    P.id_bound.assign(s.num_ids, UINT32_MAX);
    for (const IdInput& id : s.ids) {
        if (id.rec < r0 || id.rec >= r1 || id.position >= s.num_ids)
            throw std::invalid_argument("an id input refers to no record of the trace");
        P.id_bound[id.position] = std::min(P.id_bound[id.position], id.bound);
        const uint32_t k = new_index[id.rec - r0];
        if (k == UINT32_MAX) continue;  // its record does not lead to the root
        const Record& r = P.recs[k];
        P.id_slots.emplace_back(r.a + r.b - 1 - id.from_end, id.position);
    }
    for (Guard g : s.guards) {
        g.a = map(g.a);
        if (!g.rhs_const) g.b = map(g.b);
        P.guards.push_back(std::move(g));
    }
    for (const Span& w : s.wrt) {
        // wrt spans stay whole: a span either lies below the trace or inside it
        P.wrt.emplace_back(map(w.first), w.second);
        P.num_wrt += w.second;
        if (P.wrt.back().first >= P.n_ext) touched.push_back(P.wrt.back());
    }
    P.sweep_grads = grads_to_zero(P, merged(std::move(touched)), map(s.root));
    std::vector<Span> ext_wrt;
    for (const Span& w : P.wrt)
        if (w.first < P.n_ext) ext_wrt.push_back(w);
    uint32_t at = 0;
    for (const Span& w : merged(std::move(ext_wrt))) {
        if (w.first > at) P.ext_not_wrt.emplace_back(at, w.first - at);
        at = std::max(at, w.first + w.second);
    }
    if (at < P.n_ext) P.ext_not_wrt.emplace_back(at, P.n_ext - at);
    for (const Record& r : P.recs) {
        if (!reads_linear_weight(r.op)) continue;
        const Operands o = decode_operands(P.args.data() + r.a);
        const uint32_t rows = o.tail[0], nin = o.tail[1], nout = o.tail[2], w = o.v[1].first(0);
        const bool seen = std::any_of(P.transposed_weights.begin(), P.transposed_weights.end(),
                                      [&](const auto& t) { return t.slot == w; });
        // (a lookup's layer reads W as it is)
        if (r.op == Op::linear && linear_forward_transposes_w(rows, nin, nout) && w + nin * nout <= P.n_ext && !seen)
            P.transposed_weights.push_back({w, nout, nin});
        if (w + nin * nout <= P.n_ext) P.arena_weights.emplace_back(w, nin * nout);
    }
    P.root = map(s.root);
    P.arena_weights = only_read_as_weights(P, distinct_weights(std::move(P.arena_weights)));
    find_gather_linears(P);
    return P;
}

// ---------------------------------------------------------------- replay
// Samples per call from which prepare() transposes the linear layers' weights once for all of
// them. A call of one sample (a chunk replayed by each thread) packs W's rows straight into its
// tiles' panels instead, which costs less than the transpose plus packing from W^T (packing from
// W costs about as much as the transpose alone).
inline constexpr size_t kTransposeWeightsFromSamples = 2;

// Lays the workspace out for P (once: sizes, constants, args) and loads what stays fixed during
// one call of `samples` samples: the external values, read from the arena (parameters change
// between calls; the arena weights are only pointed at), and, for calls of many samples, the
// transposed copies of the linear layers' weights. Every external grad starts the call at zero.
template <typename T>
inline void prepare(const Program<T>& P, Workspace<T>& W, const T* arena_values, size_t samples = size_t(-1)) {
    if (W.laid_out_for != &P) {
        W.v.assign(P.frame_size(), T(0));
        W.g.assign(P.frame_size(), T(0));
        std::copy(P.local_init.begin(), P.local_init.end(), W.v.begin() + P.n_ext);
        W.args = P.args;
        W.laid_out_for = &P;
        W.wrt_grads_zero = true;
    }
    // Every external value but the arena weights, which the replay reads in place.
    W.w_index.clear();
    auto w = P.arena_weights.begin();
    for (const ExternalSpan& e : P.ext) {
        uint32_t at = e.at;
        const uint32_t end = e.at + e.len;
        auto copy_to = [&](uint32_t stop) {
            std::copy(arena_values + e.first + (at - e.at), arena_values + e.first + (stop - e.at), W.v.begin() + at);
        };
        for (; w != P.arena_weights.end() && w->first < end; ++w) {  // weights lie inside one span each
            copy_to(w->first);
            W.w_index.emplace_back(w->first, arena_values + e.first + (w->first - e.at));
            at = w->first + w->second;
        }
        copy_to(end);
    }
    if (W.wrt_grads_zero)
        for (const Span& s : P.ext_not_wrt) std::fill(W.g.begin() + s.first, W.g.begin() + s.first + s.second, T(0));
    else
        std::fill(W.g.begin(), W.g.begin() + P.n_ext, T(0));
    W.wrt_grads_zero = false;  // the replay adds into them
    W.wt_index.clear();
    if (samples < kTransposeWeightsFromSamples) return;
    size_t total = 0;
    for (const auto& t : P.transposed_weights) total += size_t(t.rows) * t.cols;
    W.wt.resize(total);
    T* dst = W.wt.data();
    for (const auto& t : P.transposed_weights) {
        gemm::transpose(W.frame().weight(t.slot), t.rows, t.cols, t.cols, dst, t.rows);  // cols x rows
        W.wt_index.emplace_back(t.slot, dst);
        dst += size_t(t.rows) * t.cols;
    }
}

// Writes one sample's float inputs and ids (ids already checked against their bounds).
template <typename T>
inline void set_sample(const Program<T>& P, Workspace<T>& W, const double* x, const uint32_t* ids) {
    for (size_t i = 0; i < P.inputs.size(); ++i) W.v[P.inputs[i]] = static_cast<T>(x[i]);
    for (const auto& [at, pos] : P.id_slots) W.args[at] = ids[pos];
}

// Which of P's gather_linears this call runs as one op (W.pair_tasks), and their buffers.
// Returns whether any.
template <typename T>
inline bool plan_gather_linears(const Program<T>& P, Workspace<T>& W, const Frame<T>& f) {
    const size_t np = P.gather_linears.size();
    W.pair_tasks.assign(np, 0);
    W.pair_at.assign(np, 0);
    size_t total = 0;
    for (size_t p = 0; p < np; ++p) {
        const auto& gl = P.gather_linears[p];
        W.pair_tasks[p] = gather_linear_tasks(f, P.recs[gl.linear], W.args.data());
        W.pair_at[p] = total;
        if (W.pair_tasks[p])
            total += gather_linear_buffer(P.recs[gl.gather], P.recs[gl.linear], W.args.data(), W.pair_tasks[p]);
    }
    if (W.pair_buf.size() < total) W.pair_buf.resize(total);
    return total > 0;
}

// Runs every record forward. Returns the index of the first guard that fails, or -1.
template <typename T>
inline long run_forward(const Program<T>& P, Workspace<T>& W) {
    const Frame<T> f = W.frame();
    const uint32_t* args = W.args.data();
    if (P.gather_linears.empty() || !plan_gather_linears(P, W, f))
        for (const Record& r : P.recs) forward_record(f, r, args);
    else
        for (size_t k = 0; k < P.recs.size(); ++k) {
            const int32_t p = P.pair_of[k];
            if (p < 0 || !W.pair_tasks[size_t(p)]) {
                forward_record(f, P.recs[k], args);
            } else if (P.gather_linears[size_t(p)].linear == k) {  // the lookup runs here too
                const auto& gl = P.gather_linears[size_t(p)];
                gather_linear_forward(f, P.recs[gl.gather], P.recs[k], args, W.pair_tasks[size_t(p)],
                                      W.pair_buf.data() + W.pair_at[size_t(p)]);
            }
        }
    for (size_t i = 0; i < P.guards.size(); ++i)
        if (!guard_holds(P.guards[i], W.v.data())) return long(i);
    return -1;
}

// The reverse sweep from the root with `seed`. The local grads the sweep uses are zeroed first;
// external grads accumulate (take_wrt_grads hands them out and zeroes them between samples).
// Like the arena's sweep, a record whose outputs carry no gradient is skipped, so both add the
// very same contributions.
template <typename T>
inline void run_backward(const Program<T>& P, Workspace<T>& W, T seed) {
    for (const Span& s : P.sweep_grads) std::fill(W.g.begin() + s.first, W.g.begin() + s.first + s.second, T(0));
    W.g[P.root] += seed;
    const Frame<T> f = W.frame();
    const uint32_t* args = W.args.data();
    const T* g = W.g.data();
    Frame<T> first = f;
    first.first_write = true;
    for (size_t i = P.sweep.size(); i-- > 0;) {
        const Record& r = P.recs[P.sweep[i]];
        const int32_t p = P.pair_of.empty() ? -1 : P.pair_of[P.sweep[i]];
        const bool pair = p >= 0 && W.pair_tasks[size_t(p)];
        // x of a pair run as one op has no grads: its lookup is not looked at (a scan of them
        // all, as zero, for `live` would be a large part of a small step)
        if (pair && P.gather_linears[size_t(p)].gather == P.sweep[i]) continue;
        bool live = g[r.out] != T(0);
        for (uint32_t j = 1; !live && j < r.nout; ++j) live = g[r.out + j] != T(0);
        const bool writes = P.first_write[P.sweep[i]] != 0;
        if (pair) {
            if (live)
                gather_linear_backward(f, P.recs[P.gather_linears[size_t(p)].gather], r, args, W.pair_tasks[size_t(p)],
                                       W.pair_buf.data() + W.pair_at[size_t(p)]);
        } else if (live)
            backward_record(writes ? first : f, r, args);
        else if (writes)  // the grads it would have written, as sweep_grads would have left them
            zero_spans(W.g.data(), decode_operands(args + r.a).v[0]);
    }
}

// The grads of the wrt nodes, in order, written (add = false) or added (add = true) to out.
template <typename T, typename U>
inline void read_wrt_grads(const Program<T>& P, const Workspace<T>& W, U* out, bool add) {
    for (const Span& s : P.wrt) {
        const T* g = W.g.data() + s.first;
        if (add)
            for (uint32_t i = 0; i < s.second; ++i) out[i] += U(g[i]);
        else
            for (uint32_t i = 0; i < s.second; ++i) out[i] = U(g[i]);
        out += s.second;
    }
}

// Copies n values into memory nothing reads again soon (a row of a per-sample gradient matrix):
// long runs use non-temporal stores where the CPU has them, so writing the output does not first
// read each of its cache lines in from memory.
template <typename T>
inline void copy_out(const T* src, T* dst, size_t n) {
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        constexpr size_t lane = 16 / sizeof(T), long_run = 4096;
        if (n >= long_run && reinterpret_cast<uintptr_t>(dst) % sizeof(T) == 0) {
            size_t i = 0;
            for (; reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i) dst[i] = src[i];
            for (; i + lane <= n; i += lane) {
                if constexpr (std::is_same_v<T, float>)
                    _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
                else
                    _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
            }
            for (; i < n; ++i) dst[i] = src[i];
            _mm_sfence();
            return;
        }
    }
#endif
    std::copy(src, src + n, dst);
}

// read_wrt_grads, then zeroes those grads: one pass, so the next sample starts from zero without
// a separate zeroing pass over the parameters. stream: out is memory that was written before
// (an output reused across calls), so non-temporal stores skip reading it in; into freshly
// allocated pages, which the kernel has just zeroed through the caches, plain stores are faster.
template <typename T, typename U>
inline void take_wrt_grads(const Program<T>& P, Workspace<T>& W, U* out, bool add, bool stream = false) {
    for (const Span& s : P.wrt) {
        T* g = W.g.data() + s.first;
        if (add)
            for (uint32_t i = 0; i < s.second; ++i) out[i] += U(g[i]);
        else if (std::is_same_v<T, U> && stream)
            copy_out(g, reinterpret_cast<T*>(out), s.second);
        else
            for (uint32_t i = 0; i < s.second; ++i) out[i] = U(g[i]);
        std::fill(g, g + s.second, T(0));
        out += s.second;
    }
}

// Zeroes the external grads.
template <typename T>
inline void zero_external_grads(const Program<T>& P, Workspace<T>& W) {
    std::fill(W.g.begin(), W.g.begin() + P.n_ext, T(0));
}

// What a replay over many samples does with each sample.
enum class Reduce : uint8_t {
    values,      // the forward only: each sample's root value
    rows,        // each sample's wrt grads into its own row of `rows`
    sum,         // every sample's wrt grads added into `sum` (float64)
    accumulate,  // the wrt grads accumulate in the workspace across samples (read them after)
};

// n samples: float inputs x (n x inputs, row-major) and ids (n x num_ids, already checked).
struct Samples {
    size_t n = 0;
    const double* x = nullptr;
    const uint32_t* ids = nullptr;
};

// What replay() reports: the samples whose guards failed (nothing was written for them), and the
// first sample whose root was not finite when `stop_at_non_finite` (the replay stopped there,
// before its sweep).
struct ReplayResult {
    std::vector<size_t> failed;
    long non_finite = -1;
};

// Replays samples [0, n) against a workspace prepare()d for P. `values` (n, or null) receives
// each sample's root value; `rows` (n x num_wrt) and `sum` (num_wrt) per `reduce`.
template <typename T>
inline ReplayResult replay(const Program<T>& P, Workspace<T>& W, const Samples& in, Reduce reduce, T seed,
                           double* values, T* rows, double* sum, bool stop_at_non_finite, bool stream_rows = false) {
    ReplayResult res;
    const size_t k = P.inputs.size(), nid = P.num_ids;
    for (size_t s = 0; s < in.n; ++s) {
        set_sample(P, W, in.x + s * k, in.ids + s * nid);
        if (run_forward(P, W) >= 0) {
            res.failed.push_back(s);
            continue;
        }
        const T y = W.v[P.root];
        if (values) values[s] = double(y);
        if (reduce == Reduce::values) continue;
        if (stop_at_non_finite && !std::isfinite(y)) {
            res.non_finite = long(s);
            return res;
        }
        run_backward(P, W, seed);
        if (reduce == Reduce::rows)
            take_wrt_grads(P, W, rows + s * P.num_wrt, false, stream_rows);
        else if (reduce == Reduce::sum)
            take_wrt_grads(P, W, sum, true);
    }
    W.wrt_grads_zero = reduce != Reduce::accumulate;  // each sample's were taken (or never written)
    return res;
}

}  // namespace bt
