"""Python side of the test reporting convention (see tests/check.h).

Every check prints "ok - NAME", "not ok - NAME: WHY" or "skip - NAME: skipped: WHY";
call finish() at the end to exit 1 when a check failed."""
import sys

_failures = 0


def check(ok, name, why=""):
    global _failures
    if ok:
        print(f"ok - {name}", flush=True)
    else:
        _failures += 1
        print(f"not ok - {name}: {why}", flush=True)
    return ok


def skip(name, why):
    print(f"skip - {name}: skipped: {why}", flush=True)


def finish():
    sys.exit(1 if _failures else 0)
