"""Reference forward pass of docs/spec.md §1-§2 in NumPy float64, written from the spec alone.

It checks the C forward pass (tests/test_reference_model.py): same config keys as the [model]
section of an INI (trainer/run_config.h), same parameter names and shapes as the checkpoints,
logits [B, T, V].

    x = embed[tok]
    per layer:  a = RMSNorm_in(x);  x += Attn(a);  m = RMSNorm_post(x);
                x += W_down(silu(W_gate m) * W_up m)
    logits = RMSNorm_final(x) @ (embed or lm_head)^T

Attention is full causal (attention = full) or the chunked compressed attention of docs/spec.md
section 2 (attention = compressed): per KV head g and branch B in {K, V}, window j covers
positions jS .. jS+W-1 (exists when jS+W-1 <= T-1); offset i has gate logit
s_{j,i} = Z_{g,i} . a_{jS+i} + b_{g,i}, alpha = softmax over i, payload p_{j,i} = C_{g,i} a_{jS+i},
entry E_j = sum_i alpha_{j,i} p_{j,i}; Khat_j = RoPE(cknorm(E^K_j), jS), Vhat_j = E^V_j.
A query at t attends, in one softmax, to the complete windows (jS+W-1 <= t) and to its raw
local tokens (the last n_local positions, or everything after the last visible window).

Choices where docs/spec.md leaves room (each also marked where it is implemented):
  * attn_sink: the sink logit sink_h is NOT scaled by 1/sqrt(d) and only adds exp(sink_h) to
    the softmax denominator (no value attached). It applies to whatever attention the layer
    runs (full or compressed).
  * qk_norm = false skips qnorm, knorm and cknorm; post_norm does not depend on qk_norm.
  * post_norm: RMSNorm of every payload p_{j,i} with the branch's own weight, before pooling.
  * kv_tied (and compressor = deepseek, which ties keys and values): Vhat_j = Khat_j literally,
    i.e. the value of an entry is the cknorm'ed and RoPE'd key entry.
  * vector gates: the softmax over offsets is taken per channel.
  * compressor = deepseek: Z and C have 2 maps (offset i uses map i // S), the bias keeps W.
  * a raw token inside a visible window is still attended raw (local = window).
  * rope_dims = r: the last r dims of each head rotate, pairs (d-r+i, d-r+i+r/2), i < r/2.
  * window / stride have no default here: a compressed config must give them.

Section 2b (remedies), also from docs/spec.md:
  * compressor = shared: one gate map and one payload map for every offset (W axis 1), the bias
    stays per offset.
  * grid = staggered: KV head g's windows start at o_g = floor(g S / G); window j of head g
    covers o_g + jS .. o_g + jS + W - 1, exists iff its end <= T - 1, is visible to t iff its
    end <= t, and its key rotates to o_g + jS; tail: e_t over the head's own windows. Heads with
    fewer windows than head 0 get zero rows in the [B, nw, G, d] arrays, masked out.
  * head_strides = S_0,S_1,... (docs/spec.md §6.4, multi-rate strides): KV head g pools with its own
    stride S_g: window j of head g covers j S_g .. j S_g + W - 1, rotates to j S_g, is visible to
    t iff j S_g + W - 1 <= t (on a staggered grid o_g = floor(g S_g / G) in front of each); the [B, nw, G, d] arrays have the most rows any head has (the
    smallest stride's), a head's rows past its own count are zero and masked out.
  * gate_coverage (a training objective, not part of the forward): gate_coverage() below gives
    sum over layers and branches of mean over sequences of ln W - H(gbar_b), gbar_{b,i} the mean
    of alpha over the existing (window, KV head) pairs of sequence b (and channels).
  * token_shift (docs/spec.md §6.3): the compressor (gates, payloads, and the boundary score
    below) reads a'_t = a_t + M a_{t-1}, a_{-1} = 0; queries and raw keys/values read a.

Section 6.5, boundaries = learned (content-defined chunks), forward only:
  * p_t = sigmoid(w_bd . a'_t + c_bd) per layer; bd_t = 1 iff p_t >= 1/2 or the open chunk
    reached W tokens (boundary_decisions, a scan); entry j ends at the j-th boundary e_j and starts
    at s_j = e_{j-1} + 1; tokens after the last boundary are in no entry.
  * entry j = the masked window ending at e_j: token t at slot W - 1 - (e_j - t), map m(slot),
    bias b_{g,slot}, softmax over the present slots; Khat_j = c_j RoPE(cknorm(E^K_j), s_j),
    Vhat_j = c_j E^V_j (tied: Khat), c_j = 1 + p_e - sg(p_e) = 1 in value.
  * entry j visible to t iff e_j <= t; tail: raw tokens after the last visible end; window: §2.5.
    Shared by every KV head of the layer; the [B, n, G, d] arrays have n = max_b n_b rows.
  * forward(..., boundaries=[bd per layer]) holds the decisions (docs/spec.md §6.5 "Estimator
    definition"); forward(..., trace=[]) returns each layer's p and bd; chunk_phase gives the
    chunk phase of the phase fold.

Also a command-line tool with the contract of the C tool build/tests/ref_forward:
    python3 tests/ref/spec_model.py CONFIG.ini WEIGHTS.safetensors TOKENS.i32 B T OUT.f32
"""
import configparser
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# [model] keys (trainer/run_config.h) with the docs/spec.md defaults. rope_dims None = head_dim.
DEFAULTS = dict(d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128, d_ff=3072,
                vocab_size=151936, rope_theta=1e6, norm_eps=1e-6, tie_embeddings=True,
                attention="full", window=None, stride=None, gate="scalar", gate_bias=True,
                kv_tied=False, post_norm=False, qk_norm=True, rope_dims=None, local="window",
                n_local=16, compressor="paper", attn_sink=False, grid="aligned", head_strides=None,
                token_shift=False, boundaries="grid")
