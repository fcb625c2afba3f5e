#!/usr/bin/env bash
# The GPU check: ONE call on a machine with an NVIDIA GPU (sized for one H100/H200 and a device
# call of at most 10 minutes that returns at most 8 files), ending within an overall deadline.
#
#   tests/gpu/check.sh                      (or: make gpu-check)
#   CHECK_DEADLINE=270   overall deadline in seconds (default 270), summary and logs included
#   CHECK_PHASES="..."   only these phases (names below; libs and machine always run)
#   CHECK_BATCH=8        the benchmark's micro-batch (default 8; also the first argument)
#   PHASELAB_GPU_BUNDLE  the programs: a bundle made by tools/gpu-bundle, as .tar.xz or unpacked
#                        folder (default build-bundle/gpu-bundle.tar.xz); without one, the programs
#                        of a local build (PHASELAB_GPU_BIN, default build/tests/gpu, and ./train).
#                        Neither: the check says so and stops within seconds (it never runs make).
#   OUT                  where summary.txt and logs.tar.gz go (default build/gpu-check)
#
# Phases, most informative first. Each runs under `timeout` with min(its budget, the time left
# before the deadline); one that needs more than is left is reported "not run: deadline", one
# cut by the deadline "not run: deadline: stopped after N s", never "pass".
#   phase         budget  min  what
#   libs            (30)       phase 0: unpack the bundle, `ldd -r` every program; search the machine
#                              for what is missing (libnccl.so.2, cuDNN, cuBLASLt: CUDA's own
#                              folders, python's site-packages nvidia/*/lib, then find / bounded
#                              in depth and time) and put its folder on LD_LIBRARY_PATH; anything
#                              still missing (or a symbol or glibc version): fail with the list,
#                              and every other phase is not run
#   machine         (15)       nvidia-smi (GPU, driver, memory), nvcc, compute-sanitizer; no GPU:
#                              fail, every other phase not run
#   op_parity        90   10   test_cuda_parity: every op against the CPU backend
#   owned_step       25    5   test_cuda_owned_step: the owned optimizer step, loss on the device
#   model_parity     45   10   test_cuda_model_parity: forward+backward of every variant vs CPU
#   cudnn            60   10   cudnn_graph_check: cuDNN fused attention vs the custom kernels;
#                              a shape cuDNN declines ("unavailable for this shape") is a skip
#   nccl             20    5   one-rank NCCL smoke test of the libnccl.so.2 the programs load
#                              (python3 ctypes: init, all-reduce, reduce-scatter, all-gather);
#                              phaselab itself calls NCCL only with more than one rank
#   bench           150   40   bench_cuda at micro-batch CHECK_BATCH (Qwen3-0.6B shape, T=4096):
#                              full, W8/S8 8-KV, W8/S8 1-KV, then full with the cuDNN backward;
#                              tokens/s, MFU, step time, peak memory; with BENCH_PROFILE=1 one
#                              more step per case timed op by op: bench.per_op_CASE (the top ops:
#                              ms, % of the step, GFLOP/s or GB/s), bench.gemm_CASE (top shapes) and
#                              bench.parts_CASE (the top 8 parts of the compressor, attention and
#                              classifier ops: kernels/cuda/cuda_substeps.cu)
#   rerun            60   25   ./train run.device=cuda, configs/demo.ini (compressed) and its full-
#                              attention twin, each trained twice from scratch (with
#                              run.deterministic=true when ./train has that key): the checkpoints'
#                              model.safetensors and optimizer state must have equal sha256
#   more_parity      45   15   test_cuda_staggered, test_cuda_decode, test_cuda_eval_length
#   paper_parity     60   10   test_cuda_parity's paper-shape cases (T=4096: attention W8/S8 G1 and G8 and full,
#                              compressor at d_model 1024, classifier at 4096 rows)
#   sanitizer        90   20   compute-sanitizer memcheck, racecheck, synccheck on small attention
#                              and compressor cases of test_cuda_parity (slow: last)
# The budgets add up to more than the deadline: they are ceilings; the times expected on an H200
# (an estimate: nothing has run on one yet) leave the sanitizer what remains. A second
# call can run what the first did not reach: CHECK_PHASES="sanitizer paper_parity".
#
# $OUT receives two files: summary.txt (written before the first phase and rewritten after
# each, so a kill leaves the phases reached so far) and logs.tar.gz (every program's output,
# refreshed after each phase). summary.txt has three kinds of line, nothing else:
#   # TEXT                          a comment (the header)
#   PHASE: VERDICT[: REASON]        VERDICT is pass | fail | skip | not run
#   "  PHASE.KEY = VALUE"           a figure of that phase (two leading spaces)
# pass = checked and right; fail = checked and wrong, or crashed or over its own budget;
# skip = cannot be checked on this machine or build (said why); not run = no time or a
# previous phase failed. The last verdict line is "overall: pass|fail: ...".
# Exit status 0 only when overall is pass. docs/gpu.md says how to run it on a device machine.
set -u
cd "$(dirname "$0")/../.." || exit 2
REPO=$PWD
DEADLINE=${CHECK_DEADLINE:-270}
BATCH=${CHECK_BATCH:-${1:-8}}
BENCH_STEPS=${CHECK_BENCH_STEPS:-3}
RERUN_STEPS=${CHECK_RERUN_STEPS:-20}
FIND_TIMEOUT=${CHECK_FIND_TIMEOUT:-10}
RESERVE=5          # seconds kept for the last summary and the log archive
KILL_GRACE=3       # timeout -k: SIGKILL this long after SIGTERM
OUTDIR=${OUT:-build/gpu-check}
BUNDLE=${PHASELAB_GPU_BUNDLE:-build-bundle/gpu-bundle.tar.xz}
case "$DEADLINE" in ''|*[!0-9]*) echo "check.sh: CHECK_DEADLINE='$DEADLINE' (whole seconds)" >&2; exit 2 ;; esac
mkdir -p "$OUTDIR" || exit 2
SUMMARY=$OUTDIR/summary.txt
W=$(mktemp -d "${TMPDIR:-/tmp}/phaselab-gpu-check.XXXXXX") || exit 2
LOGS=$W/logs
mkdir -p "$LOGS"
SECONDS=0

