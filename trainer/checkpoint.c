/* Checkpoint save, discovery and load (format and protocol in trainer/checkpoint.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "trainer/fsutil.h"
#include "model/errors.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "kernels/kernels.h"

#define OPT_MAGIC "PHLOPTv1"
#define OPT_HEADER_BYTES 48

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

/* HuggingFace config.json; plain full attention is a Qwen3ForCausalLM. */
static char *hf_config_json(const ModelConfig *m, int T) {
    int vanilla = m->attention == ATTN_FULL && m->qk_norm && m->rope_dims == m->head_dim && !m->attn_sink;
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(vanilla ? "Qwen3ForCausalLM" : "PhaselabQwen3ForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "qwen3");
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
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    if (!vanilla) {
        cJSON *p = cJSON_AddObjectToObject(j, "phaselab");
        cJSON_AddStringToObject(p, "attention", m->attention == ATTN_FULL ? "full" : "compressed");
        cJSON_AddNumberToObject(p, "window", m->window);
        cJSON_AddNumberToObject(p, "stride", m->stride);
        cJSON_AddStringToObject(p, "gate", m->gate == GATE_SCALAR ? "scalar" : m->gate == GATE_VECTOR ? "vector" : "uniform");
        cJSON_AddBoolToObject(p, "gate_bias", m->gate_bias);
        cJSON_AddBoolToObject(p, "kv_tied", m->kv_tied);
        cJSON_AddBoolToObject(p, "post_norm", m->post_norm);
        cJSON_AddBoolToObject(p, "qk_norm", m->qk_norm);
        cJSON_AddNumberToObject(p, "rope_dims", m->rope_dims);
        cJSON_AddStringToObject(p, "local", m->local == LOCAL_TAIL ? "tail" : "window");
        cJSON_AddNumberToObject(p, "n_local", m->n_local);
        cJSON_AddStringToObject(p, "compressor", m->compressor == COMPRESSOR_DEEPSEEK ? "deepseek" : "paper");
        cJSON_AddBoolToObject(p, "attn_sink", m->attn_sink);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

static int write_optimizer_shard(const char *path, const Optimizer *o, int rank, int world, char *err) {
    size_t n = o->shard;
    float *host = malloc(sizeof(float) * n * 2);
    o->be->download(host, o->m, sizeof(float) * n);
    o->be->download(host + n, o->v, sizeof(float) * n);
    unsigned char hdr[OPT_HEADER_BYTES] = {0};
    memcpy(hdr, OPT_MAGIC, 8);
    uint32_t u32[4] = {1, (uint32_t)rank, (uint32_t)world, 0};
    uint64_t u64[3] = {o->lo, n, o->tt->n_floats};
    memcpy(hdr + 8, u32, 16);
    memcpy(hdr + 24, u64, 24);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(hdr, 1, OPT_HEADER_BYTES, f) == OPT_HEADER_BYTES && fwrite(host, 4, 2 * n, f) == 2 * n &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f)) ok = 0;
    free(host);
    if (!ok) return set_err(err, "%s: cannot write the optimizer shard: %s", path, strerror(errno));
    return 0;
}

static void ckpt_name(char *out, size_t len, const char *run_dir, const char *prefix, long step) {
    snprintf(out, len, "%s/checkpoints/%sstep_%08ld", run_dir, prefix, step);
}

/* step numbers of complete checkpoints, newest first */
static int list_checkpoints(const char *run_dir, long *steps, int max) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long s;
        if (strlen(e->d_name) == 13 && sscanf(e->d_name, "step_%ld", &s) == 1) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++)           /* sort descending */
        for (int j = i + 1; j < n; j++)
            if (steps[j] > steps[i]) { long t = steps[i]; steps[i] = steps[j]; steps[j] = t; }
    return n;
}

void checkpoint_clean_tmp(const char *run_dir) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp_", 5)) continue;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fs_remove_tree(p);
    }
    closedir(d);
}

/* rank 0: state.json with the size of every file, fsync, rename to the final name, prune */
static int commit_checkpoint(const char *run_dir, const char *tmp, const char *final, const TrainState *st,
                             const Optimizer *o, int world, const char *code_version, int keep, char *err) {
    char path[4600];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(j, "samples", (double)st->samples);
    cJSON_AddNumberToObject(j, "updates", (double)st->updates);
    cJSON_AddNumberToObject(j, "skipped_steps", (double)st->skipped_steps);
    cJSON_AddNumberToObject(j, "world_size", world);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)st->seed);
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddStringToObject(j, "data_fingerprint", st->data_fingerprint);
    cJSON_AddStringToObject(j, "code_version", code_version);
    cJSON_AddNumberToObject(j, "n_floats", (double)o->tt->n_floats);
    cJSON_AddNumberToObject(j, "shard", (double)o->shard);
    cJSON *files = cJSON_AddObjectToObject(j, "files");
    const char *names[] = {"model.safetensors", "config.json", "config.ini"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, names[i]);
        cJSON_AddNumberToObject(files, names[i], (double)file_size(path));
    }
    for (int r = 0; r < world; r++) {
        char rel[64];
        snprintf(rel, sizeof rel, "optimizer/rank_%05d.bin", r);
        snprintf(path, sizeof path, "%s/%s", tmp, rel);
        cJSON_AddNumberToObject(files, rel, (double)file_size(path));
    }
    cJSON_AddBoolToObject(j, "complete", 1);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/state.json", tmp);
    int rc = fs_write_atomic(path, s, strlen(s), err);
    free(s);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/optimizer", tmp);
    fs_fsync_path(path);
    fs_fsync_path(tmp);
    fs_remove_tree(final);   /* an older save of the same step (a resume after a crash) */
    if (rename(tmp, final)) return set_err(err, "%s: cannot rename into place: %s", final, strerror(errno));
    char cdir[4096];
    snprintf(cdir, sizeof cdir, "%s/checkpoints", run_dir);
    fs_fsync_path(cdir);
    long steps[4096];
    int n = list_checkpoints(run_dir, steps, 4096);
    for (int i = keep; i < n; i++) {
        char old[4096];
        ckpt_name(old, sizeof old, run_dir, "", steps[i]);
        fs_remove_tree(old);
    }
    return 0;
}

