"""A full disk under the run directory (issue 19): ./train ends with exit 1 and one error line
naming the file, never a crash in HDF5's exit handler or its "infinite loop closing library"
noise. The disk is a small tmpfs mounted in a private mount namespace (unshare -m, or -rm as an
unprivileged user); the test skips where that is not allowed."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, skip, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_full_disk")
mnt = f"{d}/mnt"
os.makedirs(mnt)


def in_small_disk(size, args):
    """runs ./train args with mnt a fresh tmpfs of `size`; None when mounting is not allowed"""
    flags = "-m" if os.geteuid() == 0 else "-rm"
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; shift 2; exec "$@"'
    try:
        p = subprocess.run(["unshare", flags, "sh", "-c", script, "sh", size, mnt, tu.TRAIN] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return None if p.returncode == 99 else (p.returncode, p.stdout)


args = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={mnt}", "run.name=r",
        "train.steps=10"]
def can_mount_tmpfs():
    """a private mount namespace with a tmpfs works here (not in every container or chroot:
    unshare itself can fail, e.g. "cannot change root filesystem propagation")"""
    flags = "-m" if os.geteuid() == 0 else "-rm"
    try:
        p = subprocess.run(["unshare", flags, "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$1" && echo mounted', "sh",
                            mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and p.stdout.strip() == "mounted"


probe = in_small_disk("4m", args) if shutil.which("unshare") and can_mount_tmpfs() else None
if probe is None:
    skip("full disk", "cannot mount a tmpfs in a private mount namespace here")
    finish()
check(probe[0] == 0, "the run fits a 4 MiB disk", probe[1][-300:])
# 16k: metrics.h5 creation fails (SWMR start); 40k/64k: appends fail
for size, what in [("16k", "creating metrics.h5"), ("40k", "appending to metrics.h5"), ("64k", "appending to metrics.h5")]:
    rc, out = in_small_disk(size, args)
    errs = [l for l in out.splitlines() if l.startswith("phaselab:")]
    check(rc == 1 and len(errs) == 1 and "metrics.h5" in errs[0] and "HDF5: infinite loop" not in out and
          "FL,FL" not in out, f"full disk while {what} ({size}): exit 1, one line naming the file",
          f"exit {rc}: {out[-400:]}")
# 300k: metrics.h5 fits, the first checkpoint does not
rc, out = in_small_disk("300k", args + ["run.name=r"])
errs = [l for l in out.splitlines() if l.startswith("phaselab:")]
check(rc == 1 and len(errs) == 1 and ".tmp_step_00000005" in errs[0] and "No space left" in errs[0],
      "full disk while writing a checkpoint: exit 1, one line naming the file", f"exit {rc}: {out[-400:]}")
finish()
