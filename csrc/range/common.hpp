// What every range op shares: vector operands as span lists, their encoding in a record's args,
// gathering them into contiguous scratch, and appending a range record.
//
// A vector operand is a list of spans (first slot, length) over the arena, so a concatenation,
// a slice or an embedding lookup is a new span list and copies no values. In `args` a range
// record stores
//   [k] then k times [nspans, first0, len0, first1, len1, ...] then an op-specific tail
// which ArenaBase::record_args() decodes for every range op alike. Outputs are always one
// contiguous span. Inputs that are not contiguous are gathered into scratch (O(n), small next to
// the O(n * m) kernels), so every kernel runs over contiguous memory.
//
// Each family header (map, reduce, linear, softmax, norm, attention) defines, per op, an append
// function (checks nothing: the bindings validated), a forward that computes the outputs from a
// record's args (appending and program replay both run it) and a backward; dispatch.hpp maps op
// codes to them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "../arena.hpp"
#include "../threads.hpp"

namespace bt {

using Span = ArenaBase::Span;
using Spans = std::vector<Span>;

// A range record's forward, by its op (dispatch.hpp): the append_* functions run their new
// record through it, so the kernels are compiled where range_forward is instantiated.
template <typename T>
void range_forward(const Frame<T>& A, const Record& r, const uint32_t* rargs);

// A decoded view of one vector operand inside a record's args.
struct SpanList {
    const uint32_t* p = nullptr;  // points at first0
    uint32_t n = 0;               // number of spans
    uint32_t first(uint32_t s) const { return p[2 * s]; }
    uint32_t len(uint32_t s) const { return p[2 * s + 1]; }
    size_t total() const {
        size_t t = 0;
        for (uint32_t s = 0; s < n; ++s) t += len(s);
        return t;
    }
};

// The operands of a range record and the op-specific tail after them.
struct Operands {
    SpanList v[4];
    uint32_t k = 0;
    const uint32_t* tail = nullptr;
};

inline Operands decode_operands(const uint32_t* p) {
    Operands o;
    o.k = *p++;
    for (uint32_t i = 0; i < o.k; ++i) {
        uint32_t n = *p++;
        if (i < 4) {
            o.v[i].n = n;
            o.v[i].p = p;
        }
        p += 2 * size_t(n);
    }
    o.tail = p;
    return o;
}

inline size_t total_len(const Spans& s) {
    size_t t = 0;
    for (const Span& x : s) t += x.second;
    return t;
}

// ---- moving values between span lists and contiguous buffers ----
// Values above which a gather or a scatter-add splits across the pool: a chunk's embedded rows
// (64 samples x 16 ids x 64 values) are copied before each of its layer's products and their
// gradient added back after, and the other threads would otherwise wait for one to do it.
inline constexpr double kParallelGather = 1 << 15;

// Tasks a gather or scatter-add over s splits into. The walk over the spans that counts their
// values is skipped where nothing could split (one thread, or inside a task, where a replay's
// records run).
inline size_t span_tasks(const SpanList& s) {
    if (s.n < 2 || !threads::can_split()) return 1;
    return threads::tasks_for(double(s.total()), kParallelGather, s.n);
}

template <typename T>
inline void gather(const T* src, const SpanList& s, T* dst) {
    auto copy = [&](uint32_t i0, uint32_t i1, T* d) {
        for (uint32_t i = i0; i < i1; ++i) {
            std::copy(src + s.first(i), src + s.first(i) + s.len(i), d);
            d += s.len(i);
        }
    };
    const size_t tasks = span_tasks(s);
    if (tasks <= 1) return copy(0, s.n, dst);
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [i0, i1] = threads::split(s.n, tasks, t);
        size_t at = 0;  // where span i0 lands: the lengths before it
        for (size_t i = 0; i < i0; ++i) at += s.len(uint32_t(i));
        copy(uint32_t(i0), uint32_t(i1), dst + at);
    });
}
// [lowest, past the highest) slot of spans s (at least one span).
inline std::pair<size_t, size_t> slot_range(const SpanList& s) {
    size_t lo = SIZE_MAX, hi = 0;
    for (uint32_t i = 0; i < s.n; ++i) {
        lo = std::min<size_t>(lo, s.first(i));
        hi = std::max<size_t>(hi, size_t(s.first(i)) + s.len(i));
    }
    return {lo, hi};
}

// dst's spans = 0 + src (scatter_add into zeroed spans, without reading them), split like it.
template <typename T>
inline void scatter_first(T* dst, const SpanList& s, const T* src) {
    auto write = [&](size_t d0, size_t d1) {
        const T* from = src;
        for (uint32_t i = 0; i < s.n; ++i) {
            const size_t f = s.first(i), end = f + s.len(i);
            for (size_t j = std::max(f, d0); j < std::min(end, d1); ++j) dst[j] = from[j - f] + T(0);
            from += s.len(i);
        }
    };
    if (s.n == 0) return;
    // plain locals, not a structured binding: the lambda below captures them, which clang (16-20)
    // refuses for bindings under -fopenmp-simd
    const std::pair<size_t, size_t> range = slot_range(s);
    const size_t lo = range.first, hi = range.second;
    const size_t tasks = span_tasks(s);
    if (tasks <= 1) return write(lo, hi);
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [b, e] = threads::split(hi - lo, tasks, t, 16);
        write(lo + b, lo + e);
    });
}

