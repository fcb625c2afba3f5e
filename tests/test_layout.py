"""The layout rules of docs/CONVENTIONS.md, checked on the source tree:

  1. floors: each folder includes only the project folders its row of ALLOWED names (the table
     of docs/CONVENTIONS.md, "Floors"); nothing includes cli/ (the programs' own files);
  2. every project include names a file that exists (a moved header leaves no stale include);
  3. the repository is readable on its own: no source or document cites a document outside it
     (SPEC.md, DESIGN.md, ../shared/notes, /work/shared); test data under ../shared/data is
     allowed in tests and tools (CI has it; the tests skip without it);
  4. every code folder has a README.md that names each of its source files;
  5. no text file carries a merge-conflict marker (a line starting with <<<<<<< , ======= or >>>>>>> );
  6. every citation of the spec, `docs/spec.md §N.M` (also `§N.M` alone and `docs/spec.md N.M`), in
     any text file names a section heading that docs/spec.md has;
  7. every repository path a document (README.md, docs/*.md, every folder's README.md) or a source
     file (not a test program, whose fixtures are made up) names exists: `tools/report`, `configs/paper/*.ini`, `configs/paper/w8s8_kv{1,8}.ini`,
     `tests/gpu/`; a per-folder README's bare `file.c` exists in that folder (or in the repository);
     placeholders (`tests/test_NAME.py`, `RUN/config.ini`), outputs (`.bin`, `.h5`, `.json`) and
     user data under data/ are not paths of the repository and are not checked;
  8. every `make TARGET` a document shows (in backticks or a code block) is a target of the Makefile
     or mk/*.mk;
  9. the README's "Code layout" names every top-level folder, and tools/, tests/, configs/ and mk/
     have a README.md naming each file and subfolder they hold (tests/: every file but test_*);
 10. nothing outside tests/ refers to ../shared or /work/shared: the programs and tools run from a
     clone alone (tests may use the test data there and skip without it).

Each rule is checked against a hand-made bad tree too (a file that breaks it), so that a check
that can no longer fail is caught."""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docspans import command_spans  # noqa: E402
import shutil
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pycheck import check, finish  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
# folder -> the project folders its sources may include (itself always). The floors, bottom up.
ALLOWED = {
    "common": set(),
    "kernels": {"common"},
    "data": {"common"},
    "model": {"common", "kernels"},
    "trainer": {"common", "kernels", "data", "model"},
    "analysis": {"common", "kernels", "data", "model", "trainer"},
    "cli": {"common", "kernels", "data", "model", "trainer", "analysis"},
}
SOURCE_EXT = (".c", ".h", ".cu", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a citation of a document that is not in the repository
OUTSIDE = re.compile(r"\bSPEC\.md\b|\bDESIGN\.md\b|shared/notes\b|/work/shared/(?!data/)|\.\./shared/[A-Za-z_-]+\.md")
TEXT_EXT = SOURCE_EXT + (".py", ".sh", ".md", ".mk", ".ini", "")
SKIP_DIRS = {".git", "build", "build-asan", "build-fuzz", "build-bundle", "runs", "__pycache__"}


def top_folder(path):
    return path.split(os.sep, 1)[0]


def walk(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")]
        for f in files:
            yield os.path.relpath(os.path.join(d, f), root)


def include_violations(root):
    bad, missing = [], []
    for rel in walk(root):
        if not rel.endswith(SOURCE_EXT):
            continue
        folder = top_folder(rel)
        text = open(os.path.join(root, rel), errors="replace").read()
        for inc in INCLUDE.findall(text):
            target = top_folder(inc)
            if target not in ALLOWED:       # generated headers (phaselab_version.h), tests/, system-like
                continue
            if not os.path.exists(os.path.join(root, inc)):
                missing.append(f"{rel}: {inc}")
            if folder in ALLOWED and target != folder and target not in ALLOWED[folder]:
                bad.append(f"{rel} includes {inc} ({folder}/ may include {sorted(ALLOWED[folder]) or 'only itself'})")
            if target == "cli" and folder != "cli":
                bad.append(f"{rel} includes {inc} (nothing includes cli/)")
    return bad, missing


def matching_lines(root, pattern, accept, width):
    """'rel:line: text' for every line of the accepted text files (not this file) matching pattern."""
    found = []
    for rel in walk(root):
        if not accept(rel) or rel == os.path.join("tests", "test_layout.py"):
            continue
        try:
            text = open(os.path.join(root, rel), errors="replace").read()
        except OSError:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if pattern(line):
                found.append(f"{rel}:{no}: {line.strip()[:width]}")
    return found


def outside_citations(root):
    def accept(rel):
        return rel.endswith(TEXT_EXT[:-1]) or (top_folder(rel) == "tools" and "." not in os.path.basename(rel))
    return matching_lines(root, OUTSIDE.search, accept, 100)


CONFLICT = re.compile(r"^(<{7} |={7}$|>{7} )")


def conflict_markers(root):
    """Lines of text files that start with a merge-conflict marker (a committed, unresolved merge)."""
    return matching_lines(root, CONFLICT.match, lambda rel: rel.endswith(TEXT_EXT[:-1]), 40)


def readme_gaps(root):
    gaps = []
    for folder in sorted(ALLOWED):
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        readme = os.path.join(d, "README.md")
        if not os.path.exists(readme):
            gaps.append(f"{folder}/README.md missing")
            continue
        text = open(readme).read()
        for rel in walk(d):
            if rel.endswith(SOURCE_EXT) and os.path.basename(rel) not in text:
                gaps.append(f"{folder}/README.md does not name {rel}")
    return gaps


def more(items, n=10):
    return "; ".join(items[:n]) + (f" (+{len(items) - n} more)" if len(items) > n else "")


def text_files(root):
    """(rel, text) of the repository's text files (the documents, sources, scripts, configs)."""
    for rel in walk(root):
        if not (rel.endswith(TEXT_EXT[:-1]) or "." not in os.path.basename(rel)):
            continue
        try:
            text = open(os.path.join(root, rel), encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        yield rel, text


def doc_files(root):
    """The documents a reader follows: README.md, docs/*.md and every folder's README.md."""
    for rel in walk(root):
        if os.path.basename(rel) == "README.md" or (top_folder(rel) == "docs" and rel.endswith(".md")):
            yield rel


# ---- 6. citations of docs/spec.md ------------------------------------------------------------
SPEC_HEADING = re.compile(r"^#{2,4} (\d+b?(?:\.\d+)*)\.? ", re.M)
# §N, §N.M, §2b.3; and "docs/spec.md N.M" / "docs/spec.md sections N, M"
SECTION_SIGN = re.compile(r"§\s*(\d+b?(?:\.\d+)*)")
SPEC_NUMBER = re.compile(r"spec\.md,?\s+(?:sections?\s+)?(\d+b?(?:\.\d+)*)")


def spec_sections(root):
    path = os.path.join(root, "docs", "spec.md")
    return set(SPEC_HEADING.findall(open(path).read())) if os.path.exists(path) else set()


def spec_section_problems(root):
    """'rel:line: §N.M' for every citation of a section docs/spec.md does not have."""
    have = spec_sections(root)
    bad = []
    for rel, text in text_files(root):
        if rel == os.path.join("tests", "test_layout.py"):
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if "§" not in line and "spec.md" not in line:
                continue
            for m in list(SECTION_SIGN.finditer(line)) + list(SPEC_NUMBER.finditer(line)):
                sec = m.group(1).rstrip(".")
                if sec not in have:
                    bad.append(f"{rel}:{no}: §{sec}")
    return bad


# ---- 7. paths the documents and comments name -----------------------------------------------
CITED_FOLDERS = ("analysis", "cli", "common", "configs", "data", "docs", "kernels", "mk", "model", "tests", "tools",
                 "trainer")
# a path starts at a folder of the repository; not after a word character, a dot, a slash (an
# absolute or longer path), a colon (`git show REV:path`), '$' or '-'
PATH_REF = re.compile(r"(?<![\w./:$-])((?:" + "|".join(CITED_FOLDERS) + r")/[\w./*{},+-]*[\w*}/])")
# the kinds of file the repository holds; a cited .bin, .h5, .json, .csv is an output or user data
CHECKED_EXT = (".c", ".h", ".cu", ".cpp", ".py", ".sh", ".md", ".ini", ".def", ".mk", ".args", ".rows", ".supp", ".dict",
               ".png", ".patch")
PLACEHOLDER = re.compile(r"(?:^|[/_.-])(?:[A-Z]{2,}[A-Z_0-9]*|N{3,})(?:$|[/_.-])")
BARE_NAME = re.compile(r"`([\w.+-]+\.(?:c|h|cu|cpp|py|sh|def|mk))`")


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [x for alt in m.group(1).split(",") for x in expand_braces(p[:m.start()] + alt + p[m.end():])]


def path_exists(root, p):
    """Every expansion exists (a glob: matches something); a name without extension may be a
    module or program cited by its stem (`trainer/loss_stats` for .c/.h, `tests/gpu/bench_cuda`)."""
    for q in expand_braces(p):
        full = os.path.join(root, q)
        if "*" in q or "?" in q:
            if not glob.glob(full):
                return False
        elif not os.path.exists(full) and not (not os.path.splitext(q)[1] and glob.glob(full + ".*")):
            return False
    return True


def checked_path(p):
    """Whether a cited path is one the repository must hold (not a placeholder, output or user data)."""
    name = os.path.basename(p.rstrip("/"))
    ext = os.path.splitext(name)[1]
    if PLACEHOLDER.search(p) or "NNN" in p or re.search(r"\{[^,}]*\}", p) or p.endswith(("_", "-")):
        return False                                  # NAME, step_NNN, f"{n}.ini", a prefix "tests/test_"
    if top_folder(p) == "data":                       # data/ holds code; other data/ paths are user data
        return ext in (".c", ".h", ".md")
    return not ext or ext in CHECKED_EXT


def doc_path_problems(root):
    """'rel:line: path' for every path cited in a document or a source comment that does not exist,
    and for a per-folder README's bare `file.c` that is neither in its folder nor anywhere else."""
    basenames = {os.path.basename(rel) for rel in walk(root)}
    docs = set(doc_files(root))
    bad = []
    for rel, text in text_files(root):
        if top_folder(rel) == "tests" and os.path.basename(rel).startswith("test_"):
            continue                                  # the tests build trees of made-up paths
        here = os.path.dirname(rel)
        for no, line in enumerate(text.splitlines(), 1):
            for m in PATH_REF.finditer(line):
                p = m.group(1)
                if checked_path(p) and not path_exists(root, p) and not (here and path_exists(root, os.path.join(here, p))):
                    bad.append(f"{rel}:{no}: {p}")
            if rel in docs and here:
                for name in BARE_NAME.findall(line):
                    if PLACEHOLDER.search(name) or "/" in name:
                        continue
                    if not os.path.exists(os.path.join(root, here, name)) and name not in basenames:
                        bad.append(f"{rel}:{no}: {name}")
    return bad


# ---- 8. make targets the documents show -------------------------------------------------------
MAKE_RULE = re.compile(r"^([^\s:#=][^:=#]*?)\s*::?(?!=)", re.M)
MAKE_CMD = re.compile(r"(?:^|&&|;)\s*make((?:\s+\S+)+)")


def make_targets(root):
    targets = set()
    for mf in [os.path.join(root, "Makefile")] + glob.glob(os.path.join(root, "mk", "*.mk")):
        if os.path.exists(mf):
            for m in MAKE_RULE.finditer(open(mf).read()):
                targets.update(x for x in m.group(1).split() if "$" not in x and "%" not in x)
    return targets


def make_target_problems(root):
    """'rel:line: make TARGET' for a `make TARGET` (in backticks or a code block) with no such target."""
    have = make_targets(root)
    bad = []
    for rel in sorted(doc_files(root)):
        for no, span in command_spans(root, rel):
            for m in MAKE_CMD.finditer(span.strip()):
                words = [w for w in m.group(1).split() if not w.startswith("-") and "=" not in w]
                if not words or words[0].startswith(("build/", "$")) or words[0] in have:
                    continue
                if re.fullmatch(r"[a-z][\w.-]*", words[0]):
                    bad.append(f"{rel}:{no}: make {words[0]}")
    return bad


# ---- 9. every folder's purpose stated --------------------------------------------------------
# folder -> which of its entries its README.md names: every file and subfolder, or all but tests
LISTED_FOLDERS = {"tools": None, "configs": None, "mk": None, "tests": re.compile(r"^test_.*\.(c|py|sh)$")}


def folder_naming_problems(root):
    bad = []
    readme = os.path.join(root, "README.md")
    text = open(readme).read() if os.path.exists(readme) else ""
    layout = text.split("## Code layout", 1)[1] if "## Code layout" in text else ""
    for entry in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, entry)) and entry not in SKIP_DIRS and not entry.startswith(".") \
                and not re.search(r"(?<![\w/.-])" + re.escape(entry) + "/", layout):
            bad.append(f'README.md: "Code layout" does not name {entry}/')
    for folder, exempt in LISTED_FOLDERS.items():
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        rp = os.path.join(d, "README.md")
        if not os.path.exists(rp):
            bad.append(f"{folder}/README.md missing")
            continue
        listed = open(rp).read()
        for entry in sorted(os.listdir(d)):
            if entry in SKIP_DIRS or entry.startswith(".") or entry == "README.md" or (exempt and exempt.match(entry)):
                continue
            name = entry + "/" if os.path.isdir(os.path.join(d, entry)) else entry
            if not re.search(r"(?<![\w.-])" + re.escape(name) + (r"(?![\w.-])" if not name.endswith("/") else ""), listed):
                bad.append(f"{folder}/README.md does not name {name}")
    return bad


# ---- 10. nothing but the tests reads ../shared -------------------------------------------------
SHARED = re.compile(r"\.\./shared\b|/work/shared\b")


def shared_dependencies(root):
    return matching_lines(root, SHARED.search,
                          lambda rel: top_folder(rel) != "tests" and (rel.endswith(TEXT_EXT[:-1]) or "." not in os.path.basename(rel)),
                          100)


def bad_tree(scratch):
    """A tiny tree breaking every rule once."""
    shutil.rmtree(scratch, ignore_errors=True)
    for folder in ("model", "data", "cli", "trainer"):
        os.makedirs(os.path.join(scratch, folder))
    open(os.path.join(scratch, "model", "m.c"), "w").write('#include "trainer/t.h"\n')      # up a floor
    open(os.path.join(scratch, "trainer", "t.h"), "w").write('#include "cli/x.h"\n')        # includes cli/
    open(os.path.join(scratch, "cli", "x.h"), "w").write("\n")
    open(os.path.join(scratch, "data", "d.c"), "w").write('#include "data/gone.h"\n/* see SPEC.md section 2 */\n')
    open(os.path.join(scratch, "data", "notes.md"), "w").write("text\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\n")
    # rules 6-10: a spec with sections 1, 2.1 and 3.1; citations of those and of missing ones
    for folder in ("docs", "tools", "tools/sub", "configs", "tests", "mk"):
        os.makedirs(os.path.join(scratch, folder), exist_ok=True)
    open(os.path.join(scratch, "docs", "spec.md"), "w").write("# spec\n## 1. One\n### 2.1 Two\n### 3.1 Three\n")
    with open(os.path.join(scratch, "data", "d.c"), "a") as f:
        f.write("/* docs/spec.md §2.1 and §3.1, docs/spec.md 3.9 */\n")                           # 3.9 missing
    open(os.path.join(scratch, "Makefile"), "w").write("all: x\ntest: all\n.PHONY: all\n")
    open(os.path.join(scratch, "mk", "extra.mk"), "w").write("test-extra: test\n")
    open(os.path.join(scratch, "mk", "README.md"), "w").write("`extra.mk`\n")
    open(os.path.join(scratch, "tools", "tool"), "w").write("#!/bin/sh\n# default ../shared/data/x.json\n")
    open(os.path.join(scratch, "tools", "helper.py"), "w").write("")
    open(os.path.join(scratch, "tools", "sub", "x.py"), "w").write("")
    open(os.path.join(scratch, "tools", "README.md"), "w").write("`tool`\n")
    open(os.path.join(scratch, "tests", "test_x.py"), "w").write("# ../shared/data is fine in a test\n")
    open(os.path.join(scratch, "tests", "README.md"), "w").write("tests\n")
    open(os.path.join(scratch, "configs", "w1.ini"), "w").write("")
    open(os.path.join(scratch, "configs", "README.md"), "w").write("`w1.ini`\n")
    open(os.path.join(scratch, "model", "README.md"), "w").write("| `m.c` | `m2.c` |\n")                # m2.c missing
    open(os.path.join(scratch, "README.md"), "w").write(
        "See docs/spec.md §1, §2.1 and §2.11; `docs/spec.md §7`.\n"                                 # 2.11, 7 missing
        "Run `tools/tool`, `make test`, `make test-extra` and `make -j2 nothing-such`.\n"           # target missing
        "Configs configs/w1.ini, configs/w*.ini, configs/nothing_*.ini, configs/w{1,9}.ini.\n"     # two missing
        "Placeholders: tests/test_NAME.py, RUN/config.ini, data/corpus/train_000.bin, runs/x/y.c.\n"
        "`git show abc1234:tools/gone` is history, tools/gone is not; data/gone.c; docs/gone.md.\n"
        "/* model/moved.h */\n"
        "```sh\nmake gone\nmake all\n```\n"
        "## Code layout\n\n```\nmodel/ cli/ trainer/ tools/ docs/ configs/ tests/ mk/\n```\n")
    return scratch


def main():
    bad, missing = include_violations(ROOT)
    check(not bad, "layout_floors", "; ".join(bad[:10]) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else ""))
    check(not missing, "layout_includes_exist", "; ".join(missing[:10]))
    cites = outside_citations(ROOT)
    check(not cites, "layout_no_outside_citations", "; ".join(cites[:10]) + (f" (+{len(cites) - 10} more)" if len(cites) > 10 else ""))
    check(os.path.exists(os.path.join(ROOT, "docs", "spec.md")), "layout_spec_in_repo", "docs/spec.md missing")
    gaps = readme_gaps(ROOT)
    check(not gaps, "layout_folder_readmes", "; ".join(gaps[:10]))
    marks = conflict_markers(ROOT)
    check(not marks, "layout_no_conflict_markers", "; ".join(marks[:10]))
    secs = spec_section_problems(ROOT)
    check(not secs, "layout_spec_sections_exist", more(secs))
    paths = doc_path_problems(ROOT)
    check(not paths, "layout_doc_paths_exist", more(paths))
    targets = make_target_problems(ROOT)
    check(not targets, "layout_doc_make_targets_exist", more(targets))
    named = folder_naming_problems(ROOT)
    check(not named, "layout_folders_named", more(named))
    shared = shared_dependencies(ROOT)
    check(not shared, "layout_no_shared_outside_tests", more(shared))

    scratch = bad_tree(os.path.join(ROOT, "build", "scratch", "test_layout", "tree"))
    b, m = include_violations(scratch)
    check(any("model/m.c includes trainer/t.h" in x for x in b), "layout_detects_floor_break", str(b))
    check(any("nothing includes cli/" in x for x in b), "layout_detects_cli_include", str(b))
    check(any("data/gone.h" in x for x in m), "layout_detects_missing_include", str(m))
    check(any("d.c:2" in x for x in outside_citations(scratch)), "layout_detects_outside_citation", "")
    check(any("README.md missing" in x for x in readme_gaps(scratch)), "layout_detects_missing_readme", "")
    cm = conflict_markers(scratch)
    check(len(cm) == 3 and all("notes.md" in x for x in cm), "layout_detects_conflict_markers", str(cm))
    sp = spec_section_problems(scratch)
    check(sorted(x.split(": ")[-1] for x in sp) == ["§2.11", "§3.9", "§7"] and all("README.md" in x or "d.c" in x for x in sp),
          "layout_detects_missing_spec_section", str(sp))
    pp = doc_path_problems(scratch)
    want = ["tools/gone", "configs/nothing_*.ini", "configs/w{1,9}.ini", "data/gone.c", "docs/gone.md", "m2.c",
            "model/moved.h", "data/gone.h"]
    check(sorted(x.split(": ")[-1] for x in pp) == sorted(want), "layout_detects_missing_doc_path", str(pp))
    mt = make_target_problems(scratch)
    check([x.split(": ")[-1] for x in mt] == ["make nothing-such", "make gone"], "layout_detects_missing_make_target", str(mt))
    fn = folder_naming_problems(scratch)
    check(sorted(fn) == sorted(["README.md: \"Code layout\" does not name data/",
                                "tools/README.md does not name helper.py",
                                "tools/README.md does not name sub/"]), "layout_detects_unnamed_folder", str(fn))
    sh = shared_dependencies(scratch)
    check(len(sh) == 1 and sh[0].startswith("tools/tool:2"), "layout_detects_shared_dependency", str(sh))
    finish()


if __name__ == "__main__":
    main()
