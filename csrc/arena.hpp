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
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "column.hpp"
#include "modes.hpp"
#include "ops.hpp"

namespace bt {

enum class DType : uint8_t { float32 = 0, float64 = 1 };

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
    ArenaBase(DType dtype, const Capacity& cap)
        : dtype_(dtype), gen_(cap.slots), lo_(cap.slots), records_(cap.records), args_(cap.args), id_(next_id()) {}
    virtual ~ArenaBase() = default;

    DType dtype() const { return dtype_; }
    uint64_t id() const { return id_; }
    uint64_t epoch() const { return epoch_; }
    size_t num_slots() const { return gen_.size(); }
    size_t num_records() const { return records_.size(); }
    size_t num_args() const { return args_.size(); }
    const Record& record(size_t r) const { return records_[r]; }
    const uint32_t* args() const { return args_.data(); }
    virtual size_t value_size() const = 0;

    bool alive(uint32_t idx, uint64_t gen) const { return idx < gen_.size() && gen_[idx] == gen; }
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
        if (r > 0 && records_[r - 1].out + uint64_t(records_[r - 1].nout) > first) --r;
        for (; r < records_.size() && records_[r].out < end; ++r) lo = std::min(lo, records_[r].lo);
        return lo;
    }

    Mark checkpoint() const {
        Mark m;
        m.arena_id = id_;
        m.slots = static_cast<uint32_t>(gen_.size());
        m.records = static_cast<uint32_t>(records_.size());
        m.args = static_cast<uint32_t>(args_.size());
        m.last_gen = m.slots ? gen_[m.slots - 1] : 0;
        return m;
    }
    // Why a mark cannot be rewound to, or nullptr if it can.
    const char* mark_problem(const Mark& m) const {
        if (m.arena_id != id_) return "the checkpoint belongs to another arena";
        if (m.slots > gen_.size() || m.records > records_.size() || m.args > args_.size() ||
            (m.slots && gen_[m.slots - 1] != m.last_gen))
            return "the checkpoint was discarded by an earlier rewind below it";
        return nullptr;
    }
    void rewind(const Mark& m) {
        truncate_values(m.slots);
        gen_.truncate(m.slots);
        lo_.truncate(m.slots);
        records_.truncate(m.records);
        args_.truncate(m.args);
        if (!labels_.empty()) labels_.erase(labels_.lower_bound(m.slots), labels_.end());
        ++epoch_;
        ++rewinds_;
        sweeps_since_rewind_ = 0;
        records_at_rewind_ = m.records;
    }
    uint64_t rewinds() const { return rewinds_; }
    bool growth_warned = false;  // set by the bindings once they warned about a loop that never rewinds
    // Sweeps and records since the last rewind: how the bindings notice a loop that never rewinds.
    uint64_t sweeps_since_rewind() const { return sweeps_since_rewind_; }
    size_t records_since_rewind() const { return records_.size() - std::min(records_.size(), records_at_rewind_); }

    // ---- labels: a side table, empty (no memory) unless labels are set ----
    void set_label(uint32_t idx, std::string s) {
        if (s.empty()) labels_.erase(idx);
        else labels_[idx] = std::move(s);
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
        size_t lo = 0, hi = records_.size();
        while (lo < hi) {  // first record with out > idx
            size_t mid = (lo + hi) / 2;
            if (records_[mid].out <= idx) lo = mid + 1;
            else hi = mid;
        }
        if (lo == 0) return -1;
        const Record& r = records_[lo - 1];
        return (uint64_t(idx) < uint64_t(r.out) + r.nout) ? int64_t(lo - 1) : -1;
    }
    // Index of the first record whose outputs lie at or above slot idx.
    size_t first_record_at_or_above(uint32_t idx) const {
        size_t lo = 0, hi = records_.size();
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (records_[mid].out < idx) lo = mid + 1;
            else hi = mid;
        }
        return lo;
    }
    // Argument slots of a record as (first, count) spans, decoded the same way for every op
    // (introspection, DOT export). Range records keep their vector operands in `args` as
    //   [k] then k times [nspans, first0, len0, first1, len1, ...] then an op-specific tail.
    using Span = std::pair<uint32_t, uint32_t>;
    std::vector<Span> record_args(const Record& r) const;

    size_t bytes_records() const { return records_.size() * sizeof(Record); }
    size_t bytes_args() const { return args_.size() * sizeof(uint32_t); }
    size_t bytes_gen() const { return gen_.size() * sizeof(uint64_t); }
    size_t bytes_lo() const { return lo_.size() * sizeof(uint32_t); }
    size_t committed_bytes() const {
        return gen_.committed_bytes() + lo_.committed_bytes() + records_.committed_bytes() +
               args_.committed_bytes() + committed_value_bytes();
    }
    virtual size_t committed_value_bytes() const = 0;
    void reserve(size_t slots, size_t records, size_t args) {
        reserve_values(slots);
        gen_.reserve(slots);
        lo_.reserve(slots);
        records_.reserve(records);
        args_.reserve(args);
    }
    void release_unused() {
        gen_.release_unused();
        lo_.release_unused();
        records_.release_unused();
        args_.release_unused();
        release_unused_values();
    }

