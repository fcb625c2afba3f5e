/* metrics.h5 writer (layout and units: trainer/metrics.h).
 *
 * How the file is built (HDF5 1.10 SWMR rules: no object or attribute may be created and no
 * dataset may shrink once SWMR writing has started):
 *   1. create the file (H5F_ACC_TRUNC), or on resume open it read-write and shrink every
 *      dataset of each group to the rows whose step is <= resume_step, creating any group
 *      that is missing; both with libver bounds LATEST (superblock v3, needed by SWMR);
 *   2. (re)write the root attributes; each new group gets its datasets (chunked, first
 *      dimension unlimited, NaN / -1 fill), the `step` dimension scale attached to dim 0 of
 *      every other dataset, dimension labels, NeXus and long_name/units attributes;
 *   3. close every object, H5Fstart_swmr_write, reopen the datasets and keep them open;
 *   4. each append: per dataset H5Dset_extent(rows + 1) + write the new row + H5Dflush, the
 *      group's `step` dataset last, so a reader that trusts len(step) never sees half a row.
 * A file left by a killed writer still carries the SWMR "open for writing" superblock flags;
 * reopening it for resume retries with the "clear_status_flags" file-access property (what
 * the h5clear tool does) and moves the end-of-allocation to the end of the file
 * (H5Fincrement_filesize, h5clear --increment=0), as the killed writer never stored it.
 * Damaged files never hang: SWMR writing is entered by closing the file and reopening it with
 * H5F_ACC_SWMR_WRITE and ONE metadata read attempt (H5Pset_metadata_read_attempts), because
 * H5Fstart_swmr_write sets HDF5's SWMR default of 100 attempts with a doubling sleep between
 * them (1 ns, 2 ns, ... : centuries), which a block with a bad checksum never passes: a
 * resume slept there for ever, deaf to SIGTERM. A writer never needs a retry (retries are for
 * readers racing it). On resume every dataset of the file is also read in full before
 * anything is appended, so a damaged block is reported at start-up with what to do
 * (RESUME_DAMAGED_HINT); the checkpoints are never touched. */
#include "trainer/metrics.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "common/errors.h"
#include "model/layer_kinds.h"

#define NO_HID ((hid_t)-1)

enum { MAX_RANK = 5, MAX_COLUMNS = 24, N_TABLES = 8, CHUNK_BYTES = 65536, MAX_CHUNK_ROWS = 1024 };
enum { TABLE_TRAIN, TABLE_VAL, TABLE_PROBE, TABLE_GATES, TABLE_VAL_STATS, TABLE_PROBE_CHUNK, TABLE_PROBE_KINDS, TABLE_BOUNDARIES };

typedef enum { KIND_INT64, KIND_FLOAT64, KIND_FLOAT32 } ColumnKind;

/* One dataset of a group: a row is dims[1..rank-1] values of its kind. */
typedef struct {
    const char *name;
    ColumnKind kind;
    int rank;                     /* including the row dimension */
    hsize_t dims[MAX_RANK];       /* dims[0] unused (rows grow) */
    const char *labels[MAX_RANK]; /* dimension labels, labels[0] = "step" */
    const char *long_name;
    const char *units;            /* NULL: dimensionless, no attribute */
    hid_t id;                     /* open while the file is in SWMR mode */
} Column;

/* One group: columns[0] is `step`, the dimension scale of the others. */
typedef struct {
    const char *name;
    const char *description;
    int enabled;        /* this run writes the group */
    int n_columns;
    Column columns[MAX_COLUMNS];
    hsize_t n_rows;
    long last_step; /* valid when n_rows > 0 */
} Table;

struct Metrics {
    char *path;
    MetricsShape shape;
    hid_t file;
    Table tables[N_TABLES];
    double gate_coverage;   /* pending /train/gate_coverage value */
    double indexer_kl;      /* pending /train/indexer_kl value */
    double boundary_ratio, boundary_rate;   /* pending /train/boundary_ratio and boundary_rate values */
};

/* ---- error handling ---------------------------------------------------------------------- */

typedef struct {
    H5E_auto2_t func;
    void *data;
} SavedErrorHandler;

/* Silences HDF5's automatic error-stack printing for the duration of one API call. */
static SavedErrorHandler quiet_hdf5(void) {
    SavedErrorHandler saved = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &saved.func, &saved.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return saved;
}

static void restore_hdf5(SavedErrorHandler saved) { H5Eset_auto2(H5E_DEFAULT, saved.func, saved.data); }

static herr_t keep_innermost_error(unsigned n, const H5E_error2_t *e, void *out) {
    if (n == 0 && e->desc) snprintf((char *)out, 256, "%s", e->desc);
    return 0;
}

/* Fills err with "PATH: message: strerror" when the innermost HDF5 error is a failed system
 * call (its text carries "errno = N", e.g. a full disk; or errno is ENOSPC/EDQUOT), else
 * "PATH: message (HDF5: error)",
 * always on one line; returns -1. */
static int vfail(const char *path, char *err, int *system_error, const char *fmt, va_list ap) {
    int call_errno = errno;                   /* a write that just failed (HDF5 does not always say) */
    char message[ERR_LEN / 2], detail[256] = "";
    vsnprintf(message, sizeof message, fmt, ap);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost_error, detail);
    const char *e = strstr(detail, "errno = ");
    int sys_errno = e ? atoi(e + 8) : call_errno == ENOSPC || call_errno == EDQUOT ? call_errno : 0;
    if (system_error) *system_error = sys_errno > 0;
    if (sys_errno > 0) return set_err(err, "%s: %s: %s", path, message, strerror(sys_errno));
    for (char *p = detail; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    if (detail[0])
        return set_err(err, "%s: %s (HDF5: %s)", path, message, detail);
    return set_err(err, "%s: %s", path, message);
}

