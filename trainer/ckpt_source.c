/* A checkpoint or weights-only directory opened for evaluation, analyses and generation: its
 * config (config.ini, or config.json read back as [model] keys), its state when present, its
 * tokenizer fingerprint and the resolution of its relative data paths (definitions in
 * trainer/ckpt_source.h). */
#include "trainer/ckpt_source.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errors.h"
#include "common/fsutil.h"
#include "common/sha256.h"
#include "data/shard.h"
#include "data/synth.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "model/model.h"

/* malloc'd printf */
static char *str_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static int glob_matches(const char *pattern) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    int n = rc == 0 ? (int)g.gl_pathc : 0;
    if (rc == 0) globfree(&g);
    return n > 0;
}

static int is_hex64(const char *s, size_t n) {
    if (n != 64) return 0;
    for (size_t i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* ---------------------------------------------------------------- config.json -> Config */

/* "section.key=value" for a JSON scalar; NULL for anything else (or out of memory). */
static char *json_override(const char *key, const cJSON *v) {
    if (cJSON_IsBool(v)) return str_printf("%s=%s", key, cJSON_IsTrue(v) ? "true" : "false");
    if (cJSON_IsString(v)) {
        for (const char *s = v->valuestring; *s; s++)
            if (iscntrl((unsigned char)*s)) return NULL;
        return str_printf("%s=%s", key, v->valuestring);
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (!isfinite(x)) return NULL;
        if (x == floor(x) && fabs(x) < 9007199254740992.0) return str_printf("%s=%lld", key, (long long)x);
        return str_printf("%s=%.17g", key, x);
    }
    return NULL;
}

typedef struct {
    char *item[64];
    int n;
} Overrides;

static void overrides_free(Overrides *o) {
    for (int i = 0; i < o->n; i++) free(o->item[i]);
    o->n = 0;
}

/* Adds key=<json value of name in obj>; required: missing is an error. */
static int add_json(Overrides *o, const char *path, const cJSON *obj, const char *name, const char *key, int required,
                    char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v || cJSON_IsNull(v)) return required ? set_err(err, "%s: no \"%s\" (expected the model's %s)", path, name, key) : 0;
    char *s = json_override(key, v);
    if (!s || o->n >= 64) {
        free(s);
        return set_err(err, "%s: \"%s\" is not a number, boolean or word (expected the model's %s)", path, name, key);
    }
    o->item[o->n++] = s;
    return 0;
}

/* The [model] keys and data.seq_len of a HuggingFace config.json written by phaselab (or read and
 * saved again by transformers). */
static int config_json_overrides(const cJSON *j, const char *path, Overrides *o, int *has_seq_len, char *err) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : "";
    int phaselab = !strcmp(type, "phaselab");
    if (!phaselab && strcmp(type, "qwen3"))
        return set_err(err, "%s: model_type '%s': expected qwen3 or phaselab (a config.json written by phaselab or read back "
                       "by transformers)", path, type);
    static const char *const backbone[][2] = {
        {"hidden_size", "model.d_model"}, {"intermediate_size", "model.d_ff"}, {"num_hidden_layers", "model.n_layers"},
        {"num_attention_heads", "model.n_heads"}, {"num_key_value_heads", "model.n_kv_heads"},
        {"head_dim", "model.head_dim"}, {"vocab_size", "model.vocab_size"}, {"rms_norm_eps", "model.norm_eps"},
        {"tie_word_embeddings", "model.tie_embeddings"}};
    for (size_t i = 0; i < sizeof backbone / sizeof *backbone; i++)
        if (add_json(o, path, j, backbone[i][0], backbone[i][1], strcmp(backbone[i][0], "tie_word_embeddings") != 0, err))
            return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");   /* newer transformers move it there */
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "rope_theta"))) {
        if (add_json(o, path, j, "rope_theta", "model.rope_theta", 1, err)) return -1;
    } else if (cJSON_IsObject(rp)) {
        if (add_json(o, path, rp, "rope_theta", "model.rope_theta", 1, err)) return -1;
    } else return set_err(err, "%s: no \"rope_theta\" (expected the model's RoPE base)", path);
    if (!phaselab) {
        o->item[o->n++] = str_printf("model.attention=full");
        o->item[o->n++] = str_printf("model.qk_norm=true");
        o->item[o->n++] = str_printf("model.rope_dims=head_dim");
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "phaselab");
        if (!cJSON_IsObject(p)) return set_err(err, "%s: model_type phaselab without its \"phaselab\" object of variant keys", path);
        const cJSON *att = cJSON_GetObjectItemCaseSensitive(p, "attention");
        const cJSON *sched = cJSON_GetObjectItemCaseSensitive(p, "layer_attention");   /* docs/spec.md §5 */
        int compressed = (cJSON_IsString(att) && !strcmp(att->valuestring, "compressed")) || cJSON_IsString(sched);
        static const char *const variant[] = {"attention", "qk_norm", "rope_dims"};
        static const char *const compressed_only[] = {"window", "stride", "gate", "gate_bias", "kv_tied", "post_norm",
                                                      "local", "n_local", "compressor", "grid", "attn_sink", "token_shift",
                                                      "head_strides", "boundaries"};
        char key[64];
        for (size_t i = 0; i < sizeof variant / sizeof *variant; i++) {
            snprintf(key, sizeof key, "model.%s", variant[i]);
            if (add_json(o, path, p, variant[i], key, 0, err)) return -1;
        }
        for (size_t i = 0; compressed && i < sizeof compressed_only / sizeof *compressed_only; i++) {
            snprintf(key, sizeof key, "model.%s", compressed_only[i]);
            if (add_json(o, path, p, compressed_only[i], key, 0, err)) return -1;
        }
        static const char *const schedule[] = {"layer_attention", "csa_window", "csa_stride", "csa_gate", "csa_compressor",
                                               "hca_window", "hca_stride", "hca_gate", "hca_compressor", "csa_topk",
                                               "indexer_heads", "indexer_dim"};
        for (size_t i = 0; cJSON_IsString(sched) && i < sizeof schedule / sizeof *schedule; i++) {
            snprintf(key, sizeof key, "model.%s", schedule[i]);
            if (add_json(o, path, p, schedule[i], key, 0, err)) return -1;
        }
    }
    for (int i = 0; i < o->n; i++)
        if (!o->item[i]) return set_err(err, "%s: out of memory", path);
    *has_seq_len = cJSON_GetObjectItemCaseSensitive(j, "phaselab_seq_len") != NULL;
    if (add_json(o, path, j, "phaselab_seq_len", "data.seq_len", 0, err)) return -1;
    /* one batch of T x micro_batch (8, the default) keeps [train] valid; evaluation does not train */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "phaselab_seq_len");
    double T = cJSON_IsNumber(t) ? t->valuedouble : 4096;
    if (T >= 1 && T <= 4194304 && T == floor(T)) o->item[o->n++] = str_printf("train.batch_tokens=%lld", (long long)T * 8);
    return o->item[o->n - 1] ? 0 : set_err(err, "%s: out of memory", path);
}

