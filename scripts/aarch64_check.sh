#!/usr/bin/env bash
# The C++ kernel tests for aarch64, cross-compiled (aarch64-linux-gnu-g++) and run under qemu-user:
# once with the NEON kernels (csrc/kernels/simd.hpp's aarch64 branch, what an aarch64 build of
# the extension compiles) and once with the portable lanes (-DBT_PORTABLE_SIMD), each checked
# against the tests' references at their tolerances, as the x86-64 levels are; then the
# kernel digest (scripts/kernel_digest.cpp) of both builds, compared value by value.
#
#   bash scripts/aarch64_check.sh [OUT_DIR] [TEST ...]     (default: build/aarch64; every test below)
#
# Static binaries, so qemu needs no aarch64 sysroot. Left out: test_core, whose arenas reserve
# address ranges larger than qemu-user maps for a guest, and test_threads, whose fork test
# aborts inside qemu-user itself (an assertion of qemu's when the forked child starts a thread;
# its other checks pass). Under emulation the GEMM and vmath sweeps take minutes on a shared
# two-core host, so this runs by hand, not in .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/aarch64}
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test_gemm test_vmath test_value test_program test_quad)
CXX=${CXX:-aarch64-linux-gnu-g++}
QEMU=${QEMU:-qemu-aarch64}
for tool in "$CXX" "$QEMU"; do
  command -v "$tool" >/dev/null || { echo "aarch64_check: $tool not found (apt-get install g++-aarch64-linux-gnu qemu-user)"; exit 2; }
done
mkdir -p "$out"
# The extension's flags (CMakeLists.txt) with the warnings as errors.
flags=(-std=c++20 -O2 -fno-math-errno -fno-trapping-math -ffp-contract=off -fopenmp-simd -Wall -Wextra
       -Wno-missing-field-initializers -Werror -pthread -static -Icsrc)
status=0
for variant in neon portable; do
  extra=()
  [ "$variant" = portable ] && extra=(-DBT_PORTABLE_SIMD)
  for t in "${tests[@]}" kernel_digest; do
    src=tests/cpp/$t.cpp
    [ "$t" = kernel_digest ] && src=scripts/kernel_digest.cpp
    "$CXX" "${flags[@]}" "${extra[@]}" -o "$out/${t}_$variant" "$src" &
  done
  wait
  for t in "${tests[@]}"; do
    start=$(date +%s)
    if "$QEMU" "$out/${t}_$variant" > "$out/${t}_$variant.log" 2>&1; then
      echo "aarch64 $variant $t: passed in $(( $(date +%s) - start )) s: $(tail -n 1 "$out/${t}_$variant.log")"
    else
      echo "aarch64 $variant $t: FAILED"; tail -n 20 "$out/${t}_$variant.log"; status=1
    fi
  done
  "$QEMU" "$out/kernel_digest_$variant" > "$out/digest_$variant.txt"
done
# Value by value: how many are equal to the bit, and the largest difference relative to the
# value's size (the sums' order differs where the register widths do: double has 2 NEON lanes
# against the portable 4), which must stay within rounding.
python3 - "$out/digest_neon.txt" "$out/digest_portable.txt" <<'PY' || status=1
import sys
a, b = (open(p).read().split("\n") for p in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
same, worst = 0, {}
for x, y in zip(a, b):
    if not x:
        continue
    kx, vx = x.rsplit(" ", 1)
    ky, vy = y.rsplit(" ", 1)
    assert kx == ky, (kx, ky)
    fx, fy = float.fromhex(vx), float.fromhex(vy)
    same += vx == vy
    kind = kx.split(" ")[0]
    worst[kind] = max(worst.get(kind, 0.0), abs(fx - fy) / max(1.0, abs(fy)))
total = sum(1 for x in a if x)
print(f"aarch64 kernel digest: {same} of {total} values equal to the bit between NEON and portable")
bad = []
for kind, w in sorted(worst.items()):
    tol = 1e-5 if kind.startswith("f32") else 1e-13
    print(f"  {kind}: largest relative difference {w:.3g} (tolerance {tol:g})")
    if w > tol:
        bad.append(kind)
sys.exit(1 if bad else 0)
PY
exit $status
