#!/usr/bin/env bash
# One prepared GPU check for a machine with an NVIDIA GPU (sized for one H100/H200, < 8 minutes):
# builds the CUDA backend, the GPU tests and the benchmark, runs
#   build/tests/gpu/test_cuda_parity        op-by-op parity against the CPU backend
#   build/tests/gpu/test_cuda_model_parity  whole-model forward/backward parity
#   build/tests/gpu/bench_cuda              Qwen3-0.6B shape, T=4096: tokens/s, MFU, peak memory
# and prints a summary. Logs go to $OUT (when set) or build/gpu-check/.
# Usage: tests/gpu/check.sh [micro_batch for the benchmark, default 4]
set -u
cd "$(dirname "$0")/../.."
LOG="${OUT:-build/gpu-check}"
mkdir -p "$LOG"
BATCH="${1:-4}"
start=$(date +%s)
{ nvidia-smi; nvcc --version; } > "$LOG/machine.txt" 2>&1
echo "== build ($(nproc) cores)"
if ! timeout 170 make -j"$(nproc)" CUDA_ARCHS="${CUDA_ARCHS:-90}" build/libphaselab.a build/tests/gpu/test_cuda_parity \
     build/tests/gpu/test_cuda_model_parity build/tests/gpu/bench_cuda > "$LOG/build.log" 2>&1; then
  echo "BUILD FAILED (log: $LOG/build.log)"; grep -E "error|Error" "$LOG/build.log" | head -30; exit 1
fi
echo "   built in $(( $(date +%s) - start ))s"
run() {  # name timeout command...
  local name=$1 to=$2; shift 2
  local t0=$(date +%s)
  timeout "$to" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local np nf ns
  np=$(grep -c '^ok - ' "$LOG/$name.log"); nf=$(grep -c '^not ok - ' "$LOG/$name.log"); ns=$(grep -c '^skip - ' "$LOG/$name.log")
  echo "== $name: $np passed, $nf failed, $ns skipped, exit $rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)') in $(( $(date +%s) - t0 ))s"
  grep '^not ok - ' "$LOG/$name.log" | head -40
  [ $rc -ne 0 ] && [ $rc -ne 1 ] && tail -5 "$LOG/$name.log"
  return 0
}
run cuda_parity 110 build/tests/gpu/test_cuda_parity
run cuda_model_parity 50 build/tests/gpu/test_cuda_model_parity
echo "== bench (micro-batch $BATCH)"
timeout 150 build/tests/gpu/bench_cuda "$BATCH" 5 > "$LOG/bench.log" 2>&1
rc=$?
cat "$LOG/bench.log"
[ $rc -ne 0 ] && echo "bench exit $rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
echo "== total $(( $(date +%s) - start ))s; logs in $LOG"
