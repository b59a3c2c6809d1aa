// burtorch._core: the module file only calls each area's init, in dependency order.
#include "build_info.hpp"
#include "common.hpp"

NB_MODULE(_core, m) {
    m.doc() = "burtorch native core: arenas of scalar nodes, ops, reverse sweep.";
    btpy::init_errors(m);
    btpy::init_arena(m);
    btpy::init_arena_scope(m);
    btpy::init_value(m);
    btpy::init_functions(m);
    btpy::init_vector(m);
    btpy::init_vector_functions(m);
    btpy::init_range(m);
    btpy::init_range_layers(m);
    btpy::init_optim(m);
    btpy::init_compress(m);
    btpy::init_trace(m);
    btpy::init_batch(m);
    btpy::init_program(m);
    btpy::init_threads(m);
    btpy::init_quad(m);
    btpy::init_lanes(m);
    // The SIMD kernels this build chose, and whether its multiply-adds round once.
    m.attr("simd") = bt::simd::isa;
    m.attr("fused_multiply_add") = bt::simd::kFusedMadd;
#ifdef BT_ISA_LEVEL
    // The ISA level this build of the module was compiled for (CMakeLists.txt's levels).
    m.attr("isa_level") = BT_ISA_LEVEL;
#endif
#ifdef BT_BUILD_INFO
    m.attr("build_info") = BT_BUILD_INFO;
#endif
}