static cJSON *read_json(const char *path) {
    char *text = fs_read_all(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (j && !cJSON_IsObject(j)) { cJSON_Delete(j); j = NULL; }
    return j;
}

/* ---------------------------------------------------------------- tokenizer fingerprint */

/* What config.json says the token ids are: phaselab_tokenizer_fingerprint, else the words of
 * phaselab_vocabulary (trainer/hf_export.c). 1 when it says, 0 when not. */
static int fingerprint_from_config_json(const cJSON *j, char out[65]) {
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(j, "phaselab_tokenizer_fingerprint");
    if (cJSON_IsString(fp) && fp->valuestring[0] && strlen(fp->valuestring) <= 64) {
        snprintf(out, 65, "%s", fp->valuestring);
        return 1;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "phaselab_vocabulary");
    if (!cJSON_IsString(v)) return 0;
    const char *s = v->valuestring, *at;
    if (!strncmp(s, "synthetic key/value corpus", 26)) { snprintf(out, 65, "%s", SYNTH_FINGERPRINT); return 1; }
    if (!strncmp(s, "bytes:", 6)) { snprintf(out, 65, "bytes"); return 1; }
    if ((at = strstr(s, "(sha256 ")) && is_hex64(at + 8, strspn(at + 8, "0123456789abcdefABCDEF"))) {
        snprintf(out, 65, "%.64s", at + 8);
        return 1;
    }
    const char *pre = "shards with tokenizer fingerprint '";
    if (!strncmp(s, pre, strlen(pre))) {
        const char *b = s + strlen(pre), *e = strrchr(b, '\'');
        if (e && e > b && e - b <= 64) { snprintf(out, 65, "%.*s", (int)(e - b), b); return 1; }
    }
    return 0;
}

/* The first training shard's fingerprint (data.train of the checkpoint's own config). */
static int fingerprint_from_shards(const CkptSource *c, char out[65], char **source) {
    if (!c->saved.data.train[0]) return 0;
    char *pattern = ckpt_source_path(c, "data.train", c->saved.data.train, c->saved.data.train, NULL);
    glob_t g;
    int found = 0;
    if (pattern && glob(pattern, 0, NULL, &g) == 0) {
        Shard s;
        char err[ERR_LEN];
        if (g.gl_pathc > 0 && shard_open(&s, g.gl_pathv[0], err) == 0) {
            snprintf(out, 65, "%s", s.fingerprint);
            *source = strdup(g.gl_pathv[0]);   /* NULL: out of memory, reported by the caller */
            found = out[0] != 0;
            shard_close(&s);
        }
        globfree(&g);
    }
    free(pattern);
    return found;
}

/* ---------------------------------------------------------------- open, load, close */

/* phaselab_step of model.safetensors' __metadata__, or -1. */
static long safetensors_step(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint64_t hlen = 0;
    long step = -1;
    char *json = NULL;
    if (fread(&hlen, 8, 1, f) == 1 && hlen >= 2 && hlen <= (1u << 30) && (json = malloc(hlen + 1)) &&
        fread(json, 1, hlen, f) == hlen) {
        json[hlen] = 0;
        cJSON *root = cJSON_Parse(json);
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(meta, "phaselab_step");
        if (cJSON_IsString(s) && isdigit((unsigned char)s->valuestring[0])) {
            char *end;
            errno = 0;
            long v = strtol(s->valuestring, &end, 10);
            if (!*end && !errno) step = v;
        }
        cJSON_Delete(root);
    }
    free(json);
    fclose(f);
    return step;
}

/* The static grid offset of every layer (docs/spec.md §5.4, §6.1) is derived by this build (dims_of);
 * config.json's phaselab.layer_grid_base records the offsets the checkpoint was trained with. They
 * must agree: a checkpoint is never evaluated on a grid it was not trained on. A stack with a csa
 * layer whose config.json lacks the key was written before csa layers moved to DeepSeek-V4's
 * geometry (o_base = S - W; it was trained on the aligned grid, o_base = 0) and is refused. */
static int check_grid_geometry(const cJSON *j, const char *path, const ModelConfig *mc, int T, char *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "phaselab");
    if (!cJSON_IsObject(p)) return 0;            /* a plain Qwen3 config.json: no grid */
    const cJSON *bases = cJSON_GetObjectItemCaseSensitive(p, "layer_grid_base");
    if (!bases) {
        for (int l = 0; l < mc->n_layers; l++) {
            const ModelConfig lc = layer_config(mc, l);
            if (dims_of(&lc, T).grid_base != 0)
                return set_err(err, "%s: phaselab.layer_grid_base missing, but layer %d is a csa layer, which this build "
                               "runs on DeepSeek-V4's grid (o_base = %d, docs/spec.md §5.4): the checkpoint was written "
                               "before that geometry and trained on the aligned grid (o_base = 0); retrain it",
                               path, l, dims_of(&lc, T).grid_base);
        }
        return 0;
    }
    if (!cJSON_IsArray(bases) || cJSON_GetArraySize(bases) != mc->n_layers)
        return set_err(err, "%s: phaselab.layer_grid_base: expected an array of %d integers (one grid offset per layer)",
                       path, mc->n_layers);
    for (int l = 0; l < mc->n_layers; l++) {
        const cJSON *v = cJSON_GetArrayItem(bases, l);
        const ModelConfig lc = layer_config(mc, l);
        const int want = dims_of(&lc, T).grid_base;
        if (!cJSON_IsNumber(v))
            return set_err(err, "%s: phaselab.layer_grid_base[%d]: expected an integer grid offset", path, l);
        if (v->valuedouble != (double)want)
            return set_err(err, "%s: phaselab.layer_grid_base[%d] = %g, but this build derives o_base = %d for that layer "
                           "(docs/spec.md §6.1): the checkpoint was trained on another grid", path, l, v->valuedouble, want);
    }
    return 0;
}

