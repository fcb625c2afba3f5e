#!/usr/bin/env bash
# Tests of tests/run_tests.sh on a fake test tree under build/scratch/test_run_tests/: a passing
# program (2 checks), a failing one (1 ok, 1 not ok, exit 1), a hanging one (1 ok, then sleeps
# far past the limit, with a child that sleeps too), a skipping one (1 skip) and a shell test
# (1 ok). With TEST_TIMEOUT=2 the counts must be 5 passed, 2 failed (the not-ok line and the
# timeout), 1 skipped, the hanging program and its child must be gone, with the line
# "not ok - PROG: timed out after 2 s" and exit status 1; a filter runs only what it names,
# --list lists without running, --check NAME keeps only the checks whose name contains NAME
# (a C program built here against tests/check.h, and a Python one against tests/pycheck.py).
set -u
# the fake suite runs under its own settings, not the ones this test was started with
unset TESTS CHECK_ONLY TEST_TIMEOUT
cd "$(dirname "$0")/.."
T=run_tests
S=build/scratch/test_run_tests
rm -rf "$S"; mkdir -p "$S/build/tests" "$S/src"
FB=$S/build/tests
printf '#!/bin/sh\necho "ok - pass one"\necho "ok - pass two"\n' >"$FB/test_pass"
printf '#!/bin/sh\necho "ok - fail one"\necho "not ok - fail two: 1 != 2"\nexit 1\n' >"$FB/test_fail"
# the hanging program and a child of its own: the time limit must end both
printf '#!/bin/sh\nsleep 300 &\necho $! >"%s/child.pid"\necho "ok - hang started"\nsleep 300\n' "$PWD/$S" >"$FB/test_hang"
printf '#!/bin/sh\necho "skip - skip one: skipped: no GPU"\n' >"$FB/test_skip"
printf 'echo "ok - shell one"\n' >"$S/src/test_shell.sh"
chmod +x "$FB"/test_*
run() { BUILD=$S/build TESTS_SRC=$S/src tests/run_tests.sh "$@"; }

t0=$(date +%s)
out=$(TEST_TIMEOUT=2 run 2>&1); rc=$?
took=$(( $(date +%s) - t0 ))
last=$(tail -n 1 <<<"$out")
[ "$last" = "5 passed, 2 failed, 1 skipped" ] && echo "ok - $T: counts of the fake suite" \
  || echo "not ok - $T: counts of the fake suite: last line '$last', expected '5 passed, 2 failed, 1 skipped'"
[ "$rc" -eq 1 ] && echo "ok - $T: exit status 1 when something failed" || echo "not ok - $T: exit status $rc, expected 1"
grep -qx "not ok - $FB/test_hang: timed out after 2 s" <<<"$out" && echo "ok - $T: the timeout line names the program and the limit" \
  || echo "not ok - $T: no line 'not ok - $FB/test_hang: timed out after 2 s' in: $(grep test_hang <<<"$out" | tr '\n' '|')"
grep -q "^failing programs: $FB/test_fail $FB/test_hang\$" <<<"$out" && echo "ok - $T: failing programs listed" \
  || echo "not ok - $T: failing programs: $(grep '^failing' <<<"$out")"
[ "$took" -lt 60 ] && echo "ok - $T: the hanging program is stopped (the run took ${took}s)" \
  || echo "not ok - $T: the run took ${took}s with TEST_TIMEOUT=2"
sleep 1
child=$(cat "$S/child.pid" 2>/dev/null)
# gone, or a zombie nobody reaped yet (its parent was killed; in a container or chroot PID 1 may
# not reap). The state is read from /proc/PID/stat (the field after the command's parenthesis):
# a minimal system (the fresh-machine chroot) has no ps.
child_state() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
if [ -n "$child" ] && { ! kill -0 "$child" 2>/dev/null || [ "$(child_state "$child")" = Z ]; }; then echo "ok - $T: the hanging program's own child is stopped too"
else echo "not ok - $T: the hanging program's child (pid '$child') survived the time limit"; kill "$child" 2>/dev/null; fi

out=$(run test_pass 2>&1); rc=$?
[ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "2 passed, 0 failed, 0 skipped" ] && ! grep -q test_fail <<<"$out" \
  && echo "ok - $T: a pattern argument runs that program alone" \
  || echo "not ok - $T: run_tests.sh test_pass: rc $rc, last line '$(tail -n 1 <<<"$out")'"