# keys written to an INI only when they differ from their default (a build without the feature
# then still reads the INI of every other variant)
INI_ONLY_WHEN_SET = ("boundaries",)
INT_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size",
            "window", "stride", "rope_dims", "n_local")
FLOAT_KEYS = ("rope_theta", "norm_eps")
BOOL_KEYS = ("tie_embeddings", "gate_bias", "kv_tied", "post_norm", "qk_norm", "attn_sink", "token_shift")
# [model] keys of variants this reference does not implement (docs/spec.md §5): a config
# that has them at their off value is the plain model and is read; any other value is refused.
SCHEDULE_KEY_PREFIXES = ("csa_", "hca_", "indexer_")
OFF_ONLY_KEYS = dict(layer_attention=("",))
ENUM_KEYS = dict(attention=("full", "compressed"), gate=("scalar", "vector", "uniform"),
                 local=("window", "tail"), compressor=("paper", "deepseek", "shared"),
                 grid=("aligned", "staggered"), boundaries=("grid", "learned"))


def make_config(**overrides):
    """A complete, validated [model] config dict: DEFAULTS updated with overrides."""
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown [model] keys {sorted(unknown)}")
    c = dict(DEFAULTS)
    c.update(overrides)
    if c["rope_dims"] is None:
        c["rope_dims"] = c["head_dim"]
    for k, allowed in ENUM_KEYS.items():
        if c[k] not in allowed:
            raise ValueError(f"[model] {k} = {c[k]!r}, expected one of {allowed}")
    if c["n_heads"] % c["n_kv_heads"]:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    r = c["rope_dims"]
    if r < 0 or r > c["head_dim"] or r % 2:
        raise ValueError("rope_dims must be even and in 0..head_dim")
    if c["attention"] == "compressed":
        if c["window"] is None or c["stride"] is None or c["window"] < 1 or c["stride"] < 1:
            raise ValueError("compressed attention needs window >= 1 and stride >= 1")
        if c["compressor"] == "deepseek" and c["window"] != 2 * c["stride"]:
            raise ValueError("compressor = deepseek requires window = 2 * stride")
    elif c["grid"] == "staggered":
        raise ValueError("grid = staggered needs attention = compressed")
    if c["token_shift"] and c["attention"] != "compressed":
        raise ValueError("token_shift needs attention = compressed")
    if c["boundaries"] == "learned":
        # docs/spec.md §6.5 Rules: W > S >= 2, compressed, no other grid
        if c["attention"] != "compressed":
            raise ValueError("boundaries = learned needs attention = compressed")
        if not (c["window"] > c["stride"] >= 2):
            raise ValueError("boundaries = learned needs window > stride >= 2")
        if c["grid"] != "aligned" or c["head_strides"] or c["compressor"] == "deepseek":
            raise ValueError("boundaries = learned does not combine with staggered, head_strides or deepseek")
    if not c["head_strides"]:
        c["head_strides"] = None
    elif c["attention"] == "compressed":
        hs = [int(x) for x in str(c["head_strides"]).split(",")]
        if len(hs) != c["n_kv_heads"] or min(hs) < 1 or max(hs) > c["window"] or min(hs) != c["stride"]:
            raise ValueError("head_strides needs one stride per KV head, each 1..window, the smallest = stride")
    return c


