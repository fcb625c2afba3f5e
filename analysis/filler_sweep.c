/* Filler sweep (definitions in analysis/filler_sweep.h): the sweep file reader, the periodogram,
 * and the run: one forward pass per batch of fillers counts L (at the batch's longest row, not
 * at seq_len), P(a) and P(b) read from the
 * per-token loss at the prompt's last position (P = exp(-loss) with that target). */
#include "analysis/filler_sweep.h"
#include "common/clock.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "common/errors.h"
#include "model/model.h"
#include "analysis/analysis_h5.h"
#include "trainer/checkpoint.h"
#include "trainer/probe_eval.h"

typedef struct {
    char prompt[65536], text[65536], tokenizer[1024], a[256], b[256], filler[256];
    char a_text[256], b_text[256], filler_text[256], L0[64], L1[64];
    int line_prompt, line_a, line_b, line_filler, line_L;
    char bad[256];
    int bad_line;
} RawSpec;

static int on_key(void *user, const char *section, const char *name, const char *value, int lineno) {
    RawSpec *r = user;
    if (strcmp(section, "sweep")) {
        if (!r->bad[0]) snprintf(r->bad, sizeof r->bad, "section [%s]: expected [sweep]", section), r->bad_line = lineno;
        return 1;
    }
    struct { const char *k; char *dst; size_t n; int *line; } keys[] = {
        {"prompt", r->prompt, sizeof r->prompt, &r->line_prompt}, {"text", r->text, sizeof r->text, &r->line_prompt},
        {"tokenizer", r->tokenizer, sizeof r->tokenizer, NULL}, {"a", r->a, sizeof r->a, &r->line_a},
        {"b", r->b, sizeof r->b, &r->line_b}, {"filler", r->filler, sizeof r->filler, &r->line_filler},
        {"a_text", r->a_text, sizeof r->a_text, &r->line_a}, {"b_text", r->b_text, sizeof r->b_text, &r->line_b},
        {"filler_text", r->filler_text, sizeof r->filler_text, &r->line_filler},
        {"L0", r->L0, sizeof r->L0, &r->line_L}, {"L1", r->L1, sizeof r->L1, &r->line_L}};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(name, keys[i].k)) {
            snprintf(keys[i].dst, keys[i].n, "%s", value);
            if (keys[i].line) *keys[i].line = lineno;
            return 1;
        }
    if (!r->bad[0]) snprintf(r->bad, sizeof r->bad, "unknown key '%s' (expected prompt or text+tokenizer, a, b, filler, L0, L1)", name), r->bad_line = lineno;
    return 1;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* A small INI reader (lines of any length, unlike the system inih's 200-byte buffer):
 * [section], key = value, comments from ';' or '#' at the start of a line. Returns 0, the
 * first malformed line's number, or -1 when the file cannot be read. */
static int parse_ini(FILE *f, RawSpec *r) {
    char *line = NULL, section[128] = "";
    size_t cap = 0;
    int lineno = 0, bad = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == ';' || *s == '#') continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e || e[1]) { bad = lineno; break; }
            *e = 0;
            snprintf(section, sizeof section, "%s", trim(s + 1));
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) { bad = lineno; break; }
        *eq = 0;
        on_key(r, section, trim(s), trim(eq + 1), lineno);
    }
    int rd_err = ferror(f);
    free(line);
    return bad ? bad : rd_err ? -1 : 0;
}

/* Strips one pair of surrounding double quotes (so that text keys can hold leading spaces). */
static void unquote(char *s) {
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') { memmove(s, s + 1, n - 2); s[n - 2] = 0; }
}

static int parse_id(const char *path, int line, const char *key, const char *s, int vocab, int32_t *out, char *err) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (*end && isspace((unsigned char)*end)) end++;
    if (!*s || *end || errno || v < 0 || v >= vocab)
        return set_err(err, "%s:%d: %s = '%s': expected a token id in 0..%d (the model's vocabulary)", path, line, key, s, vocab - 1);
    *out = (int32_t)v;
    return 0;
}

