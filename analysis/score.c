/* ./train --score: per-token log-probabilities of a token stream and their phase fold with
 * bootstrap standard errors over the windows (analysis/score.h, docs/spec.md §4.9, §4.8). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "analysis/score.h"
#include "analysis/analysis_h5.h"
#include "analysis/generate.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/fsutil.h"
#include "common/interrupt.h"
#include "common/optval.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "trainer/ckpt_source.h"
#include "trainer/loss_stats.h"
#include "trainer/probe_eval.h"

#define SCORE_MAX_PERIOD 65536

typedef struct {
    const char *input, *out, *csv;
    int ids;                    /* --ids: the input is decimal ids */
    long period;                /* 0: the model's fold */
    long micro;                 /* 0: train.micro_batch */
} ScoreArgs;

typedef struct {
    int32_t *ids;               /* [n] */
    long n;
    const char *kind;           /* "shard", "ids", "text" */
    char fingerprint[SHARD_FINGERPRINT_BYTES + 1];   /* of the ids' tokenizer ("" unknown) */
    size_t text_bytes;          /* text: its bytes */
} ScoreInput;

static int usage_line(void) {
    fprintf(stderr, "usage: ./train --score CHECKPOINT_DIR --input FILE [--ids] [--period P] [--out FILE.h5] [--csv PREFIX]\n"
                    "         [--micro-batch B] [section.key=value ...]\n");
    return 2;
}

static int opt_long(const char *opt, const char *v, long lo, long hi, long *out) {
    long long x;
    if (optval_int(v, lo, hi, &x)) {
        fprintf(stderr, "phaselab: --score: %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
        return 2;
    }
    *out = (long)x;
    return 0;
}

/* The input's ids (ScoreInput). -2 bad input, -1 runtime; err names the file. */
static int read_input(const CkptSource *src, const ScoreArgs *a, ScoreInput *in, char *err) {
    memset(in, 0, sizeof *in);
    FILE *f = fopen(a->input, "rb");
    if (!f) return set_err(err, "%s: cannot open the --input file: %s", a->input, strerror(errno)), -2;
    char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == sizeof magic && !memcmp(magic, SHARD_MAGIC, sizeof magic)) {
        Shard s;
        if (shard_open(&s, a->input, err)) return -2;
        in->kind = "shard";
        snprintf(in->fingerprint, sizeof in->fingerprint, "%s", s.fingerprint);
        if (ckpt_source_check_tokenizer(src, "--input", a->input, in->fingerprint, stdout, err)) {
            shard_close(&s);
            return -2;
        }
        if (s.n_tokens > (uint64_t)INT_MAX) {
            set_err(err, "%s: %llu tokens, more than the %d one --score takes; split the shard", a->input,
                    (unsigned long long)s.n_tokens, INT_MAX);
            shard_close(&s);
            return -2;
        }
        in->n = (long)s.n_tokens;
        in->ids = malloc(sizeof(int32_t) * (size_t)(in->n ? in->n : 1));
        uint32_t *u = malloc(sizeof(uint32_t) * (size_t)(in->n ? in->n : 1));
        int rc = 0;
        if (!in->ids || !u) rc = set_err(err, "%s: out of memory for %ld tokens", a->input, in->n);
        else if (shard_read_tokens(&s, 0, (uint64_t)in->n, (uint32_t)src->cfg.model.vocab_size, u, err)) rc = -2;
        else for (long i = 0; i < in->n; i++) in->ids[i] = (int32_t)u[i];
        free(u);
        shard_close(&s);
        return rc;
    }
    if (a->ids) {
        f = fopen(a->input, "r");
        if (!f) return set_err(err, "%s: cannot open the --input file: %s", a->input, strerror(errno)), -2;
        int n = 0;
        int bad = prompt_ids_read(f, a->input, &in->ids, &n, err);
        fclose(f);
        if (bad) return -2;
        in->n = n;
        in->kind = "ids";
        return 0;
    }
    /* text: the checkpoint's own tokenizer */
    const char *spec = src->tokenizer_json ? src->tokenizer_json : !strcmp(src->tokenizer_fp, "bytes") ? "bytes" : NULL;
    if (!spec)
        return set_err(err, "%s: --input is read as text, but the checkpoint %s has no text tokenizer (%s); give its ids "
                            "with --ids, or a token shard", a->input, src->dir,
                       src->tokenizer_fp[0] ? "its ids are synthetic" : "no tokenizer.json"), -2;
    size_t bytes = 0;
    char *text = fs_read_file(a->input, &bytes, err);
    if (!text) return -2;
    Tokenizer *tok = tokenizer_open(spec, err);
    if (!tok) { free(text); return -2; }
    TokenizerState *st = tokenizer_state_new(tok);
    TokenIds ti = {0};
    long replaced = st ? tokenizer_encode(st, text, bytes, &ti, err) : -1;
    if (!st) set_err(err, "%s: out of memory for the tokenizer", a->input);
    int rc = 0;
    if (replaced < 0) rc = -1;
    else if (ti.n > (size_t)INT_MAX) set_err(err, "%s: %zu tokens, more than the %d one --score takes; split the file", a->input, ti.n, INT_MAX), rc = -2;
    else if (!(in->ids = malloc(sizeof(int32_t) * (ti.n ? ti.n : 1)))) rc = set_err(err, "%s: out of memory for %zu tokens", a->input, ti.n);
    else {
        for (size_t i = 0; i < ti.n; i++) in->ids[i] = (int32_t)ti.ids[i];
        in->n = (long)ti.n;
        in->kind = "text";
        in->text_bytes = bytes;
        snprintf(in->fingerprint, sizeof in->fingerprint, "%s", tokenizer_fingerprint(tok));
        if (replaced > 0)
            fprintf(stderr, "phaselab: warning: %s: %ld invalid UTF-8 sequence(s) replaced by U+FFFD before encoding\n",
                    a->input, replaced);
        printf("input %s: %zu bytes of text, %ld tokens (tokenizer %s)\n", a->input, bytes, in->n, spec);
    }
    token_ids_free(&ti);
    tokenizer_state_free(st);
    tokenizer_free(tok);
    free(text);
    return rc;
}

