#!/usr/bin/env bash
# Runs the test programs and counts the "ok / not ok / skip" lines they print (tests/check.h).
#   build/tests/test_*, build/tests/gpu/test_*   C unit and integration tests
#   build/tests/cuemu/test_*                     the GPU tests on the CPU emulator of CUDA (tests/cuemu)
#   tests/test_*.py                              Python tests (reference model, tools)
#   tests/test_*.sh                              shell integration tests (resume, CLI, mpirun ...)
# A program that exits non-zero without reporting a failed check counts as one failure; one that
# runs longer than the time limit is killed (with its process group) and counts as one failure,
# "not ok - PROG: timed out after N s".
# Ends with "N passed, M failed, K skipped" and exits 1 when anything failed (or nothing passed).
#
# Usage: tests/run_tests.sh [--list] [--check NAME] [PATTERN ...]
#   PATTERN ...      only the programs whose path matches one of the patterns (a shell glob
#                    matched anywhere in the path: test_decode, 'cuemu/*parity', test_run_tests.sh)
#   --list           prints the programs that would run, one a line, and runs nothing
#   --check NAME     inside each program, only the checks whose name contains NAME are reported
#                    and counted (CHECK_ONLY=NAME for tests/check.h and tests/pycheck.py)
# Environment:
#   TESTS=PATTERN    the same as one PATTERN argument (kept for make test-asan and old habits)
#   TEST_TIMEOUT=N   the time limit of each program in seconds (default 600; 0: none)
#   BUILD=DIR        where the compiled tests are (default build)
#   TESTS_SRC=DIR    where the Python and shell tests are (default tests)
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
SRC=${TESTS_SRC:-tests}
limit=${TEST_TIMEOUT:-600}
list=0
patterns=()
[ -n "${TESTS:-}" ] && patterns+=("$TESTS")
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --check) [ $# -ge 2 ] || { echo "run_tests.sh: --check needs a NAME" >&2; exit 2; }
             export CHECK_ONLY="$2"; shift ;;
    --check=*) export CHECK_ONLY="${1#--check=}" ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run_tests.sh: unknown option $1 (expected --list, --check NAME or patterns)" >&2; exit 2 ;;
    *) patterns+=("$1") ;;
  esac
  shift
done
case "$limit" in ''|*[!0-9]*) echo "run_tests.sh: TEST_TIMEOUT='$limit' (expected whole seconds)" >&2; exit 2 ;; esac

# the programs: every candidate that exists and matches a pattern (all when none is given)
matches() {
  [ ${#patterns[@]} -eq 0 ] && return 0
  local pat
  for pat in "${patterns[@]}"; do
    # shellcheck disable=SC2053
    [[ "$1" == *${pat}* ]] && return 0
  done
  return 1
}
progs=()
for p in "$B"/tests/test_* "$B"/tests/gpu/test_* "$B"/tests/cuemu/test_* "$SRC"/test_*.py "$SRC"/test_*.sh; do
  [ -e "$p" ] || continue
  case "$p" in *.o|*.d) continue;; esac
  matches "$p" && progs+=("$p")
done
if [ "$list" -eq 1 ]; then
  [ ${#progs[@]} -gt 0 ] && printf '%s\n' "${progs[@]}"
  exit 0
fi
if [ ${#progs[@]} -eq 0 ]; then
  echo "run_tests.sh: no test program matches${patterns[*]:+ ${patterns[*]}} (tests/run_tests.sh --list shows them)"
  echo "0 passed, 0 failed, 0 skipped"
  exit 1
fi
# every pattern must name something: a test asked for but not built (make builds every test with
# make test) must not vanish from a run that then reports only the others as passed
unmatched=()
for pat in "${patterns[@]}"; do
  found=0
  for p in "${progs[@]}"; do [[ "$p" == *${pat}* ]] && { found=1; break; }; done
  [ "$found" -eq 1 ] || unmatched+=("$pat")
done
if [ ${#unmatched[@]} -gt 0 ]; then
  echo "run_tests.sh: no test program matches ${unmatched[*]} (not built? make -f Makefile $B/tests/NAME, or make test; tests/run_tests.sh --list shows them)"
  echo "0 passed, 0 failed, 0 skipped"
  exit 1
fi

# runs one program under the time limit (timeout kills its whole process group); stdin is
# /dev/null (a program in timeout's background process group must not read the terminal)
run_one() {
  local cmd=()
  case "$1" in
    *.py) cmd=(python3 "$1") ;;
    *.sh) cmd=(bash "$1") ;;
    *)    cmd=("$1") ;;
  esac
  if [ "$limit" -gt 0 ]; then timeout -k 10 "$limit" "${cmd[@]}"; else "${cmd[@]}"; fi
}

pass=0; fail=0; skip=0; failed_names=()
for p in "${progs[@]}"; do
  echo "== $p"
  start=$(date +%s)
  out=$(run_one "$p" 2>&1 </dev/null); rc=$?
  took=$(( $(date +%s) - start ))
  echo "$out"
  np=$(grep -c '^ok - ' <<<"$out"); nf=$(grep -c '^not ok - ' <<<"$out"); ns=$(grep -c '^skip - ' <<<"$out")
  # timeout's status is 124 (137 when it needed SIGKILL); a program killed otherwise returns
  # 137 too, so the elapsed time decides
  if [ "$limit" -gt 0 ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$took" -ge "$limit" ]; then
    nf=$((nf + 1)); echo "not ok - $p: timed out after $limit s"
  elif [ "$rc" -ne 0 ] && [ "$nf" -eq 0 ]; then
    nf=1; echo "not ok - $p: exited with status $rc without reporting a failed check"
  fi
  [ "$nf" -gt 0 ] && failed_names+=("$p")
  pass=$((pass+np)); fail=$((fail+nf)); skip=$((skip+ns))
  echo "   ($np passed, $nf failed, $ns skipped in ${took}s)"
done
[ ${#failed_names[@]} -gt 0 ] && echo "failing programs: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
