"""phaselab checkpoints of every variant in transformers + torch from PyPI (issue 16).

For every distinct [model] section of configs/paper/*.ini (the variant table of
configs/paper/README.md: window/stride sweep, KV heads, kv_tied, uniform, post_norm, vector,
no qk_norm, no gate bias, no RoPE, RoPE on 16 dims, tail, deepseek, full attention) and of
configs/remedies/*.ini (compressor = shared, with and without gate bias, grid = staggered), plus two
full-attention variants that are not Qwen3 (rope_dims < head_dim, qk_norm = false) and an untied
output head (compressed and plain Qwen3), shrunk to
tiny shapes (d_model 64, 2 layers, 8 query heads, head_dim 32, vocabulary 256; variant keys,
window, stride and KV heads kept, RoPE on all dims becomes 32), a run of 3 steps on the synthetic
corpus writes a real checkpoint with ./train (and one compressed run with attn_sink). Then, in transformers:
  * config.json: model_type qwen3 exactly for plain Qwen3 models, phaselab otherwise;
  * plain AutoModelForCausalLM.from_pretrained refuses every phaselab checkpoint with an error,
    and loads the Qwen3 ones as Qwen3ForCausalLM;
  * with trust_remote_code=True, the per-token logits of 3 validation windows equal phaselab's own
    (build/tests/ref_forward, the C forward pass, on the checkpoint's config.ini and weights) to
    1e-5 (max abs), and the HF loss (labels = inputs) equals the loss computed from phaselab's
    logits to 1e-5 and the loss ./train --eval prints (4 decimals);
  * generate() of 8 new tokens (greedy) equals greedy decoding with phaselab's forward pass and
    ./train --generate (the KV cache); ./train --score's per-token log-probs are the HF log-softmax;
  * padding: a left-padded generate() batch continues each prompt as alone, a right/left padded
    forward gives the unpadded rows' logits and the loss of the real pairs; output_hidden_states;
    forward on the meta device (no CPU tensor inside forward: a GPU needs that).
Once: the hidden-state layout is Qwen3ForCausalLM's, and output_attentions, a mask with a hole,
shifted position_ids, past_key_values are refused with one line.
The DeepSeek-V4 layer stack (docs/spec.md §5): configs/test/tiny_v4.ini (one layer of every kind:
full, window, csa with a top-4 lightning indexer, hca, compressed with local = tail; 5 steps, so
gates and indexer are off their init) and the same stack without the indexer (csa_topk = 0) pass
the same checks, plus: no checkpoint tensor missing or unused, config.json's layer_grid_base is
each layer's o_base, and with the indexer's selection switched off in the remote code the logits
move away from phaselab's (the selection matters, so the equality can fail).
Multi-rate strides (docs/spec.md §6.4: W 4 with strides 4,3,4,3; W 5 with 5,3,4,2 on the staggered
grid with local = tail) pass the same checks, plus: config.json's head_strides are the remote code's
per-head strides and staggers, its window starts those enumerated from the spec, and with every head
moved onto model.stride's grid the logits move away from phaselab's; bad lists are refused.
Learned chunk boundaries (docs/spec.md §6.5: W 4 S 2 scalar gates, local = tail; W 5 S 2 vector gates,
post-norm, local = window, token shift; W 6 S 3 tied K/V, sink, shared map) pass the same checks, plus:
the remote code's decisions equal a float64 scan of the scores from the loaded weights and hold natural
and forced boundaries; with every boundary bias at -100 the logits are the grid W = S = W model's; with
entries rotated to their chunk's end, or slots left-aligned, the logits move away from phaselab's; bad
configs are refused.
The negative static offset of §6.1 (o_base = S - W = -4, DeepSeek-V4's CSA geometry: partial first
windows; the csa layers of every stack checkpoint carry it): the remote code's compressor entries, their count
and visibility, and the indexer's keys, against an independent float64 loop over positions.
Skipped as a whole ("skipped: torch/transformers not installed") when neither this python nor
$PHASELAB_HF_PYTHON nor build/venv-hf/bin/python has torch and transformers.
Scratch: build/scratch/test_hf_transformers/."""
import configparser
import contextlib
import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from pycheck import check, finish, skip  # noqa: E402


def has_hf():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def reexec_with_hf_python():
    """Runs this test with a python that has torch + transformers, when this one has not."""
    if os.environ.get("PHASELAB_HF_REEXEC"):
        return False
    for py in (os.environ.get("PHASELAB_HF_PYTHON", ""), os.path.join(ROOT, "build", "venv-hf", "bin", "python")):
        if py and os.access(py, os.X_OK):
            probe = subprocess.run([py, "-c", "import torch, transformers"], capture_output=True)
            if probe.returncode == 0:
                os.environ["PHASELAB_HF_REEXEC"] = "1"
                sys.stdout.flush()
                os.execv(py, [py] + sys.argv)
    return False


if not has_hf():
    reexec_with_hf_python()
    skip("phaselab checkpoints in transformers", "torch/transformers not installed")
    sys.exit(0)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
REF = os.path.join(ROOT, "build", "tests", "ref_forward")
if not check(os.access(REF, os.X_OK), "build/tests/ref_forward built", "make build/tests/ref_forward"):
    finish()
print(f"# torch {torch.__version__}, transformers {transformers.__version__}")
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

T, N_WIN, STEPS, N_NEW = 64, 3, 3, 8
TOL = 1e-5
VARIANT_KEYS = ("n_kv_heads", "attention", "window", "stride", "gate", "gate_bias", "kv_tied", "post_norm",
                "qk_norm", "rope_dims", "local", "n_local", "compressor", "attn_sink", "grid", "tie_embeddings")
TINY = dict(d_model=64, n_layers=2, n_heads=8, head_dim=32, d_ff=128, vocab_size=256, rope_theta=10000)