def ini_text(c):
    """The [model] section of an INI for config c (every key, booleans as true/false)."""
    lines = ["[model]"]
    for k in DEFAULTS:
        v = c[k]
        if v is None:
            continue
        if k in INI_ONLY_WHEN_SET and v == DEFAULTS[k]:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


def parse_ini(path):
    """Reads the [model] section of an INI (other sections ignored) into a config dict."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    with open(path) as f:
        cp.read_file(f)
    sec = cp["model"] if cp.has_section("model") else {}
    kw = {}
    for k, v in sec.items():
        v = v.strip()
        if k.startswith(SCHEDULE_KEY_PREFIXES) and not sec.get("layer_attention", "").strip():
            continue   # a layer kind's own keys: unused without a schedule (docs/spec.md §5)
        if k in OFF_ONLY_KEYS:
            if v.lower() not in OFF_ONLY_KEYS[k]:
                raise ValueError(f"{path}: [model] {k} = {v}: this reference does not implement it")
            continue
        if k not in DEFAULTS:
            raise ValueError(f"{path}: [model] unknown key {k}")
        if k in INT_KEYS:
            kw[k] = int(v)
        elif k in FLOAT_KEYS:
            kw[k] = float(v)
        elif k in BOOL_KEYS:
            if v.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{path}: [model] {k} = {v}, expected true or false")
            kw[k] = v.lower() in ("true", "1")
        else:
            kw[k] = v
    return make_config(**kw)


def param_shapes(c):
    """Every parameter of config c as an ordered {name: shape} (HuggingFace Qwen3 + docs/spec.md §2)."""
    D, H, G, d, F, V = (c[k] for k in ("d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size"))
    shapes = {"model.embed_tokens.weight": (V, D)}
    for L in range(c["n_layers"]):
        p = f"model.layers.{L}."
        shapes[p + "input_layernorm.weight"] = (D,)
        shapes[p + "self_attn.q_proj.weight"] = (H * d, D)
        shapes[p + "self_attn.k_proj.weight"] = (G * d, D)
        shapes[p + "self_attn.v_proj.weight"] = (G * d, D)
        shapes[p + "self_attn.o_proj.weight"] = (D, H * d)
        if c["qk_norm"]:
            shapes[p + "self_attn.q_norm.weight"] = (d,)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
        if c["attention"] == "compressed":
            W = c["window"]
            n_maps = {"deepseek": 2, "shared": 1}.get(c["compressor"], W)
            ch = d if c["gate"] == "vector" else 1
            tied = c["kv_tied"] or c["compressor"] == "deepseek"
            cp = p + "self_attn.compressor."
            for br in ("k",) if tied else ("k", "v"):
                if c["gate"] != "uniform":
                    shapes[cp + f"{br}_gate.weight"] = (G, n_maps, ch, D)
                    if c["gate_bias"]:
                        shapes[cp + f"{br}_gate.bias"] = (G, W, ch)
                shapes[cp + f"{br}_payload.weight"] = (G, n_maps, d, D)
                if c["post_norm"]:
                    shapes[cp + f"{br}_post_norm.weight"] = (d,)
            if c["qk_norm"]:
                shapes[cp + "ck_norm.weight"] = (d,)
            if c["token_shift"]:
                shapes[cp + "token_shift.weight"] = (D, D)
            if c["boundaries"] == "learned":
                shapes[cp + "boundary.weight"] = (D,)
                shapes[cp + "boundary.bias"] = (1,)
        if c["attn_sink"]:
            shapes[p + "self_attn.attn_sink"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (D,)
        shapes[p + "mlp.gate_proj.weight"] = (F, D)
        shapes[p + "mlp.up_proj.weight"] = (F, D)
        shapes[p + "mlp.down_proj.weight"] = (D, F)
    shapes["model.norm.weight"] = (D,)
    if not c["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    return shapes


def check_params(c, params):
    """Raises ValueError on a missing or unexpected tensor or a wrong shape."""
    shapes = param_shapes(c)
    missing = [n for n in shapes if n not in params]
    extra = [n for n in params if n not in shapes]
    if missing or extra:
        raise ValueError(f"missing tensors {missing}, unexpected tensors {extra}")
    for n, s in shapes.items():
        if tuple(np.shape(params[n])) != tuple(s):
            raise ValueError(f"tensor {n}: shape {list(np.shape(params[n]))}, expected {list(s)}")


# ---------------------------------------------------------------------------------------------
# Building blocks

def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, r, theta):
    """Rotate-half RoPE over the LAST r dims of x [..., N, heads, d] at positions pos [N]:
    with half = r/2, u = x[d-r+i], w = x[d-r+half+i], angle = pos * theta^(-2i/r):
    u' = u cos - w sin, w' = w cos + u sin (HuggingFace rotate_half). r = 0: identity."""
    if r == 0:
        return x
    d = x.shape[-1]
    half = r // 2
    inv_freq = theta ** (-2.0 * np.arange(half) / r)                   # [half]
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]  # [N, half]
    cos = np.cos(ang)[:, None, :]                                       # [N, 1, half]
    sin = np.sin(ang)[:, None, :]
    u = x[..., d - r:d - half]
    w = x[..., d - half:]
    out = x.copy()
    out[..., d - r:d - half] = u * cos - w * sin
    out[..., d - half:] = w * cos + u * sin
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def head_stride(c, g):
    """S_g: docs/spec.md §6.4, the g-th of head_strides, else stride."""
    if c.get("head_strides"):
        return int(str(c["head_strides"]).split(",")[g])
    return c["stride"]


def grid_offset(c, g):
    """o_g: docs/spec.md §2b, floor(g * S / G) for grid = staggered (§6.4: floor(g * S_g / G)), else 0."""
    return (g * head_stride(c, g)) // c["n_kv_heads"] if c["grid"] == "staggered" else 0


def n_windows(c, T, g=None):
    """Windows j of KV head g with o_g + j S_g + W - 1 <= T - 1; g = None: the most of any head."""
    if g is None:
        return max(n_windows(c, T, h) for h in range(c["n_kv_heads"]))
    o = grid_offset(c, g) if c["attention"] == "compressed" else 0
    if c["attention"] != "compressed" or T - o < c["window"]:
        return 0
    return (T - o - c["window"]) // head_stride(c, g) + 1


def visibility(c, T, g=0):
    """Boolean masks for the queries t = 0..T-1 reading KV head g: entry [T, n_windows(c, T)]
    (compressed entry j of head g visible at t) and raw [T, T] (raw token s visible at t),
    straight from docs/spec.md §2 and §2b."""
    W, S = c["window"], c["stride"]
    nw = n_windows(c, T)
    t = np.arange(T)[:, None]
    if c["attention"] == "compressed":
        S = head_stride(c, g)
    s = np.arange(T)[None, :]
    if c["attention"] == "full":
        return np.zeros((T, 0), bool), s <= t
    o = grid_offset(c, g)
    nwg = n_windows(c, T, g)
    j = np.arange(nw)[None, :]
    entry = (j < nwg) & (o + j * S + W - 1 <= t)                        # [T, nw]
    if c["local"] == "window":
        raw = (t - c["n_local"] + 1 <= s) & (s <= t)
    else:
        # e_t = last position covered by a visible entry of this head, -1 when none
        e = np.array([max([o + jj * S + W - 1 for jj in range(nwg) if o + jj * S + W - 1 <= tt], default=-1)
                      for tt in range(T)])[:, None]
        raw = (e < s) & (s <= t)
    return entry, raw


def compressor_alpha_payload(c, params, prefix, br, a, g):
    """Gate weights alpha [B, nw_g, W, ch] and (post-normed) payloads [B, nw_g, W, d] of KV head g."""
    W, S, eps = c["window"], c["stride"], c["norm_eps"]
    T = a.shape[1]
    nwg = n_windows(c, T, g)
    cp = prefix + "self_attn.compressor."
    offsets = np.arange(W)
    # map used at offset i: i itself (paper), i // S (deepseek: two half-window maps), 0 (shared)
    map_of = {"deepseek": offsets // S, "shared": np.zeros(W, int)}.get(c["compressor"], offsets)
    pos = grid_offset(c, g) + np.arange(nwg)[:, None] * head_stride(c, g) + offsets[None, :]   # [nw_g, W]
    a_win = a[:, pos]                                                   # [B, nw_g, W, D]
    C = params[cp + f"{br}_payload.weight"][g, map_of]                  # [W, d, D]
    payload = np.einsum("bjie,ide->bjid", a_win, C)                     # [B, nw_g, W, d]
    if c["post_norm"]:
        # choice: RMSNorm of each payload, branch's own weight, before pooling
        payload = rmsnorm(payload, params[cp + f"{br}_post_norm.weight"], eps)
    if c["gate"] == "uniform":
        alpha = np.full((a.shape[0], nwg, W, 1), 1.0 / W)
    else:
        Z = params[cp + f"{br}_gate.weight"][g, map_of]                 # [W, ch, D]
        score = np.einsum("bjie,ice->bjic", a_win, Z)                   # [B, nw_g, W, ch]
        if c["gate_bias"]:
            score = score + params[cp + f"{br}_gate.bias"][g]           # [W, ch]
        score = score - score.max(axis=2, keepdims=True)
        alpha = np.exp(score)
        alpha = alpha / alpha.sum(axis=2, keepdims=True)               # softmax over offsets (per channel)
    return alpha, payload


def compressor_branch(c, params, prefix, br, a):
    """Pooled entries E^B [B, n_windows, G, d] of branch br ('k' or 'v') from a [B, T, D]
    (rows j >= n_windows(c, T, g) of a staggered head are zero)."""
    B, T, D = a.shape
    G, d = c["n_kv_heads"], c["head_dim"]
    out = np.zeros((B, n_windows(c, T), G, d))
    for g in range(G):
        alpha, payload = compressor_alpha_payload(c, params, prefix, br, a, g)
        out[:, :alpha.shape[1], g] = (alpha * payload).sum(axis=2)
    return out


def gate_coverage(c, params, tokens):
    """docs/spec.md §2b penalty without lambda: sum over layers and branches (one when K/V are tied) of
    mean over sequences b of ln W - H(gbar_b); gbar_b = mean of alpha over the existing (window,
    KV head) pairs of sequence b and the channels. 0 for uniform gates and full attention."""
    if c["attention"] != "compressed" or c["gate"] == "uniform":
        return 0.0
    if c["boundaries"] == "learned":
        raise ValueError("gate coverage is not defined with boundaries = learned (docs/spec.md §6.5 Rules)")
    params = {n: np.asarray(w, dtype=np.float64) for n, w in params.items()}
    eps, W = c["norm_eps"], c["window"]
    x = params["model.embed_tokens.weight"][np.asarray(tokens)]
    total = 0.0
    tied = c["kv_tied"] or c["compressor"] == "deepseek"
    for L in range(c["n_layers"]):
        p = f"model.layers.{L}."
        a = rmsnorm(x, params[p + "input_layernorm.weight"], eps)
        ac = compressor_input(c, params, p, a)
        for br in ("k",) if tied else ("k", "v"):
            alphas = [compressor_alpha_payload(c, params, p, br, ac, g)[0] for g in range(c["n_kv_heads"])]
            summed = sum(al.sum(axis=(1, 3)) for al in alphas)            # [B, W]
            count = sum(al.shape[1] * al.shape[3] for al in alphas)
            gbar = summed / count
            H = -(gbar * np.log(gbar)).sum(axis=1)
            total += float(np.mean(np.log(W) - H))
        x = x + attention(c, params, p, a)
        m = rmsnorm(x, params[p + "post_attention_layernorm.weight"], eps)
        x = x + (silu(m @ params[p + "mlp.gate_proj.weight"].T) * (m @ params[p + "mlp.up_proj.weight"].T)) \
            @ params[p + "mlp.down_proj.weight"].T
    return total


def compressor_input(c, params, prefix, a):
    """What the compressor reads (docs/spec.md §6.3): a'_t = a_t + M a_{t-1} (a_{-1} = 0 per
    sequence, M = compressor.token_shift.weight [D, D]) with token_shift, else a itself."""
    if not c["token_shift"]:
        return a
    M = params[prefix + "self_attn.compressor.token_shift.weight"]
    prev = np.zeros_like(a)
    prev[:, 1:] = a[:, :-1]
    return a + prev @ M.T


# ---------------------------------------------------------------------------------------------
# docs/spec.md §6.5: content-defined chunk boundaries (model.boundaries = learned)

def boundary_probs(c, params, prefix, ac):
    """p_{b,t} = sigmoid(w_bd . a_{b,t} + c_bd) [B, T] from the compressor's input ac [B, T, D]."""
    cp = prefix + "self_attn.compressor."
    q = ac @ params[cp + "boundary.weight"] + params[cp + "boundary.bias"][0]
    return 1.0 / (1.0 + np.exp(-q))