static int encode_one(const char *path, int line, const char *key, TokenizerState *ts, const char *text, int vocab, int32_t *out,
                      char *err) {
    TokenIds ids = {0};
    char e2[ERR_LEN];
    tokenizer_encode(ts, text, strlen(text), &ids, e2);
    int rc = 0;
    if (ids.n != 1) rc = set_err(err, "%s:%d: %s = \"%s\" is %zu tokens, expected exactly one", path, line, key, text, ids.n);
    else if (ids.ids[0] >= (uint32_t)vocab)
        rc = set_err(err, "%s:%d: %s = \"%s\" is token %u, outside the model's vocabulary (< %d)", path, line, key, text, ids.ids[0], vocab);
    else *out = (int32_t)ids.ids[0];
    token_ids_free(&ids);
    return rc;
}

int filler_sweep_load(const char *path, int vocab, int T, FillerSweepSpec *spec, char *err) {
    memset(spec, 0, sizeof *spec);
    RawSpec *r = calloc(1, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f) { free(r); return set_err(err, "%s: cannot open the sweep file: %s", path, strerror(errno)); }
    int rc = parse_ini(f, r);
    fclose(f);
    Tokenizer *tok = NULL;
    TokenizerState *ts = NULL;
    int out = -1;
    if (rc > 0) { set_err(err, "%s:%d: not an INI line", path, rc); goto done; }
    if (rc < 0) { set_err(err, "%s: cannot read the sweep file", path); goto done; }
    if (r->bad[0]) { set_err(err, "%s:%d: %s", path, r->bad_line, r->bad); goto done; }
    unquote(r->text), unquote(r->a_text), unquote(r->b_text), unquote(r->filler_text);
    int need_tok = r->text[0] || r->a_text[0] || r->b_text[0] || r->filler_text[0];
    if (need_tok) {
        if (!r->tokenizer[0]) { set_err(err, "%s: text keys need tokenizer = PATH (a tokenizer.json, or bytes)", path); goto done; }
        char tpath[2048];
        const char *slash = strrchr(path, '/');
        if (strcmp(r->tokenizer, "bytes") && r->tokenizer[0] != '/' && slash)
            snprintf(tpath, sizeof tpath, "%.*s/%s", (int)(slash - path), path, r->tokenizer);
        else snprintf(tpath, sizeof tpath, "%s", r->tokenizer);
        char e2[ERR_LEN];
        tok = tokenizer_open(tpath, e2);
        if (!tok) { set_err(err, "%s: tokenizer: %s", path, e2); goto done; }
        ts = tokenizer_state_new(tok);
    }
    if (!!r->prompt[0] + !!r->text[0] != 1) { set_err(err, "%s: give exactly one of prompt = TOKEN IDS or text = TEXT", path); goto done; }
    if (r->prompt[0]) {
        spec->prompt = malloc(sizeof(int32_t) * (strlen(r->prompt) / 2 + 2));
        char *s = r->prompt;
        while (*s) {
            while (*s && (isspace((unsigned char)*s) || *s == ',')) s++;
            if (!*s) break;
            char *end;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (end == s || errno || v < 0 || v >= vocab || (*end && !isspace((unsigned char)*end) && *end != ',')) {
                set_err(err, "%s:%d: prompt: '%.*s' is not a token id in 0..%d (the model's vocabulary)", path, r->line_prompt,
                        (int)strcspn(s, " ,\t"), s, vocab - 1);
                goto done;
            }
            spec->prompt[spec->n_prompt++] = (int32_t)v;
            s = end;
        }
        snprintf(spec->text_source, sizeof spec->text_source, "tokens");
    } else {
        TokenIds ids = {0};
        char e2[ERR_LEN];
        tokenizer_encode(ts, r->text, strlen(r->text), &ids, e2);
        spec->prompt = malloc(sizeof(int32_t) * (ids.n + 1));
        for (size_t i = 0; i < ids.n; i++) {
            if (ids.ids[i] >= (uint32_t)vocab) {
                set_err(err, "%s:%d: text encodes to token %u, outside the model's vocabulary (< %d)", path, r->line_prompt, ids.ids[i], vocab);
                token_ids_free(&ids);
                goto done;
            }
            spec->prompt[spec->n_prompt++] = (int32_t)ids.ids[i];
        }
        token_ids_free(&ids);
        snprintf(spec->text_source, sizeof spec->text_source, "text via %s", r->tokenizer);
    }
    if (spec->n_prompt < 1) { set_err(err, "%s: the prompt is empty", path); goto done; }
    struct { const char *id, *text, *name; int line; int32_t *dst; } c[] = {
        {r->a, r->a_text, "a", r->line_a, &spec->a}, {r->b, r->b_text, "b", r->line_b, &spec->b},
        {r->filler, r->filler_text, "filler", r->line_filler, &spec->filler}};
    for (int i = 0; i < 3; i++) {
        if (c[i].id[0]) { if (parse_id(path, c[i].line, c[i].name, c[i].id, vocab, c[i].dst, err)) goto done; }
        else if (c[i].text[0]) { if (encode_one(path, c[i].line, c[i].name, ts, c[i].text, vocab, c[i].dst, err)) goto done; }
        else { set_err(err, "%s: missing %s (a token id, or %s_text with a tokenizer)", path, c[i].name, c[i].name); goto done; }
    }
    if (spec->a == spec->b) { set_err(err, "%s:%d: a and b are the same token %d; expected two candidates", path, r->line_b, spec->a); goto done; }
    char *e0, *e1;
    long L0 = strtol(r->L0, &e0, 10), L1 = strtol(r->L1, &e1, 10);
    int maxL = T - spec->n_prompt;
    if (!r->L0[0] || !r->L1[0] || *e0 || *e1 || L0 < 0 || L1 < L0 + 3 || L1 > maxL) {
        set_err(err, "%s:%d: L0 = '%s', L1 = '%s': expected integers 0 <= L0, L0 + 3 <= L1 <= %d (T %d minus the %d prompt tokens)", path,
                r->line_L, r->L0, r->L1, maxL, T, spec->n_prompt);
        goto done;
    }
    spec->L0 = (int)L0, spec->L1 = (int)L1;
    out = 0;
done:
    if (ts) tokenizer_state_free(ts);
    if (tok) tokenizer_free(tok);
    free(r);
    if (out) filler_sweep_free(spec);
    return out;
}

