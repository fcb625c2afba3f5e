/* Run configuration: the INI sections [model] [data] [train] [eval] [checkpoint] [run].
 * The [model] section's struct and words are the model's own (model/model_config.h); this
 * file adds the run's sections and the one key table of all of them.
 *
 * Parsed with inih (trainer/run_config.c); `section.key=value` command-line overrides win over the
 * file. Every key has a default (the [model] defaults are the Qwen3-0.6B shape and the
 * variant defaults of docs/spec.md §2), a help line (`./train --help`), and validation that
 * names the file, line and key of a bad value. config_keys() exposes the table. */
#ifndef PHASELAB_RUN_CONFIG_H
#define PHASELAB_RUN_CONFIG_H
#include <stdint.h>
#include <stddef.h>
#include "model/model_config.h"   /* ModelConfig ([model]) and the variant words */
#include "data/targets.h"         /* LOSS_TARGETS_* (data.loss_targets) */


typedef struct {
    char train[1024];        /* glob of training shards (stage 0) */
    char stages[4096];       /* later stages "STEP:GLOB[@T], ..." (data/train_stages.h); "" = none */
    int train_seq_len;       /* data.train's (stage 0's) sequence length; 0 = seq_len */
    char val[1024];          /* glob of validation shards */
    int seq_len;             /* T */
    char tokenizer[1024];    /* tokenizer.json of ./tokenize shards ("" = look next to them) */
    int loss_targets;        /* LOSS_TARGETS_*: which next-token targets the loss counts */
} DataConfig;

typedef struct {
    long steps;
    long batch_tokens;       /* tokens per optimizer step (all ranks together) */
    int micro_batch;         /* sequences per forward pass per rank */
    double lr, min_lr;
    long warmup_steps;
    double weight_decay, grad_clip;
    double beta1, beta2, eps;
    uint64_t seed;
    int max_bad_steps;       /* consecutive NaN/Inf steps before the run stops */
    double gate_coverage;    /* lambda of the gate-coverage penalty (docs/spec.md §2b); 0 = off */
    double indexer_weight;   /* weight of the lightning indexer's KL term (docs/spec.md §5.4) */
    long indexer_warmup;     /* steps of dense csa attention before the top-k selection starts */
    int phase_jitter;        /* per-sequence grid shifts in training (docs/spec.md §6.2) */
    double boundary_ratio;   /* lambda_r of the boundary ratio loss (docs/spec.md §6.5; model.boundaries = learned) */
    int resume_schedule;     /* RESUME_SCHEDULE_*: a resume with another train.steps (trainer/trainer.c) */
} TrainConfig;

typedef struct {
    long every;              /* steps between evaluations; 0 = only at the end */
    long val_tokens;
    int residues;            /* P */
    char probe[1024];        /* probe-set file, "" = none */
} EvalConfig;

typedef struct {
    long every;              /* steps between checkpoints; 0 = only at the end */
    int keep;
} CheckpointConfig;

typedef struct {
    char name[256];
    char dir[1024];
    char device[16];         /* auto | cpu | cuda */
    int threads;             /* 0 = every core of the CPU affinity mask */
    long log_every;
    int deterministic;       /* bitwise reruns requested (Backend.set_deterministic) */
} RunConfig;

typedef struct {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    EvalConfig eval;
    CheckpointConfig checkpoint;
    RunConfig run;
    char source[1024];       /* path of the INI file it came from ("" = defaults only) */
} Config;

/* One key of the table: where it lives, its default, what it means. */
typedef struct {
    const char *section, *key;
    const char *def;         /* default value as written in an INI */
    const char *help;
} ConfigKeyInfo;

/* All keys, in --help order; *n receives their count. */
const ConfigKeyInfo *config_keys(int *n);

/* Fills cfg with every default. */
void config_defaults(Config *cfg);

/* Loads path (may be NULL: defaults only), then applies overrides "section.key=value".
 * Validates everything; on error returns non-zero with "FILE:LINE: [section] key: ..." in err. */
int config_load(Config *cfg, const char *path, int n_overrides, char **overrides, char *err);

/* Writes the resolved config as an INI (every key, including defaults), crash-safely
 * (fs_write_atomic, common/fsutil.h). */
int config_write(const Config *cfg, const char *path, char *err);
/* Same, into a malloc'd string. */
char *config_to_string(const Config *cfg);
/* The keys of section (NULL: every section) whose values differ between was and now, as
 * "section.key was -> now" joined by ", " into out (truncated to len); returns their count. */
int config_diff(const Config *was, const Config *now, const char *section, char *out, size_t len);

/* The words of data.loss_targets, indexed by LOSS_TARGETS_*. */
extern const char *const config_loss_targets_names[];/* LOSS_TARGETS_* */
/* train.resume_schedule: what a resume does when train.steps differs from the total steps the
 * checkpoint's learning-rate schedule was computed with. The words, indexed by the value. */
enum { RESUME_SCHEDULE_REFUSE = 0, RESUME_SCHEDULE_KEEP = 1, RESUME_SCHEDULE_STRETCH = 2 };
extern const char *const config_resume_schedule_names[];


#endif
