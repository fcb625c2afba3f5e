/* Training data in stages (data.stages): parsing, one TrainLoader per stage, the stage of a
 * step and the stage-local sample number. The rules are in data/train_stages.h. */
#include "data/train_stages.h"
#include "common/errors.h"
#include "common/sha256.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the spec */

int train_stages_parse(const char *spec, TrainStageSpec out[TRAIN_STAGES_MAX - 1], int *n, char *why) {
    *n = 0;
    const char *p = spec;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    long prev = 0;
    for (int entry = 1;; entry++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[1100];
        if (len >= sizeof item)
            return set_err(why, "stage %d is %zu characters long; expected STEP:GLOB of at most %zu", entry, len,
                           sizeof item - 1);
        memcpy(item, p, len);
        item[len] = 0;
        char *s = item;
        while (isspace((unsigned char)*s)) s++;
        if (!*s)
            return set_err(why, "stage %d is empty (a ',' with no STEP:GLOB %s it); expected STEP:GLOB between "
                           "the commas", entry, entry == 1 ? "before" : "after");
        char *colon = strchr(s, ':');
        if (!colon)
            return set_err(why, "stage %d \"%s\" has no ':'; expected STEP:GLOB, e.g. 2000:data/long/*.bin", entry, s);
        *colon = 0;
        char *num_end;
        errno = 0;
        long step = strtol(s, &num_end, 10);
        while (isspace((unsigned char)*num_end)) num_end++;
        if (!isdigit((unsigned char)*s) || *num_end || errno || step < 1)
            return set_err(why, "stage %d: first step \"%s\" is not a whole number >= 1; expected STEP:GLOB", entry, s);
        if (step <= prev)
            return set_err(why, "stage %d starts at step %ld, not after stage %d's step %ld; expected the stages' first "
                           "steps strictly increasing", entry, step, entry - 1, prev);
        char *g = colon + 1, *g_end = g + strlen(g);
        while (isspace((unsigned char)*g)) g++;
        while (g_end > g && isspace((unsigned char)g_end[-1])) *--g_end = 0;
        if (!*g) return set_err(why, "stage %d (step %ld) has an empty glob; expected STEP:GLOB", entry, step);
        int seq_len = 0;                          /* an "@T" ending: the stage's length */
        char *at = strrchr(g, '@');
        if (at && at[1] && strspn(at + 1, "0123456789") == strlen(at + 1)) {
            errno = 0;
            long t = strtol(at + 1, NULL, 10);
            if (errno || t < 1 || t > 1 << 30)
                return set_err(why, "stage %d (step %ld): sequence length \"@%s\" is not a whole number >= 1 (at most 2^30); "
                               "expected STEP:GLOB@T", entry, step, at + 1);
            seq_len = (int)t;
            *at = 0;
            for (char *e = at; e > g && isspace((unsigned char)e[-1]);) *--e = 0;
            if (!*g) return set_err(why, "stage %d (step %ld) has an empty glob before \"@%d\"; expected STEP:GLOB@T",
                                    entry, step, seq_len);
        }
        if (*n >= TRAIN_STAGES_MAX - 1)
            return set_err(why, "more than %d stages; expected at most %d after data.train", TRAIN_STAGES_MAX - 1,
                           TRAIN_STAGES_MAX - 1);
        if (strlen(g) >= sizeof out[0].glob)
            return set_err(why, "stage %d: glob of %zu characters; expected at most %zu", entry, strlen(g),
                           sizeof out[0].glob - 1);
        out[*n].first_step = step;
        out[*n].seq_len = seq_len;
        snprintf(out[*n].glob, sizeof out[*n].glob, "%s", g);
        (*n)++;
        prev = step;
        if (!end) return 0;
        p = end + 1;
    }
}

void train_stages_print(FILE *f, const char *train_glob, int T0, int T, const char *spec, long steps) {
    TrainStageSpec st[TRAIN_STAGES_MAX - 1];
    int n;
    char why[ERR_LEN];
    if (train_stages_parse(spec, st, &n, why)) return;
    fprintf(f, "training data (steps numbered as the log does, 1..%ld):", steps);
    for (int j = 0; j <= n; j++) {
        long first = j ? st[j - 1].first_step : 0, next = j < n ? st[j].first_step : steps;
        const char *glob = j ? st[j - 1].glob : train_glob;
        int len = j ? st[j - 1].seq_len : T0;
        char at[48] = "";
        if (len && len != T) snprintf(at, sizeof at, " at seq_len %d", len);
        if (first >= steps) fprintf(f, "; %s%s from step %ld: not reached (train.steps = %ld)", glob, at, first + 1, steps);
        else fprintf(f, "%s steps %ld..%ld from %s%s", j ? ";" : "", first + 1, next < steps ? next : steps, glob, at);
    }
    fprintf(f, "\n");
}

/* ------------------------------------------------------------------ the stages */

struct TrainData {
    int n;                                   /* stages, data.train included */
    TrainStageSpec spec[TRAIN_STAGES_MAX];   /* [n]; spec[0] = data.train from step 0 */
    TrainLoader *loader[TRAIN_STAGES_MAX];   /* [n] */
    uint64_t samples_per_step;               /* Bg */
    int T;                                   /* data.seq_len: every spec[j].seq_len is set, <= T */
};

