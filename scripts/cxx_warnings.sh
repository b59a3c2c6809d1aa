#!/usr/bin/env bash
# The core at -Wall -Wextra -Werror with g++ and clang++ (whichever are installed; CI installs both),
# compile-only: every C++ test and example includes the headers it uses, the CPU probe is the one
# binding compiled without Python here, and each ISA level's target macros select different code
# (kernels/simd.hpp), so the test of the kernels is checked at each. With MinGW's g++ installed,
# the whole core is compiled for Windows too (the platform layer's Windows branch); with aarch64's
# cross g++, the NEON kernels.
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
  printf '%s\0' "$here"/tests/cpp/test_*.cpp "$here"/examples/cpp/*.cpp "$here"/scripts/kernel_digest.cpp | xargs -0 -P 2 -n 1 "$cxx" "${flags[@]}"
  if [ "$(uname -m)" = x86_64 ]; then
    for march in x86-64-v2 x86-64-v3 x86-64-v4; do
      "$cxx" "${flags[@]}" -march="$march" "$here/tests/cpp/test_gemm.cpp"
    done
  fi
  echo "cxx_warnings: $cxx ($("$cxx" -dumpversion)) warning-free"
done
[ "$found" -gt 0 ] || { echo "cxx_warnings: no C++ compiler"; exit 1; }
# aarch64 (with its cross-compiler installed): the NEON kernels and the portable lanes they are
# checked against (scripts/aarch64_check.sh runs them under qemu-user).
if command -v aarch64-linux-gnu-g++ >/dev/null; then
  for variant in "" -DBT_PORTABLE_SIMD; do
    for src in tests/cpp/test_gemm.cpp tests/cpp/test_vmath.cpp scripts/kernel_digest.cpp; do
      aarch64-linux-gnu-g++ "${flags[@]}" ${variant:+"$variant"} "$here/$src"
    done
  done
  echo "cxx_warnings: aarch64-linux-gnu-g++ ($(aarch64-linux-gnu-g++ -dumpversion)): the NEON and portable kernels warning-free"
fi
if command -v x86_64-w64-mingw32-g++-posix >/dev/null; then
  # the whole core (test_core and test_program include burtorch.hpp; test_threads forks, POSIX only)
  printf '%s\0' "$here"/tests/cpp/test_core.cpp "$here"/tests/cpp/test_program.cpp |
    xargs -0 -P 2 -n 1 x86_64-w64-mingw32-g++-posix "${flags[@]}"
  echo "cxx_warnings: the core and its platform layer's Windows branch compile (MinGW g++ $(x86_64-w64-mingw32-g++-posix -dumpversion))"
fi
