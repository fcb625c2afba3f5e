"""The Python tools on ordinary bad input (tools/make-probe, tools/report, tools/sweep): each case
must end with exit 2 (bad input or usage) or 1 (a runtime failure), one line on stderr naming the
tool (and the path or option), no Python traceback, and nothing written. Also:
- make-probe creates the missing directories above --out, refuses a directory as --out (never
  writing DIR.tmp beside it), and leaves no temporary file after a successful atomic write;
- report and sweep create --out's directories; sweep.json and the sbatch script are written
  without leftovers;
- "nothing was done" is never exit 0 (a directory without runs, make-probe --per-residue 0);
- PHASELAB_DEBUG=1 brings the traceback back (the one-line errors hide no bug on demand)."""
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(ROOT, "build", "scratch", "test_tool_errors")
shutil.rmtree(S, ignore_errors=True)
os.makedirs(S)
TOOLS = {t: [sys.executable, os.path.join(ROOT, "tools", t)] for t in ("make-probe", "report", "sweep")}
try:
    import h5py
    import numpy as np
except ImportError as e:
    skip("tool_errors", f"numpy/h5py missing ({e})")
    finish()


def run(tool, *args, env=None, cwd=S):
    e = dict(os.environ)
    e.pop("PHASELAB_DEBUG", None)
    e.update(env or {})
    try:
        return subprocess.run(TOOLS[tool] + list(args), capture_output=True, text=True, cwd=cwd, env=e, timeout=120)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, None, "", f"{tool} {' '.join(args)}: hung, killed after 120 s")


def listing(d):
    out = set()
    for dp, dn, fn in os.walk(d):
        out |= {os.path.relpath(os.path.join(dp, x), d) for x in dn + fn}
    return out


def expect(name, tool, args, code, needle, env=None, watch=S):
    """One bad-input case: exit `code`, stderr's last line starts with 'TOOL' and holds needle,
    no traceback, no new file under watch."""
    before = listing(watch)
    r = run(tool, *args, env=env)
    lines = r.stderr.strip().splitlines()
    new = listing(watch) - before
    ok = (r.returncode == code and "Traceback" not in r.stderr and lines and lines[-1].startswith(tool)
          and needle in lines[-1] and not new)
    check(ok, name, f"exit {r.returncode} (expected {code}); new files {sorted(new)}; stderr: {r.stderr.strip()[-400:]}")
    return r


# ---- fixtures -----------------------------------------------------------------------------------
open(os.path.join(S, "afile"), "w").write("x")
os.makedirs(os.path.join(S, "adir"))
tok = os.path.join(S, "tok")
os.makedirs(tok)
for name, text in (("notjson.json", "not json"), ("list.json", "[1, 2]"), ("vocab_list.json", '{"model": {"vocab": [1, 2]}}'),
                   ("vocab_str.json", '{"model": {"vocab": {"Ġcat": "x"}}}'),
                   ("added.json", '{"model": {"vocab": {"Ġcat": 1}}, "added_tokens": 5}')):
    open(os.path.join(tok, name), "w").write(text)
probe_ok = ["--synthetic", "--per-residue", "1", "--quiet"]

# ---- make-probe ---------------------------------------------------------------------------------
cases = [
    ("probe_out_is_existing_dir", ["--out", "adir"] + probe_ok, 2, "is a directory"),
    ("probe_out_trailing_slash", ["--out", "adir/"] + probe_ok, 2, "is a directory"),
    ("probe_out_under_a_file", ["--out", "afile/sub/p.bin"] + probe_ok, 2, "afile: is not a directory"),
    ("probe_out_empty", ["--out", ""] + probe_ok, 2, "--out"),
    ("probe_out_is_a_device", ["--out", os.devnull] + probe_ok, 2, f"{os.devnull}: is not a regular file"),
    ("probe_seed_negative", ["--out", "p.bin", "--seed", "-1"] + probe_ok, 2, "--seed"),
    ("probe_seed_too_large", ["--out", "p.bin", "--seed", str(2 ** 32)] + probe_ok, 2, "--seed"),
    ("probe_seed_float", ["--out", "p.bin", "--seed", "1e3"] + probe_ok, 2, "--seed"),
    ("probe_zero_prompts", ["--out", "p.bin", "--synthetic", "--per-residue", "0"], 2, "--per-residue"),
    ("probe_per_residue_not_a_number", ["--out", "p.bin", "--synthetic", "--per-residue", "many"], 2, "--per-residue"),
    ("probe_too_many_prompts", ["--out", "p.bin", "--synthetic", "--per-residue", "2000000000"], 2, "prompts"),
    ("probe_residues_over_256", ["--out", "p.bin", "--residues", "257"] + probe_ok, 2, "--residues"),
    ("probe_max_len_zero", ["--out", "p.bin", "--max-len", "0"] + probe_ok, 2, "--max-len"),
    ("probe_max_len_too_short", ["--out", "p.bin", "--max-len", "40"] + probe_ok, 2, "--max-len"),
    ("probe_record_tokens_out_of_range", ["--out", "p.bin", "--layout", "needle", "--record-tokens", "500"] + probe_ok, 2,
     "--record-tokens"),
    ("probe_tokenizer_missing", ["--out", "p.bin", "--tokenizer", "tok/none.json", "--per-residue", "1"], 2, "tok/none.json"),
    ("probe_tokenizer_is_dir", ["--out", "p.bin", "--tokenizer", "tok", "--per-residue", "1"], 2, "is a directory"),
]
rundir = os.path.join(S, "arun")                      # a run directory given for a checkpoint
os.makedirs(os.path.join(rundir, "checkpoints", "step_00000020"))
open(os.path.join(rundir, "config.ini"), "w").write("[model]\n")
cases.append(("probe_checkpoint_is_a_run_dir", ["--out", "p.bin", "--checkpoint", "arun", "--per-residue", "1"], 2,
              "a run directory, not a checkpoint: give one of its checkpoints, the newest is arun/checkpoints/step_00000020"))
