"""PyTorch / transformers implementation of phaselab's model, written from docs/spec.md §1, §2, 2b,
§5 and §6: the Qwen3 backbone with full or chunked compressed KV attention and every variant key
(gate scalar/vector/uniform, gate_bias, kv_tied, post_norm, qk_norm, rope_dims, local
window/tail, n_local, compressor paper/deepseek/shared, attn_sink, grid aligned/staggered, token_shift,
head_strides: a stride per KV head, §6.4, boundaries = learned: content-defined chunks, §6.5),
and the DeepSeek-V4 layer stacks of §5 (model.layer_attention: per layer full, compressed, window,
csa with or without the lightning indexer, hca), each layer built from its own config
(PhaselabConfig.layer_config, as model/layer_kinds.c) with its static grid offset o_base
(config.json layer_grid_base, §6.1; negative offsets give partial first windows).

./train copies this file and configuration_phaselab.py into every checkpoint whose model is not
a plain Qwen3 (config.json: model_type "phaselab", auto_map), so that

    AutoModelForCausalLM.from_pretrained(CKPT, trust_remote_code=True)

loads it and computes phaselab's logits. Parameter names and shapes are those of the
checkpoint (HuggingFace Qwen3 names, docs/spec.md §2 compressor names, §5.4 indexer names). Every
sequence starts at position 0 (docs/spec.md: t is 0-based inside a training sequence); there is no
KV cache, for one-kind models and stacks alike: generate() recomputes the whole prefix at every
step (use_cache is off). A padded batch (attention_mask with zeros: left padding, as batched
generate() needs, or right padding) is computed row by row as each row's unpadded sequence from
position 0 (PhaselabForCausalLM.forward); output_hidden_states gives transformers' Qwen3 layout;
output_attentions, position_ids other than 0, 1, ..., past_key_values and inputs_embeds are
refused with one line. Every tensor of forward is made on the input's device. Forward and loss only: the
lightning indexer selects its top-k, but its training KL term (§5.4) is not computed. Computation
is in the parameters' dtype (float32 as stored); RMSNorm in float32 at least. The project's copy
is tools/hf/modeling_phaselab.py.

Choices where docs/spec.md leaves room (the same as the C model and tests/ref/spec_model.py):
attn_sink is an unscaled per-head logit that only adds exp(sink) to the softmax denominator;
qk_norm = false also drops cknorm; kv_tied (and deepseek) use Vhat = Khat (normed, RoPE'd);
vector gates take the softmax over offsets per channel; a raw token inside a visible window is
still attended raw. With a negative o_base (§6.1; csa layers: S - W): a partial
window's slots before position 0 are masked out of the gate softmax (uniform gates: the mean over
its real slots), and entry j is rotated to o - o_base + jS (V4's csa entry j, pooling 4j-4 .. 4j+3: 4j).
Learned chunk boundaries (§6.5): the decisions p_t >= 1/2 or a chunk of W tokens come from a per-sequence
scan (no gradient); each entry is the masked window ending at its boundary, rotated to its chunk's first
token, and Khat / Vhat carry the straight-through factor c = 1 + p_e - p_e.detach() (value 1), so
backpropagating through this model gives §6.5's estimator (the ratio loss is not computed). One candidate
entry per position e, visible iff bd_e and e <= t; generate() recomputes the prefix, as for every model."""
import math

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast

try:
    from .configuration_phaselab import PhaselabConfig
