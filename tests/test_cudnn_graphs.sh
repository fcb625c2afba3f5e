#!/usr/bin/env bash
# cuDNN fused attention graphs (kernels/cuda/cuda_attention_cudnn.cu) without a GPU: builds the
# forward and backward graphs for several shapes (MHA, GQA, odd T, d 64..128) against cuDNN's
# offline device properties of an sm_80 and an sm_90 GPU, and requires that cuDNN's heuristics
# offer at least one engine that passes its support checks for each (tests/gpu/cudnn_graph_check).
# The driver API is the toolkit's stub libcuda (plans stop at module loading, which needs a GPU).
# Skipped where the build has no nvcc.
cd "$(dirname "$0")/.."
B=${BUILD:-build}
bin=$B/tests/gpu/cudnn_graph_check
if [ ! -x "$bin" ]; then
  echo "skip - cudnn_graph: skipped: no cuDNN in this build (tools/configure found no nvcc or no cuDNN)"
  exit 0
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
ln -s "$CUDA_HOME/lib64/stubs/libcuda.so" "$stub/libcuda.so.1"
rc=0
for ver in 800 900; do
  LD_LIBRARY_PATH="$stub:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" "$bin" --offline $ver | grep -E '^(ok|not ok|skip) - ' || rc=1
done
exit $rc
