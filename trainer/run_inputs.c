/* The start-up checks of a run's inputs (the list and the exit-status rule in trainer/run_inputs.h). */
#include "trainer/run_inputs.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/errors.h"
#include "data/shard.h"
#include "data/targets.h"
#include "trainer/hf_export.h"

/* An error of a lower layer that names no file ("[data] stages: ...") gets the config's name. */
static int with_config_name(const Config *cfg, char *err) {
    if (err[0] == '[' && cfg->source[0]) {
        char inner[ERR_LEN];
        snprintf(inner, sizeof inner, "%s", err);
        set_err(err, "%s: %s", cfg->source, inner);
    }
    return -2;
}

/* An input the config names that cannot be opened: the config file and the key come first, and a
 * relative path says where it was looked for (the current directory), before the lower layer's
 * message (e.g. "CONFIG: data.train = GLOB (relative to /home/me): GLOB: no file matches ..."). */
static int input_error(const Config *cfg, const char *key, const char *value, char *err) {
    if (err[0] == '[') return with_config_name(cfg, err);   /* names the section already */
    char inner[ERR_LEN], cwd[1024] = "", where[1100] = "";
    snprintf(inner, sizeof inner, "%s", err);
    if (value[0] != '/' && getcwd(cwd, sizeof cwd)) snprintf(where, sizeof where, " (relative to %s)", cwd);
    set_err(err, "%s: %s = %s%s: %s", cfg->source[0] ? cfg->source : "the default config", key, value, where, inner);
    return -2;
}

/* Rule 4: every shard of glob records a vocabulary size (header bytes 16-19) of at most
 * model.vocab_size. The headers were validated when the data set was opened. */
static int check_header_vocab(const Config *cfg, const char *key, const char *pattern, char *err) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;      /* the data set's own open reported it */
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        Shard s;
        if (shard_open(&s, g.gl_pathv[i], err)) { rc = -2; break; }
        if (s.vocab_size > (uint32_t)cfg->model.vocab_size) {
            rc = -2;
            set_err(err, "%s@16: vocabulary size %u recorded by the tokenizer that wrote it (%s = %s, fingerprint "
                    "'%s'), but model.vocab_size = %d: its ids may reach %u; expected model.vocab_size >= %u",
                    s.path, s.vocab_size, key, pattern, s.fingerprint, cfg->model.vocab_size, s.vocab_size - 1,
                    s.vocab_size);
        }
        shard_close(&s);
    }
    globfree(&g);
    return rc;
}

