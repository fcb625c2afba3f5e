"""Python side of the test reporting convention (see tests/check.h).

Every check prints "ok - NAME", "not ok - NAME: WHY" or "skip - NAME: skipped: WHY";
call finish() at the end to exit 1 when a check failed. CHECK_ONLY=TEXT in the environment
(tests/run_tests.sh --check TEXT) reports and counts only the checks whose name contains TEXT."""
import os
import sys

_failures = 0
_only = os.environ.get("CHECK_ONLY", "")


def _selected(name):
    return not _only or _only in name


def check(ok, name, why=""):
    global _failures
    if not _selected(name):
        return ok
    if ok:
        print(f"ok - {name}", flush=True)
    else:
        _failures += 1
        print(f"not ok - {name}: {why}", flush=True)
    return ok


def skip(name, why):
    if not _selected(name):
        return
    print(f"skip - {name}: skipped: {why}", flush=True)


def finish():
    sys.exit(1 if _failures else 0)
