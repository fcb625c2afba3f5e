#!/usr/bin/env bash
# Runs every test program and counts the "ok / not ok / skip" lines they print (tests/check.h).
#   build/tests/test_*, build/tests/gpu/test_*   C unit and integration tests
#   build/tests/cuemu/test_*                     the GPU tests on the CPU emulator of CUDA (tests/cuemu)
#   tests/test_*.py                              Python tests (reference model, tools)
#   tests/test_*.sh                              shell integration tests (resume, CLI, mpirun ...)
# A program that exits non-zero without reporting a failed check counts as one failure.
# Ends with "N passed, M failed, K skipped" and exits 1 when anything failed.
# TESTS=pattern runs only the programs whose path matches the pattern.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed_names=()
progs=()
B=${BUILD:-build}
for p in $B/tests/test_* $B/tests/gpu/test_* $B/tests/cuemu/test_* tests/test_*.py tests/test_*.sh; do
  [ -e "$p" ] || continue
  case "$p" in *.o|*.d) continue;; esac
  [ -n "${TESTS:-}" ] && [[ "$p" != *${TESTS}* ]] && continue
  progs+=("$p")
done
for p in "${progs[@]}"; do
  echo "== $p"
  start=$(date +%s)
  case "$p" in
    *.py) out=$(python3 "$p" 2>&1); rc=$? ;;
    *.sh) out=$(bash "$p" 2>&1); rc=$? ;;
    *)    out=$("$p" 2>&1); rc=$? ;;
  esac
  echo "$out"
  np=$(grep -c '^ok - ' <<<"$out"); nf=$(grep -c '^not ok - ' <<<"$out"); ns=$(grep -c '^skip - ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$nf" -eq 0 ]; then
    nf=1; echo "not ok - $p: exited with status $rc without reporting a failed check"
  fi
  [ "$nf" -gt 0 ] && failed_names+=("$p")
  pass=$((pass+np)); fail=$((fail+nf)); skip=$((skip+ns))
  echo "   ($np passed, $nf failed, $ns skipped in $(( $(date +%s) - start ))s)"
done
[ ${#failed_names[@]} -gt 0 ] && echo "failing programs: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