def boundary_decisions(p, W):
    """bd [B, T] (bool): scanning t = 0..T-1 with s the first token of the open chunk (0 at the
    start, t + 1 after a boundary at t), bd_t = 1 iff p_t >= 1/2 or t - s + 1 = W (forced)."""
    p = np.asarray(p)
    bd = np.zeros(p.shape, bool)
    for b in range(p.shape[0]):
        s = 0
        for t in range(p.shape[1]):
            if p[b, t] >= 0.5 or t - s + 1 == W:
                bd[b, t] = True
                s = t + 1
    return bd


def chunk_bounds(bd_row):
    """(starts, ends) of the entries of one sequence: e_j = the j-th t with bd = 1,
    s_j = e_{j-1} + 1 (s_0 = 0)."""
    ends = np.flatnonzero(bd_row)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(int) if len(ends) else np.zeros(0, int)
    return starts, ends


def chunk_phase(bd, W):
    """docs/spec.md §6.5 phase fold: the slot i = W - 1 - (e_j - t) of token t in the entry j that
    pools it, -1 for a token after the last boundary (unpooled). [B, T] int."""
    out = np.full(np.shape(bd), -1)
    for b in range(out.shape[0]):
        for s, e in zip(*chunk_bounds(bd[b])):
            t = np.arange(s, e + 1)
            out[b, t] = W - 1 - (e - t)
    return out


