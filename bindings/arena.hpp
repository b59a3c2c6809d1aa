// What arena.cpp (the Arena and Checkpoint types) and arena_scope.cpp (the thread's arenas,
// checkpoints of them, dtype, label and grad modes) share.
#pragma once
#include "common.hpp"

namespace btpy {

extern PyObject* g_arena_type;  // burtorch.Arena

// A checkpoint of one or two arenas (the thread's float32 and float64 arenas by default).
struct Checkpoint {
    nb::object arena[2];
    bt::Mark mark[2];
};
// A checkpoint of a0 and a1 (either may be a null handle).
Checkpoint take_checkpoint(nb::handle a0, nb::handle a1);
void rewind_to(const Checkpoint& cp);

// Raises RuntimeError when `b` is another thread's private default arena: discarding its nodes
// (rewind, clear, release_unused) from here would pull them from under that thread.
void check_owner(const ArenaBox& b, const char* what);

// `with arena:`: pushes the arena on the thread's stacks / pops it (it must be the innermost).
void enter_arena(nb::handle self);
void exit_arena(nb::handle self);

}  // namespace btpy