int train_data_open(TrainData **D, const char *train_glob, const char *stages_spec, long samples_per_step,
                    int T, int T0, uint32_t vocab_limit, uint64_t seed, char *err) {
    *D = NULL;
    TrainData *d = calloc(1, sizeof *d);
    if (!d) return set_err(err, "%s: out of memory", train_glob);
    char why[ERR_LEN];
    int n_more;
    if (train_stages_parse(stages_spec ? stages_spec : "", d->spec + 1, &n_more, why)) {
        free(d);
        return set_err(err, "[data] stages: %s", why);
    }
    d->n = 1 + n_more;
    d->spec[0].first_step = 0;
    snprintf(d->spec[0].glob, sizeof d->spec[0].glob, "%s", train_glob);
    d->spec[0].seq_len = T0;
    d->samples_per_step = (uint64_t)samples_per_step;
    d->T = T;
    for (int j = 0; j < d->n; j++) {
        if (!d->spec[j].seq_len) d->spec[j].seq_len = T;
        if (d->spec[j].seq_len > T) {
            if (j) set_err(err, "[data] stages: stage %d (%ld:%s@%d): a sequence length above data.seq_len = %d; "
                           "expected 1 <= T <= %d (the model's context)", j, d->spec[j].first_step, d->spec[j].glob,
                           d->spec[j].seq_len, T, T);
            else set_err(err, "[data] train_seq_len = %d is above data.seq_len = %d; expected 0 (= seq_len) or "
                         "1..%d", T0, T, T);
            train_data_close(d);
            return -1;
        }
        if (train_loader_open(&d->loader[j], d->spec[j].glob, d->spec[j].seq_len, vocab_limit,
                              train_stage_seed(seed, j), err)) {
            if (j) {   /* say which stage */
                char inner[ERR_LEN];
                snprintf(inner, sizeof inner, "%s", err);
                set_err(err, "[data] stages: stage %d (%ld:%s): %s", j, d->spec[j].first_step, d->spec[j].glob, inner);
            }
            train_data_close(d);
            return -1;
        }
        const char *tok0 = train_loader_tokenizer(d->loader[0]), *tok = train_loader_tokenizer(d->loader[j]);
        if (strcmp(tok0, tok)) {
            set_err(err, "[data] stages: stage %d (%ld:%s) was made with tokenizer '%.64s', data.train (%s) "
                    "with '%.64s'; expected every stage to share data.train's tokenizer", j, d->spec[j].first_step,
                    d->spec[j].glob, tok, train_glob, tok0);
            train_data_close(d);
            return -1;
        }
    }
    *D = d;
    return 0;
}

int train_data_n_stages(const TrainData *D) { return D->n; }

const TrainLoader *train_data_stage(const TrainData *D, int j, const char **glob, long *first_step) {
    if (glob) *glob = D->spec[j].glob;
    if (first_step) *first_step = D->spec[j].first_step;
    return D->loader[j];
}

int train_data_stage_seq_len(const TrainData *D, int j) { return D->spec[j].seq_len; }

int train_data_stage_at(const TrainData *D, long step) {
    int j = 0;
    while (j + 1 < D->n && D->spec[j + 1].first_step <= step) j++;
    return j;
}

int train_data_sample(const TrainData *D, long step, uint64_t g, int32_t *out, uint64_t *window, char *err) {
    int j = train_data_stage_at(D, step);
    uint64_t first = (uint64_t)D->spec[j].first_step * D->samples_per_step;
    uint64_t step_first = (uint64_t)step * D->samples_per_step;
    if (g < step_first || g >= step_first + D->samples_per_step)
        return set_err(err, "sample %" PRIu64 " is not one of step %ld's samples %" PRIu64 "..%" PRIu64, g, step,
                       step_first, step_first + D->samples_per_step - 1);
    uint64_t w = train_loader_sample_window(D->loader[j], g - first);
    if (window) *window = w;
    return train_loader_window(D->loader[j], w, out, err);
}

const char *train_data_tokenizer(const TrainData *D) { return train_loader_tokenizer(D->loader[0]); }

uint64_t train_stage_seed(uint64_t seed, int stage) {
    return stage ? seed ^ 0x9e3779b97f4a7c15ULL * (uint64_t)stage : seed;
}

void train_data_fingerprint(const TrainData *D, long step, char out[LOADER_FINGERPRINT_LEN + 1]) {
    int begun = 1;                               /* stage 0, then those begun before step */
    while (begun < D->n && D->spec[begun].first_step < step) begun++;
    if (begun == 1 && D->spec[0].seq_len == D->T) { train_loader_fingerprint(D->loader[0], out); return; }
    char text[TRAIN_STAGES_MAX * (LOADER_FINGERPRINT_LEN + 40)];
    size_t used = 0;
    for (int j = 0; j < begun; j++) {
        char fp[LOADER_FINGERPRINT_LEN + 1];
        train_loader_fingerprint(D->loader[j], fp);
        if (D->spec[j].seq_len == D->T) used += (size_t)sprintf(text + used, "%ld", D->spec[j].first_step) + 1;
        else used += (size_t)sprintf(text + used, "%ld@%d", D->spec[j].first_step, D->spec[j].seq_len) + 1;
        used += (size_t)sprintf(text + used, "%s", fp) + 1;
    }
    sha256_hex(text, used, out);
}

void train_data_close(TrainData *D) {
    if (!D) return;
    for (int j = 0; j < D->n; j++)
        if (D->loader[j]) train_loader_close(D->loader[j]);
    free(D);
}
