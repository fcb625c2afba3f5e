/* Checkpoint save, discovery, verification and load (format and protocol in trainer/checkpoint.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "common/fsutil.h"
#include "data/tokenizer.h"
#include "trainer/hf_export.h"
#include "common/errors.h"
#include "common/sha256.h"
#include "common/json_num.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "kernels/kernels.h"

#define OPT_MAGIC "PHLOPTv1"
#define OPT_HEADER_BYTES 48

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static int write_optimizer_shard(const char *path, const Optimizer *o, int rank, int world, char *err) {
    size_t n = o->shard;
    float *host = malloc(sizeof(float) * (n ? n : 1) * 2);
    if (!host)
        return set_err(err, "%s: out of memory: %zu bytes for the optimizer shard", path, sizeof(float) * n * 2);
    o->be->download(o->be->ctx, host, o->m, sizeof(float) * n);
    o->be->download(o->be->ctx, host + n, o->v, sizeof(float) * n);
    unsigned char hdr[OPT_HEADER_BYTES] = {0};
    memcpy(hdr, OPT_MAGIC, 8);
    uint32_t u32[4] = {1, (uint32_t)rank, (uint32_t)world, 0};
    uint64_t u64[3] = {o->lo, n, o->tt->n_floats};
    memcpy(hdr + 8, u32, 16);
    memcpy(hdr + 24, u64, 24);
    AtomicFile f;
    int ok = fs_atomic_open(&f, path, err) == 0 && fs_atomic_write(&f, hdr, OPT_HEADER_BYTES, err) == 0 &&
             fs_atomic_write(&f, host, sizeof(float) * 2 * n, err) == 0 && fs_atomic_commit(&f, err) == 0;
    free(host);
    if (!ok) return set_err(err, "%s: cannot write the optimizer shard: %s", path, strerror(errno));
    return 0;
}

static void ckpt_name(char *out, size_t len, const char *run_dir, const char *prefix, long step) {
    snprintf(out, len, "%s/checkpoints/%sstep_%08ld", run_dir, prefix, step);
}

long checkpoint_name_step(const char *name) {
    if (strncmp(name, "step_", 5) || name[5] < '0' || name[5] > '9') return -1;
    char *end;
    errno = 0;
    long s = strtol(name + 5, &end, 10);
    if (errno || *end || s < 0) return -1;
    char canon[64];
    snprintf(canon, sizeof canon, "step_%08ld", s);
    return strcmp(canon, name) == 0 ? s : -1;          /* one name per step: no "step_007" aliases */
}

/* step numbers of complete checkpoints, newest first */
/* The steps of the newest (at most max) checkpoints, newest first. With more than max
 * directories the oldest are left out, never the newest (readdir's order is arbitrary). */
static int list_checkpoints(const char *run_dir, long *steps, int max) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s = checkpoint_name_step(e->d_name);
        if (s < 0) continue;
        if (n < max) { steps[n++] = s; continue; }
        int oldest = 0;                    /* full: s replaces the oldest kept, if newer */
        for (int i = 1; i < n; i++) if (steps[i] < steps[oldest]) oldest = i;
        if (s > steps[oldest]) steps[oldest] = s;
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

/* ---------------------------------------------------------------- state.json's fields
 * One table drives the writer and the reader: the writer emits these keys in this order (then
 * "files", "complete" and "state_sha256"), the reader checks each one's type and range and
 * stores it. A required field that is missing, or any field of the wrong type or out of range,
 * is an error naming state.json and the key. */
typedef enum {
    FIELD_LONG,             /* a whole JSON number in [lo, hi] into a long */
    FIELD_INT,              /* the same into an int */
    FIELD_U64,              /* the same into a uint64_t */
    FIELD_U64_DECIMAL,      /* a uint64_t written as a decimal string (exact beyond 2^53: the seed) */
    FIELD_STRING,           /* a string into a char array of `size` bytes */
} StateFieldType;

