// The arena: every scalar of a graph is one slot; every op application is one record.
//
//   slots    value[i], grad[i], gen[i], lo[i]   struct of arrays, allocated sequentially
//   records  {op, outputs, argument refs, lo, immediate}, appended in creation order
//   args     argument slot indices of var-arity and range records, one shared array
//
// Records are appended after their arguments exist, so reverse creation order is a valid reverse
// topological order: backward is one reverse loop (backward.hpp), with no recursion, no visited
// set and no allocation. checkpoint()/rewind() truncate all three arrays; gen[i] stamps each slot
// with the arena's 64-bit epoch at allocation so that a handle to a rewound slot is detected as
// stale (a 32-bit epoch wraps after 2^32 rewinds, a few minutes of a tight loop).
//
// lo bounds the sweep: a record's lo is the lowest record index its outputs depend on, one min
// per append. Backward from a root visits records [lo, root's record] only, so a loop that never
// rewinds costs the same per step forever instead of sweeping every earlier step's records.
//
// pins[i] counts the live handles (Values, Vectors, numpy views, checkpoints) whose highest slot
// is i. Nodes depend only on lower slots, so nothing above the highest pinned slot can still be
// read: when the last pin of the top slot goes, reclaim_top() truncates the arena down to the
// highest pinned slot exactly as a rewind would (new epoch, so a stale handle stays detected).
//
// Compaction: a loop that builds the next graph while the previous one's root is still bound
// (micrograd's `total_loss = loss()`, PyTorch's `loss = model(batch)`) frees the old graph only
// once the new one sits above it, so the old graph is a hole below a pinned node that top
// reclamation cannot reach. Reusing the hole by splitting a new graph around it would be unsafe:
// backward visits the records [lo, root] in order, so a graph split around another live one would
// sweep that one's records too. Instead compact() slides the graph above the hole down over it:
// values, grads, bounds, pins, records and args move as blocks, and every slot and record index at
// or above the hole's end is lowered by the hole's size. The moved slots get a new epoch, so a
// handle still holding an old position never reads what now lives there; the move is logged
// (Relocation) and a handle that looks stale consults the log once (relocate) and retargets itself.
// Compaction refuses (and the hole stays) when any moved record reads the hole, and when anything
// that cannot be retargeted lies in the moved range: a Vector, a numpy view or a checkpoint (their
// pins are counted apart, in fixed_), a trace. It runs only at a safe point (the start of a sweep)
// where no binding holds a raw slot index, and costs about what building the moved graph cost.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "column.hpp"
#include "frame.hpp"
#include "half.hpp"
#include "modes.hpp"
#include "ops.hpp"
#include "threads.hpp"

namespace bt {

// The storage types of an arena's values and grads. The 16-bit ones (half.hpp) compute in float.
enum class DType : uint8_t { float32 = 0, float64 = 1, bfloat16 = 2, float16 = 3 };

template <typename T>
inline constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, double>) return DType::float64;
    if constexpr (std::is_same_v<T, bfloat16>) return DType::bfloat16;
    if constexpr (std::is_same_v<T, float16>) return DType::float16;
    return DType::float32;
}

inline constexpr uint32_t kNoRecord = UINT32_MAX;  // lo of a leaf: depends on no record

struct Record {
    Op op;
    uint16_t c;     // op-specific small integer (the scalar op of a map record)
    uint32_t out;   // first output slot
    uint32_t nout;  // number of output slots
    uint32_t a;     // unary/binary: first argument slot;  nary/range: offset into args
    uint32_t b;     // binary: second argument slot;       nary/range: number of args entries
    uint32_t lo;    // lowest record index the outputs depend on (this record's own index at most)
    double imm;     // op-specific constant
};
static_assert(sizeof(Record) == 32, "records are meant to pack into 32 bytes");

struct Mark {
    uint64_t arena_id = 0;
    uint32_t slots = 0, records = 0, args = 0;
    uint64_t last_gen = 0;  // gen of slot (slots - 1) when taken; detects a discarded mark
};

struct Capacity {
    size_t slots = size_t(1) << 28;
    size_t records = size_t(1) << 27;
    size_t args = size_t(1) << 29;
};

// Narrows a count to the 32-bit indices of records and slots, or throws CapacityError.
inline uint32_t checked_u32(size_t n) {
    if (n > size_t(UINT32_MAX) - 1) throw CapacityError("too many nodes for one op: " + std::to_string(n));
    return static_cast<uint32_t>(n);
}

// What an append produced: where the outputs are, the record (a copy; with gradients off it is
// not stored in the arena) and its arguments.
struct Appended {
    uint32_t out;
    Record rec;
    const uint32_t* args;
};

class ArenaBase {
public:
    // Columns indexed alike start at different offsets within a page (see column.hpp).
    static constexpr size_t kSkew = 640;