out=$(TESTS=test_skip run 2>&1); rc=$?
[ "$rc" -eq 1 ] && [ "$(tail -n 1 <<<"$out")" = "0 passed, 0 failed, 1 skipped" ] \
  && echo "ok - $T: TESTS= filters too (and a run where nothing passed exits 1)" \
  || echo "not ok - $T: TESTS=test_skip: rc $rc, last line '$(tail -n 1 <<<"$out")'"
out=$(run test_pass test_shell 2>&1)
[ "$(tail -n 1 <<<"$out")" = "3 passed, 0 failed, 0 skipped" ] && echo "ok - $T: several patterns" \
  || echo "not ok - $T: two patterns: last line '$(tail -n 1 <<<"$out")'"
out=$(run no_such_test 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "no test program matches no_such_test" <<<"$out" && echo "ok - $T: a pattern matching nothing fails" \
  || echo "not ok - $T: no_such_test: rc $rc: $out"

out=$(run test_pass no_such_test 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "no test program matches no_such_test" <<<"$out" && ! grep -q "^ok - " <<<"$out" \
  && echo "ok - $T: a pattern matching nothing fails even beside one that matches (nothing is run)" \
  || echo "not ok - $T: test_pass no_such_test: rc $rc: $out"

out=$(run --list 2>&1); rc=$?
want=$(printf '%s\n' "$FB/test_fail" "$FB/test_hang" "$FB/test_pass" "$FB/test_skip" "$S/src/test_shell.sh")
[ "$rc" -eq 0 ] && [ "$out" = "$want" ] && echo "ok - $T: --list prints every program and runs none" \
  || echo "not ok - $T: --list: rc $rc, got '$(tr '\n' ' ' <<<"$out")'"
out=$(run --list 'tests/test_[ps]*' 2>&1)
[ "$out" = "$(printf '%s\n' "$FB/test_pass" "$FB/test_skip")" ] && echo "ok - $T: --list with a glob pattern" \
  || echo "not ok - $T: --list 'tests/test_[ps]*': '$(tr '\n' ' ' <<<"$out")'"

# --check NAME: one check inside a C program (tests/check.h) and a Python one (tests/pycheck.py)
cat >"$S/checks.c" <<'EOF'
#include "tests/check.h"
int main(void) {
    check(1, "alpha works", "");
    check(0, "beta breaks", "deliberately");
    check_skip("gamma", "not here");
    return check_exit_code();
}
EOF
if cc -std=c11 -I. -o "$FB/test_checks" "$S/checks.c" 2>"$S/cc.txt"; then
  out=$(run --check alpha test_checks 2>&1); rc=$?
  [ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "1 passed, 0 failed, 0 skipped" ] \
    && echo "ok - $T: --check runs one check of a C program" \
    || echo "not ok - $T: --check alpha: rc $rc, last line '$(tail -n 1 <<<"$out")'"
  out=$(run --check beta test_checks 2>&1); rc=$?
  [ "$rc" -eq 1 ] && [ "$(tail -n 1 <<<"$out")" = "0 passed, 1 failed, 0 skipped" ] \
    && echo "ok - $T: --check keeps a failing check failing" \
    || echo "not ok - $T: --check beta: rc $rc, last line '$(tail -n 1 <<<"$out")'"
  out=$(run test_checks 2>&1)
  [ "$(tail -n 1 <<<"$out")" = "1 passed, 1 failed, 1 skipped" ] && echo "ok - $T: without --check every check counts" \
    || echo "not ok - $T: test_checks: last line '$(tail -n 1 <<<"$out")'"
else
  echo "not ok - $T: cannot build a program against tests/check.h: $(head -n 3 "$S/cc.txt")"
fi
cat >"$S/src/test_py.py" <<EOF
import sys
sys.path.insert(0, "$PWD/tests")
from pycheck import check, skip, finish
check(True, "alpha py")
check(False, "beta py", "deliberately")
skip("gamma py", "not here")
finish()
EOF
out=$(run --check alpha test_py 2>&1); rc=$?
[ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "1 passed, 0 failed, 0 skipped" ] \
  && echo "ok - $T: --check runs one check of a Python test" \
  || echo "not ok - $T: --check alpha test_py: rc $rc, last line '$(tail -n 1 <<<"$out")'"

out=$(run --bogus 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "ok - $T: an unknown option is a usage error" || echo "not ok - $T: --bogus: rc $rc"
out=$(TEST_TIMEOUT=soon run 2>&1); rc=$?
[ "$rc" -eq 2 ] && echo "ok - $T: TEST_TIMEOUT must be whole seconds" || echo "not ok - $T: TEST_TIMEOUT=soon: rc $rc"
