// burtorch's C++ core, everything public in one include: arenas of scalar nodes, the op tables,
// appending ops (scalar, var-arity, range), the reverse sweep, optimizer steps, gradient
// compressors and the RNG.
// It knows nothing of Python; bindings/ exposes it, and value.hpp offers it to C++ users.
#pragma once
#include "arena.hpp"
#include "backward.hpp"
#include "compress.hpp"
#include "forward.hpp"
#include "fused_sgd.hpp"
#include "modes.hpp"
#include "ops.hpp"
#include "optim.hpp"
#include "program.hpp"
#include "range/dispatch.hpp"
#include "reduce.hpp"
#include "replay_driver.hpp"
#include "rng.hpp"
#include "trace.hpp"