static int fail(const char *path, char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(path, err, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* What to do about a metrics file that cannot be read back on resume: the run refuses (exit 1)
 * and leaves the file as it is; the checkpoints are separate files, never touched here. */
#define RESUME_DAMAGED_HINT                                                                       \
    "; the metrics file is damaged or not phaselab's. The checkpoints are intact: move the file " \
    "aside (mv %s %s.damaged) and run the same command again to resume with a new metrics file " \
    "(its earlier rows stay readable in the moved copy as far as they can be read)"

/* fail() for a read of the existing file on resume, plus RESUME_DAMAGED_HINT unless the cause
 * was a system call (a full disk, a lock held by another process). */
static int fail_resume(const char *path, char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int system_error = 0, rc = vfail(path, err, &system_error, fmt, ap);
    va_end(ap);
    size_t used = strlen(err);
    if (!system_error && used < ERR_LEN)
        snprintf(err + used, ERR_LEN - used, RESUME_DAMAGED_HINT, path, path);
    return rc;
}

/* ---- schema ------------------------------------------------------------------------------ */

static Column *add_column(Table *t, const char *name, ColumnKind kind, const char *long_name,
                          const char *units) {
    Column *c = &t->columns[t->n_columns++];
    memset(c, 0, sizeof *c);
    c->name = name;
    c->kind = kind;
    c->rank = 1;
    c->labels[0] = "step";
    c->long_name = long_name;
    c->units = units;
    c->id = NO_HID;
    return c;
}

static void add_dim(Column *c, int size, const char *label) {
    c->dims[c->rank] = (hsize_t)size;
    c->labels[c->rank] = label;
    c->rank++;
}

static void add_gate_dims(Column *c, const MetricsShape *s) {
    add_dim(c, s->n_layers, "layer");
    add_dim(c, s->n_kv_heads, "kv_head");
    add_dim(c, 2, "branch (0 key, 1 value)");
}

static void build_schema(Metrics *m) {
    const MetricsShape *s = &m->shape;
    Table *t;
    Column *c;

    t = &m->tables[TABLE_TRAIN];
    t->name = "train", t->description = "training log, one row every run.log_every steps (the plots of it are in /entry)", t->enabled = 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    add_column(t, "tokens", KIND_INT64, "training tokens seen (all ranks)", "tokens");
    add_column(t, "loss", KIND_FLOAT64, "training cross-entropy", "nats");
    add_column(t, "lr", KIND_FLOAT64, "learning rate", NULL);
    add_column(t, "grad_norm", KIND_FLOAT64, "global gradient L2 norm", NULL);
    add_column(t, "tokens_per_sec", KIND_FLOAT64, "training throughput", "tokens/s");
    add_column(t, "mfu", KIND_FLOAT64, "model FLOPs utilization (fraction of peak, 0..1)", NULL);
    if (s->has_gate_coverage)
        add_column(t, "gate_coverage", KIND_FLOAT64,
                   "gate-coverage penalty lambda * mean over sequences of sum_layers,branches (ln W - H(gbar)), "
                   "not part of loss", "nats");
    if (s->has_indexer_kl)
        add_column(t, "indexer_kl", KIND_FLOAT64,
                   "lightning indexer KL(main attention || indexer) per query, mean over the step's queries and indexer "
                   "layers (rank 0's micro-batches), not part of loss", "nats");
    if (s->has_boundaries) {   /* docs/spec.md §6.5 */
        add_column(t, "boundary_ratio", KIND_FLOAT64,
                   "learned chunk boundaries: ratio loss (1/n_layers) sum_l R_l without lambda_r, mean over the step's "
                   "micro-batches (rank 0's), not part of loss", NULL);
        add_column(t, "boundary_rate", KIND_FLOAT64,
                   "learned chunk boundaries: fraction of tokens that end an entry, mean over layers and the step's "
                   "micro-batches (rank 0's); the target is 1/stride", NULL);
    }

    t = &m->tables[TABLE_VAL];
    t->name = "val", t->description = "validation loss, one row per evaluation (the plots of it are in /entry)", t->enabled = 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    add_column(t, "loss", KIND_FLOAT64, "validation cross-entropy", "nats");
    c = add_column(t, "loss_by_residue", KIND_FLOAT64,
                   "validation cross-entropy by residue of the predicting position (t mod P)",
                   "nats");
    add_dim(c, s->residues, "residue");

    /* docs/spec.md §4.8: a group of its own, so that a run resumed on an older file gains it */
    t = &m->tables[TABLE_VAL_STATS];
    t->name = "val_stats", t->description = "uncertainty of the validation loss (docs/spec.md §4.8): per-residue and "
        "per-phase means, bootstrap standard errors over the validation windows, homogeneity tests; one row per "
        "evaluation (the plots of it are in /entry)", t->enabled = s->phases >= 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    add_column(t, "windows", KIND_INT64, "validation windows (the bootstrap's units, n)", "windows");
    add_column(t, "loss_se", KIND_FLOAT64, "bootstrap standard error of the validation loss", "nats");
    c = add_column(t, "loss_by_residue", KIND_FLOAT64,
                   "validation cross-entropy by residue of the predicting position (t mod P)", "nats");
    add_dim(c, s->residues, "residue");
    c = add_column(t, "loss_se_by_residue", KIND_FLOAT64,
                   "bootstrap standard error of the validation cross-entropy by residue (t mod P)", "nats");
    add_dim(c, s->residues, "residue");
    c = add_column(t, "tokens_by_residue", KIND_INT64, "scored tokens by residue (t mod P)", "tokens");
    add_dim(c, s->residues, "residue");
    add_column(t, "F_residue", KIND_FLOAT64, "homogeneity across residues: Hotelling F of the loss contrasts", NULL);
    add_column(t, "df1_residue", KIND_FLOAT64, "homogeneity across residues: numerator degrees of freedom (K'-1)", NULL);
    add_column(t, "df2_residue", KIND_FLOAT64, "homogeneity across residues: denominator degrees of freedom (n-K'+1)", NULL);
    add_column(t, "p_residue", KIND_FLOAT64, "homogeneity of the validation loss across residues: p-value", NULL);
    c = add_column(t, "loss_by_phase", KIND_FLOAT64,
                   "validation cross-entropy by phase of the predicting position (t mod S)", "nats");
    add_dim(c, s->phases, "phase");
    c = add_column(t, "loss_se_by_phase", KIND_FLOAT64,
                   "bootstrap standard error of the validation cross-entropy by phase (t mod S)", "nats");
    add_dim(c, s->phases, "phase");
    c = add_column(t, "tokens_by_phase", KIND_INT64, "scored tokens by phase (t mod S)", "tokens");
    add_dim(c, s->phases, "phase");
    add_column(t, "F_phase", KIND_FLOAT64, "homogeneity across phases: Hotelling F of the loss contrasts", NULL);
    add_column(t, "df1_phase", KIND_FLOAT64, "homogeneity across phases: numerator degrees of freedom (K'-1)", NULL);
    add_column(t, "df2_phase", KIND_FLOAT64, "homogeneity across phases: denominator degrees of freedom (n-K'+1)", NULL);
    add_column(t, "p_phase", KIND_FLOAT64, "homogeneity of the validation loss across phases: p-value", NULL);

    t = &m->tables[TABLE_PROBE];
    t->name = "probe", t->description = "lookup-probe accuracy, one row per evaluation (the plots of it are in /entry)", t->enabled = 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    c = add_column(t, "acc_pp", KIND_FLOAT64,
                   "lookup-probe top-1 accuracy by residue of the target key, prefix padding", "%");
    add_dim(c, s->residues, "residue");
    c = add_column(t, "acc_ip", KIND_FLOAT64,
                   "lookup-probe top-1 accuracy by residue of the target key, in-sequence padding",
                   "%");
    add_dim(c, s->residues, "residue");
    add_column(t, "mean_pp", KIND_FLOAT64, "probe accuracy, mean over residues, prefix padding", "%");
    add_column(t, "worst_pp", KIND_FLOAT64, "probe accuracy, worst residue, prefix padding", "%");
    add_column(t, "best_pp", KIND_FLOAT64, "probe accuracy, best residue, prefix padding", "%");
    add_column(t, "gap_pp", KIND_FLOAT64, "probe accuracy gap best - worst, prefix padding",
               "percentage points");
    add_column(t, "mean_ip", KIND_FLOAT64, "probe accuracy, mean over residues, in-sequence padding",
               "%");
    add_column(t, "worst_ip", KIND_FLOAT64, "probe accuracy, worst residue, in-sequence padding", "%");
    add_column(t, "best_ip", KIND_FLOAT64, "probe accuracy, best residue, in-sequence padding", "%");
    add_column(t, "gap_ip", KIND_FLOAT64, "probe accuracy gap best - worst, in-sequence padding",
               "percentage points");
    /* phase-effect test (docs/spec.md §3.7): Pearson chi-square of homogeneity and p-value */
    add_column(t, "chi2_pp", KIND_FLOAT64, "phase-effect chi-square across residues (df P-1), prefix padding", NULL);
    add_column(t, "p_pp", KIND_FLOAT64, "phase-effect p-value across residues, prefix padding", NULL);
    add_column(t, "chi2_phase_pp", KIND_FLOAT64, "phase-effect chi-square folded by phase t_K mod S (df S-1; KV head 0's grid, o_0 = 0), prefix padding", NULL);
    add_column(t, "p_phase_pp", KIND_FLOAT64, "phase-effect p-value folded by phase, prefix padding", NULL);
    add_column(t, "chi2_ip", KIND_FLOAT64, "phase-effect chi-square across residues (df P-1), in-sequence padding", NULL);
    add_column(t, "p_ip", KIND_FLOAT64, "phase-effect p-value across residues, in-sequence padding", NULL);
    add_column(t, "chi2_phase_ip", KIND_FLOAT64, "phase-effect chi-square folded by phase t_K mod S (df S-1; KV head 0's grid, o_0 = 0), in-sequence padding", NULL);
    add_column(t, "p_phase_ip", KIND_FLOAT64, "phase-effect p-value folded by phase, in-sequence padding", NULL);

    t = &m->tables[TABLE_GATES];
    t->name = "gates", t->description = "compressor gate statistics over the validation windows, one row per evaluation (the plots of it are in /entry)", t->enabled = s->has_gates;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    c = add_column(t, "eff_static", KIND_FLOAT32,
                   "static effective number of offsets exp(H(E[alpha]))", "offsets");
    add_gate_dims(c, s);
    c = add_column(t, "eff_window", KIND_FLOAT32,
                   "per-window effective number of offsets E[exp(H(alpha))]", "offsets");
    add_gate_dims(c, s);
    c = add_column(t, "profile", KIND_FLOAT32, "gate profile g(i) = E[alpha_i] * W", NULL);
    add_gate_dims(c, s);
    add_dim(c, s->window, "offset");

    /* docs/spec.md §6.5 "Phase fold": learned chunk boundaries, the probe by chunk phase per layer
     * (trainer/chunk_phase.h); bins 0..W-1 the key's slot in its entry, bin W unpooled */
    t = &m->tables[TABLE_PROBE_CHUNK];
    t->name = "probe_chunk", t->description = "lookup-probe accuracy by chunk phase of the target key in each layer "
        "(learned chunk boundaries, docs/spec.md §6.5: the key's slot W-1-(e-t_K) in the entry ending at e; bin W: "
        "no entry pools it), with the prompt counts (the model chooses them: not balanced); one row per evaluation",
        t->enabled = s->chunk_window >= 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    static const char *const proto[2] = {"pp", "ip"}, *const proto_name[2] = {"prefix padding", "in-sequence padding"};
    static char acc_long[2][160], tot_long[2][160], p_long[2][160], acc_name[2][16], tot_name[2][16], p_name[2][16];
    for (int k = 0; k < 2; k++) {
        snprintf(acc_name[k], sizeof acc_name[k], "acc_%s", proto[k]);
        snprintf(tot_name[k], sizeof tot_name[k], "total_%s", proto[k]);
        snprintf(p_name[k], sizeof p_name[k], "p_%s", proto[k]);
        snprintf(acc_long[k], sizeof acc_long[k], "lookup-probe top-1 accuracy by chunk phase of the target key, %s",
                 proto_name[k]);
        snprintf(tot_long[k], sizeof tot_long[k], "lookup-probe prompts by chunk phase of the target key, %s",
                 proto_name[k]);
        snprintf(p_long[k], sizeof p_long[k],
                 "homogeneity of the accuracy across chunk phases 0..W-1 (chi-square or permutation p), %s",
                 proto_name[k]);
        c = add_column(t, acc_name[k], KIND_FLOAT64, acc_long[k], "%");
        add_dim(c, s->n_layers, "layer");
        add_dim(c, s->chunk_window + 1, "chunk phase (W: unpooled)");
        c = add_column(t, tot_name[k], KIND_INT64, tot_long[k], "prompts");
        add_dim(c, s->n_layers, "layer");
        add_dim(c, s->chunk_window + 1, "chunk phase (W: unpooled)");
        c = add_column(t, p_name[k], KIND_FLOAT64, p_long[k], NULL);
        add_dim(c, s->n_layers, "layer");
    }

    /* docs/spec.md §6.5 "Boundary statistics" (trainer/boundary_stats.h): where learned boundaries fall,
     * over the validation windows of each evaluation */
    t = &m->tables[TABLE_BOUNDARIES];
    t->name = "boundaries", t->description = "learned chunk boundaries over the validation windows (docs/spec.md §6.5, "
        "trainer/boundary_stats.h): chunk lengths, boundary rate, ratio loss, forced boundaries, boundaries by token class "
        "against the class shares (chance), record splits against the boundary rate; 95% Wilson intervals; one row per "
        "evaluation", t->enabled = s->chunk_window >= 1;
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    static const char *const class_label = "class (key, value, filler, eot, other)";
    c = add_column(t, "positions", KIND_INT64, "token positions counted (n of the boundary rate)", "tokens");
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "boundaries", KIND_INT64, "boundaries = complete chunks = entries", "entries");
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "boundary_rate", KIND_FLOAT64, "boundary rate F: boundaries per token (target 1/S)", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "mean_prob", KIND_FLOAT64, "mean boundary score G = mean p_t", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "ratio_loss", KIND_FLOAT64, "ratio loss R at the evaluation's F and G (N = S)", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "mean_chunk_length", KIND_FLOAT64, "mean length of the complete chunks", "tokens");
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "chunk_length_hist", KIND_INT64, "complete chunks by length 1..W (index k: length k + 1)", "chunks");
    add_dim(c, s->n_layers, "layer");
    add_dim(c, s->chunk_window >= 1 ? s->chunk_window : 1, "chunk length - 1");
    c = add_column(t, "unpooled", KIND_INT64, "tokens after the last boundary of their row (in no entry)", "tokens");
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "forced_fraction", KIND_FLOAT64, "fraction of boundaries forced by the length cap W (p < 1/2)", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "forced_lo", KIND_FLOAT64, "forced fraction, 95% Wilson interval, lower end", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "forced_hi", KIND_FLOAT64, "forced fraction, 95% Wilson interval, upper end", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "class_rate", KIND_FLOAT64, "share of the boundaries on each token class", NULL);
    add_dim(c, s->n_layers, "layer");
    add_dim(c, BSTAT_N_CLASSES, class_label);
    c = add_column(t, "class_lo", KIND_FLOAT64, "share of the boundaries on each class, 95% Wilson interval, lower end", NULL);
    add_dim(c, s->n_layers, "layer");
    add_dim(c, BSTAT_N_CLASSES, class_label);
    c = add_column(t, "class_hi", KIND_FLOAT64, "share of the boundaries on each class, 95% Wilson interval, upper end", NULL);
    add_dim(c, s->n_layers, "layer");
    add_dim(c, BSTAT_N_CLASSES, class_label);
    c = add_column(t, "class_chance", KIND_FLOAT64, "share of all tokens in each class (the chance share of the boundaries)", NULL);
    add_dim(c, BSTAT_N_CLASSES, class_label);
    c = add_column(t, "record_split", KIND_FLOAT64, "fraction of adjacent (key, value) pairs with a boundary at the key "
                   "(key and value in different entries); chance: the boundary rate", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "record_split_n", KIND_INT64, "adjacent (key, value) pairs (n of the record split)", "pairs");
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "record_split_lo", KIND_FLOAT64, "record split, 95% Wilson interval, lower end", NULL);
    add_dim(c, s->n_layers, "layer");
    c = add_column(t, "record_split_hi", KIND_FLOAT64, "record split, 95% Wilson interval, upper end", NULL);
    add_dim(c, s->n_layers, "layer");

    /* docs/spec.md §5.5: a layer schedule's probe folded by each compressed kind's own phase
     * (trainer/kind_fold.h); 6 columns per kind (at most 3 compressed kinds: 19 columns) */
    t = &m->tables[TABLE_PROBE_KINDS];
    t->name = "probe_kinds", t->description = "lookup-probe accuracy folded by each compressed layer kind's own phase "
        "(t_K - o_k) mod S_k of the target key (a layer schedule, docs/spec.md §5.5), with the prompt counts and the "
        "phase-effect test; one row per evaluation";
    add_column(t, "step", KIND_INT64, "optimizer step", NULL);
    static char kname[METRICS_KINDS][2][3][32], klong[METRICS_KINDS][2][3][160];
    for (int k = 0; k < METRICS_KINDS; k++) {
        if (s->kind_period[k] < 1) continue;
        t->enabled = 1;
        for (int q = 0; q < 2; q++) {
            const char *pn = q ? "ip" : "pp", *pl = q ? "in-sequence padding" : "prefix padding", *kn = layer_kind_names[k];
            snprintf(kname[k][q][0], 32, "acc_%s_%s", pn, kn);
            snprintf(kname[k][q][1], 32, "total_%s_%s", pn, kn);
            snprintf(kname[k][q][2], 32, "p_%s_%s", pn, kn);
            snprintf(klong[k][q][0], 160, "lookup-probe top-1 accuracy by the %s layers' phase of the target key, %s", kn, pl);
            snprintf(klong[k][q][1], 160, "lookup-probe prompts by the %s layers' phase of the target key, %s", kn, pl);
            snprintf(klong[k][q][2], 160, "phase-effect p-value by the %s layers' phase (docs/spec.md §3.7), %s", kn, pl);
            c = add_column(t, kname[k][q][0], KIND_FLOAT64, klong[k][q][0], "%");
            add_dim(c, s->kind_period[k], "phase");
            c = add_column(t, kname[k][q][1], KIND_INT64, klong[k][q][1], "prompts");
            add_dim(c, s->kind_period[k], "phase");
            add_column(t, kname[k][q][2], KIND_FLOAT64, klong[k][q][2], NULL);
        }
    }
}