void ckpt_source_close(CkptSource *c) {
    free(c->dir);
    free(c->config_path);
    free(c->run_dir);
    free(c->tokenizer_fp_source);
    free(c->tokenizer_json);
    free(c->overrides);
    memset(c, 0, sizeof *c);
}

/* the overrides as one space-separated line ("" for none); malloc'd, NULL when out of memory */
static char *join_overrides(int n, char **over) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(over[i]) + 1;
    char *s = malloc(len);
    if (!s) return NULL;
    s[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i) strcat(s, " ");
        strcat(s, over[i]);
    }
    return s;
}

int ckpt_source_open(CkptSource *c, const char *dir, int n_over, char **over, FILE *say, char *err) {
    memset(c, 0, sizeof *c);
    c->st.step = -1;
    if (!(c->dir = strdup(dir))) return set_err(err, "%s: out of memory", dir);
    if (!(c->overrides = join_overrides(n_over, over))) { free(c->dir); c->dir = NULL; return set_err(err, "%s: out of memory", dir); }
    {   /* a run directory given for one of its checkpoints: say which to give */
        char sub[4200], st_path[4200], newest[4096] = "";
        struct stat sb;
        snprintf(sub, sizeof sub, "%s/checkpoints", dir);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        if (stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && access(st_path, F_OK) != 0) {
            TrainState ts;
            char e2[ERR_LEN];
            int have = checkpoint_latest(dir, newest, sizeof newest, &ts, e2) != 0 && newest[0];   /* (-1: its newest is damaged; still named) */
            ckpt_source_close(c);
            return set_err(err, "%s: a run directory, not a checkpoint: give one of its checkpoints, %s%s", dir,
                           have ? "the newest is " : "RUN/checkpoints/step_N (it has none yet)", have ? newest : ""), -2;
        }
    }
    char *ini = str_printf("%s/config.ini", dir), *json_path = str_printf("%s/config.json", dir);
    char *state = str_printf("%s/state.json", dir), *tok = str_printf("%s/tokenizer.json", dir);
    int rc = 0;
    cJSON *j = NULL;
    if (!ini || !json_path || !state || !tok) { rc = set_err(err, "%s: out of memory", dir); goto done; }
    j = read_json(json_path);
    if (access(ini, R_OK) == 0) {
        c->config_path = ini, ini = NULL;
        if (config_load(&c->saved, c->config_path, 0, NULL, err) || config_load(&c->cfg, c->config_path, n_over, over, err)) {
            rc = -2;
            goto done;
        }
    } else if (access(json_path, R_OK) == 0) {
        c->config_path = json_path, json_path = NULL;
        if (!j) { rc = set_err(err, "%s: not a JSON object (expected the HuggingFace config.json of a model)", c->config_path), rc = -2; goto done; }
        Overrides o = {{0}, 0};
        int has_seq_len = 0;
        if (config_json_overrides(j, c->config_path, &o, &has_seq_len, err)) { overrides_free(&o); rc = -2; goto done; }
        char e2[ERR_LEN];
        if (config_load(&c->saved, NULL, o.n, o.item, e2)) {
            set_err(err, "%s: cannot be read as a phaselab model: %s", c->config_path, e2);
            overrides_free(&o);
            rc = -2;
            goto done;
        }
        /* [train] batch_tokens must be a multiple of seq_len * micro_batch; a config.json has neither
         * key, so it is made one batch of the final T and micro_batch (the command line's when given) */
        int user_seq_len = 0, user_batch = 0;
        long long T = c->saved.data.seq_len, micro = c->saved.train.micro_batch;
        char **all = malloc(sizeof(char *) * (size_t)(o.n + n_over + 1));
        if (!all) { overrides_free(&o); rc = set_err(err, "%s: out of memory", dir); goto done; }
        for (int i = 0; i < o.n; i++) all[i] = o.item[i];
        for (int i = 0; i < n_over; i++) {
            all[o.n + i] = over[i];
            if (!strncmp(over[i], "data.seq_len=", 13)) user_seq_len = 1, T = strtoll(over[i] + 13, NULL, 10);
            if (!strncmp(over[i], "train.micro_batch=", 18)) micro = strtoll(over[i] + 18, NULL, 10);
            if (!strncmp(over[i], "train.batch_tokens=", 19)) user_batch = 1;
        }
        char *batch = NULL;
        if (!user_batch && T > 0 && micro > 0 && T <= (1LL << 40) / micro)
            all[o.n + n_over] = batch = str_printf("train.batch_tokens=%lld", T * micro);
        int bad = config_load(&c->cfg, NULL, o.n + n_over + !!batch, all, err);
        free(batch);
        free(all);
        overrides_free(&o);
        if (bad) { rc = -2; goto done; }
        if (!has_seq_len && !user_seq_len) {
            rc = set_err(err, "%s: no phaselab_seq_len (the sequence length T the model was trained at): give data.seq_len=T",
                         c->config_path), rc = -2;
            goto done;
        }
    } else {
        rc = set_err(err, "%s: not a checkpoint directory: no readable config.ini or config.json (expected a checkpoint "
                     "step_N directory, or a directory with config.json and model.safetensors)", dir), rc = -2;
        goto done;
    }
    if (j && check_grid_geometry(j, json_path ? json_path : c->config_path, &c->cfg.model, (int)c->cfg.data.seq_len, err)) {
        rc = -2;
        goto done;
    }
    c->has_state = access(state, F_OK) == 0;
    char wd[4096];
    if (c->has_state && checkpoint_working_dir(dir, wd, sizeof wd) && !(c->run_dir = strdup(wd))) {
        rc = set_err(err, "%s: out of memory", dir);
        goto done;
    }
    if (access(tok, R_OK) == 0) c->tokenizer_json = tok, tok = NULL;
    /* the tokenizer fingerprint: config.json, the directory's tokenizer.json, the training shards */
    if (j && fingerprint_from_config_json(j, c->tokenizer_fp)) {
        c->tokenizer_fp_source = str_printf("%s/config.json", dir);
    } else if (c->tokenizer_json) {
        char e2[ERR_LEN];
        if (sha256_file_hex(c->tokenizer_json, c->tokenizer_fp, e2) == 0) c->tokenizer_fp_source = strdup(c->tokenizer_json);
        else c->tokenizer_fp[0] = 0;
    } else if (!fingerprint_from_shards(c, c->tokenizer_fp, &c->tokenizer_fp_source)) {
        c->tokenizer_fp[0] = 0;
    }
    if (c->tokenizer_fp[0] && !c->tokenizer_fp_source) { rc = set_err(err, "%s: out of memory", dir); goto done; }
    if (!c->has_state) {
        char *st_path = str_printf("%s/model.safetensors", dir);
        c->st.step = st_path ? safetensors_step(st_path) : -1;
        if (say) {
            char stepw[64] = "step unknown";
            if (c->st.step >= 0) snprintf(stepw, sizeof stepw, "step %ld from its safetensors metadata", c->st.step);
            fprintf(say, "weights-only checkpoint: no state.json; the weights %s are read with no checksums to verify and no "
                         "optimizer state (%s; config from %s)\n", st_path ? st_path : "model.safetensors", stepw, c->config_path);
        }
        free(st_path);
    }
done:
    cJSON_Delete(j);
    free(ini), free(json_path), free(state), free(tok);
    if (rc) {
        char keep[ERR_LEN];
        snprintf(keep, sizeof keep, "%s", err ? err : "");
        ckpt_source_close(c);
        if (err) snprintf(err, ERR_LEN, "%s", keep);
    }
    return rc;
}

