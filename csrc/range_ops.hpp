// Range ops: one record writes a span of output slots from vector operands.
//
// A vector operand is a list of spans (first slot, length) over the arena, so a concatenation or
// a slice is a new span list and copies no values. In `args` a range record stores
//   [k] then k times [nspans, first0, len0, first1, len1, ...] then an op-specific integer tail,
// which ArenaBase::record_args() decodes for every range op alike.
#pragma once
#include <cstdint>
#include <vector>

#include "arena.hpp"

namespace bt {

using Span = ArenaBase::Span;

// A decoded view of one vector operand inside a record's args.
struct SpanList {
    const uint32_t* p;  // points at first0
    uint32_t n;         // number of spans
    uint32_t first(uint32_t s) const { return p[2 * s]; }
    uint32_t len(uint32_t s) const { return p[2 * s + 1]; }
    uint32_t total() const {
        uint32_t t = 0;
        for (uint32_t s = 0; s < n; ++s) t += len(s);
        return t;
    }
};

// Reads k operands starting at args + r.a; returns a pointer to the op-specific tail.
inline const uint32_t* decode_operands(const uint32_t* p, SpanList* out, uint32_t k) {
    uint32_t kk = *p++;
    for (uint32_t v = 0; v < kk && v < k; ++v) {
        out[v].n = *p++;
        out[v].p = p;
        p += 2 * out[v].n;
    }
    return p;
}

// Encodes operands into args; returns the args offset of the record.
template <typename T>
inline uint32_t encode_operands(Arena<T>& A, const std::vector<Span>* const* ops, uint32_t k,
                                const uint32_t* tail = nullptr, size_t ntail = 0) {
    size_t n = 1 + ntail;
    for (uint32_t v = 0; v < k; ++v) n += 1 + 2 * ops[v]->size();
    uint32_t first;
    uint32_t* p = A.grow_args(n, &first);
    *p++ = k;
    for (uint32_t v = 0; v < k; ++v) {
        *p++ = static_cast<uint32_t>(ops[v]->size());
        for (const Span& s : *ops[v]) {
            *p++ = s.first;
            *p++ = s.second;
        }
    }
    for (size_t i = 0; i < ntail; ++i) *p++ = tail[i];
    return first;
}

// ---- copy: materialises a vector (any span list) into fresh contiguous slots ----
template <typename T>
inline uint32_t range_copy(Arena<T>& A, const std::vector<Span>& x) {
    uint32_t n = 0;
    for (const Span& s : x) n += s.second;
    const std::vector<Span>* ops[1] = {&x};
    uint32_t a = encode_operands(A, ops, 1);
    uint32_t out = A.new_slots(n);
    T* v = A.values();
    uint32_t o = out;
    for (const Span& s : x)
        for (uint32_t i = 0; i < s.second; ++i) v[o++] = v[s.first + i];
    A.push_record(Op::copy, out, n, a, 0, 0, 0.0);
    return out;
}

template <typename T>
inline void range_backward(Arena<T>& A, const Record& r) {
    T* g = A.grads();
    SpanList x[4];
    decode_operands(A.args_mut() + r.a, x, 4);
    switch (r.op) {
        case Op::copy: {
            uint32_t o = r.out;
            for (uint32_t s = 0; s < x[0].n; ++s)
                for (uint32_t i = 0; i < x[0].len(s); ++i) g[x[0].first(s) + i] += g[o++];
            return;
        }
        default: return;
    }
}

}  // namespace bt
