#!/usr/bin/env bash
# ./train --generate and ./train --eval --decode on a tiny trained checkpoint (CPU, one thread):
#   - greedy generation from --prompt-ids streams the prompt then the new ids, prints prefill and
#     decode tokens/s and the cache bytes measured from the allocations, which must equal the
#     figure worked out here by hand from the config (docs/spec.md shapes, fp32 elements);
#   - --prompt TEXT with a tokenizer streams text; sampling is reproducible from --seed;
#   - a context past the training seq_len works (RoPE positions continue);
#   - the lookup probe scored through the KV cache (--decode) gives the same table as --eval;
#   - --summary (and --dry-run) print the cache table (measured = formula) and the saving vs full attention;
#   - usage errors exit 2.
set -u
cd "$(dirname "$0")/.."
S=build/scratch/test_generate
rm -rf "$S"; mkdir -p "$S"
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1: $2"; }

./train --make-synthetic "$S/synth" --seq-len 256 --train-rows 200 --val-rows 4 >/dev/null
./train configs/test/tiny_w4s4.ini data.train="$S/synth/train_*.bin" data.val="$S/synth/val_*.bin" data.seq_len=256 \
  train.batch_tokens=1024 run.dir="$S" run.name=w4 train.steps=6 checkpoint.every=6 eval.every=6 >"$S/train.log" 2>&1 \
  || { bad "tiny training run" "$(tail -3 "$S/train.log")"; exit 1; }
C=$S/w4/checkpoints/step_00000006

echo "16 80 17 81, 18 82 16" > "$S/prompt.txt"
./train --generate "$C" --prompt-ids "$S/prompt.txt" --max-new 12 >"$S/g1.out" 2>"$S/g1.err"; rc=$?
n_new=$(sed 's/.*|//' "$S/g1.out" | wc -w)
[ $rc -eq 0 ] && grep -q "^16 80 17 81 18 82 16 |" "$S/g1.out" && [ "$n_new" -eq 12 ] \
  && ok "--generate --prompt-ids: prompt echoed, 12 new ids streamed" || bad "--generate ids" "rc $rc: $(cat "$S/g1.out" "$S/g1.err")"
grep -qE "^prefill: 7 tokens in .* tokens/s \(one chunk\)" "$S/g1.err" && grep -qE "^decode: 12 tokens generated, 11 decode steps .* tokens/s; greedy; peak RSS" "$S/g1.err" \
  && ok "--generate reports prefill and decode tokens/s and peak memory" || bad "throughput lines" "$(cat "$S/g1.err")"
# context 7 + 12 = 19, tiny_w4s4: W4 S4, n_local 8, G 2, d 8, D 32, 2 layers, fp32:
# entries (19-4)/4+1 = 4 -> 4*2*8*4 B * 2 (K, V) = 512; raw 2*8*2*8*4 = 1024; inputs 4*32*4 = 512 -> 2048 per layer
grep -q "measured from the allocations: 2048 B = 2.00 KiB per layer, 4.00 KiB in 2 layers .*= 2048 B per layer, equal\]" "$S/g1.err" \
  && ok "--generate: cache bytes measured from the allocations = 2048 B per layer (worked by hand)" \
  || bad "cache bytes" "$(grep "KV cache" "$S/g1.err")"
# full attention, 19 tokens: 2 * 19 * 2 * 8 * 4 B = 2432 per layer, 4864 = 4.75 KiB in 2 layers
grep -q "full attention at 19 tokens: 4.75 KiB" "$S/g1.err" && ok "--generate: full attention's cache beside it" \
  || bad "full cache" "$(grep "KV cache" "$S/g1.err")"

./train --generate "$C" --prompt-ids "$S/prompt.txt" --max-new 12 --stepwise-prefill >"$S/g2.out" 2>"$S/g2.err"; rc=$?
[ $rc -eq 0 ] && cmp -s "$S/g1.out" "$S/g2.out" && grep -q "(token by token through the cache)" "$S/g2.err" \
  && ok "--stepwise-prefill generates the same greedy tokens as the chunked prefill" || bad "stepwise" "rc $rc: $(cat "$S/g2.out" "$S/g2.err")"

