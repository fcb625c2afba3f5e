/* The run's metrics file (runs/NAME/metrics.h5): an HDF5 file written by rank 0 in SWMR
 * mode, so that h5py.File(path, 'r', swmr=True) can read it while training runs.
 *
 * Layout (rows = log or eval events; P = residues, L = layers, G = KV heads,
 * 2 = key/value branch, W = compressor window; every dataset is chunked with an unlimited
 * first dimension):
 *   /                 NX_class=NXroot, default=entry, creator=phaselab, file_name, file_time,
 *                     HDF5_Version, config (resolved config text), code_version
 *   /train/{step, tokens, loss, lr, grad_norm, tokens_per_sec, mfu}          each [n]
 *          (+ gate_coverage [n] with train.gate_coverage > 0: the penalty lambda * mean over the
 *          step's sequences, never part of loss; set by metrics_set_gate_coverage before the row)
 *          (+ boundary_ratio, boundary_rate [n] with model.boundaries = learned, docs/spec.md §6.5)
 *   /val/{step [n], loss [n], loss_by_residue [n,P]}
 *   /val_stats/{step, windows, loss_se, loss_by_residue [n,P], loss_se_by_residue [n,P],
 *          tokens_by_residue [n,P], F_residue, df1_residue, df2_residue, p_residue,
 *          loss_by_phase [n,S], loss_se_by_phase [n,S], tokens_by_phase [n,S], F_phase, df1_phase,
 *          df2_phase, p_phase}   (docs/spec.md §4.8; S = shape.phases; absent when phases = 0;
 *          created when a run resumes on a file without it)
 *   /probe/{step [n], acc_pp [n,P], acc_ip [n,P],
 *           mean_pp, worst_pp, best_pp, gap_pp, mean_ip, worst_ip, best_ip, gap_ip,
 *           chi2_pp, p_pp, chi2_phase_pp, p_phase_pp, chi2_ip, p_ip, chi2_phase_ip, p_phase_ip}  [n]
 *          (chi2/p: the phase-effect test of docs/spec.md §3.7, across residues and folded by phase)
 *   /gates/{step [n], eff_static [n,L,G,2], eff_window [n,L,G,2], profile [n,L,G,2,W]}
 *          (only when the model has compressed attention)
 *   /probe_chunk/{step [n], acc_pp [n,L,W+1], total_pp [n,L,W+1], p_pp [n,L], acc_ip, total_ip, p_ip}
 *          (learned chunk boundaries only, docs/spec.md §6.5: the probe by chunk phase of the key in
 *          each layer, bin W unpooled; trainer/chunk_phase.h)
 *   /boundaries/{step [n], positions, boundaries, boundary_rate, mean_prob, ratio_loss, mean_chunk_length,
 *          unpooled, forced_fraction (+ _lo, _hi), record_split (+ _n, _lo, _hi) [n,L], chunk_length_hist [n,L,W],
 *          class_rate (+ class_lo, class_hi) [n,L,5], class_chance [n,5]}   (learned chunk boundaries only,
 *          docs/spec.md §6.5 "Boundary statistics", over the validation windows; trainer/boundary_stats.h)
 *   /probe_kinds/{step [n], acc_pp_KIND [n,S_k], total_pp_KIND [n,S_k], p_pp_KIND [n], the same _ip}
 *          (a layer schedule only, docs/spec.md §5.5: the probe folded by each compressed kind's own
 *          phase (t_K - o_k) mod S_k, KIND = csa, hca, compressed; trainer/kind_fold.h)
 * These raw tables carry no NeXus class (a description attribute). In each `step` (int64) is a
 * dimension scale attached to dim 0 of every other dataset; the other dimensions carry labels
 * (residue, layer, kv_head, branch, offset) and the axis datasets of /entry as scales.
 *   /entry            NXentry: title ("phaselab run NAME"), program_name (@version),
 *                     start_time (ISO 8601 UTC), default=val_loss; one NXdata per plot, each
 *                     with signal, axes, AXIS_indices, a title (dataset and attribute):
 *     val_loss, train_loss, learning_rate, grad_norm, throughput, mfu          [step]
 *     probe_accuracy (mean_pp + worst/best as auxiliary signals), probe_accuracy_ip, probe_gap
 *     val_loss_by_residue, probe_pp_by_residue, probe_ip_by_residue            [step, residue]
 *     gate_profile [step, layer, kv_head, branch, window_offset], gate_eff_static,
 *     gate_eff_window [step, layer, kv_head, branch]                  (compressed models)
 *     val_loss_by_residue_se [step, residue], val_loss_by_phase [step, phase] (with SIGNAL_errors:
 *     the bootstrap standard errors), val_loss_homogeneity (p_residue + p_phase) [step]
 *   Signals and step are hard links to the raw datasets (the same objects: SWMR appends show
 *   there); residue/layer/kv_head/branch/window_offset are int32 0..n-1 axis datasets.
 * Datasets carry long_name with the units in parentheses ("training cross-entropy (nats)")
 * and, where meaningful, a units attribute. tokens is int64, /gates float32, the rest float64.
 *
 * Units: losses in nats; accuracies in percent (0..100); gap = best - worst in percentage
 * points; mean/worst/best are taken over the residues with a finite accuracy (NaN when none);
 * mfu is a fraction of peak (0..1); tokens_per_sec in tokens/s.
 *
 * Consistency for readers: an append extends and writes the data datasets of a group first
 * and its `step` dataset last, each followed by H5Dflush, so len(step) rows are always
 * complete in every dataset of the group. Steps are strictly increasing within a group; a
 * step that is not larger than the last one logged is an error (never logged twice).
 *
 * HDF5's own error printing is switched off inside these calls; failures come back as one
 * line in err (ERR_LEN bytes, common/errors.h) naming the file. */