protected:
    virtual void truncate_values(size_t n) = 0;
    virtual void reserve_values(size_t n) = 0;
    virtual void release_unused_values() = 0;
    static uint64_t next_id() {
        static uint64_t counter = 0;
        return ++counter;
    }

    DType dtype_;
    Column<uint64_t> gen_;
    Column<uint32_t> lo_;
    Column<Record> records_;
    Column<uint32_t> args_;
    uint64_t id_;
    uint64_t epoch_ = 0;
    uint64_t rewinds_ = 0;
    uint64_t sweeps_since_rewind_ = 0;
    size_t records_at_rewind_ = 0;
    std::map<uint32_t, std::string> labels_;
};

inline std::vector<ArenaBase::Span> ArenaBase::record_args(const Record& r) const {
    std::vector<Span> out;
    auto add = [&out](uint32_t first, uint32_t len) {
        if (!out.empty() && out.back().first + out.back().second == first) out.back().second += len;
        else out.emplace_back(first, len);
    };
    const uint32_t* p = args_.data() + r.a;
    switch (op_info(r.op).kind) {
        case OpKind::leaf: break;
        case OpKind::unary:
        case OpKind::unary_imm: add(r.a, 1); break;
        case OpKind::binary: add(r.a, 1); add(r.b, 1); break;
        case OpKind::nary:
            for (uint32_t i = 0; i < r.b; ++i) add(p[i], 1);
            break;
        case OpKind::range: {
            uint32_t k = *p++;
            for (uint32_t v = 0; v < k; ++v) {
                uint32_t nspans = *p++;
                for (uint32_t s = 0; s < nspans; ++s, p += 2) add(p[0], p[1]);
            }
            break;
        }
    }
    return out;
}

template <typename T>
class Arena : public ArenaBase {
public:
    using value_type = T;
    explicit Arena(const Capacity& cap = Capacity())
        : ArenaBase(std::is_same_v<T, float> ? DType::float32 : DType::float64, cap),
          value_(cap.slots),
          grad_(cap.slots) {}

    T* values() { return value_.data(); }
    T* grads() { return grad_.data(); }
    const T* values() const { return value_.data(); }
    const T* grads() const { return grad_.data(); }
    size_t value_size() const override { return sizeof(T); }
    size_t committed_value_bytes() const override {
        return value_.committed_bytes() + grad_.committed_bytes();
    }

    // Guarantees that an op appending this much cannot fail half-way (all or nothing).
    void make_room(size_t slots, size_t records, size_t args) {
        value_.make_room(slots);
        grad_.make_room(slots);
        gen_.make_room(slots);
        lo_.make_room(slots);
        records_.make_room(records);
        args_.make_room(args);
    }

    // n fresh slots with zero grads, stamped with the current epoch and `lo`. Returns the first.
    uint32_t new_slots(size_t n, uint32_t lo = kNoRecord) {
        size_t first = value_.grow(n);
        grad_.grow(n);
        gen_.grow(n);
        lo_.grow(n);
        for (size_t i = first; i < first + n; ++i) {
            grad_[i] = T(0);
            gen_[i] = epoch_;
            lo_[i] = lo;
        }
        return static_cast<uint32_t>(first);
    }
    uint32_t leaf(T v) {
        make_room(1, 0, 0);
        uint32_t i = new_slots(1);
        value_[i] = v;
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
        const uint32_t self = static_cast<uint32_t>(records_.size());
        lo = std::min(lo, self);
        size_t first = args_.grow(nargs);
        write(args_.data() + first);
        uint32_t out = new_slots(nout, lo);
        Record r{op, c, out, n32, static_cast<uint32_t>(first), uint32_t(nargs), lo, imm};
        records_.push(r);
        return Appended{out, r, args_.data() + first};
    }

    // ---- the reverse sweep (backward.hpp) ----
    // Sweeps from the record that wrote `root` down to the lowest record it depends on, or to the
    // first record whose outputs lie at or above slot `stop_below` if that is higher (0: no stop).
    void backward(uint32_t root, T seed, uint32_t stop_below);

    // Scratch space reused across calls (no allocation in the steady state).
    std::vector<T>& scratch(size_t n) {
        if (scratch_.size() < n) scratch_.resize(n);
        return scratch_;
    }

protected:
    void truncate_values(size_t n) override {
        value_.truncate(n);
        grad_.truncate(n);
    }
    void reserve_values(size_t n) override {
        value_.reserve(n);
        grad_.reserve(n);
    }
    void release_unused_values() override {
        value_.release_unused();
        grad_.release_unused();
    }

private:
    // One scalar record with its output slot; lo from the arguments' lo.
    uint32_t push_scalar(Op op, uint32_t a, uint32_t b, uint32_t lo, double imm, T y) {
        if (!grad_enabled()) return leaf(y);
        make_room(1, 1, 0);
        const uint32_t self = static_cast<uint32_t>(records_.size());
        lo = std::min(lo, self);
        uint32_t out = new_slots(1, lo);
        value_[out] = y;
        records_.push(Record{op, 0, out, 1, a, b, lo, imm});
        return out;
    }
    template <bool Check>
    void sweep(size_t top, size_t lo);

    Column<T> value_;
    Column<T> grad_;
    std::vector<T> scratch_;
    std::vector<uint32_t> args_scratch_;
};

}  // namespace bt
