#!/usr/bin/env bash
# tools/sweep slurm against a real Slurm on localhost: starts its own munged, slurmctld and slurmd
# (Debian slurm-wlm + munge; config, keys, sockets, state and logs all under build/scratch,
# daemons on unprivileged ports, SLURM_CONF pointing at that config), submits a job array of
# two tiny CPU runs (configs/test/tiny_full.ini, tiny_w4s4.ini on a synthetic corpus made with
# ./train --make-synthetic), waits for both (at most 10 minutes) and checks that both runs
# finished: metrics.h5 at the final step and a "done:" log line. Then pre-emption: a longer run
# gets USR1 (as from --signal=B:USR1@300), checkpoints, is requeued by its script, resumes and
# finishes with no step logged twice. The daemons are stopped at
# the end (trap), by the process ids they recorded.
# Skips when slurm-wlm/munge are not installed, when not root, or when ./train cannot train yet.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
S=$ROOT/build/scratch/test_sweep_slurm
T=test_sweep_slurm

for b in slurmctld slurmd munged sbatch squeue scontrol; do
  if ! command -v "$b" >/dev/null 2>&1; then
    echo "skip - $T: skipped: no Slurm ($b not installed; Debian packages slurm-wlm and munge)"
    exit 0
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "skip - $T: skipped: the test Slurm runs its daemons as root"
  exit 0
fi

rm -rf "$S"
mkdir -p "$S"/{munge,state,spool,out,data,check}

# ---- can ./train train? ---------------------------------------------------------------------
if [ ! -x ./train ] || ! ./train --help >/dev/null 2>&1 ||
   ! ./train --make-synthetic "$S/data" --seq-len 64 --train-rows 2000 --val-rows 64 >"$S/check/make.log" 2>&1 ||
   ! ./train configs/test/tiny_full.ini "data.train=$S/data/train_*.bin" "data.val=$S/data/val_*.bin" \
       train.steps=2 run.dir="$S/check" run.name=tiny >"$S/check/train.log" 2>&1 ||
   [ ! -f "$S/check/tiny/metrics.h5" ]; then
  echo "skip - $T: skipped: ./train cannot train yet"
  exit 0
fi
echo "ok - ${T}_train_can_train"

