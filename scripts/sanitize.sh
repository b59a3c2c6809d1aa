#!/usr/bin/env bash
# ASan + UBSan, two ways:
#  1. the C++ core's own tests (tests/cpp/test_core.cpp, tests/cpp/test_gemm.cpp), no Python
#     involved;
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

# The linear layer's kernels pick their SIMD at build time: test the portable ones and this
# machine's (AVX-512 or AVX2 where present).
for simd in portable native; do
  echo "sanitize: GEMM kernel tests ($simd)"
  arch=(); [ "$simd" = native ] && arch=(-march=native)
  "${CXX:-g++}" -std=c++20 -O1 -g "${arch[@]}" "${flags[@]}" -Wall -Wextra \
    "$here/tests/cpp/test_gemm.cpp" -o "$out/test_gemm_$simd"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_gemm_$simd"
done

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
