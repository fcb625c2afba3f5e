/* Checkpoints: RUN/checkpoints/step_NNNNNNNN/ holding
 *   model.safetensors         fp32 master weights, HuggingFace Qwen3 names (+ docs/spec.md compressor names)
 *   config.json               HuggingFace config (Qwen3ForCausalLM for plain full attention)
 *   config.ini                the resolved phaselab config of the run
 *   optimizer/rank_RRRRR.bin  each rank's AdamW shard: magic "PHLOPTv1", u32 version 1, u32 rank,
 *                             u32 world, u32 0, u64 lo, u64 count, u64 n_floats, then m[count], v[count]
 *                             (fp32) for the flat-buffer range [lo, lo + count)
 *   state.json                step, tokens, samples consumed (the loader position), AdamW updates,
 *                             skipped steps, world size, seed, data fingerprint, working_dir (the
 *                             directory the run's relative paths are relative to), schedule_steps
 *                             (the total steps of the run's learning-rate schedule), "files": NAME ->
 *                             {"bytes", "sha256"} for every other file, "complete": true, and
 *                             "state_sha256": sha256 of the object printed unformatted (cJSON)
 *                             without that member (written last)
 * Every rank writes its part into checkpoints/.tmp_step_NNNNNNNN/; after a barrier rank 0
 * writes state.json, fsyncs and renames the directory to its final name: a directory named
 * step_* is complete by construction, and a crash leaves only a .tmp_* that is ignored and
 * removed. The newest `keep` checkpoints are kept; a save removes only checkpoints older than
 * the one it wrote and never replaces an existing directory. An older checkpoint holding
 * anything a save does not write (analysis.h5 and the other results of ./train --eval, --score,
 * an analysis writer's lock) is kept too, with one note on stderr: results are never deleted
 * with the checkpoint they came from. Loading re-shards the optimizer
 * state for the current world size (the files hold flat-buffer ranges).
 * Verification on load (checkpoint_read_state): state_sha256, "complete", the counters
 * (integers, world_size >= 1, updates + skipped_steps = step), the step against a step_N
 * directory name, every needed file listed, each file's size and sha256; checkpoint_load then
 * checks the safetensors header (model/safetensors.h) and each optimizer shard header (version,
 * rank, world, ranges tiling the buffer, file size). Checkpoints written before checksums (no
 * state_sha256, byte counts only) are accepted with sizes checked and checksummed = 0, for the
 * caller to warn about. */
#ifndef PHASELAB_CHECKPOINT_H
#define PHASELAB_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/run_config.h"
#include "trainer/optimizer.h"

struct Model;
struct Comm;

typedef struct {
    long step;              /* optimizer steps completed */
    long tokens;            /* training tokens consumed */
    uint64_t samples;       /* training windows consumed (loader position) */
    long updates;           /* AdamW updates applied */
    long skipped_steps;     /* steps skipped for a non-finite loss or gradient norm */
    int world_size;
    uint64_t seed;
    char data_fingerprint[65];
    long schedule_steps;    /* the total steps the learning-rate schedule is computed with (0: not recorded,
                             * a checkpoint from before the field; trainer.c then takes its config.ini's train.steps) */
    int checksummed;        /* read_state: 1 when sha256 sums were verified, 0 for an old checkpoint */
} TrainState;

/* Collective: every rank calls it. */
int checkpoint_save(const char *run_dir, const TrainState *st, const Config *cfg, struct Model *m,
                    Optimizer *optimizer, struct Comm *comm, const char *code_version, int keep, char *err);
/* Finds the newest checkpoint. Returns 1 (dir_out, st filled), 0 when there is none, -1 when
 * the newest one is corrupt (err names the file). Stale .tmp_* directories are ignored. */
int checkpoint_latest(const char *run_dir, char *dir_out, size_t dir_len, TrainState *st, char *err);
/* Loads the weights (and, when optimizer is not NULL, this rank's optimizer shard,
 * re-sharded from the checkpoint's world size). */
int checkpoint_load(const char *ckpt_dir, struct Model *m, Optimizer *optimizer, const TrainState *st, char *err);
int checkpoint_read_state(const char *ckpt_dir, TrainState *st, char *err);
/* The same for reading the weights only (evaluation, analyses, generation): the optimizer shards
 * are neither required nor checked; state.json, model.safetensors and the other listed files are
 * verified as above. */
int checkpoint_read_state_weights(const char *ckpt_dir, TrainState *st, char *err);
/* The step of a checkpoint directory name "step_%08ld", or -1 for any other name. */
long checkpoint_name_step(const char *name);
/* The working directory recorded in state.json (what config.ini's relative paths are relative
 * to); returns 1 and fills out, or 0 when the checkpoint records none (older checkpoints). */
int checkpoint_working_dir(const char *ckpt_dir, char *out, size_t len);
/* Removes stale .tmp_* directories (rank 0, at start-up). */
void checkpoint_clean_tmp(const char *run_dir);
#endif
