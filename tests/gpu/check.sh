#!/usr/bin/env bash
# One prepared GPU check for a machine with an NVIDIA GPU (sized for one H100/H200, < 8 minutes):
#   test_cuda_parity        op-by-op parity against the CPU backend (cuDNN and custom attention)
#   test_cuda_model_parity  whole-model forward/backward parity, every SPEC.md variant
#   test_cuda_staggered     grid = staggered with G > 1 (SPEC.md 2b): ops and whole model vs the CPU
#   test_cuda_decode        incremental decoding with the KV cache vs the CPU full forward
#   test_cuda_eval_length   a batch at the prompt's own length vs padded to T (issue 18)
#   cudnn_graph_check       cuDNN fused attention vs the custom kernels, determinism, timings
#   bench_cuda              Qwen3-0.6B shape, T=4096: tokens/s, MFU, peak memory
# and prints a summary. Logs go to $OUT (when set) or build/gpu-check/.
# The programs come from
#   - a bundle made by tools/gpu-bundle (PHASELAB_GPU_BUNDLE, default build-bundle/gpu-bundle.tar.zst)
#     when it exists: for a bare CUDA machine without phaselab's build dependencies;
#   - otherwise a build here (make, CUDA_ARCHS default 90), which needs tools/install-deps' packages.
# Exit status: 0 when every check passed, 1 when a build failed or any check failed or crashed.
# Usage: tests/gpu/check.sh [micro_batch for the benchmark, default 4]
set -u
cd "$(dirname "$0")/../.."
LOG="${OUT:-build/gpu-check}"
mkdir -p "$LOG"
BATCH="${1:-4}"
start=$(date +%s)
status=0
{ nvidia-smi; nvcc --version; } > "$LOG/machine.txt" 2>&1
BUNDLE="${PHASELAB_GPU_BUNDLE:-build-bundle/gpu-bundle.tar.zst}"
if [ -f "$BUNDLE" ]; then
  BIN=$(mktemp -d)/bundle
  mkdir -p "$BIN"
  if ! zstd -dc "$BUNDLE" 2>/dev/null | tar -C "$BIN" -xf - 2>/dev/null; then
    python3 -c "import sys,tarfile,zstandard" 2>/dev/null && python3 - "$BUNDLE" "$BIN" <<'EOF'
import sys, tarfile, zstandard
with open(sys.argv[1], 'rb') as f, zstandard.ZstdDecompressor().stream_reader(f) as r, tarfile.open(fileobj=r, mode='r|') as t:
    t.extractall(sys.argv[2])
EOF
  fi
  [ -x "$BIN/bin/test_cuda_parity" ] || { echo "cannot unpack $BUNDLE (needs zstd or python3 zstandard)"; exit 1; }
  # CUDA's libraries on this machine: the toolkit's, or the pip wheels' (nvidia-*-cu13)
  cudalibs=$( { ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null
                find /usr /opt -xdev \( -name 'libcudnn.so.9' -o -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' \
                     -o -name 'libnvrtc.so.13' \) 2>/dev/null | xargs -r -n1 dirname; } | awk '!s[$0]++' | paste -sd: -)
  export LD_LIBRARY_PATH="$BIN/lib:$cudalibs:${LD_LIBRARY_PATH:-}"
  echo "== bundle $BUNDLE ($(cat "$BIN/VERSION")), CUDA libraries from $cudalibs"
  BIN="$BIN/bin"
else
  echo "== build ($(nproc) cores)"
  B=build
  if ! timeout 240 make -j"$(nproc)" CUDA_ARCHS="${CUDA_ARCHS:-90}" $B/libphaselab.a $B/tests/gpu/test_cuda_parity \
       $B/tests/gpu/test_cuda_model_parity $B/tests/gpu/test_cuda_staggered $B/tests/gpu/test_cuda_decode $B/tests/gpu/test_cuda_eval_length $B/tests/gpu/bench_cuda $B/tests/gpu/cudnn_graph_check > "$LOG/build.log" 2>&1; then
    echo "BUILD FAILED (log: $LOG/build.log)"; grep -E "error|Error" "$LOG/build.log" | head -30; exit 1
  fi
  BIN=$B/tests/gpu
fi
echo "   ready in $(( $(date +%s) - start ))s"
run() {  # name timeout command...
  local name=$1 to=$2; shift 2
  local t0=$(date +%s)
  timeout "$to" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local np nf ns
  np=$(grep -c '^ok - ' "$LOG/$name.log"); nf=$(grep -c '^not ok - ' "$LOG/$name.log"); ns=$(grep -c '^skip - ' "$LOG/$name.log")
  echo "== $name: $np passed, $nf failed, $ns skipped, exit $rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)') in $(( $(date +%s) - t0 ))s"
  grep '^not ok - ' "$LOG/$name.log" | head -40
  grep '^# ' "$LOG/$name.log" | head -20
  [ $rc -ne 0 ] && [ $rc -ne 1 ] && tail -5 "$LOG/$name.log"
  { [ $rc -ne 0 ] || [ "$nf" -gt 0 ] || [ "$np" -eq 0 ]; } && status=1
  return 0
}
run cuda_parity 120 "$BIN/test_cuda_parity"
run cuda_model_parity 60 "$BIN/test_cuda_model_parity"
run cuda_staggered 60 "$BIN/test_cuda_staggered"
run cuda_decode 60 "$BIN/test_cuda_decode"
run cuda_eval_length 60 "$BIN/test_cuda_eval_length"
run cudnn_attention 90 env PHASELAB_CUDNN_ATTN_VERBOSE=1 "$BIN/cudnn_graph_check"
echo "== bench (micro-batch $BATCH)"
timeout 150 "$BIN/bench_cuda" "$BATCH" 5 > "$LOG/bench.log" 2>&1
rc=$?
cat "$LOG/bench.log"
[ $rc -ne 0 ] && { echo "bench exit $rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"; status=1; }
echo "== total $(( $(date +%s) - start ))s; logs in $LOG; $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
