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
#include "trainer/run_config.h"
#include "common/errors.h"
#include "common/interrupt.h"
#include "common/optval.h"
#include "model/model.h"
#include "model/dims.h"
#include "analysis/analysis_h5.h"
#include "trainer/checkpoint.h"
#include "trainer/ckpt_source.h"
#include "trainer/comm.h"
#include "trainer/evaluate.h"
#include "analysis/filler_sweep.h"
#include "analysis/interventions.h"

typedef struct {
    const char *ckpt, *probe, *calib, *out, *gate_cycle, *layers, *knockout, *filler;
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

static const char *const ANALYSIS_FLAGS[] = {"--gate-cycle", "--knockout", "--filler-sweep", "--calib", "--layers"};
enum { N_ANALYSIS_FLAGS = 5 };

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
        if (slot) {
            if (i + 1 >= argc) return usage_error("%s needs a value", o);
            *slot = argv[++i];
        } else if (o[0] == '-' && o[1] == '-') {
            return usage_error("unknown option %s (analyses take --probe, --gate-cycle, --layers, --knockout, --calib, --filler-sweep, --out)", o);
        } else {
            a->overrides[a->n_over++] = argv[i];
        }
    }
    int n = !!a->gate_cycle + !!a->knockout + !!a->filler;
    if (n > 1) return usage_error("--gate-cycle, --knockout and --filler-sweep: give one analysis per call");
    if (n == 0) return usage_error("%s needs one of --gate-cycle, --knockout, --filler-sweep", a->calib ? "--calib" : "--layers");
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
    if (ah5_check_target(c->out_path, err)) return usage_error("%s%s", c->a.out ? "--out " : "", err);   /* before any work */
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