# ---- a private Slurm --------------------------------------------------------------------------
NODE=$(hostname -s)
PORT0=$(( 16800 + RANDOM % 1000 ))
pids=()
cleanup() {
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT

dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$S/munge/munge.key"
chmod 700 "$S/munge"
munged --force --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
       --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" \
       --seed-file="$S/munge/munged.seed" >"$S/munge/start.log" 2>&1
if [ $? -ne 0 ]; then
  echo "not ok - ${T}_munged_starts: $(tail -3 "$S/munge/start.log" "$S/munge/munged.log" 2>/dev/null | tr '\n' ' ')"
  exit 1
fi

cat >"$S/slurm.conf" <<EOF
ClusterName=phaselabtest
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT0
SlurmdPort=$(( PORT0 + 1 ))
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -c >"$S/slurmctld.start.log" 2>&1 || { echo "not ok - ${T}_slurmctld_starts: $(tail -3 "$S/slurmctld.log" 2>/dev/null | tr '\n' ' ')"; exit 1; }
slurmd -N "$NODE" >"$S/slurmd.start.log" 2>&1 || { echo "not ok - ${T}_slurmd_starts: $(tail -3 "$S/slurmd.log" 2>/dev/null | tr '\n' ' ')"; exit 1; }
up=0
for i in $(seq 1 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then up=1; break; fi
  sleep 1
done
if [ $up = 0 ]; then
  echo "not ok - ${T}_slurm_node_up: node state '$(sinfo -h -o '%t' 2>&1 | head -1)'; $(tail -3 "$S/slurmctld.log" | tr '\n' ' ')"
  exit 1
fi
echo "ok - ${T}_slurm_node_up"

# ---- the sweep ----------------------------------------------------------------------------------
OUT=$S/out
sub=$(python3 tools/sweep slurm configs/test/tiny_full.ini configs/test/tiny_w4s4.ini \
        --override "data.train=$S/data/train_*.bin" --override "data.val=$S/data/val_*.bin" \
        --out "$OUT" --partition test --time 10:00 --submit 2>&1)
rc=$?
job=$(sed -n 's/^sweep: submitted job array \([0-9]*\).*/\1/p' <<<"$sub")
if [ $rc -ne 0 ] || [ -z "$job" ]; then
  echo "not ok - ${T}_submits: rc $rc: $(tr '\n' ' ' <<<"$sub")"
  exit 1
fi
echo "ok - ${T}_submits"

deadline=$(( $(date +%s) + 600 ))
while [ "$(date +%s)" -lt $deadline ]; do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
  sleep 2
done
if [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; then
  echo "not ok - ${T}_array_finishes: still queued after 10 minutes: $(squeue -h -j "$job" | tr '\n' ' ')"
  scancel "$job" 2>/dev/null
  exit 1
fi
echo "ok - ${T}_array_finishes"

fail=0
for run in tiny_full tiny_w4s4; do
  res=$(python3 - "$OUT/$run/metrics.h5" <<'EOF' 2>&1
import sys, h5py
try:
    with h5py.File(sys.argv[1], "r") as f:
        print(int(f["train/step"][-1]))
except Exception as e:
    print(f"unreadable: {e}")
EOF
)
  if [ "$res" = "20" ] && grep -q '^done: 20 steps' "$OUT/$run/log.txt" 2>/dev/null; then
    echo "ok - ${T}_${run}_completed"
  else
    echo "not ok - ${T}_${run}_completed: metrics.h5 last step '$res', log: $(tail -2 "$OUT/$run/log.txt" 2>/dev/null | tr '\n' ' ') task output: $(tail -3 "$OUT"/slurm/*.out 2>/dev/null | tr '\n' ' ')"
    fail=1
  fi
done
# ---- pre-emption: USR1 to the batch script (what --signal=B:USR1@300 delivers near the time
# limit) makes ./train checkpoint and exit; the script requeues the task, which resumes --------
OUT2=$S/out2
sub=$(python3 tools/sweep slurm configs/test/tiny_w4s4.ini \
        --override "data.train=$S/data/train_*.bin" --override "data.val=$S/data/val_*.bin" \
        --override train.steps=1200 --override checkpoint.every=100 --override eval.every=0 \
        --override run.log_every=10 --out "$OUT2" --partition test --time 10:00 --submit 2>&1)
job2=$(sed -n 's/^sweep: submitted job array \([0-9]*\).*/\1/p' <<<"$sub")
log2=$OUT2/tiny_w4s4/log.txt
signalled=0
for i in $(seq 1 600); do
  if grep -qE '^step +(1[5-9][0-9]|[2-9][0-9][0-9])/1200' "$log2" 2>/dev/null; then
    scancel --signal=USR1 --batch "${job2}_0" 2>/dev/null && signalled=1
    break
  fi
  sleep 0.2
done
deadline=$(( $(date +%s) + 300 ))
while [ "$(date +%s)" -lt $deadline ]; do
  [ -z "$(squeue -h -j "$job2" 2>/dev/null)" ] && break
  sleep 2
done
# the last /train row is step 1200 and no step is logged twice across the requeue
last2=$(python3 -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); s=f['train/step'][...].tolist(); print(s[-1], 'unique' if len(s) == len(set(s)) and s == sorted(s) else 'duplicated')" "$OUT2/tiny_w4s4/metrics.h5" 2>&1)
if [ $signalled = 1 ] && grep -q '^signal 10: stopped after step' "$log2" && grep -q '^resumed from' "$log2" \
   && grep -q '^done: 1200 steps' "$log2" && [ "$last2" = "1200 unique" ]; then
  echo "ok - ${T}_usr1_checkpoints_requeues_and_resumes"
else
  echo "not ok - ${T}_usr1_checkpoints_requeues_and_resumes: signalled $signalled, metrics '$last2', log: $(grep -E '^(signal|resumed|done)' "$log2" 2>/dev/null | tr '\n' ' '); task: $(tail -4 "$OUT2"/slurm/*.out 2>/dev/null | tr '\n' ' ')"
  scancel "$job2" 2>/dev/null
  fail=1
fi

st=$(python3 tools/sweep status "$OUT" 2>&1)
if grep -q '^2 done$' <<<"$(tail -1 <<<"$st")"; then
  echo "ok - ${T}_status_shows_done"
else
  echo "not ok - ${T}_status_shows_done: $(tr '\n' ' ' <<<"$st")"
  fail=1
fi
exit $fail
