#!/usr/bin/env bash
# Runs every fuzz harness ($FUZZ_BUILD/fuzz/fuzz_NAME, built by `make fuzz`) for FUZZ_SECONDS
# seconds each, one after another, and reports one line per harness the way tests/run_tests.sh
# does:
#   ok - fuzz_NAME: R runs in S s (E exec/s), corpus N inputs (B bytes), 0 findings
#   not ok - fuzz_NAME: <sanitizer or libFuzzer summary> (reproducer: FILE; log: FILE)
# and ends with "N passed, M failed, K skipped"; exits 1 when any harness found something.
# Dictionaries (the format's keywords and edge values): tests/fuzz/dict/NAME.dict.
# Corpora: the seeds tests/fuzz/corpus/NAME/ and the regression inputs tests/fuzz/regress/NAME/
# (inputs that once crashed, now fixed: they run first, every time) are read; new inputs go to
# $FUZZ_BUILD/corpus/NAME/, so a later run continues from there. Crash inputs go to
# $FUZZ_BUILD/artifacts/NAME/, logs to $FUZZ_BUILD/logs/NAME.log.
#   FUZZ_SECONDS  time per harness (default 30)
#   FUZZ_ONLY     run only the harnesses whose name contains this
#   FUZZ_WORK     where corpus/, artifacts/ and logs/ go (default FUZZ_BUILD; give two runs at
#                 the same time different ones)
#   FUZZ_JOBS     (optional) libFuzzer -fork=N: N processes per harness, and keep going after
#                 a crash (all crashes are collected; still reported as not ok)
#   FUZZ_NO_REGRESS=1  leave tests/fuzz/regress/ out (to fuzz past a known, unfixed defect)
#   FUZZ_ARGS     extra libFuzzer flags (e.g. -dict=..., -max_len=...)
set -u
cd "$(dirname "$0")/../.."
B=${FUZZ_BUILD:-build-fuzz}
W=${FUZZ_WORK:-$B}
S=${FUZZ_SECONDS:-30}
pass=0; fail=0; skip=0; failed=()
names=()
for f in tests/fuzz/fuzz_*.c; do
  n=$(basename "$f" .c); n=${n#fuzz_}
  [ -n "${FUZZ_ONLY:-}" ] && [[ "$n" != *${FUZZ_ONLY}* ]] && continue
  names+=("$n")
done
# -rss_limit_mb: an input that makes the parser allocate more than this is a finding
# -timeout: one input running longer than this (seconds) is a finding
common=(-max_total_time="$S" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -detect_leaks=1)
# scratch files of the harnesses (tests/fuzz/fuzz_util.h): one directory for this run, removed
# at the end (a crashing harness cannot remove its own)
if [ -z "${FUZZ_TMPDIR:-}" ]; then
  base=/dev/shm; [ -d /dev/shm ] && [ -w /dev/shm ] || base=${TMPDIR:-/tmp}
  FUZZ_TMPDIR=$(mktemp -d "$base/phaselab-fuzz-run.XXXXXX") && export FUZZ_TMPDIR && trap 'rm -rf "$FUZZ_TMPDIR"' EXIT
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for n in "${names[@]}"; do
  bin=$B/fuzz/fuzz_$n
  echo "== $bin (${S}s)"
  if [ ! -x "$bin" ]; then
    fail=$((fail+1)); failed+=("fuzz_$n")
    echo "not ok - fuzz_$n: $bin not built (make fuzz)"
    continue
  fi
  work=$W/corpus/$n; art=$W/artifacts/$n; log=$W/logs/$n.log
  mkdir -p "$work" "$art" "$W/logs"
  dirs=("$work" "tests/fuzz/corpus/$n")
  [ -d "tests/fuzz/regress/$n" ] && [ -z "${FUZZ_NO_REGRESS:-}" ] && dirs+=("tests/fuzz/regress/$n")
  extra=()
  [ -f "tests/fuzz/dict/$n.dict" ] && extra+=(-dict="tests/fuzz/dict/$n.dict")
  [ -n "${FUZZ_JOBS:-}" ] && extra+=(-fork="$FUZZ_JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  marker=$W/logs/.start-$n
  touch "$marker"
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin" "${common[@]}" "${extra[@]}" -artifact_prefix="$art/" ${FUZZ_ARGS:-} "${dirs[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  # (fork mode prints no final stats: take the last status line, "#RUNS: cov: ... exec/s N ...")
  [ -z "$runs" ] && runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  [ -z "$eps" ] && eps=$(grep -o 'exec/s:* [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  ncorp=$(find "$work" -type f | wc -l); bcorp=$(find "$work" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  nseed=$(find "${dirs[@]:1}" -type f | wc -l)
  stats="${runs:-?} runs in ${secs} s (${eps:-?} exec/s), corpus $((ncorp + nseed)) inputs ($nseed seeds/regression + $ncorp found, $bcorp bytes found)"
  # findings: the inputs written to artifacts/ during this run; those equal to a regression
  # input are named after it (a known or once-fixed defect that is back)
  new_found=(); known=()
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    h=$(sha1sum <"$f" | cut -c1-40); hit=""
    [ -d "tests/fuzz/regress/$n" ] && for r in "tests/fuzz/regress/$n"/*; do
      [ "$(sha1sum <"$r" | cut -c1-40)" = "$h" ] && hit=$r
    done
    if [ -n "$hit" ]; then known+=("$hit"); else new_found+=("$f"); fi
  done < <(find "$art" -type f -newer "$marker")
  if [ "$rc" -eq 0 ] && [ ${#new_found[@]} -eq 0 ] && [ ${#known[@]} -eq 0 ] &&
     grep -q 'Done [0-9]* runs\|DONE\|INFO: exiting: 0' "$log"; then
    pass=$((pass+1))
    echo "ok - fuzz_$n: $stats, 0 findings"
  else
    fail=$((fail+1)); failed+=("fuzz_$n")
    why=$(grep -m1 -E '^SUMMARY: |ERROR: libFuzzer|runtime error|==ERROR' "$log" | cut -c1-200)
    [ -z "$why" ] && [ ${#known[@]} -gt 0 ] && why="a regression input fails again"
    [ -z "$why" ] && [ ${#new_found[@]} -gt 0 ] && why="new crash/timeout/oom inputs (reproduce: $bin FILE)"
    echo "not ok - fuzz_$n: ${why:-exited with status $rc} (exit $rc; $stats; ${#new_found[@]} new finding(s)${new_found:+: ${new_found[*]}}; ${#known[@]} regression input(s) failing${known:+: ${known[*]}}; log: $log)"
    grep -E 'runtime error|^    #[0-9] |^SUMMARY|==ERROR' "$log" | head -12 | sed 's/^/   | /'
  fi
done
[ ${#failed[@]} -gt 0 ] && echo "failing harnesses: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