void filler_sweep_free(FillerSweepSpec *spec) {
    free(spec->prompt);
    spec->prompt = NULL;
}

double periodogram(const double *x, int n, double *power, double *period) {
    if (n < 4) return NAN;
    /* remove the least-squares line a + b i (the mean and a linear trend) */
    double mi = (n - 1) / 2.0, mx = 0, sxy = 0, sxx = 0;
    for (int i = 0; i < n; i++) mx += x[i];
    mx /= n;
    for (int i = 0; i < n; i++) sxy += (i - mi) * (x[i] - mx), sxx += (i - mi) * (i - mi);
    double slope = sxx > 0 ? sxy / sxx : 0.0;
    int best = -1;
    for (int k = 1; k <= n / 2; k++) {
        double re = 0, im = 0;
        for (int i = 0; i < n; i++) {
            double ang = -2.0 * M_PI * (double)k * i / n, y = x[i] - mx - slope * (i - mi);
            re += y * cos(ang);
            im += y * sin(ang);
        }
        power[k - 1] = (re * re + im * im) / n;
        period[k - 1] = (double)n / k;
        if (best < 0 || power[k - 1] > power[best - 1] * (1 + 1e-12)) best = k;
    }
    return (double)n / best;
}

int folded_period(const double *x, int n, double *explained) {
    if (n < 4) return -1;
    double mean = 0, total = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) total += (x[i] - mean) * (x[i] - mean);
    double best = 0;
    for (int p = 2; p <= n / 2; p++) {
        double between = 0;
        for (int ph = 0; ph < p; ph++) {
            double sum = 0;
            int cnt = 0;
            for (int i = ph; i < n; i += p) sum += x[i], cnt++;
            if (cnt) between += cnt * (sum / cnt - mean) * (sum / cnt - mean);
        }
        explained[p - 2] = total > 0 ? between / total : 0.0;
        if (explained[p - 2] > best) best = explained[p - 2];
    }
    for (int p = 2; p <= n / 2; p++)
        if (best > 0 && explained[p - 2] >= 0.9 * best) return p;
    return -1;
}