def paper_variants():
    """{name: [model] overrides} for the distinct model sections of configs/paper and configs/remedies
    (tiny shapes; grid = aligned, the default, counts as absent)."""
    out, seen = {}, set()
    for path in (sorted(glob.glob(os.path.join(ROOT, "configs", "paper", "*.ini")))
                 + sorted(glob.glob(os.path.join(ROOT, "configs", "remedies", "*.ini")))):
        cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
        cp.read(path)
        m = cp["model"]
        head_dim = int(m.get("head_dim", "128"))
        v = {k: m[k].strip() for k in VARIANT_KEYS if k in m}
        if "rope_dims" in v and int(v["rope_dims"]) == head_dim:
            v["rope_dims"] = str(TINY["head_dim"])
        if v.get("grid") == "aligned":
            del v["grid"]
        key = tuple(sorted(v.items()))
        if key in seen:
            continue
        seen.add(key)
        out[os.path.basename(path)[:-4]] = v
    return out


VARIANTS = paper_variants()
VARIANTS["full_kv4_rope16"] = dict(n_kv_heads="4", attention="full", rope_dims="16")
# an output head of its own (lm_head.weight), in a compressed model and in a plain Qwen3
VARIANTS["w8s8_kv2_untied"] = dict(n_kv_heads="2", attention="compressed", window="8", stride="8", tie_embeddings="false")
VARIANTS["full_kv2_untied"] = dict(n_kv_heads="2", attention="full", tie_embeddings="false")
VARIANTS["full_kv4_noqknorm"] = dict(n_kv_heads="4", attention="full", qk_norm="false")
VARIANTS["w8s8_kv2_sink"] = dict(n_kv_heads="2", attention="compressed", window="8", stride="8", attn_sink="true")
# docs/spec.md §6.3: the compressor reads a_t + M a_{t-1} (M trained away from its zero init)
VARIANTS["w8s8_kv2_token_shift"] = dict(n_kv_heads="2", attention="compressed", window="8", stride="8", token_shift="true")
# docs/spec.md §5: the layer stack of configs/test/tiny_v4.ini, with and without the lightning indexer
V4_CONFIG = os.path.join(ROOT, "configs", "test", "tiny_v4.ini")
VARIANTS["v4_stack_indexer"] = dict(config=V4_CONFIG)
VARIANTS["v4_stack"] = dict(config=V4_CONFIG, csa_topk="0")
# docs/spec.md §6.4: a stride per KV head (W 4, strides 4,3,4,3), and on the staggered grid with
# local = tail (W 5, strides 5,3,4,2: staggers floor(g S_g / 4) = 0,0,2,1)
VARIANTS["w4s3_kv4_multirate"] = dict(n_kv_heads="4", attention="compressed", window="4", stride="3",
                                      head_strides="4,3,4,3")
VARIANTS["w5s2_kv4_multirate_staggered_tail"] = dict(n_kv_heads="4", attention="compressed", window="5", stride="2",
                                                     head_strides="5,3,4,2", grid="staggered", local="tail")
# docs/spec.md §6.5: learned chunk boundaries (W the longest chunk, S the target mean length): W 4 S 2 scalar
# gates with local = tail; W 5 S 2 vector gates, post-norm, local = window, token shift; W 6 S 3 tied K/V,
# attention sink, one shared map
VARIANTS["w4s2_kv2_learned_tail"] = dict(n_kv_heads="2", attention="compressed", window="4", stride="2",
                                         boundaries="learned", local="tail")
VARIANTS["w5s2_kv2_learned_vector_postnorm_shift"] = dict(n_kv_heads="2", attention="compressed", window="5", stride="2",
                                                          boundaries="learned", gate="vector", post_norm="true",
                                                          local="window", n_local="6", token_shift="true")
VARIANTS["w6s3_kv2_learned_tied_sink_shared"] = dict(n_kv_heads="2", attention="compressed", window="6", stride="3",
                                                     boundaries="learned", kv_tied="true", attn_sink="true",
                                                     compressor="shared")
ONLY = [v for v in os.environ.get("PHASELAB_HF_VARIANTS", "").split(",") if v]   # a subset, for debugging
N_CONFIGS = len(paper_variants())
check(N_CONFIGS >= 28 and len(VARIANTS) == N_CONFIGS + 13,
      f"{N_CONFIGS} distinct [model] variants of configs/paper and configs/remedies, +2 full-attention, +2 untied heads, "
      "+1 attention sink, +1 token shift, +2 layer stacks, +2 multi-rate strides, +3 learned chunk boundaries",
      str(sorted(VARIANTS)))

d = tu.scratch("test_hf_transformers")
data = os.path.join(d, "data")
tu.make_corpus(data, seq_len=T, train_rows=200, val_rows=8)
val_tokens = np.fromfile(os.path.join(data, "val_000.bin"), dtype="<u4", offset=1024).astype(np.int64)
windows = np.stack([val_tokens[k * T:k * T + T + 1] for k in range(N_WIN)])      # [N_WIN, T+1]


def vanilla(v):
    return ("config" not in v and v.get("attention", "full") == "full" and v.get("qk_norm", "true") == "true"
            and int(v.get("rope_dims", TINY["head_dim"])) == TINY["head_dim"] and v.get("attn_sink", "false") == "false")


def c_logits(ckpt, tokens):
    """phaselab's logits [B, t, V] of tokens [B, t] (build/tests/ref_forward)."""
    B, t = tokens.shape
    tok_path, out_path = os.path.join(ckpt, "..", "tokens.i32"), os.path.join(ckpt, "..", "logits.f32")
    tokens.astype("<i4").tofile(tok_path)
    p = subprocess.run([REF, os.path.join(ckpt, "config.ini"), os.path.join(ckpt, "model.safetensors"), tok_path,
                        str(B), str(t), out_path], capture_output=True, text=True, timeout=120)
    if p.returncode:
        raise RuntimeError(p.stderr)
    return np.fromfile(out_path, dtype="<f4").reshape(B, t, -1)