/* What state.json records besides "files", "complete" and "state_sha256". */
typedef struct {
    TrainState st;
    char code_version[512];
    char working_dir[4096];     /* what config.ini's relative paths are relative to */
    uint64_t n_floats, shard;   /* the flat parameter buffer; rank 0's optimizer shard */
} StateRecord;

typedef struct {
    const char *key;
    StateFieldType type;
    size_t offset, size;        /* of the member in StateRecord */
    uint64_t lo, hi;            /* integer fields: the accepted range */
    int required;               /* 0: checkpoints from before the field may lack it */
} StateField;

#define STATE_FIELD(key, type, member, lo, hi, required) \
    {key, type, offsetof(StateRecord, member), sizeof(((StateRecord *)0)->member), lo, hi, required}
static const StateField state_fields[] = {
    STATE_FIELD("step",             FIELD_LONG,        st.step,             0, LONG_MAX,       1),
    STATE_FIELD("tokens",           FIELD_LONG,        st.tokens,           0, LONG_MAX,       1),
    STATE_FIELD("samples",          FIELD_U64,         st.samples,          0, JSON_MAX_EXACT, 1),
    STATE_FIELD("updates",          FIELD_LONG,        st.updates,          0, LONG_MAX,       1),
    STATE_FIELD("skipped_steps",    FIELD_LONG,        st.skipped_steps,    0, LONG_MAX,       1),
    STATE_FIELD("world_size",       FIELD_INT,         st.world_size,       1, 65536,          1),
    STATE_FIELD("seed",             FIELD_U64_DECIMAL, st.seed,             0, UINT64_MAX,     1),
    STATE_FIELD("data_fingerprint", FIELD_STRING,      st.data_fingerprint, 0, 0,              0),
    STATE_FIELD("code_version",     FIELD_STRING,      code_version,        0, 0,              0),
    STATE_FIELD("working_dir",      FIELD_STRING,      working_dir,         0, 0,              0),
    STATE_FIELD("n_floats",         FIELD_U64,         n_floats,            0, JSON_MAX_EXACT, 0),
    STATE_FIELD("shard",            FIELD_U64,         shard,               0, JSON_MAX_EXACT, 0),
    STATE_FIELD("schedule_steps",   FIELD_LONG,        st.schedule_steps,   0, LONG_MAX,       0),
};
#undef STATE_FIELD
#define N_STATE_FIELDS ((int)(sizeof state_fields / sizeof state_fields[0]))

/* Adds every field of rec to j, in table order. */
static void state_fields_write(cJSON *j, const StateRecord *rec) {
    for (int i = 0; i < N_STATE_FIELDS; i++) {
        const StateField *f = &state_fields[i];
        const void *at = (const char *)rec + f->offset;
        char text[32];
        switch (f->type) {
        case FIELD_LONG: cJSON_AddNumberToObject(j, f->key, (double)*(const long *)at); break;
        case FIELD_INT: cJSON_AddNumberToObject(j, f->key, *(const int *)at); break;
        case FIELD_U64: cJSON_AddNumberToObject(j, f->key, (double)*(const uint64_t *)at); break;
        case FIELD_U64_DECIMAL:
            snprintf(text, sizeof text, "%llu", (unsigned long long)*(const uint64_t *)at);
            cJSON_AddStringToObject(j, f->key, text);
            break;
        case FIELD_STRING: cJSON_AddStringToObject(j, f->key, (const char *)at); break;
        }
    }
}