def boundary_entries(c, params, prefix, br, ac, bd):
    """Pooled entries E^B [B, n, G, d] of branch br, n = max_b n_b (rows j >= n_b zero): entry j
    is the masked window of docs/spec.md §6.1 ending at e_j, the token t at slot
    i = W - 1 - (e_j - t), slots i < W - L_j masked (softmax over the present slots per channel,
    uniform gate 1 / L_j)."""
    B, T, D = ac.shape
    W, G, d, eps = c["window"], c["n_kv_heads"], c["head_dim"], c["norm_eps"]
    cp = prefix + "self_attn.compressor."
    map_of = np.zeros(W, int) if c["compressor"] == "shared" else np.arange(W)
    n = int(bd.sum(axis=1).max()) if bd.size else 0
    out = np.zeros((B, n, G, d))
    for b in range(B):
        for j, (s, e) in enumerate(zip(*chunk_bounds(bd[b]))):
            toks = np.arange(s, e + 1)
            slots = W - 1 - (e - toks)                                  # W - L .. W - 1
            x = ac[b, toks]                                             # [L, D]
            for g in range(G):
                pay = np.einsum("ie,ide->id", x, params[cp + f"{br}_payload.weight"][g, map_of[slots]])
                if c["post_norm"]:
                    pay = rmsnorm(pay, params[cp + f"{br}_post_norm.weight"], eps)
                if c["gate"] == "uniform":
                    alpha = np.full((len(toks), 1), 1.0 / len(toks))
                else:
                    score = np.einsum("ie,ice->ic", x, params[cp + f"{br}_gate.weight"][g, map_of[slots]])
                    if c["gate_bias"]:
                        score = score + params[cp + f"{br}_gate.bias"][g, slots]
                    alpha = np.exp(score - score.max(axis=0))
                    alpha = alpha / alpha.sum(axis=0)                   # over the present slots
                out[b, j, g] = (alpha * pay).sum(axis=0)
    return out