/* One CSV from a text buffer built here, written crash-safe. */
typedef struct { TextBuf b; int oom; } Csv;
static void csv_printf(Csv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void csv_printf(Csv *c, const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof line || text_buf_append(&c->b, line, (size_t)k)) c->oom = 1;
}
/* The CSVs' names, PREFIX_NNN.{phase,tokens}.csv with NNN the group's number (a later call never
 * replaces them), the next free number when those exist already (a group stored in a sidecar is
 * numbered afresh there); when PREFIX's directory no longer exists (the checkpoint was removed
 * while scoring; the .h5 went to the current directory, analysis/analysis_h5.h), in the current
 * directory as DIRNAME.BASE_NNN.... phase and tokens have room for strlen(prefix) + 32 + 12. */
static void csv_names(const char *prefix, long no, char *phase, char *tokens) {
    char dir[4096] = ".", moved[4096];
    const char *slash = strrchr(prefix, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == prefix ? 1 : (int)(slash - prefix), prefix);
    if (slash && !fs_exists(dir)) {
        const char *b = strrchr(dir, '/');
        snprintf(moved, sizeof moved, "%s.%s", b ? b + 1 : dir, slash + 1);
        if (strlen(moved) <= strlen(prefix)) {
            fprintf(stderr, "phaselab: warning: %s no longer exists: the CSVs go to the current directory\n", dir);
            prefix = moved;
        }
    }
    for (long k = no; k < no + 1000; k++) {
        sprintf(phase, "%s_%03ld.phase.csv", prefix, k);
        sprintf(tokens, "%s_%03ld.tokens.csv", prefix, k);
        if (!fs_exists(phase) && !fs_exists(tokens)) return;
    }
}

