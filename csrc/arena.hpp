// The arena: every scalar of a graph is one slot; every op application is one record.
//
//   slots    value[i], grad[i], gen[i]   struct of arrays, allocated sequentially
//   records  {op, outputs, argument refs, immediate}, appended in creation order
//   args     argument slot indices of var-arity and range records, one shared array
//
// Records are appended after their arguments exist, so reverse creation order is a valid reverse
// topological order: backward is one reverse loop (backward.hpp), with no recursion, no visited
// set and no allocation. checkpoint()/rewind() truncate all three arrays; gen[i] stamps each slot
// with the arena's epoch at allocation so that a handle to a rewound slot is detected as stale.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "column.hpp"
#include "ops.hpp"

namespace bt {

enum class DType : uint8_t { float32 = 0, float64 = 1 };

struct Record {
    Op op;
    uint32_t out;   // first output slot
    uint32_t nout;  // number of output slots
    uint32_t a;     // unary/binary: first argument slot;  nary/range: offset into args
    uint32_t b;     // binary: second argument slot;       nary/range: number of args entries
    uint32_t c;     // op-specific small integer (dimensions)
    double imm;     // op-specific constant
};
static_assert(sizeof(Record) == 32, "records are meant to pack into 32 bytes");

struct Mark {
    uint64_t arena_id = 0;
    uint32_t slots = 0, records = 0, args = 0;
    uint32_t last_gen = 0;  // gen of slot (slots - 1) when taken; detects a discarded mark
};

struct Capacity {
    size_t slots = size_t(1) << 28;
    size_t records = size_t(1) << 27;
    size_t args = size_t(1) << 29;
};

class ArenaBase {
public:
    ArenaBase(DType dtype, const Capacity& cap)
        : dtype_(dtype), gen_(cap.slots), records_(cap.records), args_(cap.args), id_(next_id()) {}
    virtual ~ArenaBase() = default;

    DType dtype() const { return dtype_; }
    uint64_t id() const { return id_; }
    uint32_t epoch() const { return epoch_; }
    size_t num_slots() const { return gen_.size(); }
    size_t num_records() const { return records_.size(); }
    size_t num_args() const { return args_.size(); }
    const Record& record(size_t r) const { return records_[r]; }
    const uint32_t* args() const { return args_.data(); }
    virtual size_t value_size() const = 0;

    bool alive(uint32_t idx, uint32_t gen) const { return idx < gen_.size() && gen_[idx] == gen; }
    uint32_t gen_of(uint32_t idx) const { return gen_[idx]; }

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
        records_.truncate(m.records);
        args_.truncate(m.args);
        if (dirty_ > m.records) dirty_ = m.records;
        if (!labels_.empty()) labels_.erase(labels_.lower_bound(m.slots), labels_.end());
        ++epoch_;
    }

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
            if (records_[mid].out <= idx) lo = mid + 1; else hi = mid;
        }
        if (lo == 0) return -1;
        const Record& r = records_[lo - 1];
        return (idx < r.out + r.nout) ? int64_t(lo - 1) : -1;
    }
    // Index of the first record whose outputs lie at or above slot idx.
    size_t first_record_at_or_above(uint32_t idx) const {
        size_t lo = 0, hi = records_.size();
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (records_[mid].out < idx) lo = mid + 1; else hi = mid;
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
    size_t bytes_gen() const { return gen_.size() * sizeof(uint32_t); }
    size_t committed_bytes() const {
        return gen_.committed_bytes() + records_.committed_bytes() + args_.committed_bytes() +
               committed_value_bytes();
    }
    virtual size_t committed_value_bytes() const = 0;
    void reserve(size_t slots, size_t records, size_t args) {
        reserve_values(slots);
        gen_.reserve(slots);
        records_.reserve(records);
        args_.reserve(args);
    }
    void release_unused() {
        gen_.release_unused();
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
    Column<uint32_t> gen_;
    Column<Record> records_;
    Column<uint32_t> args_;
    uint64_t id_;
    uint32_t epoch_ = 0;
    size_t dirty_ = 0;  // records at index >= dirty_ have all-zero output grads
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
    explicit Arena(const Capacity& cap = Capacity())
        : ArenaBase(std::is_same_v<T, float> ? DType::float32 : DType::float64, cap),
          value_(cap.slots),
          grad_(cap.slots) {}

    T* values() { return value_.data(); }
    T* grads() { return grad_.data(); }
    size_t value_size() const override { return sizeof(T); }
    size_t committed_value_bytes() const override {
        return value_.committed_bytes() + grad_.committed_bytes();
    }

    // Guarantees that an op appending this much cannot fail half-way (all or nothing).
    void make_room(size_t slots, size_t records, size_t args) {
        value_.make_room(slots);
        grad_.make_room(slots);
        gen_.make_room(slots);
        records_.make_room(records);
        args_.make_room(args);
    }

    // n fresh slots with zero grads, stamped with the current epoch. Returns the first index.
    uint32_t new_slots(size_t n) {
        size_t first = value_.grow(n);
        grad_.grow(n);
        gen_.grow(n);
        for (size_t i = first; i < first + n; ++i) {
            grad_[i] = T(0);
            gen_[i] = epoch_;
        }
        return static_cast<uint32_t>(first);
    }
    uint32_t leaf(T v) {
        uint32_t i = new_slots(1);
        value_[i] = v;
        return i;
    }

    // ---- scalar ops: one slot and one record each ----
    uint32_t unary(Op op, uint32_t x);
    uint32_t unary_imm(Op op, uint32_t x, double c);
    uint32_t binary(Op op, uint32_t a, uint32_t b);
    // Var-arity op over n argument slots (already validated). Writes nout outputs.
    uint32_t nary(Op op, const uint32_t* idx, size_t n);

    // ---- the reverse sweep (backward.hpp) ----
    // Sweeps from the record that wrote `root` down to the first record whose outputs lie at
    // or above slot `stop_below` (0: sweep everything).
    void backward(uint32_t root, T seed, uint32_t stop_below);

    // Scratch space reused across calls (no allocation in the steady state).
    std::vector<T>& scratch(size_t n) {
        if (scratch_.size() < n) scratch_.resize(n);
        return scratch_;
    }
    // Range ops append records through these.
    Record& push_record(Op op, uint32_t out, uint32_t nout, uint32_t a, uint32_t b, uint32_t c,
                        double imm) {
        records_.push(Record{op, out, nout, a, b, c, imm});
        return records_[records_.size() - 1];
    }
    uint32_t push_args(const uint32_t* p, size_t n) {
        size_t first = args_.grow(n);
        std::copy(p, p + n, args_.data() + first);
        return static_cast<uint32_t>(first);
    }
    uint32_t* grow_args(size_t n, uint32_t* first_out) {
        size_t first = args_.grow(n);
        *first_out = static_cast<uint32_t>(first);
        return args_.data() + first;
    }
    uint32_t* args_mut() { return args_.data(); }

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
    void sweep_record(const Record& r);
    Column<T> value_;
    Column<T> grad_;
    std::vector<T> scratch_;
};

}  // namespace bt