int ckpt_source_load(CkptSource *c, Model *m, char *err) {
    if (c->has_state) {
        if (checkpoint_read_state_weights(c->dir, &c->st, err)) return -1;
        return checkpoint_load(c->dir, m, NULL, &c->st, err);
    }
    return checkpoint_load(c->dir, m, NULL, NULL, err);
}

/* ---------------------------------------------------------------- paths */

char *ckpt_source_path(const CkptSource *c, const char *key, const char *value, const char *saved_value, FILE *say) {
    if (!value[0] || value[0] == '/' || strcmp(value, saved_value) != 0 || !c->run_dir) return strdup(value);
    if (say) fprintf(say, "%s = %s (relative to the run's directory %s)\n", key, value, c->run_dir);
    return str_printf("%s/%s", c->run_dir, value);
}

int ckpt_source_val(const CkptSource *c, char **glob_out, FILE *say, char *err) {
    *glob_out = NULL;
    const char *val = c->cfg.data.val;
    if (!val[0]) return 0;
    int from_ckpt = !strcmp(val, c->saved.data.val);
    char *g = ckpt_source_path(c, "data.val", val, c->saved.data.val, say);
    if (!g) return set_err(err, "%s: out of memory", c->dir);
    if (glob_matches(g)) { *glob_out = g; return 0; }
    free(g);
    if (from_ckpt && !c->has_state) {
        if (say) fprintf(say, "weights-only checkpoint: data.val = '%s' of %s matches no file here; no validation loss (name "
                              "the validation shards with data.val=GLOB)\n", val, c->config_path);
        return 0;
    }
    set_err(err, "%s: data.val = '%s' matches no file (%s); name the validation shards with data.val=GLOB (relative to "
            "the current directory)", c->config_path, val,
            from_ckpt && c->run_dir && val[0] != '/' ? "looked relative to the run's directory recorded in state.json"
            : !from_ckpt || val[0] == '/' ? "as given"
            : "this checkpoint records no run directory; looked relative to the current directory");
    return -2;
}