/* Reads every field of the table from j into rec; 0, or -1 with err naming path and the key. */
static int state_fields_read(const cJSON *j, StateRecord *rec, const char *path, char *err) {
    for (int i = 0; i < N_STATE_FIELDS; i++) {
        const StateField *f = &state_fields[i];
        void *at = (char *)rec + f->offset;
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, f->key);
        if (!x && !f->required) continue;
        uint64_t v = 0;
        char *end = NULL;
        switch (f->type) {
        case FIELD_LONG: case FIELD_INT: case FIELD_U64:
            if (json_u64_in(x, f->lo, f->hi, &v))
                return set_err(err, "%s: key '%s' missing or not an integer in [%llu, %llu] (corrupt checkpoint)", path,
                               f->key, (unsigned long long)f->lo, (unsigned long long)f->hi);
            if (f->type == FIELD_LONG) *(long *)at = (long)v;
            else if (f->type == FIELD_INT) *(int *)at = (int)v;
            else *(uint64_t *)at = v;
            break;
        case FIELD_U64_DECIMAL:
            errno = 0;
            if (cJSON_IsString(x) && x->valuestring[0] >= '0' && x->valuestring[0] <= '9')
                v = strtoull(x->valuestring, &end, 10);
            if (!end || *end || errno)
                return set_err(err, "%s: key '%s' missing or not a decimal string (corrupt checkpoint)", path, f->key);
            *(uint64_t *)at = v;
            break;
        case FIELD_STRING:
            if (!cJSON_IsString(x))
                return set_err(err, "%s: key '%s' missing or not a string (corrupt checkpoint)", path, f->key);
            snprintf((char *)at, f->size, "%s", x->valuestring);
            break;
        }
    }
    return 0;
}

/* files[name] = {"bytes": N, "sha256": HEX} for one file of the directory being committed */
static int add_file_entry(cJSON *files, const char *dir, const char *name, char *err) {
    char path[4600], hex[65];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    long bytes = file_size(path);
    if (bytes < 0 || sha256_file_hex(path, hex, err)) return set_err(err, "%s: cannot read back for its checksum", path);
    cJSON *e = cJSON_AddObjectToObject(files, name);
    cJSON_AddNumberToObject(e, "bytes", (double)bytes);
    cJSON_AddStringToObject(e, "sha256", hex);
    return 0;
}

/* One rank's optimizer shard as it reads back from disk: its size (-1: not written or not readable)
 * and sha256. Every rank hashes its own shard after writing it and rank 0 gathers the records
 * (comm_gather_host), so a save reads each shard once, on its own rank, in parallel: rank 0 used to
 * read every rank's shard one after another while the others waited in a watched collective (at
 * 8 ranks of a 0.6B model ~5 GB read on one node, for a watchdog of 300 s). */
typedef struct {
    int64_t bytes;
    char sha256[72];
} ShardDigest;

static int shard_digest(const char *path, ShardDigest *d, char *err) {
    memset(d, 0, sizeof *d);
    d->bytes = file_size(path);
    if (d->bytes < 0 || sha256_file_hex(path, d->sha256, err)) {
        d->bytes = -1;
        return set_err(err, "%s: cannot read back for its checksum", path);
    }
    return 0;
}

/* sha256 of the state object printed without its "state_sha256" member (see checkpoint.h) */
static void state_digest(cJSON *j, char hex[65]) {
    cJSON *self = cJSON_DetachItemFromObjectCaseSensitive(j, "state_sha256");
    char *text = cJSON_PrintUnformatted(j);
    sha256_hex(text, strlen(text), hex);
    free(text);
    if (self) cJSON_AddItemToObject(j, "state_sha256", self);
}

/* rank 0: state.json with the size and sha256 of every file, fsync, rename to the final name,
 * prune older checkpoints beyond `keep` */
/* What a save writes into a checkpoint: the files state.json lists (CKPT_FILES always, the
 * HuggingFace files of trainer/hf_export.c when present), state.json and optimizer/. */
static const char *const CKPT_FILES[] = {"model.safetensors", "config.json", "config.ini"};
static const char *const CKPT_HF_FILES[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                            "configuration_phaselab.py", "modeling_phaselab.py"};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The first entry of checkpoint directory dir that a save did not write (analysis.h5, score.h5,
 * their CSVs and sidecars, an analysis writer's lock, a user's notes) into name; 0 when there is
 * none. Such a checkpoint holds results made from it, and the rotation keeps it. */
