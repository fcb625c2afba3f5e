"""transformers configuration of phaselab checkpoints that are not plain Qwen3 (model_type
"phaselab"): the Qwen3 backbone keys of config.json plus the [model] variant keys of docs/spec.md
sections 2, 2b, 5 (the per-layer schedule model.layer_attention and its csa_*/hca_*/indexer keys),
6.3 (token_shift), 6.4 (head_strides: a stride per KV head) and 6.5 (boundaries = learned: content-defined
chunk boundaries, checked by validate_boundaries), which phaselab writes in the
"phaselab" object of config.json, with layer_grid_base, each layer's static grid offset o_base
(docs/spec.md §6.1; 0 when absent).

layer_config(L) is the config layer L runs with, derived as model/layer_kinds.c's layer_config:
the model's keys with attention, window, stride, gate, compressor, local and grid replaced by its
kind's (full | compressed | window | csa | hca), plus indexer_topk (csa_topk on csa layers, else 0),
grid_base (o_base) and head_stride (KV head g's stride S_g, docs/spec.md §6.4; every head the layer's
stride without head_strides).

Copied by ./train into every non-vanilla checkpoint next to modeling_phaselab.py (the model);
the project's copy is tools/hf/configuration_phaselab.py."""
from transformers import PretrainedConfig

# [model] variant keys (model/model_config.h, docs/spec.md §2 and §2b) and their defaults; rope_dims None = head_dim
VARIANT_DEFAULTS = dict(attention="full", window=0, stride=0, gate="scalar", gate_bias=True, kv_tied=False,
                        post_norm=False, qk_norm=True, rope_dims=None, local="window", n_local=16,
                        compressor="paper", attn_sink=False, grid="aligned", token_shift=False,
                        head_strides="", boundaries="grid")
VARIANT_CHOICES = dict(attention=("full", "compressed"), gate=("scalar", "vector", "uniform"),
                       local=("window", "tail"), compressor=("paper", "deepseek", "shared"),
                       grid=("aligned", "staggered"), boundaries=("grid", "learned"))
# docs/spec.md §5: the schedule and its per-kind keys (trainer/run_config.c defaults); in the config
# only when layer_attention is given
SCHEDULE_DEFAULTS = dict(layer_attention="", csa_window=8, csa_stride=4, csa_gate="vector", csa_compressor="deepseek",
                         hca_window=32, hca_stride=32, hca_gate="vector", hca_compressor="shared", csa_topk=16,
                         indexer_heads=4, indexer_dim=16)
LAYER_KINDS = ("full", "compressed", "window", "csa", "hca")


def parse_schedule(text, n_layers):
    """model.layer_attention -> one kind per layer (docs/spec.md §5.1: KIND or KIND*N items, exactly
    n_layers in all), as model/layer_kinds.c's layer_schedule_parse."""
    kinds = []
    for item_no, item in enumerate(text.split(","), 1):
        word, star, num = item.partition("*")
        if word not in LAYER_KINDS:
            raise ValueError(f"phaselab config: layer_attention item {item_no} {item!r} is not a layer kind; "
                             f"expected {' | '.join(LAYER_KINDS)}, optionally KIND*N")
        reps = 1
        if star:
            if not num.isdigit() or not 1 <= int(num) <= 1024:
                raise ValueError(f"phaselab config: layer_attention item {item_no} {item!r}: expected KIND*N with N in 1..1024")
            reps = int(num)
        kinds += [word] * reps
    if len(kinds) != n_layers:
        raise ValueError(f"phaselab config: layer_attention = {text!r} names {len(kinds)} layers; "
                         f"num_hidden_layers = {n_layers} needs exactly one kind per layer")
    return kinds


