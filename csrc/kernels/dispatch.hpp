// Which ISA levels this CPU runs, for the loader that picks one of the extension's builds at
// import (src/burtorch/_isa.py). The levels are those CMakeLists.txt builds: generic (x86-64-v2
// on x86-64, the compiler's default target elsewhere), avx2 (x86-64-v3) and avx512 (x86-64-v4).
// This header is compiled for the baseline target only: it must run on any CPU, so it asks the
// CPU (and the OS, which must save the wider registers) at run time, never through target macros.
#pragma once
#include <string>
#include <vector>

namespace bt::isa {

// The levels this CPU and OS can run, lowest first ("generic" is always first where the probe
// knows the machine; on x86-64 a CPU without x86-64-v2 gets an empty list).
inline std::vector<std::string> supported_levels() {
    std::vector<std::string> out;
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    // GCC's and clang's runtimes report AVX and AVX-512 only where the OS enables their state
    // (XGETBV), so an OS that does not save the registers gets the lower level.
    const bool v2 =
        __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("popcnt");
    const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512cd");
    if (v2) out.emplace_back("generic");
    if (v3) out.emplace_back("avx2");
    if (v4) out.emplace_back("avx512");
#else
    // Elsewhere (aarch64, MSVC, ...) one build: on aarch64 it has the NEON kernels (NEON is part
    // of its baseline, kernels/simd.hpp).
    out.emplace_back("generic");
#endif
    return out;
}

}  // namespace bt::isa