    ArenaBase(DType dtype, const Capacity& cap)
        : dtype_(dtype),
          gen_col_(cap.slots, 2 * kSkew),
          lo_col_(cap.slots, 3 * kSkew),
          rec_col_(cap.records, 4 * kSkew),
          args_col_(cap.args, 5 * kSkew),
          pin_col_(cap.slots, 6 * kSkew),
          id_(next_id()) {
        gen_ = gen_col_.data();
        lo_ = lo_col_.data();
        recs_ = rec_col_.data();
        args_ = args_col_.data();
        pins_ = pin_col_.data();
    }
    virtual ~ArenaBase() = default;

    DType dtype() const { return dtype_; }
    uint64_t id() const { return id_; }
    uint64_t epoch() const { return epoch_; }
    size_t num_slots() const { return nslots_; }
    size_t num_records() const { return nrecords_; }
    size_t num_args() const { return nargs_; }
    const Record& record(size_t r) const { return recs_[r]; }
    const uint32_t* args() const { return args_; }
    virtual size_t value_size() const = 0;

    bool alive(uint32_t idx, uint64_t gen) const { return idx < nslots_ && gen_[idx] == gen; }
    uint64_t gen_of(uint32_t idx) const { return gen_[idx]; }
    uint32_t lo_of(uint32_t idx) const { return lo_[idx]; }

    // Lowest record the nodes [first, first + len) depend on (kNoRecord if all are leaves).
    // Short spans are scanned; long ones look only at the records writing into them, which are
    // few (one for the output of a range op, none for a parameter block).
    uint32_t lo_of_span(uint32_t first, uint32_t len) const {
        uint32_t lo = kNoRecord;
        if (len <= 32) {
            for (uint32_t i = 0; i < len; ++i) lo = std::min(lo, lo_[first + i]);
            return lo;
        }
        const uint64_t end = uint64_t(first) + len;
        size_t r = first_record_at_or_above(first);
        if (r > 0 && recs_[r - 1].out + uint64_t(recs_[r - 1].nout) > first) --r;
        for (; r < nrecords_ && recs_[r].out < end; ++r) lo = std::min(lo, recs_[r].lo);
        return lo;
    }

    Mark checkpoint() const {
        Mark m;
        m.arena_id = id_;
        m.slots = static_cast<uint32_t>(nslots_);
        m.records = static_cast<uint32_t>(nrecords_);
        m.args = static_cast<uint32_t>(nargs_);
        m.last_gen = m.slots ? gen_[m.slots - 1] : 0;
        return m;
    }
    // Why a mark cannot be rewound to, or nullptr if it can.
    const char* mark_problem(const Mark& m) const {
        if (m.arena_id != id_) return "the checkpoint belongs to another arena";
        if (m.slots > nslots_ || m.records > nrecords_ || m.args > nargs_ ||
            (m.slots && gen_[m.slots - 1] != m.last_gen))
            return "the checkpoint was discarded by an earlier rewind below it";
        return nullptr;
    }
    void rewind(const Mark& m) {
        nslots_ = m.slots;
        nrecords_ = m.records;
        nargs_ = m.args;
        if (dirty_ > m.records) dirty_ = m.records;
        if (!labels_.empty()) labels_.erase(labels_.lower_bound(m.slots), labels_.end());
        drop_fixed_from(m.slots);
        ++epoch_;
        ++rewinds_;
        sweeps_since_rewind_ = 0;
        slots_at_rewind_ = m.slots;
    }
    // Forgets the slots from `first` up, which were just appended and which nothing refers to: the
    // constants of an op that failed after creating them. Unlike a rewind this is not an event
    // (no new epoch); records and args are not touched, as none were appended after them.
    void drop_top_slots(size_t first) {
        if (first <= nslots_) nslots_ = first;
    }
    uint64_t rewinds() const { return rewinds_; }

