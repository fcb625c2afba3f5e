/* ./train --eval CKPT with an analysis flag (analysis/analysis.h): argument checks, the
 * checkpoint and probe set, gate cycling, KV-head knockout and the filler sweep, their
 * printed tables and their groups in analysis.h5.
 *
 * Order of work: every flag and input file is checked against the checkpoint's config before
 * anything is evaluated or written (exit 2 with one line naming the flag or file); the
 * analysis file is opened only once all results are in memory.
 *
 * Gate cycling: the clean model (delta = 0) is evaluated once; its accuracies folded by phase
 * A_0(phi) give the paper's prediction A_delta(r) ~ A_0((r - delta) mod S) for each residue r
 * (phi = r mod S; the prediction of a residue is the clean accuracy of the phase it is moved
 * from). Gate cycling rolls every head's gates, so its curves are not per head: folded by KV
 * head 0's grid (o_0 = 0, t_K mod S), as the plain probe's acc_phase. Choice where the issue is ambiguous: --gate-cycle takes 0..W (W is a full roll, the
 * identity, accepted so that delta = W can be checked against delta = 0); `all` is 0..S-1.
 *
 * Knockout: relative change 100 (A_ko(r) - A_clean(r)) / A_clean(r) per residue, per phase
 * (the same on the counts folded by phase: the knocked-out KV head g's own phase (t_K - o_g) mod S,
 * docs/spec.md §2b, o_g = 0 on the aligned grid; stored with grid_offset [G] and phase_of_residue
 * [G, P]) and of the mean over residues; NaN where the clean
 * accuracy is 0. Default calibration set: PROBE with ".bin" replaced by ".calib.bin" when that
 * file exists, otherwise one built by tools/make-probe (found beside ./train) with the probe's
 * recorded builder options and seed + 1 into a temporary file (synthetic vocabulary only: a
 * tokenizer-built probe needs --calib). The calibration set must share no prompt with the
 * evaluated set (checked token for token). */
#include "analysis/analysis.h"
#include "common/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/probe.h"
#include "kernels/kernels.h"
#include "trainer/probe_bootstrap.h"
#include "trainer/chunk_phase.h"
#include "trainer/run_config.h"
#include "common/errors.h"
#include "common/interrupt.h"
#include "common/optval.h"
#include "model/model.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "analysis/analysis_h5.h"
#include "trainer/checkpoint.h"
#include "trainer/ckpt_source.h"
#include "trainer/comm.h"
#include "trainer/evaluate.h"
#include "analysis/filler_sweep.h"
#include "analysis/interventions.h"
#include "analysis/indexer_stats.h"

typedef struct {
    const char *ckpt, *probe, *calib, *out, *gate_cycle, *layers, *knockout, *filler;
    int indexer_stats;              /* --indexer-stats */
    char **overrides;               /* [argc] */
    int n_over;
} Args;

typedef struct {
    Args a;
    CkptSource src;                 /* the checkpoint (or weights-only directory), trainer/ckpt_source.h */
    Config cfg;                     /* src.cfg */
    const Backend *be;
    Model *m;
    TrainState st;
    ProbeSet *ps;
    int T, micro;
    char *out_path;                 /* --out, or CKPT/analysis.h5 */
} Ctx;

static const char *const ANALYSIS_FLAGS[] = {"--gate-cycle", "--knockout", "--filler-sweep", "--calib", "--layers", "--indexer-stats"};
enum { N_ANALYSIS_FLAGS = 6 };

int analysis_requested(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        for (int f = 0; f < N_ANALYSIS_FLAGS; f++)
            if (!strcmp(argv[i], ANALYSIS_FLAGS[f])) return 1;
    return 0;
}

static int usage_error(const char *fmt, ...) {
    char buf[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "phaselab: %s\n", buf);
    return 2;
}

static int parse_args(int argc, char **argv, Args *a) {
    memset(a, 0, sizeof *a);
    a->ckpt = argv[0];
    if (!(a->overrides = malloc(sizeof(char *) * (size_t)argc))) { fprintf(stderr, "phaselab: --eval: out of memory\n"); return 1; }
    for (int i = 1; i < argc; i++) {
        const char **slot = NULL;
        const char *o = argv[i];
        if (!strcmp(o, "--probe")) slot = &a->probe;
        else if (!strcmp(o, "--calib")) slot = &a->calib;
        else if (!strcmp(o, "--out")) slot = &a->out;
        else if (!strcmp(o, "--gate-cycle")) slot = &a->gate_cycle;
        else if (!strcmp(o, "--layers")) slot = &a->layers;
        else if (!strcmp(o, "--knockout")) slot = &a->knockout;
        else if (!strcmp(o, "--filler-sweep")) slot = &a->filler;
        else if (!strcmp(o, "--indexer-stats")) { a->indexer_stats = 1; continue; }
        if (slot) {
            if (i + 1 >= argc) return usage_error("%s needs a value", o);
            *slot = argv[++i];
        } else if (!strcmp(o, "--decode")) {
            return usage_error("--decode: only with a plain --eval (the probe scored through the incremental KV cache); the "
                               "analyses (--gate-cycle, --knockout, --filler-sweep, --indexer-stats) score with the full forward");
        } else if (o[0] == '-' && o[1] == '-') {
            return usage_error("unknown option %s (analyses take --probe, --gate-cycle, --layers, --knockout, --calib, --filler-sweep, --indexer-stats, --out)", o);
        } else {
            a->overrides[a->n_over++] = argv[i];
        }
    }
    int n = !!a->gate_cycle + !!a->knockout + !!a->filler + a->indexer_stats;
    if (n > 1) return usage_error("--gate-cycle, --knockout, --filler-sweep and --indexer-stats: give one analysis per call");
    if (n == 0) return usage_error("%s needs one of --gate-cycle, --knockout, --filler-sweep, --indexer-stats", a->calib ? "--calib" : "--layers");
    if (a->layers && !a->gate_cycle) return usage_error("--layers: only with --gate-cycle");
    if (a->calib && !a->knockout) return usage_error("--calib: only with --knockout");
    if ((a->gate_cycle || a->knockout) && !a->probe) {
        /* the run's own probe set (eval.probe) is taken when --probe is absent: resolved later */
    }
    return 0;
}

/* ---- set-up: config, then (after the flag checks) model, checkpoint, probe ---- */

/* The checkpoint's config (config.ini, or a weights-only directory's config.json) with the
 * overrides; nothing is loaded or verified yet. */
static int load_config_only(Ctx *c) {
    char err[ERR_LEN];
    int rc = ckpt_source_open(&c->src, c->a.ckpt, c->a.n_over, c->a.overrides, stdout, err);
    if (rc) { fprintf(stderr, "phaselab: %s\n", err); return rc == -2 ? 2 : 1; }
    c->cfg = c->src.cfg;
    c->st.step = c->src.st.step;
    c->T = c->cfg.data.seq_len;
    c->micro = c->cfg.train.micro_batch;
    if (c->micro > KO_MAX_BATCH) c->micro = KO_MAX_BATCH;
    size_t n = strlen(c->a.out ? c->a.out : c->a.ckpt) + sizeof "/analysis.h5";
    if (!(c->out_path = malloc(n))) { fprintf(stderr, "phaselab: out of memory\n"); return 1; }
    if (c->a.out) snprintf(c->out_path, n, "%s", c->a.out);
    else snprintf(c->out_path, n, "%s/analysis.h5", c->a.ckpt);
    if (ah5_check_target(c->out_path, c->a.out != NULL, err)) return usage_error("%s%s", c->a.out ? "--out " : "", err);   /* before any work */
    return 0;
}

/* The probe set of --probe (relative to the current directory) or the checkpoint's eval.probe
 * (relative to its run's directory); *path is malloc'd. Exit status 2 when there is none or it
 * cannot be read. */
static int probe_path_of(Ctx *c, const char *flag, char **path) {
    char err[ERR_LEN];
    if (ckpt_source_probe_path(&c->src, c->a.probe, path, stdout, err)) return usage_error("%s", err);
    if (!*path) return usage_error("%s: needs --probe FILE (or eval.probe in the checkpoint's config)", flag);
    return 0;
}

/* Loads a probe (or calibration) set and checks it against the checkpoint: vocabulary, prompt
 * length (probe_set_load) and tokenizer fingerprint. */
static int load_probe_checked(const Ctx *c, const char *flag, const char *path, ProbeSet **ps) {
    char err[ERR_LEN];
    if (probe_set_load(ps, path, (uint32_t)c->cfg.model.vocab_size, c->T, err))
        return usage_error("%s %s: %s (the checkpoint %s: vocab_size %d, data.seq_len %d)", flag, path, err, c->src.config_path,
                           c->cfg.model.vocab_size, c->T);
    if (ckpt_source_check_probe(&c->src, flag, *ps, stdout, err)) {
        probe_set_free(*ps);
        *ps = NULL;
        return usage_error("%s", err);
    }
    return 0;
}

