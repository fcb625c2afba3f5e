"""The per-layer attention schedule from the command line (docs/spec.md §5, model/layer_kinds.h):
a bad schedule or kind key stops with exit 2 and one line naming the key; --summary shows the
stack by kind with its parameters, FLOPs and cache bytes; a tiny mixed stack (window, csa, hca)
trains, checkpoints, evaluates and generates, and its generation through the decoder's cache
prints the cache by kind; with the lightning indexer the KL is logged every step (dense during the
warm-up), stored as /train/indexer_kl, and the checkpoint decodes."""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_layer_schedule")
runs = f"{d}/runs"
MIX = ["model.n_layers=3", "model.layer_attention=window,csa,hca", "model.hca_window=16", "model.hca_stride=16",
       "model.kv_tied=true", "model.attn_sink=true", "model.csa_topk=0"]


def err_line(out):
    lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
    return lines[-1] if lines else out[-300:]


for extra, key, want in [
        (["model.layer_attention=window,csa,hca"], "model.layer_attention", "names 3 layers"),
        (["model.layer_attention=window,swa"], "model.layer_attention", "\"swa\" is not a layer kind"),
        (["model.layer_attention=window,hca", "model.hca_window=128"], "model.hca_window", "longer than seq_len"),
        (["model.layer_attention=csa*2", "model.csa_stride=3"], "csa_compressor", "deepseek needs window = 2 * stride"),
        (["model.layer_attention=hca,full", "model.hca_stride=40"], "model.hca_stride", "larger than hca_window"),
        (["model.layer_attention=hca,full", "model.hca_gate=soft"], "model.hca_gate", "soft"),
        (["model.layer_attention=csa,full", "data.train_seq_len=4"], "data.train_seq_len", "one compression window")]:
    rc, out = tu.run(["--summary", tu.TINY, *extra])
    line = err_line(out)
    check(rc == 2 and key in line and want in line, f"schedule error names {key}: {' '.join(extra)}", f"rc {rc}: {line}")

rc, out = tu.run(["--summary", tu.TINY, *MIX])
rows = {m.group(1): m.groups() for m in re.finditer(r"^\s+(window|csa|hca)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$",
                                                      out, re.M)}
check(rc == 0 and set(rows) == {"window", "csa", "hca"}, "--summary shows the stack by kind", out[-1500:])
if rc == 0 and len(rows) == 3:
    # T = 64: window 8 raw tokens, no entries; csa W8/S4 on V4's geometry (docs/spec.md §5.4: o_base = -4,
    # entry j ends at 4j+3 <= 63): 16 entries; hca W16/S16: 4 entries
    check(rows["window"][2] == "raw8" and rows["window"][3] == "0", "window kind: no entries", str(rows["window"]))
    check(rows["csa"][2] == "W8/S4+8" and rows["csa"][3] == "16", "csa kind: W8/S4 with 16 entries at T 64", str(rows["csa"]))
    check(rows["hca"][2] == "W16/S16+8" and rows["hca"][3] == "4", "hca kind: W16/S16 with 4 entries at T 64", str(rows["hca"]))
    # cache bytes per token (bf16, at T = 64), by hand: G 2 x d 8 = 16 values of 2 bytes
    #   window: ring of 8 raw keys + values = 2*8*16*2 = 512 B; csa: 16 tied entries*16*2 + 512 + 8 inputs*32*2 = 1536 B
    #   hca: 4*16*2 + 512 + 16*32*2 = 1664 B
    for kind, want in (("window", 512), ("csa", 1536), ("hca", 1664)):
        got = float(rows[kind][6])
        check(abs(got - want / 64) < 0.06, f"{kind} kind: cache bytes per token at T 64 = {want}/64", f"{got}")

rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                  "run.name=mix", "train.steps=10", "checkpoint.every=10", "eval.every=10", *MIX])
check(rc == 0 and "done: 10 steps" in out, "a window,csa,hca stack trains 10 steps", out[-800:])
ck = f"{runs}/mix/checkpoints/step_00000010"
rc, out = tu.run(["--eval", ck])
check(rc == 0 and "validation loss" in out, "--eval of the stack's checkpoint", out[-600:])
# the checkpoint records each layer's grid offset (config.json phaselab.layer_grid_base; csa: S - W = -4)
# and a checkpoint whose record disagrees with this build, or a csa stack without one (written on the
# aligned grid, before V4's geometry), is refused at load, not evaluated on a grid it was not trained on
cj = json.load(open(f"{ck}/config.json"))
check(cj["phaselab"].get("layer_grid_base") == [0, -4, 0], "config.json records the grid offsets [0, -4, 0]",
      str(cj["phaselab"].get("layer_grid_base")))
for tag, edit, want in (("missing", lambda p: p.pop("layer_grid_base"), "layer_grid_base missing, but layer 1 is a csa layer"),
                        ("aligned", lambda p: p.__setitem__("layer_grid_base", [0, 0, 0]), "layer_grid_base[1] = 0")):
    bad = f"{d}/ckpt_grid_{tag}"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(ck, bad)
    cj2 = json.load(open(f"{bad}/config.json"))
    edit(cj2["phaselab"])
    json.dump(cj2, open(f"{bad}/config.json", "w"))
    rc, out = tu.run(["--eval", bad])
    line = err_line(out)
    check(rc == 2 and want in line and "config.json" in line, f"--eval refuses a checkpoint whose grid record is {tag}",
          f"rc {rc}: {line}")
prompt = f"{d}/prompt.txt"
open(prompt, "w").write("16 80 17 81 18 82 16\n")
rc, out = tu.run(["--generate", ck, "--prompt-ids", prompt, "--max-new", "6"])
check(rc == 0 and "KV cache by layer kind" in out and "csa x1" in out and "hca x1" in out and "window x1" in out,
      "--generate decodes the stack and prints the cache by kind", out[-900:])
# the lightning indexer (docs/spec.md §5.4): top-4 of the csa layer's 16 entries, 3 dense warm-up steps
rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                  "run.name=idx", "train.steps=8", "checkpoint.every=8", "eval.every=8", "run.log_every=1",
                  "train.indexer_warmup=3", *MIX[:-1], "model.csa_topk=4"])
kls = [float(x) for x in re.findall(r"indexer KL ([0-9.]+)", out)]
check(rc == 0 and len(kls) == 8 and "indexer KL" in out and out.count("(dense)") == 3 and all(k >= 0 for k in kls),
      "an indexer run logs the KL every step, dense for the 3 warm-up steps", out[-900:])
try:
    import h5py
    with h5py.File(f"{runs}/idx/metrics.h5", "r") as f:
        col = list(f["train/indexer_kl"][:]) if "train/indexer_kl" in f else None
    check(col is not None and len(col) == 8 and abs(col[-1] - kls[-1]) < 1e-3, "/train/indexer_kl holds the logged KL",
          str(col))
except ImportError:
    print("skip - /train/indexer_kl: skipped: no h5py")
rc, out = tu.run(["--generate", f"{runs}/idx/checkpoints/step_00000008", "--prompt-ids", prompt, "--max-new", "2"])
check(rc == 0 and "csa x1" in out, "--generate decodes the indexer stack (its key cache and per-step top-k)",
      f"rc {rc}: {out[-600:]}")
finish()