    // ---- pins and automatic reclamation of the top ----
    void pin(uint32_t idx) { ++pins_[idx]; }
    // Drops a pin taken on (idx, gen). True when that was the top slot's last pin: the caller may
    // then reclaim_top(). A handle made stale by a rewind holds no pin (its slot was reissued).
    // The last pin of a record-written slot below the top may leave a hole: the lowest such slot
    // since the previous safe point is remembered for the next one (maybe_compact).
    bool unpin(uint32_t idx, uint64_t gen) {
        if (!alive(idx, gen)) return false;
        return unpin_alive(idx);
    }
    // unpin() of a handle already known to be alive.
    bool unpin_alive(uint32_t idx) {
        if (--pins_[idx] != 0) return false;
        if (size_t(idx) + 1 == nslots_) return true;
        if (idx < hole_low_ && lo_[idx] != kNoRecord) hole_low_ = idx;
        return false;
    }
    // What holds a pin that a compaction cannot retarget (pin_fixed/unpin_fixed).
    enum class Holder : uint8_t { vector = 0, checkpoint = 1 };
    void pin_fixed(uint32_t idx, Holder h) {
        ++pins_[idx];
        // Kept sorted by slot. A new Vector's top is usually the arena's newest slot and views go
        // roughly in reverse order of creation, so inserts and erases happen near the end.
        if (fixed_.empty() || fixed_.back().slot < idx) {
            fixed_.push_back(FixedPin{idx, {0, 0}});
            ++fixed_.back().n[int(h)];
            return;
        }
        auto it = fixed_lower_bound(idx);
        if (it == fixed_.end() || it->slot != idx) it = fixed_.insert(it, FixedPin{idx, {0, 0}});
        ++it->n[int(h)];
    }
    bool unpin_fixed(uint32_t idx, uint64_t gen, Holder h) {
        if (!alive(idx, gen)) return false;
        auto it = (!fixed_.empty() && fixed_.back().slot == idx) ? fixed_.end() - 1 : fixed_lower_bound(idx);
        if (it != fixed_.end() && it->slot == idx && it->n[int(h)] && --it->n[int(h)] == 0 && it->n[1 - int(h)] == 0)
            fixed_.erase(it);
        return unpin_alive(idx);
    }
    // Pins of slot idx held by Vectors (and numpy views over them) and by checkpoints.
    std::pair<uint32_t, uint32_t> fixed_pins_of(uint32_t idx) const {
        auto it = std::lower_bound(fixed_.begin(), fixed_.end(), idx,
                                   [](const FixedPin& f, uint32_t i) { return f.slot < i; });
        return (it == fixed_.end() || it->slot != idx) ? std::pair<uint32_t, uint32_t>{0, 0}
                                                       : std::pair{it->n[0], it->n[1]};
    }
    uint32_t pins_of(uint32_t idx) const { return pins_[idx]; }
    // One past the highest pinned slot (0 if none): the arena cannot shrink below it.
    size_t pinned_top() const {
        size_t t = nslots_;
        while (t > 0 && pins_[t - 1] == 0) --t;
        return t;
    }
    // Truncates slots, records and args above the highest pinned slot (a record whose outputs
    // straddle it stays whole). Returns the number of slots reclaimed. Cost: the slots reclaimed.
    size_t reclaim_top() {
        size_t t = pinned_top();
        if (t == nslots_) return 0;
        size_t r = first_record_at_or_above(static_cast<uint32_t>(t));
        if (r > 0 && size_t(recs_[r - 1].out) + recs_[r - 1].nout > t) t = size_t(recs_[r - 1].out) + recs_[r - 1].nout;
        if (t >= nslots_) return 0;
        size_t args = nargs_;
        for (size_t q = r; q < nrecords_; ++q) {
            const OpKind k = op_info(recs_[q].op).kind;
            if (k == OpKind::nary || k == OpKind::range) {
                args = recs_[q].a;
                break;
            }
        }
        const size_t freed = nslots_ - t;
        nslots_ = t;
        nrecords_ = r;
        nargs_ = args;
        if (dirty_ > r) dirty_ = r;
        if (!labels_.empty()) labels_.erase(labels_.lower_bound(static_cast<uint32_t>(t)), labels_.end());
        drop_fixed_from(static_cast<uint32_t>(t));
        ++epoch_;
        ++reclaims_;
        reclaimed_slots_ += freed;
        sweeps_since_rewind_ = 0;
        slots_at_rewind_ = std::min(slots_at_rewind_, t);
        return freed;
    }
    uint64_t reclaims() const { return reclaims_; }
    uint64_t reclaimed_slots() const { return reclaimed_slots_; }