def boundary_visibility(c, bd_row, n_rows):
    """Masks of one sequence for the queries t = 0..T-1 (docs/spec.md §6.5 / §6.1): entry
    [T, n_rows] (entry j visible iff it exists and e_j <= t) and raw [T, T] (window: the last
    n_local tokens; tail: the tokens after the end of the last visible entry)."""
    T = len(bd_row)
    ends = chunk_bounds(bd_row)[1]
    t = np.arange(T)[:, None]
    s = np.arange(T)[None, :]
    e = np.full(n_rows, T)                                              # missing rows: never visible
    e[:len(ends)] = ends
    entry = e[None, :] <= t
    if c["local"] == "window":
        raw = (t - c["n_local"] + 1 <= s) & (s <= t)
    else:
        last = np.array([max((x for x in ends if x <= tt), default=-1) for tt in range(T)])[:, None]
        raw = (last < s) & (s <= t)
    return entry, raw


def learned_entries(c, params, prefix, ac, bd, p):
    """(Khat, Vhat) [B, n, G, d] of docs/spec.md §6.5 "Entries": cknorm, RoPE at the entry's FIRST
    token s_j, times the straight-through factor c_j = 1 + p_e - sg(p_e) (value 1)."""
    sa = prefix + "self_attn."
    r, theta, eps = c["rope_dims"], c["rope_theta"], c["norm_eps"]
    ek = boundary_entries(c, params, prefix, "k", ac, bd)
    if c["qk_norm"]:
        ek = rmsnorm(ek, params[sa + "compressor.ck_norm.weight"], eps)
    B, n = ek.shape[:2]
    pos = np.zeros((B, n), int)
    st = np.zeros((B, n))
    for b in range(B):
        starts, ends = chunk_bounds(bd[b])
        pos[b, :len(starts)] = starts
        pe = p[b, ends]
        st[b, :len(ends)] = 1.0 + (pe - pe)                             # p - sg(p): value 0
    khat = np.stack([rope(ek[b], pos[b], r, theta) for b in range(B)]) if B else ek
    khat = khat * st[:, :, None, None]
    if c["kv_tied"]:
        vhat = khat                                                     # tied: one factor
    else:
        vhat = boundary_entries(c, params, prefix, "v", ac, bd) * st[:, :, None, None]
    return khat, vhat