def parse_head_strides(text, n_kv_heads, window, stride):
    """model.head_strides (docs/spec.md §6.4: "S_0,S_1,..." as config.json carries it, or a list of
    ints) -> [S_0 .. S_{G-1}], as model/model_config.c's config_head_strides: one integer per KV head,
    each 1..window, at most 64, and stride (model.stride) the smallest."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for n, item in enumerate(items, 1):
        word = str(item).strip()
        if not word.isdigit():
            raise ValueError(f"phaselab config: head_strides = {text!r}: item {n} is not a positive integer; "
                             "expected S_0,S_1,... one stride per KV head, each 1..window (docs/spec.md §6.4)")
        if not 1 <= int(word) <= window:
            raise ValueError(f"phaselab config: head_strides item {n} = {word} with window = {window}; every head's "
                             "stride must be 1..window (docs/spec.md §6.4)")
        out.append(int(word))
    if len(out) > 64:
        raise ValueError(f"phaselab config: head_strides names {len(out)} strides; at most 64 KV heads take "
                         "their own stride")
    if len(out) != n_kv_heads:
        raise ValueError(f"phaselab config: head_strides names {len(out)} strides with num_key_value_heads = "
                         f"{n_kv_heads}; expected one stride per KV head (docs/spec.md §6.4)")
    if stride != min(out):
        raise ValueError(f"phaselab config: head_strides = {text!r} with stride = {stride}; stride must be the "
                         f"smallest head stride, {min(out)} (docs/spec.md §6.4)")
    return out


def validate_boundaries(v):
    """boundaries = learned (docs/spec.md §6.5 Rules, as trainer/run_config.c): attention = compressed,
    window (the longest chunk) > stride (the target mean chunk length) >= 2, and none of the keys that
    define a window grid or need one (grid = staggered, head_strides, compressor = deepseek, a
    layer_attention schedule). train.phase_jitter and train.gate_coverage are training keys that
    config.json does not carry."""
    if v["attention"] != "compressed":
        raise ValueError(f"phaselab config: boundaries = 'learned' with attention = {v['attention']!r}; learned chunk "
                         "boundaries need attention = compressed (docs/spec.md §6.5)")
    if not (isinstance(v["window"], int) and isinstance(v["stride"], int) and v["window"] > v["stride"] >= 2):
        raise ValueError(f"phaselab config: boundaries = 'learned' with window = {v['window']} and stride = {v['stride']}; "
                         "it needs window > stride >= 2 (window the longest chunk, stride the target mean chunk length, "
                         "docs/spec.md §6.5)")
    other = ("grid = staggered" if v["grid"] == "staggered" else "head_strides" if v["head_strides"]
             else "compressor = deepseek" if v["compressor"] == "deepseek"
             else "layer_attention (a schedule)" if v.get("layer_attention") else None)
    if other:
        raise ValueError(f"phaselab config: boundaries = 'learned' with {other}: that key defines a window grid or "
                         "needs one (docs/spec.md §6.5)")


class PhaselabConfig(PretrainedConfig):
    model_type = "phaselab"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(self, vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6,
                 max_position_embeddings=40960, tie_word_embeddings=True, phaselab=None, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rope_theta = float(rope_theta)
        self.rms_norm_eps = float(rms_norm_eps)
        self.max_position_embeddings = max_position_embeddings
        variant = dict(VARIANT_DEFAULTS)
        given = dict(phaselab or {})
        for k in list(SCHEDULE_DEFAULTS) + ["layer_grid_base"]:   # a top-level key (PhaselabConfig(window=8)) wins
            if k in kwargs:
                given[k] = kwargs.pop(k)
        if given.get("layer_attention"):
            variant.update(SCHEDULE_DEFAULTS)
            variant.update({k: v for k, v in given.items() if k in SCHEDULE_DEFAULTS})
        variant.update({k: v for k, v in given.items() if k in VARIANT_DEFAULTS})
        for k in VARIANT_DEFAULTS:
            if k in kwargs:
                variant[k] = kwargs.pop(k)
        if variant["rope_dims"] is None:
            variant["rope_dims"] = head_dim
        for k, allowed in VARIANT_CHOICES.items():
            if variant[k] not in allowed:
                raise ValueError(f"phaselab config: {k} = {variant[k]!r}, expected one of {allowed}")
        for k in ("csa_gate", "hca_gate", "csa_compressor", "hca_compressor"):
            if k in variant and variant[k] not in VARIANT_CHOICES[k[4:]]:
                raise ValueError(f"phaselab config: {k} = {variant[k]!r}, expected one of {VARIANT_CHOICES[k[4:]]}")
        if num_attention_heads % num_key_value_heads:
            raise ValueError("phaselab config: num_attention_heads must be a multiple of num_key_value_heads")
        r = variant["rope_dims"]
        if r < 0 or r > head_dim or r % 2:
            raise ValueError(f"phaselab config: rope_dims = {r}, expected an even number in 0..head_dim")
        self.layer_kinds = (parse_schedule(variant["layer_attention"], num_hidden_layers) if variant.get("layer_attention")
                            else [variant["attention"]] * num_hidden_layers)
        bases = given.get("layer_grid_base")
        if bases is not None:
            if len(bases) != num_hidden_layers or not all(type(o) is int and o <= 0 for o in bases):
                raise ValueError(f"phaselab config: layer_grid_base = {bases!r}, expected {num_hidden_layers} integers <= 0 "
                                 "(static grid offsets, docs/spec.md §6.1)")
            variant["layer_grid_base"] = list(bases)
        if variant["token_shift"] and (variant["attention"] != "compressed" or set(self.layer_kinds) != {"compressed"}):
            raise ValueError("phaselab config: token_shift = true needs attention = compressed and no layer schedule "
                             "(docs/spec.md §5.1, §6.3)")
        if variant["head_strides"]:   # docs/spec.md §6.4, the rules of trainer/run_config.c
            if variant["attention"] != "compressed" or variant.get("layer_attention"):
                raise ValueError(f"phaselab config: head_strides = {variant['head_strides']!r} needs attention = "
                                 "compressed and no layer_attention schedule (docs/spec.md §6.4)")
            hs = parse_head_strides(variant["head_strides"], num_key_value_heads, variant["window"], variant["stride"])
            if variant["compressor"] == "deepseek" and len(set(hs)) > 1:
                raise ValueError(f"phaselab config: head_strides = {variant['head_strides']!r} with compressor = deepseek "
                                 "is not implemented (its two maps split the window at S = W/2; docs/spec.md §6.4)")
        if variant["boundaries"] == "learned":
            validate_boundaries(variant)
        self.phaselab = variant
        for L in range(num_hidden_layers):   # every layer's geometry, as layer_schedule_check and §6.1
            lc = self.layer_config(L)
            if lc["attention"] != "compressed":
                continue
            W, S, o = lc["window"], lc["stride"], lc["grid_base"]
            if W < 1 or S < 1 or S > W:
                raise ValueError(f"phaselab config: layer {L} ({self.layer_kinds[L]}): compressed attention needs "
                                 f"1 <= stride <= window, got window {W}, stride {S}")
            if lc["compressor"] == "deepseek" and W != 2 * S:
                raise ValueError(f"phaselab config: layer {L} ({self.layer_kinds[L]}): compressor = deepseek requires "
                                 f"window = 2 * stride, got window {W}, stride {S}")
            if o <= -W:
                raise ValueError(f"phaselab config: layer {L}: layer_grid_base {o}, expected > -window = {-W} "
                                 "(docs/spec.md §6.1)")
        for k, v in variant.items():
            setattr(self, "phaselab_" + k, v)
        kwargs.setdefault("use_cache", False)  # the model recomputes the prefix at every step
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def layer_config(self, L):
        """The variant keys layer L runs with (model/layer_kinds.c layer_config, docs/spec.md §5.1):
        attention full | compressed | window, window, stride, gate, compressor, local, grid of its
        kind; indexer_topk (csa_topk on a csa layer, else 0); grid_base = o_base (layer_grid_base[L],
        0 when config.json has none); head_stride = [S_g] per KV head (docs/spec.md §6.4: head_strides on
        a compressed model without a schedule, else the layer's stride for every head)."""
        v = self.phaselab
        kind = self.layer_kinds[L]
        lc = dict(v, indexer_topk=0, grid_base=v.get("layer_grid_base", [0] * self.num_hidden_layers)[L])
        if kind == "window":
            lc.update(attention="window", grid="aligned")
        elif kind in ("csa", "hca"):
            lc.update(attention="compressed", window=v[kind + "_window"], stride=v[kind + "_stride"],
                      gate=v[kind + "_gate"], compressor=v[kind + "_compressor"], local="window", grid="aligned",
                      indexer_topk=v["csa_topk"] if kind == "csa" else 0)
        else:
            lc["attention"] = kind
        G = self.num_key_value_heads
        lc["head_stride"] = (parse_head_strides(v["head_strides"], G, lc["window"], lc["stride"])
                             if kind == "compressed" and v["head_strides"] else [lc["stride"]] * G)
        return lc

    def to_dict(self):
        out = super().to_dict()
        out.pop("layer_kinds", None)
        for k in list(VARIANT_DEFAULTS) + list(SCHEDULE_DEFAULTS) + ["layer_grid_base"]:
            out.pop("phaselab_" + k, None)
        return out
