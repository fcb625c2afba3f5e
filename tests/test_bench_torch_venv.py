"""tools/bench-torch's venv (build/torch-venv or --venv DIR) is judged by whether its python imports
torch, not by the file's presence: a venv left without torch (a pip install interrupted part-way)
gets torch installed into it instead of failing every later run with 'no torch module'; a failed
install leaves a venv it did not make where it was (the user's). pip is pointed at no index
(PIP_NO_INDEX) so the install fails at once: the test downloads nothing."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
d = os.path.join(ROOT, "build", "scratch", "test_bench_torch_venv")
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d)
bare = os.path.join(d, "bare")          # a venv without torch: what an interrupted install leaves
# (--without-pip: Debian's python3 has no ensurepip without python3-venv; the install below fails either
# way, at pip's index or at the missing pip, and the tool must say so)
subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True)
py = os.path.join(bare, "bin", "python3")
env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=d, PIP_DISABLE_PIP_VERSION_CHECK="1")
env.pop("PHASELAB_BENCH_TORCH_VENV", None)
# run by the bare venv's python, so torch is missing whatever the system python has
r = subprocess.run([py, os.path.join(ROOT, "tools", "bench-torch"), "--venv", bare, "--steps", "1"],
                   capture_output=True, text=True, env=env, timeout=300)
err = r.stderr
check(r.returncode != 0 and "installing torch" in err and "could not install torch" in err and "no torch module" not in err,
      "a venv without torch: torch is installed into it (here pip has no index: the install fails, said)", err[-500:])
check(os.path.exists(py), "the failed install leaves the user's venv in place", "")
finish()