int checkpoint_save(const char *run_dir, const TrainState *st, const Config *cfg, Model *m, Optimizer *o,
                    Comm *comm, const char *code_version, int keep, char *err) {
    char tmp[4096], final[4096], path[4600];
    ckpt_name(tmp, sizeof tmp, run_dir, ".tmp_", st->step);
    ckpt_name(final, sizeof final, run_dir, "", st->step);
    int fail = 0;
    char local_err[ERR_LEN] = "";
    if (comm->rank == 0) {
        fs_remove_tree(tmp);
        snprintf(path, sizeof path, "%s/optimizer", tmp);
        if (fs_mkdirs(path, local_err)) fail = 1;
    }
    comm_allreduce_max_int(comm, &fail, 1);
    if (fail) return set_err(err, "%s", comm->rank == 0 ? local_err : "checkpoint directory could not be created");
    /* every rank: its optimizer shard */
    snprintf(path, sizeof path, "%s/optimizer/rank_%05d.bin", tmp, comm->rank);
    int my_fail = write_optimizer_shard(path, o, comm->rank, comm->world, local_err) != 0;
    /* rank 0: weights and configs */
    const TensorTable *tt = model_tensors(m);
    if (comm->rank == 0 && !my_fail) {
        float *host = malloc(sizeof(float) * tt->n_floats);
        model_download_params(m, host);
        char tbuf[64];
        snprintf(tbuf, sizeof tbuf, "%ld", st->step);
        const char *meta[] = {"phaselab_step", tbuf, "phaselab_code_version", code_version, NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        if (safetensors_write(path, tt, host, meta, local_err)) my_fail = 1;
        free(host);
        char *hf = hf_config_json(&cfg->model, cfg->data.seq_len);
        snprintf(path, sizeof path, "%s/config.json", tmp);
        if (!my_fail && fs_write_atomic(path, hf, strlen(hf), local_err)) my_fail = 1;
        free(hf);
        char *ini = config_to_string(cfg);
        snprintf(path, sizeof path, "%s/config.ini", tmp);
        if (!my_fail && fs_write_atomic(path, ini, strlen(ini), local_err)) my_fail = 1;
        free(ini);
    }
    fail = my_fail;
    comm_allreduce_max_int(comm, &fail, 1);          /* every part is on disk (or someone failed) */
    if (!fail && comm->rank == 0 &&
        commit_checkpoint(run_dir, tmp, final, st, o, comm->world, code_version, keep, local_err))
        my_fail = 1;
    if (comm->rank == 0 && (fail || my_fail)) fs_remove_tree(tmp);
    fail = my_fail;
    comm_allreduce_max_int(comm, &fail, 1);
    if (fail) return set_err(err, "%s", local_err[0] ? local_err : "checkpoint failed on another rank");
    return 0;
}

/* A count read from state.json: a whole number in [0, limit) (converting anything else, 1e300
 * or -1 or 2.5, to an integer type would be undefined or wrong). */
static int json_count(const cJSON *x, double limit) {
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < limit && x->valuedouble == floor(x->valuedouble);
}

int checkpoint_read_state(const char *ckpt_dir, TrainState *st, char *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/state.json", ckpt_dir);
    char *text = fs_read_all(path, NULL);
    if (!text) return set_err(err, "%s: missing or unreadable (corrupt checkpoint)", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return set_err(err, "%s: not valid JSON (corrupt checkpoint)", path);
    memset(st, 0, sizeof *st);
    int rc = 0;
    const char *keys[] = {"step", "tokens", "updates", "skipped_steps", "world_size", "samples"};
    /* exclusive upper bounds: 2^53 for the long counters (exact in a double), 2^24 ranks, 2^64 */
    const double limits[] = {9007199254740992.0, 9007199254740992.0, 9007199254740992.0, 9007199254740992.0,
                             16777216.0, 18446744073709551616.0};
    double vals[6];
    for (int i = 0; i < 6 && !rc; i++) {
        cJSON *x = cJSON_GetObjectItem(j, keys[i]);
        if (!cJSON_IsNumber(x)) rc = set_err(err, "%s: key '%s' missing or not a number (corrupt checkpoint)", path, keys[i]);
        else if (!json_count(x, limits[i]) || (i == 4 && x->valuedouble < 1))
            rc = set_err(err, "%s: key '%s' is %g, expected a whole number in [%d, %.0f) (corrupt checkpoint)", path,
                         keys[i], x->valuedouble, i == 4, limits[i]);
        else vals[i] = x->valuedouble;
    }
    if (!rc) {
        st->step = (long)vals[0]; st->tokens = (long)vals[1]; st->updates = (long)vals[2];
        st->skipped_steps = (long)vals[3]; st->world_size = (int)vals[4]; st->samples = (uint64_t)vals[5];
        cJSON *x = cJSON_GetObjectItem(j, "seed");
        st->seed = cJSON_IsString(x) ? strtoull(x->valuestring, NULL, 10) : 0;
        x = cJSON_GetObjectItem(j, "data_fingerprint");
        if (cJSON_IsString(x)) snprintf(st->data_fingerprint, sizeof st->data_fingerprint, "%s", x->valuestring);
        cJSON *files = cJSON_GetObjectItem(j, "files");
        if (!cJSON_IsObject(files)) rc = set_err(err, "%s: no file list (corrupt checkpoint)", path);
        for (cJSON *f = files ? files->child : NULL; f && !rc; f = f->next) {
            char fp[4800];
            snprintf(fp, sizeof fp, "%s/%s", ckpt_dir, f->string);
            if (!json_count(f, 9007199254740992.0)) {
                rc = set_err(err, "%s: size of %s is not a byte count (corrupt checkpoint)", path, f->string);
                break;
            }
            long have = file_size(fp);
            if (have != (long)f->valuedouble)
                rc = set_err(err, "%s: %s %ld bytes, expected %ld (corrupt checkpoint); move %s away to resume "
                             "from the previous checkpoint", fp, have < 0 ? "missing," : "size", have,
                             (long)f->valuedouble, ckpt_dir);
        }
    }
    cJSON_Delete(j);
    return rc;
}

int checkpoint_latest(const char *run_dir, char *dir_out, size_t dir_len, TrainState *st, char *err) {
    long steps[4096];
    int n = list_checkpoints(run_dir, steps, 4096);
    if (n == 0) return 0;
    ckpt_name(dir_out, dir_len, run_dir, "", steps[0]);
    if (checkpoint_read_state(dir_out, st, err)) return -1;
    return 1;
}

int checkpoint_load(const char *ckpt_dir, Model *m, Optimizer *o, const TrainState *st, char *err) {
    char path[4600];
    const TensorTable *tt = model_tensors(m);
    float *host = calloc(tt->n_floats, sizeof(float));
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt_dir);
    if (safetensors_read(path, tt, host, err)) { free(host); return -1; }
    model_upload_params(m, host);
    free(host);
    if (!o) return 0;
    /* optimizer: gather [o->lo, o->hi) from the checkpoint's shards, whatever their world size */
    float *mv = calloc(2 * o->shard, sizeof(float));
    for (int r = 0; r < st->world_size; r++) {
        snprintf(path, sizeof path, "%s/optimizer/rank_%05d.bin", ckpt_dir, r);
        FILE *f = fopen(path, "rb");
        unsigned char hdr[OPT_HEADER_BYTES];
        if (!f || fread(hdr, 1, OPT_HEADER_BYTES, f) != OPT_HEADER_BYTES || memcmp(hdr, OPT_MAGIC, 8)) {
            if (f) fclose(f);
            free(mv);
            return set_err(err, "%s@0: missing or not an optimizer shard (magic %s expected)", path, OPT_MAGIC);
        }
        uint64_t u64[3];
        memcpy(u64, hdr + 24, 24);
        uint64_t lo = u64[0], count = u64[1];
        if (u64[2] != tt->n_floats) {
            fclose(f);
            free(mv);
            return set_err(err, "%s@40: shard of a %llu-float buffer, this model has %zu", path,
                           (unsigned long long)u64[2], tt->n_floats);
        }
        size_t a = lo > o->lo ? lo : o->lo, b = lo + count < o->hi ? lo + count : o->hi;
        if (a < b) {
            int ok = fseek(f, (long)(OPT_HEADER_BYTES + (a - lo) * 4), SEEK_SET) == 0 &&
                     fread(mv + (a - o->lo), 4, b - a, f) == b - a &&
                     fseek(f, (long)(OPT_HEADER_BYTES + (count + a - lo) * 4), SEEK_SET) == 0 &&
                     fread(mv + o->shard + (a - o->lo), 4, b - a, f) == b - a;
            if (!ok) { fclose(f); free(mv); return set_err(err, "%s: truncated optimizer shard", path); }
        }
        fclose(f);
    }
    o->be->upload(o->m, mv, sizeof(float) * o->shard);
    o->be->upload(o->v, mv + o->shard, sizeof(float) * o->shard);
    o->updates = st->updates;
    free(mv);
    return 0;
}