int ckpt_source_probe_path(const CkptSource *c, const char *probe_arg, char **path_out, FILE *say, char *err) {
    *path_out = NULL;
    if (probe_arg) {
        if (access(probe_arg, R_OK) != 0)
            return set_err(err, "--probe %s: cannot be read (%s); expected a probe set made by tools/make-probe", probe_arg,
                           strerror(errno)), -2;
        if (!(*path_out = strdup(probe_arg))) return set_err(err, "out of memory");
        return 0;
    }
    const char *p = c->cfg.eval.probe;
    if (!p[0]) return 0;
    int from_ckpt = !strcmp(p, c->saved.eval.probe);
    char *path = ckpt_source_path(c, "eval.probe", p, c->saved.eval.probe, say);
    if (!path) return set_err(err, "%s: out of memory", c->dir);
    if (access(path, R_OK) == 0) { *path_out = path; return 0; }
    int e = errno;
    if (from_ckpt && !c->has_state) {
        if (say) fprintf(say, "weights-only checkpoint: eval.probe = '%s' of %s cannot be read here (%s); no probe (name one "
                              "with --probe FILE)\n", p, c->config_path, strerror(e));
        free(path);
        return 0;
    }
    set_err(err, "%s: eval.probe = '%s' cannot be read (%s); name the probe set with --probe FILE", c->config_path, path,
            strerror(e));
    free(path);
    return -2;
}

