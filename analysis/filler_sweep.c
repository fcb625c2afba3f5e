/* Filler sweep (definitions in analysis/filler_sweep.h): the sweep file reader, the periodogram,
 * and the run: one forward pass per batch of fillers counts L (at the batch's longest row, not
 * at seq_len), P(a) and P(b) read from the
 * per-token loss at the prompt's last position (P = exp(-loss) with that target). */
#include "analysis/filler_sweep.h"
#include "common/clock.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "common/errors.h"
#include "common/interrupt.h"
#include "model/model.h"
#include "analysis/analysis_h5.h"
#include "trainer/checkpoint.h"
#include "trainer/probe_eval.h"

/* The values of the keys as read: each a heap copy of any length ("" when absent), with the line
 * it was given on (0 when absent). A key given twice, or a key and its alternative (a and a_text,
 * prompt and text), is an error naming both lines: nothing silently wins. */
enum { K_PROMPT, K_TEXT, K_TOKENIZER, K_A, K_B, K_FILLER, K_A_TEXT, K_B_TEXT, K_FILLER_TEXT, K_L0, K_L1, N_SWEEP_KEYS };
static const char *const sweep_keys[N_SWEEP_KEYS] = {"prompt", "text", "tokenizer", "a", "b", "filler", "a_text", "b_text",
                                                     "filler_text", "L0", "L1"};
/* the key each one excludes (the other way of giving the same thing), -1 for none */
static const int sweep_alternative[N_SWEEP_KEYS] = {K_TEXT, K_PROMPT, -1, K_A_TEXT, K_B_TEXT, K_FILLER_TEXT, K_A, K_B, K_FILLER,
                                                    -1, -1};

typedef struct {
    char *value[N_SWEEP_KEYS];
    int line[N_SWEEP_KEYS];
    char *bad;                  /* the first problem, heap ("" / NULL when none) */
    int bad_line;
} RawSpec;

static void raw_free(RawSpec *r) {
    for (int k = 0; k < N_SWEEP_KEYS; k++) free(r->value[k]);
    free(r->bad);
}

static const char *raw(const RawSpec *r, int k) { return r->value[k] ? r->value[k] : ""; }

static void raw_bad(RawSpec *r, int lineno, const char *fmt, ...) {
    if (r->bad) return;                                   /* the first one is reported */
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&r->bad, fmt, ap) < 0) r->bad = NULL;
    va_end(ap);
    if (!r->bad) r->bad = strdup("out of memory");
    r->bad_line = lineno;
}

static int on_key(void *user, const char *section, const char *name, const char *value, int lineno) {
    RawSpec *r = user;
    if (strcmp(section, "sweep")) {
        raw_bad(r, lineno, "section [%s]: expected [sweep]", section);
        return 1;
    }
    for (int k = 0; k < N_SWEEP_KEYS; k++) {
        if (strcmp(name, sweep_keys[k])) continue;
        int alt = sweep_alternative[k];
        if (r->line[k])
            raw_bad(r, lineno, "%s given twice (lines %d and %d): expected each key once", name, r->line[k], lineno);
        else if (alt >= 0 && r->line[alt])
            raw_bad(r, lineno, "%s and %s both given (lines %d and %d): expected one of them", sweep_keys[alt], name,
                    r->line[alt], lineno);
        else if (!(r->value[k] = strdup(value)))
            raw_bad(r, lineno, "out of memory");
        else
            r->line[k] = lineno;
        return 1;
    }
    raw_bad(r, lineno, "unknown key '%s' (expected prompt or text+tokenizer, a, b, filler, L0, L1)", name);
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
    char *line = NULL, *section = strdup("");
    size_t cap = 0;
    if (!section) return -1;
    int lineno = 0, bad = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == ';' || *s == '#') continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e || e[1]) { bad = lineno; break; }
            *e = 0;
            free(section);
            if (!(section = strdup(trim(s + 1)))) { free(line); return -1; }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) { bad = lineno; break; }
        *eq = 0;
        on_key(r, section, trim(s), trim(eq + 1), lineno);
    }
    int rd_err = ferror(f);
    free(line);
    free(section);
    return bad ? bad : rd_err ? -1 : 0;
}

