// Vector: a view over slots as a list of spans with an optional 2-D row-major shape; and the
// conversion of what users pass where a Vector is expected (lists, nested lists, numpy arrays,
// Values) into one.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>

#include "common.hpp"

namespace btpy {

using bt::Span;
using bt::Spans;

struct VectorBox {
    nb::object owner;  // the Python Arena
    bt::ArenaBase* arena = nullptr;
    Spans spans;
    std::vector<uint64_t> gens;  // per span: the generation of its last slot
    size_t size = 0;
    uint32_t rows = 0, cols = 0;  // rows == 0: one-dimensional (cols == size)

    bt::DType dtype() const { return arena->dtype(); }
    // A rewind below a span's last slot either removes it or restamps it, so checking the last
    // slot of each span is enough.
    bool alive() const {
        for (size_t i = 0; i < spans.size(); ++i)
            if (!arena->alive(spans[i].first + spans[i].second - 1, gens[i])) return false;
        return true;
    }
    // Raises StaleValueError if a rewind discarded any viewed node.
    void check() const;
    bool contiguous() const { return spans.size() == 1; }
    uint32_t first() const { return spans.empty() ? 0 : spans[0].first; }
    // Slot index of element i.
    uint32_t slot(size_t i) const {
        for (const Span& s : spans) {
            if (i < s.second) return s.first + uint32_t(i);
            i -= s.second;
        }
        return UINT32_MAX;
    }
    size_t length() const { return rows ? rows : size; }   // len(): rows of a matrix
    size_t row_len() const { return rows ? cols : size; }  // elements per row (the "in" of a layer)
    size_t nrows() const { return rows ? rows : 1; }
};

// Builds a view from spans (merging adjacent ones) and stamps their generations.
VectorBox make_vector(const nb::object& owner, bt::ArenaBase* arena, const Spans& in, uint32_t rows = 0,
                      uint32_t cols = 0);
VectorBox contiguous_vector(const nb::object& owner, bt::ArenaBase* arena, uint32_t first, size_t n, uint32_t rows = 0,
                            uint32_t cols = 0);
// Appends the spans of elements [a, b) of v to out (a view's rows without building a view each:
// an embedding of 1,024 ids built and freed 1,024 views).
void slice_spans(const VectorBox& v, size_t a, size_t b, Spans& out);
// Elements [a, b) of v, as a view.
VectorBox slice_elems(const VectorBox& v, size_t a, size_t b, uint32_t rows = 0, uint32_t cols = 0);

std::string shape_str(const VectorBox& v);
// Raises unless a and b live in one arena (TypeError for mixed dtypes, ValueError otherwise).
void same_arena(const VectorBox& a, const VectorBox& b, const char* what);
nb::object value_at(const VectorBox& v, uint32_t slot);

// Numbers parsed from a list, a nested list or a buffer, with their shape (rows == 0: 1-D).
struct NumberArray {
    std::vector<double> v;
    size_t rows = 0, cols = 0;
};
// Numbers and shape from a sequence, a nested sequence (rows of equal length) or a buffer.
NumberArray parse_numbers(PyObject* o, const char* what);
// New contiguous leaves holding `vals` in `arena` (no Python code; inside the capacity guard).
uint32_t new_leaves(bt::ArenaBase* arena, const std::vector<double>& vals, size_t n);

// What a user passed where a Vector is expected, as a Vector (conversion only: liveness is
// checked by the caller afterwards):
//   a Vector -> itself; a Value -> a one-element view;
//   a list/tuple holding Values -> a view of them (numbers among them become constant leaves);
//   numbers: a list, a nested list (2-D) or a buffer such as a numpy array (1-D or 2-D) -> new
//   constant leaves, shaped like the input.
// New nodes go to the arena of `anchor` (the op's other operands), else the thread's current
// arena of the default dtype. May run Python code.
VectorBox as_vector(nb::handle h, const VectorBox* anchor, const char* what);

// The operand that decides where constants go: the first Vector or Value among the handles.
inline std::optional<VectorBox> pick_anchor(std::initializer_list<nb::handle> hs) {
    for (nb::handle h : hs)
        if (h.is_valid() && (nb::isinstance<VectorBox>(h) || is_value(h.ptr()))) return as_vector(h, nullptr, "");
    return std::nullopt;
}
inline const VectorBox* anchor_ptr(const std::optional<VectorBox>& a) { return a ? &*a : nullptr; }

// Runs a core append inside the op's arena and wraps the output span as a vector.
template <typename F>
inline VectorBox emit(const VectorBox& like, size_t n, uint32_t rows, uint32_t cols, F&& append) {
    uint32_t out = dispatch(like.arena, append);
    return contiguous_vector(like.owner, like.arena, out, n, rows, cols);
}

// f(T* p) for the value (or grad) slot of each element in order.
template <typename F>
inline void each_slot_ptr(const VectorBox& v, bool grads, F&& f) {
    dispatch(v.arena, [&](auto& A) {
        auto* base = grads ? A.grads() : A.values();
        for (const Span& s : v.spans)
            for (uint32_t i = 0; i < s.second; ++i) f(base + s.first + i);
    });
}

}  // namespace btpy