def mean_ce(logits, targets):
    lg = logits.astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    picked = np.take_along_axis(lg, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def refuses_without_remote_code(ckpt):
    """Plain loading, as a user would try it; transformers' y/N prompt reads an empty stdin."""
    saved_stdin = sys.stdin
    try:
        with open(os.devnull) as empty, contextlib.redirect_stdout(io.StringIO()):
            sys.stdin = empty
            AutoModelForCausalLM.from_pretrained(ckpt)
    except Exception as e:  # noqa: BLE001 - any error is a refusal; its text is reported
        return True, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        sys.stdin = saved_stdin
    return False, "loaded"


def scan(p, W):
    """§6.5's decisions from the scores p [T]: bd_t iff p_t >= 1/2 or the open chunk reached W tokens."""
    bd, s = np.zeros(len(p), bool), 0
    for t in range(len(p)):
        if p[t] >= 0.5 or t - s + 1 == W:
            bd[t], s = True, t + 1
    return bd


def learned_boundary_checks(name, v, cfg, model, ref):
    """docs/spec.md §6.5 in the remote code of a trained checkpoint whose logits already equal phaselab's:
    the decisions (an independent scan of the scores from the loaded weights) include natural and forced
    boundaries; with every boundary bias at -100 (only forced boundaries, every W tokens) the logits are
    the grid W = S = W model's; rotating entries to the chunk end, or pooling left-aligned slots, moves
    the logits away from phaselab's (the checks can fail)."""
    W, ids = int(v["window"]), torch.tensor(windows[:, :T])
    comps = [layer.self_attn.compressor for layer in model.model.layers]
    check(cfg["phaselab"].get("boundaries") == "learned" and all(c.learned for c in comps)
          and all(tuple(c.boundary.weight.shape) == (TINY["d_model"],) and tuple(c.boundary.bias.shape) == (1,) for c in comps),
          f"{name}: config.json's boundaries = learned are the remote code's layers (boundary.weight [D], .bias [1])",
          f"{cfg['phaselab'].get('boundaries')}, {[c.learned for c in comps]}")
    # the scores from the loaded weights: each layer's normed input by hooks, w_bd . a'_t + c_bd in float64
    inputs = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda mod, args: inputs.append(args[0].detach()))
             for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    n_nat = n_forced = 0
    same, lens_ok = True, True
    for c, a in zip(comps, inputs):
        a = a.double()
        if c.shift:
            a = a + torch.nn.functional.pad(a, (0, 0, 1, 0))[:, :-1] @ c.token_shift.weight.detach().double().t()
        q = (a @ c.boundary.weight.detach().double() + c.boundary.bias.detach().double()).numpy()
        p = 1.0 / (1.0 + np.exp(-q))
        for b in range(p.shape[0]):
            bd = scan(p[b], W)
            same &= bool((bd == c.last_chunks["bd"][b].numpy()).all())
            nat = p[b] >= 0.5
            n_nat += int((bd & nat).sum())
            n_forced += int((bd & ~nat).sum())
            ends = np.flatnonzero(bd)
            lens = np.diff(np.concatenate([[-1], ends]))
            lens_ok &= bool(len(lens) and lens.max() <= W)
    check(same and lens_ok and n_nat > 0 and n_forced > 0,
          f"{name}: the remote code's decisions = the scan of the scores from the loaded weights, with {n_nat} natural "
          f"(p >= 1/2) and {n_forced} forced (the chunk reached W = {W}) boundaries, every chunk 1..W tokens",
          f"same {same}, lengths ok {lens_ok}, natural {n_nat}, forced {n_forced}")

    # every boundary bias at -100: p = 0, every chunk forced at W tokens: the grid W = S = W (same tensors)
    d2 = model.config.to_dict()
    d2["phaselab"] = dict(d2["phaselab"], stride=W, boundaries="grid")
    grid = type(model)(type(model.config)(**d2)).eval()
    state = {k: x for k, x in model.state_dict().items() if ".boundary." not in k}
    res = grid.load_state_dict(state, strict=False)
    saved = [c.boundary.bias.detach().clone() for c in comps]
    with torch.no_grad():
        for c in comps:
            c.boundary.bias.fill_(-100.0)
        low = model(input_ids=ids).logits.double().numpy()
        all_forced = all(bool((c.last_chunks["bd"].numpy() == ((np.arange(T) + 1) % W == 0)[None]).all()) for c in comps)
        for c, b0 in zip(comps, saved):
            c.boundary.bias.copy_(b0)
        on_grid = grid(input_ids=ids).logits.double().numpy()
    rel = float(np.abs(low - on_grid).max() / np.abs(on_grid).max())
    check(not res.missing_keys and not res.unexpected_keys and all_forced and rel <= TOL,
          f"{name}: boundary bias -100 = only forced boundaries every {W} tokens = the grid W = S = {W} "
          f"(max rel diff {rel:.1e})", f"keys {res}, all forced {all_forced}, rel {rel:.3e}")
    moved_grid = float(np.abs(on_grid - ref).max())
    check(moved_grid > 100 * TOL, f"{name}: the trained boundaries are not the grid (max |diff| {moved_grid:.1e})",
          f"{moved_grid:.3e}")

    # wrong geometry on purpose: entries rotated to their chunk's END, or slots left-aligned (token t of
    # a chunk from s at slot t - s instead of W - 1 - (e - t)): the logits must move away from phaselab's
    def rotate_at_end(ch):
        return torch.arange(ch["first"].shape[1])[None].expand_as(ch["first"])

    def left_aligned(ch):   # one sequence at a time: window starts s_j per row
        st = ch["first"][0].cpu()
        pos = st[:, None] + torch.arange(W)[None]
        return st, (pos <= torch.arange(st.shape[0])[:, None])[None]

    for what, attr, fn in (("rotated to the chunk end", "entry_positions", rotate_at_end),
                           ("left-aligned slots", "chunk_windows", left_aligned)):
        for c in comps:
            setattr(c, attr, fn)
        with torch.no_grad():
            bad = np.concatenate([model(input_ids=ids[b:b + 1]).logits.double().numpy() for b in range(ids.shape[0])])
        for c in comps:
            delattr(c, attr)
        moved = float(np.abs(bad - ref).max())
        check(moved > 100 * TOL, f"{name}: with entries {what} the logits differ from phaselab's (max |diff| {moved:.1e})",
              f"max |diff| {moved:.3e}")