static hid_t file_type(ColumnKind k) {
    return k == KIND_INT64 ? H5T_STD_I64LE : k == KIND_FLOAT64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
}

static hid_t memory_type(ColumnKind k) {
    return k == KIND_INT64 ? H5T_NATIVE_INT64 : k == KIND_FLOAT64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
}

static size_t kind_size(ColumnKind k) { return k == KIND_FLOAT32 ? 4 : 8; }

static Table *find_table(Metrics *m, const char *name) {
    for (int i = 0; i < N_TABLES; i++)
        if (strcmp(m->tables[i].name, name) == 0) return &m->tables[i];
    return NULL;
}

/* ---- attributes -------------------------------------------------------------------------- */

static hid_t utf8_string_type(void) {
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0) return type;
    if (H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
        H5Tclose(type);
        return NO_HID;
    }
    return type;
}

/* Writes a variable-length UTF-8 string attribute (an array of n strings when n > 0, a scalar
 * when n == 0), replacing any attribute of that name. */
static int write_strings_attr(hid_t obj, const char *name, const char *const *values, int n) {
    if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) return -1;
    hsize_t count = (hsize_t)n;
    hid_t type = utf8_string_type();
    hid_t space = n > 0 ? H5Screate_simple(1, &count, NULL) : H5Screate(H5S_SCALAR);
    hid_t attr = (type < 0 || space < 0) ? NO_HID
                                         : H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr < 0 || H5Awrite(attr, type, values) < 0) ? -1 : 0;
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return rc;
}

static int write_string_attr(hid_t obj, const char *name, const char *value) {
    return write_strings_attr(obj, name, &value, 0);
}

static int write_int_attr(hid_t obj, const char *name, int value) {
    if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) return -1;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = space < 0 ? NO_HID
                           : H5Acreate2(obj, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (attr < 0 || H5Awrite(attr, H5T_NATIVE_INT, &value) < 0) ? -1 : 0;
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    return rc;
}

/* long_name with the units in parentheses ("training cross-entropy (nats)"): viewers label
 * their axes with long_name and show no units attribute. */
static int write_long_name(hid_t obj, const char *long_name, const char *units) {
    char text[256];
    if (units) snprintf(text, sizeof text, "%s (%s)", long_name, units);
    else snprintf(text, sizeof text, "%s", long_name);
    return write_string_attr(obj, "long_name", text);
}

static int delete_attr_if_present(hid_t obj, const char *name) {
    return H5Aexists(obj, name) > 0 ? (int)H5Adelete(obj, name) : 0;
}

