#!/usr/bin/env bash
# ThreadSanitizer over the threaded code without Python: the thread pool, a linear layer split
# across threads and the threaded replay (tests/cpp/test_threads.cpp), built by CMake with
# -fsanitize=thread. (The Python side is checked by a stress loop in tests/test_threads.py: an
# uninstrumented CPython under TSan reports its own internals.)
# Usage: scripts/tsan.sh [build-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/build/tsan}"
cmake -S "$here" -B "$out" -DBURTORCH_PYTHON=OFF -DBURTORCH_BUILD_TESTS=ON -DBURTORCH_NATIVE=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBURTORCH_SANITIZE=thread >/dev/null
cmake --build "$out" -j 2 --target test_threads >/dev/null
# die_after_fork=0: the fork test starts threads in a child of a threaded parent (TSan refuses by default).
TSAN_OPTIONS=halt_on_error=1:abort_on_error=1:die_after_fork=0 "$out/test_threads"
