"""End-to-end training on the CPU (issue 3): exact resume after SIGKILL and SIGTERM, HDF5 metrics
read live and after the run with no duplicated steps, checkpoint retention, resume refusal,
and a full-attention checkpoint checked against the HuggingFace Qwen3 layout and the NumPy
reference model (its validation loss must equal the trainer's own)."""
import json
import os
import random
import signal
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()

d, data = tu.scratch_with_corpus("test_train_resume")
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs"]


def losses(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r", swmr=True) as f:
        return f["train/step"][...], f["train/loss"][...], f["val/step"][...], f["val/loss"][...]


# --- A: uninterrupted reference run
rc, out = tu.run(common + ["run.name=A"])
check(rc == 0, "uninterrupted run exits 0", out[-500:])
stepA, lossA, vstepA, vlossA = losses("A")
check(list(stepA) == list(range(1, 31)), "one /train row per step", f"steps {list(stepA)}")
check(np.all(np.isfinite(lossA)) and lossA[-1] < lossA[0], "loss finite and decreasing", f"{lossA[0]} -> {lossA[-1]}")
ck = sorted(os.listdir(f"{d}/runs/A/checkpoints"))
check(ck == ["step_00000020", "step_00000025", "step_00000030"], "checkpoint.keep = 3 keeps the newest three", str(ck))

# --- B: SIGKILL at a random step, live SWMR read, then resume
rng = random.Random(os.getpid())
kill_at = rng.randint(7, 24)
# one compute thread at the lowest priority: the poller gets the CPU first, so a fast run on a
# loaded 2-core machine cannot end before the poller sees the kill step (seen in CI and under load)
p = tu.start(common + ["run.name=B", "run.threads=1"], nice=19)
log = f"{d}/runs/B/log.txt"
reached = tu.wait_for_line(log, f" {kill_at}/30", p)   # the log pads: "step  7/30"
live_rows = -1
if reached:
    try:
        with h5py.File(f"{d}/runs/B/metrics.h5", "r", swmr=True) as f:
            f["train/step"].refresh()
            live_rows = len(f["train/step"])
    except Exception as e:  # noqa: BLE001
        live_rows = f"error {e}"
    p.send_signal(signal.SIGKILL)
p.wait()
check(reached, f"run B reached step {kill_at} before SIGKILL", "it ended first")
check(isinstance(live_rows, int) and live_rows >= 1, "h5py reads metrics.h5 (SWMR) while training runs", str(live_rows))
rc, out = tu.run(common + ["run.name=B"])
check(rc == 0 and "resumed from" in out, "rerun after SIGKILL resumes", out[-400:])
stepB, lossB, vstepB, vlossB = losses("B")
check(list(stepB) == list(range(1, 31)), "no step logged twice after resume", f"{list(stepB)}")
check(lossB.tobytes() == lossA.tobytes(), f"losses after SIGKILL at step {kill_at} + resume are bitwise identical",
      f"first difference at step {int(np.argmax(lossA != lossB)) + 1}: {lossA} vs {lossB}")
check(vlossB.tobytes() == vlossA.tobytes() and list(vstepB) == list(vstepA), "validation rows identical too",
      f"{vstepA} {vlossA} vs {vstepB} {vlossB}")
wa = open(f"{d}/runs/A/checkpoints/step_00000030/model.safetensors", "rb").read()
wb = open(f"{d}/runs/B/checkpoints/step_00000030/model.safetensors", "rb").read()
check(wa == wb, "final weights bitwise identical", "model.safetensors differ")

# --- C: SIGTERM writes a checkpoint and exits 0; the resume continues identically
p = tu.start(common + ["run.name=C", "checkpoint.every=100"], nice=19)
reached = tu.wait_for_line(f"{d}/runs/C/log.txt", "step 12/30", p)
p.send_signal(signal.SIGTERM)
out = p.communicate()[0]
check(reached and p.returncode == 0, "SIGTERM: exit status 0", f"status {p.returncode}: {out[-300:]}")
stopped = [l for l in out.splitlines() if l.startswith("signal 15")]
ck = sorted(os.listdir(f"{d}/runs/C/checkpoints"))
check(len(stopped) == 1 and len(ck) == 1, "SIGTERM leaves exactly one checkpoint at the step it stopped", f"{stopped} {ck}")
rc, out = tu.run(common + ["run.name=C", "checkpoint.every=100"])
stepC, lossC, _, _ = losses("C")
check(rc == 0 and lossC.tobytes() == lossA.tobytes(), "resume after SIGTERM is bitwise identical", out[-300:])

# --- D: resume refusal and harmless changes
rc, out = tu.run(common + ["run.name=A", "model.d_model=48"])
check(rc == 2 and "refusing to resume" in out and "[model]" in out and "model.d_model 32 -> 48" in out,
      "a changed model is refused (exit 2), naming the key and both values", out[-300:])
rc, out = tu.run(common + ["run.name=A", "eval.residues=16"])
check(rc == 2 and "refusing to resume" in out and "eval.residues differs (24 in the run, 16 now" in out and "damaged" not in out,
      "a changed eval.residues is refused (exit 2) as a config change, not reported as a damaged metrics file", out[-300:])
rc, out = tu.run(common + ["run.name=A", "train.seed=8"])
check(rc == 2 and "train.seed" in out, "a changed seed is refused", out[-300:])
rc, out = tu.run(common + ["run.name=A", "train.steps=33", "eval.every=0"])
check(rc == 2 and "refusing to resume" in out and "train.resume_schedule=keep" in out and "stretch" in out,
      "more steps without train.resume_schedule is refused (exit 2), naming the key", out[-400:])
rc, out = tu.run(common + ["run.name=A", "train.steps=33", "eval.every=0", "train.resume_schedule=stretch"])
stepA2, lossA2, _, _ = losses("A")
check(rc == 0 and list(stepA2) == list(range(1, 34)) and lossA2[:30].tobytes() == lossA.tobytes(),
      "more steps with train.resume_schedule=stretch: the run continues from step 30", out[-300:])
rc, out = tu.run(["--dry-run"] + common + ["run.name=A", "train.steps=33", "train.resume_schedule=stretch", "run.threads=2"])
rc2, out2 = tu.run(["--dry-run"] + common + ["run.name=A", "train.steps=33", "train.resume_schedule=stretch"])
check(rc == 0 and "run.threads: sums change order, not bitwise identical" in out and rc2 == 0 and "run.threads" not in out2,
      "a resume with another run.threads says it is not bitwise identical (and only then)", (out + out2)[-400:])

# --- D2: the rotation keeps a checkpoint that holds an analysis result (trainer/checkpoint.h)
rc, out = tu.run(common + ["run.name=K", "train.steps=10", "eval.every=0"])
k5 = f"{d}/runs/K/checkpoints/step_00000005"
rc_e, out_e = tu.run(["--eval", k5])
has_result = os.path.isfile(f"{k5}/analysis.h5")
check(rc == 0 and rc_e == 0 and has_result, "run K to step 10, then --eval of step 5 writes its analysis.h5", (out + out_e)[-300:])
rc, out = tu.run(common + ["run.name=K", "train.steps=30", "eval.every=0", "train.resume_schedule=stretch"])
ck = sorted(os.listdir(f"{d}/runs/K/checkpoints"))
notes = [l for l in out.splitlines() if "keeping" in l and "step_00000005" in l and "analysis.h5" in l]
check(rc == 0 and ck == ["step_00000005", "step_00000020", "step_00000025", "step_00000030"] and len(notes) == 1
      and os.path.isfile(f"{k5}/analysis.h5"),
      "resumed to step 30 (checkpoint.keep = 3): step 5 with its analysis.h5 is kept, said once; 10 and 15 are rotated out",
      f"rc {rc}: {ck}; notes {notes}; {out[-300:]}")

# --- a schedule that is all warm-up is said at start (by --dry-run too); a long enough one is not
rc, out = tu.run(["--dry-run"] + common + ["run.name=W", "train.steps=5", "train.warmup_steps=10"])
rc2, out2 = tu.run(["--dry-run"] + common + ["run.name=W", "train.steps=50", "train.warmup_steps=10"])
check(rc == 0 and "warning: train.warmup_steps = 10 is above the schedule's 5 steps" in out and rc2 == 0
      and "warm-up" not in out2, "--dry-run warns when the whole run is warm-up, and only then", out[-300:] + out2[-200:])

# --- a run directory where a checkpoint is expected: exit 2 naming the newest checkpoint to give
for cmd in (["--eval"], ["--score"], ["--generate"]):
    extra = {"--score": ["--input", "x"], "--generate": ["--prompt-ids", "x"]}.get(cmd[0], [])
    rc, out = tu.run(cmd + [f"{d}/runs/K"] + extra)
    check(rc == 2 and "a run directory, not a checkpoint" in out and f"{d}/runs/K/checkpoints/step_00000030" in out,
          f"{cmd[0]} RUN: exit 2, naming the newest checkpoint", out[-300:])

# --- misplaced options get a message that says what to do, exit 2
kck = f"{d}/runs/K/checkpoints/step_00000030"
open(f"{d}/empty.ids", "w").close()
open(f"{d}/one.ids", "w").write("5\n")
for args, words in [(["--eval", kck, "--decode", "--knockout", "0:1"], ["--decode: only with a plain --eval"]),
                    (["--generate", kck, "--prompt-ids", f"{d}/one.ids", "--dry-run"], ["--generate: unknown option --dry-run"]),
                    (["--generate", kck, "--prompt-ids", f"{d}/empty.ids"], [f"--prompt-ids {d}/empty.ids: the prompt has no tokens"]),
                    ([common[0], "--dry-run"], ["options go before the config", "./train --dry-run CONFIG.ini"])]:
    rc, out = tu.run(args)
    check(rc == 2 and all(w in out for w in words), f"{' '.join(a for a in args if not a.startswith('/'))}: exit 2, {words[0]!r}",
          out[-300:])

# --- E: a full-attention checkpoint in the HuggingFace Qwen3 layout, its loss = the trainer's
rc, out = tu.run(common + ["run.name=F", "model.attention=full", "train.steps=10", "eval.every=0"])
check(rc == 0, "full-attention run", out[-300:])
cdir = f"{d}/runs/F/checkpoints/step_00000010"
raw = open(f"{cdir}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
names = sorted(k for k in header if k != "__metadata__")
L, D, H, G, dh, F, V = 2, 32, 4, 2, 8, 64, 256
want = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D]}
for l in range(L):
    p_ = f"model.layers.{l}."
    want.update({p_ + "input_layernorm.weight": [D], p_ + "post_attention_layernorm.weight": [D],
                 p_ + "self_attn.q_proj.weight": [H * dh, D], p_ + "self_attn.k_proj.weight": [G * dh, D],
                 p_ + "self_attn.v_proj.weight": [G * dh, D], p_ + "self_attn.o_proj.weight": [D, H * dh],
                 p_ + "self_attn.q_norm.weight": [dh], p_ + "self_attn.k_norm.weight": [dh],
                 p_ + "mlp.gate_proj.weight": [F, D], p_ + "mlp.up_proj.weight": [F, D], p_ + "mlp.down_proj.weight": [D, F]})