    // ---- compaction of a hole below the top (see the top of this file) ----
    // One move: the slots [from, to) went down by `shift` and were restamped with `epoch`. `runs`
    // holds their generations before the move, run-length encoded by first slot (generations never
    // decrease with the slot index, so there are few runs). `pending` counts the handle pins that
    // moved and have not retargeted themselves yet; the entry goes when it reaches zero.
    struct Relocation {
        uint64_t epoch;
        uint32_t from, to, shift;
        uint64_t pending;
        std::vector<std::pair<uint32_t, uint64_t>> runs;
        uint64_t gen_at(uint32_t idx) const {
            auto it = std::upper_bound(runs.begin(), runs.end(), idx,
                                       [](uint32_t i, const std::pair<uint32_t, uint64_t>& r) { return i < r.first; });
            return std::prev(it)->second;
        }
    };
    bool has_relocations() const { return !relocs_.empty(); }
    size_t num_relocations() const { return relocs_.size(); }
    // Retargets a handle (idx, gen) that looks stale through the moves made since it was taken.
    // True if it moved (it may still be stale: a rewind may have discarded its node since).
    // Exact: a move applies only to a handle whose slot held its generation when the move ran.
    bool relocate(uint32_t& idx, uint64_t& gen) {
        bool moved = false;
        for (size_t k = 0; k < relocs_.size();) {
            Relocation& r = relocs_[k];
            if (gen < r.epoch && idx >= r.from && idx < r.to && r.gen_at(idx) == gen) {
                idx -= r.shift;
                gen = r.epoch;
                moved = true;
                if (--r.pending == 0) {
                    relocs_.erase(relocs_.begin() + std::ptrdiff_t(k));
                    continue;
                }
            }
            ++k;
        }
        return moved;
    }
    uint64_t compactions() const { return compactions_; }
    bool wants_compaction() const { return hole_low_ != kNoHole; }
    // False (and forgets the releases) unless a release since the previous safe point lies below
    // the first record root depends on: releases inside root's own graph (the temporaries of a
    // loop that rewinds) cannot have left a hole below it. Three loads.
    bool hole_possible_below(uint32_t root) {
        if (root < nslots_ && lo_[root] != kNoRecord && hole_low_ < recs_[lo_[root]].out) return true;
        hole_low_ = kNoHole;
        return false;
    }
    // Why the last attempt to compact refused ("" if it compacted or none was made).
    const char* compaction_refused() const { return refused_; }
    // At a safe point (no raw slot index held by any caller), about to sweep from `root`: if a
    // handle's last pin went below the top since the previous safe point, looks for a hole right
    // below root's graph and closes it if that is worth it. Returns the slots reclaimed.
    //
    // The hole's top is the highest record-written slot below the first record root depends on,
    // past the leaves just below that record (the graph's inputs, made before it, bound or not:
    // they move with the graph): in a loop that rebinds its loss, the previous step's last node.
    // Nothing root's graph computes from lies between, so only the leaves it reads need checking
    // (reads_between, in compact_hole).
    size_t maybe_compact(uint32_t root) {
        if (!hole_possible_below(root)) [[likely]]
            return 0;
        const uint32_t low = hole_low_;
        hole_low_ = kNoHole;
        if (backoff_left_) {  // recent attempts refused for structural reasons: try less often
            --backoff_left_;
            return 0;
        }
        if (root >= nslots_ || lo_[root] == kNoRecord) return 0;
        uint32_t i = recs_[lo_[root]].out;
        size_t budget = std::max<size_t>(kMinHole, size_t(root) + 1 - i);
        while (i > 0 && lo_[i - 1] == kNoRecord && budget) {
            --i;
            --budget;
        }
        if (i == 0 || pins_[i - 1] != 0 || lo_[i - 1] == kNoRecord) return 0;
        const size_t got = compact_hole(i - 1);
        if (got)
            backoff_ = 0;
        else if (refused_structural_) {
            backoff_ = std::min<uint32_t>(backoff_ ? 2 * backoff_ : 1, 64);
            backoff_left_ = backoff_;
        } else if (refused_fixed_) {
            hole_low_ = low;  // the view or checkpoint may go before the next sweep: retry then
        }
        return got;
    }
    // Sweeps and nodes since the last rewind: how the bindings notice a loop that never rewinds.
    uint64_t sweeps_since_rewind() const { return sweeps_since_rewind_; }
    size_t slots_since_rewind() const { return nslots_ - std::min(nslots_, slots_at_rewind_); }
    bool growth_warned = false;
    // The thread that may reclaim this arena's top on a handle's release (0: any thread holding
    // the GIL). Set by the bindings to the owner of a thread's default arena, whose nodes another
    // thread must not pull from under it.
    unsigned long reclaim_thread = 0;  // set by the bindings once they warned about a loop that never rewinds

