/* The training data of a run in stages (a curriculum): data.train from step 0, then each
 * stage of data.stages from its first step on.
 *
 *   data.stages = STEP:GLOB, STEP:GLOB@T, ...    (empty: one stage, data.train, all run long)
 *
 * Stage 0 is data.train and starts at step 0; stage j >= 1 starts at step first_j, with
 * 0 < first_1 < first_2 < ... (strictly increasing), and stage j covers the steps
 * [first_j, first_{j+1}). A GLOB is everything after the first ':' of its entry, without the
 * spaces around it; entries are separated by ',' (a glob cannot contain one).
 *
 * Sequence length of a stage (a length curriculum). A glob may end in "@T" (digits only after
 * the last '@'): that stage reads windows of T+1 tokens and trains at length T, 1 <= T <=
 * data.seq_len (the model's context, which the arena is sized for); without it, data.seq_len.
 * Stage 0's is data.train_seq_len (0 = data.seq_len). The rows of a step stay Bg =
 * batch_tokens / data.seq_len at every stage, so a stage at T < seq_len takes Bg*T tokens a
 * step, and its loss (the step's mean over its Bg*T positions: trainer.c) weighs each position
 * as a full-length step does. Its corpus should be cut at T (./train --make-synthetic
 * --seq-len T): windows are cut every T tokens of the shards.
 *
 * Steps count optimizer updates done: a stage from STEP is read by the update the log calls
 * step STEP+1 and on; a checkpoint at step STEP is the last one written before it.
 *
 * Which window a sample reads. The trainer numbers the samples of the run g = step * Bg + i
 * (Bg sequences a step, i < Bg: data/loader.h). At a step of stage j, sample g is read as
 * sample number g - first_j * Bg of stage j's loader, shuffled by its own keyed permutation
 * from its own epoch 0, keyed by train_stage_seed(train.seed, j) (stage 0: train.seed itself,
 * so a run without stages reads what it always did; a later stage over the same files as an
 * earlier one reads them in another order). That is a function of (step, i, seed) alone, so a
 * resumed run reads exactly what an uninterrupted one would, across stage boundaries too.
 *
 * Fingerprint at step s (the resume check; stored with every checkpoint): over the stages
 * begun before s, i.e. stage 0 and every j with first_j < s. With stage 0 alone, exactly the
 * data.train loader's fingerprint (so runs from before stages existed, and staged runs before
 * their first boundary, resume as ever); else sha256 of "FIRST_STEP\0LOADER_FINGERPRINT\0" per
 * begun stage, stage 0 first, where FIRST_STEP is written "FIRST_STEP@T" for a stage whose T is
 * not data.seq_len (so that too is a change of data read, and a run with every stage at
 * data.seq_len keeps the fingerprint it had before per-stage lengths existed). So a resume is refused when data already read would change (a
 * begun stage's files or boundary), and allowed when only stages not yet begun change: a run
 * can be continued with a new stage after its last checkpoint.
 *
 * Every stage must carry the same tokenizer fingerprint as data.train. */
#ifndef PHASELAB_TRAIN_STAGES_H
#define PHASELAB_TRAIN_STAGES_H
#include <stdint.h>
#include <stdio.h>
#include "data/loader.h"

#define TRAIN_STAGES_MAX 16            /* data.train plus at most 15 stages */

typedef struct {
    long first_step;
    char glob[1024];
    int seq_len;                       /* the "@T" of the entry; 0 = data.seq_len */
} TrainStageSpec;

/* Parses data.stages into out[0 .. *n-1] (stage 1 on; data.train, stage 0, is not in spec).
 * On a bad spec returns non-zero with what is wrong and what was expected in why (no file
 * name: the config loader adds it). An empty spec gives *n = 0. */
int train_stages_parse(const char *spec, TrainStageSpec out[TRAIN_STAGES_MAX - 1], int *n, char *why);

/* Prints which steps (numbered as the log does, from 1) read which glob at which length (when
 * not T = data.seq_len; T0 = data.train_seq_len), and the stages that train.steps does not
 * reach, for --dry-run; a spec that does not parse prints nothing (the config loader rejects it). */
void train_stages_print(FILE *f, const char *train_glob, int T0, int T, const char *spec, long steps);

typedef struct TrainData TrainData;

/* Opens data.train and every stage of stages_spec (train_loader_open each at its length, then
 * the tokenizer check). samples_per_step is Bg, the sequences of one optimizer step, all ranks
 * together; T is data.seq_len, T0 data.train_seq_len (0 = T). A stage longer than T is an error. */
int train_data_open(TrainData **D, const char *train_glob, const char *stages_spec, long samples_per_step,
                    int T, int T0, uint32_t vocab_limit, uint64_t seed, char *err);
int train_data_n_stages(const TrainData *D);                       /* >= 1 */
/* Stage j (0 <= j < n_stages): its loader, glob and first step. */
const TrainLoader *train_data_stage(const TrainData *D, int j, const char **glob, long *first_step);
/* Stage j's sequence length (its "@T", data.train_seq_len for stage 0, else data.seq_len). */
int train_data_stage_seq_len(const TrainData *D, int j);
/* The stage that step belongs to. */
int train_data_stage_at(const TrainData *D, long step);
/* Run sample g of step `step` (g in [step * Bg, (step + 1) * Bg)) into out [T_j+1], T_j the
 * step's stage's length; *window (may be NULL) receives the window it read, an index of that
 * stage's window list. */
int train_data_sample(const TrainData *D, long step, uint64_t g, int32_t *out, uint64_t *window, char *err);
const char *train_data_tokenizer(const TrainData *D);
/* The permutation key of stage j: seed for j = 0, seed xor (j * 0x9e3779b97f4a7c15) after. */
uint64_t train_stage_seed(uint64_t seed, int stage);
/* The fingerprint of the data read before step (rule above). */
void train_data_fingerprint(const TrainData *D, long step, char out[LOADER_FINGERPRINT_LEN + 1]);
void train_data_close(TrainData *D);
#endif