def attention(c, params, prefix, a, bd=None, trace=None):
    """Attention block output [B, T, D] for a = RMSNorm_in(x) [B, T, D]. With learned boundaries
    (docs/spec.md §6.5) bd [B, T] holds the decisions (None: decided from the scores) and trace,
    a list, gets dict(p=p, bd=bd) of this layer appended."""
    B, T, D = a.shape
    H, G, d, eps = c["n_heads"], c["n_kv_heads"], c["head_dim"], c["norm_eps"]
    r, theta = c["rope_dims"], c["rope_theta"]
    sa = prefix + "self_attn."
    q = (a @ params[sa + "q_proj.weight"].T).reshape(B, T, H, d)
    k = (a @ params[sa + "k_proj.weight"].T).reshape(B, T, G, d)
    v = (a @ params[sa + "v_proj.weight"].T).reshape(B, T, G, d)
    if c["qk_norm"]:
        q = rmsnorm(q, params[sa + "q_norm.weight"], eps)
        k = rmsnorm(k, params[sa + "k_norm.weight"], eps)
    t_pos = np.arange(T)
    q = rope(q, t_pos, r, theta)
    k = rope(k, t_pos, r, theta)
    kv_head = np.arange(H) // (H // G)                                  # GQA: head h reads floor(h/(H/G))
    ac = compressor_input(c, params, prefix, a) if c["attention"] == "compressed" else a

    if c["attention"] == "compressed" and c["boundaries"] == "learned":
        p = boundary_probs(c, params, prefix, ac)
        if bd is None:
            bd = boundary_decisions(p, c["window"])
        bd = np.asarray(bd, bool)
        if trace is not None:
            trace.append(dict(p=p, bd=bd))
        khat, vhat = learned_entries(c, params, prefix, ac, bd, p)
        n = khat.shape[1]
        vis = np.stack([np.concatenate(boundary_visibility(c, bd[b], n), axis=1) for b in range(B)])
        vis = vis[:, None]                                              # [B, 1, T, n+T]: every head
    else:
        nw = n_windows(c, T)
        if nw > 0:
            ek = compressor_branch(c, params, prefix, "k", ac)
            if c["qk_norm"]:
                ek = rmsnorm(ek, params[sa + "compressor.ck_norm.weight"], eps)
            khat = np.zeros_like(ek)
            for g in range(G):                                          # RoPE at window start o_g + j S_g
                khat[:, :, g:g + 1] = rope(ek[:, :, g:g + 1], grid_offset(c, g) + np.arange(nw) * head_stride(c, g),
                                           r, theta)
            if c["kv_tied"] or c["compressor"] == "deepseek":
                vhat = khat                                             # choice: Vhat = Khat literally
            else:
                vhat = compressor_branch(c, params, prefix, "v", ac)
        else:
            khat = np.zeros((B, 0, G, d))
            vhat = np.zeros((B, 0, G, d))
        vis_g = np.stack([np.concatenate(visibility(c, T, g), axis=1) for g in range(G)])   # [G, T, nw+T]
        vis = vis_g[kv_head][None]                                      # [1, H, T, nw+T]: per KV head's grid

    # keys / values in softmax order: compressed entries first, then raw tokens
    keys = np.concatenate([khat, k], axis=1)                            # [B, nw+T, G, d]
    vals = np.concatenate([vhat, v], axis=1)
    keys_h = keys[:, :, kv_head]                                        # [B, nw+T, H, d]
    vals_h = vals[:, :, kv_head]
    scores = np.einsum("bthd,bshd->bhts", q, keys_h) / np.sqrt(d)       # [B, H, T, nw+T]
    scores = np.where(vis, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    if c["attn_sink"]:
        # choice: unscaled sink logit, adds exp(sink_h) to the denominator only
        sink = params[sa + "attn_sink"][None, :, None, None]            # [1, H, 1, 1]
        m = np.maximum(m, sink)
        e = np.exp(scores - m)
        p = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - m))
    else:
        e = np.exp(scores - m)
        p = e / e.sum(axis=-1, keepdims=True)
    o = np.einsum("bhts,bshd->bthd", p, vals_h).reshape(B, T, H * d)
    return o @ params[sa + "o_proj.weight"].T