static int ckpt_added_entry(const char *dir, char *name, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        const char *n = e->d_name;
        int own = !strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "state.json") || !strcmp(n, "optimizer");
        for (int i = 0; i < N_OF(CKPT_FILES) && !own; i++) own = !strcmp(n, CKPT_FILES[i]);
        for (int i = 0; i < N_OF(CKPT_HF_FILES) && !own; i++) own = !strcmp(n, CKPT_HF_FILES[i]);
        if (!own) found = 1, snprintf(name, len, "%s", n);
    }
    closedir(d);
    return found;
}

static int commit_checkpoint(const char *run_dir, const char *tmp, const char *final, const TrainState *st,
                             const Optimizer *o, int world, const ShardDigest *shards, const char *code_version, int keep,
                             char *err) {
    char path[4600];
    StateRecord rec = {.st = *st, .n_floats = o->tt->n_floats, .shard = o->shard};
    rec.st.world_size = world;
    if (snprintf(rec.code_version, sizeof rec.code_version, "%s", code_version) >= (int)sizeof rec.code_version)
        return set_err(err, "%s: code version '%.40s...' longer than %zu bytes", tmp, code_version, sizeof rec.code_version - 1);
    /* relative paths of config.ini (data globs, the probe) are relative to this directory */
    if (!getcwd(rec.working_dir, sizeof rec.working_dir)) rec.working_dir[0] = 0;
    cJSON *j = cJSON_CreateObject();
    state_fields_write(j, &rec);
    cJSON *files = cJSON_AddObjectToObject(j, "files");
    int rc = 0;
    for (int i = 0; i < N_OF(CKPT_FILES) && !rc; i++) rc = add_file_entry(files, tmp, CKPT_FILES[i], err);
    /* the HuggingFace files this checkpoint has (trainer/hf_export.c) */
    for (int i = 0; i < N_OF(CKPT_HF_FILES) && !rc; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, CKPT_HF_FILES[i]);
        if (file_size(path) >= 0) rc = add_file_entry(files, tmp, CKPT_HF_FILES[i], err);
    }
    for (int r = 0; r < world && !rc; r++) {     /* hashed by their own ranks (ShardDigest) */
        char rel[64];
        snprintf(rel, sizeof rel, "optimizer/rank_%05d.bin", r);
        if (shards[r].bytes < 0) {
            rc = set_err(err, "%s/%s: rank %d could not read it back for its checksum", tmp, rel, r);
            break;
        }
        cJSON *e = cJSON_AddObjectToObject(files, rel);
        cJSON_AddNumberToObject(e, "bytes", (double)shards[r].bytes);
        cJSON_AddStringToObject(e, "sha256", shards[r].sha256);
    }
    cJSON_AddBoolToObject(j, "complete", 1);
    char digest[65];
    state_digest(j, digest);
    cJSON_AddStringToObject(j, "state_sha256", digest);
    char *s = rc ? NULL : cJSON_Print(j);
    cJSON_Delete(j);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/state.json", tmp);
    rc = fs_write_atomic(path, s, strlen(s), err);
    free(s);
    if (rc) return -1;
    /* the directories' entries must be durable before the rename publishes them */
    snprintf(path, sizeof path, "%s/optimizer", tmp);
    if (fs_fsync_path(path)) return set_err(err, "%s: cannot fsync: %s; checkpoint not saved", path, strerror(errno));
    if (fs_fsync_path(tmp)) return set_err(err, "%s: cannot fsync: %s; checkpoint not saved", tmp, strerror(errno));
    /* A directory of this step already exists only when something is off (a resume never
     * re-saves a step it resumed from): it is never replaced, the save fails instead. */
    if (fs_exists(final))
        return set_err(err, "%s: a checkpoint of step %ld already exists; not replacing it (move it away to "
                       "save again)", final, st->step);
    if (fs_rename_durable(tmp, final, err)) return -1;
    long steps[4096];
    int n = list_checkpoints(run_dir, steps, 4096);
    for (int i = keep; i < n; i++) {
        if (steps[i] >= st->step) continue;   /* only checkpoints the new one supersedes */
        char old[4096], added[256];
        ckpt_name(old, sizeof old, run_dir, "", steps[i]);
        if (ckpt_added_entry(old, added, sizeof added)) {   /* results made from it: kept (said once, when it leaves the window) */
            if (i == keep)
                fprintf(stderr, "phaselab: note: keeping %s beyond checkpoint.keep: it holds %s, which a save did not "
                        "write (an analysis result); remove the directory by hand when it is no longer needed\n", old, added);
            continue;
        }
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
    ShardDigest mine = {.bytes = -1};
    if (!my_fail && shard_digest(path, &mine, local_err)) my_fail = 1;
    /* rank 0: weights and configs */
    const TensorTable *tt = model_tensors(m);
    if (comm->rank == 0 && !my_fail) {
        float *host = malloc(sizeof(float) * (tt->n_floats ? tt->n_floats : 1));
        char tbuf[64];
        snprintf(tbuf, sizeof tbuf, "%ld", st->step);
        const char *meta[] = {"phaselab_step", tbuf, "phaselab_code_version", code_version, NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        if (!host) {
            set_err(local_err, "%s: out of memory: %zu bytes for the weights", path, sizeof(float) * tt->n_floats);
            my_fail = 1;
        } else {
            model_download_params(m, host);
            if (safetensors_write(path, tt, host, meta, local_err)) my_fail = 1;
        }
        free(host);
        /* config.json, model code, generation and tokenizer files (trainer/hf_export.c) */
        if (!my_fail && hf_export_write(tmp, &cfg->model, cfg->data.seq_len, local_err)) my_fail = 1;
        char *ini = config_to_string(cfg);
        snprintf(path, sizeof path, "%s/config.ini", tmp);
        if (!my_fail && !ini) {
            set_err(local_err, "%s: out of memory formatting the config", path);
            my_fail = 1;
        }
        if (!my_fail && fs_write_atomic(path, ini, strlen(ini), local_err)) my_fail = 1;
        free(ini);
    }
    /* the shards' digests to rank 0 */
    ShardDigest *shards = comm->rank == 0 ? calloc((size_t)comm->world, sizeof *shards) : NULL;
    if (comm->rank == 0 && !shards) {   /* (the gather has nowhere to land: the job cannot go on) */
        fprintf(stderr, "phaselab: %s: out of memory for %d shard digests\n", tmp, comm->world);
        comm_abort(comm, 1);
    }
    comm_gather_host(comm, &mine, sizeof mine, shards);
    /* every part is on disk, or 1 + the highest rank whose part failed: named in the other ranks'
     * error (rank 0's goes to log.txt; the failing rank's own reason is on its stderr) */
    int failed_rank = my_fail ? comm->rank + 1 : 0;
    comm_allreduce_max_int(comm, &failed_rank, 1);
    if (!failed_rank && comm->rank == 0 &&
        commit_checkpoint(run_dir, tmp, final, st, o, comm->world, shards, code_version, keep, local_err))
        my_fail = 1;
    free(shards);
    if (comm->rank == 0 && (failed_rank || my_fail)) fs_remove_tree(tmp);
    fail = my_fail;
    comm_allreduce_max_int(comm, &fail, 1);
    if (!fail) return 0;
    if (local_err[0]) return set_err(err, "%s", local_err);
    return set_err(err, "checkpoint step %ld failed on rank %d (its error is on that rank's stderr); not saved", st->step,
                   failed_rank ? failed_rank - 1 : 0);
}

/* One files[] entry: {"bytes", "sha256"} (or, in checkpoints written before checksums, a plain
 * byte count). Checks the file's size and digest. */
static int verify_file(const char *ckpt_dir, const char *state_path, const cJSON *f, int hashed, char *err) {
    char fp[4800];
    if (!f->string[0] || f->string[0] == '/' || strstr(f->string, ".."))
        return set_err(err, "%s: files: '%s' is not a path inside the checkpoint (corrupt checkpoint)", state_path, f->string);
    snprintf(fp, sizeof fp, "%s/%s", ckpt_dir, f->string);
    uint64_t want;
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(f, "sha256");
    if (hashed ? json_get_u64(f, "bytes", 0, JSON_MAX_EXACT, &want) || !cJSON_IsString(hex) || strlen(hex->valuestring) != 64
               : json_u64_in(f, 0, JSON_MAX_EXACT, &want))
        return set_err(err, "%s: files: entry '%s' is not %s (corrupt checkpoint)", state_path, f->string,
                       hashed ? "{\"bytes\": N, \"sha256\": HEX}" : "a byte count");
    long have = file_size(fp);
    if (have < 0)
        return set_err(err, "%s: missing (state.json lists it, %llu bytes; corrupt checkpoint); move %s away to resume "
                       "from the previous checkpoint", fp, (unsigned long long)want, ckpt_dir);
    if ((uint64_t)have != want)
        return set_err(err, "%s: size %ld bytes, expected %llu (corrupt checkpoint); move %s away to resume from the "
                       "previous checkpoint", fp, have, (unsigned long long)want, ckpt_dir);
    if (!hashed) return 0;
    char got[65];
    if (sha256_file_hex(fp, got, err)) return -1;
    if (strcmp(got, hex->valuestring))
        return set_err(err, "%s: sha256 %.12s..., state.json records %.12s... (corrupt checkpoint); move %s away to "
                       "resume from the previous checkpoint", fp, got, hex->valuestring, ckpt_dir);
    return 0;
}

/* The step of a directory named step_N (any parent path, trailing slashes allowed), or -1. */
static long dir_name_step(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    const char *base = strrchr(buf, '/');
    return checkpoint_name_step(base ? base + 1 : buf);
}

/* need_optimizer = 0 (the weights-only reading of an evaluation): the optimizer shards need not be
 * listed and listed ones are not checked; everything else exactly as for a resume. */
static int read_state(const char *ckpt_dir, TrainState *st, int need_optimizer, char *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/state.json", ckpt_dir);
    char *text = fs_read_all(path, NULL);
    if (!text) return set_err(err, "%s: missing or unreadable (corrupt checkpoint)", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return set_err(err, "%s: not valid JSON (corrupt checkpoint)", path);
    memset(st, 0, sizeof *st);
    int rc = 0;
    if (!cJSON_IsObject(j)) rc = set_err(err, "%s: not a JSON object (corrupt checkpoint)", path);
    if (!rc && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "complete")))
        rc = set_err(err, "%s: \"complete\" is not true (an unfinished or corrupt checkpoint)", path);
    /* the state's own checksum; its absence marks a checkpoint from before checksums */
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(j, "state_sha256");
    st->checksummed = self != NULL;
    if (!rc && self) {
        char digest[65];
        state_digest(j, digest);
        if (!cJSON_IsString(self) || strcmp(digest, self->valuestring))
            rc = set_err(err, "%s: state_sha256 does not match the contents (edited or corrupt checkpoint)", path);
    }
    StateRecord rec;
    memset(&rec, 0, sizeof rec);
    if (!rc) rc = state_fields_read(j, &rec, path, err);
    if (!rc) {
        *st = rec.st;
        st->checksummed = self != NULL;
        long named = dir_name_step(ckpt_dir);
        if (named >= 0 && named != st->step)
            rc = set_err(err, "%s: step %ld, but the directory is named for step %ld (corrupt checkpoint); move %s away "
                         "to resume from the previous checkpoint", path, st->step, named, ckpt_dir);
        else if (st->updates + st->skipped_steps != st->step)
            rc = set_err(err, "%s: updates %ld + skipped_steps %ld != step %ld (corrupt checkpoint)", path, st->updates,
                         st->skipped_steps, st->step);
    }
    if (!rc) {
        cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
        if (!rc && !cJSON_IsObject(files)) rc = set_err(err, "%s: no file list (corrupt checkpoint)", path);
        /* every part this state needs must be listed (and so checked) */
        for (int r = -2; r < (need_optimizer ? st->world_size : 0) && !rc; r++) {
            char rel[64];
            if (r == -2) snprintf(rel, sizeof rel, "model.safetensors");
            else if (r == -1) snprintf(rel, sizeof rel, "config.ini");
            else snprintf(rel, sizeof rel, "optimizer/rank_%05d.bin", r);
            if (!cJSON_GetObjectItemCaseSensitive(files, rel))
                rc = set_err(err, "%s: files: '%s' is not listed (corrupt checkpoint)", path, rel);
        }
        for (cJSON *f = files ? files->child : NULL; f && !rc; f = f->next)
            if (need_optimizer || !f->string || strncmp(f->string, "optimizer/", 10))
                rc = verify_file(ckpt_dir, path, f, st->checksummed, err);
    }
    cJSON_Delete(j);
    return rc;
}

