#!/usr/bin/env bash
# Self-test of tests/gpu/check.sh without a GPU, on fake bundles under build/scratch/test_gpu_check/
# (bundle folders of shell-script programs; a fake nvidia-smi on the PATH):
#   A. deadline: CHECK_DEADLINE=20 with a fake test_cuda_parity that passes, a
#      test_cuda_owned_step that fails and a test_cuda_model_parity that hangs. check.sh must end
#      within the deadline + 6 s, leave at most 8 files in $OUT with summary.txt and logs.tar.gz,
#      every summary line must parse (the format of check.sh's header), each phase must appear
#      once, the verdicts must be pass / fail / "not run: deadline..." (nothing after the deadline
#      passes), the exit status non-zero, and the hanging program must be gone.
#   B. phase 0: a real program (built here with cc) that needs one library that exists nowhere
#      and one that lies only in a python site-packages folder nvidia/*/lib (on PYTHONPATH):
#      libs must fail within seconds naming the missing library, must have found the other one
#      there, and every later phase must be "not run".
#   C. no bundle and no built programs: libs fails at once saying so, in a few seconds.
#   D. a check stopped by SIGTERM during a phase ends within seconds with its program stopped,
#      that phase "not run: interrupted", overall fail; one killed by SIGKILL still leaves a
#      summary.txt that parses, with the phases done so far and the running one "not run".
#   E. every phase with well-behaved fakes (parity programs, a cudnn_graph_check with one shape
#      cuDNN declines, a bench_cuda, a train that writes checkpoints, a compute-sanitizer):
#      overall pass and exit 0, the declined shape a skip, the bench figures parsed (and each
#      case's per-op table, BENCH_PROFILE=1), the cuDNN-backward bench run stopped after its first
#      case; then CHECK_PHASES=rerun with a train whose second run writes other bytes: rerun
#      fails, only the selected phases are listed.
set -u
cd "$(dirname "$0")/.." || exit 1
T=gpu_check
S=$PWD/build/scratch/test_gpu_check
rm -rf "$S"; mkdir -p "$S/fakebin" "$S/tmp"
export TMPDIR=$S/tmp   # check.sh's work folders (one killed by SIGKILL stays behind)
CHECK=${GPU_CHECK_SCRIPT:-$PWD/tests/gpu/check.sh}   # (a mutated copy, to see the checks fail)
unset CHECK_PHASES CHECK_BATCH PHASELAB_GPU_BUNDLE PHASELAB_GPU_BIN OUT CHECK_KEEP
ok() { echo "ok - $T: $1"; }
nok() { echo "not ok - $T: $1"; }

# a fake nvidia-smi: one H200
cat > "$S/fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in *--query-gpu*) echo "NVIDIA H200, 580.00.00, 143771 MiB, 9.0, 1980 MHz" ;; *) echo "GPU 0: NVIDIA H200 (fake)" ;; esac
EOF
chmod +x "$S/fakebin/nvidia-smi"

