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

#include "huge_buffer.hpp"
#include "optim.hpp"  // FusedSgd: the weights a sweep updates where their gradient is made

namespace bt {

// A weight's gradient kept outside the frame (Frame::arena_weight_grads).
template <typename T>
struct WeightGrad {
    uint32_t slot;                   // the weight's first frame slot
    T* grad;                         // where its gradient goes
    uint32_t len;                    // its elements
    mutable bool unwritten = false;  // it starts at zero and nothing has written it yet
};

template <typename T>
struct Frame {
    T* v;
    T* g;
    HugeBuffer<T>* scr;
    // Weights that stay constant while the frame is in use, already transposed, by the slot of
    // their first element: a program replaying many samples transposes each linear layer's W
    // once per call instead of once per sample. Empty (null) for the arena's own frame.
    const std::vector<std::pair<uint32_t, const T*>>* transposed_weights = nullptr;

    // Set by a sweep that applies an SGD step to some weights; null otherwise.
    const FusedSgd* fused_sgd = nullptr;

    // Linear weights a replay reads where they live in the arena, not from a copy in its frame,
    // by the frame slot of their first element (Program::arena_weights). Null: none.
    const std::vector<std::pair<uint32_t, const T*>>* arena_weights = nullptr;

    // Where the gradients of such weights go instead of the frame, by the same slots: a
    // one-thread replay that starts the parameter grads from zero adds into the arena's own
    // (the same additions in the same order), so they need no copy out afterwards. Null: none.
    const std::vector<WeightGrad<T>>* arena_weight_grads = nullptr;

    // Set for a record that is the first to reach the grads of its first operand in a program's
    // sweep, which left them unzeroed (Program::first_write): it writes 0 + its contribution
    // there instead of adding it.
    bool first_write = false;

    // Whether the record reading the weight at w_slot applies its SGD step (and marks it applied).
    bool applies_sgd(uint32_t w_slot) const {
        if (!fused_sgd) return false;
        const int64_t i = fused_sgd->find(w_slot);
        if (i < 0) return false;
        fused_sgd->applied[size_t(i)] = 1;
        return true;
    }
    const T* transposed(uint32_t w_slot) const { return find(transposed_weights, w_slot); }
    // The values of the linear weight whose first element is at w_slot.
    const T* weight(uint32_t w_slot) const {
        const T* w = find(arena_weights, w_slot);
        return w ? w : v + w_slot;
    }
    // Where the gradient of the linear weight whose first element is at w_slot accumulates, and
    // in `add` whether it adds to what is there (false: the first write of a grad that starts the
    // call at zero, which then writes instead, and the next one adds).
    T* weight_grad(uint32_t w_slot, bool& add) const {
        add = true;
        if (arena_weight_grads)
            for (const WeightGrad<T>& w : *arena_weight_grads)
                if (w.slot == w_slot) {
                    add = !w.unwritten;
                    w.unwritten = false;
                    return w.grad;
                }
        return g + w_slot;
    }
    T* values() const { return v; }
    T* grads() const { return g; }
    HugeBuffer<T>& scratch(size_t n) const {
        scr->resize(n);
        return *scr;
    }

private:
    // The pointer kept for `slot` in a (slot, pointer) index (a few entries), or null.
    static const T* find(const std::vector<std::pair<uint32_t, const T*>>* index, uint32_t slot) {
        if (index)
            for (const auto& [s, p] : *index)
                if (s == slot) return p;
        return nullptr;
    }
};

}  // namespace bt