for name in ("notjson", "list", "vocab_list", "vocab_str", "added"):
    cases.append((f"probe_tokenizer_{name}", ["--out", "p.bin", "--tokenizer", f"tok/{name}.json", "--per-residue", "1"], 2,
                  f"tok/{name}.json"))
for name, args, code, needle in cases:
    expect(name, "make-probe", args, code, needle)
check(not os.path.exists(os.path.join(S, "adir.tmp")) and not os.listdir(os.path.join(S, "adir")),
      "probe_dir_out_writes_no_dir_tmp", str(os.listdir(S)))

# --out in directories that do not exist yet: created; the file is complete; no temporary file left
nested = os.path.join(S, "new", "sub", "probe.bin")
r = run("make-probe", "--out", nested, *probe_ok, "--residues", "8", "--max-len", "160", "--seed", "3")
ok = r.returncode == 0 and os.path.isfile(nested)
hdr = open(nested, "rb").read(24) if ok else b""
n_prompts, P = struct.unpack_from("<II", hdr, 16) if len(hdr) == 24 else (None, None)
check(ok and hdr[:8] == b"PHLPRBv1" and (n_prompts, P) == (2 * 1 * 8, 8), "probe_out_parent_created",
      f"exit {r.returncode}, header {hdr[:8]!r} n_prompts {n_prompts} P {P}: {r.stderr[-300:]}")
left = sorted(os.listdir(os.path.dirname(nested))) if os.path.isdir(os.path.dirname(nested)) else None
check(left == ["probe.bin"], "probe_atomic_write_leaves_no_temporary", str(left))
# a second build over it replaces it whole (same options: byte-identical; another seed: different)
read = lambda p: open(p, "rb").read() if os.path.isfile(p) else b""
first = read(nested)
run("make-probe", "--out", nested, *probe_ok, "--residues", "8", "--max-len", "160", "--seed", "3")
same = first != b"" and read(nested) == first
run("make-probe", "--out", nested, *probe_ok, "--residues", "8", "--max-len", "160", "--seed", "4")
check(same and read(nested) not in (first, b"") and sorted(os.listdir(os.path.dirname(nested))) == ["probe.bin"],
      "probe_rewrite_replaces_whole_file")
r = run("make-probe", "--out", "adir", *probe_ok, env={"PHASELAB_DEBUG": "1"})
check(r.returncode != 0 and "Traceback" in r.stderr, "probe_debug_env_shows_traceback", r.stderr[-300:])

# ---- report -------------------------------------------------------------------------------------
os.makedirs(os.path.join(S, "empty_dir"))
good = os.path.join(S, "sweep", "good")
os.makedirs(good)
with h5py.File(os.path.join(good, "metrics.h5"), "w") as f:
    f.attrs["config"] = "[model]\nattention = full\n[run]\nname = good\n"
    f["train/step"] = np.arange(1, 11, dtype=np.int64)
    f["train/loss"] = np.linspace(5, 4, 10)
    f["val/step"] = np.array([10], dtype=np.int64)
    f["val/loss"] = np.array([4.25])