except ImportError:  # imported as a plain module (tools/hf on sys.path)
    from configuration_phaselab import PhaselabConfig


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis, in float32 at least."""
    dtype = x.dtype
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(y.dtype)).to(dtype)


def rope(x, pos, r, theta):
    """Rotate-half RoPE over the LAST r dims of x [B, N, heads, d] at positions pos [N] (or
    [heads, N] for per-head positions): pairs (d-r+i, d-r+i+r/2), angle pos * theta^(-2i/r)."""
    if r == 0:
        return x
    d = x.shape[-1]
    half = r // 2
    # the angles in float64 (float32 where the device has none: Apple's mps), on x's device
    wide = torch.float32 if x.device.type == "mps" else torch.float64
    inv_freq = theta ** (-2.0 * torch.arange(half, dtype=wide, device=x.device) / r)
    ang = pos.to(device=x.device, dtype=wide)[..., None] * inv_freq    # [N, half] or [heads, N, half]
    if ang.dim() == 3:
        ang = ang.transpose(0, 1)                                      # [N, heads, half]
    else:
        ang = ang[:, None, :]                                          # [N, 1, half]
    cos = torch.cos(ang).to(x.dtype)
    sin = torch.sin(ang).to(x.dtype)
    u = x[..., d - r:d - half]
    w = x[..., d - half:]
    return torch.cat([x[..., :d - r], u * cos - w * sin, w * cos + u * sin], dim=-1)


class PhaselabRMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def window_starts(T, W, S, o):
    """Window starts o + jS of a grid with offset o (> -W) for the windows that exist in T tokens,
    o + jS + W - 1 <= T - 1 (kernels/visibility.h vis_n_windows; docs/spec.md §6.1)."""
    n = (T - o - W) // S + 1 if T - o >= W else 0
    return o + S * torch.arange(max(n, 0))


def pool_windows(a, starts, W, map_of, payload, gate=None, bias=None, post_norm=None, keep=None):
    """Entries [B, nw, d] of windows starting at starts [nw] (docs/spec.md §2.2, §6.1): per window j
    and offset i the position p = starts_j + i, gate logits s = Z_{m(i)} a_p + b_i, alpha = softmax
    over the offsets (per channel), entry = sum_i alpha_i C_{m(i)} a_p (post_norm: RMSNorm of each
    payload first). Slots before position 0 (p < 0, a partial window of a negative offset) are
    masked out of the softmax and pool nothing. a [B, T, D]; payload [M, d, D]; gate [M, c, D] or
    None (uniform: equal weights over the real slots); bias [W, c] or None; map_of[i] = m(i).
    keep [B, nw, W] (bool) or None: slots that pool, per sequence (docs/spec.md §6.5: a chunk's masked
    window, slots before its first token are out); the result is then per sequence as well."""
    pos = starts[:, None] + torch.arange(W)[None, :]                          # [nw, W]
    real = (pos >= 0).to(a.device)                                            # [nw, W]
    if keep is not None:
        real = real[None] & keep.to(a.device)                                 # [B, nw, W]
    else:
        real = real[None]                                                     # [1, nw, W]
    maps = torch.tensor(map_of, device=a.device)
    a_win = a[:, pos.clamp(0, a.shape[1] - 1).to(a.device)]                   # [B, nw, W, D]
    p = torch.einsum("bjie,ide->bjid", a_win, payload[maps])                  # [B, nw, W, d]
    if post_norm is not None:
        p = post_norm(p)
    if gate is None:
        score = torch.zeros(a.shape[0], pos.shape[0], W, 1, dtype=a.dtype, device=a.device)
    else:
        score = torch.einsum("bjie,ice->bjic", a_win, gate[maps])             # [B, nw, W, c]
        if bias is not None:
            score = score + bias                                              # [W, c]
    score = score.masked_fill(~real[..., None], float("-inf"))
    alpha = torch.softmax(score, dim=2)                                       # over offsets (per channel)
    return (alpha * p).sum(dim=2)                                             # [B, nw, d]


class PhaselabCompressor(nn.Module):
    """The chunked compressor of one layer (docs/spec.md §2, §2b, §6.1, §6.4): per KV head g and
    branch B, windows of W tokens every S_g tokens (S_g = head_strides[g], §6.4; the layer's S
    without them) starting at o_g = o_base + (floor(g S_g / G) if grid = staggered else 0), o_base
    the layer's static offset (may be negative: partial first windows), gate logits
    s_{j,i} = Z_{g,m(i)} . a + b_{g,i}, alpha = softmax over offsets, entries sum_i alpha_i C_{g,m(i)} a.
    lc: the layer's config (PhaselabConfig.layer_config)."""

    def __init__(self, cfg, lc):
        super().__init__()
        v = lc
        G, W, S, d, D = cfg.num_key_value_heads, v["window"], v["stride"], cfg.head_dim, cfg.hidden_size
        self.G, self.W, self.S, self.d, self.eps = G, W, S, d, cfg.rms_norm_eps
        self.gate, self.gate_bias, self.post_norm = v["gate"], v["gate_bias"], v["post_norm"]
        self.qk_norm = v["qk_norm"]
        self.tied = v["kv_tied"] or v["compressor"] == "deepseek"
        n_maps = {"paper": W, "deepseek": 2, "shared": 1}[v["compressor"]]
        # the map used at offset i: i (paper), i // S (deepseek: two half-window maps), 0 (shared);
        # a plain list, not a buffer (from_pretrained builds modules on the meta device)
        self.map_of = [{"paper": i, "deepseek": i // S, "shared": 0}[v["compressor"]] for i in range(W)]
        ch = d if self.gate == "vector" else 1
        for br in ("k",) if self.tied else ("k", "v"):
            if self.gate != "uniform":
                setattr(self, f"{br}_gate", _Holder(weight=(G, n_maps, ch, D), bias=(G, W, ch) if self.gate_bias else None))
            setattr(self, f"{br}_payload", _Holder(weight=(G, n_maps, d, D)))
            if self.post_norm:
                setattr(self, f"{br}_post_norm", PhaselabRMSNorm(d, cfg.rms_norm_eps))
        if self.qk_norm:
            self.ck_norm = PhaselabRMSNorm(d, cfg.rms_norm_eps)
        self.o_base = v.get("grid_base", 0)
        # docs/spec.md §6.4: KV head g's stride S_g (the same W); its stagger floor(g S_g / G)
        self.strides = list(v.get("head_stride", [S] * G))
        self.offsets = [self.o_base + ((g * self.strides[g]) // G if v["grid"] == "staggered" else 0) for g in range(G)]
        # docs/spec.md §6.3: the compressor reads a_t + M a_{t-1} (a_{-1} = 0)
        self.shift = bool(v.get("token_shift", False))
        if self.shift:
            self.token_shift = _Holder(weight=(D, D))
        # docs/spec.md §6.5: learned chunk boundaries, a score w_bd . a_t + c_bd per token (boundary.weight [D],
        # boundary.bias [1]); W is the longest chunk, S only the training target of the mean length
        self.learned = v.get("boundaries", "grid") == "learned"
        if self.learned:
            self.boundary = _Holder(weight=(D,), bias=(1,))
        self.last_chunks = None   # the decisions of the last forward (chunks()), for inspection

    def compressor_input(self, a):
        """a [B, T, D], or with token shift a + shift(a) M^T (row t gets M a_{t-1})."""
        if not self.shift:
            return a
        prev = torch.nn.functional.pad(a, (0, 0, 1, 0))[:, :-1]                  # a_{t-1}, 0 at t = 0
        return a + prev @ self.token_shift.weight.t()

    def starts(self, g, T):
        """Window starts o_g + j S_g of KV head g for windows with o_g + j S_g + W - 1 <= T - 1 (its own
        count nW_g: the rows past it that the C buffers keep, docs/spec.md §6.4, are never visible)."""
        return window_starts(T, self.W, self.strides[g], self.offsets[g])

    def branch(self, br, a, g, starts, keep=None):
        """Pooled entries E^B [B, nw, d] of KV head g from a [B, T, D] (keep: per-sequence slot masks)."""
        holder = getattr(self, f"{br}_gate", None)
        return pool_windows(a, starts, self.W, self.map_of, getattr(self, f"{br}_payload").weight[g],
                            gate=None if holder is None else holder.weight[g],
                            bias=holder.bias[g] if holder is not None and self.gate_bias else None,
                            post_norm=getattr(self, f"{br}_post_norm") if self.post_norm else None, keep=keep)

    def entries(self, a, g, rope_dims, theta):
        """(Khat, Vhat, starts) of KV head g: Khat = RoPE(cknorm(E^K), pos), Vhat = E^V or Khat; entry
        j's RoPE position is o_g - o_base + j S_g (docs/spec.md §6.1, §6.4, kernels/visibility.h
        vis_entry_position): its window's start without the static offset, so V4's csa entry j
        (pooling 4j-4 .. 4j+3) is rotated to 4j and a partial first window to 0."""
        starts = self.starts(g, a.shape[1])
        a = self.compressor_input(a)
        ek = self.branch("k", a, g, starts)
        if self.qk_norm:
            ek = self.ck_norm(ek)
        khat = rope(ek[:, :, None, :], starts - self.o_base, rope_dims, theta)[:, :, 0, :]
        vhat = khat if self.tied else self.branch("v", a, g, starts)
        return khat, vhat, starts


    # ---- learned chunk boundaries (docs/spec.md §6.5) ----
    def chunks(self, a):
        """The decisions of one layer from its normed input a [B, T, D] (the compressor reads a'_t with
        token shift): p_t = sigmoid(w_bd . a'_t + c_bd) [B, T] (with gradient), and per sequence the scan
        t = 0..T-1 with s the first token of the open chunk (0 at the start, t + 1 after a boundary at t):
        bd_t = p_t >= 1/2 (natural) or t - s + 1 = W (forced). Returns a dict: a (a'), p, bd and natural
        [B, T] bool, first [B, T] long (s of the chunk that token t is in or opens; for a boundary t
        the first token of the entry ending at t). The decisions carry no gradient."""
        a = self.compressor_input(a)
        w = self.boundary
        p = torch.sigmoid(a @ w.weight + w.bias)                                      # [B, T]
        natural = (p.detach() >= 0.5).cpu()
        B, T = natural.shape
        bd, first = [[False] * T for _ in range(B)], [[0] * T for _ in range(B)]
        for b, row in enumerate(natural.tolist()):
            s = 0
            for t, nat in enumerate(row):
                first[b][t] = s
                if nat or t - s + 1 >= self.W:
                    bd[b][t], s = True, t + 1
        out = dict(a=a, p=p, natural=natural.to(a.device), bd=torch.tensor(bd, device=a.device),
                   first=torch.tensor(first, dtype=torch.long, device=a.device))
        self.last_chunks = {k: x.detach() for k, x in out.items() if k != "a"}
        return out

    def chunk_windows(self, ch):
        """Window starts [T] and slot masks [B, T, W] of the candidate entry ending at each e = 0..T-1:
        the masked window e - W + 1 .. e (right-aligned: token t at slot i = W - 1 - (e - t), the
        boundary at slot W - 1) whose slots before the chunk's first token are out."""
        T = ch["bd"].shape[1]
        starts = torch.arange(T) - self.W + 1
        pos = (starts[:, None] + torch.arange(self.W)[None, :]).to(ch["first"].device)   # [T, W]
        return starts, pos[None] >= ch["first"][:, :, None]

    def entry_positions(self, ch):
        """RoPE position [B, T] of the entry ending at e: its chunk's FIRST token s_{b,j}."""
        return ch["first"]

    def chunk_entries(self, ch, g, rope_dims, theta):
        """(Khat, Vhat, ends) of KV head g with learned boundaries (docs/spec.md §6.5): one row per
        position e, the entry ending at e where bd_e (ends [B, T] = e there, T elsewhere: never visible),
        pooled as the masked window (pool_windows: map m(i), bias b_{g,i}, softmax over the present
        slots per channel, post-norm per slot), Khat = c RoPE(cknorm(E^K), s_{b,j}), Vhat = c E^V (tied:
        Khat), c = 1 + p_e - sg(p_e): value 1, and in PyTorch the straight-through gradient of §6.5."""
        a, bd = ch["a"], ch["bd"]
        B, T = bd.shape
        starts, keep = self.chunk_windows(ch)
        ek = self.branch("k", a, g, starts, keep)                                       # [B, T, d]
        if self.qk_norm:
            ek = self.ck_norm(ek)
        pos = self.entry_positions(ch).reshape(-1)
        khat = rope(ek.reshape(1, B * T, 1, -1), pos, rope_dims, theta).reshape(B, T, -1)
        c = (1.0 + ch["p"] - ch["p"].detach())[..., None].to(khat.dtype)             # [B, T, 1], value 1
        khat = c * khat
        vhat = khat if self.tied else c * self.branch("v", a, g, starts, keep)
        ends = torch.where(bd, torch.arange(T, device=bd.device)[None, :], torch.full_like(ch["first"], T))
        return khat, vhat, ends


class _Holder(nn.Module):
    """Raw parameter tensors with the checkpoint's shapes (weight, optional bias)."""

    def __init__(self, weight, bias=None):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(weight))
        if bias is not None:
            self.bias = nn.Parameter(torch.zeros(bias))


class PhaselabIndexer(nn.Module):
    """The lightning indexer of a csa layer (docs/spec.md §5.4, kernels/indexer.c), inference only:
        q^I_t = a_t W_iq^T [HI, dI],   w_t = a_t W_iw^T / sqrt(dI HI) [HI]
        k^I_j = RMSNorm(E^I_j; w_ik), E^I the layer's windows (W, S, maps, o_base) pooled with
                G = 1, c = d = dI, vector gates, a per-offset bias, no post-norm
        I(t, j) = sum_h w_{t,h} ReLU(q^I_{t,h} . k^I_j) over the visible entries (end <= t)
        selected(t) = the min(k, n_t) visible entries of largest I; ties: the lower j first.
    The training KL term (§5.4) is not computed: this model is forward and loss only."""

    def __init__(self, cfg, lc):
        super().__init__()
        v = cfg.phaselab
        HI, dI, D, W = v["indexer_heads"], v["indexer_dim"], cfg.hidden_size, lc["window"]
        self.HI, self.dI, self.topk, self.W, self.S = HI, dI, lc["indexer_topk"], W, lc["stride"]
        self.o = lc.get("grid_base", 0)   # the layer's KV head 0 offset (csa layers: S - W, §5.4)
        n_maps = {"paper": W, "deepseek": 2, "shared": 1}[lc["compressor"]]
        self.map_of = [{"paper": i, "deepseek": i // lc["stride"], "shared": 0}[lc["compressor"]] for i in range(W)]
        self.q_proj = nn.Linear(D, HI * dI, bias=False)
        self.weights_proj = nn.Linear(D, HI, bias=False)
        self.compressor = nn.Module()
        self.compressor.gate = _Holder(weight=(1, n_maps, dI, D), bias=(1, W, dI))
        self.compressor.payload = _Holder(weight=(1, n_maps, dI, D))
        self.k_norm = PhaselabRMSNorm(dI, cfg.rms_norm_eps)

    def select(self, a, entry_vis):
        """a [B, T, D], entry_vis [T, nw] (the main grid's visibility) -> selected [B, T, nw] (bool)."""
        B, T, _ = a.shape
        starts = window_starts(T, self.W, self.S, self.o)
        c = self.compressor
        ek = pool_windows(a, starts, self.W, self.map_of, c.payload.weight[0], gate=c.gate.weight[0], bias=c.gate.bias[0])
        kI = self.k_norm(ek)                                                    # [B, nw, dI]
        qI = self.q_proj(a).view(B, T, self.HI, self.dI)
        w = self.weights_proj(a) / math.sqrt(self.dI * self.HI)                 # [B, T, HI]
        dots = torch.relu(torch.einsum("bthx,bjx->bthj", qI, kI))               # [B, T, HI, nw]
        score = torch.einsum("bth,bthj->btj", w, dots)                          # [B, T, nw]
        vis = entry_vis[None].expand(B, -1, -1)
        score = score.masked_fill(~vis, float("-inf"))
        order = torch.sort(-score, dim=-1, stable=True).indices                 # largest first, lower j first on ties
        rank = torch.empty_like(order)
        rank.scatter_(-1, order, torch.arange(order.shape[-1], device=a.device).expand_as(order))
        n_t = vis.sum(-1, keepdim=True)                                         # [B, T, 1]
        return vis & (rank < torch.clamp(n_t, max=self.topk))


class PhaselabAttention(nn.Module):
    """One layer's attention, of the kind its config lc says (docs/spec.md §5.1): full (§1.2), window
    (§5.2: raw n_local window only), compressed / hca (§2 over visible entries and the raw tokens),
    csa (§2, and with indexer_topk > 0 only the entries the lightning indexer selects, §5.4)."""

    def __init__(self, cfg, lc):
        super().__init__()
        v = lc
        D, H, G, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.H, self.G, self.d, self.eps = H, G, d, cfg.rms_norm_eps
        self.rope_dims, self.theta = v["rope_dims"], cfg.rope_theta
        self.kind = v["attention"]   # full | window | compressed
        self.compressed = self.kind == "compressed"
        self.local, self.n_local = v["local"], v["n_local"]
        self.qk_norm, self.has_sink = v["qk_norm"], v["attn_sink"]
        self.q_proj = nn.Linear(D, H * d, bias=False)
        self.k_proj = nn.Linear(D, G * d, bias=False)
        self.v_proj = nn.Linear(D, G * d, bias=False)
        self.o_proj = nn.Linear(H * d, D, bias=False)
        if self.qk_norm:
            self.q_norm = PhaselabRMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = PhaselabRMSNorm(d, cfg.rms_norm_eps)
        if self.compressed:
            self.compressor = PhaselabCompressor(cfg, lc)
        if v.get("indexer_topk", 0) > 0:
            self.indexer = PhaselabIndexer(cfg, lc)
        if self.has_sink:
            self.attn_sink = nn.Parameter(torch.zeros(H))   # one logit per query head

    def forward(self, a):
        B, T, _ = a.shape
        H, G, d = self.H, self.G, self.d
        q = self.q_proj(a).view(B, T, H, d)
        k = self.k_proj(a).view(B, T, G, d)
        v = self.v_proj(a).view(B, T, G, d)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        t = torch.arange(T, device=a.device)
        q = rope(q, t, self.rope_dims, self.theta)
        k = rope(k, t, self.rope_dims, self.theta)
        tq, ts = t[:, None], t[None, :]
        out = torch.empty(B, T, H, d, dtype=q.dtype, device=q.device)
        per = H // G
        selected = None
        chunks = self.compressor.chunks(a) if self.compressed and self.compressor.learned else None   # §6.5
        if hasattr(self, "indexer"):   # one selection for every head (AttnShape.entry_select [B, T, nW])
            ends = (self.compressor.starts(0, T) + self.compressor.W - 1).to(a.device)
            selected = self.indexer.select(a, ends[None, :] <= tq)             # [B, T, nw]
        for g in range(G):   # query heads g*per .. (g+1)*per-1 read KV head g (GQA)
            if self.compressed:
                if chunks is not None:   # §6.5: ends [B, T] per sequence (T: no entry ends there)
                    khat, vhat, ends = self.compressor.chunk_entries(chunks, g, self.rope_dims, self.theta)
                else:
                    khat, vhat, starts = self.compressor.entries(a, g, self.rope_dims, self.theta)
                    ends = (starts + self.compressor.W - 1).to(a.device)[None, :]   # [1, nw]
                entry_vis = ends[:, None, :] <= tq                              # [1 or B, T, nw]: e_j <= t
                if self.local == "window":
                    raw_vis = ((tq - self.n_local + 1 <= ts) & (ts <= tq))[None]
                else:   # tail: e_t = last position covered by a visible entry of this head, -1 when none
                    if ends.numel():
                        covered = torch.where(entry_vis, ends[:, None, :], torch.full_like(ends, -1)[:, None, :])
                        e_t = covered.max(dim=2, keepdim=True).values           # [1 or B, T, 1]
                    else:
                        e_t = torch.full((1, T, 1), -1, device=a.device)
                    raw_vis = (e_t < ts) & (ts <= tq)                           # [1 or B, T, T]
                entry_vis = entry_vis.expand(B, -1, -1) if selected is None else selected   # [B, T, nw]
                keys = torch.cat([khat, k[:, :, g]], dim=1)                     # [B, nw+T, d]
                vals = torch.cat([vhat, v[:, :, g]], dim=1)
                vis = torch.cat([entry_vis, raw_vis.expand(B, -1, -1)], dim=2)  # [B, T, nw+T]
            elif self.kind == "window":   # §5.2: the raw window only
                keys, vals = k[:, :, g], v[:, :, g]
                vis = ((tq - self.n_local + 1 <= ts) & (ts <= tq))[None]
            else:
                keys, vals, vis = k[:, :, g], v[:, :, g], (ts <= tq)[None]
            qg = q[:, :, g * per:(g + 1) * per]                                 # [B, T, per, d]
            scores = torch.einsum("bthd,bsd->bhts", qg, keys) / math.sqrt(d)    # [B, per, T, S]
            scores = scores.masked_fill(~vis[:, None], float("-inf"))
            m = scores.amax(dim=-1, keepdim=True)
            if self.has_sink:   # unscaled logit, adds exp(sink_h) to the denominator only
                sink = self.attn_sink[g * per:(g + 1) * per].to(scores.dtype)[None, :, None, None]
                m = torch.maximum(m, sink)
                e = torch.exp(scores - m)
                p = e / (e.sum(-1, keepdim=True) + torch.exp(sink - m))
            else:
                e = torch.exp(scores - m)
                p = e / e.sum(-1, keepdim=True)
            out[:, :, g * per:(g + 1) * per] = torch.einsum("bhts,bsd->bthd", p, vals)
        return self.o_proj(out.reshape(B, T, H * d))


class PhaselabMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class PhaselabDecoderLayer(nn.Module):
    def __init__(self, cfg, L):
        super().__init__()
        self.input_layernorm = PhaselabRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = PhaselabAttention(cfg, cfg.layer_config(L))
        self.post_attention_layernorm = PhaselabRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = PhaselabMLP(cfg)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class PhaselabPreTrainedModel(PreTrainedModel):
    config_class = PhaselabConfig
    base_model_prefix = "model"
    _no_split_modules = ["PhaselabDecoderLayer"]
    _supports_cache_class = False

    def _init_weights(self, module):   # docs/spec.md §1 init (only used for tensors a checkpoint lacks)
        with torch.no_grad():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, 0.02)
            elif isinstance(module, PhaselabRMSNorm):
                module.weight.fill_(1.0)


class PhaselabModel(PhaselabPreTrainedModel):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(PhaselabDecoderLayer(cfg, L) for L in range(cfg.num_hidden_layers))
        self.norm = PhaselabRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, output_hidden_states=False):
        """Unpadded input_ids [B, T] (every row starts at position 0) -> BaseModelOutput: last_hidden_state
        = the final RMSNorm's output; with output_hidden_states, hidden_states = (the embeddings, the output
        of layers 0 .. L-2, the final normed output): L + 1 tensors [B, T, D], transformers' Qwen3 layout."""
        x = self.embed_tokens(input_ids)
        hidden = [x]
        for layer in self.layers:
            x = layer(x)
            hidden.append(x)
        x = self.norm(x)
        hidden[-1] = x
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(hidden) if output_hidden_states else None)


def mask_spans(attention_mask):
    """Each row's real tokens [first, end) from an attention_mask [B, T] of 0/1; the ones of a row must
    be one contiguous run (left padding, right padding or none): a mask with a hole inside a sequence
    is refused, since each sequence is computed as the unpadded sequence starting at position 0."""
    m = attention_mask.detach().to("cpu", torch.long)
    if m.dim() != 2 or bool(((m != 0) & (m != 1)).any()):
        raise ValueError(f"phaselab model: attention_mask must be [batch, seq] of 0/1, got shape "
                         f"{tuple(m.shape)} with values {sorted(set(m.flatten().tolist()))[:4]}")
    spans = []
    for b, row in enumerate(m.tolist()):
        ones = [t for t, x in enumerate(row) if x]
        if ones and ones[-1] - ones[0] + 1 != len(ones):
            raise ValueError(f"phaselab model: attention_mask row {b} has padding inside the sequence (ones at "
                             f"{ones[0]}..{ones[-1]} with zeros between); only left or right padding is supported")
        spans.append((ones[0], ones[-1] + 1) if ones else (0, 0))
    return spans


class PhaselabForCausalLM(PhaselabPreTrainedModel, GenerationMixin):
    """logits = RMSNorm_final(x) @ embed^T (tied) or @ lm_head^T; loss = mean next-token
    cross-entropy of logits[:, :-1] against labels[:, 1:] (labels -100 ignored).

    Padding: a token's phase t mod S is its position in its own sequence, so each row of a padded
    batch (attention_mask with zeros: left padding, as for batched generate(), or right padding) is
    computed exactly as the unpadded sequence of its real tokens, starting at position 0 (rows with the
    same real span together). Padded positions get logits and hidden states 0, and the loss counts a
    pair (t, t+1) only when both are real tokens. position_ids other than each sequence's own 0, 1, ...,
    a KV cache (past_key_values), inputs_embeds and output_attentions are refused with an error."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.model = PhaselabModel(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return None if self.config.tie_word_embeddings else self.lm_head

    def _logits(self, input_ids, output_hidden_states):
        out = self.model(input_ids, output_hidden_states=output_hidden_states)
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return out.last_hidden_state @ head.T, out.hidden_states

    def forward(self, input_ids=None, attention_mask=None, labels=None, inputs_embeds=None, position_ids=None,
                past_key_values=None, output_hidden_states=None, output_attentions=None, return_dict=None,
                **kwargs):
        if inputs_embeds is not None:
            raise NotImplementedError("phaselab model: inputs_embeds is not supported, pass input_ids")
        if output_attentions:
            raise NotImplementedError("phaselab model: output_attentions is not supported (a compressed layer attends to "
                                      "entries and raw tokens, not a [T, T] map); hook the modules instead, e.g. "
                                      "model.model.layers[L].self_attn.compressor (its k_gate/v_gate, last_chunks)")
        if past_key_values is not None:
            raise NotImplementedError("phaselab model: there is no KV cache (past_key_values); pass the whole sequence")
        output_hidden_states = (output_hidden_states if output_hidden_states is not None
                                else self.config.output_hidden_states)
        B, T = input_ids.shape
        if attention_mask is not None and tuple(attention_mask.shape) != (B, T):
            raise ValueError(f"phaselab model: attention_mask {tuple(attention_mask.shape)} does not match input_ids {(B, T)}")
        padded = attention_mask is not None and not bool(attention_mask.bool().all())
        spans = mask_spans(attention_mask) if padded else [(0, T)] * B
        if position_ids is not None:   # accepted only where it is what this model computes anyway
            want = torch.zeros(B, T, dtype=torch.long)
            real = torch.zeros(B, T, dtype=torch.bool)
            for b, (s, e) in enumerate(spans):
                want[b, s:e], real[b, s:e] = torch.arange(e - s), True
            pid = position_ids.detach().to("cpu", torch.long).expand(B, T)
            if not bool((pid[real] == want[real]).all()):
                raise NotImplementedError("phaselab model: position_ids must be 0, 1, ... from each sequence's first "
                                          "real token (a token's phase t mod S is its position); other positions are "
                                          "not supported")
        if not padded:
            logits, hidden = self._logits(input_ids, output_hidden_states)
        else:   # each distinct real span as its own unpadded batch
            logits = hidden = None
            groups = {}
            for b, span in enumerate(spans):
                groups.setdefault(span, []).append(b)
            for (s, e), rows in groups.items():
                if e == s:
                    continue
                idx = torch.tensor(rows, device=input_ids.device)
                lg, hs = self._logits(input_ids[idx, s:e], output_hidden_states)
                if logits is None:
                    logits = lg.new_zeros(B, T, lg.shape[-1])
                    hidden = [h.new_zeros(B, T, h.shape[-1]) for h in hs] if hs is not None else None
                logits[idx, s:e] = lg
                for full, part in zip(hidden or [], hs or []):
                    full[idx, s:e] = part
            if logits is None:   # no real token at all
                raise ValueError("phaselab model: attention_mask has no real token in any row")
            hidden = tuple(hidden) if hidden is not None else None
        loss = None
        if labels is not None:
            target = labels[:, 1:]
            if padded:   # a pair counts only when its predicting and its predicted token are real
                real = attention_mask.bool().to(labels.device)
                target = target.masked_fill(~(real[:, 1:] & real[:, :-1]), -100)
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                               target.reshape(-1), ignore_index=-100)
        out = CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=hidden)
        return out if return_dict is not False else out.to_tuple()

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # no cache: the whole prefix every step; the mask (left padding of a batch) travels with it
        return {"input_ids": input_ids, "attention_mask": attention_mask}


PhaselabConfig.register_for_auto_class()
PhaselabForCausalLM.register_for_auto_class("AutoModelForCausalLM")
