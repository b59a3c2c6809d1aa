"""Lane programs replayed natively: a recorded program's records compiled to one C++ function.

The lane replay (csrc/lanes/replay.hpp) runs a block of samples record by record, each record a
vector loop over the block's lanes that loads its arguments from the lane frame and stores its
output back. Here the program's records become one loop over the lanes instead (per segment, see
below): every record's forward, then the reverse sweep, in locals, with the op table's own
expressions (csrc/lanes/native.hpp expands ops.hpp's rows into functions) and the interpreter's
order of operations (kernels.hpp: the `go != 0 ? base + go * d : base` selects, the var-arity
ops' accumulation orders, pow_const's branches picked by its immediate). It reads the block's
inputs, parameters and constants from their frame slots and leaves what the replay reads back
(the root's and the guards' values, the wrt nodes' grads) in theirs, so everything around it
(rows of X in, guards, rows out, streaming stores) stays the interpreter's. Its rows mode, for
full blocks of a guard-free program's per-sample rows (what .map asks for), also reads the block's
rows of X and writes its values and rows of grads in the same loop.

Bits: the core and the generated code are both compiled with -ffp-contract=off, so an expression
rounds the same whether a kernel runs it per record or the fused loop runs it with its operands
in registers; library calls (exp, tanh, ...) are the same libm's. Still, each library is checked
after loading: a few hundred samples replayed both ways must agree bit for bit, else the program
keeps the interpreter. Records that call the library (no vector variants without -ffast-math)
end a vectorized segment and run in their own scalar loop, values crossing segments through the
frame, so the rest of the program stays vectorized.

When: `.map` starts compiling a program in the background once it has mapped NATIVE_AFTER lanes
(a cache hit loads at once) and switches when the library is ready and checked; until then, and
whenever anything fails (no compiler, a compile error, an unwritable cache, a truncated or
foreign cached file, a bit mismatch), the interpreter runs, with the same results, and
native_status says why. compile_native() compiles and loads at once. set_native_programs(False)
or BURTORCH_NATIVE_PROGRAMS=0 turns it off.

Cache: $BURTORCH_CACHE_DIR, else $XDG_CACHE_HOME/burtorch, else ~/.cache/burtorch; one file per
SHA-256 of (source, flags, compiler identity, burtorch build), written to a temporary file and
renamed into place, so processes compiling the same program at once never see half a file.

The parts: codegen.py writes the C++ source from the program's structure, toolchain.py finds
the compiler, its flags, the headers and the cache, jobs.py runs a program's compile, loads and
checks its library and decides when .map switches.
"""
from __future__ import annotations

from .codegen import generate
from .jobs import (
    CHECK_SAMPLES,
    NATIVE_AFTER,
    _wait,
    cached_path,
    compile_native,
    compile_program,
    native_programs_enabled,
    native_status,
    on_map,
    poll,
    set_native_programs,
    wait_program,
)
from .toolchain import FLAGS, cache_dir, compiler, include_dir, isa_flags

__all__ = ["CHECK_SAMPLES", "FLAGS", "NATIVE_AFTER", "cache_dir", "cached_path", "compile_native", "compile_program",
           "compiler", "generate", "include_dir", "isa_flags", "native_programs_enabled", "native_status", "on_map",
           "poll", "set_native_programs", "wait_program", "_wait"]