static int load_model(Ctx *c) {
    char err[ERR_LEN];
    c->be = backend_select(c->cfg.run.device, c->cfg.run.threads, 0, err);
    if (!c->be) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
    c->m = model_create(&c->cfg.model, c->be, c->micro, c->T, err);
    if (!c->m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    if (ckpt_source_load(&c->src, c->m, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    c->st = c->src.st;
    if (c->src.has_state) printf("checkpoint %s: step %ld, %ld tokens\n", c->a.ckpt, c->st.step, c->st.tokens);
    else printf("checkpoint %s: weights only (step %ld)\n", c->a.ckpt, c->st.step);
    return 0;
}

/* hits: NULL, or [prompts of ps]: each prompt's outcome (1 right), for the bootstrap intervals;
 * chunk: NULL, or chunk-phase counts to fill (learned boundaries) */
static int eval_probe_chunked(Ctx *c, const ProbeSet *ps, ProbeBatchFn fn, void *ctx, const char *label, ProbeResult *pr,
                              ChunkPhaseCounts *chunk, unsigned char *hits) {
    char err[ERR_LEN];
    fflush(stdout);
    if (probe_evaluate_hits(c->m, ps, c->T, c->micro, fn, ctx, label, chunk, hits, pr, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    probe_result_set_fold(pr, &c->cfg.model);
    probe_result_finalize(pr);
    return 0;
}

static int eval_probe(Ctx *c, const ProbeSet *ps, ProbeBatchFn fn, void *ctx, const char *label, ProbeResult *pr,
                      unsigned char *hits) {
    return eval_probe_chunked(c, ps, fn, ctx, label, pr, NULL, hits);
}

/* Validation loss by residue of the current weights into out [P] (and *mean); 0 when done, 1
 * when the checkpoint's config has no validation set (out untouched). */
static int eval_val(Ctx *c, ValSet *val, double *mean, double *out) {
    if (!val) return 1;
    char err[ERR_LEN];
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    EvalResult r;
    if (evaluate_validation(c->m, &c->cfg.model, val, c->T, c->micro, c->cfg.eval.residues, c->cfg.data.loss_targets, &comm, 0, &r, err)) {
        fprintf(stderr, "phaselab: validation skipped: %s\n", err);
        return 1;
    }
    *mean = r.loss;
    for (int i = 0; i < r.residues; i++) out[i] = r.loss_by_residue[i];
    eval_result_free(&r);
    return 0;
}

/* Accuracy (percent) of the counts folded by a phase map phase_of [P] (head_phase_map: the phase
 * (t_K - o) mod S of a KV head with grid offset o, docs/spec.md §2b; NULL: t_K mod S, the aligned grid
 * and head 0): out [S]; NaN where a phase has no prompts. */
static void fold_acc(const ProbeResult *pr, int p, int S, const int *phase_of, double *out) {
    long fc[PROBE_MAX_RESIDUES], ft[PROBE_MAX_RESIDUES];
    if (phase_of ? fold_by_phase_map(pr->correct[p], pr->total[p], pr->residues, S, phase_of, fc, ft)
                 : fold_by_phase(pr->correct[p], pr->total[p], pr->residues, S, fc, ft)) {
        for (int s = 0; s < S; s++) out[s] = NAN;
        return;
    }
    for (int s = 0; s < S; s++) out[s] = ft[s] ? 100.0 * fc[s] / ft[s] : NAN;
}

static double rel_change(double ko, double clean) {
    return (isfinite(clean) && clean > 0 && isfinite(ko)) ? 100.0 * (ko - clean) / clean : NAN;
}

static double pearson(const double *x, const double *y, int n) {
    double mx = 0, my = 0;
    int k = 0;
    for (int i = 0; i < n; i++) if (isfinite(x[i]) && isfinite(y[i])) mx += x[i], my += y[i], k++;
    if (k < 2) return NAN;
    mx /= k, my /= k;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && isfinite(y[i])) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
    return (sxx > 0 && syy > 0) ? sxy / sqrt(sxx * syy) : NAN;
}

/* Not per head (the probe's accuracy, gate cycling): folded by KV head 0's grid, o_0 = 0, which is
 * t_K mod S on every grid. */
#define PHASE_AXIS_MODEL "phase t_K mod S of the target key (KV head 0's grid: with grid = staggered the other heads' phases differ)"
#define PHASE_AXIS_HEAD "phase (t_K - o_g) mod S of the target key on the knocked-out KV head g's own grid (docs/spec.md §2b; o_g = 0 on the aligned grid)"


/* Also the probe set's provenance: path as given and absolute, sha256, builder seed, prompts per
 * residue; decode: 1 when scored through the incremental KV cache. */
static void store_probe_common(AnalysisH5 *h, const char *probe_path, const ProbeSet *ps, int decode, int P, int S,
                               const char *phase_label) {
    /* [P] and [S]: S (the stride, up to 65536) may exceed the probe's P */
    long proto[PROBE_N_PROTOCOLS] = {0, 1}, *res = malloc(sizeof(long) * (size_t)(P + S)), *ph = res ? res + P : NULL;
    if (!res) {
        fprintf(stderr, "phaselab: warning: out of memory for the residue and phase axes (%d + %d values): stored without them\n", P, S);
        return;
    }
    for (int r = 0; r < P; r++) res[r] = r;
    for (int s = 0; s < S; s++) ph[s] = s;
    ah5_attr_str(h, "probe", probe_path);
    ah5_input_file(h, "probe", probe_path);
    ah5_attr_long(h, "probe_seed", (long)probe_set_builder(ps).seed);
    ah5_attr_long(h, "probe_per_residue", (long)probe_set_builder(ps).per_residue);
    ah5_attr_long(h, "decode", decode);
    ah5_attr_long(h, "residues", P);
    ah5_attr_long(h, "phase_period", S);
    ah5_axis_long(h, "protocol", proto, PROBE_N_PROTOCOLS, "probe protocol: 0 = pp (prefix padding), 1 = ip (in-sequence padding)");
    ah5_axis_long(h, "residue", res, P, "residue t_K mod P of the target key");
    ah5_axis_long(h, "phase", ph, S, phase_label);
    free(res);
}

/* ---- the validation loss of plain ./train --eval (docs/spec.md §4.8) ---- */

static void store_loss_stats(AnalysisH5 *h, const LossStats *st, const char *axis, const char *what) {
    char name[64], long_name[160];
    int K = st->K;
    double *tok = malloc(sizeof(double) * (size_t)K);
    const char *ax[] = {axis};            /* val_residue or val_phase */
    const char *g = axis + 4;             /* residue or phase */
    snprintf(name, sizeof name, "val_loss_by_%s", g);
    snprintf(long_name, sizeof long_name, "validation cross-entropy by %s", what);
    ah5_data(h, name, st->mean, 1, (int[]){K}, ax, long_name, "nats");
    snprintf(name, sizeof name, "val_loss_by_%s_errors", g);
    snprintf(long_name, sizeof long_name, "bootstrap standard error of the validation cross-entropy by %s", what);
    ah5_data(h, name, st->se, 1, (int[]){K}, ax, long_name, "nats");
    if (tok) {
        for (int k = 0; k < K; k++) tok[k] = st->tokens[k];
        snprintf(name, sizeof name, "val_tokens_by_%s", g);
        snprintf(long_name, sizeof long_name, "scored validation tokens by %s", what);
        ah5_data(h, name, tok, 1, (int[]){K}, ax, long_name, "tokens");
    }
    free(tok);
    snprintf(name, sizeof name, "val_F_%s", g);
    ah5_attr_double(h, name, st->F);
    snprintf(name, sizeof name, "val_df1_%s", g);
    ah5_attr_long(h, name, st->df1);
    snprintf(name, sizeof name, "val_df2_%s", g);
    ah5_attr_long(h, name, st->df2);
    snprintf(name, sizeof name, "val_p_%s", g);
    ah5_attr_double(h, name, st->p);
}

/* The validation part of an --eval group: axes val_residue [P] and val_phase [S], the loss by
 * residue and by phase with their bootstrap standard errors (SIGNAL_errors) and token counts, and
 * the bootstrap's n, B, seed and the tests as attributes. */
/* The boundary statistics of learned chunk boundaries into a subgroup (trainer/boundary_stats.h). */
static int write_boundary_stats(long long group, const void *ctx, char *err) {
    return boundary_stats_write_h5((const BoundaryStats *)ctx, (hid_t)group, err);
}

static void store_val_part(AnalysisH5 *h, const char *val_glob, const EvalResult *r) {
    int P = r->by_residue.K, S = r->by_phase.K;
    long *idx = malloc(sizeof(long) * (size_t)(P + S));
    if (idx) {
        for (int i = 0; i < P; i++) idx[i] = i;
        ah5_axis_long(h, "val_residue", idx, P, "residue r = t mod P of the predicting position t (validation loss)");
        for (int i = 0; i < S; i++) idx[P + i] = i;
        ah5_axis_long(h, "val_phase", idx + P, S, "phase t mod S of the predicting position t (S: the stride; 8 for full attention)");
    }
    free(idx);
    ah5_attr_str(h, "val", val_glob);
    ah5_attr_long(h, "val_residues", P);
    ah5_attr_long(h, "val_phase_period", S);
    ah5_attr_double(h, "val_loss", r->loss);
    ah5_attr_double(h, "val_loss_se", r->by_residue.overall_se);
    ah5_attr_long(h, "val_windows", r->by_residue.units);
    ah5_attr_long(h, "val_tokens", r->tokens);
    ah5_attr_long(h, "val_bootstrap_replicates", r->by_residue.B);
    ah5_attr_long(h, "val_bootstrap_seed", (long)r->by_residue.seed);
    ah5_attr_str(h, "val_test", "Hotelling T^2 on the K'-1 loss contrasts with the bootstrap covariance, F(K'-1, n-K'+1), "
                                "docs/spec.md 4.8");
    store_loss_stats(h, &r->by_residue, "val_residue", "residue t mod P");
    store_loss_stats(h, &r->by_phase, "val_phase", "phase t mod S");
    if (r->has_boundaries) ah5_subgroup(h, "boundaries", write_boundary_stats, &r->bounds);   /* docs/spec.md §6.5 */
}

/* ---- plain probe evaluation -> /probe_NNN ---- */

/* The per-kind phase folds (trainer/kind_fold.h; layout in analysis/analysis.h). */
static void store_kind_folds(AnalysisH5 *h, const KindFold *kf, int n) {
    char names[128] = "", key[96], ax_name[48], what[200];
    for (int k = 0; k < n; k++) {
        const KindFold *f = &kf[k];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? "," : "", f->name);
        snprintf(key, sizeof key, "kind_%s_stride", f->name), ah5_attr_long(h, key, f->S);
        snprintf(key, sizeof key, "kind_%s_grid_offset", f->name), ah5_attr_long(h, key, f->o);
        snprintf(key, sizeof key, "kind_%s_layers", f->name), ah5_attr_long(h, key, f->n_layers);
        snprintf(key, sizeof key, "kind_%s_first_layer", f->name), ah5_attr_long(h, key, f->first_layer);
        if (!f->ok) continue;
        const int S = f->S;
        long *ph = malloc(sizeof(long) * (size_t)S);
        double *c = malloc(sizeof(double) * 2 * S), *t = malloc(sizeof(double) * 2 * S), *a = malloc(sizeof(double) * 2 * S);
        if (ph && c && t && a) {
            double test[2][3];
            for (int s = 0; s < S; s++) ph[s] = s;
            for (int p = 0; p < 2; p++) {
                for (int s = 0; s < S; s++) {
                    c[p * S + s] = f->correct[p][s], t[p * S + s] = f->total[p][s];
                    a[p * S + s] = f->total[p][s] ? 100.0 * f->correct[p][s] / f->total[p][s] : NAN;
                }
                test[p][0] = f->test[p].chi2, test[p][1] = f->test[p].df, test[p][2] = f->test[p].p;
            }
            snprintf(ax_name, sizeof ax_name, "phase_%s", f->name);
            snprintf(what, sizeof what, "phase (t_K - o) mod S of the target key on the %s layers' grid (S %d, o %d)", f->name, S, f->o);
            ah5_axis_long(h, ax_name, ph, S, what);
            const char *ax[] = {"protocol", ax_name}, *ax_t[] = {"protocol", NULL};
            snprintf(key, sizeof key, "kind_%s_correct", f->name), ah5_data(h, key, c, 2, (int[]){2, S}, ax, "prompts scored correct, folded by the kind's phase", NULL);
            snprintf(key, sizeof key, "kind_%s_total", f->name), ah5_data(h, key, t, 2, (int[]){2, S}, ax, "prompts, folded by the kind's phase", NULL);
            snprintf(key, sizeof key, "kind_%s_acc", f->name), ah5_data(h, key, a, 2, (int[]){2, S}, ax, "top-1 accuracy folded by the kind's phase", "%");
            snprintf(key, sizeof key, "kind_%s_test", f->name);
            ah5_data(h, key, &test[0][0], 2, (int[]){2, 3}, ax_t, "phase-effect test by the kind's phase per protocol: chi2, df, p (docs/spec.md §3.7)", NULL);
        }
        free(ph), free(c), free(t), free(a);
    }
    if (n) ah5_attr_str(h, "kinds", names);
}

/* The probe by chunk phase of learned boundaries (layout in analysis/analysis.h). */
static void store_chunk_phases(AnalysisH5 *h, const ChunkPhaseCounts *c) {
    const int L = c->layers, K = c->window + 1;
    const size_t n = (size_t)2 * L * K;
    long *ax_l = malloc(sizeof(long) * (size_t)L), *ax_k = malloc(sizeof(long) * (size_t)K);
    double *cor = malloc(sizeof(double) * n), *tot = malloc(sizeof(double) * n), *test = malloc(sizeof(double) * 2 * L * 3);
    if (ax_l && ax_k && cor && tot && test) {
        for (int l = 0; l < L; l++) ax_l[l] = l;
        for (int k = 0; k < K; k++) ax_k[k] = k;
        for (size_t i = 0; i < n; i++) cor[i] = (double)c->correct[i], tot[i] = (double)c->total[i];
        for (int i = 0; i < 2 * L; i++)
            test[3 * i] = c->test[i].chi2, test[3 * i + 1] = c->test[i].df, test[3 * i + 2] = c->test[i].p;
        ah5_axis_long(h, "layer", ax_l, L, "decoder layer");
        ah5_axis_long(h, "chunk_phase", ax_k, K,
                      "chunk phase of the target key: its slot W-1-(e-t_K) in the entry ending at e; W: unpooled");
        const char *ax[] = {"protocol", "layer", "chunk_phase"}, *ax_t[] = {"protocol", "layer", NULL};
        ah5_data(h, "chunk_correct", cor, 3, (int[]){2, L, K}, ax, "prompts scored correct, by chunk phase of the key", NULL);
        ah5_data(h, "chunk_total", tot, 3, (int[]){2, L, K}, ax, "prompts, by chunk phase of the key (not balanced)", NULL);
        ah5_data(h, "chunk_acc", c->acc, 3, (int[]){2, L, K}, ax, "top-1 accuracy by chunk phase of the key", "%");
        ah5_data(h, "chunk_acc_lo", c->lo, 3, (int[]){2, L, K}, ax, "95% Wilson interval of chunk_acc, lower bound", "%");
        ah5_data(h, "chunk_acc_hi", c->hi, 3, (int[]){2, L, K}, ax, "95% Wilson interval of chunk_acc, upper bound", "%");
        ah5_data(h, "chunk_test", test, 3, (int[]){2, L, 3}, ax_t,
                 "homogeneity across chunk phases 0..W-1 per protocol and layer: chi2, df, p (docs/spec.md §3.7)", NULL);
        ah5_attr_long(h, "chunk_window", c->window);
    }
    free(ax_l), free(ax_k), free(cor), free(tot), free(test);
}

int analysis_store_probe(const char *path, const char *ckpt, long step, const char *overrides, const char *probe_path,
                         const ProbeSet *ps,
                         int decode, const ProbeResult *pr, const char *val_glob, const EvalResult *val, const KindFold *kf,
                         int nkf, const ChunkPhaseCounts *chunk, char *err) {
    AnalysisH5 *h = ah5_begin(path, "probe", ckpt, step, overrides, err);
    if (!h) return -1;
    if (val) store_val_part(h, val_glob, val);
    int P = pr->residues, S = pr->fold > 0 ? pr->fold : 8;
    ah5_attr_str(h, "layout", probe_set_layout(ps) == PROBE_LAYOUT_NEEDLE ? "needle" : "lookup");
    store_probe_common(h, probe_path, ps, decode, P, S, PHASE_AXIS_MODEL);
    double *acc = malloc(sizeof(double) * 2 * P), *cnt = malloc(sizeof(double) * 2 * P), *tot = malloc(sizeof(double) * 2 * P);
    double *accp = malloc(sizeof(double) * 2 * S), test[2][4];
    for (int p = 0; p < 2; p++) {
        for (int r = 0; r < P; r++) acc[p * P + r] = pr->acc[p][r], cnt[p * P + r] = pr->correct[p][r], tot[p * P + r] = pr->total[p][r];
        fold_acc(pr, p, S, NULL, accp + p * S);
        test[p][0] = pr->test_residue[p].chi2, test[p][1] = pr->test_residue[p].p;
        test[p][2] = pr->test_phase[p].chi2, test[p][3] = pr->test_phase[p].p;
    }
    const char *ax_r[] = {"protocol", "residue"}, *ax_s[] = {"protocol", "phase"}, *ax_t[] = {"protocol", NULL};
    ah5_data(h, "acc", acc, 2, (int[]){2, P}, ax_r, "top-1 accuracy A(r) by residue (needle: every value token right)", "%");
    ah5_data(h, "correct", cnt, 2, (int[]){2, P}, ax_r, "prompts scored correct", NULL);
    ah5_data(h, "total", tot, 2, (int[]){2, P}, ax_r, "prompts", NULL);
    ah5_data(h, "acc_phase", accp, 2, (int[]){2, S}, ax_s, "top-1 accuracy folded by phase", "%");
    ah5_data(h, "phase_test", &test[0][0], 2, (int[]){2, 4}, ax_t,
             "phase-effect test per protocol: chi2 across residues, p, chi2 folded by phase, p", NULL);
    store_kind_folds(h, kf, nkf);
    if (chunk) store_chunk_phases(h, chunk);
    ah5_signal(h, "acc", ax_r, 2);
    free(acc), free(cnt), free(tot), free(accp);
    return ah5_end(h, err);
}

/* ---- plain validation loss (no probe) -> /val_NNN ---- */

int analysis_store_val(const char *path, const char *ckpt, long step, const char *overrides, const char *val_glob,
                       const EvalResult *r,
                       char *err) {
    AnalysisH5 *h = ah5_begin(path, "val", ckpt, step, overrides, err);
    if (!h) return -1;
    store_val_part(h, val_glob, r);
    const char *ax[] = {"val_residue"};
    ah5_signal(h, "val_loss_by_residue", ax, 1);
    return ah5_end(h, err);
}

/* ---- gate cycling ---- */

static int run_gate_cycle(Ctx *c) {
    const ModelConfig *mc = &c->cfg.model;
    char err[ERR_LEN];
    const int L = mc->n_layers, mixed = layer_schedule_mixed(mc);
    int *mask = calloc((size_t)L, sizeof(int));       /* [L] the chosen layers */
    if (!mask) { fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    const char *layers_text = c->a.layers ? c->a.layers : "all";   /* stored as given, any length */
    if (c->a.layers) {
        /* layers 0..L-1 or kind names (csa, hca, ...), comma-separated, at least one, no empty element */
        if (gate_cycle_layers(mc, c->a.layers, mask, err)) { free(mask); return usage_error("%s", err); }
    } else {
        for (int l = 0; l < L; l++) mask[l] = gate_cycle_default_layer(mc, l);   /* every layer; with a schedule those with gates */
    }
    /* S: the common period of the chosen layers' strides (one kind: the stride, W = S) */
    int S = 0, nd = 0;
    if (gate_cycle_check(mc, mask, "--gate-cycle", &S, err)) { free(mask); return usage_error("%s", err); }
    const int W = mixed ? S : mc->window;
    /* [S] deltas (all) or one; sized by the config (stride up to 65536) */
    int *deltas = malloc(sizeof(int) * (size_t)(S + 1));
    if (!deltas) { free(mask); fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    if (!strcmp(c->a.gate_cycle, "all")) {
        for (int d = 0; d < S; d++) deltas[nd++] = d;
    } else {
        long long v;
        if (optval_int(c->a.gate_cycle, 0, W, &v)) {
            if (mixed)
                return usage_error("--gate-cycle: '%s' is not allowed: expected an integer delta in 0..%d (the chosen layers' common "
                                   "period S = %d; S is the identity) or all", c->a.gate_cycle, S, S);
            return usage_error("--gate-cycle: '%s' is not allowed: expected an integer delta in 0..%d (W = %d; W is the identity) or all", c->a.gate_cycle, W, W);
        }
        deltas[nd++] = (int)v;
    }
    char *probe_path = NULL;
    if (probe_path_of(c, "--gate-cycle", &probe_path)) return 2;
    if (load_probe_checked(c, "--probe", probe_path, &c->ps)) return 2;
    int P = probe_set_residues(c->ps);
    if (P % S)   /* the prediction A_0((r - delta) mod S) folds the residues by phase: S | P */
        return usage_error("--probe %s: %d residues, not a multiple of the stride S = %d of %s: gate cycling folds the residues "
                           "by phase t_K mod S; expected a probe built with tools/make-probe --residues a multiple of %d",
                           probe_path, P, S, c->src.config_path, S);
    /* validation loss by residue per delta too, when the config names a validation set: data.val
     * resolved as ./train --eval does (the run's directory for the checkpoint's own relative glob) */
    ValSet *val = NULL;
    char *val_glob = NULL;
    if (ckpt_source_val(&c->src, &val_glob, stdout, err)) return usage_error("%s", err);
    if (val_glob) {
        if (val_set_open(&val, val_glob, c->T, (uint32_t)mc->vocab_size, c->cfg.eval.val_tokens / c->T, err))
            return usage_error("validation: %s (data.val = %s; nothing was evaluated; name other shards with data.val=GLOB, "
                               "or data.val= for none)", err, val_glob);
        if (ckpt_source_check_tokenizer(&c->src, "data.val", val_glob, val_set_tokenizer(val), stdout, err))
            return usage_error("%s", err);
    }
    int rc = load_model(c);
    if (rc) return rc;

    const TensorTable *tt = model_tensors(c->m);
    float *orig = malloc(sizeof(float) * tt->n_floats), *work = malloc(sizeof(float) * tt->n_floats);
    ProbeResult clean, *res = calloc((size_t)nd, sizeof(ProbeResult));
    int VP = c->cfg.eval.residues;
    double *vloss = malloc(sizeof(double) * nd * VP), *vmean = malloc(sizeof(double) * nd), vclean_mean = NAN;
    double *vclean = malloc(sizeof(double) * VP), *a0 = malloc(sizeof(double) * PROBE_N_PROTOCOLS * S);   /* a0 [2, S] */
    if (!orig || !work || !res || !vloss || !vmean || !vclean || !a0) {
        fprintf(stderr, "phaselab: --gate-cycle: out of memory for %zu weights and %d deltas\n", tt->n_floats, nd);
        return 1;
    }
    model_download_params(c->m, orig);
    if (mixed) {
        printf("gate cycling: layers %s (", layers_text);
        for (int l = 0, first = 1; l < L; l++)
            if (mask[l]) {
                const ModelConfig lc = layer_config(mc, l);
                printf("%s%d %s W%d/S%d", first ? "" : ", ", l, layer_kind_names[layer_kind(mc, l)], lc.window, lc.stride);
                first = 0;
            }
        printf("), common period %d, probe %s (%d prompts)\n", S, probe_path, probe_set_count(c->ps));
    } else {
        printf("gate cycling: W = S = %d, layers %s, probe %s (%d prompts)\n", S, layers_text, probe_path, probe_set_count(c->ps));
    }
    /* each delta's prompt outcomes [nd, prompts]: the mean's bootstrap interval (trainer/probe_bootstrap.h) */
    const int n_prompts = probe_set_count(c->ps);
    unsigned char *hits = malloc((size_t)nd * (n_prompts ? n_prompts : 1)), *clean_hits = malloc(n_prompts ? n_prompts : 1);
    double *mean_ci = malloc(sizeof(double) * nd * 2 * 3);   /* [nd, 2, {mean, lo, hi}] */
    if (!hits || !clean_hits || !mean_ci) { fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    if (eval_probe(c, c->ps, NULL, NULL, "gate cycle: clean (delta 0)", &clean, clean_hits)) return 1;
    clean.fold = S;                      /* the phase test on the fold the curves use (a stack: S*, not the model's lcm) */
    probe_result_finalize(&clean);
    for (int p = 0; p < 2; p++) {
        char chance[256];
        if (probe_not_retrieving(&clean, p, chance, sizeof chance))
            printf("%s clean model (delta 0): %s; the measured and predicted phase curves below say nothing about phase\n",
                   probe_protocol_name(p), chance);
    }
    for (int i = 0; i < nd * VP; i++) vloss[i] = NAN;
    for (int i = 0; i < nd; i++) vmean[i] = NAN;
    int have_val = eval_val(c, val, &vclean_mean, vclean) == 0;
    for (int p = 0; p < 2; p++) fold_acc(&clean, p, S, NULL, a0 + (size_t)p * S);   /* not per head: head 0's grid */
    for (int k = 0; k < nd; k++) {
        int d = deltas[k];
        if (d == 0) {                    /* delta W (also = 0 mod S) runs the whole path: the identity check below */
            res[k] = clean;
            memcpy(hits + (size_t)k * n_prompts, clean_hits, (size_t)n_prompts);
            if (have_val) { vmean[k] = vclean_mean; memcpy(vloss + (size_t)k * VP, vclean, sizeof(double) * VP); }
            continue;
        }
        memcpy(work, orig, sizeof(float) * tt->n_floats);
        if (gate_cycle_apply(tt, work, mc, d, mask, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
        model_upload_params(c->m, work);
        model_params_updated(c->m);
        char label[64];
        snprintf(label, sizeof label, "gate cycle: delta %d (%d/%d)", d, k + 1, nd);
        if (eval_probe(c, c->ps, NULL, NULL, label, &res[k], hits + (size_t)k * n_prompts)) return 1;
        res[k].fold = S;
        probe_result_finalize(&res[k]);
        if (have_val) eval_val(c, val, &vmean[k], vloss + (size_t)k * VP);
    }
    if (val) val_set_close(val);
    model_upload_params(c->m, orig);
    model_params_updated(c->m);

    /* print */
    double *meas = malloc(sizeof(double) * nd * 2 * P), *pred = malloc(sizeof(double) * nd * 2 * P);
    double *measp = malloc(sizeof(double) * nd * 2 * S), *predp = malloc(sizeof(double) * nd * 2 * S);
    double *corr = malloc(sizeof(double) * nd * 2), *ptest = malloc(sizeof(double) * nd * 2), *maxdev = malloc(sizeof(double) * nd * 2);
    if (!meas || !pred || !measp || !predp || !corr || !ptest || !maxdev) {
        fprintf(stderr, "phaselab: --gate-cycle: out of memory for the %d x %d result tables\n", nd, P > S ? P : S);
        return 1;
    }
    for (int k = 0; k < nd; k++) {
        int d = deltas[k];
        for (int p = 0; p < 2; p++) {
            double *mp = measp + (k * 2 + p) * S, *pp = predp + (k * 2 + p) * S;
            fold_acc(&res[k], p, S, NULL, mp);
            for (int s = 0; s < S; s++) pp[s] = a0[(size_t)p * S + ((s - d) % S + S) % S];
            for (int r = 0; r < P; r++) {
                meas[(k * 2 + p) * P + r] = res[k].acc[p][r];
                pred[(k * 2 + p) * P + r] = a0[(size_t)p * S + ((r - d) % S + S) % S];
            }
            corr[k * 2 + p] = pearson(mp, pp, S);
            ptest[k * 2 + p] = res[k].test_phase[p].p;
            double md = 0;
            for (int s = 0; s < S; s++) if (isfinite(mp[s]) && isfinite(pp[s]) && fabs(mp[s] - pp[s]) > md) md = fabs(mp[s] - pp[s]);
            maxdev[k * 2 + p] = md;
            double *ci = mean_ci + (k * 2 + p) * 3;
            ci[0] = res[k].mean[p];
            probe_mean_ci(c->ps, p, hits + (size_t)k * n_prompts, &ci[1], &ci[2]);
        }
    }
    printf("mean: the unweighted mean of the residues' accuracies, 95%% interval: stratified bootstrap over the prompts "
           "(B = %d; pp %d, ip %d prompts)\n", PROBE_BOOT_B, probe_set_count_protocol(c->ps, 0), probe_set_count_protocol(c->ps, 1));
    for (int k = 0; k < nd; k++) {
        printf("\ndelta %d: accuracy %% folded by phase t_K mod %d, measured A_%d(phi) and predicted A_0((phi - %d) mod %d)\n",
               deltas[k], S, deltas[k], deltas[k], S);
        printf("%-16s", "phase");
        for (int s = 0; s < S; s++) printf(" %6d", s);
        printf(" | corr  max|dev|  mean [95%% interval]  phase-test p\n");
        for (int p = 0; p < 2; p++) {
            if (!res[k].present[p]) continue;
            printf("%-3s measured    ", probe_protocol_name(p));
            for (int s = 0; s < S; s++) printf(" %6.1f", measp[(k * 2 + p) * S + s]);
            const double *ci = mean_ci + (k * 2 + p) * 3;
            printf(" | %5.2f  %7.1f  %5.1f [%5.1f, %5.1f]  %.3g%s\n", corr[k * 2 + p], maxdev[k * 2 + p], ci[0], ci[1], ci[2],
                   ptest[k * 2 + p],
                   res[k].test_phase[p].permutations ? " (permutation p: an expected count < 5)" : "");
            printf("%-3s predicted   ", probe_protocol_name(p));
            for (int s = 0; s < S; s++) printf(" %6.1f", predp[(k * 2 + p) * S + s]);
            printf(" |\n");
        }
        if (have_val) {
            printf("validation loss %.6f; by residue t mod %d:", vmean[k], VP);
            for (int i = 0; i < VP; i++) printf(" %.6f", vloss[(size_t)k * VP + i]);
            printf("\n");
        }
        if (nd == 1) {
            printf("\nper residue (delta %d):\n", deltas[k]);
            probe_print_table(stdout, &res[k]);
        }
    }
    /* the identity check: every evaluated delta = 0 mod S (not 0 itself) must give delta 0's counts */
    const char *identity_check = "not run";
    for (int k = 0; k < nd; k++) {
        if (deltas[k] == 0 || deltas[k] % S) continue;
        int same = 1;
        for (int p = 0; p < 2; p++)
            for (int r = 0; r < P; r++)
                same &= res[k].correct[p][r] == clean.correct[p][r] && res[k].total[p][r] == clean.total[p][r];
        printf("identity check: delta %d (= 0 mod %d) reproduces delta 0's counts exactly: %s\n", deltas[k], S, same ? "yes" : "NO");
        identity_check = same && strcmp(identity_check, "fail") ? "pass" : "fail";
    }
    /* store */
    long *dl = malloc(sizeof(long) * (size_t)(nd + (have_val ? VP : 0))), *vr = dl ? dl + nd : NULL;   /* [nd], [VP] */
    if (!dl) { fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    AnalysisH5 *h = ah5_begin(c->out_path, "gate_cycle", c->a.ckpt, c->st.step, c->src.overrides, err);
    if (!h) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    for (int k = 0; k < nd; k++) dl[k] = deltas[k];
    ah5_attr_str(h, "layers", layers_text);
    ah5_attr_str(h, "gate_cycle", c->a.gate_cycle);
    ah5_attr_long(h, "window", W);
    ah5_attr_long(h, "stride", S);                   /* with a schedule: the chosen layers' common period */
    if (mixed) {
        char kinds[256] = "";
        for (int l = 0; l < L; l++)
            if (mask[l]) snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%d:%s", kinds[0] ? "," : "", l, layer_kind_names[layer_kind(mc, l)]);
        ah5_attr_str(h, "cycled_layers", kinds);
        ah5_attr_str(h, "rule", "each chosen layer rolls every block of S_l slots of its gate biases (and per-slot maps) by delta mod S_l; "
                                "phase folded by the common period S of the chosen layers (docs/spec.md §4.1)");
    }
    ah5_attr_str(h, "prediction", "A_delta(r) ~ A_0((r - delta) mod S), A_0 folded by phase");
    ah5_axis_long(h, "delta", dl, nd, "gate-cycling shift delta");
    store_probe_common(h, probe_path, c->ps, 0, P, S, PHASE_AXIS_MODEL);
    const char *ax_r[] = {"delta", "protocol", "residue"}, *ax_s[] = {"delta", "protocol", "phase"}, *ax_2[] = {"delta", "protocol"};
    ah5_data(h, "acc", meas, 3, (int[]){nd, 2, P}, ax_r, "measured top-1 accuracy A_delta(r) of the cycled model", "%");
    ah5_data(h, "predicted", pred, 3, (int[]){nd, 2, P}, ax_r, "predicted accuracy A_0((r - delta) mod S)", "%");
    ah5_data(h, "acc_phase", measp, 3, (int[]){nd, 2, S}, ax_s, "measured accuracy folded by phase", "%");
    ah5_data(h, "predicted_phase", predp, 3, (int[]){nd, 2, S}, ax_s, "predicted accuracy folded by phase", "%");
    ah5_data(h, "correlation", corr, 2, (int[]){nd, 2}, ax_2, "Pearson correlation of measured and predicted phase curves", NULL);
    ah5_data(h, "p_phase", ptest, 2, (int[]){nd, 2}, ax_2, "phase-effect test p-value (folded by phase) of the cycled model", NULL);
    {
        const char *ax_c[] = {"delta", "protocol", "estimate"};
        ah5_data(h, "mean_acc", mean_ci, 3, (int[]){nd, 2, 3}, ax_c,
                 "mean accuracy over residues of the cycled model: estimate, 95% interval low, high (stratified bootstrap "
                 "over the prompts, B = 2000)", "%");
    }
    if (have_val) {
        for (int i = 0; i < VP; i++) vr[i] = i;
        ah5_axis_long(h, "val_residue", vr, VP, "residue t mod P of the predicting position");
        const char *ax_v[] = {"delta", "val_residue"}, *ax_v1[] = {"delta"};
        ah5_data(h, "val_loss_by_residue", vloss, 2, (int[]){nd, VP}, ax_v, "validation cross-entropy by residue of the cycled model", "nats");
        ah5_data(h, "val_loss", vmean, 1, (int[]){nd}, ax_v1, "validation cross-entropy of the cycled model", "nats");
    }
    ah5_data(h, "max_deviation", maxdev, 2, (int[]){nd, 2}, ax_2,
             "largest |measured - predicted| over the phases of the folded curves", "%");
    ah5_attr_str(h, "identity_check", identity_check);
    ah5_signal(h, "acc_phase", ax_s, 3);
    if (ah5_end(h, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }   /* it prints where it stored */
    if (!strcmp(identity_check, "fail")) {
        fprintf(stderr, "phaselab: --gate-cycle: the identity check failed: a delta = 0 mod %d did not reproduce delta 0's "
                        "counts (the result is stored, marked identity_check = fail); the transform or the evaluation is "
                        "not deterministic\n", S);
        return 1;
    }
    free(vloss), free(vmean), free(vclean), free(a0), free(dl), free(deltas), free(mask), free(val_glob), free(probe_path);
    free(meas), free(pred), free(measp), free(predp), free(corr), free(ptest), free(maxdev), free(res), free(orig), free(work);
    free(hits), free(clean_hits), free(mean_ci);
    return 0;
}

/* ---- knockout ---- */

static uint64_t fnv(const int32_t *t, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) { h ^= (uint32_t)t[i]; h *= 1099511628211ull; }
    return h ^ (uint64_t)n;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Prompts of b whose tokens equal a prompt of a. */
static long shared_prompts(const ProbeSet *a, const ProbeSet *b) {
    int na = probe_set_count(a);
    uint64_t *ha = malloc(sizeof(uint64_t) * (size_t)na);
    for (int i = 0; i < na; i++) {
        ProbePrompt p;
        probe_set_prompt(a, i, &p);
        ha[i] = fnv(p.tokens, p.length);
    }
    qsort(ha, (size_t)na, sizeof *ha, cmp_u64);
    long shared = 0;
    for (int i = 0; i < probe_set_count(b); i++) {
        ProbePrompt p;
        probe_set_prompt(b, i, &p);
        uint64_t h = fnv(p.tokens, p.length);
        if (!bsearch(&h, ha, (size_t)na, sizeof *ha, cmp_u64)) continue;
        for (int j = 0; j < na; j++) {      /* confirm token for token (hash hits are rare) */
            ProbePrompt q;
            probe_set_prompt(a, j, &q);
            if (q.length == p.length && !memcmp(q.tokens, p.tokens, sizeof(int32_t) * (size_t)p.length)) { shared++; break; }
        }
    }
    free(ha);
    return shared;
}

/* Directory of the running ./train (for tools/make-probe). */
static void exe_dir(char *out, size_t n) {
    char buf[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (k <= 0) { snprintf(out, n, "."); return; }
    buf[k] = 0;
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    snprintf(out, n, "%s", buf);
}

/* The default calibration set (see the header comment). tmp_out receives the path of a
 * temporary file to remove afterwards ("" when none). Returns 0 or the exit status. */
static int default_calibration(const Ctx *c, const char *probe_path, char **calib_out, char *tmp_out, size_t tn) {
    tmp_out[0] = 0;
    size_t len = strlen(probe_path);
    char *calib = malloc(len + sizeof ".calib.bin" + sizeof "/tmp/phaselab-calib-XXXXXX");
    if (!calib) { fprintf(stderr, "phaselab: --knockout: out of memory\n"); return 1; }
    *calib_out = calib;
    if (len > 4 && !strcmp(probe_path + len - 4, ".bin")) {
        sprintf(calib, "%.*s.calib.bin", (int)(len - 4), probe_path);
        if (access(calib, R_OK) == 0) return 0;
    }
    ProbeBuilder b = probe_set_builder(c->ps);
    if (strcmp(probe_set_fingerprint(c->ps), "synthetic") || b.per_residue == 0)
        return usage_error("--knockout: %s was not built from the synthetic vocabulary by a tools/make-probe that records its options; "
                           "give --calib FILE (the same tools/make-probe options with another --seed)", probe_path);
    char dir[PATH_MAX], tmpl[] = "/tmp/phaselab-calib-XXXXXX";
    exe_dir(dir, sizeof dir);
    int fd = mkstemp(tmpl);
    if (fd < 0) { fprintf(stderr, "phaselab: cannot create a temporary calibration file: %s\n", strerror(errno)); return 1; }
    close(fd);
    snprintf(tmp_out, tn, "%s", tmpl);
    strcpy(calib, tmpl);
    int per = b.per_residue < 16 ? (int)b.per_residue : 16;
    char cmd[3 * PATH_MAX];
    if (b.layout == PROBE_LAYOUT_NEEDLE)
        snprintf(cmd, sizeof cmd, "python3 '%s/tools/make-probe' --synthetic --layout needle --out '%s' --seed %u --per-residue %d "
                 "--residues %d --max-len %d --record-tokens %u --quiet > /dev/null", dir, tmpl, b.seed + 1, per,
                 probe_set_residues(c->ps), b.max_len, b.key_tokens + b.value_tokens);
    else
        snprintf(cmd, sizeof cmd, "python3 '%s/tools/make-probe' --synthetic --out '%s' --seed %u --per-residue %d --residues %d "
                 "--max-len %d --padding %u --records %u --demos %u --quiet > /dev/null", dir, tmpl, b.seed + 1, per,
                 probe_set_residues(c->ps), b.max_len, b.padding, b.records, b.demos);
    printf("calibration: building %d prompts per residue and protocol with tools/make-probe --seed %u\n", per, b.seed + 1);
    fflush(stdout);
    int st = system(cmd);
    /* Ctrl-C reaches tools/make-probe too (system() ignores SIGINT in this process meanwhile): it
     * ends by the signal or with 128 + N (tools/toolutil.py); a SIGTERM to this process alone is
     * seen by the flag after the child ends. Either way: nothing written, 128 + N. */
    int sig = interrupt_signal();
    if (!sig && st != -1 && WIFSIGNALED(st) && (WTERMSIG(st) == SIGINT || WTERMSIG(st) == SIGTERM)) sig = WTERMSIG(st);
    if (!sig && st != -1 && WIFEXITED(st) && (WEXITSTATUS(st) == 128 + SIGINT || WEXITSTATUS(st) == 128 + SIGTERM))
        sig = WEXITSTATUS(st) - 128;
    if (sig) {
        fprintf(stderr, "phaselab: --knockout: interrupted by signal %d while building the calibration set: nothing written\n", sig);
        return 128 + sig;
    }
    if (st != 0) {
        fprintf(stderr, "phaselab: --knockout: building the default calibration set failed (%s); give --calib FILE\n", cmd);
        return 1;
    }
    return 0;
}

static int run_knockout(Ctx *c) {
    const ModelConfig *mc = &c->cfg.model;
    char err[ERR_LEN];
    int L = mc->n_layers, G = mc->n_kv_heads;
    int type = 0, kl = -1, kh = -1, kkind = -1;
    uint8_t *kmask = malloc((size_t)N_KINDS * L * G);     /* [N_KINDS, L, G]: the kinds knocked out whole */
    if (!kmask) { fprintf(stderr, "phaselab: --knockout: out of memory\n"); return 1; }
    if (knockout_parse_target(mc, c->a.knockout, &type, &kl, &kh, &kkind, kmask, err)) { free(kmask); return usage_error("%s", err); }
    const int all = type == KO_TARGET_ALL;
    /* the kinds knocked out whole: KIND:... that one; `all` with a schedule every kind it has */
    int nk = 0, kinds[N_KINDS];
    if (type == KO_TARGET_KIND) kinds[nk++] = kkind;
    else if (all && mc->layer_attention[0])
        for (int k = 0; k < N_KINDS; k++) {
            int any = 0;
            for (int l = 0; l < L; l++) any |= layer_kind(mc, l) == k;
            if (!any) continue;
            for (int l = 0; l < L; l++) for (int h = 0; h < G; h++) kmask[((size_t)nk * L + l) * G + h] = layer_kind(mc, l) == k;
            kinds[nk++] = k;
        }
    char *probe_path = NULL;
    if (probe_path_of(c, "--knockout", &probe_path)) { free(kmask); return 2; }
    if (load_probe_checked(c, "--probe", probe_path, &c->ps)) { free(kmask); free(probe_path); return 2; }
    char *calib = NULL, tmp[64];
    tmp[0] = 0;
    if (c->a.calib) calib = strdup(c->a.calib);
    else {
        int rc = default_calibration(c, probe_path, &calib, tmp, sizeof tmp);
        if (rc) { if (tmp[0]) unlink(tmp); free(calib); free(probe_path); free(kmask); return rc; }
    }
    if (!calib) { free(probe_path); free(kmask); fprintf(stderr, "phaselab: --knockout: out of memory\n"); return 1; }
    /* Everything from here on (the hook included) is released at done:, on every path. */
    ProbeSet *cal = NULL;
    Knockout ko;
    int ko_ready = 0;
    double *acc = NULL, *rel = NULL, *relp = NULL, *relm = NULL, *meanacc = NULL, *offd = NULL, *phase_of = NULL,
           *cacc = NULL;
    /* the 95% intervals of relm [L, G, 2] and krelm [nk, 2] (paired bootstrap over the prompts,
     * trainer/probe_bootstrap.h) from each prompt's outcome, clean and knocked out */
    double *relm_lo = NULL, *relm_hi = NULL, *krelm_lo = NULL, *krelm_hi = NULL;
    unsigned char *clean_hits = NULL, *ko_hits = NULL;
    /* learned chunk boundaries (docs/spec.md §6.5: no grid phase): the probe by chunk phase, clean
     * and per knockout, and the relative change by the knocked-out layer's chunk slot of t_K,
     * relc [L, G, 2, W + 1] (bin W: unpooled); the slot of a prompt in layer l is the same with and
     * without a head of layer l knocked out (layer l's boundaries come from its input) */
    const int learned = mc->attention == ATTN_COMPRESSED && mc->boundaries == BOUNDARIES_LEARNED;
    ChunkPhaseCounts clean_chunk = {0}, ko_chunk = {0};
    double *relc = NULL;
    int *map = NULL;
    long *lay = NULL, *kvh = NULL;
    double *ph = NULL, *clean_phase = NULL;
    /* the kinds knocked out whole: [nk, 2, P], [nk, 2]; kind k's phase fold [2, S_k] at krelp[k] */
    double *kacc = NULL, *krel = NULL, *krelm = NULL, *kmacc = NULL, *krelp[N_KINDS] = {0};
    int kS[N_KINDS], kO[N_KINDS];
    ProbeBuilder cal_b = {0};           /* the calibration set's builder options, for the record */
    int rc = load_probe_checked(c, "--calib", calib, &cal);
    if (rc) goto done;
    /* built like the probe: tokenizer, layout, residues, prompt length, record tokens */
    if (probe_set_same_build(c->ps, cal, "--calib", err)) { rc = usage_error("%s", err); goto done; }
    char *ra = realpath(calib, NULL), *rb = realpath(probe_path, NULL);
    int same = ra && rb && !strcmp(ra, rb);
    free(ra), free(rb);
    if (same) {
        rc = usage_error("--calib %s: is the evaluated probe set; the calibration set must be disjoint from it (tools/make-probe --seed OTHER)", calib);
        goto done;
    }
    long shared = shared_prompts(c->ps, cal);
    if (shared) {
        rc = usage_error("--calib %s: shares %ld prompts with the evaluated set %s; the calibration set must be disjoint (tools/make-probe --seed OTHER)",
                           c->a.calib ? c->a.calib : "(default)", shared, probe_path);
        goto done;
    }
    if ((rc = load_model(c))) goto done;

    rc = 1;                                               /* until the HDF5 file is complete */
    if (knockout_init(&ko, mc, err)) { fprintf(stderr, "phaselab: %s\n", err); goto done; }
    ko_ready = 1;
    model_set_attn_hook(c->m, knockout_hook, &ko);
    ProbeResult tmp_res, clean;
    printf("knockout: probe %s (%d prompts), calibration %s (%d prompts)\n", probe_path, probe_set_count(c->ps),
           c->a.calib ? calib : "(default, another seed)", probe_set_count(cal));
    ko.mode = KO_RECORD;
    if (eval_probe(c, cal, knockout_before_batch, &ko, "knockout: calibration means", &tmp_res, NULL)) goto done;
    int need[PROBE_N_PROTOCOLS];
    for (int p = 0; p < 2; p++) need[p] = probe_set_count_protocol(c->ps, p) > 0;
    if (knockout_finish_means(&ko, need, err)) { rc = usage_error("%s", err); goto done; }
    cal_b = probe_set_builder(cal);
    probe_set_free(cal);
    cal = NULL;
    ko.mode = KO_OFF;
    const int n_prompts = probe_set_count(c->ps);
    clean_hits = malloc(n_prompts ? n_prompts : 1), ko_hits = malloc(n_prompts ? n_prompts : 1);
    if (!clean_hits || !ko_hits) { fprintf(stderr, "phaselab: --knockout: out of memory\n"); goto done; }
    if (learned) {
        if (chunk_phase_init(&clean_chunk, PROBE_N_PROTOCOLS, L, mc->window) ||
            chunk_phase_init(&ko_chunk, PROBE_N_PROTOCOLS, L, mc->window)) {
            fprintf(stderr, "phaselab: --knockout: out of memory for the chunk-phase counts\n");
            goto done;
        }
    }
    if (eval_probe_chunked(c, c->ps, knockout_before_batch, &ko, "knockout: clean", &clean, learned ? &clean_chunk : NULL,
                           clean_hits))
        goto done;
    if (learned) chunk_phase_finalize(&clean_chunk);

    int P = clean.residues, S = probe_phase_fold(mc);
    int n_ko = all ? L * G : type == KO_TARGET_HEAD ? 1 : 0;
    size_t cells = (size_t)L * G;
    acc = malloc(sizeof(double) * cells * 2 * P), rel = malloc(sizeof(double) * cells * 2 * P);
    relp = malloc(sizeof(double) * cells * 2 * S), relm = malloc(sizeof(double) * cells * 2);
    relm_lo = malloc(sizeof(double) * cells * 2), relm_hi = malloc(sizeof(double) * cells * 2);
    const int KB = mc->window + 1;                        /* chunk bins: slots 0..W-1, W unpooled */
    relc = learned ? malloc(sizeof(double) * cells * 2 * KB) : NULL;
    if (learned && !relc) { fprintf(stderr, "phaselab: --knockout: out of memory\n"); goto done; }
    for (size_t i = 0; learned && i < cells * 2 * KB; i++) relc[i] = NAN;
    meanacc = malloc(sizeof(double) * cells * 2);
    map = malloc(sizeof(int) * G * P);
    offd = malloc(sizeof(double) * G), phase_of = malloc(sizeof(double) * G * P);
    cacc = malloc(sizeof(double) * 2 * P);
    ph = malloc(sizeof(double) * S), clean_phase = malloc(sizeof(double) * S);          /* [S] each */
    lay = malloc(sizeof(long) * L), kvh = malloc(sizeof(long) * G);                       /* [L], [G] */
    if (!acc || !rel || !relp || !relm || !relm_lo || !relm_hi || !meanacc || !map || !offd || !phase_of || !cacc || !ph || !clean_phase || !lay || !kvh) {
        fprintf(stderr, "phaselab: --knockout: out of memory for the %d x %d result tables\n", L, G);
        goto done;
    }
    for (size_t i = 0; i < cells * 2 * P; i++) acc[i] = rel[i] = NAN;
    for (size_t i = 0; i < cells * 2 * S; i++) relp[i] = NAN;
    for (size_t i = 0; i < cells * 2; i++) relm[i] = meanacc[i] = relm_lo[i] = relm_hi[i] = NAN;
    /* per KV head: its grid offset o_g and the map residue -> phase (t_K - o_g) mod S (docs/spec.md §2b,
     * head_phase_map; S | P); the knocked-out head's own map folds both the clean and the knockout
     * counts, and is stored as phase_of_residue */
    const int grid = mc->attention == ATTN_COMPRESSED ? mc->grid : GRID_ALIGNED;
    const ModelDims kd = dims_of(mc, 0);          /* evaluation grid: o_base + o_g, no shift (docs/spec.md §6.2) */
    for (int h = 0; h < G; h++) {
        offd[h] = kd.compressed ? dims_grid_offset(&kd, h) : 0;
        if (head_phase_map(P, S, (int)offd[h], map + (size_t)h * P))
            for (int r = 0; r < P; r++) map[(size_t)h * P + r] = -1;     /* S does not divide P: folds give NaN */
        for (int r = 0; r < P; r++) phase_of[(size_t)h * P + r] = map[(size_t)h * P + r];
    }
    for (int k = 0; k < n_ko; k++) {
        int l = all ? k / G : kl, h = all ? k % G : kh;
        ko.mode = KO_REPLACE, ko.layer = l, ko.kv_head = h;
        char label[64];
        snprintf(label, sizeof label, "knockout %d:%d (%d/%d)", l, h, k + 1, n_ko);
        ProbeResult r;
        if (learned) {                   /* fresh counts for this knockout */
            chunk_phase_free(&ko_chunk);
            if (chunk_phase_init(&ko_chunk, PROBE_N_PROTOCOLS, L, mc->window)) {
                fprintf(stderr, "phaselab: --knockout: out of memory for the chunk-phase counts\n");
                goto done;
            }
        }
        if (eval_probe_chunked(c, c->ps, knockout_before_batch, &ko, label, &r, learned ? &ko_chunk : NULL, ko_hits)) goto done;
        if (learned) {
            chunk_phase_finalize(&ko_chunk);
            for (int p = 0; p < 2; p++)
                for (int kb = 0; kb < KB; kb++) {
                    const long x = chunk_phase_index(&clean_chunk, p, l, kb);
                    relc[(((size_t)l * G + h) * 2 + p) * KB + kb] = rel_change(ko_chunk.acc[x], clean_chunk.acc[x]);
                }
        }
        size_t cell = (size_t)l * G + h;
        for (int p = 0; p < 2; p++) {
            fold_acc(&r, p, S, map + (size_t)h * P, ph);
            fold_acc(&clean, p, S, map + (size_t)h * P, clean_phase);
            for (int i = 0; i < P; i++) {
                acc[(cell * 2 + p) * P + i] = r.acc[p][i];
                rel[(cell * 2 + p) * P + i] = rel_change(r.acc[p][i], clean.acc[p][i]);
            }
            for (int s = 0; s < S; s++) relp[(cell * 2 + p) * S + s] = rel_change(ph[s], clean_phase[s]);
            relm[cell * 2 + p] = rel_change(r.mean[p], clean.mean[p]);
            meanacc[cell * 2 + p] = r.mean[p];
            probe_rel_change_ci(c->ps, p, clean_hits, ko_hits, &relm_lo[cell * 2 + p], &relm_hi[cell * 2 + p]);
        }
    }
    /* each kind knocked out whole: every chosen KV head of every layer of the kind at once, folded by
     * the kind's own phase (t_K - o_k) mod S_k (kind_fold_geometry: its layers' stride and grid offset; 8 and
     * 0 for full and window layers, which have no grid) */
    if (nk) {
        kacc = malloc(sizeof(double) * nk * 2 * P), krel = malloc(sizeof(double) * nk * 2 * P);
        krelm = malloc(sizeof(double) * nk * 2), kmacc = malloc(sizeof(double) * nk * 2);
        krelm_lo = malloc(sizeof(double) * nk * 2), krelm_hi = malloc(sizeof(double) * nk * 2);
        if (!kacc || !krel || !krelm || !kmacc || !krelm_lo || !krelm_hi) { fprintf(stderr, "phaselab: --knockout: out of memory\n"); goto done; }
    }
    for (int i = 0; i < nk; i++) {
        kind_fold_geometry(mc, kinds[i], c->T, &kS[i], &kO[i], NULL);    /* a kind of the schedule: never -1 */
        int *kmap = malloc(sizeof(int) * P);
        double *kph = malloc(sizeof(double) * 2 * kS[i]);
        krelp[i] = malloc(sizeof(double) * 2 * kS[i]);
        if (!kmap || !kph || !krelp[i]) { free(kmap), free(kph); fprintf(stderr, "phaselab: --knockout: out of memory\n"); goto done; }
        if (head_phase_map(P, kS[i], kO[i], kmap)) for (int r = 0; r < P; r++) kmap[r] = -1;   /* S_k does not divide P: NaN */
        ko.mode = KO_REPLACE, ko.targets = kmask + (size_t)i * L * G;
        char label[80];
        snprintf(label, sizeof label, "knockout %s (kind %d/%d)", layer_kind_names[kinds[i]], i + 1, nk);
        ProbeResult r;
        int bad = eval_probe(c, c->ps, knockout_before_batch, &ko, label, &r, ko_hits);
        ko.targets = NULL;
        if (bad) { free(kmap), free(kph); goto done; }
        for (int p = 0; p < 2; p++) {
            fold_acc(&r, p, kS[i], kmap, kph);
            fold_acc(&clean, p, kS[i], kmap, kph + kS[i]);
            for (int s = 0; s < kS[i]; s++) krelp[i][p * kS[i] + s] = rel_change(kph[s], kph[kS[i] + s]);
            for (int x = 0; x < P; x++) {
                kacc[((size_t)i * 2 + p) * P + x] = r.acc[p][x];
                krel[((size_t)i * 2 + p) * P + x] = rel_change(r.acc[p][x], clean.acc[p][x]);
            }
            krelm[i * 2 + p] = rel_change(r.mean[p], clean.mean[p]);
            kmacc[i * 2 + p] = r.mean[p];
            probe_rel_change_ci(c->ps, p, clean_hits, ko_hits, &krelm_lo[i * 2 + p], &krelm_hi[i * 2 + p]);
        }
        free(kmap), free(kph);
    }

    printf("\nclean: pp mean %.1f%%  ip mean %.1f%% (n = %d pp and %d ip prompts, %d residues)\n", clean.mean[0], clean.mean[1],
           probe_set_count_protocol(c->ps, 0), probe_set_count_protocol(c->ps, 1), P);
    for (int p = 0; p < 2; p++) {
        char chance[256];
        if (probe_not_retrieving(&clean, p, chance, sizeof chance))
            printf("%s clean model: %s; a knockout cannot lower what is not retrieved: the relative changes below measure "
                   "noise around chance\n", probe_protocol_name(p), chance);
    }
    if (n_ko && P % S)   /* (gate cycling refuses such a probe: its prediction is the fold; here the rest stands) */
        printf("note: the probe's %d residues are not a multiple of the fold %d: the relative change by phase is not defined "
               "(rel_change_phase is NaN; the per-residue and mean changes are); for it, build the probe with tools/make-probe "
               "--residues a multiple of %d\n", P, S, S);
    for (int p = 0; p < 2 && n_ko; p++) {
        if (!clean.present[p]) continue;
        printf("\n%s: relative accuracy change %% 100 (A_ko - A_clean) / A_clean of the mean over residues, layer x KV head,\n"
               "[95%% interval: paired bootstrap over the %d prompts, stratified by residue, B = %d]\n",
               probe_protocol_name(p), probe_set_count_protocol(c->ps, p), PROBE_BOOT_B);
        printf("%8s", "layer");
        for (int h = 0; h < G; h++) printf("  kv %-18d", h);
        printf("\n");
        for (int l = 0; l < L; l++) {
            printf("%8d", l);
            for (int h = 0; h < G; h++) {   /* "-": not knocked out (nan: knocked out, A_clean = 0) */
                const size_t cell = (size_t)l * G + h;
                if (isfinite(meanacc[cell * 2 + p]))
                    printf(" %6.1f [%6.1f, %6.1f]", relm[cell * 2 + p], relm_lo[cell * 2 + p], relm_hi[cell * 2 + p]);
                else printf(" %22s", "-");
            }
            printf("\n");
        }
        if (grid == GRID_STAGGERED) {   /* the offsets the fold used (dims_grid_offset: floor(g S_g / G) per head's own stride) */
            printf("%s: relative change by the KV head's own phase (t_K - o_g) mod %d (grid = staggered, o_g =",
                   probe_protocol_name(p), S);
            for (int h = 0; h < G; h++) printf("%s %d", h ? "," : "", (int)offd[h]);
            printf(")\n%8s", "L:H");
        }
        else printf("%s: relative change by phase t_K mod %d%s\n%8s", probe_protocol_name(p), S, probe_fold_note(mc), "L:H");
        for (int s = 0; s < S; s++) printf(" %7d", s);
        printf("   mean acc\n");
        for (int l = 0; l < L; l++)
            for (int h = 0; h < G; h++) {
                size_t cell = (size_t)l * G + h;
                if (!isfinite(meanacc[cell * 2 + p])) continue;
                printf("%6d:%-2d", l, h);
                for (int s = 0; s < S; s++) printf(" %7.1f", relp[(cell * 2 + p) * S + s]);
                printf("   %6.1f\n", meanacc[cell * 2 + p]);
            }
    }
    if (n_ko > 1 && nk) {                /* the per-head sweep grouped by kind: the mean over each kind's heads */
        printf("\nper-head knockouts grouped by layer kind: mean over the kind's KV heads of the relative change of the mean accuracy %%\n");
        for (int i = 0; i < nk; i++) {
            printf("%-10s layers", layer_kind_names[kinds[i]]);
            double m[2] = {0, 0};
            int n[2] = {0, 0};
            for (int l = 0; l < L; l++) {
                if (layer_kind(mc, l) != kinds[i]) continue;
                printf(" %d", l);
                for (int h = 0; h < G; h++)
                    for (int p = 0; p < 2; p++) {
                        double v = relm[((size_t)l * G + h) * 2 + p];
                        if (isfinite(v)) m[p] += v, n[p]++;
                    }
            }
            for (int p = 0; p < 2; p++)
                if (clean.present[p]) printf("  %s %.1f", probe_protocol_name(p), n[p] ? m[p] / n[p] : NAN);
            printf("\n");
        }
    }
    for (int p = 0; p < 2 && learned && n_ko; p++) {   /* learned boundaries: by the knocked-out layer's chunk slot */
        if (!clean.present[p]) continue;
        printf("\n%s: relative change by the knocked-out layer's chunk slot of t_K (learned boundaries, docs/spec.md §6.5: "
               "slot W - 1 = %d ends the chunk, %d = unpooled); n: the prompts in the slot\n%8s",
               probe_protocol_name(p), KB - 2, KB - 1, "L:H");
        for (int kb = 0; kb < KB; kb++) printf(" %7d", kb);
        printf("\n");
        for (int l = 0; l < L; l++) {
            int any = 0;
            for (int h = 0; h < G; h++) any |= isfinite(meanacc[((size_t)l * G + h) * 2 + p]);
            if (!any) continue;
            printf("%6d:n ", l);
            for (int kb = 0; kb < KB; kb++) printf(" %7ld", clean_chunk.total[chunk_phase_index(&clean_chunk, p, l, kb)]);
            printf("\n");
            for (int h = 0; h < G; h++) {
                const size_t cell = (size_t)l * G + h;
                if (!isfinite(meanacc[cell * 2 + p])) continue;
                printf("%6d:%-2d", l, h);
                for (int kb = 0; kb < KB; kb++) printf(" %7.1f", relc[(cell * 2 + p) * KB + kb]);
                printf("\n");
            }
        }
    }
    for (int i = 0; i < nk; i++) {
        int heads = 0;
        for (size_t x = 0; x < (size_t)L * G; x++) heads += kmask[(size_t)i * L * G + x];
        printf("\nkind %s knocked out whole (%d KV heads at once): relative change by the kind's phase (t_K - (%d)) mod %d\n",
               layer_kind_names[kinds[i]], heads, kO[i], kS[i]);
        if (P % kS[i])     /* (the same rule as the per-head note above and --eval's "no fold") */
            printf("  note: the probe's %d residues are not a multiple of %d: the relative change by the kind's phase is "
                   "not defined (kind_%s_rel_change_phase is NaN; the mean change is); for it, build the probe with "
                   "tools/make-probe --residues a multiple of %d\n", P, kS[i], layer_kind_names[kinds[i]], kS[i]);
        for (int p = 0; p < 2; p++) {
            if (!clean.present[p]) continue;
            printf("  %-3s mean acc %6.1f (rel %6.1f%% [%.1f, %.1f]) |", probe_protocol_name(p), kmacc[i * 2 + p], krelm[i * 2 + p],
                   krelm_lo[i * 2 + p], krelm_hi[i * 2 + p]);
            for (int s = 0; s < kS[i]; s++) printf(" %d:%.1f", s, krelp[i][p * kS[i] + s]);
            printf("\n");
        }
    }
    AnalysisH5 *hf = ah5_begin(c->out_path, "knockout", c->a.ckpt, c->st.step, c->src.overrides, err);
    if (!hf) { fprintf(stderr, "phaselab: %s\n", err); goto done; }
    for (int l = 0; l < L; l++) lay[l] = l;
    for (int h = 0; h < G; h++) kvh[h] = h;
    ah5_attr_str(hf, "knockout", c->a.knockout);
    ah5_attr_str(hf, "calibration", c->a.calib ? calib : tmp[0] ? "default: tools/make-probe, another seed (a temporary file, removed)"
                                                                 : "default: the probe's .calib.bin");
    ah5_input_file(hf, "calibration", calib);
    ah5_attr_long(hf, "calibration_seed", (long)cal_b.seed);
    ah5_attr_long(hf, "calibration_per_residue", (long)cal_b.per_residue);
    ah5_attr_str(hf, "method", "mean replacement of the query heads' attention outputs z (before W_o) at the scored position, per-protocol calibration mean");
    ah5_axis_long(hf, "layer", lay, L, "layer");
    ah5_axis_long(hf, "kv_head", kvh, G, "KV head");
    store_probe_common(hf, probe_path, c->ps, 0, P, S, PHASE_AXIS_HEAD);
    ah5_attr_str(hf, "grid", grid == GRID_STAGGERED ? "staggered" : "aligned");
    for (int p = 0; p < 2; p++) for (int i = 0; i < P; i++) cacc[p * P + i] = clean.acc[p][i];
    const char *ax_c[] = {"protocol", "residue"}, *ax_r[] = {"layer", "kv_head", "protocol", "residue"};
    const char *ax_s[] = {"layer", "kv_head", "protocol", "phase"}, *ax_m[] = {"layer", "kv_head", "protocol"};
    ah5_data(hf, "acc_clean", cacc, 2, (int[]){2, P}, ax_c, "clean top-1 accuracy", "%");
    ah5_data(hf, "acc", acc, 4, (int[]){L, G, 2, P}, ax_r, "accuracy with the KV head knocked out (NaN: not knocked out)", "%");
    ah5_data(hf, "rel_change", rel, 4, (int[]){L, G, 2, P}, ax_r, "relative accuracy change 100 (A_ko - A_clean) / A_clean by residue", "%");
    ah5_data(hf, "rel_change_phase", relp, 4, (int[]){L, G, 2, S}, ax_s,
             "relative accuracy change, clean and knockout counts folded by the KV head's own phase (t_K - o_g) mod S", "%");
    const char *ax_g[] = {"kv_head"}, *ax_gr[] = {"kv_head", "residue"};
    ah5_data(hf, "grid_offset", offd, 1, (int[]){G}, ax_g, "o_g: first position of KV head g's window grid (docs/spec.md §2b)", NULL);
    ah5_data(hf, "phase_of_residue", phase_of, 2, (int[]){G, P}, ax_gr,
             "the phase (r - o_g) mod S that residue r has on KV head g's grid (the fold of rel_change_phase)", NULL);
    ah5_data(hf, "rel_change_mean", relm, 3, (int[]){L, G, 2}, ax_m, "relative change of the mean accuracy over residues", "%");
    ah5_data(hf, "rel_change_mean_lo", relm_lo, 3, (int[]){L, G, 2}, ax_m,
             "95% interval low of rel_change_mean: paired bootstrap over the prompts, stratified by residue (B = 2000)", "%");
    ah5_data(hf, "rel_change_mean_hi", relm_hi, 3, (int[]){L, G, 2}, ax_m, "95% interval high of rel_change_mean", "%");
    if (learned) {      /* by the knocked-out layer's chunk slot (docs/spec.md §6.5) */
        long *slots = malloc(sizeof(long) * KB);
        double *cn = malloc(sizeof(double) * (size_t)L * 2 * KB);
        if (!slots || !cn) { free(slots), free(cn); fprintf(stderr, "phaselab: --knockout: out of memory\n"); goto done; }
        for (int kb = 0; kb < KB; kb++) slots[kb] = kb;
        for (int l = 0; l < L; l++)
            for (int p = 0; p < 2; p++)
                for (int kb = 0; kb < KB; kb++)
                    cn[((size_t)l * 2 + p) * KB + kb] = (double)clean_chunk.total[chunk_phase_index(&clean_chunk, p, l, kb)];
        ah5_axis_long(hf, "chunk_slot", slots, KB, "slot of t_K in its chunk of the layer (W - 1: the chunk's last token; W: unpooled)");
        const char *ax_ch[] = {"layer", "kv_head", "protocol", "chunk_slot"}, *ax_cn[] = {"layer", "protocol", "chunk_slot"};
        ah5_data(hf, "rel_change_chunk", relc, 4, (int[]){L, G, 2, KB}, ax_ch,
                 "relative accuracy change by the knocked-out layer's chunk slot of t_K (learned boundaries)", "%");
        ah5_data(hf, "chunk_n", cn, 3, (int[]){L, 2, KB}, ax_cn, "prompts of each chunk slot of t_K, per layer", NULL);
        free(slots), free(cn);
    }
    if (mc->layer_attention[0]) {
        double *lk = malloc(sizeof(double) * L);
        if (lk) {
            for (int l = 0; l < L; l++) lk[l] = layer_kind(mc, l);
            const char *ax_l[] = {"layer"};
            ah5_data(hf, "layer_kind", lk, 1, (int[]){L}, ax_l, "the layer's kind: 0 full, 1 compressed, 2 window, 3 csa, 4 hca (docs/spec.md §5)", NULL);
        }
        free(lk);
    }
    if (nk) {
        long kid[N_KINDS];
        char names[128] = "", key[96], axn[48], what[200];
        for (int i = 0; i < nk; i++) {
            kid[i] = kinds[i];
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "," : "", layer_kind_names[kinds[i]]);
        }
        ah5_attr_str(hf, "kinds", names);
        ah5_axis_long(hf, "kind", kid, nk, "layer kind knocked out whole (every KV head of its layers; KIND:H one head of each): 0 full, 1 compressed, 2 window, 3 csa, 4 hca");
        const char *ax_k[] = {"kind", "protocol", "residue"}, *ax_k2[] = {"kind", "protocol"};
        ah5_data(hf, "kind_acc", kacc, 3, (int[]){nk, 2, P}, ax_k, "accuracy with the kind knocked out", "%");
        ah5_data(hf, "kind_rel_change", krel, 3, (int[]){nk, 2, P}, ax_k, "relative accuracy change by residue, the kind knocked out", "%");
        ah5_data(hf, "kind_rel_change_mean", krelm, 2, (int[]){nk, 2}, ax_k2, "relative change of the mean accuracy, the kind knocked out", "%");
        ah5_data(hf, "kind_rel_change_mean_lo", krelm_lo, 2, (int[]){nk, 2}, ax_k2,
                 "95% interval low of kind_rel_change_mean (paired bootstrap over the prompts, B = 2000)", "%");
        ah5_data(hf, "kind_rel_change_mean_hi", krelm_hi, 2, (int[]){nk, 2}, ax_k2, "95% interval high of kind_rel_change_mean", "%");
        ah5_data(hf, "kind_acc_mean", kmacc, 2, (int[]){nk, 2}, ax_k2, "mean accuracy over residues, the kind knocked out", "%");
        for (int i = 0; i < nk; i++) {
            const char *nm = layer_kind_names[kinds[i]];
            long *axv = malloc(sizeof(long) * kS[i]);
            if (!axv) continue;
            for (int x = 0; x < kS[i]; x++) axv[x] = x;
            snprintf(axn, sizeof axn, "phase_%s", nm);
            snprintf(what, sizeof what, "phase (t_K - o) mod S of the target key on the %s layers' grid (S %d, o %d)", nm, kS[i], kO[i]);
            ah5_axis_long(hf, axn, axv, kS[i], what);
            free(axv);
            const char *ax_p[] = {"protocol", axn};
            snprintf(key, sizeof key, "kind_%s_rel_change_phase", nm);
            ah5_data(hf, key, krelp[i], 2, (int[]){2, kS[i]}, ax_p, "relative change, clean and knockout counts folded by the kind's phase", "%");
            snprintf(key, sizeof key, "kind_%s_stride", nm), ah5_attr_long(hf, key, kS[i]);
            snprintf(key, sizeof key, "kind_%s_grid_offset", nm), ah5_attr_long(hf, key, kO[i]);
        }
    }
    ah5_signal(hf, "rel_change", ax_r, 4);
    if (ah5_end(hf, err)) { fprintf(stderr, "phaselab: %s\n", err); goto done; }   /* it prints where it stored */
    rc = 0;
done:
    if (tmp[0]) unlink(tmp);           /* the default calibration set, kept until its sha256 is stored */
    if (ko_ready) {
        model_set_attn_hook(c->m, NULL, NULL);
        knockout_free(&ko);
    }
    if (cal) probe_set_free(cal);
    free(cacc), free(acc), free(rel), free(relp), free(relm), free(meanacc), free(map), free(offd), free(phase_of);
    free(ph), free(clean_phase), free(lay), free(kvh), free(calib), free(probe_path);
    free(kacc), free(krel), free(krelm), free(kmacc), free(kmask);
    free(relm_lo), free(relm_hi), free(krelm_lo), free(krelm_hi), free(clean_hits), free(ko_hits), free(relc);
    chunk_phase_free(&clean_chunk), chunk_phase_free(&ko_chunk);   /* (zeroed ones too) */
    for (int i = 0; i < N_KINDS; i++) free(krelp[i]);
    return rc;
}

/* ---- the indexer's selection statistics (analysis/indexer_stats.h) ---- */

static int run_indexer_stats(Ctx *c) {
    const ModelConfig *mc = &c->cfg.model;
    char err[ERR_LEN];
    if (!model_has_indexer(mc))
        return usage_error("--indexer-stats: %s has no lightning indexer: needs a csa layer (model.layer_attention) with "
                           "model.csa_topk > 0 (docs/spec.md §5.4)", c->src.config_path);
    char *probe_path = NULL;
    if (probe_path_of(c, "--indexer-stats", &probe_path)) return 2;
    if (load_probe_checked(c, "--probe", probe_path, &c->ps)) { free(probe_path); return 2; }
    int rc = load_model(c);
    if (rc) { free(probe_path); return rc; }
    IndexerStats st;
    fflush(stdout);
    if (indexer_stats_run(c->m, mc, c->ps, c->T, c->micro, &st, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        free(probe_path);
        return 1;
    }
    printf("indexer selection on probe %s (%d prompts), at the query position\n", probe_path, probe_set_count(c->ps));
    for (int i = 0; i < st.n_layers; i++) {
        const IndexerLayerStats *ls = &st.l[i];
        const int S = ls->g.S;
        printf("\nlayer %d (csa W%d/S%d, o %d, top-%d of %d entry rows): the entry holding t_K selected, by phase (t_K - (%d)) mod %d\n",
               ls->layer, ls->g.W, S, ls->g.o, ls->g.topk, ls->g.nW, ls->g.o, S);
        for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
            long N = 0;
            for (int s = 0; s < S; s++) N += ls->n[p][s];
            if (!N && !ls->uncounted[p]) continue;
            printf("  %-3s phase:", probe_protocol_name(p));
            for (int s = 0; s < S; s++) {
                double lo, hi;
                probe_wilson(ls->hits[p][s], ls->n[p][s], PROBE_Z95, &lo, &hi);
                printf("  %d: %ld/%ld %.1f%% [%.1f, %.1f] chance %.1f%%", s, ls->hits[p][s], ls->n[p][s],
                       ls->n[p][s] ? 100.0 * ls->hits[p][s] / ls->n[p][s] : NAN, 100 * lo, 100 * hi,
                       ls->n[p][s] ? 100.0 * ls->chance_sum[p][s] / ls->n[p][s] : NAN);
            }
            const ChiSquare *t = &ls->test[p];
            printf("\n  %-3s homogeneity across phases: chi2 %.2f (df %d) p %.3g%s; %ld prompts without a visible holding entry, "
                   "%ld with every entry selected\n", probe_protocol_name(p), t->chi2, t->df, t->p,
                   t->permutations ? " (permutation p: an expected count < 5)" : "", ls->uncounted[p], ls->all_selected[p]);
        }
        printf("  selection rate by entry age (0 = newest):");
        for (int a = 0; a < ls->g.nW; a++)
            if (ls->visible[a]) printf(" %d:%.2f", a, (double)ls->selected[a] / ls->visible[a]);
        printf("\n");
    }
    rc = 1;
    int P = probe_set_residues(c->ps), maxS = 1, maxW = 1;
    for (int i = 0; i < st.n_layers; i++) {
        if (st.l[i].g.S > maxS) maxS = st.l[i].g.S;
        if (st.l[i].g.nW > maxW) maxW = st.l[i].g.nW;
    }
    const int nl = st.n_layers;
    long *lay = malloc(sizeof(long) * (size_t)(nl + maxW));
    double *hits = malloc(sizeof(double) * nl * 2 * maxS), *cnt = malloc(sizeof(double) * nl * 2 * maxS);
    double *rate = malloc(sizeof(double) * nl * 2 * maxS), *lo = malloc(sizeof(double) * nl * 2 * maxS);
    double *hi = malloc(sizeof(double) * nl * 2 * maxS), *chance = malloc(sizeof(double) * nl * 2 * maxS);
    double *test = malloc(sizeof(double) * nl * 2 * 3), *geo = malloc(sizeof(double) * nl * 5);
    double *vis = malloc(sizeof(double) * nl * maxW), *sel = malloc(sizeof(double) * nl * maxW), *srate = malloc(sizeof(double) * nl * maxW);
    double *unc = malloc(sizeof(double) * nl * 2);
    AnalysisH5 *h = NULL;
    if (!(lay && hits && cnt && rate && lo && hi && chance && test && geo && vis && sel && srate && unc))
        fprintf(stderr, "phaselab: --indexer-stats: out of memory\n");
    else if (!(h = ah5_begin(c->out_path, "indexer", c->a.ckpt, c->st.step, c->src.overrides, err)))
        fprintf(stderr, "phaselab: %s\n", err);
    else {
        store_probe_common(h, probe_path, c->ps, 0, P, maxS, "phase (t_K - o) mod S of the target key on the indexer layer's csa grid");
        for (int i = 0; i < nl; i++) {
            const IndexerLayerStats *ls = &st.l[i];
            lay[i] = ls->layer;
            geo[i * 5 + 0] = ls->g.W, geo[i * 5 + 1] = ls->g.S, geo[i * 5 + 2] = ls->g.o, geo[i * 5 + 3] = ls->g.nW, geo[i * 5 + 4] = ls->g.topk;
            for (int p = 0; p < 2; p++) {
                for (int s = 0; s < maxS; s++) {
                    size_t x = ((size_t)i * 2 + p) * maxS + s;
                    int in = s < ls->g.S && ls->n[p][s] > 0;
                    hits[x] = s < ls->g.S ? ls->hits[p][s] : NAN, cnt[x] = s < ls->g.S ? ls->n[p][s] : NAN;
                    rate[x] = in ? 100.0 * ls->hits[p][s] / ls->n[p][s] : NAN;
                    chance[x] = in ? 100.0 * ls->chance_sum[p][s] / ls->n[p][s] : NAN;
                    double a = NAN, b = NAN;
                    if (s < ls->g.S) probe_wilson(ls->hits[p][s], ls->n[p][s], PROBE_Z95, &a, &b);
                    lo[x] = 100 * a, hi[x] = 100 * b;
                }
                test[(i * 2 + p) * 3 + 0] = ls->test[p].chi2, test[(i * 2 + p) * 3 + 1] = ls->test[p].df;
                test[(i * 2 + p) * 3 + 2] = ls->test[p].p;
                unc[i * 2 + p] = ls->uncounted[p];
            }
            for (int a = 0; a < maxW; a++) {
                size_t x = (size_t)i * maxW + a;
                vis[x] = a < ls->g.nW ? ls->visible[a] : 0, sel[x] = a < ls->g.nW ? ls->selected[a] : 0;
                srate[x] = vis[x] > 0 ? sel[x] / vis[x] : NAN;
            }
        }
        for (int a = 0; a < maxW; a++) lay[nl + a] = a;
        ah5_attr_str(h, "query", "the prompt's first scored position q; hit: an entry whose window pools t_K is among the indexer's top-k at q");
        ah5_attr_str(h, "test", "phase_homogeneity_test on the S x 2 table of hits and misses (Pearson chi-square, permutation p below expected count 5; docs/spec.md §3.7)");
        ah5_axis_long(h, "indexer_layer", lay, nl, "csa layer with a lightning indexer");
        ah5_axis_long(h, "age", lay + nl, maxW, "entry age n_q - 1 - j (0 = the newest visible entry)");
        const char *ax[] = {"indexer_layer", "protocol", "phase"}, *ax_t[] = {"indexer_layer", "protocol", NULL};
        const char *ax_g[] = {"indexer_layer", NULL}, *ax_a[] = {"indexer_layer", "age"}, *ax_u[] = {"indexer_layer", "protocol"};
        ah5_data(h, "geometry", geo, 2, (int[]){nl, 5}, ax_g, "W, S, grid offset o, entry rows nW, top-k of each indexer layer", NULL);
        ah5_data(h, "hits", hits, 3, (int[]){nl, 2, maxS}, ax, "prompts whose key-holding entry was selected", NULL);
        ah5_data(h, "n", cnt, 3, (int[]){nl, 2, maxS}, ax, "prompts with a visible key-holding entry", NULL);
        ah5_data(h, "rate", rate, 3, (int[]){nl, 2, maxS}, ax, "selection rate of the key-holding entry by the key's phase", "%");
        ah5_data(h, "rate_lo", lo, 3, (int[]){nl, 2, maxS}, ax, "95% Wilson interval, lower end", "%");
        ah5_data(h, "rate_hi", hi, 3, (int[]){nl, 2, maxS}, ax, "95% Wilson interval, upper end", "%");
        ah5_data(h, "chance", chance, 3, (int[]){nl, 2, maxS}, ax, "mean hit probability of a uniform top-k draw, 1 - C(n-h,k)/C(n,k)", "%");
        ah5_data(h, "phase_test", test, 3, (int[]){nl, 2, 3}, ax_t, "homogeneity of the selection rate across phases: chi2, df, p", NULL);
        ah5_data(h, "uncounted", unc, 2, (int[]){nl, 2}, ax_u, "prompts without a visible key-holding entry", NULL);
        ah5_data(h, "age_visible", vis, 2, (int[]){nl, maxW}, ax_a, "visible entries of that age at the query (both protocols)", NULL);
        ah5_data(h, "age_selected", sel, 2, (int[]){nl, maxW}, ax_a, "selected entries of that age", NULL);
        ah5_data(h, "age_rate", srate, 2, (int[]){nl, maxW}, ax_a, "selection rate by entry age", NULL);
        ah5_signal(h, "rate", ax, 3);
        if (ah5_end(h, err)) fprintf(stderr, "phaselab: %s\n", err);
        else rc = 0;
    }
    free(lay), free(hits), free(cnt), free(rate), free(lo), free(hi), free(chance), free(test), free(geo), free(vis), free(sel);
    free(srate), free(unc), free(probe_path);
    indexer_stats_free(&st);
    return rc;
}

/* ---- driver ---- */

int analysis_main(int argc, char **argv) {
    Ctx c;
    memset(&c, 0, sizeof c);
    if (argc < 1) return usage_error("--eval needs a checkpoint directory");
    int rc = parse_args(argc, argv, &c.a);
    if (rc) return rc;
    if ((rc = load_config_only(&c))) { free(c.a.overrides); free(c.out_path); return rc; }
    double t0 = clock_seconds();
    if (c.a.gate_cycle) rc = run_gate_cycle(&c);
    else if (c.a.knockout) rc = run_knockout(&c);
    else if (c.a.indexer_stats) rc = run_indexer_stats(&c);
    else {
        FillerSweepEnv env = {.cfg = &c.cfg, .ckpt = c.a.ckpt, .out_path = c.out_path, .src = &c.src};
        rc = filler_sweep_main(&env, c.a.filler);
    }
    if (c.ps) probe_set_free(c.ps);
    if (c.m) model_free(c.m);
    if (!rc) printf("analysis done in %.1fs\n", clock_seconds() - t0);
    ckpt_source_close(&c.src);
    free(c.out_path);
    free(c.a.overrides);
    return rc;
}
