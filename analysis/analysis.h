/* The causal analyses of a checkpoint (docs/spec.md §4), driven from ./train --eval:
 *
 *   ./train --eval CKPT --probe FILE --gate-cycle DELTA|all [--layers L1,L2|KIND] [--out FILE]
 *   ./train --eval CKPT --probe FILE --knockout L:H|KIND:all|KIND:H|all [--calib FILE] [--out FILE]
 *   ./train --eval CKPT --probe FILE --indexer-stats [--out FILE]
 *   ./train --eval CKPT --filler-sweep SPEC_FILE [--out FILE]
 *
 * Each prints its table and appends one group to the analysis file (default CKPT/analysis.h5,
 * layout in analysis/analysis_h5.h). Bad input (a flag the checkpoint cannot take, a probe or
 * sweep file that does not fit the model's vocabulary or T, a probe, calibration set,
 * validation set or sweep tokenizer made with another tokenizer than the checkpoint's, a
 * calibration set of another layout, residue count or prompt length than the probe, or equal to
 * the evaluated set, a probe whose residues the stride does not divide for --gate-cycle) gives
 * one line naming the files or flag and both values, exit 2, before anything is computed, and
 * writes nothing. CKPT may be weights only (trainer/ckpt_source.h); relative data paths of its
 * config resolve against the run's directory, as for ./train --eval. */
#ifndef PHASELAB_ANALYSIS_H
#define PHASELAB_ANALYSIS_H
#include "trainer/probe_eval.h"
#include "trainer/evaluate.h"
#include "trainer/kind_fold.h"

/* 1 when argv (the arguments after --eval) asks for an analysis flag handled here. */
int analysis_requested(int argc, char **argv);
/* Runs it; argv[0] = CKPT. Returns the exit status. */
int analysis_main(int argc, char **argv);

/* Stores a probe evaluation (lookup or needle) of the set ps (loaded from probe_path) as a new
 * /probe_NNN group of path, with its provenance; decode: 1 when it was scored through the
 * incremental KV cache (--decode). Used by plain ./train --eval. val (NULL: none): the validation
 * loss of the same --eval (data.val = val_glob), stored in the same group: axes val_residue,
 * val_phase; val_loss_by_residue, val_loss_by_residue_errors (bootstrap standard errors),
 * val_tokens_by_residue, the same by phase; n, B, seed, F, df and p as val_* attributes
 * (docs/spec.md §4.8). kf [nkf] (trainer/kind_fold.h; nkf 0: none): the per-kind phase folds of a
 * layer schedule, stored as kind_<name>_{correct, total, acc} [2, S_k] on axis phase_<name>,
 * kind_<name>_test [2, 3] (chi2, df, p) and the attributes kind_<name>_{stride, grid_offset,
 * layers, first_layer}, kinds (the names, comma-separated). chunk (NULL: none): the fold by chunk
 * phase of learned boundaries (docs/spec.md §6.5, trainer/chunk_phase.h, finalised), stored as
 * chunk_{correct, total, acc} [2, L, W + 1] on axes protocol, layer, chunk_phase (W: unpooled) and
 * chunk_test [2, L, 3] (chi2, df, p across the pooled phases 0..W-1). Returns 0, or -1 with err. */
int analysis_store_probe(const char *path, const char *ckpt, long step, const char *overrides, const char *probe_path,
                         const ProbeSet *ps, int decode, const ProbeResult *pr, const char *val_glob, const EvalResult *val, const KindFold *kf,
                         int nkf, const ChunkPhaseCounts *chunk, char *err);

/* Stores the validation loss of a plain ./train --eval without a probe (evaluate_validation of the
 * data.val glob val_glob) as a new /val_NNN group, the same datasets and attributes as the val part
 * of a probe group (above; signal val_loss_by_residue). Returns 0, or -1 with err. */
int analysis_store_val(const char *path, const char *ckpt, long step, const char *overrides, const char *val_glob,
                       const EvalResult *r, char *err);
#endif