ALL_PHASES="libs machine op_parity owned_step model_parity cudnn nccl bench rerun more_parity paper_parity sanitizer"
declare -A VERDICT FIGS
STOP=""            # set when a phase failed so badly that the rest cannot run (its reason)
CURRENT=""

# ---- the summary ----------------------------------------------------------------------------
oneline() { tr -d '\r' | tr '\n\t' '  ' | tr -cd '[:print:]' | sed 's/  */ /g; s/^ //; s/ $//' | cut -c1-400; }
verdict() { VERDICT[$1]="$1: $(printf '%s' "$2" | oneline | sed 's/[ ;]*$//')"; }   # verdict PHASE "pass: ..."
fig() {                                                  # fig PHASE KEY VALUE...
  local p=$1 k=$2; shift 2
  local v; v=$(printf '%s' "$*" | oneline)
  [ -n "$v" ] || v="(empty)"
  FIGS[$p]+="  $p.$k = $v"$'\n'
}
selected() {
  [ "$1" = libs ] || [ "$1" = machine ] || [ -z "${CHECK_PHASES:-}" ] && return 0
  case " $CHECK_PHASES " in *" $1 "*) return 0 ;; esac
  return 1
}
write_summary() {
  local tmp=$OUTDIR/.summary.tmp p n_pass=0 n_fail=0 n_skip=0 n_not=0 v
  {
    echo "# phaselab GPU check (tests/gpu/check.sh): $(date -u '+%Y-%m-%d %H:%M:%S UTC'), +${SECONDS}s of ${DEADLINE}s"
    echo "# code ${CODE_VERSION:-unknown}; programs: ${PROGRAMS_FROM:-none yet}"
    echo "# format: 'PHASE: pass|fail|skip|not run[: reason]' and '  PHASE.KEY = VALUE' (docs/gpu.md)"
    for p in $ALL_PHASES; do
      selected "$p" || continue
      v=${VERDICT[$p]:-"$p: not run: not reached (the check was stopped before it)"}
      echo "$v"
      printf '%s' "${FIGS[$p]:-}"
      case "$v" in
        "$p: pass"*) n_pass=$((n_pass + 1)) ;; "$p: fail"*) n_fail=$((n_fail + 1)) ;;
        "$p: skip"*) n_skip=$((n_skip + 1)) ;; *) n_not=$((n_not + 1)) ;;
      esac
    done
    local counts="$n_pass pass, $n_fail fail, $n_skip skip, $n_not not run in ${SECONDS}s"
    if [ -n "$CURRENT" ]; then echo "overall: not run: still running (phase $CURRENT); $counts"
    elif [ $n_fail -eq 0 ] && [ $n_not -eq 0 ]; then echo "overall: pass: $counts"
    else echo "overall: fail: $counts"; fi
  } > "$tmp" && mv -f "$tmp" "$SUMMARY"
}
pack_logs() {   # everything under $LOGS, logs over 8 MB cut to their first and last 2 MB
  local f
  for f in "$LOGS"/*; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 8000000 ] || continue
    { head -c 2000000 "$f"; printf '\n[... cut by check.sh ...]\n'; tail -c 2000000 "$f"; } > "$f.cut" && mv -f "$f.cut" "$f"
  done
  cp -f "$SUMMARY" "$LOGS/summary.txt" 2>/dev/null
  tar -czf "$OUTDIR/.logs.tmp" -C "$W" logs 2>/dev/null && mv -f "$OUTDIR/.logs.tmp" "$OUTDIR/logs.tar.gz"
}
finish() {
  CURRENT=""
  write_summary
  pack_logs
  [ -n "${CHECK_KEEP:-}" ] && echo "check.sh: work folder kept: $W" >&2 || rm -rf "$W"
  cat "$SUMMARY"
  grep -q '^overall: pass' "$SUMMARY"
}
CHILD=""          # the timeout process of the program running now
on_signal() {
  trap '' TERM INT HUP
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2> /dev/null   # timeout passes it on to the program
  [ -n "$CURRENT" ] && verdict "$CURRENT" "not run: interrupted by a signal after $((SECONDS - PHASE_T0))s"
  finish
  exit 130
}
trap on_signal TERM INT HUP

# ---- running programs -----------------------------------------------------------------------
left() { echo $((DEADLINE - RESERVE - SECONDS)); }
# run_log TIMEOUT LOG CMD...: runs CMD under timeout, output to LOG; sets RC and DUR
run_log() {
  local to=$1 log=$2 t0=$SECONDS; shift 2
  if [ "$to" -lt 1 ]; then RC=124; DUR=0; echo "(not started: no time left)" >> "$log"; return; fi
  # in the background and waited for: a signal to check.sh interrupts the wait at once (a trap
  # waits for a foreground command to end), and on_signal stops the program
  timeout -k "$KILL_GRACE" "$to" "$@" >> "$log" 2>&1 < /dev/null &
  CHILD=$!
  wait "$CHILD"
  RC=$?
  CHILD=""
  DUR=$((SECONDS - t0))
}
timed_out() { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; }
# why a timed-out program stopped: the overall deadline (not run: no verdict) or its phase's own
# budget (fail: it hangs or is far slower than it should be)
timeout_verdict() {   # timeout_verdict WHAT TIMEOUT_GIVEN
  if [ "$(left)" -le 1 ]; then echo "not run: deadline: $1 stopped after ${DUR}s"
  else echo "fail: $1 timed out after ${DUR}s (its budget ${2}s)"; fi
}
phase_left() { local a=$((PHASE_END - SECONDS)) b; b=$(left); [ "$a" -lt "$b" ] && echo "$a" || echo "$b"; }
tap_counts() {   # sets NP NF NS from a log of ok / not ok / skip lines
  NP=$(grep -c '^ok - ' "$1"); NF=$(grep -c '^not ok - ' "$1"); NS=$(grep -c '^skip - ' "$1")
}
# a test program of tests/check.h's format: verdict from its lines and exit status
tap_phase() {   # tap_phase PHASE NAME TIMEOUT PROGRAM [ARGS...]; returns 0 when it passed
  local p=$1 name=$2 to=$3; shift 3
  local log=$LOGS/$p.$name.log
  echo "\$ $*" > "$log"
  run_log "$to" "$log" "$@"
  tap_counts "$log"
  fig "$p" "$name" "$NP ok, $NF not ok, $NS skip, exit $RC, ${DUR}s"
  local l
  while read -r l; do fig "$p" not_ok "$l"; done < <(grep '^not ok - ' "$log" | head -n 12)
  if timed_out; then V=$(timeout_verdict "$name" "$to"); return 1; fi
  if [ "$NF" -gt 0 ]; then V="fail: $name: $NF of $((NP + NF + NS)) checks not ok"; return 1; fi
  if [ "$RC" -ne 0 ]; then
    V="fail: $name exited with status $RC"
    fig "$p" tail "$(tail -n 3 "$log")"
    return 1
  fi
  if [ "$NP" -eq 0 ] && [ "$NS" -gt 0 ]; then V="fail: $name skipped all $NS checks (did it see the GPU?)"; return 1; fi
  if [ "$NP" -eq 0 ]; then V="fail: $name reported no checks"; fig "$p" tail "$(tail -n 3 "$log")"; return 1; fi
  V="pass: $name: $NP ok, $NS skip in ${DUR}s"
  return 0
}
need() {   # need PHASE PROGRAM: the program exists (else the phase fails: an incomplete bundle)
  [ -x "$BIN/$2" ] && return 0
  verdict "$1" "fail: $2 is not among the programs ($PROGRAMS_FROM): rebuild the bundle with tools/gpu-bundle"
  return 1
}

# phase NAME BUDGET MIN: runs phase_NAME with PHASE_T0 and PHASE_END set, under the deadline
phase() {
  local p=$1 cap=$2 min=$3
  selected "$p" || return 0
  if [ -n "$STOP" ]; then verdict "$p" "not run: $STOP"; return 0; fi
  local avail; avail=$(left); [ "$avail" -lt 0 ] && avail=0
  if [ "$avail" -lt "$min" ]; then
    verdict "$p" "not run: deadline (${avail}s left before it, it needs at least ${min}s)"
    write_summary
    return 0
  fi
  [ "$avail" -lt "$cap" ] && cap=$avail
  PHASE_T0=$SECONDS
  PHASE_END=$((SECONDS + cap))
  CURRENT=$p
  verdict "$p" "not run: started at +${SECONDS}s, no result yet (the check was stopped during this phase)"
  write_summary
  "phase_$p"
  CURRENT=""
  write_summary
  pack_logs
}

# ---- phase 0: the programs and their libraries ----------------------------------------------
CODE_VERSION=$(git describe --always --dirty 2>/dev/null || echo unknown)
PROGRAMS_FROM=""
BIN=""; TRAIN=""

# folders where CUDA libraries may live on this machine, best first (never the driver stubs)
cuda_lib_dirs() {
  local d sp
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/targets/sbsa-linux/lib \
           /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib; do
    [ -d "$d" ] && echo "$d"
  done
  # python's site-packages: the nvidia-* wheels (nvidia/nccl/lib, nvidia/cudnn/lib, nvidia/cu13/lib, ...)
  { command -v python3 > /dev/null &&
      sys_run timeout 10 python3 -c 'import site,sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null
    ls -d /opt/*/.venv/lib/python3*/site-packages /opt/*/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
          /usr/lib/python3/dist-packages 2>/dev/null
  } | awk '!s[$0]++' | while read -r sp; do
    [ -d "$sp/nvidia" ] && ls -d "$sp"/nvidia/*/lib "$sp"/nvidia/*/lib64 2>/dev/null
  done
}
# find_libs NAME...: "NAME FOLDER" for each NAME found: the usual folders first, then ONE
# find / (depth 10, at most FIND_TIMEOUT seconds) for the rest
find_libs() {
  local n d rest=()
  for n in "$@"; do
    for d in $CUDA_DIRS; do [ -e "$d/$n" ] && { echo "$n $d"; continue 2; }; done
    rest+=("$n")
  done
  [ ${#rest[@]} -gt 0 ] || return 0
  local expr=() first=1
  for n in "${rest[@]}"; do
    [ $first -eq 1 ] || expr+=(-o); first=0
    expr+=(-name "$n")
  done
  timeout "$FIND_TIMEOUT" find / -maxdepth 10 \( -path /proc -o -path /sys -o -path /dev -o -path "$W" -o -name stubs -o -name compat \) \
    -prune -o \( "${expr[@]}" \) -print 2>/dev/null | awk '{n = $0; sub(/.*\//, "", n); d = $0; sub(/\/[^\/]*$/, "", d); if (!s[n]++) print n, d}'
}
# sys_run CMD...: CMD (python3, the machine's own tools) without the bundle's libraries (Debian's
# libffi, libssl, ... must not shadow the machine's)
BUNDLE_LIB=""
sys_ldpath() { local p=":${LD_LIBRARY_PATH:-}:"; [ -n "$BUNDLE_LIB" ] && p=${p//:$BUNDLE_LIB:/:}; p=${p#:}; echo "${p%:}"; }
sys_run() { env LD_LIBRARY_PATH="$(sys_ldpath)" "$@"; }
resolvable() {   # NAME is found by the loader: ldconfig's cache or a folder of LD_LIBRARY_PATH
  local d
  for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/$1" ] && return 0; done
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "
}

unpack_bundle() {   # sets BIN, TRAIN, PROGRAMS_FROM; 0 when there are programs
  if [ -d "$BUNDLE" ] && [ -d "$BUNDLE/bin" ]; then
    BIN=$(cd "$BUNDLE/bin" && pwd); PROGRAMS_FROM="bundle folder $BUNDLE ($(cat "$BUNDLE/VERSION" 2>/dev/null || echo '?'))"
  elif [ -f "$BUNDLE" ]; then
    local dst=$W/bundle
    mkdir -p "$dst"
    case "$BUNDLE" in
      *.tar.xz|*.txz)
        if command -v xz > /dev/null; then timeout 60 tar -xJf "$BUNDLE" -C "$dst" 2> "$LOGS/unpack.log"
        else sys_run timeout 60 python3 -c 'import sys,tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$BUNDLE" "$dst" 2> "$LOGS/unpack.log"; fi ;;
      *.tar.zst)   # bundles of before issue 39
        timeout 60 sh -c 'zstd -dc "$1" | tar -C "$2" -xf -' sh "$BUNDLE" "$dst" 2> "$LOGS/unpack.log" ;;
      *.tar.gz|*.tgz) timeout 60 tar -xzf "$BUNDLE" -C "$dst" 2> "$LOGS/unpack.log" ;;
      *) echo "unknown bundle format: $BUNDLE" > "$LOGS/unpack.log" ;;
    esac
    if [ ! -d "$dst/bin" ]; then
      verdict libs "fail: cannot unpack $BUNDLE: $(oneline < "$LOGS/unpack.log")"
      return 1
    fi
    BIN=$dst/bin; PROGRAMS_FROM="bundle $BUNDLE ($(cat "$dst/VERSION" 2>/dev/null || echo '?'))"
  else
    local lb=${PHASELAB_GPU_BIN:-build/tests/gpu}
    if [ -x "$lb/test_cuda_parity" ]; then
      BIN=$(cd "$lb" && pwd); PROGRAMS_FROM="local build $lb"
      [ -z "${PHASELAB_GPU_BIN:-}" ] && [ -x ./train ] && TRAIN=$REPO/train
    else
      verdict libs "fail: no bundle at $BUNDLE and no built programs in $lb: make the bundle with tools/gpu-bundle on a build machine and carry build-bundle/ (docs/gpu.md)"
      return 1
    fi
  fi
  # a bundle's own libraries come first (for its programs only: see sys_run)
  case "$PROGRAMS_FROM" in bundle*) [ -d "$BIN/../lib" ] && BUNDLE_LIB=$(cd "$BIN/../lib" && pwd) &&
                                    export LD_LIBRARY_PATH="$BUNDLE_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  [ -z "$TRAIN" ] && [ -x "$BIN/train" ] && TRAIN=$BIN/train
  return 0
}

# ldd -r every program: $W/ldd.missing ("lib prog" lines), $W/ldd.version (a glibc or library too
# old: "version ... not found", "undefined symbol"), $W/ldd.resolved ("lib path" lines)
ldd_all() {
  : > "$W/ldd.missing"; : > "$W/ldd.version"; : > "$W/ldd.resolved"
  local f out
  for f in "$BIN"/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    out=$(timeout 20 ldd -r "$f" 2>&1)
    printf '== %s\n%s\n' "$f" "$out" >> "$LOGS/libs.ldd.log"
    case "$out" in *"not a dynamic executable"*) continue ;; esac
    awk -v p="$(basename "$f")" '$2 == "=>" && $3 == "not" {print $1, p}' <<< "$out" >> "$W/ldd.missing"
    grep -iE "version .* not found|undefined symbol" <<< "$out" | sed "s|^|$(basename "$f"): |" >> "$W/ldd.version"
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<< "$out" >> "$W/ldd.resolved"
  done
}

phase_libs() {
  echo "LD_LIBRARY_PATH at start: ${LD_LIBRARY_PATH:-}" > "$LOGS/libs.ldd.log"
  unpack_bundle || { STOP="no programs (phase libs failed)"; return; }
  fig libs programs "$PROGRAMS_FROM: $(ls "$BIN" | tr '\n' ' ')"
  [ -f "$BIN/../MANIFEST" ] && fig libs glibc_needed "$(grep '^glibc' "$BIN/../MANIFEST")"
  fig libs glibc_here "$(ldd --version 2>&1 | head -n 1)"
  ldd_all
  local added="" name progs d still rt="" want="" missing
  # besides what ldd lists, libraries opened at run time (dlopen): the driver's libcuda.so.1 (by
  # cudart; never the toolkit's stub) and NVRTC (by cuDNN's runtime-compiled engines)
  grep -q '^libcudart' "$W/ldd.resolved" "$W/ldd.missing" && rt="libcuda.so.1"
  grep -q '^libcudnn' "$W/ldd.resolved" "$W/ldd.missing" && rt="$rt libnvrtc.so.13"
  for name in $rt; do resolvable "$name" || want="$want $name"; done
  missing=$(awk '{print $1}' "$W/ldd.missing" | sort -u | tr '\n' ' ')
  if [ -n "$missing$want" ]; then
    CUDA_DIRS=$(cuda_lib_dirs | awk '!s[$0]++' | tr '\n' ' ')
    echo "search for $missing$want in: $CUDA_DIRS, then find /" >> "$LOGS/libs.ldd.log"
    while read -r name d; do
      case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"; added="$added $d" ;; esac
      fig libs found "$name in $d"
    done < <(find_libs $missing $want)
    [ -n "$added" ] && ldd_all
    for name in $want; do
      resolvable "$name" || fig libs warning "$name not found (opened at run time by $([ "$name" = libcuda.so.1 ] && echo "cudart: the GPU will not be seen" || echo "cuDNN: its runtime-compiled engines are off"))"
    done
  fi
  fig libs ld_library_path "${LD_LIBRARY_PATH:-}"
  local cudnn; cudnn=$(awk '$1 == "libcudnn.so.9" {print $2; exit}' "$W/ldd.resolved")
  [ -n "$cudnn" ] && ! ls "$(dirname "$cudnn")"/libcudnn_engines_precompiled.so* > /dev/null 2>&1 && \
    fig libs warning "no libcudnn_engines_precompiled beside $cudnn"
  for name in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    d=$(awk -v n="$name" '$1 == n {print $2; exit}' "$W/ldd.resolved")
    [ -n "$d" ] && fig libs "$name" "$d -> $(readlink -f "$d" | xargs basename)"
  done
  if [ -s "$W/ldd.missing" ] || [ -s "$W/ldd.version" ]; then
    still=$(awk '{a[$1] = a[$1] (a[$1] ? "," : "") $2} END {for (l in a) printf "%s (needed by %s); ", l, a[l]}' "$W/ldd.missing")
    [ -s "$W/ldd.version" ] && still="$still$(sort -u "$W/ldd.version" | head -n 5 | oneline)"
    verdict libs "fail: missing shared libraries or symbols: $still"
    while read -r name progs; do fig libs missing "$name (needed by $progs)"; done < <(awk '{print $1, $2}' "$W/ldd.missing" | sort -u)
    STOP="missing shared libraries (phase libs)"
    return
  fi
  verdict libs "pass: every program's shared libraries resolve$([ -n "$added" ] && echo " (added:$added)") in ${SECONDS}s"
}

phase_machine() {
  local log=$LOGS/machine.log
  { echo "\$ nvidia-smi"; timeout 15 nvidia-smi 2>&1; echo "rc $?"; } > "$log"
  local q
  q=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)
  command -v nvcc > /dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || PATH=$PATH:/usr/local/cuda/bin
  fig machine nvcc "$(nvcc --version 2>/dev/null | grep -i release || echo 'not found')"
  fig machine cpu "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)"
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  fig machine compute_sanitizer "${SANITIZER:-not found}"
  if [ -z "$q" ]; then
    verdict machine "fail: no NVIDIA GPU visible (nvidia-smi: $(command -v nvidia-smi > /dev/null && tail -n 2 "$log" | oneline || echo 'not found'))"
    STOP="no GPU (phase machine)"
    return
  fi
  fig machine gpu "$q"
  verdict machine "pass: $(cut -d, -f1 <<< "$q" | oneline)"
}

# ---- the GPU phases -------------------------------------------------------------------------
phase_op_parity() {
  need op_parity test_cuda_parity || return
  tap_phase op_parity test_cuda_parity "$(phase_left)" "$BIN/test_cuda_parity"
  verdict op_parity "$V"
}

phase_owned_step() {
  need owned_step test_cuda_owned_step || return
  tap_phase owned_step test_cuda_owned_step "$(phase_left)" "$BIN/test_cuda_owned_step"
  verdict owned_step "$V"
}

phase_model_parity() {
  need model_parity test_cuda_model_parity || return
  tap_phase model_parity test_cuda_model_parity "$(phase_left)" "$BIN/test_cuda_model_parity"
  verdict model_parity "$V"
}

phase_more_parity() {
  local prog bad="" notrun=""
  for prog in test_cuda_staggered test_cuda_decode test_cuda_eval_length; do
    if [ ! -x "$BIN/$prog" ]; then bad="$bad $prog: not among the programs;"; continue; fi
    if [ "$(phase_left)" -lt 3 ]; then notrun="$notrun $prog"; continue; fi
    tap_phase more_parity "$prog" "$(phase_left)" "$BIN/$prog" || case "$V" in "not run"*) notrun="$notrun $prog" ;; *) bad="$bad $V;" ;; esac
  done
  if [ -n "$bad" ]; then verdict more_parity "fail:$bad"
  elif [ -n "$notrun" ]; then verdict more_parity "not run: deadline:$notrun"
  else verdict more_parity "pass: staggered, decode, eval_length"; fi
}

phase_paper_parity() {
  need paper_parity test_cuda_parity || return
  local pat=${CHECK_PAPER_PATTERN:-T=4096}
  if ! timeout 10 "$BIN/test_cuda_parity" --list "$pat" > "$LOGS/paper_parity.list.log" 2>&1; then
    verdict paper_parity "skip: test_cuda_parity has no case matching '$pat' (the paper's shapes: issue 39)"
    return
  fi
  fig paper_parity cases "$(wc -l < "$LOGS/paper_parity.list.log")"
  tap_phase paper_parity test_cuda_parity "$(phase_left)" "$BIN/test_cuda_parity" "$pat"
  verdict paper_parity "$V"
}

phase_cudnn() {
  need cudnn cudnn_graph_check || return
  local log=$LOGS/cudnn.cudnn_graph_check.log to; to=$(phase_left)
  echo "\$ cudnn_graph_check" > "$log"
  run_log "$to" "$log" env PHASELAB_CUDNN_ATTN_VERBOSE=1 "$BIN/cudnn_graph_check"
  tap_counts "$log"
  # a shape cuDNN declines: "not ok - SHAPE: cuDNN forward|backward ran (0)" with cuDNN's own
  # "unavailable for this shape" message: a skip (the backend then uses the custom kernels)
  local declined=0 real=0 l
  if grep -q 'unavailable for this shape' "$log"; then
    declined=$(grep -cE '^not ok - .*: cuDNN (forward|backward) ran \(0\)$' "$log")
  fi
  real=$((NF - declined))
  fig cudnn checks "$NP ok, $real not ok, $((NS + declined)) skip ($declined declined by cuDNN), exit $RC, ${DUR}s"
  while read -r l; do fig cudnn declined "$l"; done < <(grep -o 'unavailable for this shape.*' "$log" | sort -u | head -n 8)
  while read -r l; do fig cudnn timing "${l#\# }"; done < <(grep -E '^# .* ms' "$log" | head -n 12)
  while read -r l; do fig cudnn not_ok "$l"; done < <(grep '^not ok - ' "$log" | grep -vE 'cuDNN (forward|backward) ran \(0\)$' | head -n 12)
  if timed_out; then verdict cudnn "$(timeout_verdict cudnn_graph_check "$to")"
  elif [ "$real" -gt 0 ]; then verdict cudnn "fail: $real checks not ok"
  elif [ "$RC" -gt 1 ] || { [ "$RC" -eq 1 ] && [ "$declined" -eq 0 ]; }; then verdict cudnn "fail: exit status $RC"; fig cudnn tail "$(tail -n 3 "$log")"
  elif [ "$NP" -eq 0 ] && [ "$declined" -gt 0 ]; then verdict cudnn "skip: cuDNN declined every shape ($declined)"
  elif [ "$NP" -eq 0 ]; then verdict cudnn "fail: no checks ($(grep -m1 '^skip - ' "$log" | oneline))"
  else verdict cudnn "pass: $NP ok, $declined declined by cuDNN (skips) in ${DUR}s"; fi
}

phase_nccl() {
  fig nccl phaselab "not exercised: ./train creates an NCCL communicator only with more than one rank, and one GPU takes one rank"
  local lib; lib=$(awk '$1 == "libnccl.so.2" {print $2; exit}' "$W/ldd.resolved")
  if [ -z "$lib" ]; then verdict nccl "skip: the programs do not link NCCL (a build without it trains on one rank)"; return; fi
  if ! command -v python3 > /dev/null; then verdict nccl "skip: no python3 for the ctypes smoke test"; return; fi
  local log=$LOGS/nccl.log to; to=$(phase_left)
  cat > "$W/nccl_smoke.py" <<'EOF'
# one-rank NCCL smoke test through ctypes on device 0: the libnccl.so.2 and libcudart the programs load
import ctypes as C, sys, time
nccl, cudart = C.CDLL(sys.argv[1]), C.CDLL(sys.argv[2])
P, Z, I = C.c_void_p, C.c_size_t, C.c_int
nccl.ncclGetErrorString.restype = C.c_char_p
cudart.cudaGetErrorString.restype = C.c_char_p
nccl.ncclCommInitAll.argtypes = [C.POINTER(P), I, C.POINTER(I)]
nccl.ncclCommDestroy.argtypes = [P]
nccl.ncclAllReduce.argtypes = [P, P, Z, I, I, P, P]
nccl.ncclReduceScatter.argtypes = [P, P, Z, I, I, P, P]
nccl.ncclAllGather.argtypes = [P, P, Z, I, P, P]
cudart.cudaMalloc.argtypes = [C.POINTER(P), Z]
cudart.cudaMemcpy.argtypes = [P, P, Z, I]
cudart.cudaMemset.argtypes = [P, I, Z]
def ok(what, r, lib):
    if r != 0:
        msg = nccl.ncclGetErrorString(r) if lib is nccl else cudart.cudaGetErrorString(r)
        sys.exit("nccl smoke: %s failed: %d %s" % (what, r, msg.decode(errors="replace")))
v = C.c_int(0)
ok("ncclGetVersion", nccl.ncclGetVersion(C.byref(v)), nccl)
print("version %d" % v.value)
t0 = time.time()
comm = P()
ok("ncclCommInitAll", nccl.ncclCommInitAll(C.byref(comm), 1, (I * 1)(0)), nccl)
print("init %.2f s" % (time.time() - t0))
n = 1 << 20
host = (C.c_float * n)(*[(i % 251) * 0.25 - 7.0 for i in range(n)])
send, recv = P(), P()
ok("cudaMalloc", cudart.cudaMalloc(C.byref(send), 4 * n), cudart)
ok("cudaMalloc", cudart.cudaMalloc(C.byref(recv), 4 * n), cudart)
ok("cudaMemcpy", cudart.cudaMemcpy(send, C.addressof(host), 4 * n, 1), cudart)
float32, nccl_sum = 7, 0
for name, call in (("all-reduce", lambda: nccl.ncclAllReduce(send, recv, n, float32, nccl_sum, comm, None)),
                   ("reduce-scatter", lambda: nccl.ncclReduceScatter(send, recv, n, float32, nccl_sum, comm, None)),
                   ("all-gather", lambda: nccl.ncclAllGather(send, recv, n, float32, comm, None))):
    ok("cudaMemset", cudart.cudaMemset(recv, 0xff, 4 * n), cudart)   # NaNs: every element must be written
    t0 = time.time()
    ok(name, call(), nccl)
    ok("cudaDeviceSynchronize", cudart.cudaDeviceSynchronize(), cudart)
    dt = time.time() - t0
    back = (C.c_float * n)()
    ok("cudaMemcpy", cudart.cudaMemcpy(C.addressof(back), recv, 4 * n, 2), cudart)
    if C.string_at(back, 4 * n) != C.string_at(host, 4 * n):
        sys.exit("nccl smoke: %s on one rank did not return its input" % name)
    print("%s of %d floats: ok (%.2f ms)" % (name, n, dt * 1e3))
ok("ncclCommDestroy", nccl.ncclCommDestroy(comm), nccl)
print("nccl smoke: ok")
EOF
  local cudart; cudart=$(awk '$1 ~ /^libcudart\.so/ {print $2; exit}' "$W/ldd.resolved")
  echo "\$ python3 nccl_smoke.py $lib ${cudart:-libcudart.so.13}" > "$log"
  run_log "$to" "$log" env LD_LIBRARY_PATH="$(sys_ldpath)" python3 "$W/nccl_smoke.py" "$lib" "${cudart:-libcudart.so.13}"
  fig nccl library "$lib ($(grep -m1 '^version' "$log" | oneline))"
  if timed_out; then verdict nccl "$(timeout_verdict "the smoke test" "$to")"
  elif [ "$RC" -eq 0 ] && grep -q '^nccl smoke: ok' "$log"; then
    fig nccl ops "$(grep -E '^(init|all-|reduce-)' "$log" | oneline)"
    verdict nccl "pass: one-rank init, all-reduce, reduce-scatter, all-gather in ${DUR}s"
  else verdict nccl "fail: $(tail -n 2 "$log" | oneline)"; fi
}

bench_figs() {   # bench_figs LOG SUFFIX: one figure per case line of bench_cuda
  local l name rest
  while read -r l; do
    name=${l#bench_cuda }
    rest=$(sed -E 's/^.* ([0-9]+ tokens\/s)/\1/' <<< "$name")
    name=$(sed -E 's/ +[0-9]+ tokens\/s.*//' <<< "$name" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/_/g; s/^_|_$//g')
    fig bench "$name$2" "$rest"
  done < <(grep -E '^bench_cuda .* tokens/s' "$1")
}
bench_per_op() {   # bench_per_op LOG: each case's per-op table (bench_cuda, BENCH_PROFILE=1) as figures
  local name ops gemm parts n=0
  while IFS=$'\t' read -r name ops gemm parts; do
    fig bench "per_op_$name" "$ops"
    [ -n "$gemm" ] && fig bench "gemm_$name" "$gemm"
    [ -n "$parts" ] && fig bench "parts_$name" "$parts"
    n=$((n + 1))
  done < <(awk '
    function flush() { sub(/; $/, "", gemm); sub(/; $/, "", parts)
                       if (c != "") printf "%s\t%s\t%s\t%s\n", c, ops, gemm, parts; c = "" }
    /^per-op profile, / { flush(); c = $0; sub(/^per-op profile, /, "", c); sub(/: [0-9]+ more step.*/, "", c)
                          c = tolower(c); gsub(/[^a-z0-9]+/, "_", c); gsub(/^_|_$/, "", c)
                          ops = ""; gemm = ""; parts = ""; sect = ""; rows = 0; next }
    c == "" { next }
    /^per-op time, / { sect = "ops"; next }
    /^GEMM shapes/ { sect = "gemm"; rows = 0; next }
    /^sub-steps, / { sect = "parts"; rows = 0; next }
    /^  (op|product|part) / { next }
    sect == "parts" && /^  [a-z]/ && rows < 8 { parts = parts sprintf("%s %s ms %s%%; ", $1, $3, $5); rows++; next }
    sect == "ops" && /^  \(between ops\)/ { ops = ops sprintf("between ops %s ms %s%%", $3, $4); next }
    sect == "ops" && /^  [a-z]/ && rows < 6 {
      ops = ops sprintf("%s %s ms %s%% %s; ", $1, $3, $5, $6 != "-" ? $6 " GFLOP/s" : $7 " GB/s"); rows++; next }
    sect == "gemm" && /^  (fwd|bwd)/ && rows < 3 {
      p = $1; i = 2; if ($1 == "bwd") { p = $1 " " $2; i = 3 }
      gemm = gemm sprintf("%s [%s,%s,%s] %s ms %s GFLOP/s; ", p, $i, $(i + 1), $(i + 2), $(i + 4), $(i + 6)); rows++; next }
    !/^  / { sect = "" }
    END { flush() }' "$1")
  [ "$n" -gt 0 ] || fig bench per_op "no per-op table in the log (bench_cuda without BENCH_PROFILE support?)"
}
phase_bench() {
  need bench bench_cuda || return
  local log=$LOGS/bench.log to; to=$(phase_left)
  echo "\$ bench_cuda $BATCH $BENCH_STEPS" > "$log"
  # default: cuDNN fwd+bwd for full; BENCH_PROFILE=1: each case's per-op table after its timed steps
  run_log "$to" "$log" env -u PHASELAB_CUDNN_ATTN_BWD BENCH_PROFILE=1 "$BIN/bench_cuda" "$BATCH" "$BENCH_STEPS"
  fig bench setup "$(grep -m1 '^bench_cuda: ' "$log" | oneline)"
  bench_figs "$log" ""
  local n_case; n_case=$(grep -cE '^bench_cuda .* tokens/s' "$log")
  local fails; fails=$(grep -E '^bench_cuda .*(failed|cannot)|no GPU' "$log" | oneline)
  if timed_out; then verdict bench "$(timeout_verdict "bench_cuda ($n_case cases done)" "$to")"; return; fi
  if [ "$RC" -ne 0 ] || [ -n "$fails" ] || [ "$n_case" -lt 3 ]; then
    verdict bench "fail: bench_cuda: exit $RC, $n_case of 3 cases${fails:+: $fails}"
    fig bench tail "$(tail -n 3 "$log")"
    return
  fi
  # full attention with the custom (deterministic) backward: the same program, stopped after its first case
  local log2=$LOGS/bench.custom_bwd.log
  to=$(phase_left)
  echo "\$ PHASELAB_CUDNN_ATTN_BWD=0 bench_cuda $BATCH $BENCH_STEPS (first case only)" > "$log2"
  if [ "$to" -ge 15 ]; then
    PHASELAB_CUDNN_ATTN_BWD=0 PHASELAB_CUDNN_ATTN_VERBOSE=1 timeout -k "$KILL_GRACE" "$to" "$BIN/bench_cuda" "$BATCH" "$BENCH_STEPS" >> "$log2" 2>&1 < /dev/null &
    local pid=$! t0=$SECONDS
    CHILD=$pid
    while kill -0 "$pid" 2> /dev/null; do
      grep -qE '^bench_cuda (full.*tokens/s|.*full.*failed)' "$log2" && { kill -TERM "$pid" 2> /dev/null; break; }
      sleep 1
    done
    wait "$pid" 2> /dev/null
    CHILD=""
    bench_figs "$log2" "_custom_bwd"
    grep -q 'unavailable' "$log" && fig bench cudnn_note "$(grep -m1 'unavailable' "$log")"
    grep -qE '^bench_cuda full.*tokens/s' "$log2" || fig bench full_custom_bwd "no result in $((SECONDS - t0))s: $(tail -n 2 "$log2" | oneline)"
  else
    fig bench full_custom_bwd "not run: deadline (${to}s left)"
  fi
  bench_per_op "$log"
  verdict bench "pass: 3 cases at micro-batch $BATCH in ${DUR}s (figures below)"
}

phase_rerun() {
  if [ -z "$TRAIN" ] || [ ! -x "$TRAIN" ]; then
    verdict rerun "fail: no train program ($PROGRAMS_FROM): rebuild the bundle with tools/gpu-bundle"; return
  fi
  local R=$W/rerun log=$LOGS/rerun.log
  mkdir -p "$R"
  echo "\$ train --make-synthetic" > "$log"
  local to; to=$(phase_left); [ "$to" -gt 30 ] && to=30
  run_log "$to" "$log" "$TRAIN" --make-synthetic "$R/data" --seq-len 256 --train-rows 4000 --val-rows 16
  if [ "$RC" -ne 0 ]; then verdict rerun "fail: train --make-synthetic exited $RC: $(tail -n 2 "$log" | oneline)"; return; fi
  local det=""
  # a deterministic switch, when the program has one (issue 39: run.deterministic)
  "$TRAIN" --help 2>/dev/null | awk '/^\[/ {s = $1} /^  deterministic = / {print s}' | grep -q '^\[run\]' && det="run.deterministic=true"
  fig rerun setup "configs/demo.ini, $RERUN_STEPS steps, seq 256, micro-batch 16${det:+, $det}"
  local variant extra i bad="" notrun="" h1 h2 loss rlog
  for variant in compressed full; do
    extra=""; [ "$variant" = full ] && extra="model.attention=full"
    for i in 1 2; do
      to=$(phase_left)
      if [ "$to" -lt 5 ]; then notrun="$notrun $variant"; continue 2; fi
      rlog=$LOGS/rerun.${variant}_$i.log
      echo "\$ train configs/demo.ini run.device=cuda ($variant, run $i)" > "$rlog"
      run_log "$to" "$rlog" env -u PHASELAB_CUDNN_ATTN_BWD "$TRAIN" configs/demo.ini run.device=cuda $extra $det \
        "train.steps=$RERUN_STEPS" "data.train=$R/data/train_*.bin" data.val= eval.probe= eval.every=0 checkpoint.every=0 \
        "run.dir=$R" "run.name=${variant}_$i" run.log_every=5
      if timed_out; then
        case "$(timeout_verdict x "$to")" in "not run"*) notrun="$notrun $variant" ;; *) bad="$bad $variant run $i timed out after ${DUR}s;" ;; esac
        continue 2
      fi
      if [ "$RC" -ne 0 ]; then bad="$bad $variant run $i exited $RC ($(tail -n 1 "$rlog" | oneline));"; continue 2; fi
      if ! grep -q 'backend cuda' "$rlog"; then bad="$bad $variant run $i did not use the CUDA backend;"; continue 2; fi
    done
    local c1 c2
    c1=$(ls -d "$R/${variant}_1"/checkpoints/step_* 2>/dev/null | tail -n 1)
    c2=$(ls -d "$R/${variant}_2"/checkpoints/step_* 2>/dev/null | tail -n 1)
    if [ -z "$c1" ] || [ -z "$c2" ]; then bad="$bad $variant: no checkpoint;"; continue; fi
    h1=$(cd "$c1" && sha256sum model.safetensors optimizer/* 2>/dev/null)
    h2=$(cd "$c2" && sha256sum model.safetensors optimizer/* 2>/dev/null)
    printf '%s run 1:\n%s\n%s run 2:\n%s\n' "$variant" "$h1" "$variant" "$h2" >> "$log"
    loss=$(grep -E "^step $RERUN_STEPS/" "$rlog" | tail -n 1 | grep -oE 'loss [0-9.naif]+')
    if [ -n "$h1" ] && [ "$h1" = "$h2" ]; then
      fig rerun "$variant" "identical: model.safetensors sha256 $(head -n 1 <<< "$h1" | cut -c1-16), optimizer state too; $loss"
    else
      fig rerun "$variant" "DIFFERENT: $(diff <(echo "$h1") <(echo "$h2") | grep '^[<>]' | oneline)"
      bad="$bad $variant: two identical runs gave different checkpoints;"
    fi
  done
  if [ -n "$bad" ]; then verdict rerun "fail:$bad"
  elif [ -n "$notrun" ]; then verdict rerun "not run: deadline:$notrun"
  else verdict rerun "pass: compressed and full attention, $RERUN_STEPS steps twice each, bitwise identical"; fi
}

phase_sanitizer() {
  need sanitizer test_cuda_parity || return
  if [ -z "${SANITIZER:-}" ]; then verdict sanitizer "skip: compute-sanitizer not found"; return; fi
  # small cases: custom attention (full, window, tail) and the compressor (paper and deepseek maps)
  local cases=("full T=150 H4 G2 d32 [custom kernels]" "window W8 S8 nloc16 d64 sink" "tail W8 S4 d128 G4"
               "compressor/scalar+bias W8 S8" "compressor/deepseek scalar+bias W8 S4")
  fig sanitizer cases "$(printf '%s | ' "${cases[@]}" | sed 's/ | $//')"
  local tool n=3 bad="" notrun="" skip="" errs to log
  for tool in memcheck racecheck synccheck; do
    to=$(( $(phase_left) / n )); n=$((n - 1))
    log=$LOGS/sanitizer.$tool.log
    if [ "$to" -lt 5 ]; then notrun="$notrun $tool"; continue; fi
    echo "\$ compute-sanitizer --tool $tool test_cuda_parity ..." > "$log"
    run_log "$to" "$log" "$SANITIZER" --tool "$tool" --error-exitcode 86 --print-limit 20 "$BIN/test_cuda_parity" "${cases[@]}"
    errs=$(grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$log" | tail -n 1)
    tap_counts "$log"
    fig sanitizer "$tool" "${errs:-no summary line}; parity $NP ok, $NF not ok; exit $RC, ${DUR}s"
    if grep -qE 'Device not supported|Unable to find injection|not supported on this' "$log"; then
      skip="$skip $tool: $(grep -m1 -E 'Device not supported|Unable to find injection|not supported on this' "$log" | oneline);"
    elif timed_out; then
      notrun="$notrun $tool (stopped after ${DUR}s)"
    elif [ "$RC" -eq 86 ] || grep -qE 'ERROR SUMMARY: [1-9]|\([1-9][0-9]* errors' <<< "$errs"; then
      bad="$bad $tool: $errs;"
    elif [ "$RC" -ne 0 ] || [ -z "$errs" ]; then
      bad="$bad $tool: exit $RC ($(tail -n 1 "$log" | oneline));"
    fi
  done
  if [ -n "$bad" ]; then verdict sanitizer "fail:$bad"
  elif [ -n "$notrun" ]; then verdict sanitizer "not run: time:$notrun${skip:+; skipped:$skip}"
  elif [ -n "$skip" ]; then verdict sanitizer "skip:$skip"
  else verdict sanitizer "pass: memcheck, racecheck, synccheck clean"; fi
}

# ---- the run --------------------------------------------------------------------------------
echo "check.sh: deadline ${DEADLINE}s; summary in $SUMMARY" >&2
write_summary
phase libs         30  0
phase machine      15  0
phase op_parity    90 10
phase owned_step   25  5
phase model_parity 45 10
phase cudnn        60 10
phase nccl         20  5
phase bench       150 40
phase rerun        60 25
phase more_parity  45 15
phase paper_parity 60 10
phase sanitizer    90 20
finish