/* A scalar variable-length UTF-8 string dataset (NeXus fields such as title, start_time). */
static int write_string_dataset(hid_t group, const char *name, const char *value) {
    hid_t type = utf8_string_type();
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t dset = (type < 0 || space < 0) ? NO_HID
                                         : H5Dcreate2(group, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (dset < 0 || H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0) ? -1 : 0;
    if (dset >= 0) H5Dclose(dset);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return rc;
}


/* ---- creating groups --------------------------------------------------------------------- */

static hid_t create_column(hid_t group, const Column *c) {
    hsize_t current[MAX_RANK], maximum[MAX_RANK], chunk[MAX_RANK];
    size_t row_bytes = kind_size(c->kind);
    for (int d = 1; d < c->rank; d++) {
        current[d] = maximum[d] = chunk[d] = c->dims[d];
        row_bytes *= (size_t)c->dims[d];
    }
    size_t chunk_rows = CHUNK_BYTES / row_bytes;
    current[0] = 0;
    maximum[0] = H5S_UNLIMITED;
    chunk[0] = chunk_rows < 1 ? 1 : chunk_rows > MAX_CHUNK_ROWS ? MAX_CHUNK_ROWS : chunk_rows;

    double fill_f64 = NAN;
    float fill_f32 = NAN;
    int64_t fill_i64 = -1;
    const void *fill = c->kind == KIND_INT64 ? (const void *)&fill_i64
                       : c->kind == KIND_FLOAT64 ? (const void *)&fill_f64 : (const void *)&fill_f32;

    hid_t space = H5Screate_simple(c->rank, current, maximum);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t dset = NO_HID;
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, c->rank, chunk) >= 0 &&
        H5Pset_fill_value(dcpl, memory_type(c->kind), fill) >= 0)
        dset = H5Dcreate2(group, c->name, file_type(c->kind), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    return dset;
}

/* Creates one group with its datasets, dimension scale, labels and NeXus attributes. */
static int create_table(Metrics *m, Table *t, char *err) {
    hid_t group = H5Gcreate2(m->file, t->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0) return fail(m->path, err, "cannot create group /%s", t->name);
    int rc = 0;
    for (int i = 0; i < t->n_columns && rc == 0; i++) {
        Column *c = &t->columns[i];
        c->id = create_column(group, c);
        if (c->id < 0) {
            rc = fail(m->path, err, "cannot create dataset /%s/%s", t->name, c->name);
            break;
        }
        if (write_long_name(c->id, c->long_name, c->units) < 0 ||
            (c->units && write_string_attr(c->id, "units", c->units) < 0))
            rc = fail(m->path, err, "cannot write attributes of /%s/%s", t->name, c->name);
    }
    hid_t step = t->columns[0].id;
    if (rc == 0 && H5DSset_scale(step, "step") < 0)
        rc = fail(m->path, err, "cannot make /%s/step a dimension scale", t->name);
    for (int i = 1; i < t->n_columns && rc == 0; i++) {
        Column *c = &t->columns[i];
        if (H5DSattach_scale(c->id, step, 0) < 0) {
            rc = fail(m->path, err, "cannot attach /%s/step to dim 0 of /%s/%s", t->name, t->name, c->name);
            break;
        }
        for (int d = 0; d < c->rank && rc == 0; d++)
            if (H5DSset_label(c->id, (unsigned)d, c->labels[d]) < 0)
                rc = fail(m->path, err, "cannot label dim %d of /%s/%s", d, t->name, c->name);
    }

    /* the raw table carries no NeXus class (NeXus readers skip it; the plots are the NXdata
     * groups under /entry), only a description */
    if (rc == 0 && write_string_attr(group, "description", t->description) < 0)
        rc = fail(m->path, err, "cannot write the attributes of /%s", t->name);

    for (int i = 0; i < t->n_columns; i++) {
        if (t->columns[i].id >= 0) H5Dclose(t->columns[i].id);
        t->columns[i].id = NO_HID;
    }
    H5Gclose(group);
    t->n_rows = 0;
    return rc;
}

/* ---- the NeXus entry --------------------------------------------------------------------- */

/* /entry (NXentry) holds one NXdata group per plot. Its signal and auxiliary signals are hard
 * links to datasets of the raw tables (the same objects, so SWMR appends show up there), `step`
 * is a link to the table's step, and the other dimensions get axis datasets 0..n-1 that are
 * also attached to the raw datasets as dimension scales. Everything is created before
 * H5Fstart_swmr_write; on resume only missing parts are created. The offset axis is called
 * window_offset in /entry (NXdata reserves the field name "offset"). */
typedef enum { AXIS_NONE, AXIS_VAL_RESIDUE, AXIS_PROBE_RESIDUE, AXIS_LAYER, AXIS_KV_HEAD, AXIS_BRANCH,
               AXIS_OFFSET, AXIS_VAL_PHASE, N_AXES } AxisKind;

typedef struct {
    const char *name;      /* dataset name inside an NXdata group */
    const char *long_name;
    const char *home;      /* the plot whose group holds the dataset; others link to it */
} AxisInfo;

static const AxisInfo AXES[N_AXES] = {
    [AXIS_VAL_RESIDUE] = {"residue", "residue r = t mod %d of the predicting position t", "val_loss_by_residue"},
    [AXIS_PROBE_RESIDUE] = {"residue", "residue r = t_K mod %d of the target key position t_K", "probe_pp_by_residue"},
    [AXIS_LAYER] = {"layer", "layer", "gate_profile"},
    [AXIS_KV_HEAD] = {"kv_head", "KV head", "gate_profile"},
    [AXIS_BRANCH] = {"branch", "compressor branch (0 key, 1 value)", "gate_profile"},
    [AXIS_OFFSET] = {"window_offset", "offset i inside the compression window", "gate_profile"},
    [AXIS_VAL_PHASE] = {"phase", "phase t mod %d of the predicting position t", "val_loss_by_phase"},
};

typedef struct {
    const char *name;  /* /entry/NAME */
    const char *title;
    int table;
    const char *signal;          /* a column of the table */
    const char *auxiliary[3];    /* columns plotted with the signal (same shape and units) */
    AxisKind axes[MAX_RANK];     /* dims 1.. of the signal; dim 0 is step */
    const char *errors;          /* a column of the same shape: the signal's standard errors, linked as
                                    SIGNAL_errors (the NXdata convention); NULL: none */
} Plot;

#define GATE_AXES {AXIS_NONE, AXIS_LAYER, AXIS_KV_HEAD, AXIS_BRANCH, AXIS_OFFSET}
static const Plot PLOTS[] = {
    {"val_loss", "validation loss", TABLE_VAL, "loss", {NULL}, {AXIS_NONE}, NULL},
    {"val_loss_by_residue", "validation loss by residue of the predicting position", TABLE_VAL,
     "loss_by_residue", {NULL}, {AXIS_NONE, AXIS_VAL_RESIDUE}, NULL},
    {"train_loss", "training loss", TABLE_TRAIN, "loss", {NULL}, {AXIS_NONE}, NULL},
    {"learning_rate", "learning rate", TABLE_TRAIN, "lr", {NULL}, {AXIS_NONE}, NULL},
    {"grad_norm", "global gradient norm (before clipping)", TABLE_TRAIN, "grad_norm", {NULL}, {AXIS_NONE}, NULL},
    {"throughput", "training throughput", TABLE_TRAIN, "tokens_per_sec", {NULL}, {AXIS_NONE}, NULL},
    {"mfu", "model FLOPs utilization", TABLE_TRAIN, "mfu", {NULL}, {AXIS_NONE}, NULL},
    {"probe_accuracy", "lookup-probe accuracy, prefix padding: mean, worst and best residue", TABLE_PROBE,
     "mean_pp", {"worst_pp", "best_pp"}, {AXIS_NONE}, NULL},
    {"probe_accuracy_ip", "lookup-probe accuracy, in-sequence padding: mean, worst and best residue",
     TABLE_PROBE, "mean_ip", {"worst_ip", "best_ip"}, {AXIS_NONE}, NULL},
    {"probe_gap", "lookup-probe gap best - worst residue (prefix padding; in-sequence padding)", TABLE_PROBE,
     "gap_pp", {"gap_ip"}, {AXIS_NONE}, NULL},
    {"probe_pp_by_residue", "lookup-probe accuracy by residue of the target key, prefix padding",
     TABLE_PROBE, "acc_pp", {NULL}, {AXIS_NONE, AXIS_PROBE_RESIDUE}, NULL},
    {"probe_ip_by_residue", "lookup-probe accuracy by residue of the target key, in-sequence padding",
     TABLE_PROBE, "acc_ip", {NULL}, {AXIS_NONE, AXIS_PROBE_RESIDUE}, NULL},
    {"gate_profile", "gate profile g(i) = E[alpha_i] * W by layer, KV head, branch and offset", TABLE_GATES,
     "profile", {NULL}, GATE_AXES, NULL},
    {"gate_eff_static", "static effective number of offsets exp(H(E[alpha]))", TABLE_GATES, "eff_static",
     {NULL}, {AXIS_NONE, AXIS_LAYER, AXIS_KV_HEAD, AXIS_BRANCH}, NULL},
    {"gate_eff_window", "per-window effective number of offsets E[exp(H(alpha))]", TABLE_GATES,
     "eff_window", {NULL}, {AXIS_NONE, AXIS_LAYER, AXIS_KV_HEAD, AXIS_BRANCH}, NULL},
    {"val_loss_by_residue_se", "validation loss by residue with bootstrap standard errors over the windows",
     TABLE_VAL_STATS, "loss_by_residue", {NULL}, {AXIS_NONE, AXIS_VAL_RESIDUE}, "loss_se_by_residue"},
    {"val_loss_by_phase", "validation loss by phase t mod S with bootstrap standard errors over the windows",
     TABLE_VAL_STATS, "loss_by_phase", {NULL}, {AXIS_NONE, AXIS_VAL_PHASE}, "loss_se_by_phase"},
    {"val_loss_homogeneity", "homogeneity of the validation loss: p-value across residues (and across phases)",
     TABLE_VAL_STATS, "p_residue", {"p_phase"}, {AXIS_NONE}, NULL},
};
#define N_PLOTS ((int)(sizeof PLOTS / sizeof PLOTS[0]))
#define DEFAULT_PLOT "val_loss"