int filler_sweep_main(const FillerSweepEnv *env, const char *path) {
    const Config *cfg = env->cfg;
    int T = cfg->data.seq_len, micro = cfg->train.micro_batch;
    char err[ERR_LEN];
    FillerSweepSpec sp;
    if (filler_sweep_load(path, cfg->model.vocab_size, T, &sp, err)) {
        fprintf(stderr, "phaselab: --filler-sweep %s\n", err);
        return 2;
    }
    if (micro < 2) micro = 2;
    const Backend *be = backend_select(cfg->run.device, cfg->run.threads, 0, err);
    if (!be) { fprintf(stderr, "phaselab: %s\n", err); filler_sweep_free(&sp); return 2; }
    Model *m = model_create(&cfg->model, be, micro, T, err);
    TrainState st;
    if (!m || checkpoint_read_state(env->ckpt, &st, err) || checkpoint_load(env->ckpt, m, NULL, &st, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        if (m) model_free(m);
        filler_sweep_free(&sp);
        return 1;
    }
    printf("checkpoint %s: step %ld, %ld tokens\n", env->ckpt, st.step, st.tokens);
    int n = sp.L1 - sp.L0 + 1;
    double *pa = malloc(sizeof(double) * n), *pb = malloc(sizeof(double) * n), *diff = malloc(sizeof(double) * n);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)micro * T), *targets = malloc(sizeof(int32_t) * (size_t)micro * T);
    float *losses = malloc(sizeof(float) * (size_t)micro * T);
    int rows_per = micro / 2;             /* each L: one row with target a, one with target b */
    double t0 = clock_seconds(), last = t0;
    for (int s = 0; s < n; s += rows_per) {
        int k = n - s < rows_per ? n - s : rows_per;
        /* the batch runs at the length of its longest row (the model is causal: a shorter row
         * padded at its end scores as at its own length), not at seq_len */
        const int Tb = sp.L0 + s + k - 1 + sp.n_prompt;
        for (int i = 0; i < 2 * k; i++) {
            int L = sp.L0 + s + i / 2, len = L + sp.n_prompt;
            int32_t *row = tokens + (size_t)i * Tb, *tg = targets + (size_t)i * Tb;
            for (int t = 0; t < Tb; t++) row[t] = 0, tg[t] = -1;
            for (int t = 0; t < L; t++) row[t] = sp.filler;
            memcpy(row + L, sp.prompt, sizeof(int32_t) * sp.n_prompt);
            tg[len - 1] = i % 2 ? sp.b : sp.a;
        }
        if (model_set_seq_len(m, Tb, err)) {
            fprintf(stderr, "phaselab: --filler-sweep %s: %s\n", path, err);
            free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses);
            model_free(m);
            filler_sweep_free(&sp);
            return 1;
        }
        model_forward(m, tokens, targets, 2 * k, losses);
        for (int i = 0; i < 2 * k; i++) {
            int L = sp.L0 + s + i / 2, len = L + sp.n_prompt;
            double p = exp(-(double)losses[(size_t)i * Tb + len - 1]);
            if (i % 2) pb[s + i / 2] = p; else pa[s + i / 2] = p;
        }
        double now = clock_seconds();
        if (now - last >= 2.0 || s + k >= n) {
            fprintf(stderr, "filler sweep: %d/%d lengths (%.0f%%), %.0fs\n", s + k, n, 100.0 * (s + k) / n, now - t0);
            last = now;
        }
    }
    for (int i = 0; i < n; i++) diff[i] = pa[i] - pb[i];
    int nk = n / 2;
    double *power = malloc(sizeof(double) * (nk ? nk : 1)), *period = malloc(sizeof(double) * (nk ? nk : 1));
    double peak = periodogram(diff, n, power, period);
    double *explained = malloc(sizeof(double) * (n / 2 > 1 ? n / 2 : 1));
    int fold_p = folded_period(diff, n, explained);
    int flips = 0;
    for (int i = 1; i < n; i++) flips += (diff[i] > 0) != (diff[i - 1] > 0);
    printf("filler sweep %s: prompt of %d tokens (%s), a = %d, b = %d, filler = %d, L = %d..%d\n", path, sp.n_prompt, sp.text_source,
           sp.a, sp.b, sp.filler, sp.L0, sp.L1);
    printf("%5s %5s %10s %10s %11s\n", "L", "L%S", "P(a)", "P(b)", "P(a)-P(b)");
    int S = probe_phase_fold(&cfg->model);   /* S, or 8 for full attention */
    for (int i = 0; i < n; i++)
        printf("%5d %5d %10.4f %10.4f %+11.4f\n", sp.L0 + i, (sp.L0 + i) % S, pa[i], pb[i], diff[i]);
    printf("periodogram of P(a)-P(b) over %d points: peak period %.2f (power %.4g); folded period %d (%.1f%% of the variance); "
           "%d sign flips; S = %d\n", n, peak, nk ? power[(int)lround(n / peak) - 1] : NAN, fold_p,
           fold_p > 1 ? 100.0 * explained[fold_p - 2] : NAN, flips, S);
    int rc = 0;
    AnalysisH5 *h = ah5_begin(env->out_path, "filler_sweep", env->ckpt, st.step, err);
    if (!h) { fprintf(stderr, "phaselab: %s\n", err); rc = 1; goto out; }
    long *Ls = malloc(sizeof(long) * n);
    for (int i = 0; i < n; i++) Ls[i] = sp.L0 + i;
    ah5_attr_str(h, "sweep_file", path);
    ah5_attr_str(h, "prompt_source", sp.text_source);
    ah5_attr_long(h, "prompt_tokens", sp.n_prompt);
    ah5_attr_long(h, "a", sp.a);
    ah5_attr_long(h, "b", sp.b);
    ah5_attr_long(h, "filler", sp.filler);
    ah5_attr_long(h, "L0", sp.L0);
    ah5_attr_long(h, "L1", sp.L1);
    ah5_attr_double(h, "peak_period", peak);
    ah5_attr_long(h, "folded_period", fold_p);
    ah5_attr_long(h, "sign_flips", flips);
    ah5_attr_long(h, "stride", S);
    ah5_axis_long(h, "L", Ls, n, "fillers prepended");
    const char *ax[] = {"L"}, *axp[] = {"period"};
    ah5_data(h, "p_a", pa, 1, (int[]){n}, ax, "P(a): softmax probability of candidate a after the prompt", NULL);
    ah5_data(h, "p_b", pb, 1, (int[]){n}, ax, "P(b): softmax probability of candidate b after the prompt", NULL);
    ah5_data(h, "diff", diff, 1, (int[]){n}, ax, "P(a) - P(b)", NULL);
    if (nk) {
        ah5_axis_double(h, "period", period, nk, "period N/k of the Fourier frequency k (in filler tokens)", "tokens");
        ah5_data(h, "power", power, 1, (int[]){nk}, axp, "periodogram of P(a) - P(b) (mean removed)", NULL);
    }
    if (n / 2 >= 2) {
        long *pl = malloc(sizeof(long) * (n / 2));
        for (int p = 2; p <= n / 2; p++) pl[p - 2] = p;
        ah5_axis_long(h, "fold_period", pl, n / 2 - 1, "integer period p the curve is folded by");
        const char *axf[] = {"fold_period"};
        ah5_data(h, "fold_explained", explained, 1, (int[]){n / 2 - 1}, axf,
                 "fraction of the variance of P(a) - P(b) explained by its means folded modulo p", NULL);
        free(pl);
    }
    ah5_signal(h, "diff", ax, 1);
    free(Ls);
    free(explained);
    if (ah5_end(h, err)) { fprintf(stderr, "phaselab: %s\n", err); rc = 1; goto out; }
    printf("stored %s\n", env->out_path);
out:
    free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses), free(power), free(period);
    model_free(m);
    filler_sweep_free(&sp);
    return rc;
}
