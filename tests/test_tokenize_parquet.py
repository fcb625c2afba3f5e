"""./tokenize on parquet input (data/parquet_stream.c, tools/parquet-text; issue 40 item 5).

The same rows written as parquet (several row groups, two files) and as JSONL
({"text": ...} per line, by json.dumps here) must give byte-identical shards and the same
summary: unicode, an embedded newline, an empty document, a null (a bad line, reported at its
row), a long document; --field picks another string column; a run killed after N shards
resumes to identical shards; errors (no such column, a non-string column, a file that is not
parquet, a Python without pyarrow, no Python at all) exit non-zero with one line naming the file
and write no shards. Needs a Python with pyarrow: python3, $PHASELAB_HF_PYTHON, build/venv-hf
or ~/.cache/phaselab/venv-hf (make hf-venv installs it); without one every check is skipped."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, skip, finish  # noqa: E402
import trainutil as tu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
SCRATCH = os.path.join("build", "scratch", "tokenize_parquet")
NAMES = ["identical shards (bytes)", "summary equal", "bad line at its row", "--field title", "resume after SIGKILL",
         "error: no such column", "error: non-string column", "error: not parquet", "error: no pyarrow",
         "error: no python", "refuses .parquet.gz"]


def run(args, py, extra_env=None):
    env = dict(os.environ, PHASELAB_PYTHON=py)
    env.update(extra_env or {})
    p = subprocess.run(["./tokenize", "--tokenizer", "bytes"] + args, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def shard_bytes(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out)) if f.endswith(".bin")}


def summary_lines(stdout):
    """The summary's counting lines, without paths, speed and the header."""
    keep = ("documents", "tokens", "empty", "bad lines", "invalid UTF-8", "forced splits")
    out = []
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith(keep):
            out.append(s.split("; first at")[0])
    return out


def make_corpus(py, d):
    """Two parquet files and the same rows as two JSONL files (written by the pyarrow Python)."""
    script = r"""
import json, sys, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
a = ["Hello world.\nSecond line of the first document.", "na\u00efve caf\u00e9 \u2014 \u6f22\u5b57 \U0001F642",
     "", None, "long " * 3000, "tab\tand \"quotes\" \\ backslash", "\u2028 line separator"]
b = ["document %d of the second file, " % i + "words " * (i % 13) for i in range(60)]
pq.write_table(pa.table({"id": list(range(len(a))), "text": a, "title": ["t%d" % i for i in range(len(a))]}),
               d + "/a.parquet", row_group_size=3)
pq.write_table(pa.table({"id": list(range(len(b))), "text": b, "title": ["u%d" % i for i in range(len(b))]}),
               d + "/b.parquet", row_group_size=7)
for name, rows in (("a", a), ("b", b)):
    with open(d + "/" + name + ".jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"text": r}, ensure_ascii=False) + "\n")
    with open(d + "/" + name + "_title.jsonl", "w", encoding="utf-8") as f:
        for i in range(len(rows)):
            f.write(json.dumps({"title": ("t%d" if name == "a" else "u%d") % i}) + "\n")
"""
    subprocess.run([py, "-c", script, d], check=True)