./train --generate "$C" --prompt-ids "$S/prompt.txt" --max-new 12 model.local=tail >"$S/g1t.out" 2>"$S/g1t.err"; rc=$?
[ $rc -eq 0 ] && grep -q "measured from the allocations: 1408 B" "$S/g1t.err" \
  && ok "--generate with local = tail: ring of max(W,S)-1 = 3 slots: 512 + 384 + 512 = 1408 B per layer" || bad "tail cache" "rc $rc: $(cat "$S/g1t.err")"

for s in 5 5 6; do
  ./train --generate "$C" --prompt "key" --tokenizer bytes --max-new 40 --temperature 1.5 --top-k 50 --seed $s \
    --context 400 >"$S/s$s.$RANDOM.out" 2>>"$S/s.err" || echo fail >>"$S/s.err"
done
a=( "$S"/s5.*.out ); b=( "$S"/s6.*.out )
if ! grep -q fail "$S/s.err" && [ ${#a[@]} -eq 2 ] && cmp -s "${a[0]}" "${a[1]}" && ! cmp -s "${a[0]}" "${b[0]}"; then
  ok "--prompt TEXT --tokenizer: sampling is reproducible from --seed and differs across seeds"
else bad "sampling" "$(cat "$S/s.err")"; fi
head -c 3 "${a[0]}" | grep -q "^key" && ok "--prompt TEXT: the prompt text is echoed and the continuation streamed as text" \
  || bad "text stream" "$(head -c 80 "${a[0]}")"
grep -q "cache for 400 positions (training seq_len 256); past seq_len the RoPE positions continue" "$S/s.err" \
  && ok "--generate past the training seq_len" || bad "past seq_len" "$(head -3 "$S/s.err")"

tools/make-probe --synthetic --out "$S/probe.bin" --per-residue 4 --max-len 256 --quiet >/dev/null
./train --eval "$C" --probe "$S/probe.bin" >"$S/e1.txt" 2>&1; r1=$?
./train --eval "$C" --probe "$S/probe.bin" --decode >"$S/e2.txt" 2>&1; r2=$?
grep -q "through incremental decoding" "$S/e2.txt" && [ $r1 -eq 0 ] && [ $r2 -eq 0 ] \
  && diff <(grep -v "^lookup probe \|^stored /" "$S/e1.txt") <(grep -v "^lookup probe \|^stored /" "$S/e2.txt") >/dev/null \
  && [ "$(grep -c "/" "$S/e2.txt")" -ge 24 ] \
  && ok "--eval --decode: the probe table through the KV cache equals --eval's" \
  || bad "--eval --decode" "rc $r1/$r2: $(diff "$S/e1.txt" "$S/e2.txt" | head -8)"

out=$(./train --summary configs/w8s8_kv8.ini 2>&1)
grep -qE "^ +32768 +16.08 MiB \(16.00 MiB\+64.00 KiB\+16.00 KiB\) +450.19 MiB +\| 128.00 MiB +3.50 GiB +\| +8.0x" <<<"$out" \
  && grep -q "counting backend equals the formula" <<<"$out" \
  && ok "--summary: Qwen3-0.6B shape W8/S8 cache at 32K = 16.08 MiB/layer vs full 128 MiB (bf16)" \
  || bad "--summary cache table" "$(grep -A8 "KV cache" <<<"$out")"

./train --generate "$C" --prompt "x" >/dev/null 2>&1; r1=$?
echo "16 999" > "$S/badids.txt"
out=$(./train --generate "$C" --prompt-ids "$S/badids.txt" 2>&1); r2=$?
[ $r1 -eq 2 ] && [ $r2 -eq 2 ] && grep -q "prompt token 1 is id 999, outside the model's vocabulary 0..255" <<<"$out" \
  && ok "--generate usage errors exit 2 (no tokenizer for text, id outside the vocabulary)" || bad "usage errors" "$r1 $r2 $out"
