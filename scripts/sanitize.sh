#!/usr/bin/env bash
# ASan + UBSan, two ways:
#  1. the C++ core's own tests (tests/cpp/test_core.cpp), no Python involved;
#  2. the Python extension itself built with the sanitizers, running the Python test suite, so
#     the binding layer (where bad input from users arrives) is checked too.
# Usage: scripts/sanitize.sh [build-dir]   (set SANITIZE_PYTEST_ARGS to choose tests)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/build/sanitize}"
mkdir -p "$out"
flags=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)

echo "sanitize: C++ core tests"
"${CXX:-g++}" -std=c++20 -O1 -g "${flags[@]}" -fopenmp-simd -Wall -Wextra -Wno-missing-field-initializers \
  "$here/tests/cpp/test_core.cpp" -o "$out/test_core"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_core"
"${CXX:-g++}" -std=c++20 -O1 -g "${flags[@]}" -fopenmp-simd -Wall -Wextra -Wno-missing-field-initializers \
  "$here/tests/cpp/test_program.cpp" -o "$out/test_program"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_program"

echo "sanitize: Python extension built with ASan + UBSan, running the test suite"
site="$out/site"
rm -rf "$site"
python -m pip install -q --no-deps --target "$site" "$here" \
  -Ccmake.build-type=RelWithDebInfo -Cbuild-dir="$out/ext-build" \
  -Ccmake.define.BURTORCH_SANITIZE=address,undefined -Ccmake.define.BURTORCH_NATIVE=OFF
asan_rt="$("${CXX:-g++}" -print-file-name=libasan.so)"
ubsan_rt="$("${CXX:-g++}" -print-file-name=libubsan.so)"
# CPython is not instrumented and keeps memory until exit: leaks are not checked here (the core
# test above checks them). Everything else aborts the run.
(cd "$out" && LD_PRELOAD="$asan_rt $ubsan_rt" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONPATH="$site" \
  python -m pytest -q -p no:cacheprovider ${SANITIZE_PYTEST_ARGS:-"$here/tests" -k "not plots and not train_plot"})
