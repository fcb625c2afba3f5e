"""The commands the documents show, against the programs (the static half, paths, make targets and
docs/spec.md sections, is tests/test_layout.py):

  1. every executable of tools/ answers --help with exit 0 and its usage on stdout, within seconds,
     before it builds, installs or writes anything (a newcomer's first command; tools/gpu-bundle
     --help used to start a CUDA build, tools/bench-torch --help a pip install of torch,
     tools/demo-run --help wrote the synthetic corpus and then failed): no new entry in the
     repository root, build/ or runs/;
  2. every option a document passes to ./train, ./tokenize or tools/NAME (in backticks or a code
     block of README.md, docs/*.md or a folder's README.md) appears in that program's --help
     (`tools/sweep`: its subcommands' too), so the documented command line exists.

Each rule is checked against a hand-made bad case too (a tool that ignores --help, a document
with an option no program has), so that a check that can no longer fail is caught."""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pycheck import check, finish, skip  # noqa: E402
from docspans import command_spans  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
HELP_TIMEOUT = 20          # seconds; a help that takes longer is doing something else
WATCHED = ("", "build", "runs")   # folders whose entries a --help must not change


def run_help(argv, cwd=ROOT):
    """(exit status or 'timeout', stdout, stderr) of argv, its whole process group killed on timeout."""
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=HELP_TIMEOUT)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return "timeout", out, err


def entries(root):
    return {(d, e) for d in WATCHED if os.path.isdir(os.path.join(root, d)) for e in os.listdir(os.path.join(root, d))}


def tools_of(root):
    d = os.path.join(root, "tools")
    return sorted(os.path.join("tools", f) for f in os.listdir(d)
                  if os.path.isfile(os.path.join(d, f)) and os.access(os.path.join(d, f), os.X_OK))


def help_problems(root, tools):
    """'tool: why' for every tool whose --help is not a quick usage text with exit 0 and no side effect."""
    bad = []
    for tool in tools:
        before = entries(root)
        rc, out, err = run_help([os.path.join(root, tool), "--help"], cwd=root)
        created = sorted(os.path.join(d, e) for d, e in entries(root) - before)
        if rc != 0:
            bad.append(f"{tool} --help: exit {rc} ({(err.strip().splitlines() or [''])[-1][:100]})")
        elif len(out.strip().splitlines()) < 2 or "Traceback" in err:
            bad.append(f"{tool} --help: no usage text on stdout")
        if created:
            bad.append(f"{tool} --help created {', '.join(created)}")
    return bad


# ---- 2. documented options ---------------------------------------------------------------------
CMD = re.compile(r"(?:^|[\s`(])(\./train|\./tokenize|tools/[a-z][\w-]*)((?:\s+[^\s`|;&#]+)*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
SUBCOMMANDS = {os.path.join("tools", "sweep"): ("run", "slurm", "status")}


def doc_files(root):
    docs = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in ("build", "runs", "build-asan", "build-fuzz"))
        rel = os.path.relpath(d, root)
        if rel != "." and "README.md" in files:
            docs.append(os.path.join(rel, "README.md"))
    return docs


def documented_options(root, docs):
    """(doc, line, program, option) for every option in a command of a code block or a backtick span."""
    found = []
    for doc in docs:
        for no, span in command_spans(root, doc, comment=" #"):
            for m in CMD.finditer(span):
                prog = m.group(1)
                for opt in OPTION.findall(m.group(2)):
                    found.append((doc, no, prog, opt))
    return found


def option_problems(root, docs, help_of):
    bad = []
    for doc, no, prog, opt in documented_options(root, docs):
        text = help_of(prog)
        if text is not None and not re.search(re.escape(opt) + r"(?![\w-])", text):
            bad.append(f"{doc}:{no}: {prog} {opt} is not in `{prog} --help`")
    return bad


def make_help_of(root):
    cache = {}

    def help_of(prog):
        if prog not in cache:
            path = os.path.join(root, prog)
            if not os.path.isfile(path) or not os.access(path, os.X_OK):
                cache[prog] = None          # a missing program is tests/test_layout.py's finding
            else:
                texts = []
                for sub in ((),) + tuple((s,) for s in SUBCOMMANDS.get(prog, ())):
                    rc, out, err = run_help([path, *sub, "--help"], cwd=root)
                    texts.append(out + err)
                cache[prog] = "\n".join(texts)
        return cache[prog]
    return help_of


def main():
    if not all(os.access(os.path.join(ROOT, p), os.X_OK) for p in ("train", "tokenize")):
        skip("doc_commands", "./train or ./tokenize not built (make)")
        finish()
    tools = tools_of(ROOT)
    check(len(tools) >= 10, "doc_tools_found", f"{tools}")
    bad = help_problems(ROOT, tools)
    check(not bad, "doc_tools_answer_help", "; ".join(bad))
    rc, out, _ = run_help([os.path.join(ROOT, "train"), "--help"])
    check(rc == 0 and "usage" in out, "doc_train_help", f"exit {rc}")
    rc, out, _ = run_help([os.path.join(ROOT, "tokenize"), "--help"])
    check(rc == 0 and "usage" in out, "doc_tokenize_help", f"exit {rc}")
    docs = doc_files(ROOT)
    opts = documented_options(ROOT, docs)
    check(len(opts) > 50, "doc_options_found", f"{len(opts)} documented options")
    bad = option_problems(ROOT, docs, make_help_of(ROOT))
    check(not bad, "doc_options_exist", "; ".join(bad[:10]) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else ""))

    # the bad cases: a tool that runs on --help and writes a file; a document with an unknown option
    scratch = os.path.join(ROOT, "build", "scratch", "test_doc_commands")
    subprocess.run(["rm", "-rf", scratch])
    os.makedirs(os.path.join(scratch, "tools"))
    os.makedirs(os.path.join(scratch, "docs"))
    os.makedirs(os.path.join(scratch, "runs"))
    fake = os.path.join(scratch, "tools", "fake")
    open(fake, "w").write('#!/bin/sh\n# fake: ignores --help\ncd "$(dirname "$0")/.."\n: > runs/made\nexit 2\n')
    os.chmod(fake, 0o755)
    good = os.path.join(scratch, "tools", "good")
    open(good, "w").write('#!/bin/sh\necho "usage: good [--real]"\necho "the good tool"\n')
    os.chmod(good, 0o755)
    bad = help_problems(scratch, ["tools/fake", "tools/good"])
    check(len(bad) == 2 and bad[0].startswith("tools/fake --help: exit 2") and "runs/made" in bad[1],
          "doc_detects_tool_without_help", str(bad))
    open(os.path.join(scratch, "README.md"), "w").write(
        "Run `tools/good --real` and `tools/good --unreal`.\n```sh\ntools/good --real --gone   # --comment\n```\n")
    bad = option_problems(scratch, ["README.md"], make_help_of(scratch))
    check(bad == ["README.md:1: tools/good --unreal is not in `tools/good --help`",
                  "README.md:3: tools/good --gone is not in `tools/good --help`"], "doc_detects_unknown_option", str(bad))
    finish()


if __name__ == "__main__":
    main()
