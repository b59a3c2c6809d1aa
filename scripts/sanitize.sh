#!/usr/bin/env bash
# ASan + UBSan, three ways:
#  1. the C++ tests (tests/cpp/test_*.cpp) and examples (examples/cpp), built by CMake and run by
#     ctest, portable; then the tests of the code whose SIMD is picked at build time (the kernels,
#     and the threaded layers and replay over them) once more tuned for this CPU, so that its
#     AVX-512 or AVX2 code is checked too, and on a CPU with AVX-512 a third time built for AVX2
#     and FMA alone; no Python involved;
#  2. the Python extension itself built with the sanitizers (on a CPU with AVX-512 for AVX2 + FMA
#     alone, elsewhere portable), running the Python test suite (the stateful model test and the
#     API fuzzer included: their child processes inherit the sanitizers), so the binding layer,
#     where bad input from users arrives, is checked too;
#  3. the atheris harness of every loader, when atheris is installed: a coverage-guided search on
#     the regular build, then every input it kept replayed through the sanitized build (libFuzzer
#     sees no coverage while GCC's ASan runtime is preloaded, so the search cannot run under it).
# Usage: scripts/sanitize.sh [build-dir]
#   SANITIZE_PYTEST_ARGS: which tests; SANITIZE_FUZZ_SECONDS: the harness's search (default 30);
#   SANITIZE_TIMEOUT: seconds the sanitized test suite may take before it counts as hung (2400).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/build/sanitize}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # absolute: the tests run from inside it (a relative PYTHONPATH missed the build)
step() { echo "sanitize: $1 (${SECONDS} s so far)"; }
# Runs a command into a log: its last lines if it passes, all of it if it fails.
logged() { local log="$1"; shift; if "$@" > "$log" 2>&1; then tail -n 2 "$log"; else cat "$log"; return 1; fi; }

# The C++ builds at -O0 -g1 (line tables for ASan's reports), test_gemm and test_vmath at -O1:
# their sweeps are most of the tests' run time (test_vmath: 39 s at -O0, 8 at -O1; it builds in a
# second), the other tests run in seconds and build in about half the time at -O0 (57 against 31 s
# for test_value on a two-core Zen 3 host; at RelWithDebInfo's -O2 -g the whole portable build took
# 540 s). Two tests at a time (test_gemm's float and double halves side by side).
sanitized_cxx=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1 -DNDEBUG"
  -DBURTORCH_SWEEP_TEST_FLAGS=-O1 -DBURTORCH_SANITIZE=address,undefined)
