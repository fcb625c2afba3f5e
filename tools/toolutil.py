"""Shared plumbing of the Python tools (tools/make-probe, tools/report, tools/sweep): one-line
errors instead of tracebacks, exit codes, --out checks, atomic writes and bounded reads.

Exit codes (README): 0 done, 1 runtime failure (a file could not be read or written, something
was skipped), 2 bad input or usage (a missing or malformed file, a bad option value, nothing to
do). An error is one line on stderr, `TOOL: PATH: what was wrong, what was expected`.

Environment:
  PHASELAB_DEBUG=1          re-raise instead of the one-line error (a traceback, for debugging);
                            PHASELAB_DEBUG=inline also reads the files in-process (for pdb)
  PHASELAB_READ_TIMEOUT=S   seconds one HDF5 file may take to read (default 30); a file that
                            takes longer (damaged, or held by a writer) is skipped with a warning
"""
import math
import multiprocessing
import multiprocessing.connection
import os
import sys
import tempfile
import time
import traceback

READ_TIMEOUT_ENV = "PHASELAB_READ_TIMEOUT"
DEFAULT_READ_TIMEOUT = 30.0


class ToolError(Exception):
    """Bad input (code 2) or a runtime failure (code 1); the message is the whole error line
    after 'TOOL: '."""

    def __init__(self, msg, code=2):
        super().__init__(msg)
        self.code = code


def fail(msg, code=2):
    raise ToolError(msg, code)


def debug():
    return os.environ.get("PHASELAB_DEBUG", "") not in ("", "0")


def os_error_text(e, path=None):
    """'PATH: reason' of an OSError, without Python's '[Errno N]' decoration."""
    where = path or e.filename
    why = e.strerror or str(e)
    return f"{where}: {why}" if where else why


def run_main(tool, main):
    """Runs main() (returning an exit status or None) and exits. A ToolError prints one line
    'TOOL: message' and exits with its code; an OSError that reached the top (a write that
    failed: disk full, permission) is a runtime failure (1); Ctrl-C exits 130. Anything else is a
    bug and keeps its traceback. PHASELAB_DEBUG=1 re-raises everything."""
    try:
        rc = main()
    except ToolError as e:
        if debug():
            raise
        print(f"{tool}: {e}", file=sys.stderr)
        rc = e.code
    except OSError as e:
        if debug():
            raise
        if isinstance(e, BrokenPipeError):       # `tool | head`: stop quietly
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            rc = 1
        else:
            print(f"{tool}: {os_error_text(e)}", file=sys.stderr)
            rc = 1
    except KeyboardInterrupt:
        if debug():
            raise
        print(f"{tool}: interrupted", file=sys.stderr)
        rc = 130
    sys.exit(0 if rc is None else rc)


# ---- option values ---------------------------------------------------------------------------

def int_in(lo, hi, what="a whole number"):
    """An argparse type: an integer in lo..hi (decimal digits only, no floats, no '1e3')."""
    def parse(text):
        import argparse
        s = text.strip()
        body = s[1:] if s[:1] in "+-" else s
        if not body.isdigit() or not body.isascii():
            raise argparse.ArgumentTypeError(f"'{text}' is not {what} (expected an integer in {lo}..{hi})")
        v = int(s)
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range (expected {lo}..{hi})")
        return v
    parse.__name__ = "integer"
    return parse


def float_in(lo, hi=None):
    """An argparse type: a finite number >= lo (and <= hi)."""
    def parse(text):
        import argparse
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number")
        if not math.isfinite(v) or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{text} is out of range (expected a finite number >= {lo}"
                                             + (f" and <= {hi})" if hi is not None else ")"))
        return v
    parse.__name__ = "number"
    return parse


def read_timeout():
    """PHASELAB_READ_TIMEOUT in seconds (default 30); a bad value is a usage error."""
    text = os.environ.get(READ_TIMEOUT_ENV, "")
    if text == "":
        return DEFAULT_READ_TIMEOUT
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        fail(f"{READ_TIMEOUT_ENV}={text}: expected a positive number of seconds")
    return v


# ---- output paths and atomic writes ----------------------------------------------------------

def check_out_file(path, opt="--out"):
    """Checks that path can be an output file before any work: not empty, not a directory, and
    its nearest existing ancestor a writable directory (the missing ones are created at write
    time). Returns the path."""
    if not path:
        fail(f"{opt}: empty path, expected a file name")
    if path.endswith(os.sep) or os.path.isdir(path):
        fail(f"{path}: is a directory, expected a file name for {opt} (e.g. {os.path.join(path.rstrip(os.sep) or os.sep, 'probe.bin')})")
    if os.path.exists(path) and not os.path.isfile(path):
        fail(f"{path}: is not a regular file (a device, FIFO or socket), expected a file name for {opt}")
    _check_ancestor(os.path.dirname(os.path.normpath(path)) or ".", opt)
    return path


def check_out_dir(path, opt="--out"):
    """Checks that path can be an output directory: not empty, not an existing non-directory,
    its nearest existing ancestor a writable directory."""
    if not path:
        fail(f"{opt}: empty path, expected a directory")
    if os.path.exists(path) and not os.path.isdir(path):
        fail(f"{path}: exists and is not a directory, expected a directory for {opt}")
    _check_ancestor(os.path.normpath(path), opt)
    return path


def _check_ancestor(d, opt):
    """The nearest existing ancestor of directory d (d itself when it exists) must be a
    writable directory (named as the user wrote it)."""
    a = d
    while not os.path.exists(a):
        parent = os.path.dirname(a) or "."
        if parent == a:
            break
        a = parent
    if not os.path.isdir(a):
        fail(f"{a}: is not a directory, so {opt} cannot be created under it")
    if not os.access(a, os.W_OK | os.X_OK):
        fail(f"{a}: not writable, {opt} cannot be created there", 1)