static int eval_probe(Ctx *c, const ProbeSet *ps, ProbeBatchFn fn, void *ctx, const char *label, ProbeResult *pr) {
    char err[ERR_LEN];
    fflush(stdout);
    if (probe_evaluate_ex(c->m, ps, c->T, c->micro, 0, 1, fn, ctx, label, pr, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    pr->fold = probe_phase_fold(&c->cfg.model);
    probe_result_finalize(pr);
    return 0;
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
}

/* ---- plain probe evaluation -> /probe_NNN ---- */

int analysis_store_probe(const char *path, const char *ckpt, long step, const char *probe_path, const ProbeSet *ps,
                         int decode, const ProbeResult *pr, const char *val_glob, const EvalResult *val, char *err) {
    AnalysisH5 *h = ah5_begin(path, "probe", ckpt, step, err);
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
    ah5_signal(h, "acc", ax_r, 2);
    free(acc), free(cnt), free(tot), free(accp);
    return ah5_end(h, err);
}

/* ---- plain validation loss (no probe) -> /val_NNN ---- */

int analysis_store_val(const char *path, const char *ckpt, long step, const char *val_glob, const EvalResult *r,
                       char *err) {
    AnalysisH5 *h = ah5_begin(path, "val", ckpt, step, err);
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
    if (gate_cycle_check(mc, "--gate-cycle", err)) return usage_error("%s", err);
    int W = mc->window, S = mc->stride, nd = 0, L = mc->n_layers;
    /* [S] deltas (all) or one; [L] layer mask; sized by the config (stride up to 65536, 1024 layers) */
    int *deltas = malloc(sizeof(int) * (size_t)(S + 1)), *mask = calloc((size_t)L, sizeof(int));
    if (!deltas || !mask) { free(deltas), free(mask); fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    if (!strcmp(c->a.gate_cycle, "all")) {
        for (int d = 0; d < S; d++) deltas[nd++] = d;
    } else {
        long long v;
        if (optval_int(c->a.gate_cycle, 0, W, &v)) return usage_error("--gate-cycle: '%s' is not allowed: expected an integer delta in 0..%d (W = %d; W is the identity) or all", c->a.gate_cycle, W, W);
        deltas[nd++] = (int)v;
    }
    const char *layers_text = c->a.layers ? c->a.layers : "all";   /* stored as given, any length */
    if (c->a.layers) {
        /* common/optval.h: layers 0..L-1, comma-separated, at least one, no empty element */
        const char *bad = "";
        size_t bad_len = 0;
        if (optval_index_list(c->a.layers, L, mask, &bad, &bad_len))
            return usage_error("--layers: '%.*s' is not a layer: expected a comma-separated list of layers in 0..%d",
                               (int)(bad_len > 200 ? 200 : bad_len), bad, L - 1);
    } else {
        for (int l = 0; l < L; l++) mask[l] = 1;
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
    printf("gate cycling: W = S = %d, layers %s, probe %s (%d prompts)\n", S, layers_text, probe_path, probe_set_count(c->ps));
    if (eval_probe(c, c->ps, NULL, NULL, "gate cycle: clean (delta 0)", &clean)) return 1;
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
        if (d % W == 0) {
            res[k] = clean;
            if (have_val) { vmean[k] = vclean_mean; memcpy(vloss + (size_t)k * VP, vclean, sizeof(double) * VP); }
            continue;
        }
        memcpy(work, orig, sizeof(float) * tt->n_floats);
        if (gate_cycle_apply(tt, work, mc, d, mask, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
        model_upload_params(c->m, work);
        model_params_updated(c->m);
        char label[64];
        snprintf(label, sizeof label, "gate cycle: delta %d (%d/%d)", d, k + 1, nd);
        if (eval_probe(c, c->ps, NULL, NULL, label, &res[k])) return 1;
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
        }
    }
    for (int k = 0; k < nd; k++) {
        printf("\ndelta %d: accuracy %% folded by phase t_K mod %d, measured A_%d(phi) and predicted A_0((phi - %d) mod %d)\n",
               deltas[k], S, deltas[k], deltas[k], S);
        printf("%-16s", "phase");
        for (int s = 0; s < S; s++) printf(" %6d", s);
        printf(" | corr  max|dev|  mean  phase-test p\n");
        for (int p = 0; p < 2; p++) {
            if (!res[k].present[p]) continue;
            printf("%-3s measured    ", probe_protocol_name(p));
            for (int s = 0; s < S; s++) printf(" %6.1f", measp[(k * 2 + p) * S + s]);
            printf(" | %5.2f  %7.1f  %5.1f  %.3g%s\n", corr[k * 2 + p], maxdev[k * 2 + p], res[k].mean[p], ptest[k * 2 + p],
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
    /* store */
    long *dl = malloc(sizeof(long) * (size_t)(nd + (have_val ? VP : 0))), *vr = dl ? dl + nd : NULL;   /* [nd], [VP] */
    if (!dl) { fprintf(stderr, "phaselab: --gate-cycle: out of memory\n"); return 1; }
    AnalysisH5 *h = ah5_begin(c->out_path, "gate_cycle", c->a.ckpt, c->st.step, err);
    if (!h) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    for (int k = 0; k < nd; k++) dl[k] = deltas[k];
    ah5_attr_str(h, "layers", layers_text);
    ah5_attr_str(h, "gate_cycle", c->a.gate_cycle);
    ah5_attr_long(h, "window", W);
    ah5_attr_long(h, "stride", S);
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
    if (have_val) {
        for (int i = 0; i < VP; i++) vr[i] = i;
        ah5_axis_long(h, "val_residue", vr, VP, "residue t mod P of the predicting position");
        const char *ax_v[] = {"delta", "val_residue"}, *ax_v1[] = {"delta"};
        ah5_data(h, "val_loss_by_residue", vloss, 2, (int[]){nd, VP}, ax_v, "validation cross-entropy by residue of the cycled model", "nats");
        ah5_data(h, "val_loss", vmean, 1, (int[]){nd}, ax_v1, "validation cross-entropy of the cycled model", "nats");
    }
    ah5_signal(h, "acc_phase", ax_s, 3);
    if (ah5_end(h, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }   /* it prints where it stored */
    free(vloss), free(vmean), free(vclean), free(a0), free(dl), free(deltas), free(mask), free(val_glob), free(probe_path);
    free(meas), free(pred), free(measp), free(predp), free(corr), free(ptest), free(maxdev), free(res), free(orig), free(work);
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
    int all = !strcmp(c->a.knockout, "all"), kl = -1, kh = -1;
    if (!all) {
        /* L:H, two decimal integers (no sign, no space), each parsed whole and range-checked: never
         * a wrap of 4294967297 to 1 */
        long long l, h;
        if (optval_pair(c->a.knockout, ':', &l, &h))
            return usage_error("--knockout: '%s' is not allowed: expected L:H (layer 0..%d, KV head 0..%d) or all", c->a.knockout, L - 1, G - 1);
        if (l >= L || h >= G)
            return usage_error("--knockout: KV head %s does not exist: the model has layers 0..%d and KV heads 0..%d", c->a.knockout, L - 1, G - 1);
        kl = (int)l, kh = (int)h;
    }
    char *probe_path = NULL;
    if (probe_path_of(c, "--knockout", &probe_path)) return 2;
    if (load_probe_checked(c, "--probe", probe_path, &c->ps)) { free(probe_path); return 2; }
    char *calib = NULL, tmp[64];
    tmp[0] = 0;
    if (c->a.calib) calib = strdup(c->a.calib);
    else {
        int rc = default_calibration(c, probe_path, &calib, tmp, sizeof tmp);
        if (rc) { if (tmp[0]) unlink(tmp); free(calib); free(probe_path); return rc; }
    }
    if (!calib) { free(probe_path); fprintf(stderr, "phaselab: --knockout: out of memory\n"); return 1; }
    /* Everything from here on (the hook included) is released at done:, on every path. */
    ProbeSet *cal = NULL;
    Knockout ko;
    int ko_ready = 0;
    double *acc = NULL, *rel = NULL, *relp = NULL, *relm = NULL, *meanacc = NULL, *offd = NULL, *phase_of = NULL,
           *cacc = NULL;
    int *map = NULL;
    long *lay = NULL, *kvh = NULL;
    double *ph = NULL, *clean_phase = NULL;
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
    if (eval_probe(c, cal, knockout_before_batch, &ko, "knockout: calibration means", &tmp_res)) goto done;
    int need[PROBE_N_PROTOCOLS];
    for (int p = 0; p < 2; p++) need[p] = probe_set_count_protocol(c->ps, p) > 0;
    if (knockout_finish_means(&ko, need, err)) { rc = usage_error("%s", err); goto done; }
    cal_b = probe_set_builder(cal);
    probe_set_free(cal);
    cal = NULL;
    ko.mode = KO_OFF;
    if (eval_probe(c, c->ps, knockout_before_batch, &ko, "knockout: clean", &clean)) goto done;

    int P = clean.residues, S = probe_phase_fold(mc);
    int n_ko = all ? L * G : 1;
    size_t cells = (size_t)L * G;
    acc = malloc(sizeof(double) * cells * 2 * P), rel = malloc(sizeof(double) * cells * 2 * P);
    relp = malloc(sizeof(double) * cells * 2 * S), relm = malloc(sizeof(double) * cells * 2);
    meanacc = malloc(sizeof(double) * cells * 2);
    map = malloc(sizeof(int) * G * P);
    offd = malloc(sizeof(double) * G), phase_of = malloc(sizeof(double) * G * P);
    cacc = malloc(sizeof(double) * 2 * P);
    ph = malloc(sizeof(double) * S), clean_phase = malloc(sizeof(double) * S);          /* [S] each */
    lay = malloc(sizeof(long) * L), kvh = malloc(sizeof(long) * G);                       /* [L], [G] */
    if (!acc || !rel || !relp || !relm || !meanacc || !map || !offd || !phase_of || !cacc || !ph || !clean_phase || !lay || !kvh) {
        fprintf(stderr, "phaselab: --knockout: out of memory for the %d x %d result tables\n", L, G);
        goto done;
    }
    for (size_t i = 0; i < cells * 2 * P; i++) acc[i] = rel[i] = NAN;
    for (size_t i = 0; i < cells * 2 * S; i++) relp[i] = NAN;
    for (size_t i = 0; i < cells * 2; i++) relm[i] = meanacc[i] = NAN;
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
        if (eval_probe(c, c->ps, knockout_before_batch, &ko, label, &r)) goto done;
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
        }
    }

    printf("\nclean: pp mean %.1f%%  ip mean %.1f%%\n", clean.mean[0], clean.mean[1]);
    for (int p = 0; p < 2; p++) {
        char chance[256];
        if (probe_not_retrieving(&clean, p, chance, sizeof chance))
            printf("%s clean model: %s; a knockout cannot lower what is not retrieved: the relative changes below measure "
                   "noise around chance\n", probe_protocol_name(p), chance);
    }
    for (int p = 0; p < 2; p++) {
        if (!clean.present[p]) continue;
        printf("\n%s: relative accuracy change %% 100 (A_ko - A_clean) / A_clean of the mean over residues, layer x KV head\n",
               probe_protocol_name(p));
        printf("%8s", "layer");
        for (int h = 0; h < G; h++) printf("   kv %-3d", h);
        printf("\n");
        for (int l = 0; l < L; l++) {
            printf("%8d", l);
            for (int h = 0; h < G; h++) printf(" %8.1f", relm[((size_t)l * G + h) * 2 + p]);
            printf("\n");
        }
        if (grid == GRID_STAGGERED)
            printf("%s: relative change by the KV head's own phase (t_K - o_g) mod %d (grid = staggered, o_g = floor(g*%d/%d))\n%8s",
                   probe_protocol_name(p), S, S, G, "L:H");
        else printf("%s: relative change by phase t_K mod %d\n%8s", probe_protocol_name(p), S, "L:H");
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
    AnalysisH5 *hf = ah5_begin(c->out_path, "knockout", c->a.ckpt, c->st.step, err);
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
