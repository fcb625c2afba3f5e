"""The layout rules of docs/CONVENTIONS.md, checked on the source tree:

  1. floors: each folder includes only the project folders its row of ALLOWED names (the table
     of docs/CONVENTIONS.md, "Floors"); nothing includes cli/ (the programs' own files);
  2. every project include names a file that exists (a moved header leaves no stale include);
  3. the repository is readable on its own: no source or document cites a document outside it
     (SPEC.md, DESIGN.md, ../shared/notes, /work/shared); test data under ../shared/data is
     allowed in tests and tools (CI has it; the tests skip without it);
  4. every code folder has a README.md that names each of its source files;
  5. no text file carries a merge-conflict marker (a line starting with <<<<<<< , ======= or >>>>>>> ).

Each rule is checked against a hand-made bad tree too (a file that breaks it), so that a check
that can no longer fail is caught."""
import os
import re
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

    scratch = bad_tree(os.path.join(ROOT, "build", "scratch", "test_layout", "tree"))
    b, m = include_violations(scratch)
    check(any("model/m.c includes trainer/t.h" in x for x in b), "layout_detects_floor_break", str(b))
    check(any("nothing includes cli/" in x for x in b), "layout_detects_cli_include", str(b))
    check(any("data/gone.h" in x for x in m), "layout_detects_missing_include", str(m))
    check(any("d.c:2" in x for x in outside_citations(scratch)), "layout_detects_outside_citation", "")
    check(any("README.md missing" in x for x in readme_gaps(scratch)), "layout_detects_missing_readme", "")
    cm = conflict_markers(scratch)
    check(len(cm) == 3 and all("notes.md" in x for x in cm), "layout_detects_conflict_markers", str(cm))
    finish()


if __name__ == "__main__":
    main()