def make_dirs(d):
    """os.makedirs with one-line errors (a file in the way is bad input, 2; anything else 1)."""
    if not d or os.path.isdir(d):
        return
    try:
        os.makedirs(d, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        fail(f"{d}: cannot create the directory: a file is in the way")
    except OSError as e:
        fail(f"{d}: cannot create the directory: {e.strerror}", 1)


def atomic_write(path, content, mode=0o666):
    """Writes path atomically: the bytes (or text, or a callable writing to a binary file object)
    go to a temporary file in the same directory, which is flushed, fsynced and renamed over
    path; the directory is created when missing. On any failure the temporary file is removed,
    an earlier path is left as it was, and a ToolError (1) names path. A symbolic link is
    followed (its target is replaced); a directory or special file there is refused (2)."""
    if os.path.islink(path):
        path = os.path.realpath(path)
    if os.path.isdir(path):
        fail(f"{path}: is a directory, expected a file")
    if os.path.exists(path) and not os.path.isfile(path):
        fail(f"{path}: is not a regular file (a device, FIFO or socket); not replaced")
    d = os.path.dirname(os.path.abspath(path))
    make_dirs(d)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    except OSError as e:
        fail(f"{path}: cannot write: {e.strerror}", 1)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, mode & ~umask)
        with os.fdopen(fd, "wb") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content.encode() if isinstance(content, str) else content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail(f"{path}: cannot write: {e.strerror or e}", 1)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:                                        # the rename itself durable (best effort)
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path


def h5_open_error(e):
    """An OSError from opening an HDF5 file, with a file lock held by a writer said in words."""
    if "unable to lock file" in str(e):
        return OSError(f"held open for writing by another program (HDF5 file lock): close it there, or read it "
                       f"anyway with HDF5_USE_FILE_LOCKING=FALSE ({e})")
    return e


# ---- bounded reads in child processes --------------------------------------------------------

# What a reader may raise for a damaged or unexpected file (h5py raises OSError, KeyError,
# ValueError, TypeError, IndexError and RuntimeError for what it cannot read); anything else
# in a reader is a bug, reported with its traceback.
BAD_DATA = (ToolError, OSError, KeyError, ValueError, TypeError, IndexError, RuntimeError, UnicodeError)


def _child(conn, fn, item):
    try:
        try:
            msg = ("ok", fn(item))
        except BAD_DATA as e:
            msg = ("bad", str(e) or type(e).__name__)
        except BaseException:
            msg = ("bug", traceback.format_exc())
        conn.send(msg)
        conn.close()
    finally:
        os._exit(0)          # no atexit (an HDF5 library in a bad state may crash on exit)


class Skipped:
    """Why a bounded read gave no result."""

    def __init__(self, why, bug=None):
        self.why, self.bug = why, bug


def bounded_map(fn, items, timeout=None, jobs=None):
    """[fn(item) or Skipped(why)] for each item, each call in a child process of its own that is
    killed after `timeout` seconds (default PHASELAB_READ_TIMEOUT, 30 s): a file that would hang
    the reader (cut in half, checksum-damaged, locked by a writer) costs at most that long. Up to
    `jobs` children run at once. fn's result must be picklable."""
    timeout = read_timeout() if timeout is None else timeout
    items = list(items)
    if not items:
        return []
    if debug() and os.environ.get("PHASELAB_DEBUG") == "inline":     # in-process, for pdb
        return [fn(x) for x in items]
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:                                  # pragma: no cover (no fork)
        out = []
        for x in items:
            try:
                out.append(fn(x))
            except BAD_DATA as e:
                out.append(Skipped(str(e)))
        return out
    jobs = max(1, min(jobs or min(8, os.cpu_count() or 1), len(items)))
    results = [None] * len(items)
    pending = list(range(len(items)))
    running = {}                                        # conn -> (index, process, deadline)
    sys.stdout.flush()
    sys.stderr.flush()
    while pending or running:
        while pending and len(running) < jobs:
            i = pending.pop(0)
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(w, fn, items[i]), daemon=True)
            p.start()
            w.close()
            running[r] = (i, p, time.monotonic() + timeout)
        now = time.monotonic()
        wait_s = max(0.0, min(d for _, _, d in running.values()) - now)
        ready = multiprocessing.connection.wait(list(running), timeout=wait_s)
        for conn in ready:
            i, p, _ = running.pop(conn)
            try:
                kind, value = conn.recv()
            except (EOFError, OSError):
                p.join(5)
                code = p.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
                kind, value = "bad", f"the reader crashed ({how})"
            except Exception as e:                      # an unpicklable result: a bug
                kind, value = "bug", f"cannot receive the result: {e}"
            conn.close()
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
            if kind == "ok":
                results[i] = value
            elif kind == "bad":
                results[i] = Skipped(value)
            else:
                results[i] = Skipped("internal error of the reader (a bug; traceback above)", bug=value)
        now = time.monotonic()
        for conn, (i, p, deadline) in list(running.items()):
            if now >= deadline and conn not in ready:
                running.pop(conn)
                p.kill()
                p.join(5)                   # a reader in uninterruptible I/O may outlive SIGKILL a while
                conn.close()
                results[i] = Skipped(f"no answer in {timeout:g} s (damaged, or locked by a writer?); "
                                     f"{READ_TIMEOUT_ENV} sets the limit")
    return results