def forward(c, params, tokens, boundaries=None, trace=None):
    """Logits [B, T, V] (float64) of config c, parameters {name: array}, tokens [B, T].
    Learned boundaries (docs/spec.md §6.5): boundaries, a list of [B, T] decisions per layer,
    holds them (None: decided from the scores); trace, a list, gets dict(p, bd) per layer."""
    check_params(c, params)
    params = {n: np.asarray(w, dtype=np.float64) for n, w in params.items()}
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError("tokens must be [B, T]")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= c["vocab_size"]):
        raise ValueError("token id out of range")
    eps = c["norm_eps"]
    x = params["model.embed_tokens.weight"][tokens]                    # [B, T, D]
    for L in range(c["n_layers"]):
        p = f"model.layers.{L}."
        a = rmsnorm(x, params[p + "input_layernorm.weight"], eps)
        x = x + attention(c, params, p, a, None if boundaries is None else boundaries[L], trace)
        m = rmsnorm(x, params[p + "post_attention_layernorm.weight"], eps)
        g = m @ params[p + "mlp.gate_proj.weight"].T
        u = m @ params[p + "mlp.up_proj.weight"].T
        x = x + (silu(g) * u) @ params[p + "mlp.down_proj.weight"].T
    h = rmsnorm(x, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight" if c["tie_embeddings"] else "lm_head.weight"]
    return h @ head.T


def main(argv):
    if len(argv) != 7:
        print("usage: spec_model.py CONFIG.ini WEIGHTS.safetensors TOKENS.i32 B T OUT.f32", file=sys.stderr)
        return 2
    cfg_path, w_path, tok_path, B, T, out_path = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6]
    c = parse_ini(cfg_path)
    params, _ = safetensors_io.load(w_path)
    tokens = np.fromfile(tok_path, dtype="<i4")
    if tokens.size != B * T:
        print(f"phaselab: {tok_path}: {tokens.size} tokens, expected B*T = {B * T}", file=sys.stderr)
        return 1
    logits = forward(c, params, tokens.reshape(B, T))
    logits.astype("<f4").tofile(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
