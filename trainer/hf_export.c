/* The HuggingFace side of a checkpoint (declared in trainer/hf_export.h):
 *   config.json              a plain Qwen3 model (full attention, qk_norm, RoPE on every dim, no
 *                            sink) is model_type "qwen3" / Qwen3ForCausalLM; every other model is
 *                            model_type "phaselab" / PhaselabForCausalLM with auto_map naming
 *                            the two files below and the variant keys in a "phaselab" object,
 *                            so plain transformers refuses it and trust_remote_code loads it;
 *                            "phaselab_vocabulary" says what the token ids are and
 *                            "phaselab_tokenizer_fingerprint" is the shards' tokenizer fingerprint
 *                            (sha256 of tokenizer.json, "bytes" or "synthetic");
 *                            The phaselab object also carries the schedule of §5 (layer_attention and
 *                            its csa_* / hca_* / indexer keys, only with a mixed schedule) and
 *                            layer_grid_base, each layer's static grid offset o_base (§6.1), taken
 *                            from dims_of(layer_config(l), T).grid_base;
 *   configuration_phaselab.py, modeling_phaselab.py   (non-vanilla only) tools/hf/, the PyTorch
 *                            model of docs/spec.md §1, §2, §2b, §5 and §6.3, embedded in ./train at build time
 *                            (.incbin), so a checkpoint always carries the code of its writer;
 *   generation_config.json   eos and pad = the shards' end-of-text id;
 *   tokenizer.json, tokenizer_config.json   when the shards were made by ./tokenize from a
 *                            tokenizer.json (fingerprint = its sha256): a copy of that file,
 *                            found at start-up (data.tokenizer, or tokenizer.json next to the
 *                            shards or in their parent directory) and checked against the
 *                            fingerprint; not found is a start-up error naming data.tokenizer. */
#include "trainer/hf_export.h"
#include "model/layer_kinds.h"
#include "model/dims.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <glob.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/synth.h"
#include "common/errors.h"
#include "common/sha256.h"
#include "common/fsutil.h"

/* tools/hf/{configuration,modeling}_phaselab.py, embedded (mk/hf.mk makes this object depend on them) */
__asm__(".section .rodata\n"
        ".global phaselab_hf_configuration_py\n"
        "phaselab_hf_configuration_py:\n"
        ".incbin \"tools/hf/configuration_phaselab.py\"\n"
        ".global phaselab_hf_configuration_py_end\n"
        "phaselab_hf_configuration_py_end:\n"
        ".global phaselab_hf_modeling_py\n"
        "phaselab_hf_modeling_py:\n"
        ".incbin \"tools/hf/modeling_phaselab.py\"\n"
        ".global phaselab_hf_modeling_py_end\n"
        "phaselab_hf_modeling_py_end:\n"
        ".previous\n");
extern const char phaselab_hf_configuration_py[], phaselab_hf_configuration_py_end[];
extern const char phaselab_hf_modeling_py[], phaselab_hf_modeling_py_end[];

/* What the run's token ids are, found once at start-up (hf_export_prepare). */
static struct {
    int known;                 /* prepare ran */
    char fingerprint[SHARD_FINGERPRINT_BYTES + 1];
    uint32_t eot_id;
    char tokenizer_json[8400]; /* "" unless the shards came from a tokenizer.json */
} vocab;

int hf_is_vanilla_qwen3(const ModelConfig *m) {
    return m->attention == ATTN_FULL && m->qk_norm && m->rope_dims == m->head_dim && !m->attn_sink && !layer_schedule_mixed(m);
}

