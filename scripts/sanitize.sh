#!/usr/bin/env bash
# ASan + UBSan, two ways:
#  1. the C++ tests (tests/cpp/test_*.cpp) and examples (examples/cpp), built by CMake and run by
#     ctest twice: portable and tuned for this CPU (the linear kernels pick their SIMD at build
#     time, so both the plain and the AVX-512/AVX2 code are checked); no Python involved;
#  2. the Python extension itself built with the sanitizers, running the Python test suite, so
#     the binding layer (where bad input from users arrives) is checked too.
# Usage: scripts/sanitize.sh [build-dir]   (set SANITIZE_PYTEST_ARGS to choose tests)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/build/sanitize}"
mkdir -p "$out"

for native in OFF ON; do
  echo "sanitize: C++ tests (ctest, BURTORCH_NATIVE=$native)"
  cmake -S "$here" -B "$out/cpp-$native" -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON -DBURTORCH_NATIVE=$native \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBURTORCH_SANITIZE=address,undefined >/dev/null
  cmake --build "$out/cpp-$native" -j 2 >/dev/null
  (cd "$out/cpp-$native" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure)
done

echo "sanitize: Python extension built with ASan + UBSan, running the test suite"
site="$out/site"
rm -rf "$site"
python -m pip install -q --no-deps --target "$site" "$here" \
  -Ccmake.build-type=RelWithDebInfo -Cbuild-dir="$out/ext-build" \
  -Ccmake.define.BURTORCH_SANITIZE=address,undefined -Ccmake.define.BURTORCH_NATIVE=OFF \
  -Ccmake.define.BURTORCH_STUBS=OFF
asan_rt="$("${CXX:-g++}" -print-file-name=libasan.so)"
ubsan_rt="$("${CXX:-g++}" -print-file-name=libubsan.so)"
# CPython is not instrumented and keeps memory until exit: leaks are not checked here (the core
# test above checks them). Everything else aborts the run.
(cd "$out" && LD_PRELOAD="$asan_rt $ubsan_rt" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONPATH="$site" \
  python -m pytest -q -p no:cacheprovider ${SANITIZE_PYTEST_ARGS:-"$here/tests" -k "not plots and not train_plot"})