    // Slides everything above the hole ending at `root` (an unpinned slot a record wrote) down over
    // that hole. Returns the slots reclaimed, 0 if it refused (compaction_refused() says why).
    size_t compact_hole(uint32_t root) {
        refused_structural_ = refused_fixed_ = false;
        auto refuse = [&](const char* why, bool structural) -> size_t {
            refused_ = why;
            refused_structural_ = structural;
            return 0;
        };
        if (pins_[root] != 0 || size_t(root) + 1 >= nslots_ || lo_[root] == kNoRecord) return 0;
        const size_t n = nslots_;
        const uint32_t g1 = root + 1;
        const size_t moved = n - g1;
        // The graph the root was computed by starts at its lowest record's outputs; the hole may
        // reach below that (the graph's leaves, made before its first record) but not far: the
        // downward scan is bounded by the graph's size, so a refused attempt costs about that.
        const uint32_t base = recs_[lo_[root]].out;
        const size_t span = size_t(g1) - base;
        if (span < kMinHole || 2 * span < moved) return refuse("the hole is small against what lies above it", false);
        if (relocs_.size() >= kMaxRelocations) {
            refused_fixed_ = true;  // retried at the next sweep: the handles may have been used by then
            return refuse("too many moved handles have not been used since they moved", false);
        }
        if (!fixed_.empty() && fixed_.back().slot >= g1) {
            refused_fixed_ = true;
            return refuse("a Vector, a numpy view or a checkpoint shows nodes above the hole", false);
        }
        const size_t r1 = first_record_at_or_above(g1);
        if (r1 > 0 && size_t(recs_[r1 - 1].out) + recs_[r1 - 1].nout > g1)
            return refuse("a record's outputs straddle the hole's end", true);
        // Common refusals first and cheaply: a graph above that reads the root's own graph.
        if (reads_between(r1, base, g1)) return refuse("a node above the hole reads a node in it", true);
        const uint32_t floor = base > span ? uint32_t(base - span) : 0;
        uint32_t g0 = root;
        while (g0 > floor && pins_[g0 - 1] == 0) --g0;
        size_t r0 = first_record_at_or_above(g0);
        if (r0 > 0 && size_t(recs_[r0 - 1].out) + recs_[r0 - 1].nout > g0) {
            g0 = recs_[r0 - 1].out + recs_[r0 - 1].nout;  // keep a record whose outputs straddle g0 whole
        }
        if (g0 < base && reads_between(r1, g0, base)) {
            // the leaves just below the graph are read from above (the next graph's inputs):
            // the hole starts above them
            g0 = base;
            r0 = first_record_at_or_above(g0);
        }
        const size_t shift = g1 - g0;
        if (shift < kMinHole || 2 * shift < moved) return refuse("the hole is small against what lies above it", false);
        for (size_t q = r1; q < nrecords_; ++q)
            if (recs_[q].lo >= r0 && recs_[q].lo < r1)
                return refuse("a record above the hole depends on one in it", true);
        const size_t a1 = args_from(r1), a0 = std::min(args_from(r0), a1);
        const size_t rshift = r1 - r0, ashift = a1 - a0;

        // ---- the move (nothing below can fail) ----
        Relocation rel;
        rel.epoch = ++epoch_;
        rel.from = g1;
        rel.to = uint32_t(n);
        rel.shift = uint32_t(shift);
        rel.pending = 0;
        for (size_t i = g1; i < n; ++i) {
            rel.pending += pins_[i];
            if (rel.runs.empty() || rel.runs.back().second != gen_[i]) rel.runs.emplace_back(uint32_t(i), gen_[i]);
        }
        move_values(g0, g1, moved);
        std::memmove(pins_ + g0, pins_ + g1, moved * sizeof(uint32_t));
        auto lower_rec = [&](uint32_t r) -> uint32_t { return (r == kNoRecord || r < r1) ? r : uint32_t(r - rshift); };
        for (size_t i = 0; i < moved; ++i) {
            lo_[g0 + i] = lower_rec(lo_[g1 + i]);
            gen_[g0 + i] = rel.epoch;
        }
        auto lower = [&](uint32_t x) -> uint32_t { return x >= g1 ? uint32_t(x - shift) : x; };
        std::memmove(recs_ + r0, recs_ + r1, (nrecords_ - r1) * sizeof(Record));
        std::memmove(args_ + a0, args_ + a1, (nargs_ - a1) * sizeof(uint32_t));
        const size_t nrec = nrecords_ - rshift;
        for (size_t q = r0; q < nrec; ++q) {
            Record& r = recs_[q];
            r.out = uint32_t(r.out - shift);
            r.lo = lower_rec(r.lo);
            switch (op_info(r.op).kind) {
                case OpKind::leaf: break;
                case OpKind::unary:
                case OpKind::unary_imm: r.a = lower(r.a); break;
                case OpKind::binary:
                    r.a = lower(r.a);
                    r.b = lower(r.b);
                    break;
                case OpKind::nary: {
                    r.a = uint32_t(r.a - ashift);
                    uint32_t* p = args_ + r.a;
                    for (uint32_t i = 0; i < r.b; ++i) p[i] = lower(p[i]);
                    break;
                }
                case OpKind::range: {
                    r.a = uint32_t(r.a - ashift);
                    uint32_t* p = args_ + r.a;
                    const uint32_t k = *p++;
                    for (uint32_t v = 0; v < k; ++v) {
                        const uint32_t nspans = *p++;
                        for (uint32_t i = 0; i < nspans; ++i, p += 2) p[0] = lower(p[0]);
                    }
                    break;  // the tail holds shapes and ids, never slots
                }
            }
        }
        if (!labels_.empty()) {
            std::map<uint32_t, std::string> kept;
            for (auto& kv : labels_)
                if (kv.first < g0)
                    kept.emplace_hint(kept.end(), kv.first, std::move(kv.second));
                else if (kv.first >= g1)
                    kept.emplace_hint(kept.end(), uint32_t(kv.first - shift), std::move(kv.second));
            labels_ = std::move(kept);
        }
        nslots_ = n - shift;
        nrecords_ = nrec;
        nargs_ -= ashift;
        if (dirty_ > r1)
            dirty_ -= rshift;
        else if (dirty_ > r0)
            dirty_ = r0;
        if (rel.pending) relocs_.push_back(std::move(rel));
        ++compactions_;
        reclaimed_slots_ += shift;
        sweeps_since_rewind_ = 0;
        slots_at_rewind_ = std::min(slots_at_rewind_, size_t(g0));
        refused_ = "";
        return shift;
    }

    // Grads of records at or above the watermark are zero unless something other than a sweep
    // wrote them: a sweep then skips zeroing them. Whoever writes grads directly says so here;
    // handing out a writable view of grads turns the shortcut off for good.
    void mark_grads_written() { dirty_ = nrecords_; }
    void expose_grads() { grads_exposed_ = true; }

    // ---- labels: a side table, empty (no memory) unless labels are set ----
    void set_label(uint32_t idx, std::string s) {
        if (s.empty())
            labels_.erase(idx);
        else
            labels_[idx] = std::move(s);
    }
    size_t num_labels() const { return labels_.size(); }
    const std::string* label(uint32_t idx) const {
        if (labels_.empty()) return nullptr;
        auto it = labels_.find(idx);
        return it == labels_.end() ? nullptr : &it->second;
    }
    // "node 7 'w1'" (the label only where one is set): how errors name nodes.
    std::string describe_node(uint32_t idx) const {
        std::string s = "node " + std::to_string(idx);
        if (const std::string* lab = label(idx)) s += " '" + *lab + "'";
        return s;
    }
    size_t label_bytes() const {
        size_t n = 0;
        for (auto& kv : labels_) n += sizeof(kv) + kv.second.capacity() + 32;  // ~tree node
        return n;
    }