for name, make in (("random_bytes", lambda p: open(p, "wb").write(os.urandom(4096))),
                   ("empty_file", lambda p: open(p, "wb").close()),
                   ("cut_in_half", lambda p: (shutil.copy(os.path.join(good, "metrics.h5"), p),
                                              os.truncate(p, os.path.getsize(p) // 2)))):
    os.makedirs(os.path.join(S, "sweep", name))
    make(os.path.join(S, "sweep", name, "metrics.h5"))
cases = [
    ("report_missing_dir", ["nothere"], 2, "nothere: no such directory"),
    ("report_file_not_dir", ["afile"], 2, "afile: not a directory"),
    ("report_no_runs_is_not_success", ["empty_dir"], 2, "nothing to report"),
    ("report_out_is_a_file", ["sweep", "--out", "afile"], 2, "afile"),
    ("report_out_under_a_file", ["sweep", "--out", "afile/x"], 2, "afile: is not a directory"),
    ("report_bad_prompts_per_residue", ["sweep", "--prompts-per-residue", "-3"], 2, "--prompts-per-residue"),
]
for name, args, code, needle in cases:
    expect(name, "report", args, code, needle)
expect("report_bad_timeout_env", "report", ["sweep"], 2, "PHASELAB_READ_TIMEOUT", env={"PHASELAB_READ_TIMEOUT": "soon"})
# one good run and three damaged files: the good one is reported, each damaged one named once, exit 1
out = os.path.join(S, "rep", "deep", "out")
r = run("report", "sweep", "--out", out)
last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
named = all(sum(os.path.join("sweep", n, "metrics.h5") in l for l in r.stderr.splitlines()[:-1]) == 1
            for n in ("random_bytes", "empty_file", "cut_in_half"))
rows = open(os.path.join(out, "report.csv")).read().splitlines() if os.path.exists(os.path.join(out, "report.csv")) else []
check(r.returncode == 1 and "Traceback" not in r.stderr and named and "skipped 3 of 4 files" in last,
      "report_damaged_files_skipped_and_named_exit_1", f"exit {r.returncode}: {r.stderr[-700:]}")
check(len(rows) == 2 and rows[1].startswith("good,") and ",4.25," in rows[1], "report_out_parents_created_and_rest_reported",
      str(rows))
left = os.listdir(out) if os.path.isdir(out) else None
check(left is not None and not [f for f in left if f.startswith(".") or f.endswith(".tmp")], "report_leaves_no_temporary_files",
      str(left))

# ---- sweep --------------------------------------------------------------------------------------
st = os.path.join(S, "status")
os.makedirs(os.path.join(st, "r1"))
open(os.path.join(st, "r1", "log.txt"), "w").write("done: 10 steps\n")
open(os.path.join(st, "sweep.json"), "w").write('{"runs": [3, 4]}')
cases = [
    ("sweep_status_missing_dir", ["status", "nothere"], 2, "nothere"),
    ("sweep_status_file_not_dir", ["status", "afile"], 2, "afile: not a directory"),
    ("sweep_status_no_runs_is_not_success", ["status", "empty_dir"], 2, "no runs"),
    ("sweep_status_bad_stale_minutes", ["status", "status", "--stale-minutes", "nan"], 2, "--stale-minutes"),
    ("sweep_run_config_is_dir", ["run", "adir", "--dry-run"], 2, "adir: is a directory"),
    ("sweep_run_missing_config", ["run", "none.ini", "--dry-run"], 2, "none.ini"),
    ("sweep_run_out_is_a_file", ["run", os.path.join(ROOT, "configs", "test", "tiny.ini"), "--out", "afile"], 2, "afile"),
    ("sweep_run_bad_jobs", ["run", os.path.join(ROOT, "configs", "test", "tiny.ini"), "--jobs", "0", "--dry-run"], 2, "--jobs"),
    ("sweep_slurm_bad_np", ["slurm", os.path.join(ROOT, "configs", "test", "tiny.ini"), "--np", "two", "--dry-run"], 2, "--np"),
    ("sweep_slurm_out_under_a_file", ["slurm", os.path.join(ROOT, "configs", "test", "tiny.ini"), "--out", "afile/x"], 2,
     "afile: is not a directory"),
]
for name, args, code, needle in cases:
    expect(name, "sweep", args, code, needle)
# a sweep.json that is not a manifest: a warning, the run directories are still listed, exit 0
r = run("sweep", "status", "status")
check(r.returncode == 0 and "Traceback" not in r.stderr and "sweep.json" in r.stderr and "r1" in r.stdout,
      "sweep_status_bad_manifest_warns", f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
# slurm: --out's directories created, sweep.json and the script written whole, nothing else left
so = os.path.join(S, "slurm_out", "a", "b")
r = run("sweep", "slurm", os.path.join(ROOT, "configs", "test", "tiny.ini"), "--set", "train.seed=1,2", "--out", so)
got = listing(os.path.join(S, "slurm_out"))
want = {"a", "a/b", "a/b/sweep.json", "a/b/slurm", "a/b/slurm/sweep.sbatch"}
script = os.path.join(so, "slurm", "sweep.sbatch")
check(r.returncode == 0 and got == want and os.access(script, os.X_OK) and "#SBATCH --array=0-1" in read(script).decode(),
      "sweep_slurm_out_created_atomic", f"exit {r.returncode}: {sorted(got)} {r.stderr[-300:]}")
finish()
