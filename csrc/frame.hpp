// What running a record needs: where values and grads live, and scratch space for gathering.
//
// A record addresses slots by index, so it runs against any pair of arrays laid out alike: the
// arena's own (eager appends and sweeps) or a recorded program's per-thread copy (replay). Two
// threads replaying one program each pass their own frame and never touch shared state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace bt {

template <typename T>
struct Frame {
    T* v;
    T* g;
    std::vector<T>* scr;
    // Weights that stay constant while the frame is in use, already transposed, by the slot of
    // their first element: a program replaying many samples transposes each linear layer's W
    // once per call instead of once per sample. Empty (null) for the arena's own frame.
    const std::vector<std::pair<uint32_t, const T*>>* transposed_weights = nullptr;

    const T* transposed(uint32_t w_slot) const {
        if (transposed_weights)
            for (const auto& [slot, wt] : *transposed_weights)
                if (slot == w_slot) return wt;
        return nullptr;
    }
    T* values() const { return v; }
    T* grads() const { return g; }
    std::vector<T>& scratch(size_t n) const {
        if (scr->size() < n) scr->resize(n);
        return *scr;
    }
};

}  // namespace bt