/* Strips one pair of surrounding double quotes (so that text keys can hold leading spaces). */
static void unquote(char *s) {
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') { memmove(s, s + 1, n - 2); s[n - 2] = 0; }
}

/* A decimal integer in [lo, hi]: digits only (the line is already trimmed), parsed whole as a
 * 64-bit integer (leading zeros are fine, 000...0184 is 184); -1 when s is not one. */
static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!*s) return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    while (s[0] == '0' && s[1]) s++;                     /* any number of leading zeros */
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_id(const char *path, int line, const char *key, const char *s, int vocab, int32_t *out, char *err) {
    long long v;
    if (parse_int(s, 0, vocab - 1, &v))
        return set_err(err, "%s:%d: %s = '%.80s%s': expected a token id in 0..%d (the model's vocabulary)", path, line, key, s,
                       strlen(s) > 80 ? "..." : "", vocab - 1);
    *out = (int32_t)v;
    return 0;
}

static int encode_one(const char *path, int line, const char *key, TokenizerState *ts, const char *text, int vocab, int32_t *out,
                      char *err) {
    TokenIds ids = {0};
    char e2[ERR_LEN];
    if (tokenizer_encode(ts, text, strlen(text), &ids, e2) < 0) {
        token_ids_free(&ids);
        return set_err(err, "%s:%d: %s: %s", path, line, key, e2);
    }
    int rc = 0;
    if (ids.n != 1) rc = set_err(err, "%s:%d: %s = \"%.80s\" is %zu tokens, expected exactly one", path, line, key, text, ids.n);
    else if (ids.ids[0] >= (uint32_t)vocab)
        rc = set_err(err, "%s:%d: %s = \"%.80s\" is token %u, outside the model's vocabulary (< %d)", path, line, key, text, ids.ids[0], vocab);
    else *out = (int32_t)ids.ids[0];
    token_ids_free(&ids);
    return rc;
}