static int csv_publish(Csv *c, const char *path, char *err) {
    int rc = c->oom ? set_err(err, "%s: out of memory for the CSV text", path)
                    : fs_write_atomic(path, c->b.data ? c->b.data : "", c->b.len, err);
    text_buf_free(&c->b);
    return rc;
}

int cmd_score(int argc, char **argv) {
    if (argc < 1 || argv[0][0] == '-') return usage_line();
    const char *ckpt = argv[0];
    ScoreArgs a = {0};
    char **overrides = malloc(sizeof(char *) * (size_t)argc);
    int n_over = 0;
    if (!overrides) { fprintf(stderr, "phaselab: --score: out of memory\n"); return 1; }
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--ids")) { a.ids = 1; continue; }
        if (o[0] == '-' && o[1] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "phaselab: --score: %s needs a value\n", o); free(overrides); return 2; }
            const char *v = argv[++i];
            int rc = !strcmp(o, "--input") ? (a.input = v, 0)
                   : !strcmp(o, "--out") ? (a.out = v, 0)
                   : !strcmp(o, "--csv") ? (a.csv = v, 0)
                   : !strcmp(o, "--period") ? opt_long(o, v, 1, SCORE_MAX_PERIOD, &a.period)
                   : !strcmp(o, "--micro-batch") ? opt_long(o, v, 1, 4096, &a.micro)
                   : (fprintf(stderr, "phaselab: --score: unknown option %s (expected --input FILE, --ids, --period P, "
                                      "--out FILE.h5, --csv PREFIX, --micro-batch B or section.key=value)\n", o), 2);
            if (rc) { free(overrides); return rc; }
        } else overrides[n_over++] = argv[i];
    }
    if (!a.input) { free(overrides); fprintf(stderr, "phaselab: --score: --input FILE is required\n"); return usage_line(); }
    char err[ERR_LEN];
    CkptSource src;
    int rc = ckpt_source_open(&src, ckpt, n_over, overrides, stdout, err);
    free(overrides);
    if (rc) { fprintf(stderr, "phaselab: %s\n", err); return rc == -2 ? 2 : 1; }
    const Config *cfg = &src.cfg;
    const int T = cfg->data.seq_len, V = cfg->model.vocab_size;
    const int P = a.period ? (int)a.period : probe_phase_fold(&cfg->model);
    ScoreInput in = {0};
    char *out = NULL, *prefix = NULL, *path_phase = NULL, *path_tokens = NULL;
    Model *m = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    float *loss = NULL, *lp = NULL;
    unsigned char *counted = NULL;
    double *dbuf = NULL, *wsum = NULL, *wcnt = NULL;   /* [n_win, P]: each window's loss sum and count by phase */
    long *index = NULL;
    LossStats ls = {0};
    rc = 2;
    int r = read_input(&src, &a, &in, err);
    if (r) { fprintf(stderr, "phaselab: %s\n", err); rc = r == -2 ? 2 : 1; goto done; }
    if (!strcmp(in.kind, "text") && ckpt_source_check_tokenizer(&src, "--input", a.input, in.fingerprint, stdout, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        goto done;
    }
    for (long i = 0; i < in.n; i++)
        if (in.ids[i] < 0 || in.ids[i] >= V) {
            fprintf(stderr, "phaselab: %s: token %ld is id %d, outside the model's vocabulary 0..%d (%s)\n", a.input, i,
                    in.ids[i], V - 1, src.config_path);
            goto done;
        }
    if (in.n < 2) {
        fprintf(stderr, "phaselab: %s: %ld token(s); scoring needs at least 2 (the first token is context only)\n",
                a.input, in.n);
        goto done;
    }
    const long N = in.n - 1;                                   /* scored tokens 1..n-1 */
    const long n_win = (N + T - 1) / T;
    long micro = a.micro ? a.micro : cfg->train.micro_batch;
    if (micro > n_win) micro = n_win;
    /* outputs: FILE.h5 and PREFIX_NNN.{phase,tokens}.csv (NNN: the group's number, known at ah5_begin) */
    if (a.out) out = strdup(a.out);
    else if ((out = malloc(strlen(ckpt) + sizeof "/score.h5"))) sprintf(out, "%s/score.h5", ckpt);
    if (!out) { fprintf(stderr, "phaselab: --score: out of memory\n"); rc = 1; goto done; }
    size_t ol = strlen(out);
    prefix = a.csv ? strdup(a.csv) : strndup(out, ol > 3 && !strcmp(out + ol - 3, ".h5") ? ol - 3 : ol);
    path_phase = prefix ? malloc(strlen(prefix) + 32 + sizeof ".tokens.csv") : NULL;   /* (+ "_NNN" below) */
    path_tokens = prefix ? malloc(strlen(prefix) + 32 + sizeof ".tokens.csv") : NULL;
    if (!path_phase || !path_tokens) { fprintf(stderr, "phaselab: --score: out of memory\n"); rc = 1; goto done; }
    sprintf(path_phase, "%s.phase.csv", prefix), sprintf(path_tokens, "%s.tokens.csv", prefix);
    if (ah5_check_target(out, a.out != NULL, err)) { fprintf(stderr, "phaselab: --out %s\n", err); goto done; }
    if (ah5_check_target(path_phase, 0, err)) { fprintf(stderr, "phaselab: --csv %s\n", err); goto done; }

    rc = 1;                                                    /* from here on: runtime failures */
    const Backend *be = backend_select(cfg->run.device, cfg->run.threads, 0, err);
    if (!be) { fprintf(stderr, "phaselab: %s\n", err); rc = 2; goto done; }
    m = model_create(&cfg->model, be, (int)micro, T, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); goto done; }
    if (ckpt_source_load(&src, m, err)) { fprintf(stderr, "phaselab: %s\n", err); goto done; }
    if (src.has_state) printf("checkpoint %s: step %ld, %ld tokens\n", ckpt, src.st.step, src.st.tokens);
    else printf("checkpoint %s: weights only (step %ld)\n", ckpt, src.st.step);
    const size_t BT = (size_t)micro * T;
    tok = malloc(sizeof(int32_t) * BT), tgt = malloc(sizeof(int32_t) * BT);
    loss = malloc(sizeof(float) * BT), counted = malloc(BT);
    lp = malloc(sizeof(float) * (size_t)N);
    wsum = calloc((size_t)n_win * P, sizeof(double)), wcnt = calloc((size_t)n_win * P, sizeof(double));
    if (!tok || !tgt || !loss || !counted || !lp || !wsum || !wcnt) {
        fprintf(stderr, "phaselab: --score: out of memory for %ld tokens (micro-batch %ld x %d)\n", N, micro, T);
        goto done;
    }
    const double t0 = clock_seconds();
    for (long k0 = 0; k0 < n_win; k0 += micro) {
        if (interrupt_signal()) {
            fprintf(stderr, "phaselab: interrupted by signal %d after %ld of %ld windows: nothing written\n",
                    interrupt_signal(), k0, n_win);
            goto done;
        }
        int B = (int)(n_win - k0 < micro ? n_win - k0 : micro);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                long i = (k0 + b) * T + t;                     /* input token i predicts token i + 1 */
                size_t o = (size_t)b * T + t;
                int real = i + 1 < in.n;
                tok[o] = i < in.n ? in.ids[i] : 0;             /* padding after the end: causal, never seen */
                tgt[o] = real ? in.ids[i + 1] : -1;
                counted[o] = (unsigned char)real;
            }
        model_forward(m, tok, tgt, B, loss);
        for (int b = 0; b < B; b++) {
            const size_t o = (size_t)b * T, w = (size_t)(k0 + b) * P;
            for (int t = 0; t < T; t++)
                if (counted[o + t]) {
                    lp[(k0 + b) * T + t] = -loss[o + t];
                    wsum[w + t % P] += loss[o + t];
                    wcnt[w + t % P] += 1;
                }
        }
    }
    const double secs = clock_seconds() - t0;
    if (loss_stats_compute(wsum, wcnt, n_win, P, LOSS_STATS_B, LOSS_STATS_SEED, &ls, err)) {
        fprintf(stderr, "phaselab: --score: %s\n", err);
        goto done;
    }
    const double mean = ls.overall, se = ls.overall_se;
    printf("scored %ld tokens in %ld windows of %d (%s %s) in %.1f s, %.0f tokens/s\n", N, n_win, T, in.kind, a.input,
           secs, secs > 0 ? N / secs : 0.0);
    if (isnan(se))   /* one window: loss_stats gives no SE (the bootstrap needs 2 windows) */
        printf("mean NLL %.4f nats/token (no standard error: %ld window, the bootstrap over windows needs 2 or more), "
               "perplexity %.2f", mean, n_win, exp(mean));
    else
        printf("mean NLL %.4f +- %.4f nats/token (bootstrap SE over %ld windows), perplexity %.2f", mean, se, n_win, exp(mean));
    if (in.text_bytes) printf(", %.4f bits/byte", mean * N / log(2.0) / (double)in.text_bytes);
    printf("\nby phase t mod %d (t: the predicting position in its window)%s:\n", P, probe_fold_note(&cfg->model));
    printf("  phase   tokens       nll       se\n");
    Csv cp = {0}, ct = {0};
    csv_printf(&cp, "phase,tokens,nll,se\n");
    for (int g = 0; g < P; g++) {
        printf("  %5d %8.0f %9.4f %8.4f\n", g, ls.tokens[g], ls.mean[g], ls.se[g]);
        csv_printf(&cp, "%d,%.0f,%.9g,%.9g\n", g, ls.tokens[g], ls.mean[g], ls.se[g]);
    }
    csv_printf(&cp, "all,%.0f,%.9g,%.9g\n", ls.overall_tokens, mean, se);
    if (ls.df1 > 0 && ls.df2 > 0 && isfinite(ls.F))
        printf("homogeneity across the %d phases (Hotelling T^2, docs/spec.md §4.8): F(%d, %d) = %.3f, p = %.3g\n", ls.tested,
               ls.df1, ls.df2, ls.F, ls.p);
    else   /* the test compares phases over windows: it needs more windows than phases */
        printf("homogeneity across the phases: not testable with %ld window%s of %d tokens (Hotelling's T^2 needs more "
               "windows than tested phases, %d here; the SEs are NaN with one window); score a longer input\n",
               n_win, n_win == 1 ? "" : "s", T, P);
    csv_printf(&ct, "index,window,position,phase,token_id,logprob\n");
    for (long j = 0; j < N; j++)
        csv_printf(&ct, "%ld,%ld,%ld,%ld,%d,%.9g\n", j + 1, j / T, j % T, (j % T) % P, in.ids[j + 1], lp[j]);
    /* HDF5: the fold (signal) and the per-token arrays */
    size_t nd = (size_t)N > (size_t)3 * P ? (size_t)N : (size_t)3 * P;
    dbuf = malloc(sizeof(double) * nd);
    index = malloc(sizeof(long) * (size_t)(N > P ? N : P));
    if (!dbuf || !index || cp.oom || ct.oom) {
        fprintf(stderr, "phaselab: --score: out of memory for the outputs of %ld tokens\n", N);
        text_buf_free(&cp.b), text_buf_free(&ct.b);
        goto done;
    }
    AnalysisH5 *h = ah5_begin(out, "score", ckpt, src.st.step, src.overrides, err);
    if (!h) { fprintf(stderr, "phaselab: %s\n", err); text_buf_free(&cp.b), text_buf_free(&ct.b); goto done; }
    const char *gnum = strrchr(ah5_group_name(h), '_');
    long group_no = gnum ? strtol(gnum + 1, NULL, 10) : 0;   /* /score_NNN: the CSVs' number (csv_names) */
    ah5_input_file(h, "input", a.input);
    ah5_attr_str(h, "input_kind", in.kind);
    ah5_attr_str(h, "tokenizer", in.fingerprint[0] ? in.fingerprint : src.tokenizer_fp);
    ah5_attr_long(h, "seq_len", T);
    ah5_attr_long(h, "period", P);
    ah5_attr_long(h, "windows", n_win);
    ah5_attr_long(h, "tokens", N);
    ah5_attr_double(h, "nll", mean);
    ah5_attr_double(h, "nll_se", se);
    if (in.text_bytes) ah5_attr_long(h, "text_bytes", (long)in.text_bytes);
    ah5_attr_str(h, "se_method", "bootstrap over the windows (docs/spec.md 4.8)");
    ah5_attr_long(h, "bootstrap_B", ls.B);
    ah5_attr_long(h, "bootstrap_seed", (long)ls.seed);
    ah5_attr_double(h, "F_phase", ls.F);
    ah5_attr_long(h, "df1_phase", ls.df1);
    ah5_attr_long(h, "df2_phase", ls.df2);
    ah5_attr_double(h, "p_phase", ls.p);
    for (int g = 0; g < P; g++) {
        index[g] = g;
        dbuf[g] = ls.mean[g], dbuf[P + g] = ls.se[g], dbuf[2 * P + g] = ls.tokens[g];
    }
    const char *ax_p[] = {"phase"}, *ax_t[] = {"token"};
    ah5_axis_long(h, "phase", index, P, "phase t mod period of the predicting position");
    ah5_data(h, "nll", dbuf, 1, (int[]){P}, ax_p, "mean next-token NLL by phase", "nats");
    ah5_data(h, "nll_errors", dbuf + P, 1, (int[]){P}, ax_p, "bootstrap standard error of nll over the windows", "nats");
    ah5_data(h, "count", dbuf + 2 * P, 1, (int[]){P}, ax_p, "scored tokens", NULL);
    for (long j = 0; j < N; j++) index[j] = j + 1;
    ah5_axis_long(h, "token", index, (int)N, "index of the scored token in the input");
    for (long j = 0; j < N; j++) dbuf[j] = lp[j];
    ah5_data(h, "logprob", dbuf, 1, (int[]){(int)N}, ax_t, "log-probability of the token", "nats");
    for (long j = 0; j < N; j++) dbuf[j] = in.ids[j + 1];
    ah5_data(h, "token_id", dbuf, 1, (int[]){(int)N}, ax_t, "token id", NULL);
    for (long j = 0; j < N; j++) dbuf[j] = (double)(j / T);
    ah5_data(h, "window", dbuf, 1, (int[]){(int)N}, ax_t, "window k", NULL);
    for (long j = 0; j < N; j++) dbuf[j] = (double)(j % T);
    ah5_data(h, "position", dbuf, 1, (int[]){(int)N}, ax_t, "predicting position t in the window", NULL);
    ah5_signal(h, "nll", ax_p, 1);
    if (ah5_end(h, err)) { fprintf(stderr, "phaselab: %s\n", err); text_buf_free(&cp.b), text_buf_free(&ct.b); goto done; }
    csv_names(prefix, group_no, path_phase, path_tokens);
    if (csv_publish(&cp, path_phase, err) || csv_publish(&ct, path_tokens, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        text_buf_free(&ct.b);
        goto done;
    }
    printf("wrote %s and %s\n", path_phase, path_tokens);
    rc = 0;
done:
    if (m) model_free(m);
    loss_stats_free(&ls);
    free(in.ids), free(out), free(prefix), free(path_phase), free(path_tokens);
    free(tok), free(tgt), free(loss), free(counted), free(lp), free(dbuf), free(index), free(wsum), free(wcnt);
    ckpt_source_close(&src);
    return rc;
}
