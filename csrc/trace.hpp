// Tracing a program: while a trace is open on a thread, the ops appended to its arena are the
// program's, and what the caller notes besides them (comparisons made on traced values, the id
// inputs of records) goes into the TraceSpec that Program::build takes at the end.
//
// One trace at most per thread (programs cannot be traced inside a trace). The bindings keep
// the Python side (the arena object, the user's source line); a C++ user drives the same calls.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modes.hpp"
#include "program.hpp"

namespace bt {

class Trace {
public:
    // Opens a trace of `arena` on this thread; a sample's id row holds num_ids ids.
    Trace(ArenaBase* arena, uint32_t num_ids) : arena_(arena) {
        spec_.base = arena->checkpoint();
        spec_.num_ids = num_ids;
    }
    ArenaBase* arena() const { return arena_; }
    TraceSpec& spec() { return spec_; }

    // Notes a comparison on traced slots (b null: against the number c) and its outcome, which
    // every replay re-checks. `where` names the line that made it.
    void guard(GuardOp op, bool result, uint32_t a, const uint32_t* b, double c, std::string where) {
        Guard g;
        g.op = op;
        g.expected = result;
        g.rhs_const = b == nullptr;
        g.a = a;
        g.b = b ? *b : 0;
        g.c = c;
        g.where = std::move(where);
        spec_.guards.push_back(std::move(g));
    }

    // The record just appended holds pos.size() ids at the end of its args; pos[i] is the
    // position in a sample's id row of id i (-1: a plain int, not an input), each < bound.
    void id_inputs(const std::vector<int64_t>& pos, uint32_t bound) {
        if (arena_->num_records() == 0) return;
        const uint32_t rec = static_cast<uint32_t>(arena_->num_records() - 1);
        const uint32_t n = static_cast<uint32_t>(pos.size());
        for (uint32_t i = 0; i < n; ++i) {
            if (pos[i] < 0) continue;
            if (uint64_t(pos[i]) >= spec_.num_ids)
                throw std::invalid_argument("a traced id's position is out of range");
            spec_.ids.push_back(IdInput{rec, n - 1 - i, uint32_t(pos[i]), bound});
        }
    }

    // At the end, in this order: rewound() (the arena must not have been rewound below the
    // trace), then the root, the float inputs and each wrt span (arena slots).
    const char* rewound() const { return arena_->mark_problem(spec_.base); }
    void set_root(uint32_t root) { spec_.root = root; }
    void add_input(uint32_t slot) { spec_.inputs.push_back(slot); }
    // std::invalid_argument when the span straddles the trace's start.
    void add_wrt(const Span& s) {
        if (s.first < spec_.base.slots && s.first + s.second > spec_.base.slots)
            throw std::invalid_argument("a wrt vector mixes nodes from before and during the trace");
        spec_.wrt.push_back(s);
    }

private:
    ArenaBase* arena_;
    TraceSpec spec_;
};

// The trace open on this thread, if any (set by begin_trace, cleared by end_trace).
inline thread_local Trace* t_current_trace = nullptr;

inline Trace* current_trace() { return t_current_trace; }
// The open trace when it traces `arena`, else null.
inline Trace* trace_of(const ArenaBase* arena) {
    return t_current_trace && t_current_trace->arena() == arena ? t_current_trace : nullptr;
}

// Opens a trace of `arena` on this thread (std::invalid_argument: one is open already, or ops
// record nothing under no_grad).
inline void begin_trace(ArenaBase* arena, uint32_t num_ids) {
    if (t_current_trace)
        throw std::invalid_argument("already tracing on this thread: programs cannot be traced inside a trace");
    if (!grad_enabled()) throw std::invalid_argument("cannot trace under no_grad(): a trace records ops");
    t_current_trace = new Trace(arena, num_ids);
}

// Closes this thread's trace and hands it over (null: none was open).
inline std::unique_ptr<Trace> end_trace() {
    std::unique_ptr<Trace> t(t_current_trace);
    t_current_trace = nullptr;
    return t;
}

}  // namespace bt
