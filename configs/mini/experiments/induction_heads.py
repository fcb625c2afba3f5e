#!/usr/bin/env python3
"""Round 5/6 of configs/mini/README.md (issue 15): how far a checkpoint's attention is from an
induction circuit on the synthetic key/value corpus. An experiment helper, not part of the tool.

    induction_heads.py CHECKPOINT_DIR VAL_SHARD [--rows 16]

Opens the checkpoint in transformers (AutoModelForCausalLM, eager attention) and runs the first
--rows rows of the shard (1024-byte header, then uint32 tokens; rows of 256 tokens, the layout
of data/synth.h: keys 16..79, values 80..207). Prints, per layer and head:
  previous-token weight  the attention weight a value puts on the key just before it (the
                         circuit's first half), averaged over every value that follows a key;
  induction weight       at a key already seen in the row, past position 128, the weight on the
                         positions j whose token j-1 is that key (the values that followed its
                         earlier copies: the circuit's second half), with the same sum under
                         uniform attention for comparison;
and the answers-only loss (the value after a repeated key, as loss_targets = answers counts it).
Needs torch and transformers (make hf-venv)."""
import argparse

import numpy as np
import torch
from transformers import AutoModelForCausalLM

KEY0, N_KEYS, VALUE0, N_VALUES, T = 16, 64, 80, 128, 256

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("checkpoint")
ap.add_argument("val_shard")
ap.add_argument("--rows", type=int, default=16)
a = ap.parse_args()

rows = np.fromfile(a.val_shard, dtype=np.uint32, offset=1024)[: a.rows * T].reshape(a.rows, T).astype(np.int64)
model = AutoModelForCausalLM.from_pretrained(a.checkpoint, attn_implementation="eager", trust_remote_code=True).eval()
with torch.no_grad():
    out = model(torch.tensor(rows), output_attentions=True)
logp = torch.log_softmax(out.logits.float(), -1)
att = [x.numpy() for x in out.attentions]                      # per layer [rows, H, T, T]
n_layers, n_heads = len(att), att[0].shape[1]


def is_key(x):
    return KEY0 <= x < KEY0 + N_KEYS


prev, induction = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
n_prev = n_induction = 0
uniform = 0.0
answer_nll = []
for b, tok in enumerate(rows.tolist()):
    seen = set()
    for t in range(1, T - 1):
        x = tok[t]
        if VALUE0 <= x < VALUE0 + N_VALUES and is_key(tok[t - 1]):
            prev += np.stack([att[l][b, :, t, t - 1] for l in range(n_layers)])
            n_prev += 1
        if not is_key(x):
            continue
        if x in seen:
            answer_nll.append(-float(logp[b, t, tok[t + 1]]))
            if t >= 128:
                js = [j for j in range(1, t) if tok[j - 1] == x]
                induction += np.stack([att[l][b, :, t][:, js].sum(-1) for l in range(n_layers)])
                uniform += len(js) / (t + 1)
                n_induction += 1
        seen.add(x)

np.set_printoptions(precision=3, suppress=True)
print(f"{a.checkpoint}: answers loss {np.mean(answer_nll):.3f} over {len(answer_nll)} answers; "
      f"induction weight of uniform attention {uniform / max(n_induction, 1):.3f}")
for l in range(n_layers):
    print(f"  layer {l}: previous-token weight at values {prev[l] / max(n_prev, 1)}  "
          f"induction weight {induction[l] / max(n_induction, 1)}")