static const Column *find_column(const Table *t, const char *name) {
    for (int i = 0; i < t->n_columns; i++)
        if (strcmp(t->columns[i].name, name) == 0) return &t->columns[i];
    return NULL;
}

/* The fixed axis dataset 0..n-1 of one kind, made a dimension scale. */
static int create_axis(hid_t group, AxisKind kind, int n) {
    hsize_t count = (hsize_t)n;
    int *values = malloc(sizeof(int) * (size_t)n);
    if (!values) return -1;
    for (int i = 0; i < n; i++) values[i] = i;
    char long_name[160];
    snprintf(long_name, sizeof long_name, AXES[kind].long_name, n);
    hid_t space = H5Screate_simple(1, &count, NULL);
    hid_t dset = space < 0 ? NO_HID
                           : H5Dcreate2(group, AXES[kind].name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (dset < 0 || H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
              write_long_name(dset, long_name, NULL) < 0 || H5DSset_scale(dset, AXES[kind].name) < 0)
                 ? -1 : 0;
    if (dset >= 0) H5Dclose(dset);
    if (space >= 0) H5Sclose(space);
    free(values);
    return rc;
}

/* Creates /entry/NAME for one plot (nothing when it exists already). */
static int create_plot(Metrics *m, hid_t entry, const Plot *p, char *err) {
    if (H5Lexists(entry, p->name, H5P_DEFAULT) > 0) return 0;
    const Table *t = &m->tables[p->table];
    const Column *signal = find_column(t, p->signal);
    char source[128], target[128];
    hid_t group = H5Gcreate2(entry, p->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0) return fail(m->path, err, "cannot create group /entry/%s", p->name);
    int rc = 0;
    /* the signal, its auxiliary signals and step: links to the raw table */
    const char *links[5] = {"step", p->signal, p->auxiliary[0], p->auxiliary[1], p->auxiliary[2]};
    for (int i = 0; i < 5 && rc == 0 && links[i]; i++) {
        snprintf(source, sizeof source, "/%s/%s", t->name, links[i]);
        if (H5Lcreate_hard(m->file, source, group, links[i], H5P_DEFAULT, H5P_DEFAULT) < 0)
            rc = fail(m->path, err, "cannot link %s into /entry/%s", source, p->name);
    }
    if (rc == 0 && p->errors) {
        char name[96];
        snprintf(source, sizeof source, "/%s/%s", t->name, p->errors);
        snprintf(name, sizeof name, "%s_errors", p->signal);
        if (H5Lcreate_hard(m->file, source, group, name, H5P_DEFAULT, H5P_DEFAULT) < 0)
            rc = fail(m->path, err, "cannot link %s into /entry/%s", source, p->name);
    }
    /* the other axes: created in their home plot, linked elsewhere, attached to the signal */
    const char *axes[MAX_RANK];
    axes[0] = "step";
    for (int d = 1; d < signal->rank && rc == 0; d++) {
        AxisKind kind = p->axes[d];
        axes[d] = AXES[kind].name;
        snprintf(target, sizeof target, "/entry/%s/%s", AXES[kind].home, AXES[kind].name);
        if (strcmp(AXES[kind].home, p->name) == 0) {
            if (create_axis(group, kind, (int)signal->dims[d]) < 0)
                rc = fail(m->path, err, "cannot create the axis %s", target);
        } else if (H5Lcreate_hard(m->file, target, group, AXES[kind].name, H5P_DEFAULT, H5P_DEFAULT) < 0) {
            rc = fail(m->path, err, "cannot link the axis %s into /entry/%s", target, p->name);
        }
        if (rc) break;
        snprintf(source, sizeof source, "/%s/%s", t->name, p->signal);
        hid_t data = H5Dopen2(m->file, source, H5P_DEFAULT);
        hid_t axis = H5Dopen2(m->file, target, H5P_DEFAULT);
        if (data < 0 || axis < 0 || (H5DSis_attached(data, axis, (unsigned)d) <= 0 &&
                                     H5DSattach_scale(data, axis, (unsigned)d) < 0))
            rc = fail(m->path, err, "cannot attach %s to dim %d of %s", target, d, source);
        if (data >= 0) H5Dclose(data);
        if (axis >= 0) H5Dclose(axis);
    }
    /* NXdata attributes: signal, axes, AXIS_indices, auxiliary signals, title */
    int n_auxiliary = 0;
    while (n_auxiliary < 3 && p->auxiliary[n_auxiliary]) n_auxiliary++;
    if (rc == 0 && (write_string_attr(group, "NX_class", "NXdata") < 0 ||
                    write_string_attr(group, "signal", p->signal) < 0 ||
                    write_strings_attr(group, "axes", axes, signal->rank) < 0 ||
                    (n_auxiliary > 0 && write_strings_attr(group, "auxiliary_signals", p->auxiliary, n_auxiliary) < 0) ||
                    write_string_attr(group, "title", p->title) < 0 ||
                    write_string_dataset(group, "title", p->title) < 0))
        rc = fail(m->path, err, "cannot write the NeXus attributes of /entry/%s", p->name);
    for (int d = 0; d < signal->rank && rc == 0; d++) {
        char name[64];
        snprintf(name, sizeof name, "%s_indices", axes[d]);
        if (write_int_attr(group, name, d) < 0)
            rc = fail(m->path, err, "cannot write %s of /entry/%s", name, p->name);
    }
    H5Gclose(group);
    return rc;
}

/* The run name from the config text's [run] section ("name = demo"); "" when absent. */
static void run_name_of(const char *config_text, char *out, size_t len) {
    out[0] = 0;
    const char *run = config_text ? strstr(config_text, "[run]") : NULL;
    const char *line = run;
    while (line && (line = strchr(line, '\n'))) {
        line++;
        if (*line == '[') break;
        if (strncmp(line, "name", 4) == 0) {
            const char *v = line + 4;
            while (*v == ' ' || *v == '\t' || *v == '=') v++;
            size_t n = strcspn(v, " \t\r\n;#");
            snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), v);
            return;
        }
    }
}