check(names == sorted(want), "safetensors holds exactly the HF Qwen3 tensor names (tied: no lm_head)",
      f"extra {set(names) - set(want)}, missing {set(want) - set(names)}")
check(all(header[k]["shape"] == want[k] and header[k]["dtype"] == "F32" for k in want), "HF shapes and dtype F32",
      "shape/dtype mismatch")
hf = json.load(open(f"{cdir}/config.json"))
check(hf.get("architectures") == ["Qwen3ForCausalLM"] and hf["model_type"] == "qwen3" and hf["hidden_size"] == D
      and hf["num_key_value_heads"] == G and hf["head_dim"] == dh and hf["tie_word_embeddings"] is True,
      "config.json describes a Qwen3ForCausalLM", str(hf))
try:
    import transformers  # noqa: F401
    skip("transformers loads the checkpoint", "covered by the NumPy reference below")
except ImportError:
    pass
sys.path.insert(0, os.path.join(tu.ROOT, "tests", "ref"))
import spec_model  # noqa: E402
import safetensors_io  # noqa: E402

weights, _ = safetensors_io.load(f"{cdir}/model.safetensors")
cfg = spec_model.parse_ini(f"{cdir}/config.ini")
toks = np.fromfile(f"{data}/val_000.bin", dtype=np.uint32, offset=1024).astype(np.int64)
T, nwin = 64, 512 // 64
wins = np.stack([toks[k * T:k * T + T + 1] for k in range(nwin)])
logits = spec_model.forward(cfg, weights, wins[:, :T])
lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
tgt = wins[:, 1:]
ref_loss = float(np.mean(lse - np.take_along_axis(logits, tgt[..., None], -1)[..., 0]))
rc, out = tu.run(["--eval", cdir, f"data.val={data}/val_*.bin"])
line = [l for l in out.splitlines() if l.startswith("validation loss")]
trainer_loss = float(line[0].split()[2]) if line else float("nan")
check(abs(ref_loss - trainer_loss) <= 1e-4 * abs(ref_loss), "checkpoint loss (NumPy reference) = trainer's own",
      f"reference {ref_loss:.6f} vs trainer {trainer_loss:.6f}")
finish()