def researcher_checks(name, v, ckpt, model, hf, prompt, gen):
    """What a researcher relies on beyond the logits, on the trained checkpoint whose logits hf [N_WIN, T, V]
    and greedy continuation gen of prompt [1, P] already equal phaselab's forward:
      * ./train --generate (the incremental KV cache of model/decode.h) gives generate()'s tokens;
      * ./train --score's per-token log-probs of the validation windows are log_softmax of the HF logits;
      * a left-padded batch in generate() continues each prompt as that prompt alone (the padding once
        silently moved every position of the shorter prompt, and with it its phase);
      * a forward pass with right and left padding (attention_mask) gives each row's unpadded logits at
        its real positions, and the loss of its real pairs;
      * output_hidden_states: L + 1 states, the embeddings first, the final normed state last;
      * the model built on the meta device runs forward (no tensor made on the CPU inside forward: on a
        GPU that was "Expected all tensors to be on the same device"; learned boundaries scan on the CPU)."""
    # ./train --generate against generate()
    pfile = os.path.join(d, "prompt.txt")
    with open(pfile, "w") as f:
        f.write(" ".join(str(int(x)) for x in prompt[0]))
    p = subprocess.run([tu.TRAIN, "--generate", ckpt, "--prompt-ids", pfile, "--max-new", str(N_NEW), "--ignore-eot"],
                       capture_output=True, text=True, timeout=120)
    dec = [int(x) for x in p.stdout.split("|")[-1].split()] if p.returncode == 0 else p.stderr[-300:]
    check(dec == gen, f"{name}: ./train --generate (KV cache) gives generate()'s {N_NEW} tokens", f"--generate {dec}, generate() {gen}")
    # ./train --score's per-token log-probs against the HF log-softmax
    ids_file, sdir = os.path.join(d, "score_ids.txt"), os.path.join(d, "score_" + name)
    with open(ids_file, "w") as f:
        f.write(" ".join(str(int(x)) for x in val_tokens[:N_WIN * T + 1]))
    shutil.rmtree(sdir, ignore_errors=True)
    os.makedirs(sdir)
    p = subprocess.run([tu.TRAIN, "--score", ckpt, "--input", ids_file, "--ids", "--out", os.path.join(sdir, "s.h5"),
                        "--csv", os.path.join(sdir, "s")], capture_output=True, text=True, timeout=120)
    lp_hf = torch.log_softmax(torch.tensor(hf), -1).gather(-1, torch.tensor(windows[:, 1:])[..., None])[..., 0].reshape(-1).numpy()
    rows = list(csv.DictReader(open(os.path.join(sdir, "s_000.tokens.csv")))) if p.returncode == 0 else []
    lp_c = np.array([float(r["logprob"]) for r in rows])
    err = float(np.abs(lp_c - lp_hf).max()) if len(lp_c) == len(lp_hf) else float("inf")
    check(err <= TOL, f"{name}: ./train --score's {len(lp_c)} per-token log-probs = log_softmax of the HF logits "
          f"(max |diff| {err:.1e})", f"rc {p.returncode}, {len(lp_c)} vs {len(lp_hf)} tokens, {p.stderr[-300:]}")

    # padding: a left-padded batch in generate(); right and left padding in a forward pass
    P, short = prompt.shape[1], windows[1, :prompt.shape[1] - 3]
    batch = torch.zeros(2, P, dtype=torch.long)
    mask = torch.zeros(2, P, dtype=torch.long)
    batch[0], mask[0] = torch.tensor(prompt[0]), 1
    batch[1, 3:], mask[1, 3:] = torch.tensor(short), 1
    try:   # the tokens, and the logits of every step (a tiny model repeats tokens: they alone say little)
        with torch.no_grad():
            kw = dict(max_new_tokens=N_NEW, do_sample=False, num_beams=1, pad_token_id=0, output_scores=True,
                      return_dict_in_generate=True)
            rb = model.generate(batch, attention_mask=mask, **kw)
            ra = model.generate(torch.tensor(short)[None], **kw)
        both, alone = rb.sequences[:, P:].tolist(), ra.sequences[0, len(short):].tolist()
        serr = max(float((sb[1] - sa[0]).abs().max()) for sb, sa in zip(rb.scores, ra.scores))
    except Exception as e:  # noqa: BLE001 - reported as the failed check
        both, alone, serr = f"{type(e).__name__}: {e}", None, float("inf")
    check(both == [gen, alone] and serr <= TOL, f"{name}: generate() of a left-padded batch (prompts of {P} and {P - 3} "
          f"tokens) continues each prompt as it does alone (the short one's logits at every step: max |diff| {serr:.1e})",
          f"batch {both}, alone {[gen, alone]}, logits {serr:.3e}")
    ids = torch.tensor(windows[:, :T]).clone()
    mask = torch.ones_like(ids)
    mask[1, T - 5:], ids[1, T - 5:] = 0, 0                                     # row 1: right padding
    ids[2, 7:], ids[2, :7], mask[2, :7] = torch.tensor(windows[2, :T - 7]), 0, 0   # row 2: left padding
    real = [(0, T), (0, T - 5), (7, T)]                                       # each row's real tokens [first, end)
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, labels=ids)
        lg = out.logits.double().numpy()
        err = max(float(np.abs(lg[b, s:e] - hf[b, :e - s]).max()) for b, (s, e) in enumerate(real))
        pads = max(float(np.abs(lg[1, T - 5:]).max()), float(np.abs(lg[2, :7]).max()))
        want = mean_ce(np.concatenate([hf[b, :e - s - 1] for b, (s, e) in enumerate(real)])[None],
                       np.concatenate([windows[b, 1:e - s] for b, (s, e) in enumerate(real)])[None])
        lerr = abs(float(out.loss) - want)
    except Exception as e:  # noqa: BLE001
        err, pads, lerr, want = float("inf"), float("inf"), float("inf"), f"{type(e).__name__}: {e}"
    if vanilla(v):   # transformers' own Qwen3: its padded positions and loss are its own business
        check(err <= TOL, f"{name}: Qwen3 forward with right and left padding: each row's logits at its real "
              f"positions are the unpadded row's (max |diff| {err:.1e})", f"logits {err}, {want}")
    else:
        check(err <= TOL and pads == 0.0 and lerr <= TOL, f"{name}: forward with right and left padding: each row's "
              f"logits at its real positions are the unpadded row's (max |diff| {err:.1e}), 0 at the padding, the "
              f"loss that of the real pairs (|diff| {lerr:.1e})", f"logits {err}, pads {pads}, loss {lerr}, want {want}")
    with torch.no_grad():
        hs_out = model(input_ids=torch.tensor(windows[:1, :T]), output_hidden_states=True)
    hs = hs_out.hidden_states
    head = model.get_input_embeddings().weight if model.config.tie_word_embeddings else model.get_output_embeddings().weight
    ok = (hs is not None and len(hs) == model.config.num_hidden_layers + 1
          and torch.equal(hs[0], model.get_input_embeddings()(torch.tensor(windows[:1, :T])))
          and float((hs[-1] @ head.T - hs_out.logits).detach().abs().max()) <= TOL)
    check(ok, f"{name}: output_hidden_states gives {model.config.num_hidden_layers + 1} states: the embeddings, ..., "
          "the final normed state (its product with the head = the logits)", f"{None if hs is None else len(hs)} states")
    if v.get("boundaries") != "learned":
        try:
            with torch.device("meta"):
                on_meta = type(model)(model.config)
            on_meta(input_ids=torch.tensor(windows[:2, :T]).to("meta"))
            why = "runs"
        except Exception as e:  # noqa: BLE001
            why = f"{type(e).__name__}: {str(e)[:200]}"
        check(why == "runs", f"{name}: the model on another device (meta) runs forward: no CPU tensor inside forward", why)


