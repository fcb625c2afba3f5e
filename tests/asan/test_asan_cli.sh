#!/usr/bin/env bash
# make test-asan only (mk/asan.mk copies it to build-asan/tests/test_asan_cli): the programs
# built with ASan + UBSan, build-asan/bin/train and build-asan/bin/tokenize, through their main
# paths: --help, --summary of the shipped configs, a bad config, a synthetic corpus, a short
# training run with checkpoints and evaluation, its resumption, a run with run.threads=80 (above
# OpenBLAS's cap of 64), and ./tokenize on a small JSONL corpus with the byte tokenizer. A
# sanitizer report makes the program exit non-zero, which fails the check.
# Scratch: build-asan/scratch/test_asan_cli/.
set -u
cd "$(dirname "$0")/../.."
B=${BUILD:-build-asan}
T=$B/bin/train; K=$B/bin/tokenize
S=$B/scratch/test_asan_cli
rm -rf "$S"; mkdir -p "$S"

run() {  # run NAME CMD...: ok when CMD exits 0 and no sanitizer spoke
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] && ! grep -q 'runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' <<<"$out"; then
    echo "ok - asan cli: $name"
  else
    echo "not ok - asan cli: $name: exit $rc: $(grep -m3 'runtime error\|SUMMARY\|ERROR\|phaselab' <<<"$out" | tr '\n' ' ' | cut -c1-400)"
  fi
}
rejects() {  # rejects NAME CMD...: ok when CMD exits with 1 or 2 (an error message, no crash)
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if { [ $rc -eq 1 ] || [ $rc -eq 2 ]; } && ! grep -q 'runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' <<<"$out"; then
    echo "ok - asan cli: $name"
  else
    echo "not ok - asan cli: $name: exit $rc: $(grep -m3 'runtime error\|SUMMARY\|ERROR' <<<"$out" | tr '\n' ' ' | cut -c1-400)"
  fi
}

run "train --help" "$T" --help
for c in configs/demo.ini configs/paper/full_kv8.ini configs/test/tiny.ini; do
  run "train --summary $c" "$T" --summary "$c"
done
printf '[model]\nd_model = banana\n' >"$S/bad.ini"
rejects "train --dry-run of a bad config" "$T" --dry-run "$S/bad.ini"
run "train --make-synthetic" "$T" --make-synthetic "$S/data" --seq-len 64 --train-rows 300 --val-rows 16
common=(configs/test/tiny.ini "data.train=$S/data/train_*.bin" "data.val=$S/data/val_*.bin" "run.dir=$S/runs"
        run.name=r train.batch_tokens=256 eval.every=3 eval.val_tokens=256 checkpoint.every=2 checkpoint.keep=2 run.threads=1)
run "train: 4 steps with checkpoints and evaluation" "$T" "${common[@]}" train.steps=4
run "train: resume to 6 steps" "$T" "${common[@]}" train.steps=6 train.resume_schedule=stretch
run "train --dry-run of that run" "$T" --dry-run "${common[@]}" train.steps=6
# more threads than OpenBLAS runs (64): capped with one line, no per-thread buffer overflow (issue 37)
run "train: run.threads=80, above the BLAS's thread cap" "$T" "${common[@]}" run.name=t80 train.steps=2 run.threads=80
mkdir -p "$S/corpus"
printf '{"text": "hello world"}\n\n{"text": "caf\\u00e9 \\ud83d\\ude00"}\n{"id": 1}\n{"text": "bad \xff utf-8"}\n' >"$S/corpus/a.jsonl"
printf 'a text document\nof two lines\n\nand another\n' >"$S/corpus/b.txt"
run "tokenize: bytes tokenizer, JSONL + TXT" "$K" --tokenizer bytes --input "$S/corpus/*" --out "$S/tok" \
    --shard-tokens 16 --val-tokens 8 --threads 2 --quiet
run "tokenize: rerun of a finished directory" "$K" --tokenizer bytes --input "$S/corpus/*" --out "$S/tok" \
    --shard-tokens 16 --val-tokens 8 --threads 2 --quiet