#ifndef PHASELAB_TRAIN_METRICS_H
#define PHASELAB_TRAIN_METRICS_H
#include "trainer/loss_stats.h"
#include "trainer/chunk_phase.h"
#include "trainer/boundary_stats.h"

typedef struct Metrics Metrics;

#define METRICS_KINDS 5   /* N_KINDS (model/layer_kinds.h) = KIND_FOLD_MAX (trainer/kind_fold.h) */

typedef struct {
    int n_layers;   /* L */
    int n_kv_heads; /* G */
    int window;     /* W: offsets per compressed block (gate profile length) */
    int residues;   /* P: eval.residues */
    int has_gates;  /* the model has compressed attention: create and fill /gates */
    int has_gate_coverage; /* train.gate_coverage > 0: /train/gate_coverage exists (docs/spec.md §2b) */
    int has_indexer_kl;    /* a lightning indexer: /train/indexer_kl exists (docs/spec.md §5.4) */
    int phases;     /* S of the validation loss's fold by phase (probe_phase_fold); 0: no /val_stats */
    int has_boundaries;    /* model.boundaries = learned: /train/boundary_ratio and /train/boundary_rate exist (§6.5) */
    int chunk_window; /* W of learned chunk boundaries (docs/spec.md §6.5): /probe_chunk exists; 0: none */
    int kind_period[METRICS_KINDS]; /* per layer kind KIND_* of a schedule: the stride S_k of the probe's
                                       per-kind fold (kind_fold_periods), 0: no fold; any > 0: /probe_kinds */
} MetricsShape;

/* resume_step < 0: create a new file (replacing any). Otherwise open the existing file and
 * truncate every group to its rows with step <= resume_step (create the file when missing),
 * so no step is ever logged twice. The root attributes config and code_version are
 * (re)written either way. A file left by a killed writer (SWMR flags still set) is reopened.
 * Every row of an existing file is read first, with one metadata read attempt (a damaged block
 * fails at once, never HDF5's SWMR retry sleep): such a file is refused, err naming it and
 * saying how to move it aside (the run then starts a new one; checkpoints are never touched).
 * Returns NULL and fills err on failure. */
Metrics *metrics_open(const char *path, const MetricsShape *shape, const char *config_text,
                      const char *code_version, long resume_step, char *err);

int metrics_log_train(Metrics *m, long step, long tokens, double loss, double lr,
                      double grad_norm, double tokens_per_sec, double mfu, char *err);

/* The /train/gate_coverage value of the next metrics_log_train row (ignored without the column). */
void metrics_set_gate_coverage(Metrics *m, double penalty);
/* The next /train row's indexer_kl: mean KL_t over the step's queries and indexer layers (§5.4). */
void metrics_set_indexer_kl(Metrics *m, double kl);
/* The next /train row's boundary_ratio (the mean R_l, without lambda_r) and boundary_rate (the mean F_l) of
 * learned chunk boundaries (docs/spec.md §6.5; ignored without the columns). */
void metrics_set_boundaries(Metrics *m, double ratio, double rate);

/* loss_by_residue: [P] */
int metrics_log_val(Metrics *m, long step, double loss, const double *loss_by_residue,
                    char *err);

/* One /val_stats row: by_residue (K = P) and by_phase (K = shape.phases) of evaluate_validation. */
int metrics_log_val_stats(Metrics *m, long step, const LossStats *by_residue, const LossStats *by_phase, char *err);

/* acc_pp, acc_ip: [P] in percent (0..100); either may be NULL -> a NaN row for that
 * protocol (its accuracies and its mean/worst/best/gap). */
int metrics_log_probe(Metrics *m, long step, const double *acc_pp, const double *acc_ip,
                      char *err);

/* The same with the phase-effect test: phase_test [8] = chi2_pp, p_pp, chi2_phase_pp,
 * p_phase_pp, chi2_ip, p_ip, chi2_phase_ip, p_phase_ip (NULL: NaN; metrics_log_probe passes NULL). */
int metrics_log_probe_tested(Metrics *m, long step, const double *acc_pp, const double *acc_ip,
                             const double *phase_test, char *err);

/* eff_static, eff_window: [L,G,2]; profile: [L,G,2,W]. Error when !shape.has_gates. */
/* One row of /probe_chunk from finalised counts (chunk_phase_finalize) of 2 protocols x n_layers x
 * (chunk_window + 1) bins; an error when the run has no learned boundaries or the shape differs. */
int metrics_log_probe_chunk(Metrics *m, long step, const ChunkPhaseCounts *c, char *err);

/* One row of /boundaries from the finalised statistics of an evaluation (the run's n_layers and
 * chunk_window must match). */
int metrics_log_boundaries(Metrics *m, long step, const BoundaryStats *b, char *err);

/* One row of /probe_kinds from the per-kind folds of this evaluation (probe_kind_folds: the kinds
 * with kind_period > 0, each with its S_k phases). */
struct KindFoldRow { int kind; int S; const long *correct[2], *total[2]; double p[2]; };
int metrics_log_probe_kinds(Metrics *m, long step, const struct KindFoldRow *rows, int n, char *err);

int metrics_log_gates(Metrics *m, long step, const float *eff_static, const float *eff_window,
                      const float *profile, char *err);

/* Rows logged so far in a group ("train", "val", "probe", "gates"); -1 for an unknown or
 * absent group. Lets the training loop and tests see where a resumed file stands. */
long metrics_rows(const Metrics *m, const char *group);

/* Flushes and closes the file; NULL is a no-op. Returns 0, or -1 when HDF5 failed to close. */
int metrics_close(Metrics *m);

#endif