static void utc_now_iso8601(char *out, size_t len) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Creates /entry (NXentry: title, program_name, start_time, default plot) and its plots. */
static int create_entry(Metrics *m, const char *config_text, const char *code_version, char *err) {
    int exists = H5Lexists(m->file, "entry", H5P_DEFAULT) > 0;
    hid_t entry = exists ? H5Gopen2(m->file, "entry", H5P_DEFAULT)
                         : H5Gcreate2(m->file, "entry", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (entry < 0) return fail(m->path, err, "cannot create group /entry");
    int rc = 0;
    if (!exists) {
        char name[128], title[192], now[32];
        run_name_of(config_text, name, sizeof name);
        snprintf(title, sizeof title, "phaselab run %s", name[0] ? name : "(unnamed)");
        utc_now_iso8601(now, sizeof now);
        hid_t program = NO_HID;
        if (write_string_attr(entry, "NX_class", "NXentry") < 0 || write_string_dataset(entry, "title", title) < 0 ||
            write_string_dataset(entry, "start_time", now) < 0 ||
            write_string_dataset(entry, "program_name", "phaselab") < 0 ||
            (program = H5Dopen2(entry, "program_name", H5P_DEFAULT)) < 0 ||
            write_string_attr(program, "version", code_version ? code_version : "unknown") < 0)
            rc = fail(m->path, err, "cannot write the NXentry fields of /entry");
        if (program >= 0) H5Dclose(program);
    }
    if (rc == 0 && write_string_attr(entry, "default", DEFAULT_PLOT) < 0)
        rc = fail(m->path, err, "cannot write /entry default");
    for (int i = 0; i < N_PLOTS && rc == 0; i++)
        if (m->tables[PLOTS[i].table].enabled) rc = create_plot(m, entry, &PLOTS[i], err);
    H5Gclose(entry);
    return rc;
}

/* A raw table of an older file was itself an NXdata group: make it a plain group. */
static int plain_table_attrs(Metrics *m, const Table *t, char *err) {
    hid_t group = H5Gopen2(m->file, t->name, H5P_DEFAULT);
    if (group < 0) return fail(m->path, err, "cannot open group /%s", t->name);
    const char *old[] = {"NX_class", "signal", "axes", "step_indices", "auxiliary_signals"};
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        if (delete_attr_if_present(group, old[i]) < 0) rc = fail(m->path, err, "cannot update the attributes of /%s", t->name);
    if (rc == 0 && write_string_attr(group, "description", t->description) < 0)
        rc = fail(m->path, err, "cannot write the attributes of /%s", t->name);
    H5Gclose(group);
    return rc;
}

/* ---- resuming ---------------------------------------------------------------------------- */

/* Reads every row of an existing dataset (rank dims), a few MiB at a time, so that each of
 * its metadata blocks (object header, chunk index) is checked against its checksum now, with
 * one read attempt, rather than in an append. Returns 0 or fills err (fail_resume). */
static int verify_rows(Metrics *m, const Table *t, const Column *c, int rank, const hsize_t *dims, char *err) {
    enum { VERIFY_BYTES = 4 << 20 };
    size_t row_bytes = 8;                                  /* read as 8-byte values: any kind */
    for (int d = 1; d < rank; d++) row_bytes *= (size_t)dims[d];
    if (dims[0] == 0 || row_bytes == 0) return 0;
    hsize_t rows = row_bytes >= VERIFY_BYTES ? 1 : VERIFY_BYTES / row_bytes;
    if (rows > dims[0]) rows = dims[0];
    void *buf = malloc(row_bytes * (size_t)rows);
    if (!buf)
        return set_err(err, "%s: out of memory: %zu bytes for reading /%s/%s", m->path, row_bytes * (size_t)rows,
                       t->name, c->name);
    hid_t mem_type = c->kind == KIND_INT64 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    hid_t file_space = H5Dget_space(c->id);
    int rc = file_space < 0 ? fail_resume(m->path, err, "cannot read /%s/%s", t->name, c->name) : 0;
    for (hsize_t r0 = 0; r0 < dims[0] && rc == 0; r0 += rows) {
        hsize_t start[MAX_RANK] = {0}, count[MAX_RANK];
        count[0] = dims[0] - r0 < rows ? dims[0] - r0 : rows;
        start[0] = r0;
        for (int d = 1; d < rank; d++) count[d] = dims[d];
        hid_t mem_space = H5Screate_simple(rank, count, NULL);
        if (mem_space < 0 || H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(c->id, mem_type, mem_space, file_space, H5P_DEFAULT, buf) < 0)
            rc = fail_resume(m->path, err, "cannot read rows %llu..%llu of /%s/%s", (unsigned long long)r0,
                             (unsigned long long)(r0 + count[0] - 1), t->name, c->name);
        if (mem_space >= 0) H5Sclose(mem_space);
    }
    if (file_space >= 0) H5Sclose(file_space);
    free(buf);
    return rc;
}

/* Opens an existing group, checks that its datasets have this run's shapes (when the run
 * writes it) and that every row can be read (verify_rows), and shrinks every dataset to the
 * rows whose step is <= resume_step. */
static int truncate_table(Metrics *m, Table *t, long resume_step, char *err) {
    hid_t group = H5Gopen2(m->file, t->name, H5P_DEFAULT);
    if (group < 0) return fail_resume(m->path, err, "cannot open group /%s", t->name);
    int rc = 0;
    hsize_t keep = 0;
    int64_t *steps = NULL;
    for (int i = 0; i < t->n_columns && rc == 0; i++) {
        Column *c = &t->columns[i];
        if (H5Lexists(group, c->name, H5P_DEFAULT) <= 0) {
            rc = set_err(err, "%s: /%s has no dataset '%s', expected the layout of trainer/metrics.h" RESUME_DAMAGED_HINT,
                         m->path, t->name, c->name, m->path, m->path);
            break;
        }
        c->id = H5Dopen2(group, c->name, H5P_DEFAULT);
        hid_t space = c->id < 0 ? NO_HID : H5Dget_space(c->id);
        hid_t type = c->id < 0 ? NO_HID : H5Dget_type(c->id);
        hsize_t dims[MAX_RANK] = {0};
        int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
        if (rank >= 1 && rank <= MAX_RANK) H5Sget_simple_extent_dims(space, dims, NULL);
        H5T_class_t type_class = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
        if (space >= 0) H5Sclose(space);
        if (type >= 0) H5Tclose(type);
        if (c->id < 0 || rank < 1 || rank > MAX_RANK) {
            rc = fail_resume(m->path, err, "cannot open dataset /%s/%s", t->name, c->name);
            break;
        }
        if (t->enabled) {
            int same = rank == c->rank &&
                       type_class == (c->kind == KIND_INT64 ? H5T_INTEGER : H5T_FLOAT);
            for (int d = 1; same && d < rank; d++) same = dims[d] == c->dims[d];
            if (!same) {
                char want[128] = "n", have[128] = "n";
                for (int d = 1; d < c->rank; d++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), ",%llu", (unsigned long long)c->dims[d]);
                for (int d = 1; d < rank && d < MAX_RANK; d++)
                    snprintf(have + strlen(have), sizeof have - strlen(have), ",%llu", (unsigned long long)dims[d]);
                rc = set_err(err, "%s: /%s/%s has shape [%s] (%s), expected [%s] (%s) for this "
                                  "run's model and eval.residues",
                             m->path, t->name, c->name, have, type_class == H5T_INTEGER ? "integer" : "float",
                             want, c->kind == KIND_INT64 ? "integer" : "float");
                break;
            }
        }
        if (i == 0) {
            /* keep = the rows before the first step above resume_step */
            steps = malloc(sizeof(int64_t) * (dims[0] ? dims[0] : 1));
            if (!steps) {
                rc = set_err(err, "%s: out of memory reading /%s/step", m->path, t->name);
                break;
            }
            if (dims[0] > 0 && H5Dread(c->id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps) < 0) {
                rc = fail_resume(m->path, err, "cannot read /%s/step", t->name);
                break;
            }
            while (keep < dims[0] && steps[keep] <= resume_step) keep++;
        } else {
            if (dims[0] < keep) keep = dims[0]; /* a dataset shorter than step: keep only complete rows */
            rc = verify_rows(m, t, c, rank, dims, err);
        }
    }
    for (int i = 0; i < t->n_columns && rc == 0; i++) {
        Column *c = &t->columns[i];
        hsize_t size[MAX_RANK];
        hid_t space = H5Dget_space(c->id);
        int rank = H5Sget_simple_extent_ndims(space);
        H5Sget_simple_extent_dims(space, size, NULL);
        H5Sclose(space);
        if (rank < 1) continue;
        size[0] = keep;
        if (H5Dset_extent(c->id, size) < 0)
            rc = fail_resume(m->path, err, "cannot truncate /%s/%s to %llu rows", t->name, c->name,
                             (unsigned long long)keep);
    }
    if (rc == 0) {
        t->n_rows = keep;
        t->last_step = keep > 0 ? (long)steps[keep - 1] : LONG_MIN;
    }
    free(steps);
    for (int i = 0; i < t->n_columns; i++) {
        if (t->columns[i].id >= 0) H5Dclose(t->columns[i].id);
        t->columns[i].id = NO_HID;
    }
    H5Gclose(group);
    return rc;
}

/* Opens an existing file read-write; when a killed SWMR writer left the superblock's
 * "open for writing" flags set, retries clearing them as h5clear does. */
static hid_t open_for_resume(const char *path, hid_t fapl) {
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    if (file >= 0) return file;
    hid_t clearing = H5Pcopy(fapl);
    hbool_t clear = 1;
    if (clearing >= 0 && H5Pexist(clearing, "clear_status_flags") > 0 &&
        H5Pset(clearing, "clear_status_flags", &clear) >= 0) {
        file = H5Fopen(path, H5F_ACC_RDWR, clearing);
        /* the killed writer never updated the superblock's end-of-allocation: take the file's
         * real end, so that metadata it flushed past the old end is readable */
        if (file >= 0 && H5Fincrement_filesize(file, 0) < 0) {
            H5Fclose(file);
            file = NO_HID;
        }
    }
    if (clearing >= 0) H5Pclose(clearing);
    if (file < 0) {
        /* leave the plain cause (not an HDF5 file, locked, ...) on the error stack for fail() */
        hid_t again = H5Fopen(path, H5F_ACC_RDWR, fapl);
        if (again >= 0) H5Fclose(again);
    }
    return file;
}

/* ---- open / close ------------------------------------------------------------------------ */

static void close_all(Metrics *m) {
    for (int t = 0; t < N_TABLES; t++)
        for (int i = 0; i < m->tables[t].n_columns; i++) {
            Column *c = &m->tables[t].columns[i];
            if (c->id >= 0) H5Dclose(c->id);
            c->id = NO_HID;
        }
}

static int check_shape(const char *path, const MetricsShape *s, char *err) {
    if (s->residues < 1)
        return set_err(err, "%s: metrics shape has residues = %d, expected >= 1 (eval.residues)", path, s->residues);
    if (s->has_gates && (s->n_layers < 1 || s->n_kv_heads < 1 || s->window < 1))
        return set_err(err, "%s: metrics shape has n_layers = %d, n_kv_heads = %d, window = %d, "
                            "expected all >= 1 for a model with compressed attention",
                       path, s->n_layers, s->n_kv_heads, s->window);
    return 0;
}

static int build_and_start_swmr(Metrics *m, const char *config_text, const char *code_version, long resume_step,
                                char *err);

static int setup_file(Metrics *m, const char *config_text, const char *code_version,
                      long resume_step, char *err) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        return fail(m->path, err, "cannot set up HDF5 file access properties");
    }
    int resume = resume_step >= 0 && access(m->path, F_OK) == 0;
    if (resume) {
        m->file = open_for_resume(m->path, fapl);
        if (m->file < 0) {
            int rc = fail_resume(m->path, err, "cannot reopen the metrics file for resume (expected an HDF5 "
                                               "file written by phaselab, not open in another writer)");
            H5Pclose(fapl);
            return rc;
        }
    } else {
        errno = 0;
        m->file = H5Fcreate(m->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        if (m->file < 0) {
            int saved_errno = errno;
            int rc = saved_errno
                         ? set_err(err, "%s: cannot create the metrics file (%s), expected a writable path",
                                   m->path, strerror(saved_errno))
                         : fail(m->path, err, "cannot create the metrics file, expected a writable path");
            H5Pclose(fapl);
            return rc;
        }
    }
    H5Pclose(fapl);
    int rc = build_and_start_swmr(m, config_text, code_version, resume ? resume_step : -1, err);
    if (rc && resume && !strstr(err, "The checkpoints are intact")) {   /* fail_resume's hint, once */
        size_t used = strlen(err);
        if (used < ERR_LEN) snprintf(err + used, ERR_LEN - used, RESUME_DAMAGED_HINT, m->path, m->path);
    }
    return rc;
}