    // Index of the record that writes slot idx, or -1 for a leaf (no record writes it).
    int64_t record_of(uint32_t idx) const {
        size_t lo = 0, hi = nrecords_;
        while (lo < hi) {  // first record with out > idx
            size_t mid = (lo + hi) / 2;
            if (recs_[mid].out <= idx)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0) return -1;
        const Record& r = recs_[lo - 1];
        return (uint64_t(idx) < uint64_t(r.out) + r.nout) ? int64_t(lo - 1) : -1;
    }
    // Index of the first record whose outputs lie at or above slot idx.
    size_t first_record_at_or_above(uint32_t idx) const {
        size_t lo = 0, hi = nrecords_;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (recs_[mid].out < idx)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    // Argument slots of a record as (first, count) spans, decoded the same way for every op
    // (introspection, DOT export). Range records keep their vector operands in `args` as
    //   [k] then k times [nspans, first0, len0, first1, len1, ...] then an op-specific tail.
    using Span = std::pair<uint32_t, uint32_t>;
    std::vector<Span> record_args(const Record& r) const;
    // f(operand, first slot, length) for each argument span of r, in order (a scalar record's
    // arguments are one-slot operands 0, 1, ...; a range record's operands are its span lists).
    template <class F>
    void visit_args(const Record& r, F&& f) const;

    size_t bytes_records() const { return nrecords_ * sizeof(Record); }
    size_t bytes_args() const { return nargs_ * sizeof(uint32_t); }
    size_t bytes_gen() const { return nslots_ * sizeof(uint64_t); }
    size_t bytes_lo() const { return nslots_ * sizeof(uint32_t); }
    size_t bytes_pins() const { return nslots_ * sizeof(uint32_t); }
    size_t committed_bytes() const {
        return gen_col_.committed_bytes() + lo_col_.committed_bytes() + rec_col_.committed_bytes() +
               args_col_.committed_bytes() + pin_col_.committed_bytes() + committed_value_bytes();
    }
    virtual size_t committed_value_bytes() const = 0;
    // Commits memory for this many slots, records and args in total.
    void reserve(size_t slots, size_t records, size_t args) {
        ensure_slots(slots);
        rec_col_.ensure(records);
        args_col_.ensure(args);
        refresh_limits();
    }
    void release_unused() {
        gen_col_.release_beyond(nslots_);
        lo_col_.release_beyond(nslots_);
        rec_col_.release_beyond(nrecords_);
        args_col_.release_beyond(nargs_);
        pin_col_.release_beyond(nslots_);
        release_values_beyond(nslots_);
    }

protected:
    // Forgets the fixed pins from slot `first` up (a rewind or reclamation discarded those slots).
    // The common case, pins only below (a loop's checkpoint), costs one look at the last entry.
    void drop_fixed_from(uint32_t first) {
        if (!fixed_.empty() && fixed_.back().slot >= first) fixed_.erase(fixed_lower_bound(first), fixed_.end());
    }
    struct FixedPin {
        uint32_t slot;
        uint32_t n[2];  // by Holder
    };
    std::vector<FixedPin>::iterator fixed_lower_bound(uint32_t idx) {
        return std::lower_bound(fixed_.begin(), fixed_.end(), idx,
                                [](const FixedPin& f, uint32_t i) { return f.slot < i; });
    }
    static constexpr uint32_t kNoHole = UINT32_MAX;
    // Holes smaller than this stay: moving a graph costs a pass over it, worth it for a step's graph.
    static constexpr size_t kMinHole = 64;
    // Moves whose handles have not all retargeted yet: a stale-looking handle reads through them all.
    static constexpr size_t kMaxRelocations = 32;
    // True if a record from r on reads a slot in [lo, hi).
    bool reads_between(size_t r, uint32_t lo, uint32_t hi) const {
        bool hit = false;
        for (; r < nrecords_ && !hit; ++r)
            visit_args(recs_[r], [&](uint32_t, uint32_t first, uint32_t len) {
                if (first < hi && uint64_t(first) + len > lo) hit = true;
            });
        return hit;
    }
    // Offset of the first args entry of records from r on (nargs_ if none has any).
    size_t args_from(size_t r) const {
        for (; r < nrecords_; ++r) {
            const OpKind k = op_info(recs_[r].op).kind;
            if (k == OpKind::nary || k == OpKind::range) return recs_[r].a;
        }
        return nargs_;
    }
    virtual void move_values(size_t dst, size_t src, size_t n) = 0;
    virtual void ensure_values(size_t n) = 0;
    virtual size_t committed_values() const = 0;
    virtual void release_values_beyond(size_t n) = 0;
    void ensure_slots(size_t n) {
        ensure_values(n);
        gen_col_.ensure(n);
        lo_col_.ensure(n);
        pin_col_.ensure(n);
    }
    // The counts up to which appends need no check but one compare per kind.
    void refresh_limits() {
        slot_limit_ = std::min({committed_values(), gen_col_.committed(), lo_col_.committed(), pin_col_.committed()});
        record_limit_ = rec_col_.committed();
        args_limit_ = args_col_.committed();
    }
    // Room for this many more slots, records and args: all or nothing (throws before any change).
    void grow(size_t slots, size_t records, size_t args) {
        if (slots > gen_col_.max_size() - nslots_) gen_col_.capacity_exceeded();
        if (records > rec_col_.max_size() - nrecords_) rec_col_.capacity_exceeded();
        if (args > args_col_.max_size() - nargs_) args_col_.capacity_exceeded();
        ensure_slots(nslots_ + slots);
        rec_col_.ensure(nrecords_ + records);
        args_col_.ensure(nargs_ + args);
        refresh_limits();
    }
    static uint64_t next_id() {
        static uint64_t counter = 0;
        return ++counter;
    }

    DType dtype_;
    Column<uint64_t> gen_col_;
    Column<uint32_t> lo_col_;
    Column<Record> rec_col_;
    Column<uint32_t> args_col_;
    Column<uint32_t> pin_col_;
    uint64_t* gen_;
    uint32_t* lo_;
    Record* recs_;
    uint32_t* args_;
    uint32_t* pins_;
    // Each count sits beside its limit, not beside the other counts: the compiler would merge
    // adjacent increments into one vector store, and reading one count back from it stalls.
    size_t nslots_ = 0, slot_limit_ = 0;
    size_t nrecords_ = 0, record_limit_ = 0;
    size_t nargs_ = 0, args_limit_ = 0;
    uint64_t id_;
    uint64_t epoch_ = 0;
    uint64_t rewinds_ = 0;
    uint64_t reclaims_ = 0, reclaimed_slots_ = 0;
    uint64_t sweeps_since_rewind_ = 0;
    size_t slots_at_rewind_ = 0;
    size_t dirty_ = 0;
    bool grads_exposed_ = false;
    std::map<uint32_t, std::string> labels_;
    // Pins held by Vectors (and numpy views) [0] and checkpoints [1], by slot: these holders keep
    // raw positions, so a compaction must not move what they show.
    std::vector<FixedPin> fixed_;
    uint32_t hole_low_ = kNoHole;
    std::vector<Relocation> relocs_;
    uint64_t compactions_ = 0;
    const char* refused_ = "";
    bool refused_structural_ = false, refused_fixed_ = false;
    uint32_t backoff_ = 0, backoff_left_ = 0;
};

template <class F>
inline void ArenaBase::visit_args(const Record& r, F&& f) const {
    const uint32_t* p = args_ + r.a;
    switch (op_info(r.op).kind) {
        case OpKind::leaf: break;
        case OpKind::unary:
        case OpKind::unary_imm: f(0u, r.a, 1u); break;
        case OpKind::binary:
            f(0u, r.a, 1u);
            f(1u, r.b, 1u);
            break;
        case OpKind::nary:
            for (uint32_t i = 0; i < r.b; ++i) f(i, p[i], 1u);
            break;
        case OpKind::range: {
            uint32_t k = *p++;
            for (uint32_t v = 0; v < k; ++v) {
                uint32_t nspans = *p++;
                for (uint32_t s = 0; s < nspans; ++s, p += 2) f(v, p[0], p[1]);
            }
            break;
        }
    }
}

inline std::vector<ArenaBase::Span> ArenaBase::record_args(const Record& r) const {
    std::vector<Span> out;
    visit_args(r, [&out](uint32_t, uint32_t first, uint32_t len) {
        if (!out.empty() && out.back().first + out.back().second == first)
            out.back().second += len;
        else
            out.emplace_back(first, len);
    });
    return out;
}

template <typename T>
class Arena : public ArenaBase {
public:
    using value_type = T;
    explicit Arena(const Capacity& cap = Capacity())
        : ArenaBase(dtype_of<T>(), cap), val_col_(cap.slots, 0), grad_col_(cap.slots, kSkew) {
        val_ = val_col_.data();
        grad_ = grad_col_.data();
    }