/* src: when not NULL, the tokenizer of text keys is checked against the checkpoint's first. */
static int sweep_load(const char *path, int vocab, int T, const CkptSource *src, FillerSweepSpec *spec, char *err) {
    memset(spec, 0, sizeof *spec);
    RawSpec r;
    memset(&r, 0, sizeof r);
    FILE *f = fopen(path, "r");
    if (!f) return set_err(err, "%s: cannot open the sweep file: %s", path, strerror(errno));
    int rc = parse_ini(f, &r);
    fclose(f);
    Tokenizer *tok = NULL;
    TokenizerState *ts = NULL;
    char *tpath = NULL;
    int out = -1;
    if (rc > 0) { set_err(err, "%s:%d: not an INI line", path, rc); goto done; }
    if (rc < 0) { set_err(err, "%s: cannot read the sweep file", path); goto done; }
    if (r.bad) { set_err(err, "%s:%d: %s", path, r.bad_line, r.bad); goto done; }
    for (int k = K_TEXT; k <= K_FILLER_TEXT; k++)
        if (r.value[k] && (k == K_TEXT || k >= K_A_TEXT)) unquote(r.value[k]);
    const char *text = raw(&r, K_TEXT), *prompt = raw(&r, K_PROMPT), *tokenizer = raw(&r, K_TOKENIZER);
    int need_tok = text[0] || raw(&r, K_A_TEXT)[0] || raw(&r, K_B_TEXT)[0] || raw(&r, K_FILLER_TEXT)[0];
    if (need_tok) {
        if (!tokenizer[0]) { set_err(err, "%s: text keys need tokenizer = PATH (a tokenizer.json, or bytes)", path); goto done; }
        const char *slash = strrchr(path, '/');
        if (strcmp(tokenizer, "bytes") && tokenizer[0] != '/' && slash) {
            if (asprintf(&tpath, "%.*s/%s", (int)(slash - path), path, tokenizer) < 0) tpath = NULL;
        } else tpath = strdup(tokenizer);
        if (!tpath) { set_err(err, "%s: out of memory", path); goto done; }
        char e2[ERR_LEN];
        tok = tokenizer_open(tpath, e2);
        if (!tok) { set_err(err, "%s:%d: tokenizer: %s", path, r.line[K_TOKENIZER], e2); goto done; }
        /* the checkpoint's tokenizer, before any text is encoded with this one */
        if (src && ckpt_source_check_text_tokenizer(src, "tokenizer", tpath, tokenizer_fingerprint(tok), stdout, e2)) {
            set_err(err, "%s:%d: %s", path, r.line[K_TOKENIZER], e2);
            goto done;
        }
        ts = tokenizer_state_new(tok);
        if (!ts) { set_err(err, "%s: out of memory", path); goto done; }
        snprintf(spec->tokenizer_fingerprint, sizeof spec->tokenizer_fingerprint, "%s", tokenizer_fingerprint(tok));
    }
    if (!!prompt[0] + !!text[0] != 1) { set_err(err, "%s: give exactly one of prompt = TOKEN IDS or text = TEXT", path); goto done; }
    if (prompt[0]) {
        /* every id parsed whole: the prompt may be any length (checked against T below) */
        spec->prompt = malloc(sizeof(int32_t) * (strlen(prompt) / 2 + 2));
        if (!spec->prompt) { set_err(err, "%s: out of memory for a prompt of %zu characters", path, strlen(prompt)); goto done; }
        const char *s = prompt;
        while (*s) {
            while (*s && (isspace((unsigned char)*s) || *s == ',')) s++;
            if (!*s) break;
            size_t n = strcspn(s, " \t\r\n\v\f,");
            char *one = strndup(s, n);
            long long v;
            int bad = !one || parse_int(one, 0, vocab - 1, &v);
            free(one);
            if (bad) {
                set_err(err, "%s:%d: prompt: '%.*s' is not a token id in 0..%d (the model's vocabulary)", path, r.line[K_PROMPT],
                        (int)(n > 80 ? 80 : n), s, vocab - 1);
                goto done;
            }
            spec->prompt[spec->n_prompt++] = (int32_t)v;
            s += n;
        }
        spec->text_source = strdup("tokens");
    } else {
        TokenIds ids = {0};
        char e2[ERR_LEN];
        if (tokenizer_encode(ts, text, strlen(text), &ids, e2) < 0) {
            token_ids_free(&ids);
            set_err(err, "%s:%d: text: %s", path, r.line[K_TEXT], e2);
            goto done;
        }
        if (ids.n > (size_t)INT32_MAX) { token_ids_free(&ids); set_err(err, "%s:%d: text of %zu tokens", path, r.line[K_TEXT], ids.n); goto done; }
        spec->prompt = malloc(sizeof(int32_t) * (ids.n + 1));
        if (!spec->prompt) { token_ids_free(&ids); set_err(err, "%s: out of memory for %zu prompt tokens", path, ids.n); goto done; }
        for (size_t i = 0; i < ids.n; i++) {
            if (ids.ids[i] >= (uint32_t)vocab) {
                set_err(err, "%s:%d: text encodes to token %u, outside the model's vocabulary (< %d)", path, r.line[K_TEXT], ids.ids[i], vocab);
                token_ids_free(&ids);
                goto done;
            }
            spec->prompt[spec->n_prompt++] = (int32_t)ids.ids[i];
        }
        token_ids_free(&ids);
        if (asprintf(&spec->text_source, "text via %s", tokenizer) < 0) spec->text_source = NULL;
    }
    if (!spec->text_source) { set_err(err, "%s: out of memory", path); goto done; }
    if (spec->n_prompt < 1) { set_err(err, "%s: the prompt is empty", path); goto done; }
    if (spec->n_prompt > T - 4) {
        set_err(err, "%s:%d: the prompt is %d tokens: with at least 4 filler lengths it must be at most T - 4 = %d tokens (T = %d, "
                "data.seq_len of the checkpoint)", path, r.line[prompt[0] ? K_PROMPT : K_TEXT], spec->n_prompt, T - 4, T);
        goto done;
    }
    struct { int id, text; const char *name; int32_t *dst; } c[] = {
        {K_A, K_A_TEXT, "a", &spec->a}, {K_B, K_B_TEXT, "b", &spec->b}, {K_FILLER, K_FILLER_TEXT, "filler", &spec->filler}};
    for (int i = 0; i < 3; i++) {
        if (raw(&r, c[i].id)[0]) { if (parse_id(path, r.line[c[i].id], c[i].name, raw(&r, c[i].id), vocab, c[i].dst, err)) goto done; }
        else if (raw(&r, c[i].text)[0]) { if (encode_one(path, r.line[c[i].text], c[i].name, ts, raw(&r, c[i].text), vocab, c[i].dst, err)) goto done; }
        else { set_err(err, "%s: missing %s (a token id, or %s_text with a tokenizer)", path, c[i].name, c[i].name); goto done; }
    }
    if (spec->a == spec->b) {
        set_err(err, "%s:%d: a and b are the same token %d; expected two candidates", path,
                r.line[K_B] ? r.line[K_B] : r.line[K_B_TEXT], spec->a);
        goto done;
    }
    long long L0 = -1, L1 = -1;
    int maxL = T - spec->n_prompt;
    int line_L = r.line[K_L1] > r.line[K_L0] ? r.line[K_L1] : r.line[K_L0];
    if (parse_int(raw(&r, K_L0), 0, maxL, &L0) || parse_int(raw(&r, K_L1), 0, maxL, &L1) || L1 < L0 + 3) {
        set_err(err, "%s:%d: L0 = '%.40s', L1 = '%.40s': expected integers 0 <= L0, L0 + 3 <= L1 <= %d (T %d minus the %d prompt tokens)",
                path, line_L, raw(&r, K_L0), raw(&r, K_L1), maxL, T, spec->n_prompt);
        goto done;
    }
    spec->L0 = (int)L0, spec->L1 = (int)L1;
    out = 0;
done:
    if (ts) tokenizer_state_free(ts);
    if (tok) tokenizer_free(tok);
    free(tpath);
    raw_free(&r);
    if (out) filler_sweep_free(spec);
    return out;
}