/* setup_file after the open: the groups (truncated on resume, resume_step >= 0), the entry,
 * the root attributes, then SWMR writing with the datasets open. */
static int build_and_start_swmr(Metrics *m, const char *config_text, const char *code_version, long resume_step,
                                char *err) {
    const int resume = resume_step >= 0;
    for (int t = 0; t < N_TABLES; t++) {
        Table *table = &m->tables[t];
        int exists = resume && H5Lexists(m->file, table->name, H5P_DEFAULT) > 0;
        int rc = exists ? truncate_table(m, table, resume_step, err)
                 : table->enabled ? create_table(m, table, err) : 0;
        if (rc == 0 && exists) rc = plain_table_attrs(m, table, err);
        if (rc) return rc;
    }
    int rc = create_entry(m, config_text, code_version, err);
    if (rc) return rc;
    char hdf5_version[32], now[32];
    unsigned major, minor, release;
    H5get_libversion(&major, &minor, &release);
    snprintf(hdf5_version, sizeof hdf5_version, "%u.%u.%u", major, minor, release);
    utc_now_iso8601(now, sizeof now);
    const char *slash = strrchr(m->path, '/');
    if (write_string_attr(m->file, "NX_class", "NXroot") < 0 ||
        write_string_attr(m->file, "default", "entry") < 0 ||
        write_string_attr(m->file, "file_name", slash ? slash + 1 : m->path) < 0 ||
        (H5Aexists(m->file, "file_time") <= 0 && write_string_attr(m->file, "file_time", now) < 0) ||
        write_string_attr(m->file, "HDF5_Version", hdf5_version) < 0 ||
        write_string_attr(m->file, "creator", "phaselab") < 0 ||
        write_string_attr(m->file, "config", config_text ? config_text : "") < 0 ||
        write_string_attr(m->file, "code_version", code_version ? code_version : "unknown") < 0)
        return fail(m->path, err, "cannot write the root attributes");

    /* SWMR writing with one metadata read attempt (see the header): close (nothing else of the
     * file may be open, or the close would be deferred), reopen */
    if (H5Fget_obj_count(m->file, H5F_OBJ_ALL | H5F_OBJ_LOCAL) != 1)
        return set_err(err, "%s: internal error: objects of the metrics file left open before SWMR writing", m->path);
    herr_t closed = H5Fclose(m->file);
    m->file = NO_HID;                      /* never closed twice: after a failed close HDF5 crashes on a second */
    if (closed < 0) return fail(m->path, err, "cannot close the metrics file before SWMR writing");
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) >= 0 &&
        H5Pset_metadata_read_attempts(fapl, 1) >= 0)
        m->file = H5Fopen(m->path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (m->file < 0)
        return fail(m->path, err, "cannot start SWMR writing (expected a file with the latest "
                                  "HDF5 format and no other writer)");
    for (int t = 0; t < N_TABLES; t++) {
        Table *table = &m->tables[t];
        if (!table->enabled) continue;
        for (int i = 0; i < table->n_columns; i++) {
            char name[64];
            snprintf(name, sizeof name, "/%s/%s", table->name, table->columns[i].name);
            table->columns[i].id = H5Dopen2(m->file, name, H5P_DEFAULT);
            if (table->columns[i].id < 0) return fail(m->path, err, "cannot open dataset %s", name);
        }
    }
    return 0;
}

Metrics *metrics_open(const char *path, const MetricsShape *shape, const char *config_text,
                      const char *code_version, long resume_step, char *err) {
    if (!path || !shape) {
        set_err(err, "metrics_open: expected a path and a shape");
        return NULL;
    }
    if (check_shape(path, shape, err)) return NULL;
    /* No HDF5 atexit handler: after a write failure (a full disk) a file cannot be closed, and
     * the library's exit-time shutdown then loops ("infinite loop closing library") or crashes.
     * Every file is closed explicitly (metrics_close); a failed one is left to the kernel. Must
     * come before the library's first use, so before any other H5 call of the process. */
    static int no_atexit;
    if (!no_atexit) { H5dont_atexit(); no_atexit = 1; }
    Metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        set_err(err, "%s: out of memory opening the metrics file", path);
        return NULL;
    }
    m->shape = *shape;
    m->file = NO_HID;
    build_schema(m);

    SavedErrorHandler saved = quiet_hdf5();
    int rc = setup_file(m, config_text, code_version, resume_step, err);
    if (rc) {
        close_all(m);
        if (m->file >= 0) H5Fclose(m->file);
        free(m->path);
        free(m);
        m = NULL;
    }
    restore_hdf5(saved);
    return m;
}

int metrics_close(Metrics *m) {
    if (!m) return 0;
    SavedErrorHandler saved = quiet_hdf5();
    close_all(m);
    int rc = m->file >= 0 && H5Fclose(m->file) < 0 ? -1 : 0;
    restore_hdf5(saved);
    free(m->path);
    free(m);
    return rc;
}

long metrics_rows(const Metrics *m, const char *group) {
    if (!m || !group) return -1;
    Table *t = find_table((Metrics *)m, group);
    return t && t->enabled ? (long)t->n_rows : -1;
}

/* ---- appending --------------------------------------------------------------------------- */

/* Grows a dataset to row + 1 rows, writes that row and flushes it for SWMR readers. */
static int write_row(Column *c, hsize_t row, const void *data) {
    hsize_t size[MAX_RANK], start[MAX_RANK] = {0}, count[MAX_RANK];
    size[0] = row + 1;
    start[0] = row;
    count[0] = 1;
    for (int d = 1; d < c->rank; d++) size[d] = count[d] = c->dims[d];
    if (H5Dset_extent(c->id, size) < 0) return -1;
    hid_t file_space = H5Dget_space(c->id);
    hid_t memory_space = H5Screate_simple(c->rank, count, NULL);
    int rc = (file_space < 0 || memory_space < 0 ||
              H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
              H5Dwrite(c->id, memory_type(c->kind), memory_space, file_space, H5P_DEFAULT, data) < 0 ||
              H5Dflush(c->id) < 0)
                 ? -1 : 0;
    if (memory_space >= 0) H5Sclose(memory_space);
    if (file_space >= 0) H5Sclose(file_space);
    return rc;
}

/* values[i] is the row of columns[i + 1]; step goes last. */
static int append_row(Metrics *m, Table *t, long step, const void *const *values, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (!t->enabled)
        return set_err(err, "%s: no /%s group in this file (the model has no compressed attention)",
                       m->path, t->name);
    if (t->n_rows > 0 && step <= t->last_step)
        return set_err(err, "%s: step %ld logged to /%s after step %ld, expected increasing steps",
                       m->path, step, t->name, t->last_step);
    SavedErrorHandler saved = quiet_hdf5();
    int rc = 0;
    for (int i = 1; i < t->n_columns && rc == 0; i++)
        if (write_row(&t->columns[i], t->n_rows, values[i - 1]) < 0)
            rc = fail(m->path, err, "cannot append step %ld to /%s/%s", step, t->name, t->columns[i].name);
    int64_t step64 = step;
    if (rc == 0 && write_row(&t->columns[0], t->n_rows, &step64) < 0)
        rc = fail(m->path, err, "cannot append step %ld to /%s/step", step, t->name);
    restore_hdf5(saved);
    if (rc == 0) {
        t->n_rows++;
        t->last_step = step;
    }
    return rc;
}

int metrics_log_train(Metrics *m, long step, long tokens, double loss, double lr,
                      double grad_norm, double tokens_per_sec, double mfu, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    int64_t tokens64 = tokens;
    const void *values[10] = {&tokens64, &loss, &lr, &grad_norm, &tokens_per_sec, &mfu};
    int n = 6;
    if (m->shape.has_gate_coverage) values[n++] = &m->gate_coverage;
    if (m->shape.has_indexer_kl) values[n++] = &m->indexer_kl;
    if (m->shape.has_boundaries) { values[n++] = &m->boundary_ratio; values[n++] = &m->boundary_rate; }
    return append_row(m, &m->tables[TABLE_TRAIN], step, values, err);
}

void metrics_set_gate_coverage(Metrics *m, double penalty) {
    if (m) m->gate_coverage = penalty;
}

void metrics_set_indexer_kl(Metrics *m, double kl) {
    if (m) m->indexer_kl = kl;
}

void metrics_set_boundaries(Metrics *m, double ratio, double rate) {
    if (m) { m->boundary_ratio = ratio; m->boundary_rate = rate; }
}

int metrics_log_val(Metrics *m, long step, double loss, const double *loss_by_residue, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (!loss_by_residue) return set_err(err, "%s: /val step %ld: expected loss_by_residue[%d]", m->path, step, m->shape.residues);
    const void *values[] = {&loss, loss_by_residue};
    return append_row(m, &m->tables[TABLE_VAL], step, values, err);
}