int checkpoint_read_state(const char *ckpt_dir, TrainState *st, char *err) { return read_state(ckpt_dir, st, 1, err); }

int checkpoint_read_state_weights(const char *ckpt_dir, TrainState *st, char *err) {
    return read_state(ckpt_dir, st, 0, err);
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
    if (!host) return set_err(err, "%s: out of memory for %zu weights", ckpt_dir, tt->n_floats);
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt_dir);
    if (safetensors_read(path, tt, host, err)) { free(host); return -1; }
    model_upload_params(m, host);
    free(host);
    if (!o) return 0;
    /* optimizer: gather [o->lo, o->hi) from the checkpoint's shards, whatever their world size */
    float *mv = calloc(2 * o->shard, sizeof(float));
    if (!mv) return set_err(err, "%s: out of memory for the optimizer state", ckpt_dir);
    if (st->world_size < 1) { free(mv); return set_err(err, "%s: world_size %d, expected >= 1", ckpt_dir, st->world_size); }
    uint64_t expect_lo = 0;                /* the shards tile [0, n) in rank order */
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
        uint32_t u32[4];
        memcpy(u64, hdr + 24, 24);
        memcpy(u32, hdr + 8, 16);
        uint64_t lo = u64[0], count = u64[1];
        long fsize = file_size(path);
        const char *bad = u32[0] != 1 ? "version, expected 1"
                        : u32[1] != (uint32_t)r ? "rank, expected the file's own"
                        : u32[2] != (uint32_t)st->world_size ? "world size, expected state.json's world_size"
                        : lo != expect_lo ? "lo, expected the end of the previous rank's range"
                        : count > ((uint64_t)1 << 40) || fsize < 0 || (uint64_t)fsize != OPT_HEADER_BYTES + 8 * count
                          ? "count, expected (file size - 48) / 8" : NULL;
        if (bad) {
            fclose(f);
            free(mv);
            return set_err(err, "%s@8: bad optimizer shard header: %s", path, bad);
        }
        expect_lo = lo + count;
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
    if (expect_lo < tt->n_floats) {
        free(mv);
        return set_err(err, "%s/optimizer: the shards cover %llu of %zu floats (corrupt checkpoint)", ckpt_dir,
                       (unsigned long long)expect_lo, tt->n_floats);
    }
    o->be->upload(o->be->ctx, o->m, mv, sizeof(float) * o->shard);
    o->be->upload(o->be->ctx, o->v, mv + o->shard, sizeof(float) * o->shard);
    o->updates = st->updates;
    free(mv);
    return 0;
}

int checkpoint_working_dir(const char *ckpt_dir, char *out, size_t len) {
    char path[4600];
    out[0] = 0;
    snprintf(path, sizeof path, "%s/state.json", ckpt_dir);
    char *text = fs_read_all(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *w = j ? cJSON_GetObjectItem(j, "working_dir") : NULL;
    int found = cJSON_IsString(w) && w->valuestring[0];
    if (found) snprintf(out, len, "%s", w->valuestring);
    cJSON_Delete(j);
    return found;
}
