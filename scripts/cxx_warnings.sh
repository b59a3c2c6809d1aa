#!/usr/bin/env bash
# The core at -Wall -Wextra -Werror with g++ and clang++ (whichever are installed; CI installs both),
# compile-only: every C++ test and example includes the headers it uses, the CPU probe is the one
# binding compiled without Python here, and each ISA level's target macros select different code
# (kernels/simd.hpp), so the test of the kernels is checked at each. With MinGW's g++ installed,
# the platform layer's Windows branch is compiled too.
# Usage: scripts/cxx_warnings.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
flags=(-std=c++20 -fsyntax-only -fopenmp-simd -Wall -Wextra -Werror -Wno-missing-field-initializers -I"$here/csrc")
found=0
# clang++ 16 or later: clang 15 cannot capture a structured binding in a lambda (C++20), which
# the core does.
clang=clang++
for v in 20 19 18 17 16; do if command -v "clang++-$v" >/dev/null; then clang="clang++-$v"; break; fi; done
for cxx in g++ "$clang"; do
  command -v "$cxx" >/dev/null || { echo "cxx_warnings: $cxx not installed, skipped"; continue; }
  found=$((found + 1))
  # two compilations at a time; xargs fails if any did
  printf '%s\0' "$here"/tests/cpp/test_*.cpp "$here"/examples/cpp/*.cpp | xargs -0 -P 2 -n 1 "$cxx" "${flags[@]}"
  if [ "$(uname -m)" = x86_64 ]; then
    for march in x86-64-v2 x86-64-v3 x86-64-v4; do
      "$cxx" "${flags[@]}" -march="$march" "$here/tests/cpp/test_gemm.cpp"
    done
  fi
  echo "cxx_warnings: $cxx ($("$cxx" -dumpversion)) warning-free"
done
[ "$found" -gt 0 ] || { echo "cxx_warnings: no C++ compiler"; exit 1; }
if command -v x86_64-w64-mingw32-g++-posix >/dev/null; then
  printf '#include "column.hpp"\n#include "huge_buffer.hpp"\nint main() { bt::Column<float> c(1000); c.ensure(10); }\n' |
    x86_64-w64-mingw32-g++-posix "${flags[@]}" -x c++ -
  echo "cxx_warnings: the platform layer's Windows branch compiles (MinGW)"
fi