int metrics_log_val_stats(Metrics *m, long step, const LossStats *by_residue, const LossStats *by_phase, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    int P = m->shape.residues, S = m->shape.phases;
    if (!by_residue || !by_phase || by_residue->K != P || by_phase->K != S)
        return set_err(err, "%s: /val_stats step %ld: expected statistics of %d residues and %d phases (got %d, %d)", m->path,
                       step, P, S, by_residue ? by_residue->K : -1, by_phase ? by_phase->K : -1);
    int64_t *tok = malloc(sizeof(int64_t) * (size_t)(P + S));
    if (!tok) return set_err(err, "%s: out of memory logging /val_stats", m->path);
    for (int r = 0; r < P; r++) tok[r] = (int64_t)by_residue->tokens[r];
    for (int f = 0; f < S; f++) tok[P + f] = (int64_t)by_phase->tokens[f];
    int64_t windows = by_residue->units;
    double d[4] = {by_residue->df1, by_residue->df2, by_phase->df1, by_phase->df2};
    for (int i = 0; i < 4; i++) if (d[i] == 0) d[i] = NAN;     /* an undefined test */
    const void *values[] = {&windows, &by_residue->overall_se, by_residue->mean, by_residue->se, tok,
                            &by_residue->F, &d[0], &d[1], &by_residue->p,
                            by_phase->mean, by_phase->se, tok + P, &by_phase->F, &d[2], &d[3], &by_phase->p};
    int rc = append_row(m, &m->tables[TABLE_VAL_STATS], step, values, err);
    free(tok);
    return rc;
}

/* Summary of one protocol: mean, worst, best over the finite residues; gap = best - worst. */
typedef struct {
    double mean, worst, best, gap;
} ResidueSummary;

static ResidueSummary summarize(const double *acc, int residues) {
    ResidueSummary s = {NAN, NAN, NAN, NAN};
    double sum = 0;
    int n = 0;
    for (int r = 0; acc && r < residues; r++) {
        if (!isfinite(acc[r])) continue;
        sum += acc[r];
        if (n == 0 || acc[r] < s.worst) s.worst = acc[r];
        if (n == 0 || acc[r] > s.best) s.best = acc[r];
        n++;
    }
    if (n > 0) {
        s.mean = sum / n;
        s.gap = s.best - s.worst;
    }
    return s;
}

/* Accuracies must be percentages; a fraction slipping through would be a silent 100x error. */
static int check_percent(Metrics *m, long step, const char *name, const double *acc, char *err) {
    for (int r = 0; acc && r < m->shape.residues; r++)
        if (!isnan(acc[r]) && !(acc[r] >= 0 && acc[r] <= 100))
            return set_err(err, "%s: /probe step %ld: %s[%d] = %g, expected a percentage in 0..100 or NaN",
                           m->path, step, name, r, acc[r]);
    return 0;
}

int metrics_log_probe(Metrics *m, long step, const double *acc_pp, const double *acc_ip, char *err) {
    return metrics_log_probe_tested(m, step, acc_pp, acc_ip, NULL, err);
}

int metrics_log_probe_tested(Metrics *m, long step, const double *acc_pp, const double *acc_ip,
                             const double *phase_test, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (check_percent(m, step, "acc_pp", acc_pp, err) || check_percent(m, step, "acc_ip", acc_ip, err))
        return -1;
    int residues = m->shape.residues;
    double *nan_row = malloc(sizeof(double) * (size_t)residues);
    if (!nan_row) return set_err(err, "%s: out of memory logging /probe", m->path);
    for (int r = 0; r < residues; r++) nan_row[r] = NAN;
    ResidueSummary pp = summarize(acc_pp, residues), ip = summarize(acc_ip, residues);
    double t[8];
    for (int i = 0; i < 8; i++) t[i] = phase_test ? phase_test[i] : NAN;
    const void *values[] = {acc_pp ? acc_pp : nan_row, acc_ip ? acc_ip : nan_row,
                            &pp.mean, &pp.worst, &pp.best, &pp.gap,
                            &ip.mean, &ip.worst, &ip.best, &ip.gap,
                            &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7]};
    int rc = append_row(m, &m->tables[TABLE_PROBE], step, values, err);
    free(nan_row);
    return rc;
}

int metrics_log_probe_chunk(Metrics *m, long step, const ChunkPhaseCounts *c, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (!m->tables[TABLE_PROBE_CHUNK].enabled) return set_err(err, "%s: /probe_chunk: the run has no learned chunk boundaries", m->path);
    const int L = m->shape.n_layers, K = m->shape.chunk_window + 1;
    if (!c || c->layers != L || c->window + 1 != K || c->protocols != 2)
        return set_err(err, "%s: /probe_chunk step %ld: counts of %d protocols x %d layers x %d bins, expected 2 x %d x %d",
                       m->path, step, c ? c->protocols : 0, c ? c->layers : 0, c ? c->window + 1 : 0, L, K);
    int64_t *tot = malloc(sizeof *tot * (size_t)2 * L * K);
    double *p = malloc(sizeof *p * (size_t)2 * L);
    if (!tot || !p) { free(tot), free(p); return set_err(err, "%s: out of memory logging /probe_chunk", m->path); }
    for (long i = 0; i < 2L * L * K; i++) tot[i] = (int64_t)c->total[i];
    for (long i = 0; i < 2L * L; i++) p[i] = c->test[i].p;
    const void *values[] = {c->acc, tot, p, c->acc + (size_t)L * K, tot + (size_t)L * K, p + L};
    int rc = append_row(m, &m->tables[TABLE_PROBE_CHUNK], step, values, err);
    free(tot), free(p);
    return rc;
}

int metrics_log_boundaries(Metrics *m, long step, const BoundaryStats *b, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (!m->tables[TABLE_BOUNDARIES].enabled) return set_err(err, "%s: /boundaries: the run has no learned chunk boundaries", m->path);
    const int L = m->shape.n_layers, W = m->shape.chunk_window;
    if (!b || b->n_layers != L || b->W != W)
        return set_err(err, "%s: /boundaries step %ld: statistics of %d layers x W %d, expected %d x %d", m->path, step,
                       b ? b->n_layers : 0, b ? b->W : 0, L, W);
    int64_t *i64 = malloc(sizeof *i64 * (size_t)L * (4 + W));   /* positions, boundaries, unpooled, pairs [L]; hist [L, W] */
    if (!i64) return set_err(err, "%s: out of memory logging /boundaries", m->path);
    int64_t *pos = i64, *nbd = pos + L, *unp = nbd + L, *npair = unp + L, *hist = npair + L;
    for (int l = 0; l < L; l++) pos[l] = b->positions[l], nbd[l] = b->boundaries[l], unp[l] = b->unpooled[l], npair[l] = b->pairs[l];
    for (long i = 0; i < (long)L * W; i++) hist[i] = b->hist[i];
    const void *values[] = {pos, nbd, b->rate, b->mean_prob, b->ratio_loss, b->mean_len, hist, unp, b->forced_frac, b->forced_lo,
                            b->forced_hi, b->class_rate, b->class_lo, b->class_hi, b->class_chance, b->split_frac, npair,
                            b->split_lo, b->split_hi};
    int rc = append_row(m, &m->tables[TABLE_BOUNDARIES], step, values, err);
    free(i64);
    return rc;
}

int metrics_log_probe_kinds(Metrics *m, long step, const struct KindFoldRow *rows, int n, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    const Table *t = &m->tables[TABLE_PROBE_KINDS];
    if (!t->enabled) return set_err(err, "%s: /probe_kinds: the run has no layer schedule with a per-kind fold", m->path);
    enum { MAXV = MAX_COLUMNS };
    const void *values[MAXV];
    double acc[METRICS_KINDS][2][256];
    int64_t tot[METRICS_KINDS][2][256];
    int nv = 0;
    for (int k = 0; k < METRICS_KINDS; k++) {
        const int S = m->shape.kind_period[k];
        if (S < 1) continue;
        const struct KindFoldRow *r = NULL;
        for (int i = 0; i < n; i++) if (rows[i].kind == k) r = &rows[i];
        if (!r || r->S != S || S > 256)
            return set_err(err, "%s: /probe_kinds step %ld: no fold of the %s layers with %d phases (the file's shape)",
                           m->path, step, layer_kind_names[k], S);
        for (int q = 0; q < 2; q++) {
            for (int x = 0; x < S; x++) {
                tot[k][q][x] = r->total[q][x];
                acc[k][q][x] = r->total[q][x] ? 100.0 * r->correct[q][x] / r->total[q][x] : NAN;
            }
            values[nv++] = acc[k][q], values[nv++] = tot[k][q], values[nv++] = &r->p[q];
        }
    }
    return append_row(m, &m->tables[TABLE_PROBE_KINDS], step, values, err);
}

int metrics_log_gates(Metrics *m, long step, const float *eff_static, const float *eff_window,
                      const float *profile, char *err) {
    if (!m) return set_err(err, "metrics: no metrics file is open");
    if (m->shape.has_gates && (!eff_static || !eff_window || !profile))
        return set_err(err, "%s: /gates step %ld: expected eff_static, eff_window and profile arrays",
                       m->path, step);
    const void *values[] = {eff_static, eff_window, profile};
    return append_row(m, &m->tables[TABLE_GATES], step, values, err);
}
