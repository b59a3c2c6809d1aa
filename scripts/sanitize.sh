#!/usr/bin/env bash
# Builds the C++ core tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
# The core has no Python in it, so this checks its memory and arithmetic behaviour directly.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/build/sanitize}"
mkdir -p "$out"
"${CXX:-g++}" -std=c++20 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
  -fno-sanitize-recover=all -fopenmp-simd -Wall -Wextra -Wno-missing-field-initializers \
  "$here/tests/cpp/test_core.cpp" -o "$out/test_core"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_core"