static int is_sha256_hex(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

static int tokenizer_matches(const char *path, const char *fingerprint) {
    char hex[65], err[ERR_LEN];
    return access(path, R_OK) == 0 && sha256_file_hex(path, hex, err) == 0 && strcmp(hex, fingerprint) == 0;
}

int hf_export_prepare(const Config *cfg, char *err) {
    memset(&vocab, 0, sizeof vocab);
    glob_t g;
    if (!cfg->data.train[0] || glob(cfg->data.train, 0, NULL, &g) != 0 || g.gl_pathc == 0)
        return set_err(err, "[data] train = '%s' matches no file", cfg->data.train);
    char first[4096];
    snprintf(first, sizeof first, "%s", g.gl_pathv[0]);
    globfree(&g);
    Shard s;
    if (shard_open(&s, first, err)) return -1;
    snprintf(vocab.fingerprint, sizeof vocab.fingerprint, "%s", s.fingerprint);
    vocab.eot_id = s.eot_id;
    shard_close(&s);
    vocab.known = 1;
    if (!is_sha256_hex(vocab.fingerprint)) return 0;   /* "bytes", "synthetic": no file to carry */

    if (cfg->data.tokenizer[0]) {
        char hex[65], why[ERR_LEN];
        struct stat st;
        if (stat(cfg->data.tokenizer, &st) == 0 && S_ISDIR(st.st_mode))
            return set_err(err, "%s: [data] tokenizer: is a directory (expected the tokenizer.json file the shards %s "
                                "were made with)", cfg->data.tokenizer, first);
        if (sha256_file_hex(cfg->data.tokenizer, hex, why))   /* why: "phaselab: PATH: cannot open: ..." */
            return set_err(err, "%s ([data] tokenizer; expected the tokenizer.json the shards %s were made with)",
                           strncmp(why, "phaselab: ", 10) ? why : why + 10, first);
        if (strcmp(hex, vocab.fingerprint))
            return set_err(err, "%s: [data] tokenizer: its sha256 is %s, not %s, the fingerprint of the shards %s "
                                "(expected the tokenizer.json they were made with: a trimmed vocabulary's is its "
                                "OUT/tokenizer.json)", cfg->data.tokenizer, hex, vocab.fingerprint, first);
        snprintf(vocab.tokenizer_json, sizeof vocab.tokenizer_json, "%s", cfg->data.tokenizer);
        return 0;
    }
    char dir[4096], parent[4096], candidate[2][4200];
    if (strlen(first) >= sizeof dir - 20) return set_err(err, "%s: path too long", first);
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s", first);
    snprintf(dir, sizeof dir, "%s", dirname(scratch));       /* dirname may write into scratch */
    snprintf(scratch, sizeof scratch, "%s", dir);
    snprintf(parent, sizeof parent, "%s", dirname(scratch));
    snprintf(candidate[0], sizeof candidate[0], "%s/tokenizer.json", dir);
    snprintf(candidate[1], sizeof candidate[1], "%s/tokenizer.json", parent);
    for (int i = 0; i < 2; i++)
        if (tokenizer_matches(candidate[i], vocab.fingerprint)) {
            snprintf(vocab.tokenizer_json, sizeof vocab.tokenizer_json, "%s", candidate[i]);
            return 0;
        }
    return set_err(err, "%s: the shards were made by ./tokenize from a tokenizer.json with sha256 %s, which "
                        "checkpoints must carry; no matching file at %s or %s: name it with "
                        "data.tokenizer=PATH/tokenizer.json",
                   first, vocab.fingerprint, candidate[0], candidate[1]);
}

/* What the token ids of this run are, in words (config.json "phaselab_vocabulary"). */
static void vocabulary_text(char *out, size_t len) {
    if (!vocab.known)
        snprintf(out, len, "unknown (the checkpoint was written without the training data's tokenizer information)");
    else if (strcmp(vocab.fingerprint, SYNTH_FINGERPRINT) == 0)
        snprintf(out, len, "synthetic key/value corpus of ./train --make-synthetic, no text: 0 end-of-text, "
                           "16..79 keys, 80..207 values, 208..255 fillers (data/synth.h)");
    else if (strcmp(vocab.fingerprint, "bytes") == 0)
        snprintf(out, len, "bytes: token id = byte value 0..255, 256 = end-of-text (./tokenize --tokenizer bytes)");
    else if (vocab.tokenizer_json[0])
        snprintf(out, len, "tokenizer.json in this directory (sha256 %s)", vocab.fingerprint);
    else
        snprintf(out, len, "shards with tokenizer fingerprint '%s'", vocab.fingerprint);
}

char *hf_config_json(const ModelConfig *m, int T) {
    int vanilla = hf_is_vanilla_qwen3(m);
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(vanilla ? "Qwen3ForCausalLM" : "PhaselabForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", vanilla ? "qwen3" : "phaselab");
    if (!vanilla) {
        cJSON *am = cJSON_AddObjectToObject(j, "auto_map");
        cJSON_AddStringToObject(am, "AutoConfig", "configuration_phaselab.PhaselabConfig");
        cJSON_AddStringToObject(am, "AutoModelForCausalLM", "modeling_phaselab.PhaselabForCausalLM");
    }
    cJSON_AddNumberToObject(j, "hidden_size", m->d_model);
    cJSON_AddNumberToObject(j, "intermediate_size", m->d_ff);
    cJSON_AddNumberToObject(j, "num_hidden_layers", m->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", m->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", m->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", m->head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "rope_theta", m->rope_theta);
    cJSON_AddNumberToObject(j, "rms_norm_eps", m->norm_eps);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", m->tie_embeddings);
    cJSON_AddNumberToObject(j, "max_position_embeddings", T > 40960 ? T : 40960);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    if (vanilla) cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddStringToObject(j, "dtype", "float32");
    cJSON_AddBoolToObject(j, "use_cache", vanilla);
    if (vocab.known) {
        cJSON_AddNumberToObject(j, "eos_token_id", vocab.eot_id);
        cJSON_AddNumberToObject(j, "pad_token_id", vocab.eot_id);
    }
    char text[512];
    vocabulary_text(text, sizeof text);
    cJSON_AddStringToObject(j, "phaselab_vocabulary", text);
    /* the shards' tokenizer fingerprint, as probe sets and shards record it: what an analysis
     * compares its inputs against (trainer/ckpt_source.h) */
    if (vocab.known) cJSON_AddStringToObject(j, "phaselab_tokenizer_fingerprint", vocab.fingerprint);
    cJSON_AddNumberToObject(j, "phaselab_seq_len", T);
    if (!vanilla) {
        cJSON *p = cJSON_AddObjectToObject(j, "phaselab");
        cJSON_AddStringToObject(p, "attention", config_attention_names[m->attention]);
        cJSON_AddNumberToObject(p, "window", m->window);
        cJSON_AddNumberToObject(p, "stride", m->stride);
        cJSON_AddStringToObject(p, "gate", config_gate_names[m->gate]);
        cJSON_AddBoolToObject(p, "gate_bias", m->gate_bias);
        cJSON_AddBoolToObject(p, "kv_tied", m->kv_tied);
        cJSON_AddBoolToObject(p, "post_norm", m->post_norm);
        cJSON_AddBoolToObject(p, "qk_norm", m->qk_norm);
        cJSON_AddNumberToObject(p, "rope_dims", m->rope_dims);
        cJSON_AddStringToObject(p, "local", config_local_names[m->local]);
        cJSON_AddNumberToObject(p, "n_local", m->n_local);
        cJSON_AddStringToObject(p, "compressor", config_compressor_names[m->compressor]);
        /* docs/spec.md §2b: written only when not the default (aligned), so older readers see no change;
         * with a schedule, when a layer of kind compressed runs on the staggered grid */
        int staggered = 0;
        for (int L = 0; L < m->n_layers; L++) {
            const ModelConfig lc = layer_config(m, L);
            staggered |= lc.attention == ATTN_COMPRESSED && lc.grid == GRID_STAGGERED;
        }
        if (staggered) cJSON_AddStringToObject(p, "grid", config_grid_names[GRID_STAGGERED]);
        cJSON_AddBoolToObject(p, "attn_sink", m->attn_sink);
        if (layer_schedule_mixed(m)) {   /* docs/spec.md §5: written only with a mixed schedule */
            cJSON_AddStringToObject(p, "layer_attention", m->layer_attention);
            cJSON_AddNumberToObject(p, "csa_window", m->csa_window);
            cJSON_AddNumberToObject(p, "csa_stride", m->csa_stride);
            cJSON_AddStringToObject(p, "csa_gate", config_gate_names[m->csa_gate]);
            cJSON_AddStringToObject(p, "csa_compressor", config_compressor_names[m->csa_compressor]);
            cJSON_AddNumberToObject(p, "hca_window", m->hca_window);
            cJSON_AddNumberToObject(p, "hca_stride", m->hca_stride);
            cJSON_AddStringToObject(p, "hca_gate", config_gate_names[m->hca_gate]);
            cJSON_AddStringToObject(p, "hca_compressor", config_compressor_names[m->hca_compressor]);
            cJSON_AddNumberToObject(p, "csa_topk", m->csa_topk);
            cJSON_AddNumberToObject(p, "indexer_heads", m->indexer_heads);
            cJSON_AddNumberToObject(p, "indexer_dim", m->indexer_dim);
        }
        /* docs/spec.md §6.1: every layer's static grid offset o_base, from its dims (the one source of
         * it, model/dims.h), which the remote code reads per layer (0 when a checkpoint lacks the key) */
        cJSON *base = cJSON_AddArrayToObject(p, "layer_grid_base");
        for (int L = 0; L < m->n_layers; L++) {
            const ModelConfig lc = layer_config(m, L);
            cJSON_AddItemToArray(base, cJSON_CreateNumber(dims_of(&lc, T).grid_base));
        }
        /* docs/spec.md §6.3: written only when on, so older readers see no change */
        if (m->attention == ATTN_COMPRESSED && m->token_shift) cJSON_AddBoolToObject(p, "token_shift", 1);
        /* docs/spec.md §6.4: written only when set (the remote code reads it, configuration_phaselab.py) */
        if (m->attention == ATTN_COMPRESSED && m->head_strides[0]) cJSON_AddStringToObject(p, "head_strides", m->head_strides);
        /* docs/spec.md §6.5: written only when learned; the remote code reads it (configuration_phaselab.py
         * checks it by §6.5's rules, modeling_phaselab.py's PhaselabCompressor.chunks/chunk_entries) */
        if (m->attention == ATTN_COMPRESSED && m->boundaries == BOUNDARIES_LEARNED)
            cJSON_AddStringToObject(p, "boundaries", config_boundaries_names[m->boundaries]);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

static int write_json(const char *dir, const char *name, cJSON *j, char *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = s ? fs_write_atomic(path, s, strlen(s), err) : set_err(err, "%s: out of memory", path);
    free(s);
    return rc;
}

static int write_bytes(const char *dir, const char *name, const char *begin, const char *end, char *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fs_write_atomic(path, begin, (size_t)(end - begin), err);
}

int hf_export_write(const char *dir, const ModelConfig *m, int T, char *err) {
    char *config = hf_config_json(m, T);
    char path[4600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = fs_write_atomic(path, config, strlen(config), err);
    free(config);
    if (rc) return rc;
    if (!hf_is_vanilla_qwen3(m) &&
        (write_bytes(dir, "configuration_phaselab.py", phaselab_hf_configuration_py, phaselab_hf_configuration_py_end, err) ||
         write_bytes(dir, "modeling_phaselab.py", phaselab_hf_modeling_py, phaselab_hf_modeling_py_end, err)))
        return -1;
    if (!vocab.known) return 0;
    cJSON *gen = cJSON_CreateObject();
    cJSON_AddNumberToObject(gen, "eos_token_id", vocab.eot_id);
    cJSON_AddNumberToObject(gen, "pad_token_id", vocab.eot_id);
    cJSON_AddBoolToObject(gen, "do_sample", 0);
    cJSON_AddBoolToObject(gen, "use_cache", hf_is_vanilla_qwen3(m));
    if (write_json(dir, "generation_config.json", gen, err)) return -1;
    if (!vocab.tokenizer_json[0]) return 0;
    size_t n = 0;
    char *tok = fs_read_all(vocab.tokenizer_json, &n);
    if (!tok) return set_err(err, "%s: cannot read the tokenizer to copy into the checkpoint", vocab.tokenizer_json);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    rc = fs_write_atomic(path, tok, n, err);
    free(tok);
    if (rc) return rc;
    /* Qwen2/Qwen3 byte-level BPE: no BOS, end-of-text as EOS and padding */
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON_AddNullToObject(tc, "bos_token");
    cJSON_AddStringToObject(tc, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(tc, "pad_token", "<|endoftext|>");
    cJSON_AddBoolToObject(tc, "add_bos_token", 0);
    cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", 0);
    cJSON_AddNumberToObject(tc, "model_max_length", T > 40960 ? T : 40960);   /* = max_position_embeddings */
    return write_json(dir, "tokenizer_config.json", tc, err);
}