# the summary format (tests/gpu/check.sh header): comments, verdicts, figures; nothing else
VERDICT_RE='^[a-z][a-z0-9_]*: (pass|fail|skip|not run)(: .+)?$'
FIGURE_RE='^  [a-z][a-z0-9_]*\.[A-Za-z0-9_.+-]+ = .+$'
PHASES=$(sed -n 's/^ALL_PHASES="\(.*\)"$/\1/p' "$CHECK")   # check.sh's phases, in order
[ "$(wc -w <<< "$PHASES")" -ge 10 ] || echo "not ok - $T: cannot read ALL_PHASES from $CHECK: '$PHASES'"
check_format() {   # check_format SUMMARY LABEL
  local f=$1 bad="" l n=0 cur="" p
  while IFS= read -r l; do
    n=$((n + 1))
    if [[ "$l" == "# "* ]]; then continue
    elif [[ "$l" =~ $VERDICT_RE ]]; then cur=${l%%:*}
    elif [[ "$l" =~ $FIGURE_RE ]]; then
      p=${l#  }; p=${p%%.*}
      [ "$p" = "$cur" ] || bad="$bad line $n: figure of $p under $cur;"
    else bad="$bad line $n: '$l';"; fi
  done < "$f"
  for p in $PHASES overall; do
    [ "$(grep -c "^$p: " "$f")" -eq 1 ] || bad="$bad $p: $(grep -c "^$p: " "$f") verdict lines;"
  done
  tail -n 1 "$f" | grep -qE '^overall: ' || bad="$bad the last line is not overall;"
  [ -z "$bad" ] && ok "$2: every summary line parses, one verdict per phase, overall last" \
    || nok "$2: summary format:$bad"
}
v_of() { grep "^$1: " "$2" | head -n 1; }

# ---- A: the deadline ----
A=$S/a; mkdir -p "$A/bundle/bin" "$A/bundle/lib" "$A/out"
echo fake > "$A/bundle/VERSION"
cat > "$A/bundle/bin/test_cuda_parity" <<'EOF'
#!/bin/sh
[ "$1" = --list ] && { echo "no case matches" >&2; exit 2; }
echo "ok - cuda_parity_fake: one"; echo "ok - cuda_parity_fake: two"; echo "skip - cuda_parity_fake: three: skipped: fake"
EOF
cat > "$A/bundle/bin/test_cuda_owned_step" <<'EOF'
#!/bin/sh
echo "ok - owned_fake: one"; echo "not ok - owned_fake: two: 1 != 2"; exit 1
EOF
cat > "$A/bundle/bin/test_cuda_model_parity" <<EOF
#!/bin/sh
echo \$\$ >> "$S/hang.pids"
echo "ok - model_fake: started"
exec sleep 120
EOF
chmod +x "$A/bundle/bin/"*
t0=$(date +%s)
PATH="$S/fakebin:$PATH" OUT=$A/out CHECK_DEADLINE=20 PHASELAB_GPU_BUNDLE=$A/bundle bash "$CHECK" > "$A/stdout" 2> "$A/stderr"
rc=$?
took=$(( $(date +%s) - t0 ))
[ "$took" -le 26 ] && ok "A: ends within the deadline (20 s) + 6 s: ${took}s" || nok "A: took ${took}s with CHECK_DEADLINE=20"
nfiles=$(find "$A/out" -type f | wc -l)
[ "$nfiles" -le 8 ] && [ -s "$A/out/summary.txt" ] && [ -s "$A/out/logs.tar.gz" ] \
  && ok "A: $nfiles files in OUT (at most 8), summary.txt and logs.tar.gz among them" \
  || nok "A: OUT holds $nfiles files: $(ls "$A/out" | tr '\n' ' ')"
if [ -s "$A/out/summary.txt" ]; then
  SUM=$A/out/summary.txt
  check_format "$SUM" A
  [[ "$(v_of op_parity "$SUM")" == "op_parity: pass"* ]] && [[ "$(v_of owned_step "$SUM")" == "owned_step: fail"* ]] \
    && ok "A: a passing program is pass, a failing one fail" \
    || nok "A: verdicts '$(v_of op_parity "$SUM")' / '$(v_of owned_step "$SUM")'"
  [[ "$(v_of model_parity "$SUM")" == "model_parity: not run: deadline"* ]] \
    && ok "A: the hanging program is stopped at the deadline and reported 'not run: deadline'" \
    || nok "A: hanging program: '$(v_of model_parity "$SUM")'"
  later=$(( $(wc -w <<< "${PHASES#*model_parity}") ))
  after=$(sed -n '/^model_parity: /,$p' "$SUM" | grep -E '^[a-z_]+: pass')
  notrun=$(sed -n '/^model_parity: /,$p' "$SUM" | grep -vE '^(overall|model_parity): ' | grep -cE '^[a-z_]+: not run: deadline')
  [ -z "$after" ] && [ "$notrun" -eq "$later" ] && ok "A: the $later phases after the deadline are 'not run: deadline', none passes" \
    || nok "A: after the deadline: $notrun of $later 'not run: deadline'; passes: $after"
  grep -q '^overall: fail' "$SUM" && [ "$rc" -ne 0 ] && ok "A: overall fail, exit status $rc" \
    || nok "A: overall '$(grep '^overall' "$SUM")', exit status $rc"
  tar -xzOf "$A/out/logs.tar.gz" logs/op_parity.test_cuda_parity.log 2>/dev/null | grep -q '^ok - cuda_parity_fake: one' \
    && ok "A: logs.tar.gz holds each program's output" || nok "A: logs.tar.gz: $(tar -tzf "$A/out/logs.tar.gz" 2>&1 | tr '\n' ' ')"
else
  nok "A: no summary.txt (stdout: $(tail -n 3 "$A/stdout" | tr '\n' '|'))"
fi
alive=""
for pid in $(cat "$S/hang.pids" 2>/dev/null); do
  kill -0 "$pid" 2>/dev/null && [ "$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ] && alive="$alive $pid"
done
[ -z "$alive" ] && [ -s "$S/hang.pids" ] && ok "A: the hanging program was killed" \
  || { nok "A: hanging program pids '$(cat "$S/hang.pids" 2>/dev/null)' alive:$alive"; for pid in $alive; do kill "$pid"; done; }

# ---- B: a missing shared library ----
B=$S/b; mkdir -p "$B/bundle/bin" "$B/bundle/lib" "$B/out" "$B/py/nvidia/fake/lib" "$B/gone"
echo fake > "$B/bundle/VERSION"
if command -v cc > /dev/null && echo 'int phaselab_gone(void) { return 1; }' > "$B/gone.c" \
   && echo 'int phaselab_found(void) { return 2; }' > "$B/found.c" \
   && printf 'int phaselab_gone(void); int phaselab_found(void);\nint main(void) { return phaselab_gone() + phaselab_found(); }\n' > "$B/main.c" \
   && cc -shared -fPIC -o "$B/gone/libphaselab_gone.so" "$B/gone.c" \
   && cc -shared -fPIC -o "$B/py/nvidia/fake/lib/libphaselab_found.so" "$B/found.c" \
   && cc -o "$B/bundle/bin/test_cuda_parity" "$B/main.c" -L"$B/gone" -L"$B/py/nvidia/fake/lib" -lphaselab_gone -lphaselab_found; then
  rm -rf "$B/gone"
  t0=$(date +%s)
  PATH="$S/fakebin:$PATH" PYTHONPATH="$B/py" OUT=$B/out CHECK_DEADLINE=60 CHECK_FIND_TIMEOUT=3 PHASELAB_GPU_BUNDLE=$B/bundle \
    bash "$CHECK" > "$B/stdout" 2>&1
  rc=$?
  took=$(( $(date +%s) - t0 ))
  SUM=$B/out/summary.txt
  [ "$took" -le 15 ] && ok "B: a missing library stops the check within seconds (${took}s)" || nok "B: took ${took}s"
  [[ "$(v_of libs "$SUM")" == "libs: fail: missing shared libraries"*libphaselab_gone.so*test_cuda_parity* ]] \
    && ok "B: libs fails naming the missing library and the program that needs it" \
    || nok "B: libs verdict '$(v_of libs "$SUM")'"
  grep -qx "  libs.missing = libphaselab_gone.so (needed by test_cuda_parity)" "$SUM" && ! grep -q 'missing.*libphaselab_found' "$SUM" \
    && ok "B: the missing list has exactly the library that exists nowhere" || nok "B: missing figures: $(grep 'libs.missing' "$SUM" | tr '\n' '|')"
  grep -q "^  libs.found = libphaselab_found.so in $B/py/nvidia/fake/lib\$" "$SUM" \
    && ok "B: a library in python's site-packages nvidia/*/lib is found and its folder used" \
    || nok "B: found figures: $(grep 'libs.found' "$SUM" | tr '\n' '|')"
  others=$(grep -E '^[a-z_]+: ' "$SUM" | grep -vE '^(libs|overall): ' | grep -vc ': not run: missing shared libraries')
  [ "$others" -eq 0 ] && [ "$rc" -ne 0 ] && ok "B: every later phase is 'not run', exit status $rc" \
    || nok "B: $others later phases ran or have another verdict; exit status $rc"
  check_format "$SUM" B
else
  echo "skip - $T: B: skipped: no C compiler to build a program with a missing library"
fi

# ---- C: no bundle at all ----
C=$S/c; mkdir -p "$C/out" "$C/empty"
t0=$(date +%s)
PATH="$S/fakebin:$PATH" OUT=$C/out PHASELAB_GPU_BUNDLE=$C/none.tar.xz PHASELAB_GPU_BIN=$C/empty bash "$CHECK" > "$C/stdout" 2>&1
rc=$?
took=$(( $(date +%s) - t0 ))
[ "$took" -le 8 ] && [[ "$(v_of libs "$C/out/summary.txt")" == "libs: fail: no bundle at $C/none.tar.xz"* ]] && [ "$rc" -ne 0 ] \
  && ok "C: without a bundle the check says so in ${took}s (no make)" \
  || nok "C: ${took}s, rc $rc, libs '$(v_of libs "$C/out/summary.txt")'"

# ---- D: stopped during a phase: SIGTERM (check.sh finishes its files), then SIGKILL ----
D=$S/d; mkdir -p "$D/out" "$D/out_term"
: > "$S/hang.pids"
PATH="$S/fakebin:$PATH" OUT=$D/out_term CHECK_DEADLINE=120 PHASELAB_GPU_BUNDLE=$A/bundle bash "$CHECK" > "$D/stdout_term" 2>&1 &
pid=$!
for _ in $(seq 1 30); do
  grep -q '^model_parity: not run: started' "$D/out_term/summary.txt" 2>/dev/null && break
  sleep 0.5
done
t0=$(date +%s)
kill -TERM "$pid"
wait "$pid"
rc=$?
took=$(( $(date +%s) - t0 ))
sleep 1
alive=""
for p in $(cat "$S/hang.pids" 2>/dev/null); do
  kill -0 "$p" 2>/dev/null && [ "$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" != Z ] && alive="$alive $p"
done
SUM=$D/out_term/summary.txt
[ "$took" -le 6 ] && [ "$rc" -ne 0 ] && [[ "$(v_of model_parity "$SUM")" == "model_parity: not run: interrupted by a signal"* ]] \
  && grep -q '^overall: fail' "$SUM" && [ -s "$D/out_term/logs.tar.gz" ] && [ -z "$alive" ] \
  && ok "D: SIGTERM during a phase: ends in ${took}s, the phase 'not run: interrupted', overall fail, its program stopped" \
  || { nok "D: SIGTERM: ${took}s, rc $rc, '$(v_of model_parity "$SUM")', '$(grep '^overall' "$SUM")', alive:$alive"
       for p in $alive; do kill "$p"; done; }
: > "$S/hang.pids"
PATH="$S/fakebin:$PATH" OUT=$D/out CHECK_DEADLINE=120 PHASELAB_GPU_BUNDLE=$A/bundle bash "$CHECK" > "$D/stdout" 2>&1 &
pid=$!
for _ in $(seq 1 30); do
  grep -q '^model_parity: not run: started' "$D/out/summary.txt" 2>/dev/null && break
  sleep 0.5
done
kill -KILL "$pid"   # check.sh itself; its phase's timeout and the fake program stay, ended below
wait "$pid" 2>/dev/null
for p in $(cat "$S/hang.pids" 2>/dev/null); do kill "$p" 2>/dev/null; done
SUM=$D/out/summary.txt
if [ -s "$SUM" ]; then
  [[ "$(v_of op_parity "$SUM")" == "op_parity: pass"* ]] && [[ "$(v_of model_parity "$SUM")" == "model_parity: not run: started"* ]] \
    && grep -q '^overall: not run: still running' "$SUM" \
    && ok "D: after a kill, summary.txt has the finished phases and marks the running one 'not run'" \
    || nok "D: after a kill: '$(v_of op_parity "$SUM")' / '$(v_of model_parity "$SUM")' / '$(grep '^overall' "$SUM")'"
  check_format "$SUM" D
else
  nok "D: no summary.txt after the kill"
fi

# ---- E: every phase, well-behaved fakes ----
E=$S/e; mkdir -p "$E/bundle/bin" "$E/bundle/lib" "$E/out" "$E/out2" "$E/sbin"
echo fake > "$E/bundle/VERSION"
for prog in test_cuda_parity test_cuda_owned_step test_cuda_model_parity test_cuda_staggered test_cuda_decode test_cuda_eval_length; do
  printf '#!/bin/sh\n[ "$1" = --list ] && exit 2\necho "ok - %s: one"\necho "ok - %s: two"\n' "$prog" "$prog" > "$E/bundle/bin/$prog"
done
cat > "$E/bundle/bin/cudnn_graph_check" <<'FAKE'
#!/bin/sh
echo "ok - B=2 T=256 H=8 G=8 d=64: cuDNN forward ran (1)"
echo "ok - B=2 T=256 H=8 G=8 d=64: backward dq vs custom: 0.01"
echo "# B=2 T=256 H=8 G=8 d=64: backward custom 0.100 ms, cuDNN 0.050 ms"
echo "ok - B=3 T=333 H=6 G=2 d=96: cuDNN forward ran (1)"
echo "phaselab: cuDNN fused attention unavailable for this shape (bwd B3 T333: backward with T not a multiple of 128 needs cuDNN > 9.15); using the custom kernels" >&2
echo "not ok - B=3 T=333 H=6 G=2 d=96: cuDNN backward ran (0)"
echo "1 failed"
exit 1
FAKE
cat > "$E/bundle/bin/bench_cuda" <<'FAKE'
#!/bin/sh
# BENCH_PROFILE=1: a per-op table after each case (the format of kernels/backend_profile.c's report)
table() {
  [ "${BENCH_PROFILE:-0}" = 1 ] || return 0
  echo "per-op profile, $1: 1 more step (0.600 s with every op synchronized; not in the figures above)"
  echo "per-op time, cuda backend (each op synchronized; 600.0 ms of wall time recorded):"
  echo "  op                    calls   ms total    ms/call  % step   GFLOP/s      GB/s"
  echo "  attention_bwd            28    160.000     5.7143    26.7     512.0      20.0"
  echo "  matmul_bwd              140    150.000     1.0714    25.0     600.0      30.0"
  echo "  rmsnorm_fwd             113     10.000     0.0885     1.7         -    2500.0"
  echo "  (between ops)                    5.000                0.8"
  echo "GEMM shapes, most time first (out [M,N] = in [M,K] w [N,K]^T and its backward):"
  echo "  product           M       N       K    calls   ms total  % step   GFLOP/s"
  echo "  bwd din+dw    32768    3072    1024       56     80.000    13.3     650.0"
  echo "  fwd           32768    3072    1024       56     30.000     5.0     700.0"
  echo "sub-steps, cuda backend (parts of the ops above, each synchronized; 3 parts):"
  echo "  part                                  calls   ms total    ms/call  % step"
  echo "  attention_bwd.dkv                        28    120.000     4.2857    20.0"
  echo "  compressor_bwd.dw_gemm                   56     30.000     0.5357     5.0"
  echo "  classifier.cross_entropy                 10      9.500     0.9500     1.6"
}
echo "bench_cuda: Qwen3-0.6B shape, T=4096, micro-batch $1 (32768 tokens/step), peak 989 TFLOP/s"
echo "bench_cuda full attention, 8 KV heads            60000 tokens/s  MFU  20.0%  step 0.546 s (forward 0.150 s)  peak memory 40.00 GiB  loss 12.000  params 596.0M"
table "full attention, 8 KV heads"
[ "${PHASELAB_CUDNN_ATTN_BWD:-}" = 0 ] && exec sleep 100
echo "bench_cuda compressed W8/S8, 8 KV heads          70000 tokens/s  MFU  24.0%  step 0.468 s (forward 0.140 s)  peak memory 38.00 GiB  loss 12.000  params 600.0M"
table "compressed W8/S8, 8 KV heads"
echo "bench_cuda compressed W8/S8, 1 KV head           65000 tokens/s  MFU  22.0%  step 0.504 s (forward 0.140 s)  peak memory 37.00 GiB  loss 12.000  params 590.0M"
table "compressed W8/S8, 1 KV head"
FAKE
cat > "$E/bundle/bin/train" <<'FAKE'
#!/bin/sh
case "$1" in
  --make-synthetic) mkdir -p "$2" && : > "$2/train_000.bin"; exit 0 ;;
  --help) printf '[run]\n  deterministic = false              fake\n'; exit 0 ;;
