"""One rank's fault in a 2-rank ./train job under mpirun (docs/distributed.md, "Failures"), injected
with the LD_PRELOAD shim of tests/faultinject on that rank only (an MPMD launch: `mpirun -np 1
-x LD_PRELOAD=... ./train ... : -np 1 ./train ...`):
- rank 0 hangs on its way out (a dead file system: the last write to metrics.h5, at its close,
  never returns) while rank 1 has finished: the job must end within a minute with the watchdog's
  line (PHASELAB_COMM_TIMEOUT=5), not wait for ever in MPI_Finalize;
- rank 1's disk is full when it writes its optimizer shard: the job fails with status 1 and
  rank 0's error line (log.txt) names rank 1; no half checkpoint is left; the run resumes.
Every mpirun runs under a timeout, so this test never hangs."""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

if not shutil.which("mpirun"):
    skip("mpi faults", "mpirun not installed")
    finish()
tu.require_train()
SO = os.path.join(tu.ROOT, os.environ.get("BUILD", "build"), "faultinject", "faultinject.so")
if not os.path.exists(SO):
    check(False, "the fault-injection shim is built", f"{SO} missing: make {os.path.relpath(SO, tu.ROOT)}")
    finish()

d, data = tu.scratch_with_corpus("test_mpi_faults", train_rows=64)
MPI = ["mpirun", "--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
ENV = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")   # containers forbid CMA


def base(name, *more):
    return [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
            f"run.name={name}", "train.steps=4", "eval.every=0", "checkpoint.every=0"] + list(more)


def faulted(args, fault, rank=0, timeout=120):
    """A 2-rank job of ./train args whose rank `rank` runs under the shim with the FAULT_* settings
    of `fault` (dict; {}: no shim); PHASELAB_COMM_TIMEOUT=5 on both. (exit status or None on timeout, output, seconds)."""
    shim = ["-x", f"LD_PRELOAD={SO}"] + [x for k, v in fault.items() for x in ("-x", f"{k}={v}")] if fault else []
    ranks = [["-np", "1", "-x", "PHASELAB_COMM_TIMEOUT=5"] + (shim if r == rank else []) + [tu.TRAIN] + args
             for r in range(2)]
    cmd = MPI + ranks[0] + [":"] + ranks[1]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    try:
        out = p.communicate(timeout=timeout)[0]
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, rc = p.communicate()[0], None
    return rc, out, time.time() - t0


# ---- rank 0 hangs at metrics.h5's close, after the last checkpoint: the calls a clean run makes
# under the run directory are counted first; the last one is that close's write
rundir = f"{d}/runs/count"
rc, out, _ = faulted(base("count"), {"FAULT_DIR": rundir, "FAULT_LOG": f"{d}/count.calls"})
calls = open(f"{d}/count.calls").read().splitlines() if os.path.exists(f"{d}/count.calls") else []
last = calls[-1].split() if calls else []
check(rc == 0 and last[2:3] == [f"{rundir}/metrics.h5"], "the clean run's last write under the run directory is metrics.h5's",
      f"status {rc}, last call {last}; {out[-300:]}")
if last:
    rc, out, secs = faulted(base("hang_exit"), {"FAULT_DIR": f"{d}/runs/hang_exit", "FAULT_AT": last[0], "FAULT_MODE": "hang"},
                             timeout=60)
    check(rc not in (None, 0) and secs < 60,
          f"rank 0 hangs at metrics.h5's close, rank 1 done: the job ends non-zero within a minute ({secs:.1f} s, status {rc})",
          out[-400:])
    check("phaselab: rank 1: collective finalize did not complete within 5 s" in out,
          "the watchdog says which rank waited and where (finalize)", out[-400:])

# ---- rank 1's disk is full when it writes its optimizer shard of the step-4 checkpoint: the job
# ends with status 1, rank 0's error (and log.txt) names rank 1, the rank says why, no half
# checkpoint is left, and the same command resumes from the step-2 checkpoint
args = base("full", "checkpoint.every=2")
shard = f"{d}/runs/full/checkpoints/.tmp_step_00000004"
rc, out, _ = faulted(args, {"FAULT_DIR": shard, "FAULT_AT": "1", "FAULT_MODE": "enospc"}, rank=1)
log = open(f"{d}/runs/full/log.txt").read() if os.path.exists(f"{d}/runs/full/log.txt") else ""
named = "phaselab: checkpoint step 4 failed on rank 1 (its error is on that rank's stderr); not saved"
check(rc == 1 and named in log and "rank_00001.bin: cannot write the optimizer shard: No space left on device" in out,
      "rank 1's disk full at its optimizer shard: status 1, log.txt names rank 1, rank 1 says why", f"status {rc}: {out[-500:]}")
cks = sorted(os.listdir(f"{d}/runs/full/checkpoints"))
check(cks == ["step_00000002"], "no half checkpoint is left", str(cks))
rc, out, _ = faulted(args, {})
check(rc == 0 and "resumed from" in out and "step_00000002" in out, "the same command resumes from step 2", out[-300:])

# each rank hashes its own optimizer shard and rank 0 gathers the digests (trainer/checkpoint.c
# ShardDigest): state.json's entry of every shard is that file's own size and sha256
import hashlib  # noqa: E402
import json  # noqa: E402
last = sorted(x for x in os.listdir(f"{d}/runs/full/checkpoints") if x.startswith("step_"))[-1]
ck = f"{d}/runs/full/checkpoints/{last}"
files = json.load(open(f"{ck}/state.json"))["files"]
got = {r: files.get(f"optimizer/rank_{r:05d}.bin") for r in range(2)}
want = {r: {"bytes": os.path.getsize(f"{ck}/optimizer/rank_{r:05d}.bin"),
            "sha256": hashlib.sha256(open(f"{ck}/optimizer/rank_{r:05d}.bin", "rb").read()).hexdigest()} for r in range(2)}
check(got == want and want[0]["sha256"] != want[1]["sha256"],
      "state.json: each rank's shard digest (hashed on its rank, gathered) is that file's own", f"{got} vs {want}")
finish()