// Zeroes the grads of spans s (what sweep_grads would have zeroed for a first writer the sweep skips).
template <typename T>
inline void zero_spans(T* g, const SpanList& s) {
    for (uint32_t i = 0; i < s.n; ++i) std::fill(g + s.first(i), g + s.first(i) + s.len(i), T(0));
}

// dst[s] += src, span by span in order. A large one splits the destination slots into ranges,
// each task adding, span by span in the same order, only what lands in its range: every slot
// gets its additions in the order one thread would make them, whatever the spans' overlaps
// (the rows of an embedding table that a chunk's ids repeat).
// first: dst's spans were never zeroed and nothing has added into them (Frame::first_write): each
// slot is written 0 + src instead (the bits of the add into a zeroed slot; + 0 turns a -0 into 0).
template <typename T>
inline void scatter_add(T* dst, const SpanList& s, const T* src, bool first = false) {
    if (first) return scatter_first(dst, s, src);
    const size_t tasks = span_tasks(s);
    if (tasks <= 1) {
        for (uint32_t i = 0; i < s.n; ++i) {
            T* d = dst + s.first(i);
            for (uint32_t j = 0; j < s.len(i); ++j) d[j] += src[j];
            src += s.len(i);
        }
        return;
    }
    // plain locals, not a structured binding: the lambda below captures them, which clang (16-20)
    // refuses for bindings under -fopenmp-simd
    const std::pair<size_t, size_t> range = slot_range(s);
    const size_t lo = range.first, hi = range.second;
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [b, e] = threads::split(hi - lo, tasks, t, 16);  // ranges a whole number of 16 slots
        const size_t d0 = lo + b, d1 = lo + e;
        const T* from = src;
        for (uint32_t i = 0; i < s.n; ++i) {
            const size_t f = s.first(i), end = f + s.len(i);
            for (size_t j = std::max(f, d0); j < std::min(end, d1); ++j) dst[j] += from[j - f];
            from += s.len(i);
        }
    });
}
// Contiguous pointer to an operand: the slots themselves if it is one span, else a gathered copy.
template <typename T>
inline const T* contiguous(const T* base, const SpanList& s, T* scratch) {
    if (s.n == 1) return base + s.first(0);
    gather(base, s, scratch);
    return scratch;
}

// Range ops over many independent items (rows, elements, sequence x head pairs) split them across
// the thread pool when there are at least kParallelItemWork units of work (a unit is roughly one
// arithmetic operation, so tens of microseconds on one core, while starting a region costs
// microseconds), each task a contiguous block of items that it alone writes, so results do not
// depend on the split. f(first, last) runs each block.
inline constexpr double kParallelItemWork = 1 << 15;

// min_block: the fewest items a task may get (blocks of adjacent accumulators that would share
// cache lines between threads, as a layer norm's gamma and beta grads over few columns do, run
// faster on one thread than ping-ponging their lines between two).
template <class F>
inline void for_item_blocks(size_t items, double work_per_item, F&& f, size_t min_block = 1) {
    const size_t tasks =
        threads::tasks_for(double(items) * work_per_item, kParallelItemWork, items / std::max<size_t>(min_block, 1));
    if (tasks <= 1) return f(size_t(0), items);
    threads::parallel_tasks(tasks, [&](size_t t) {
        const auto [b, e] = threads::split(items, tasks, t);
        f(b, e);
    });
}

// Defined in forward.hpp, which includes the range headers: raises AnomalyError when an output
// of the op just appended is not finite.
template <typename T>
inline void check_outputs(const Arena<T>& A, Op op, uint32_t out, uint32_t nout);

// The forward of a range record just appended, then, under detect_anomaly, the check of its
// outputs (as every scalar op's): every eager range op goes through here.
template <typename T>
inline void forward_appended(Arena<T>& A, const Appended& ap) {
    range_forward(A.frame(), ap.rec, ap.args);
    if (anomaly_enabled()) check_outputs(A, ap.rec.op, ap.out, ap.rec.nout);
}

// Appends a range record over vector operands `ops` with an op-specific tail (tail, then tail2),
// and nout fresh output slots. All-or-nothing on capacity; sizes are checked before narrowing.
template <typename T>
inline Appended append_range(Arena<T>& A, Op op, std::initializer_list<const Spans*> ops, const uint32_t* tail,
                             size_t ntail, size_t nout, uint16_t c = 0, double imm = 0.0,
                             const uint32_t* tail2 = nullptr, size_t ntail2 = 0) {
    size_t nargs = 1 + ntail + ntail2;
    uint32_t lo = kNoRecord;
    for (const Spans* o : ops) {
        nargs += 1 + 2 * o->size();
        for (const Span& s : *o) lo = std::min(lo, A.lo_of_span(s.first, s.second));
    }
    return A.append(op, nout, nargs, lo, c, imm, [&](uint32_t* p) {
        *p++ = static_cast<uint32_t>(ops.size());
        for (const Spans* o : ops) {
            *p++ = static_cast<uint32_t>(o->size());
            for (const Span& s : *o) {
                *p++ = s.first;
                *p++ = s.second;
            }
        }
        for (size_t i = 0; i < ntail; ++i) *p++ = tail[i];
        for (size_t i = 0; i < ntail2; ++i) *p++ = tail2[i];
    });
}

}  // namespace bt