int filler_sweep_load(const char *path, int vocab, int T, FillerSweepSpec *spec, char *err) {
    return sweep_load(path, vocab, T, NULL, spec, err);
}

int filler_sweep_load_checked(const char *path, const CkptSource *src, FillerSweepSpec *spec, char *err) {
    return sweep_load(path, src->cfg.model.vocab_size, src->cfg.data.seq_len, src, spec, err);
}

void filler_sweep_free(FillerSweepSpec *spec) {
    free(spec->prompt);
    free(spec->text_source);
    spec->prompt = NULL;
    spec->text_source = NULL;
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
    if (filler_sweep_load_checked(path, env->src, &sp, err)) {   /* vocabulary, T, the tokenizer of text keys */
        fprintf(stderr, "phaselab: --filler-sweep %s (the checkpoint %s: vocab_size %d, data.seq_len %d)\n", err,
                env->src->config_path, cfg->model.vocab_size, T);
        return 2;
    }
    if (micro < 2) micro = 2;
    const Backend *be = backend_select(cfg->run.device, cfg->run.threads, 0, err);
    if (!be) { fprintf(stderr, "phaselab: %s\n", err); filler_sweep_free(&sp); return 2; }
    Model *m = model_create(&cfg->model, be, micro, T, err);
    if (!m || ckpt_source_load(env->src, m, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        if (m) model_free(m);
        filler_sweep_free(&sp);
        return 1;
    }
    const TrainState st = env->src->st;
    if (env->src->has_state) printf("checkpoint %s: step %ld, %ld tokens\n", env->ckpt, st.step, st.tokens);
    else printf("checkpoint %s: weights only (step %ld)\n", env->ckpt, st.step);
    int n = sp.L1 - sp.L0 + 1;
    double *pa = malloc(sizeof(double) * n), *pb = malloc(sizeof(double) * n), *diff = malloc(sizeof(double) * n);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)micro * T), *targets = malloc(sizeof(int32_t) * (size_t)micro * T);
    float *losses = malloc(sizeof(float) * (size_t)micro * T);
    if (!pa || !pb || !diff || !tokens || !targets || !losses) {
        fprintf(stderr, "phaselab: --filler-sweep %s: out of memory for %d lengths of up to %d tokens\n", path, n, T);
        free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses);
        model_free(m);
        filler_sweep_free(&sp);
        return 1;
    }
    int rows_per = micro / 2;             /* each L: one row with target a, one with target b */
    double t0 = clock_seconds(), last = t0;
    for (int s = 0; s < n; s += rows_per) {
        if (interrupt_signal()) {           /* SIGINT/SIGTERM (common/interrupt.h): stop before the file is touched */
            fprintf(stderr, "phaselab: --filler-sweep %s: interrupted by signal %d after %d of %d lengths: nothing written\n",
                    path, interrupt_signal(), s, n);
            free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses);
            model_free(m);
            filler_sweep_free(&sp);
            return 1;
        }
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
    double *explained = malloc(sizeof(double) * (n / 2 > 1 ? n / 2 : 1));
    long *Ls = malloc(sizeof(long) * n), *pl = malloc(sizeof(long) * (n / 2 > 1 ? n / 2 : 1));
    if (!power || !period || !explained || !Ls || !pl) {
        fprintf(stderr, "phaselab: --filler-sweep %s: out of memory: %zu bytes for the periodogram of %d lengths\n", path,
                sizeof(double) * (2 * (size_t)(nk ? nk : 1) + (size_t)n) + sizeof(long) * 2 * (size_t)n, n);
        free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses), free(power), free(period);
        free(explained), free(Ls), free(pl);
        model_free(m);
        filler_sweep_free(&sp);
        return 1;
    }
    double peak = periodogram(diff, n, power, period);
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
    AnalysisH5 *h = ah5_begin(env->out_path, "filler_sweep", env->ckpt, st.step, env->src->overrides, err);
    if (!h) { fprintf(stderr, "phaselab: %s\n", err); rc = 1; goto out; }
    for (int i = 0; i < n; i++) Ls[i] = sp.L0 + i;
    ah5_attr_str(h, "sweep_file", path);
    ah5_input_file(h, "sweep_file", path);
    ah5_attr_long(h, "decode", 0);
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
        for (int p = 2; p <= n / 2; p++) pl[p - 2] = p;
        ah5_axis_long(h, "fold_period", pl, n / 2 - 1, "integer period p the curve is folded by");
        const char *axf[] = {"fold_period"};
        ah5_data(h, "fold_explained", explained, 1, (int[]){n / 2 - 1}, axf,
                 "fraction of the variance of P(a) - P(b) explained by its means folded modulo p", NULL);
    }
    ah5_signal(h, "diff", ax, 1);
    if (ah5_end(h, err)) { fprintf(stderr, "phaselab: %s\n", err); rc = 1; goto out; }   /* it prints where it stored */
out:
    free(pa), free(pb), free(diff), free(tokens), free(targets), free(losses), free(power), free(period);
    free(explained), free(Ls), free(pl);
    model_free(m);
    filler_sweep_free(&sp);
    return rc;
}
