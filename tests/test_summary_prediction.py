"""--summary's per-op H200 prediction (issue 39, item 3: "say what your own model of the step
predicts, op by op"): every row's predicted time is recomputed here from the row's printed GFLOP
and GB with the model stated in the table's header (max(GFLOP / (70% of 989 TFLOP/s), GB / (80%
of 4.8 TB/s))), the % time column and its 5% mark from those times, the total as their sum, and
the MFU line from the MFU count. Also: the glue ops (norms, RoPE, SwiGLU, copies) stay below 5%
at the paper's shape, the reason no glue fusion was done (docs/performance.md)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
PEAK, BW, FE, BE = 989e12, 4.8e12, 0.70, 0.80
GLUE = ("rmsnorm", "rope", "swiglu", "(copy)", "copy_2d")

for cfg in ["configs/paper/w8s8_kv8.ini", "configs/paper/w8s8_kv1_tail.ini", "configs/paper/full_kv8.ini"]:
    p = subprocess.run([tu.TRAIN, "--summary", os.path.join(tu.ROOT, cfg)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    lines = p.stdout.splitlines()
    head = [i for i, l in enumerate(lines) if l.strip().startswith("per micro-batch (forward + backward)")]
    check(p.returncode == 0 and len(head) == 1 and "H200 ms" in lines[head[0]] and "70% of 989 TFLOP/s" in p.stdout and
          "80% of 4.8 TB/s" in p.stdout, f"{cfg}: the table states its model", p.stdout[-500:])
    if not head:
        continue
    rows, total = [], None
    for l in lines[head[0] + 1:]:
        m = re.match(r"\s+(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+(\S+)$", l)
        if not m:
            break
        r = dict(label=m.group(1), gflop=float(m.group(3)), gb=float(m.group(4)), ms=float(m.group(7)), tpct=m.group(8))
        if r["label"] == "micro-batch total":
            total = r
            break
        rows.append(r)
    want = [max(r["gflop"] * 1e9 / (FE * PEAK), r["gb"] * 1e9 / (BE * BW)) * 1e3 for r in rows]
    bad = [(r["label"], r["ms"], round(w, 3)) for r, w in zip(rows, want) if abs(r["ms"] - w) > 2e-3 + 1e-4 * w]
    check(len(rows) > 10 and not bad, f"{cfg}: each op's time is max(FLOP / 70% peak, bytes / 80% bandwidth)", f"{bad[:4]}")
    s = sum(want)
    check(total is not None and abs(total["ms"] - s) < 2e-3 * len(rows), f"{cfg}: the total is the sum of the ops' times",
          f"total {total and total['ms']} vs sum {s:.3f}")
    marks = [(r["label"], r["tpct"]) for r, w in zip(rows, want)
             if abs(float(r["tpct"].rstrip("*")) - 100 * w / s) > 0.06 or r["tpct"].endswith("*") != (100 * w / s > 5.0)]
    check(not marks, f"{cfg}: % time and its 5% mark", f"{marks[:4]}")
    glue = [(r["label"], r["tpct"]) for r in rows if any(g in r["label"] for g in GLUE) and r["tpct"].endswith("*")]
    check(not glue, f"{cfg}: no glue op above 5% of the step (no fusion needed)", f"{glue}")
    mfu = re.search(r"predicted on one H200 .*?: ([\d.]+) ms a micro-batch, ([\d.]+) s a step; MFU ([\d.]+)%", p.stdout)
    count = re.search(r"gives ([\d.]+) GFLOP per micro-batch", p.stdout)
    accum = re.search(r"a step: (\d+) micro-batches", p.stdout)
    ok = mfu and count and accum and abs(float(mfu.group(1)) - s) < 0.1
    if ok:
        step_s = float(mfu.group(2))
        ok = abs(float(mfu.group(3)) - 100 * int(accum.group(1)) * float(count.group(1)) * 1e9 / (step_s * PEAK)) < 0.1
    check(bool(ok), f"{cfg}: the predicted micro-batch time and MFU follow from the rows", mfu.group(0) if mfu else p.stdout[-300:])
finish()