/* ---------------------------------------------------------------- compatibility */

static int check_fp(const CkptSource *c, const char *what, const char *file, const char *fp, int text, FILE *say,
                    char *err) {
    if (!fp || !fp[0]) return 0;
    if (!c->tokenizer_fp[0]) {
        if (say) fprintf(say, "note: %s records no tokenizer fingerprint: %s %s (tokenizer '%s') cannot be checked against it\n",
                         c->dir, what, file, fp);
        return 0;
    }
    if (!strcmp(fp, c->tokenizer_fp)) return 0;
    if (text && !strcmp(c->tokenizer_fp, SYNTH_FINGERPRINT) && !strcmp(fp, "bytes")) {
        if (say) fprintf(say, "note: %s has the synthetic vocabulary (no text); %s %s only types its token ids as bytes\n",
                         c->dir, what, file);
        return 0;
    }
    set_err(err, "%s %s: tokenizer fingerprint '%s', but the checkpoint %s was trained on token ids of '%s' (%s): the ids "
            "mean other things to this model; expected an input made with the checkpoint's tokenizer", what, file, fp, c->dir,
            c->tokenizer_fp, c->tokenizer_fp_source ? c->tokenizer_fp_source : "?");
    return -2;
}

int ckpt_source_check_tokenizer(const CkptSource *c, const char *what, const char *file, const char *fp, FILE *say,
                                char *err) {
    return check_fp(c, what, file, fp, 0, say, err);
}

int ckpt_source_check_text_tokenizer(const CkptSource *c, const char *what, const char *file, const char *fp, FILE *say,
                                     char *err) {
    return check_fp(c, what, file, fp, 1, say, err);
}

int ckpt_source_check_probe(const CkptSource *c, const char *what, const ProbeSet *ps, FILE *say, char *err) {
    return check_fp(c, what, probe_set_path(ps), probe_set_fingerprint(ps), 0, say, err);
}
