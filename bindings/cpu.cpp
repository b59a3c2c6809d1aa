// burtorch._cpu: the CPU probe the loader (src/burtorch/_isa.py) asks before it picks a build of
// burtorch._core. Built for the baseline target, so it imports on any CPU.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kernels/dispatch.hpp"

namespace nb = nanobind;

NB_MODULE(_cpu, m) {
    m.doc() = "burtorch's CPU probe: the ISA levels this CPU and OS run.";
    m.def("supported_levels", &bt::isa::supported_levels,
          "The ISA levels this CPU and OS run, lowest first (generic, avx2, avx512 on x86-64).");
}