# Ninja where it is installed: given several targets, a Makefile build makes them one at a time.
generator="Unix Makefiles"
if ninja --version >/dev/null 2>&1; then generator=Ninja; fi  # runs, not only found (a shim may not)
# cxx_tests NAME TEST_REGEX TARGETS... -- CMAKE_ARGS...: builds those targets in cpp-NAME and runs
# the tests matching TEST_REGEX.
cxx_tests() {
  local name="$1" regex="$2" targets=() dir="$out/cpp-$1"
  shift 2
  while [ "$1" != "--" ]; do targets+=("$1"); shift; done
  shift
  step "C++ tests ($name build)"
  # a directory configured with the other generator cannot be configured again: start it afresh
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -qx "CMAKE_GENERATOR:INTERNAL=$generator" "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  cmake -S "$here" -B "$dir" -G "$generator" -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON "${sanitized_cxx[@]}" "$@" \
    >/dev/null
  cmake --build "$dir" -j 2 --target "${targets[@]}" >/dev/null
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest -j 2 --output-on-failure -R "$regex")
}
# Every test and example (not the native benchmarks, which ctest does not run).
all_cxx=()
for f in "$here"/tests/cpp/test_*.cpp "$here"/examples/cpp/*.cpp; do all_cxx+=("$(basename "$f" .cpp)"); done
cxx_tests portable '.' "${all_cxx[@]}" -- -DBURTORCH_NATIVE=OFF
# Tuned for this CPU, only the tests that reach SIMD code (the kernels, and the linear layers and
# threaded replay over them): the others run scalar C++ only, the same whichever -march (building
# them all again took about 200 s of a 1,585 s CI run).
cxx_tests native '^test_(gemm_.*|vmath|threads|core)$' test_gemm test_vmath test_threads test_core -- \
  -DBURTORCH_NATIVE=ON
# The kernels' AVX2 code, where tuning for this CPU compiled its AVX-512 code instead.
if grep -qw avx512f /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  cxx_tests avx2 '^test_(gemm_.*|vmath)$' test_gemm test_vmath -- -DBURTORCH_NATIVE=OFF \
    "-DCMAKE_CXX_FLAGS=-mavx2 -mfma"
fi

# The extension's kernels: on a CPU with AVX-512, whose regular build (the README's test command)
# holds only the AVX-512 ones, built for AVX2 + FMA alone, the CPUs most users have, so that the
# Python suite checks that code end to end under the sanitizers; elsewhere portable, the code the
# regular build does not hold there. (CI ran the suite against a separate AVX2 build before: 108 s
# of a 1,006 s run, for what this pass now covers.)
kernels=portable
ext_flags=()
if grep -qw avx512f /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  kernels=avx2
  ext_flags=("-Ccmake.define.CMAKE_CXX_FLAGS=-mavx2 -mfma")
fi
step "building the Python extension with ASan + UBSan ($kernels kernels)"
site="$out/site"
rm -rf "$site"
# -O1 -g1 as above (here Debug's: the extension's asserts on) builds in about 60% of the time of
# RelWithDebInfo's -O2 -g, and the tests take as long.
python -m pip install -q --no-deps --target "$site" "$here" \
  -Ccmake.build-type=Debug "-Ccmake.define.CMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -Cbuild-dir="$out/ext-build" \
  -Ccmake.define.BURTORCH_SANITIZE=address,undefined -Ccmake.define.BURTORCH_NATIVE=OFF \
  -Ccmake.define.BURTORCH_STUBS=OFF "${ext_flags[@]}"
# A developer's editable install registers an import hook that would shadow the sanitized build on
# PYTHONPATH (child processes too); this sitecustomize drops it. Then make sure it worked.
# It also makes subprocess fork rather than vfork: a child started with vfork runs on its parent's
# memory until it execs, and under the preloaded sanitizer runtimes, with other threads of the
# parent running, one such exec failed with EFAULT (test_api_fuzz starts its children from a
# thread pool; seen once in a sanitized run here). Plain fork gives the child its own copy.
cat > "$site/sitecustomize.py" <<'PY'
import subprocess
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable_")]
subprocess._USE_VFORK = False
PY
asan_rt="$("${CXX:-g++}" -print-file-name=libasan.so)"
ubsan_rt="$("${CXX:-g++}" -print-file-name=libubsan.so)"
# PYTHONMALLOC=malloc: Python objects come from malloc, not from CPython's own pools, so ASan
# also sees a freed Python object read through a pointer the extension borrowed (the pools
# recycle freed objects out of ASan's sight: such a read passed unseen before).
sanitized() {
  (cd "$out" && LD_PRELOAD="$asan_rt $ubsan_rt" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONMALLOC=malloc PYTHONPATH="$site" "$@")
}
sanitized python -c "import burtorch, sys; sys.exit(None if 'sanitize: address' in burtorch.build_info else
  'sanitize: the tests would import ' + burtorch.__file__ + ', not the sanitized build')"
sanitized python -c "import sys, burtorch; sys.exit(None if burtorch._core.simd == '$kernels' else
  'sanitize: built ' + burtorch._core.simd + ' kernels, not $kernels')"

# CPython is not instrumented and keeps memory until exit: leaks are not checked here (the C++
# tests above check them). Everything else aborts the run. Left out: the plots (matplotlib only),
# and the federated executors (test_fl_executors, test_fl_workers, test_fl_tuning: one `ray.init` there
# hung and another timed out), whose worker processes and Ray raylets would each start under the
# preloaded runtime (a Ray cluster under ASan does not come up in any useful time); their client
# code is the same sanitized core the other tests drive. And the benchmark tests that run other
# frameworks (marked `peers`): PyTorch and JAX took a quarter of this step's time, uninstrumented,
# under the preloaded runtime. burtorch's rows of the graph benchmarks still run, and its training
# rows drive the same model and step code as the other tests. A hang fails the step instead of the
# job.
# With pytest-xdist installed the tests run in two worker processes (they inherit the preloaded
# runtimes): the step took 314 s in one process in a 1,548 s CI run. A test file to each process:
# the API fuzzer's batches start once per process that runs one of its tests.
# (Without it, pyproject.toml's addopts, which ask for xdist's processes, are replaced.)
workers=(-o "addopts=-p no:hypothesispytest")
if python -c "import xdist" 2>/dev/null; then workers=(-n 2 --dist loadfile); fi
step "the Python test suite against the sanitized extension"
sanitized timeout --signal=INT --kill-after=30 "${SANITIZE_TIMEOUT:-2400}" \
  python -m pytest -q -p no:cacheprovider "${workers[@]}" \
  ${SANITIZE_PYTEST_ARGS:-"$here/tests" -k "not plots and not train_plot" -m "not peers" \
    --ignore="$here/tests/test_fl_executors.py" --ignore="$here/tests/test_fl_workers.py" \
    --ignore="$here/tests/test_fl_tuning.py"}

if python -c "import atheris" 2>/dev/null; then
  corpus="$out/loads-corpus"
  mkdir -p "$corpus"
  step "atheris: searching inputs of every loader for ${SANITIZE_FUZZ_SECONDS:-30} s (regular build)"
  (cd "$out" && logged "$out/atheris-search.log" python "$here/fuzz/fuzz_loads.py" "$corpus" \
    -max_total_time="${SANITIZE_FUZZ_SECONDS:-30}")
  step "atheris: replaying the $(find "$corpus" -type f | wc -l) inputs kept through the sanitized build"
  logged "$out/atheris-replay.log" sanitized python "$here/fuzz/fuzz_loads.py" --replay "$corpus"
else
  step "atheris is not installed (pip install atheris): the loaders' harness is skipped"
fi
step "done"
