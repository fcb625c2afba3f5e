#!/usr/bin/env bash
# The ./train command line: --help lists every key with its meaning, --summary validates the
# config alone and prints the summary (the Qwen3-0.6B full-attention shape with tied embeddings has exactly
# 596,049,920 parameters, the number HuggingFace reports for Qwen3-0.6B), and a bad value in a
# config file stops with exit status 2 and a message naming the file, the line and the key.
set -u
cd "$(dirname "$0")/.."
S=build/scratch/test_cli
rm -rf "$S"; mkdir -p "$S"
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1: $2"; }

out=$(./train --help 2>&1); rc=$?
n_keys=$(grep -cE '^  [a-z_0-9]+ = ' <<<"$out")
[ $rc -eq 0 ] && [ "$n_keys" -ge 45 ] && grep -q "compressor = paper" <<<"$out" && grep -q "^\[eval\]" <<<"$out" \
  && ok "--help lists every key with its default ($n_keys keys)" || bad "--help" "rc $rc, $n_keys keys"

out=$(./train --summary configs/paper/full_kv8.ini 2>&1); rc=$?
grep -q "^parameters: 596049920$" <<<"$out" && [ $rc -eq 0 ] && ok "--summary: Qwen3-0.6B has 596049920 parameters" \
  || bad "--summary parameter count" "$(grep parameters <<<"$out")"
grep -q "FLOPs per token" <<<"$out" && grep -q "memory plan per rank" <<<"$out" && grep -q "model.layers.27.mlp.down_proj.weight" <<<"$out" \
  && ok "--summary prints FLOPs per token, the memory plan and the tensor table" || bad "--summary" "$out"

out=$(./train --summary configs/paper/w8s8_kv1_seed42.ini 2>&1)
grep -q "self_attn.compressor.k_payload.weight  *\[1, 8, 128, 1024\]" <<<"$out" \
  && grep -q "self_attn.compressor.k_gate.weight  *\[1, 8, 1, 1024\]" <<<"$out" \
  && ok "--summary shows the compressor tensors with docs/spec.md names and shapes" || bad "compressor tensors" "$(grep compressor <<<"$out" | head -3)"

printf '[model]\nd_model = 64\nn_heads = 6\nn_kv_heads = 4\n' > "$S/bad.ini"
out=$(./train --dry-run "$S/bad.ini" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "bad.ini:4: \[model\] n_kv_heads" <<<"$out" && ok "n_heads not a multiple of n_kv_heads: exit 2, file:line:key" \
  || bad "GQA error" "rc $rc: $out"
printf '[model]\nattention = compressed\nwindow = 8\nstride = 3\ncompressor = deepseek\n' > "$S/ds.ini"
out=$(./train --dry-run "$S/ds.ini" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "ds.ini:3: \[model\] window" <<<"$out" && ok "deepseek without window = 2 x stride: exit 2" || bad "deepseek" "rc $rc: $out"
out=$(./train --dry-run configs/demo.ini model.rope_dims=7 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "command line: model.rope_dims" <<<"$out" && ok "bad override names the command line key" || bad "override" "rc $rc: $out"
printf '[model]\nwidth = 3\n' > "$S/unk.ini"
out=$(./train --dry-run "$S/unk.ini" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unk.ini:2: \[model\] width" <<<"$out" && ok "unknown key: exit 2" || bad "unknown key" "rc $rc: $out"
out=$(./train --bogus 2>&1); rc=$?
[ $rc -eq 2 ] && ok "unknown option: exit 2" || bad "unknown option" "rc $rc"