int run_inputs_open(RunInputs *in, const Config *cfg, int world, char *err) {
    memset(in, 0, sizeof *in);
    const int T = cfg->data.seq_len;
    const uint32_t V = (uint32_t)cfg->model.vocab_size;
    long Bg = cfg->train.batch_tokens / T;
    const int rc = -2;
    if (world < 1 || Bg % world)
        return set_err(err, "%s: [train] batch_tokens: %ld sequences per step do not split evenly over %d ranks; use a "
                       "multiple of %ld tokens", cfg->source, Bg, world, (long)T * world), -2;
    if (!cfg->data.train[0])
        return set_err(err, "%s: [data] train: no training data given (a glob of token shards is expected)",
                       cfg->source), -2;
    if (train_data_open(&in->data, cfg->data.train, cfg->data.stages, Bg, T, cfg->data.train_seq_len, V,
                        cfg->train.seed, err))
        return input_error(cfg, "data.train", cfg->data.train, err);
    const char *fp = train_data_tokenizer(in->data);
    for (int j = 0; j < train_data_n_stages(in->data); j++) {
        const char *glob_j;
        train_data_stage(in->data, j, &glob_j, NULL);
        if (check_header_vocab(cfg, j ? "data.stages" : "data.train", glob_j, err)) goto fail;
        if (loss_targets_check(cfg->data.loss_targets, glob_j, fp, err)) goto fail;
    }
    if (hf_export_prepare(cfg, err)) goto fail;   /* the tokenizer checkpoints carry, before any work */
    if (cfg->data.val[0]) {
        if (val_set_open(&in->val, cfg->data.val, T, V, cfg->eval.val_tokens / T, err)) {
            input_error(cfg, "data.val", cfg->data.val, err);
            goto fail;
        }
        if (check_header_vocab(cfg, "data.val", cfg->data.val, err)) goto fail;
        const char *vfp = val_set_tokenizer(in->val);
        if (strcmp(vfp, fp)) {
            set_err(err, "%s: data.val = %s was made with tokenizer '%s', the training shards (%s) with '%s'; expected "
                    "validation shards of the same tokenizer", cfg->source, cfg->data.val, vfp, cfg->data.train, fp);
            goto fail;
        }
        if (loss_targets_check(cfg->data.loss_targets, cfg->data.val, vfp, err)) goto fail;
    }
    if (cfg->eval.probe[0]) {
        if (probe_set_load(&in->probe, cfg->eval.probe, V, T, err)) {
            input_error(cfg, "eval.probe", cfg->eval.probe, err);
            goto fail;
        }
        const char *pfp = probe_set_fingerprint(in->probe);
        if (strcmp(pfp, fp)) {
            set_err(err, "%s: eval.probe: made with tokenizer '%s', but the training shards (%s) have '%s'; expected a "
                    "probe set of the run's tokenizer (tools/make-probe --tokenizer with the shards' tokenizer.json, "
                    "or --synthetic for the synthetic corpus)", cfg->eval.probe, pfp, cfg->data.train, fp);
            goto fail;
        }
        if (probe_set_residues(in->probe) != cfg->eval.residues) {
            /* the rebuild is offered only when tools/make-probe can balance eval.residues in T tokens */
            const ProbeBuilder b = probe_set_builder(in->probe);
            const int K = (int)(b.key_tokens + b.value_tokens);
            char alt[160] = "";
            if (probe_builder_max_residues(b.layout, T, K) >= cfg->eval.residues)
                snprintf(alt, sizeof alt, ", or tools/make-probe --max-len %d --residues %d", T, cfg->eval.residues);
            set_err(err, "%s: eval.probe: %d residues, but eval.residues = %d (%s); expected the same count "
                    "(eval.residues=%d%s)", cfg->eval.probe,
                    probe_set_residues(in->probe), cfg->eval.residues, cfg->source[0] ? cfg->source : "default",
                    probe_set_residues(in->probe), alt);
            goto fail;
        }
    }
    return 0;
fail:
    run_inputs_close(in);
    return rc;
}

char *run_inputs_describe(const RunInputs *in, const Config *cfg) {
    size_t cap = 1024 + (size_t)train_data_n_stages(in->data) * 1400, used = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    const TrainLoader *l0 = train_data_stage(in->data, 0, NULL, NULL);
    used += (size_t)snprintf(out + used, cap - used,
                             "data: %llu training windows of %d+1 tokens in %d file(s); %ld validation windows; %s\n",
                             (unsigned long long)train_loader_n_windows(l0), train_data_stage_seq_len(in->data, 0),
                             train_loader_n_files(l0), in->val ? val_set_n_windows(in->val) : 0L,
                             in->probe ? "probe set loaded" : "no probe set");
    for (int j = 1; j < train_data_n_stages(in->data) && used < cap; j++) {
        const char *glob_j;
        long first;
        const TrainLoader *l = train_data_stage(in->data, j, &glob_j, &first);
        char note[96] = "";
        if (first >= cfg->train.steps)
            snprintf(note, sizeof note, " (warning: not reached with train.steps = %ld)", cfg->train.steps);
        used += (size_t)snprintf(out + used, cap - used,
                                 "data: stage %d (%ld:%s): steps %ld on read its %llu training windows of %d+1 tokens "
                                 "in %d file(s)%s\n", j, first, glob_j, first + 1,
                                 (unsigned long long)train_loader_n_windows(l), train_data_stage_seq_len(in->data, j),
                                 train_loader_n_files(l), note);
    }
    return out;
}

void run_inputs_close(RunInputs *in) {
    if (in->data) train_data_close(in->data);
    if (in->val) val_set_close(in->val);
    if (in->probe) probe_set_free(in->probe);
    memset(in, 0, sizeof *in);
}