for name, v in VARIANTS.items():
    if ONLY and name not in ONLY:
        continue
    config = v.get("config", tu.TINY)   # a stack: its own config file (shapes included) and overrides
    model_args = [f"model.{k}={val}" for k, val in ({**TINY, **v} if config == tu.TINY else v).items() if k != "config"]
    rc, out = tu.run([config, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
                      f"run.name={name}", f"train.steps={STEPS}", f"checkpoint.every={STEPS}", "eval.every=0",
                      "train.lr=2e-2", "train.warmup_steps=0", "train.min_lr=2e-2", "train.batch_tokens=256",
                      "train.micro_batch=4", f"eval.val_tokens={N_WIN * T}"] + model_args)
    if not check(rc == 0, f"{name}: ./train writes a checkpoint", out[-400:]):
        continue
    ckpt = os.path.join(d, "runs", name, "checkpoints", f"step_{STEPS:08d}")
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    want_type = "qwen3" if vanilla(v) else "phaselab"
    check(cfg.get("model_type") == want_type, f"{name}: config.json model_type {want_type}", str(cfg.get("model_type")))
    if vanilla(v):
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
        check(type(model).__name__ == "Qwen3ForCausalLM", f"{name}: loads as Qwen3ForCausalLM without remote code",
              type(model).__name__)
    else:
        refused, why = refuses_without_remote_code(ckpt)
        check(refused and ("trust_remote_code" in why or "custom code" in why),
              f"{name}: plain AutoModelForCausalLM refuses it ({why.split(':')[0]}: contains custom code)", why)
        model, info = AutoModelForCausalLM.from_pretrained(ckpt, trust_remote_code=True, dtype=torch.float32,
                                                           output_loading_info=True)
        check(type(model).__name__ == "PhaselabForCausalLM", f"{name}: trust_remote_code loads PhaselabForCausalLM",
              type(model).__name__)
        # a checkpoint tensor the remote code has no parameter for is silently dropped by transformers
        # (a config key it did not read once made it ignore compressor.token_shift.weight)
        unused = sorted(info.get("unexpected_keys", []))
        check(not unused, f"{name}: every checkpoint tensor is a parameter of the remote code",
              f"{len(unused)} unused: {', '.join(unused[:4])}")
        missing = sorted(info.get("missing_keys", []))
        check(not missing, f"{name}: every parameter of the remote code is in the checkpoint",
              f"{len(missing)} missing: {', '.join(missing[:4])}")
    model.eval()

    ref = c_logits(ckpt, windows[:, :T])                                             # [N_WIN, T, V]
    with torch.no_grad():
        ids = torch.tensor(windows)
        hf_out = model(input_ids=ids, labels=ids)
    hf = hf_out.logits[:, :T].double().numpy()
    err = float(np.abs(hf - ref).max())
    check(err <= TOL, f"{name}: per-token logits equal phaselab's (max |diff| {err:.1e} <= {TOL:g})",
          f"max |diff| {err:.3e}, max |logit| {np.abs(ref).max():.3f}")
    loss_c = mean_ce(ref, windows[:, 1:])
    loss_hf = float(hf_out.loss)
    rc, out = tu.run(["--eval", ckpt, "eval.probe="])
    m = re.search(r"validation loss ([0-9.]+) over (\d+) windows", out)
    check(abs(loss_hf - loss_c) <= TOL and m is not None and int(m.group(2)) == N_WIN
          and abs(float(m.group(1)) - loss_hf) <= 6e-5,
          f"{name}: loss on {N_WIN} validation windows equals phaselab's ({loss_hf:.6f} vs {loss_c:.6f}, --eval "
          f"{m.group(1) if m else '?'})", f"hf {loss_hf}, from C logits {loss_c}, --eval: {out[-300:]}")

    if "config" in v:   # a layer stack (docs/spec.md §5)
        kinds = model.config.layer_kinds
        bases = cfg["phaselab"].get("layer_grid_base")
        read = [model.model.layers[L].self_attn.compressor.o_base if hasattr(model.model.layers[L].self_attn, "compressor")
                else 0 for L in range(len(kinds))]
        # the csa layer (W 8, S 4) sits on V4's grid, o_base = S - W = -4 (docs/spec.md §5.4); the others on 0
        check(kinds == ["full", "window", "csa", "hca", "compressed"] and bases == [0, 0, -4, 0, 0]
              and read == bases, f"{name}: config.json's schedule and per-layer o_base {bases} (csa: S - W = -4) are the remote code's layers",
              f"kinds {kinds}, layer_grid_base {bases}, remote code {read}")
        # weights alone (trainer/ckpt_source.c reads config.json back to a config and checks its layer_grid_base)
        bare = os.path.join(d, "bare_" + name)
        os.makedirs(bare, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(ckpt, f), bare)
        rc, out = tu.run(["--eval", bare, f"data.val={data}/val_*.bin", "eval.probe=", f"eval.val_tokens={N_WIN * T}"])
        m = re.search(r"validation loss ([0-9.]+) over (\d+) windows", out)
        check(rc == 0 and m is not None and abs(float(m.group(1)) - loss_hf) <= 6e-5,
              f"{name}: --eval of config.json + model.safetensors alone gives the same loss ({m.group(1) if m else '?'})",
              out[-400:])
        attn = model.model.layers[2].self_attn
        if hasattr(attn, "indexer"):   # all visible entries instead of the top-4: the logits must move
            keep, attn.indexer.topk = attn.indexer.topk, 10 ** 6
            with torch.no_grad():
                dense = model(input_ids=torch.tensor(windows[:, :T])).logits.double().numpy()
            attn.indexer.topk = keep
            moved = float(np.abs(dense - ref).max())
            check(moved > 100 * TOL, f"{name}: without the indexer's top-4 the logits differ from phaselab's "
                  f"(max |diff| {moved:.1e}): the selection is computed, not bypassed", f"max |diff| {moved:.3e}")

    if "head_strides" in v:   # docs/spec.md §6.4: each KV head's own grid, and it matters
        hs = [int(x) for x in v["head_strides"].split(",")]
        G, W = len(hs), int(v["window"])
        want_o = [(g * hs[g]) // G if v.get("grid") == "staggered" else 0 for g in range(G)]
        comps = [layer.self_attn.compressor for layer in model.model.layers]
        # windows enumerated from the spec: o_g + j S_g with o_g + j S_g + W - 1 <= T - 1, per head
        want_starts = [[st for st in range(want_o[g], T) if (st - want_o[g]) % hs[g] == 0 and st + W - 1 <= T - 1]
                       for g in range(G)]
        got_starts = [comps[0].starts(g, T).tolist() for g in range(G)]
        check(cfg["phaselab"].get("head_strides") == v["head_strides"]
              and all(c.strides == hs and c.offsets == want_o for c in comps) and got_starts == want_starts,
              f"{name}: config.json's head_strides {v['head_strides']} are the remote code's per-head strides, "
              f"offsets {want_o}, window counts {[len(x) for x in want_starts]} at T {T}",
              f"config.json {cfg['phaselab'].get('head_strides')}, strides {[c.strides for c in comps]}, "
              f"offsets {[c.offsets for c in comps]}, starts {got_starts} vs {want_starts}")
        S = int(v["stride"])   # every head on model.stride's grid instead: the logits must move
        for c in comps:
            c.strides, c.offsets = [S] * G, [(g * S) // G if v.get("grid") == "staggered" else 0 for g in range(G)]
        with torch.no_grad():
            one_rate = model(input_ids=torch.tensor(windows[:, :T])).logits.double().numpy()
        for c in comps:
            c.strides, c.offsets = hs, want_o
        moved = float(np.abs(one_rate - ref).max())
        check(moved > 100 * TOL, f"{name}: with every head on stride {S} the logits differ from phaselab's "
              f"(max |diff| {moved:.1e}): the per-head strides are used", f"max |diff| {moved:.3e}")

    if v.get("boundaries") == "learned":   # docs/spec.md §6.5
        learned_boundary_checks(name, v, cfg, model, ref)

    prompt = windows[:1, :16 if "config" in v else 12]   # ref_forward needs T >= the longest window (hca 16)
    model.generation_config.eos_token_id = None   # 8 tokens even when one is the end-of-text id
    with torch.no_grad():
        gen = model.generate(torch.tensor(prompt), max_new_tokens=N_NEW, do_sample=False, num_beams=1,
                             pad_token_id=0)[0, prompt.shape[1]:].tolist()
    seq = prompt.copy()
    for _ in range(N_NEW):
        nxt = int(c_logits(ckpt, seq)[0, -1].argmax())
        seq = np.concatenate([seq, [[nxt]]], axis=1)
    greedy = seq[0, prompt.shape[1]:].tolist()
    check(gen == greedy, f"{name}: generate() of {N_NEW} tokens equals greedy decoding by phaselab's forward",
          f"generate {gen}, phaselab {greedy}")
    researcher_checks(name, v, ckpt, model, hf_out.logits[:, :T].double().numpy(), prompt, gen)


# The interface beyond logits, once: the hidden states are laid out as transformers' Qwen3 lays them out
# (the remote code on a plain Qwen3 checkpoint's weights gives Qwen3ForCausalLM's states), and what the
# model cannot do is refused with one clear error instead of being ignored (output_attentions once returned
# None, position_ids were dropped).
sys.path.insert(0, os.path.join(ROOT, "tools", "hf"))
from modeling_phaselab import PhaselabConfig, PhaselabForCausalLM  # noqa: E402
qwen_ckpt = os.path.join(d, "runs", "full_kv1", "checkpoints", f"step_{STEPS:08d}")
if (not ONLY or "full_kv1" in ONLY) and os.path.isdir(qwen_ckpt):
    qwen = AutoModelForCausalLM.from_pretrained(qwen_ckpt, dtype=torch.float32).eval()
    qc = json.load(open(os.path.join(qwen_ckpt, "config.json")))
    same = PhaselabForCausalLM(PhaselabConfig(**{k: qc[k] for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "rope_theta", "rms_norm_eps", "tie_word_embeddings")},
        phaselab=dict(attention="full"))).eval()
    res = same.load_state_dict(qwen.state_dict(), strict=False)
    x = torch.tensor(windows[:2, :T])
    with torch.no_grad():
        hq, hp = qwen(x, output_hidden_states=True).hidden_states, same(x, output_hidden_states=True).hidden_states
    diff = (max(float((a - b).abs().max()) for a, b in zip(hq, hp)) if hp is not None and len(hq) == len(hp)
            else float("inf"))
    check(not res.missing_keys and diff <= TOL, f"the remote code on full_kv1's Qwen3 weights: its {len(hq)} hidden states "
          f"are Qwen3ForCausalLM's (max |diff| {diff:.1e})", f"{len(hq)} vs {hp and len(hp)} states, {res}, {diff}")
cfg_small = PhaselabConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=8, rope_theta=100.0,
                           phaselab=dict(attention="compressed", window=4, stride=2))
