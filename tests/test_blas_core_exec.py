"""./train runs OpenBLAS's fastest kernels for the CPU (kernels/cpu/cpu_backend.h,
cpu_blas_prefer_core): on a CPU whose model OpenBLAS's DYNAMIC_ARCH build does not recognise it
loads Prescott's SSE3 kernels; ./train then sets OPENBLAS_CORETYPE and re-executes itself before
anything else. Checked with OPENBLAS_VERBOSE=2, which makes OpenBLAS print "Core: NAME" each time
it loads:
- without OPENBLAS_CORETYPE the last load is the core the rule asks for on this CPU (SkylakeX with
  AVX-512, Haswell with AVX2 + FMA), loaded at most twice (no exec loop), and the same arguments
  reach the second program (its --version line);
- a user's OPENBLAS_CORETYPE is kept (one load, that core), and PHASELAB_BLAS_CORE=keep keeps
  whatever OpenBLAS chose (one load);
- a training run's first log line names the kernels.
Skipped where the build does not link OpenBLAS or the CPU has neither AVX2 nor AVX-512."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

tu.require_train()
summary = open(os.path.join(tu.ROOT, "build", "config.summary")).read() if os.path.exists(
    os.path.join(tu.ROOT, "build", "config.summary")) else ""
flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
avx512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags
avx2 = {"avx2", "fma"} <= flags
want = "SkylakeX" if avx512 else "Haswell" if avx2 else None
if "openblas" not in summary.lower():
    skip("blas core", "skipped: the build does not link OpenBLAS")
    finish()
if want is None:
    skip("blas core", "skipped: the CPU has neither AVX2 nor AVX-512")
    finish()


def cores(extra_env):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "PHASELAB_BLAS_CORE")}
    env.update(extra_env, OPENBLAS_VERBOSE="2")
    p = subprocess.run([tu.TRAIN, "--version"], env=env, capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    return p.returncode, [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Core:")], out


rc, loads, out = cores({})
check(rc == 0 and "phaselab" in out, "./train --version runs (re-executed or not)", out[-300:])
check(1 <= len(loads) <= 2 and loads[-1].lower() == want.lower(),
      f"without OPENBLAS_CORETYPE the kernels loaded last are {want} (at most one re-exec)", f"{loads}")
rc, loads, out = cores({"OPENBLAS_CORETYPE": "Haswell"})
check(rc == 0 and loads == ["Haswell"], "a user's OPENBLAS_CORETYPE is kept: one load, Haswell", f"{loads}")
rc, loads, out = cores({"PHASELAB_BLAS_CORE": "keep"})
check(rc == 0 and len(loads) == 1, "PHASELAB_BLAS_CORE=keep: OpenBLAS's own choice, one load", f"{loads}")

d, data = tu.scratch_with_corpus("test_blas_core_exec")
rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs", "train.steps=1",
                  "eval.every=0", "checkpoint.every=0"])
first = next((line for line in out.splitlines() if line.startswith("phaselab ")), "")
check(rc == 0 and f"backend cpu (OpenBLAS, {want} kernels)" in first, "the run's first line names the kernels", first or out[-300:])
finish()
