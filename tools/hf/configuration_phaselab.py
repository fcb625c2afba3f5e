"""transformers configuration of phaselab checkpoints that are not plain Qwen3 (model_type
"phaselab"): the Qwen3 backbone keys of config.json plus the [model] variant keys of docs/spec.md
sections 2, 2b and 6.3 (token_shift), which phaselab writes in the "phaselab" object of config.json.

Copied by ./train into every non-vanilla checkpoint next to modeling_phaselab.py (the model);
the project's copy is tools/hf/configuration_phaselab.py."""
from transformers import PretrainedConfig

# [model] variant keys (model/model_config.h, docs/spec.md §2 and §2b) and their defaults; rope_dims None = head_dim
VARIANT_DEFAULTS = dict(attention="full", window=0, stride=0, gate="scalar", gate_bias=True, kv_tied=False,
                        post_norm=False, qk_norm=True, rope_dims=None, local="window", n_local=16,
                        compressor="paper", attn_sink=False, grid="aligned", token_shift=False)
VARIANT_CHOICES = dict(attention=("full", "compressed"), gate=("scalar", "vector", "uniform"),
                       local=("window", "tail"), compressor=("paper", "deepseek", "shared"),
                       grid=("aligned", "staggered"))


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
        if (phaselab or {}).get("layer_attention"):
            # docs/spec.md §5: the per-layer schedule has no transformers implementation yet
            raise NotImplementedError("phaselab config: layer_attention = %r (a per-layer schedule) is not "
                                      "implemented in the transformers remote code yet" % phaselab["layer_attention"])
        variant = dict(VARIANT_DEFAULTS)
        variant.update({k: v for k, v in (phaselab or {}).items() if k in VARIANT_DEFAULTS})
        for k in VARIANT_DEFAULTS:  # a top-level key (PhaselabConfig(window=8)) wins
            if k in kwargs:
                variant[k] = kwargs.pop(k)
        if variant["rope_dims"] is None:
            variant["rope_dims"] = head_dim
        for k, allowed in VARIANT_CHOICES.items():
            if variant[k] not in allowed:
                raise ValueError(f"phaselab config: {k} = {variant[k]!r}, expected one of {allowed}")
        if num_attention_heads % num_key_value_heads:
            raise ValueError("phaselab config: num_attention_heads must be a multiple of num_key_value_heads")
        r = variant["rope_dims"]
        if r < 0 or r > head_dim or r % 2:
            raise ValueError(f"phaselab config: rope_dims = {r}, expected an even number in 0..head_dim")
        if variant["attention"] == "compressed":
            if variant["window"] < 1 or variant["stride"] < 1:
                raise ValueError("phaselab config: compressed attention needs window >= 1 and stride >= 1")
            if variant["compressor"] == "deepseek" and variant["window"] != 2 * variant["stride"]:
                raise ValueError("phaselab config: compressor = deepseek requires window = 2 * stride")
        elif variant["token_shift"]:
            raise ValueError("phaselab config: token_shift = true needs attention = compressed (docs/spec.md §6.3)")
        self.phaselab = variant
        for k, v in variant.items():
            setattr(self, "phaselab_" + k, v)
        kwargs.setdefault("use_cache", False)  # the model recomputes the prefix at every step
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def to_dict(self):
        out = super().to_dict()
        for k in VARIANT_DEFAULTS:
            out.pop("phaselab_" + k, None)
        return out
