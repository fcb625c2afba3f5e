#!/usr/bin/env bash
# Multi-rank tests of trainer/comm.c under OpenMPI's mpirun ($BUILD/tests/test_comm, BUILD default build):
#   - the collectives with 2 and 3 ranks (rank 0 prints the checks, counting failures on any rank);
#   - a rank killed by SIGKILL, or exiting with status 3, while the others wait in a collective:
#     mpirun must end the job with a non-zero status within 60 s (watchdog disabled, so this is
#     the launcher's own behaviour);
#   - a rank that hangs instead of entering the collective, with PHASELAB_COMM_TIMEOUT=5: the
#     watchdog of the waiting rank must abort the job within 60 s, saying which rank and collective.
# Every mpirun runs under `timeout 120`, so this script never hangs. Scratch: build/scratch/test_comm_mpi/.
set -u
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/tests/test_comm
OUT=build/scratch/test_comm_mpi
mkdir -p "$OUT"

if ! command -v mpirun >/dev/null 2>&1; then
  echo "skip - comm mpi: skipped: mpirun not found"
  exit 0
fi
if [ ! -x "$BIN" ]; then
  echo "not ok - comm mpi: $BIN is missing (make $BIN)"
  exit 1
fi
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# Containers often forbid the cross-memory-attach single copy; fall back to copy-in/out.
export OMPI_MCA_btl_vader_single_copy_mechanism=none

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---- the collectives on 2 and 3 ranks
for np in 2 3; do
  log="$OUT/np$np.log"
  timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" >"$log" 2>&1
  rc=$?
  # rank 0's check lines, renamed with the world size
  sed -n -e "s/^\(ok\|not ok\|skip\) - /\1 - np $np: /p" "$log"
  nok=$(grep -c '^ok - ' "$log")
  if [ "$rc" -eq 0 ] && [ "$nok" -gt 0 ]; then
    echo "ok - comm mpi: np $np: every rank exits 0 ($nok checks)"
  else
    echo "not ok - comm mpi: np $np: mpirun exit status $rc, $nok ok lines; log $log:"
    sed 's/^/#   /' "$log" | tail -20
  fi
done

# ---- a rank dies while the other waits in a collective
for mode in die exit; do
  log="$OUT/$mode.log"
  t0=$(now)
  PHASELAB_COMM_TIMEOUT=0 timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" --$mode-rank 1 >"$log" 2>&1
  rc=$?
  dt=$(elapsed "$t0" "$(now)")
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && awk -v d="$dt" 'BEGIN { exit !(d < 60) }' && ! grep -q '^not ok' "$log"; then
    echo "ok - comm mpi: rank 1 --$mode-rank mid-collective: job ends with status $rc after $dt s"
  else
    echo "not ok - comm mpi: rank 1 --$mode-rank mid-collective: status $rc after $dt s (want non-zero within 60 s); log $log:"
    sed 's/^/#   /' "$log" | tail -20
  fi
done

# ---- a rank hangs: the watchdog (5 s) aborts the job, naming rank and collective
log="$OUT/hang.log"
t0=$(now)
PHASELAB_COMM_TIMEOUT=5 timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" --hang-rank 1 >"$log" 2>&1
rc=$?
dt=$(elapsed "$t0" "$(now)")
msg='phaselab: rank 0: collective allreduce_sum did not complete within 5 s (a rank died or hangs); aborting'
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && awk -v d="$dt" 'BEGIN { exit !(d < 60 && d >= 4.5) }'; then
  echo "ok - comm mpi: rank 1 hangs: watchdog aborts the job with status $rc after $dt s"
else
  echo "not ok - comm mpi: rank 1 hangs: status $rc after $dt s (want non-zero, 5 to 60 s); log $log:"
  sed 's/^/#   /' "$log" | tail -20
fi
if grep -qF "$msg" "$log"; then
  echo "ok - comm mpi: the watchdog message names the rank and the collective"
else
  echo "not ok - comm mpi: no line '$msg' in $log:"
  sed 's/^/#   /' "$log" | tail -20
fi

# ---- launcher detection without mpirun
# srun without a PMI plugin: the environment says 2 tasks, MPI_Init makes a singleton: refuse.
log="$OUT/nopmi.log"
env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 \
  timeout 60 "$BIN" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q 'launcher started 2 ranks (SLURM_STEP_NUM_TASKS) but MPI sees a world of 1' "$log"; then
  echo "ok - comm mpi: srun without PMI (2 tasks, MPI world of 1) is refused with a clear message"
else
  echo "not ok - comm mpi: srun without PMI: status $rc; log $log:"
  sed 's/^/#   /' "$log" | tail -10
fi
# inside an sbatch script (SLURM_NTASKS=4, no job step): a plain ./train is a world of one, no MPI.
log="$OUT/sbatch.log"
env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u SLURM_STEP_NUM_TASKS SLURM_NTASKS=4 SLURM_PROCID=0 \
  timeout 60 "$BIN" >"$log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^ok - comm: a plain run does not initialise MPI' "$log"; then
  echo "ok - comm mpi: a plain run inside an sbatch script (SLURM_NTASKS=4) stays a world of one"
else
  echo "not ok - comm mpi: plain run with SLURM_NTASKS=4: status $rc; log $log:"
  sed 's/^/#   /' "$log" | tail -10
fi