esac
dir=""; name=""
for a in "$@"; do case "$a" in run.dir=*) dir=${a#run.dir=} ;; run.name=*) name=${a#run.name=} ;; esac; done
echo "phaselab fake | run $dir/$name | world 1 | backend cuda"
echo "step 20/20 | loss 1.2345 | lr 3e-3"
c=$dir/$name/checkpoints/step_00000020
mkdir -p "$c/optimizer"
echo "weights of $*" | sed 's/run.name=[a-z]*_[0-9]//' > "$c/model.safetensors"
[ -n "${FAKE_NONDET:-}" ] && case "$name" in *_2) echo "other bits" >> "$c/model.safetensors" ;; esac
echo "optimizer" > "$c/optimizer/rank_00000.bin"
FAKE
cat > "$E/sbin/compute-sanitizer" <<'FAKE'
#!/bin/sh
tool=memcheck; [ "$1" = --tool ] && tool=$2
case "$tool" in racecheck) echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ;;
                *) echo "========= ERROR SUMMARY: 0 errors" ;; esac
FAKE
chmod +x "$E/bundle/bin/"* "$E/sbin/compute-sanitizer"
t0=$(date +%s)
PATH="$S/fakebin:$E/sbin:$PATH" OUT=$E/out CHECK_DEADLINE=100 PHASELAB_GPU_BUNDLE=$E/bundle bash "$CHECK" > "$E/stdout" 2>&1
rc=$?
took=$(( $(date +%s) - t0 ))
SUM=$E/out/summary.txt
if [ -s "$SUM" ]; then
  check_format "$SUM" E
  grep -q '^overall: pass' "$SUM" && [ "$rc" -eq 0 ] && ok "E: every phase passes or skips: overall pass, exit 0" \
    || nok "E: rc $rc; $(grep -vE '^(  |# )' "$SUM" | grep -vE ': (pass|skip)' | tr '\n' '|')"
  [[ "$(v_of cudnn "$SUM")" == "cudnn: pass: 3 ok, 1 declined by cuDNN (skips)"* ]] \
    && ok "E: a shape cuDNN declines is a skip, not a failure" || nok "E: cudnn verdict '$(v_of cudnn "$SUM")'"
  nb=$(grep -cE '^  bench\.(full_attention_8_kv_heads|compressed_w8_s8_8_kv_heads|compressed_w8_s8_1_kv_head|full_attention_8_kv_heads_custom_bwd) = [0-9]+ tokens/s' "$SUM")
  [ "$nb" -eq 4 ] && [ "$took" -lt 40 ] && ok "E: 4 bench figures (3 cases + full with the custom backward, stopped after its case); ${took}s" \
    || nok "E: $nb of 4 bench figures, ${took}s: $(grep '  bench\.' "$SUM" | tr '\n' '|')"
  np=$(grep -cE '^  bench\.per_op_(full_attention_8_kv_heads|compressed_w8_s8_8_kv_heads|compressed_w8_s8_1_kv_head) = attention_bwd 160\.000 ms 26\.7% 512\.0 GFLOP/s; matmul_bwd .*rmsnorm_fwd 10\.000 ms 1\.7% 2500\.0 GB/s; between ops 5\.000 ms 0\.8%$' "$SUM")
  grep -q '^  bench\.gemm_compressed_w8_s8_1_kv_head = bwd din+dw \[32768,3072,1024\] 80\.000 ms 650\.0 GFLOP/s; fwd \[32768,3072,1024\] 30\.000 ms 700\.0 GFLOP/s$' "$SUM" \
    && [ "$np" -eq 3 ] && ! grep -q 'per_op_full_attention_8_kv_heads_custom' "$SUM" \
    && ok "E: the per-op table of each bench case (BENCH_PROFILE=1) becomes bench.per_op_CASE and bench.gemm_CASE" \
    || nok "E: $np of 3 per-op figures: $(grep -E '  bench\.(per_op|gemm)' "$SUM" | tr '\n' '|')"
  nparts=$(grep -cE '^  bench\.parts_(full_attention_8_kv_heads|compressed_w8_s8_8_kv_heads|compressed_w8_s8_1_kv_head) = attention_bwd\.dkv 120\.000 ms 20\.0%; compressor_bwd\.dw_gemm 30\.000 ms 5\.0%; classifier\.cross_entropy 9\.500 ms 1\.6%$' "$SUM")
  [ "$nparts" -eq 3 ] && ok "E: the sub-step table of each bench case becomes bench.parts_CASE" \
    || nok "E: $nparts of 3 parts figures: $(grep -E '  bench\.parts' "$SUM" | tr '\n' '|')"
  grep -q '^  rerun.compressed = identical' "$SUM" && grep -q '^  rerun.full = identical' "$SUM" \
    && grep -q '^  rerun.setup = .*run.deterministic=true' "$SUM" \
    && ok "E: rerun compares both variants' checkpoints (and asks for run.deterministic)" \
    || nok "E: rerun figures: $(grep '  rerun\.' "$SUM" | tr '\n' '|')"
else
  nok "E: no summary.txt ($(tail -n 3 "$E/stdout" | tr '\n' '|'))"
fi
PATH="$S/fakebin:$PATH" OUT=$E/out2 CHECK_DEADLINE=60 CHECK_PHASES=rerun FAKE_NONDET=1 PHASELAB_GPU_BUNDLE=$E/bundle \
  bash "$CHECK" > "$E/stdout2" 2>&1
rc=$?
SUM=$E/out2/summary.txt
listed=$(grep -E '^[a-z_]+: ' "$SUM" 2>/dev/null | cut -d: -f1 | tr '\n' ' ')
[[ "$(v_of rerun "$SUM")" == "rerun: fail:"*"different checkpoints"* ]] && [ "$listed" = "libs machine rerun overall " ] && [ "$rc" -ne 0 ] \
  && ok "E: CHECK_PHASES=rerun runs that phase alone; different checkpoint bytes fail it" \
  || nok "E: CHECK_PHASES=rerun: phases '$listed', rerun '$(v_of rerun "$SUM")', rc $rc"
exit 0