small = PhaselabForCausalLM(cfg_small).eval()
x = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(6))
holed = torch.ones_like(x)
holed[0, 5] = 0
REFUSED = {"output_attentions": (dict(output_attentions=True), "output_attentions"),
           "a mask with a hole": (dict(attention_mask=holed), "padding inside the sequence"),
           "shifted position_ids": (dict(position_ids=torch.arange(12)[None] + 3), "position_ids"),
           "past_key_values": (dict(past_key_values=((x, x),)), "past_key_values"),
           "a mask of another shape": (dict(attention_mask=holed[:, :5]), "attention_mask")}
for what, (kw, needle) in REFUSED.items():
    try:
        with torch.no_grad():
            small(input_ids=x, **kw)
        err = "accepted"
    except (NotImplementedError, ValueError) as e:
        err = str(e)
    check(needle in err and "\n" not in err, f"the remote code refuses {what} with one line ({err[:80]}...)", err)
with torch.no_grad():
    plain = small(input_ids=x, labels=x)
    as_tuple = small(input_ids=x, labels=x, position_ids=torch.arange(12)[None], return_dict=False)
check(isinstance(as_tuple, tuple) and len(as_tuple) == 2 and torch.equal(as_tuple[1], plain.logits)
      and torch.equal(as_tuple[0], plain.loss), "return_dict=False gives the tuple (loss, logits); position_ids "
      "0, 1, ... are accepted", str(type(as_tuple)))