    T* values() { return val_; }
    T* grads() { return grad_; }
    const T* values() const { return val_; }
    const T* grads() const { return grad_; }
    size_t value_size() const override { return sizeof(T); }
    size_t committed_value_bytes() const override { return val_col_.committed_bytes() + grad_col_.committed_bytes(); }

    // Guarantees that an op appending this much cannot fail half-way (all or nothing).
    void make_room(size_t slots, size_t records, size_t args) {
        if (slots > slot_limit_ - nslots_ || records > record_limit_ - nrecords_ || args > args_limit_ - nargs_)
            [[unlikely]]
            grow(slots, records, args);
    }

    // n fresh slots with zero grads, stamped with the current epoch and `lo`. Returns the first.
    uint32_t new_slots(size_t n, uint32_t lo = kNoRecord) {
        make_room(n, 0, 0);
        const size_t first = nslots_;
        nslots_ += n;
        const uint64_t epoch = epoch_;
        auto fill = [&](size_t b, size_t len) {
            for (size_t i = first + b; i < first + b + len; ++i) {
                grad_[i] = T(0);
                gen_[i] = epoch;
                lo_[i] = lo;
                pins_[i] = 0;
            }
        };
        // A chunk's range records add tens of thousands of slots at once (16 bytes each to
        // write): those fills split across the pool rather than keep the other threads waiting.
        // A scalar op's one slot takes the plain loop.
        constexpr size_t kParallelFill = size_t(1) << 15;
        if (n < kParallelFill)
            fill(0, n);
        else
            threads::in_blocks(n, fill, double(kParallelFill));
        return static_cast<uint32_t>(first);
    }
    uint32_t leaf(T v) {
        uint32_t i = new_slots(1);
        val_[i] = v;
        return i;
    }

