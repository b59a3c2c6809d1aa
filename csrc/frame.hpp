// What running a record needs: where values and grads live, and scratch space for gathering.
//
// A record addresses slots by index, so it runs against any pair of arrays laid out alike: the
// arena's own (eager appends and sweeps) or a recorded program's per-thread copy (replay). Two
// threads replaying one program each pass their own frame and never touch shared state.
#pragma once
#include <cstddef>
#include <vector>

namespace bt {

template <typename T>
struct Frame {
    T* v;
    T* g;
    std::vector<T>* scr;

    T* values() const { return v; }
    T* grads() const { return g; }
    std::vector<T>& scratch(size_t n) const {
        if (scr->size() < n) scr->resize(n);
        return *scr;
    }
};

}  // namespace bt