# docs/spec.md §2b remedies (their trained checkpoints are variants above, from configs/remedies):
# identities that follow from their definitions, on random weights.
def remedy_model(**variant):
    sys.path.insert(0, os.path.join(ROOT, "tools", "hf"))
    from modeling_phaselab import PhaselabConfig, PhaselabForCausalLM
    cfg = PhaselabConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=variant.pop("G", 2), head_dim=8,
                         rope_theta=100.0, phaselab=dict(attention="compressed", window=4, stride=2, **variant))
    torch.manual_seed(0)
    model = PhaselabForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if n.endswith("norm.weight") else 0.0))
    return model


tokens = torch.randint(0, 50, (2, 24), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    paper, shared = remedy_model(gate="vector"), remedy_model(gate="vector", compressor="shared")
    for L in range(2):   # paper maps all equal to the shared map: the same model
        cp, cs = paper.model.layers[L].self_attn.compressor, shared.model.layers[L].self_attn.compressor
        for br in ("k", "v"):
            for part in ("gate", "payload"):
                hs, hp = getattr(cs, f"{br}_{part}"), getattr(cp, f"{br}_{part}")
                hp.weight.copy_(hs.weight.expand_as(hp.weight))
                if part == "gate":
                    hp.bias.copy_(hs.bias)
        cp.ck_norm.weight.copy_(cs.ck_norm.weight)
    for n, p in shared.named_parameters():
        if "compressor" not in n:
            dict(paper.named_parameters())[n].copy_(p)
    diff = float((paper(tokens).logits - shared(tokens).logits).abs().max())
    check(diff < 1e-5, "2b compressor = shared equals paper with every offset's maps equal", f"max |diff| {diff}")
    aligned, staggered = remedy_model(G=1), remedy_model(G=1, grid="staggered")
    diff = float((aligned(tokens).logits - staggered(tokens).logits).abs().max())
    check(diff == 0.0, "2b grid = staggered with one KV head equals aligned", f"max |diff| {diff}")
    staggered2 = remedy_model(G=2, grid="staggered")
    comp = staggered2.model.layers[0].self_attn.compressor
    starts = [comp.starts(g, 24).tolist() for g in range(2)]
    check(starts == [list(range(0, 21, 2)), list(range(1, 20, 2))],
          "2b grid = staggered: KV head g's windows start at floor(g S / G) + jS and end inside T",
          str(starts))


# docs/spec.md §6.1: a negative static offset (DeepSeek-V4's CSA geometry o_base = S - W = -4, partial
# first windows) against an independent float64 loop over positions
def loop_entries(a, starts, W, maps, Z, b, C, norm_w, eps, r, theta, o_base):
    """Khat rows [B, nw, d] of one KV head from plain loops: a [B, T, D] float64, Z [M, c, D] or None
    (uniform), b [W, c] or None, C [M, d, D]; slots at positions < 0 are skipped; RMSNorm (weight
    norm_w), then rotate-half RoPE on the last r dims at the window's start minus o_base (the entry's
    position jS + stagger; V4's csa entry j, pooling 4j-4 .. 4j+3, at 4j)."""
    B = a.shape[0]
    out = np.zeros((B, len(starts), C.shape[1]))
    for bb in range(B):
        for j, o in enumerate(starts):
            slots = [i for i in range(W) if o + i >= 0]
            pays = np.stack([C[maps[i]] @ a[bb, o + i] for i in slots])                  # [n, d]
            if Z is None:
                alpha = np.full((len(slots), 1), 1.0 / len(slots))
            else:
                logit = np.stack([Z[maps[i]] @ a[bb, o + i] + (b[i] if b is not None else 0.0) for i in slots])
                e = np.exp(logit - logit.max(0))
                alpha = e / e.sum(0)
            ent = (alpha * pays).sum(0)
            ent = ent / np.sqrt((ent ** 2).mean() + eps) * norm_w
            dd = ent.shape[0]
            rot = ent.copy()
            for k in range(r // 2):
                ang = (o - o_base) * theta ** (-2.0 * k / r)
                x1, x2 = ent[dd - r + k], ent[dd - r + k + r // 2]
                rot[dd - r + k] = x1 * np.cos(ang) - x2 * np.sin(ang)
                rot[dd - r + k + r // 2] = x2 * np.cos(ang) + x1 * np.sin(ang)
            out[bb, j] = rot
    return out


sys.path.insert(0, os.path.join(ROOT, "tools", "hf"))
from modeling_phaselab import PhaselabConfig, PhaselabForCausalLM, pool_windows, window_starts  # noqa: E402
T_NEG = 23
neg_cfg = PhaselabConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, rope_theta=100.0, rms_norm_eps=1e-6,
                         phaselab=dict(attention="full", window=6, stride=3, gate="uniform", kv_tied=True,
                                       layer_attention="csa,compressed,hca", csa_topk=2, indexer_heads=2, indexer_dim=4,
                                       hca_window=4, hca_stride=4, layer_grid_base=[-4, -5, -2]))
# docs/spec.md §6.4: the remote config refuses what trainer/run_config.c refuses, with one clear line
MR_BAD = {"3 strides for 2 KV heads": dict(head_strides="4,2,2"), "stride not the smallest": dict(head_strides="4,4"),
          "a stride past the window": dict(head_strides="5,2"), "not an integer": dict(head_strides="4,x"),
          "with attention = full": dict(attention="full", head_strides="4,2"),
          "deepseek with unequal strides": dict(compressor="deepseek", head_strides="4,2")}
# docs/spec.md §6.5: learned boundaries are refused where trainer/run_config.c refuses them, with one line
LB_BAD = {"window = stride": dict(window=4, stride=4), "stride 1": dict(window=4, stride=1),
          "attention = full": dict(attention="full"), "grid = staggered": dict(grid="staggered"),
          "head_strides": dict(head_strides="4,2"), "compressor = deepseek": dict(compressor="deepseek"),
          "a layer schedule": dict(layer_attention="compressed"), "an unknown value": dict(boundaries="content")}
for what, bad in LB_BAD.items():
    try:
        PhaselabConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8,
                       phaselab=dict(dict(attention="compressed", window=4, stride=2, boundaries="learned"), **bad))
        lb_err = ""
    except ValueError as e:
        lb_err = str(e)
    check("boundaries" in lb_err and "\n" not in lb_err,
          f"6.5 remote config refuses boundaries = learned with {what} ({lb_err[:90]}...)", lb_err or "accepted")
for what, bad in MR_BAD.items():
    try:
        PhaselabConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, phaselab=dict(dict(attention="compressed", window=4, stride=2),
                                                                         **bad))
        mr_err = ""
    except ValueError as e:
        mr_err = str(e)
    check("head_strides" in mr_err and "\n" not in mr_err,
          f"6.4 remote config refuses head_strides {what} ({mr_err[:90]}...)", mr_err or "accepted")
torch.manual_seed(3)
neg = PhaselabForCausalLM(neg_cfg).double().eval()
with torch.no_grad():
    for n, p in neg.named_parameters():
        p.copy_(torch.randn_like(p) * 0.5 + (1.0 if "norm" in n else 0.0))
a_neg = torch.randn(2, T_NEG, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
MAPS_NEG = [[0] * 4 + [1] * 4, list(range(6)), [0] * 4]   # deepseek halves, paper per offset, shared
for L, (W, S, o) in enumerate([(8, 4, -4), (6, 3, -5), (4, 4, -2)]):
    comp = neg.model.layers[L].self_attn.compressor
    worst, ok_starts = 0.0, True
    want_starts = [o + j * S for j in range(T_NEG) if o + j * S + W - 1 <= T_NEG - 1]
    for g in range(2):
        with torch.no_grad():
            khat, vhat, starts = comp.entries(a_neg, g, 8, 100.0)
        gate = getattr(comp, "k_gate", None)
        ref_k = loop_entries(a_neg.numpy(), want_starts, W, MAPS_NEG[L],
                             None if gate is None else gate.weight[g].detach().numpy(),
                             None if gate is None else gate.bias[g].detach().numpy(),
                             comp.k_payload.weight[g].detach().numpy(), comp.ck_norm.weight.detach().numpy(), 1e-6, 8, 100.0, o)
        worst = max(worst, float(np.abs(khat.numpy() - ref_k).max()))
        ok_starts = ok_starts and starts.tolist() == want_starts
    ends = np.array(want_starts) + W - 1
    n_vis = [int((ends <= t).sum()) for t in range(T_NEG)]
    check(ok_starts and worst < 1e-12 and (o != S - W or n_vis == [(t + 1) // S for t in range(T_NEG)]),
          f"6.1 o_base {o} ({neg_cfg.layer_kinds[L]} W{W}/S{S}, {neg_cfg.layer_config(L)['gate']} gates): "
          f"{len(want_starts)} entries from {want_starts[0]}, partial windows equal the float64 loop "
          f"(max |diff| {worst:.1e})" + (", visible iff j < (t+1) div S" if o == S - W else ""),
          f"starts {starts.tolist()} vs {want_starts}, max |diff| {worst}, visible {n_vis}")
ix = neg.model.layers[0].self_attn.indexer
c = ix.compressor
starts0 = [-4 + 4 * j for j in range(T_NEG) if -4 + 4 * j + 7 <= T_NEG - 1]
with torch.no_grad():
    got = ix.k_norm(pool_windows(a_neg, window_starts(T_NEG, 8, 4, -4), 8, ix.map_of, c.payload.weight[0],
                                 gate=c.gate.weight[0], bias=c.gate.bias[0])).numpy()
ref_ik = loop_entries(a_neg.numpy(), starts0, 8, MAPS_NEG[0], c.gate.weight[0].detach().numpy(),
                      c.gate.bias[0].detach().numpy(), c.payload.weight[0].detach().numpy(),
                      ix.k_norm.weight.detach().numpy(), 1e-6, 0, 100.0, -4)
diff = float(np.abs(got - ref_ik).max())
check(diff < 1e-12, f"6.1 o_base -4: the lightning indexer's keys k^I (partial first window) equal the float64 loop "
      f"(max |diff| {diff:.1e})", f"max |diff| {diff}")
with torch.no_grad():
    lg = neg(torch.randint(0, 50, (2, T_NEG), generator=torch.Generator().manual_seed(5))).logits
check(bool(torch.isfinite(lg).all()), "6.1 a stack with negative offsets runs forward to finite logits", str(lg.abs().max()))
finish()