    // ---- scalar ops: one slot and one record each (forward.hpp) ----
    uint32_t unary(Op op, uint32_t x);
    uint32_t unary_imm(Op op, uint32_t x, double c);
    uint32_t binary(Op op, uint32_t a, uint32_t b);
    // Var-arity op over n argument slots (already validated). Writes nary_outputs(op) outputs.
    uint32_t nary(Op op, const uint32_t* idx, size_t n);

    // The one way range ops enter the arena: room for everything first (all or nothing), then
    // `write(dst)` fills the nargs argument entries, then nout output slots and the record. lo is
    // the lowest record the inputs depend on. With gradients off (no_grad) nothing is recorded:
    // the arguments go to a scratch buffer and the outputs are plain leaves.
    template <typename W>
    Appended append(Op op, size_t nout, size_t nargs, uint32_t lo, uint16_t c, double imm, W&& write) {
        const uint32_t n32 = checked_u32(nout);
        checked_u32(nargs);
        if (!grad_enabled()) {
            make_room(nout, 0, 0);
            if (args_scratch_.size() < nargs) args_scratch_.resize(nargs);
            write(args_scratch_.data());
            uint32_t out = new_slots(nout);
            return Appended{out, Record{op, c, out, n32, 0, uint32_t(nargs), kNoRecord, imm}, args_scratch_.data()};
        }
        make_room(nout, 1, nargs);
        const uint32_t self = static_cast<uint32_t>(nrecords_);
        lo = std::min(lo, self);
        const size_t first = nargs_;
        nargs_ += nargs;
        write(args_ + first);
        uint32_t out = new_slots(nout, lo);
        const Record r{op, c, out, n32, static_cast<uint32_t>(first), uint32_t(nargs), lo, imm};
        recs_[nrecords_++] = r;
        return Appended{out, r, args_ + first};
    }

    // ---- the reverse sweep (backward.hpp) ----
    // Sweeps from the record that wrote `root` down to the lowest record it depends on, or to the
    // first record whose outputs lie at or above slot `stop_below` if that is higher (0: no stop).
    // `fused`: linear weights that take an SGD step inside the sweep (fused_sgd.hpp).
    void backward(uint32_t root, T seed, uint32_t stop_below, const FusedSgd* fused = nullptr);

    // The arena's own values, grads and scratch, as the frame records run against.
    Frame<T> frame() { return Frame<T>{val_, grad_, &scratch_}; }

    // Scratch space reused across calls (no allocation in the steady state).
    HugeBuffer<T>& scratch(size_t n) {
        scratch_.resize(n);
        return scratch_;
    }

protected:
    void move_values(size_t dst, size_t src, size_t n) override {
        std::memmove(val_ + dst, val_ + src, n * sizeof(T));
        std::memmove(grad_ + dst, grad_ + src, n * sizeof(T));
    }
    void ensure_values(size_t n) override {
        val_col_.ensure(n);
        grad_col_.ensure(n);
    }
    size_t committed_values() const override { return std::min(val_col_.committed(), grad_col_.committed()); }
    void release_values_beyond(size_t n) override {
        val_col_.release_beyond(n);
        grad_col_.release_beyond(n);
    }

private:
    // One scalar record and its output slot; lo from the arguments' lo.
    uint32_t push_scalar(Op op, uint32_t a, uint32_t b, uint32_t lo, double imm, T y) {
        if (!grad_enabled()) return leaf(y);
        make_room(1, 1, 0);
        const size_t out = nslots_++, rec = nrecords_++;
        lo = std::min(lo, static_cast<uint32_t>(rec));
        val_[out] = y;
        grad_[out] = T(0);
        gen_[out] = epoch_;
        lo_[out] = lo;
        pins_[out] = 0;
        recs_[rec] = Record{op, 0, static_cast<uint32_t>(out), 1, a, b, lo, imm};
        return static_cast<uint32_t>(out);
    }
    template <bool Check>
    void sweep(size_t top, size_t lo, const FusedSgd* fused);

    Column<T> val_col_;
    Column<T> grad_col_;
    T* val_;
    T* grad_;
    HugeBuffer<T> scratch_;
    std::vector<uint32_t> args_scratch_;
};

}  // namespace bt