def main():
    py = tu.python_with("pyarrow.parquet")
    if py is None:
        for n in NAMES:
            skip(f"tokenize parquet: {n}", "pyarrow not installed (make hf-venv, or pip install pyarrow)")
        return finish()
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    d = os.path.abspath(SCRATCH)
    make_corpus(py, d)
    opts = ["--shard-tokens", "2000", "--val-tokens", "300", "--quiet"]

    rc_p, so_p, se_p = run(["--input", f"{d}/*.parquet", "--out", f"{d}/out_parquet"] + opts, py)
    rc_j, so_j, se_j = run(["--input", f"{d}/a.jsonl", "--input", f"{d}/b.jsonl", "--out", f"{d}/out_jsonl"] + opts, py)
    sp, sj = (shard_bytes(f"{d}/out_parquet") if rc_p == 0 else {}), (shard_bytes(f"{d}/out_jsonl") if rc_j == 0 else {})
    check(rc_p == 0 and rc_j == 0 and sp and sp == sj, "tokenize parquet: identical shards (bytes)",
          f"exit {rc_p}/{rc_j}, {len(sp)} vs {len(sj)} shards, equal {sp == sj}: {se_p.strip()[-300:]}")
    check(summary_lines(so_p) == summary_lines(so_j) and len(summary_lines(so_p)) >= 5, "tokenize parquet: summary equal",
          f"{summary_lines(so_p)} vs {summary_lines(so_j)}")
    check(f"{d}/a.parquet:4" in so_p, "tokenize parquet: bad line at its row", so_p[-400:])

    rc, so, se = run(["--input", f"{d}/*.parquet", "--field", "title", "--out", f"{d}/out_title"] + opts, py)
    rc2, _, _ = run(["--input", f"{d}/a_title.jsonl", "--input", f"{d}/b_title.jsonl", "--field", "title",
                     "--out", f"{d}/out_title_jsonl"] + opts, py)
    check(rc == 0 and rc2 == 0 and shard_bytes(f"{d}/out_title") == shard_bytes(f"{d}/out_title_jsonl"),
          "tokenize parquet: --field title", f"exit {rc}/{rc2}: {se.strip()[-300:]}")

    small = ["--shard-tokens", "700", "--val-tokens", "300", "--quiet"]
    run(["--input", f"{d}/*.parquet", "--out", f"{d}/ref_small"] + small, py)
    ok, why = True, ""
    for kill_after in (1, 4):
        out = f"{d}/killed_{kill_after}"
        rc1, _, _ = run(["--input", f"{d}/*.parquet", "--out", out] + small, py,
                        {"PHASELAB_TOKENIZE_KILL_AFTER_SHARDS": str(kill_after)})
        rc2, so2, se2 = run(["--input", f"{d}/*.parquet", "--out", out] + small[:-1], py)
        same = rc2 == 0 and shard_bytes(out) == shard_bytes(f"{d}/ref_small")
        if not (rc1 == -9 and same and "resumed run" in so2):
            ok, why = False, f"kill after {kill_after}: first exit {rc1}, second {rc2}, identical {same}: {se2.strip()[-200:]}"
    check(ok, "tokenize parquet: resume after SIGKILL", why)

    def error_case(name, args, env, want):
        out = f"{d}/err_{name.replace(' ', '_')}"
        rc, so, se = run(args + ["--out", out] + opts, py, env)
        shards = [f for f in os.listdir(out) if f.endswith(".bin")] if os.path.isdir(out) else []
        check(rc != 0 and all(w in se for w in want) and not shards, f"tokenize parquet: error: {name}",
              f"exit {rc}, {len(shards)} shards, stderr: {se.strip()[-300:]}")

    error_case("no such column", ["--input", f"{d}/a.parquet", "--field", "body"], None,
               [f"{d}/a.parquet", "no column 'body'", "id, text, title"])
    error_case("non-string column", ["--input", f"{d}/a.parquet", "--field", "id"], None,
               [f"{d}/a.parquet", "column 'id' is int64", "string"])
    with open(f"{d}/bad.parquet", "w") as f:
        f.write("this is not a parquet file\n")
    error_case("not parquet", ["--input", f"{d}/bad.parquet"], None, [f"{d}/bad.parquet", "not a readable parquet file"])
    nopa = None
    for cand in ("/usr/bin/python3", shutil.which("python3") or ""):
        if cand and os.access(cand, os.X_OK) and subprocess.run([cand, "-c", "import pyarrow"], capture_output=True).returncode:
            nopa = cand
            break
    if nopa:
        error_case("no pyarrow", ["--input", f"{d}/a.parquet"], {"PHASELAB_PYTHON": nopa}, ["needs pyarrow", "pip install pyarrow"])
    else:
        skip("tokenize parquet: error: no pyarrow", "every python3 here has pyarrow")
    error_case("no python", ["--input", f"{d}/a.parquet"], {"PHASELAB_PYTHON": f"{d}/no-such-python"},
               [f"{d}/a.parquet", "cannot start", "PHASELAB_PYTHON"])
    shutil.copy(f"{d}/a.parquet", f"{d}/c.parquet.gz")
    error_case("refuses .parquet.gz", ["--input", f"{d}/c.parquet.gz"], None, ["unknown input type", ".parquet"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
