/* Boundary statistics of learned chunk boundaries: the definitions are in trainer/boundary_stats.h
 * (docs/spec.md §6.5 "Boundary statistics"). One pass over each row of a batch:
 *   chunk length  t - s + 1 at a flag (s = one past the previous flag of the row) -> hist;
 *   unpooled      T - s after the row's last flag;
 *   forced        a flag with p < 1/2;  class_bd / class_tok by synth_token_class (or the
 *                 caller's class function);  pairs / pair_split at (key, value) neighbours;
 * then F = n_bd / n_pos, G = sum p / n_pos, R = N/(N-1) ((N-1) F G + (1-F)(1-G)) with N = S,
 * and 95% Wilson intervals (probe_wilson) for every fraction.
 * The HDF5 writer follows the conventions of metrics.h5 (trainer/metrics.h): UTF-8 string
 * attributes, long_name with the units in parentheses, a units attribute where there is a
 * unit, labelled dimensions; plus a `definition` attribute on every dataset. */
#include "trainer/boundary_stats.h"

#include <hdf5_hl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "trainer/probe_eval.h"

int boundary_stats_init(BoundaryStats *s, int n_layers, int W, int S, BoundaryTokenClass token_class, char *err) {
    memset(s, 0, sizeof *s);
    if (n_layers < 1 || S < 2 || W <= S)
        return set_err(err, "boundary statistics: need n_layers >= 1 and 2 <= S < W (got L %d, W %d, S %d)",
                       n_layers, W, S);
    s->n_layers = n_layers;
    s->W = W;
    s->S = S;
    s->token_class = token_class ? token_class : synth_token_class;
    size_t L = (size_t)n_layers, C = BSTAT_N_CLASSES;
    s->positions = calloc(L, sizeof(long));
    s->hist = calloc(L * (size_t)W, sizeof(long));
    s->boundaries = calloc(L, sizeof(long));
    s->forced = calloc(L, sizeof(long));
    s->unpooled = calloc(L, sizeof(long));
    s->prob_sum = calloc(L, sizeof(double));
    s->class_bd = calloc(L * C, sizeof(long));
    s->class_tok = calloc(L * C, sizeof(long));
    s->pairs = calloc(L, sizeof(long));
    s->pair_split = calloc(L, sizeof(long));
    s->mean_len = calloc(L, sizeof(double));
    s->rate = calloc(L, sizeof(double));
    s->mean_prob = calloc(L, sizeof(double));
    s->ratio_loss = calloc(L, sizeof(double));
    s->forced_frac = calloc(L, sizeof(double));
    s->forced_lo = calloc(L, sizeof(double));
    s->forced_hi = calloc(L, sizeof(double));
    s->class_rate = calloc(L * C, sizeof(double));
    s->class_lo = calloc(L * C, sizeof(double));
    s->class_hi = calloc(L * C, sizeof(double));
    s->split_frac = calloc(L, sizeof(double));
    s->split_lo = calloc(L, sizeof(double));
    s->split_hi = calloc(L, sizeof(double));
    if (!s->positions || !s->hist || !s->boundaries || !s->forced || !s->unpooled || !s->prob_sum ||
        !s->class_bd || !s->class_tok || !s->pairs || !s->pair_split || !s->mean_len || !s->rate ||
        !s->mean_prob || !s->ratio_loss || !s->forced_frac || !s->forced_lo || !s->forced_hi ||
        !s->class_rate || !s->class_lo || !s->class_hi || !s->split_frac || !s->split_lo || !s->split_hi) {
        boundary_stats_free(s);
        return set_err(err, "boundary statistics: out of memory for %d layers", n_layers);
    }
    boundary_stats_finalize(s);
    return 0;
}

void boundary_stats_free(BoundaryStats *s) {
    void *all[] = {s->positions, s->hist, s->boundaries, s->forced, s->unpooled, s->prob_sum, s->class_bd,
                   s->class_tok, s->pairs, s->pair_split, s->mean_len, s->rate, s->mean_prob, s->ratio_loss,
                   s->forced_frac, s->forced_lo, s->forced_hi, s->class_rate, s->class_lo, s->class_hi,
                   s->split_frac, s->split_lo, s->split_hi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(s, 0, sizeof *s);
}

/* Checks one batch against the rule of §6.5 before anything is counted. */
static int check_batch(const BoundaryStats *s, int layer, const unsigned char *flags, const float *probs,
                       const int32_t *tokens, int B, int T, char *err) {
    if (layer < 0 || layer >= s->n_layers)
        return set_err(err, "boundary statistics: layer %d out of range 0..%d", layer, s->n_layers - 1);
    if (B < 1 || T < 1) return set_err(err, "boundary statistics: empty batch (B %d, T %d)", B, T);
    for (int b = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            unsigned char f = flags[(size_t)b * T + t];
            float p = probs[(size_t)b * T + t];
            if (f > 1) return set_err(err, "boundary statistics: flag %u at [%d, %d] (expected 0 or 1)", f, b, t);
            if (!(p >= 0.0f && p <= 1.0f))
                return set_err(err, "boundary statistics: score %g at [%d, %d] (expected 0..1)", (double)p, b, t);
            int k = s->token_class(tokens[(size_t)b * T + t]);
            if (k < 0 || k >= BSTAT_N_CLASSES)
                return set_err(err, "boundary statistics: token %d at [%d, %d] has class %d (expected 0..%d)",
                               (int)tokens[(size_t)b * T + t], b, t, k, BSTAT_N_CLASSES - 1);
            if (t - start + 1 > s->W)
                return set_err(err, "boundary statistics: chunk %d..%d of row %d is longer than W = %d", start, t, b,
                               s->W);
            if (f) start = t + 1;
        }
    }
    return 0;
}

int boundary_stats_add(BoundaryStats *s, int layer, const unsigned char *flags, const float *probs,
                       const int32_t *tokens, int B, int T, char *err) {
    if (check_batch(s, layer, flags, probs, tokens, B, T, err)) return -1;
    const int C = BSTAT_N_CLASSES;
    long *hist = s->hist + (size_t)layer * s->W;
    long *class_bd = s->class_bd + (size_t)layer * C, *class_tok = s->class_tok + (size_t)layer * C;
    for (int b = 0; b < B; b++) {
        const unsigned char *f = flags + (size_t)b * T;
        const float *p = probs + (size_t)b * T;
        const int32_t *tok = tokens + (size_t)b * T;
        int start = 0;
        for (int t = 0; t < T; t++) {
            int k = s->token_class(tok[t]);
            class_tok[k]++;
            s->prob_sum[layer] += p[t];
            if (t + 1 < T && k == SYNTH_CLASS_KEY && s->token_class(tok[t + 1]) == SYNTH_CLASS_VALUE) {
                s->pairs[layer]++;
                s->pair_split[layer] += f[t];
            }
            if (!f[t]) continue;
            hist[t - start]++;
            s->boundaries[layer]++;
            s->forced[layer] += p[t] < 0.5f;
            class_bd[k]++;
            start = t + 1;
        }
        s->unpooled[layer] += T - start;
    }
    s->positions[layer] += (long)B * T;
    return 0;
}

/* k / n with its 95% Wilson interval; NaN for all three when n = 0. */
static void fraction(long k, long n, double *frac, double *lo, double *hi) {
    *frac = n > 0 ? (double)k / (double)n : NAN;
    probe_wilson(k, n, PROBE_Z95, lo, hi);
}

void boundary_stats_finalize(BoundaryStats *s) {
    const int C = BSTAT_N_CLASSES, W = s->W;
    const double N = s->S;
    long all_tok[BSTAT_N_CLASSES] = {0}, all_pos = 0;
    for (int l = 0; l < s->n_layers; l++) {
        long n_pos = s->positions[l], n_bd = s->boundaries[l], len_sum = 0;
        for (int k = 0; k < W; k++) len_sum += (long)(k + 1) * s->hist[(size_t)l * W + k];
        s->mean_len[l] = n_bd > 0 ? (double)len_sum / (double)n_bd : NAN;
        double F = n_pos > 0 ? (double)n_bd / (double)n_pos : NAN;
        double G = n_pos > 0 ? s->prob_sum[l] / (double)n_pos : NAN;
        s->rate[l] = F;
        s->mean_prob[l] = G;
        s->ratio_loss[l] = N / (N - 1.0) * ((N - 1.0) * F * G + (1.0 - F) * (1.0 - G));
        fraction(s->forced[l], n_bd, &s->forced_frac[l], &s->forced_lo[l], &s->forced_hi[l]);
        for (int k = 0; k < C; k++) {
            size_t i = (size_t)l * C + k;
            fraction(s->class_bd[i], n_bd, &s->class_rate[i], &s->class_lo[i], &s->class_hi[i]);
            all_tok[k] += s->class_tok[i];
        }
        all_pos += n_pos;
        fraction(s->pair_split[l], s->pairs[l], &s->split_frac[l], &s->split_lo[l], &s->split_hi[l]);
    }
    for (int k = 0; k < C; k++) s->class_chance[k] = all_pos > 0 ? (double)all_tok[k] / (double)all_pos : NAN;
}

/* ---- HDF5 -------------------------------------------------------------------------------- */

static int put_string_attr(hid_t obj, const char *name, const char *const *values, int n) {
    hid_t type = H5Tcopy(H5T_C_S1);
    hsize_t count = (hsize_t)n;
    int rc = -1;
    if (type < 0) return -1;
    if (H5Tset_size(type, H5T_VARIABLE) >= 0 && H5Tset_cset(type, H5T_CSET_UTF8) >= 0) {
        hid_t space = n > 0 ? H5Screate_simple(1, &count, NULL) : H5Screate(H5S_SCALAR);
        hid_t attr = space < 0 ? H5I_INVALID_HID : H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (attr >= 0) {
            rc = H5Awrite(attr, type, values) < 0 ? -1 : 0;
            H5Aclose(attr);
        }
        if (space >= 0) H5Sclose(space);
    }
    H5Tclose(type);
    return rc;
}

static int put_text(hid_t obj, const char *name, const char *value) { return put_string_attr(obj, name, &value, 0); }

static int put_int_attr(hid_t obj, const char *name, long value) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = space < 0 ? H5I_INVALID_HID : H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = attr < 0 || H5Awrite(attr, H5T_NATIVE_LONG, &value) < 0 ? -1 : 0;
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    return rc;
}

typedef struct {
    const char *name;
    int rank;
    hsize_t dims[2];
    const char *labels[2];
    int is_long;            /* int64 data from `l`, else float64 from `d` */
    const long *l;
    const double *d;
    const char *long_name, *units, *definition;
} Dataset;

static int put_dataset(hid_t group, const Dataset *ds, char *err) {
    if (H5Lexists(group, ds->name, H5P_DEFAULT) > 0)
        return set_err(err, "boundary statistics: dataset %s already exists in the group", ds->name);
    hid_t space = H5Screate_simple(ds->rank, ds->dims, NULL);
    hid_t set = space < 0 ? H5I_INVALID_HID
                          : H5Dcreate2(group, ds->name, ds->is_long ? H5T_STD_I64LE : H5T_IEEE_F64LE, space,
                                       H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = set < 0 ? -1 : 0;
    if (!rc)
        rc = H5Dwrite(set, ds->is_long ? H5T_NATIVE_LONG : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      ds->is_long ? (const void *)ds->l : (const void *)ds->d) < 0;
    char long_name[256];
    if (ds->units) snprintf(long_name, sizeof long_name, "%s (%s)", ds->long_name, ds->units);
    else snprintf(long_name, sizeof long_name, "%s", ds->long_name);
    if (!rc) rc = put_text(set, "long_name", long_name) || put_text(set, "definition", ds->definition);
    if (!rc && ds->units) rc = put_text(set, "units", ds->units);
    for (int i = 0; !rc && i < ds->rank; i++) rc = H5DSset_label(set, (unsigned)i, ds->labels[i]) < 0;
    if (set >= 0) H5Dclose(set);
    if (space >= 0) H5Sclose(space);
    return rc ? set_err(err, "boundary statistics: cannot write dataset %s", ds->name) : 0;
}

int boundary_stats_write_h5(const BoundaryStats *s, hid_t group, char *err) {
    const hsize_t L = (hsize_t)s->n_layers, W = (hsize_t)s->W, C = BSTAT_N_CLASSES;
    const char *classes[BSTAT_N_CLASSES];
    for (int k = 0; k < BSTAT_N_CLASSES; k++) classes[k] = synth_class_name(k);
    if (put_int_attr(group, "window", s->W) || put_int_attr(group, "target_chunk_length", s->S) ||
        put_string_attr(group, "class_names", classes, BSTAT_N_CLASSES) ||
        put_text(group, "description",
                 "learned chunk boundaries of one evaluation (docs/spec.md 6.5, Boundary statistics): per layer, "
                 "summed over every position of every batch; a chunk is the tokens s..e of a row ending at a "
                 "flag, tokens after a row's last flag are unpooled"))
        return set_err(err, "boundary statistics: cannot write the group attributes");
    const Dataset sets[] = {
        {"chunk_length_hist", 2, {L, W}, {"layer", "chunk_length"}, 1, s->hist, NULL, "complete chunks by length",
         "chunks", "column k counts the complete chunks of k + 1 tokens (s..e, ending at a flag)"},
        {"positions", 1, {L}, {"layer"}, 1, s->positions, NULL, "positions seen", "tokens", "n_pos = sum of B T"},
        {"boundaries", 1, {L}, {"layer"}, 1, s->boundaries, NULL, "boundaries (= complete chunks = entries)",
         "boundaries", "n_bd = number of flags"},
        {"unpooled", 1, {L}, {"layer"}, 1, s->unpooled, NULL, "unpooled tokens", "tokens",
         "tokens after the last flag of their row (in no entry)"},
        {"mean_chunk_length", 1, {L}, {"layer"}, 0, NULL, s->mean_len, "mean complete chunk length", "tokens",
         "sum_k (k + 1) hist[k] / n_bd; NaN without a chunk"},
        {"boundary_rate", 1, {L}, {"layer"}, 0, NULL, s->rate, "boundary rate F", "1/token", "F = n_bd / n_pos"},
        {"mean_prob", 1, {L}, {"layer"}, 0, NULL, s->mean_prob, "mean boundary score G", NULL,
         "G = sum of p_t / n_pos, p_t = sigmoid(w_bd . a_t + c_bd)"},
        {"ratio_loss", 1, {L}, {"layer"}, 0, NULL, s->ratio_loss, "ratio loss R", NULL,
         "R = N/(N-1) ((N-1) F G + (1-F)(1-G)), N = target_chunk_length, at the evaluation's F and G"},
        {"forced_fraction", 1, {L}, {"layer"}, 0, NULL, s->forced_frac, "forced boundaries", "fraction",
         "flags with p < 1/2 (the chunk reached W) / n_bd; NaN without a flag"},
        {"forced_fraction_lo", 1, {L}, {"layer"}, 0, NULL, s->forced_lo, "forced boundaries, 95% Wilson low",
         "fraction", "Wilson score interval, z = 1.96, n = boundaries"},
        {"forced_fraction_hi", 1, {L}, {"layer"}, 0, NULL, s->forced_hi, "forced boundaries, 95% Wilson high",
         "fraction", "Wilson score interval, z = 1.96, n = boundaries"},
        {"class_rate", 2, {L, C}, {"layer", "class"}, 0, NULL, s->class_rate, "share of boundaries by token class",
         "fraction", "flags on tokens of the class / n_bd; compare with class_chance; classes: class_names"},
        {"class_rate_lo", 2, {L, C}, {"layer", "class"}, 0, NULL, s->class_lo, "class share, 95% Wilson low",
         "fraction", "Wilson score interval, z = 1.96, n = boundaries"},
        {"class_rate_hi", 2, {L, C}, {"layer", "class"}, 0, NULL, s->class_hi, "class share, 95% Wilson high",
         "fraction", "Wilson score interval, z = 1.96, n = boundaries"},
        {"class_chance", 1, {C}, {"class"}, 0, NULL, s->class_chance, "share of tokens by class (chance)",
         "fraction", "tokens of the class / positions, over every layer's positions: the share of boundaries a "
                     "class gets when boundaries ignore the content"},
        {"record_split", 1, {L}, {"layer"}, 0, NULL, s->split_frac, "record splits", "fraction",
         "of the adjacent (key, value) pairs of a row (key at t, value at t + 1), those with a flag at the key "
         "(key and value in different entries); chance: boundary_rate"},
        {"record_split_n", 1, {L}, {"layer"}, 1, s->pairs, NULL, "adjacent (key, value) pairs", "pairs",
         "the n of record_split"},
        {"record_split_lo", 1, {L}, {"layer"}, 0, NULL, s->split_lo, "record splits, 95% Wilson low", "fraction",
         "Wilson score interval, z = 1.96, n = record_split_n"},
        {"record_split_hi", 1, {L}, {"layer"}, 0, NULL, s->split_hi, "record splits, 95% Wilson high", "fraction",
         "Wilson score interval, z = 1.96, n = record_split_n"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (put_dataset(group, &sets[i], err)) return -1;
    return 0;
}

/* The accumulators in one order (pack and unpack use it): positions, hist, boundaries, forced,
 * unpooled, prob_sum, class_bd, class_tok, pairs, pair_split. */
long boundary_stats_n_counts(const BoundaryStats *s) {
    const long L = s->n_layers, C = BSTAT_N_CLASSES;
    return L * (7 + s->W + 2 * C);
}

void boundary_stats_pack(const BoundaryStats *s, double *out) {
    const long L = s->n_layers, LW = L * s->W, LC = L * BSTAT_N_CLASSES;
    long k = 0;
    for (long i = 0; i < L; i++) out[k++] = (double)s->positions[i];
    for (long i = 0; i < LW; i++) out[k++] = (double)s->hist[i];
    for (long i = 0; i < L; i++) out[k++] = (double)s->boundaries[i];
    for (long i = 0; i < L; i++) out[k++] = (double)s->forced[i];
    for (long i = 0; i < L; i++) out[k++] = (double)s->unpooled[i];
    for (long i = 0; i < L; i++) out[k++] = s->prob_sum[i];
    for (long i = 0; i < LC; i++) out[k++] = (double)s->class_bd[i];
    for (long i = 0; i < LC; i++) out[k++] = (double)s->class_tok[i];
    for (long i = 0; i < L; i++) out[k++] = (double)s->pairs[i];
    for (long i = 0; i < L; i++) out[k++] = (double)s->pair_split[i];
}

void boundary_stats_unpack(BoundaryStats *s, const double *in) {
    const long L = s->n_layers, LW = L * s->W, LC = L * BSTAT_N_CLASSES;
    long k = 0;
    for (long i = 0; i < L; i++) s->positions[i] = (long)in[k++];
    for (long i = 0; i < LW; i++) s->hist[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->boundaries[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->forced[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->unpooled[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->prob_sum[i] = in[k++];
    for (long i = 0; i < LC; i++) s->class_bd[i] = (long)in[k++];
    for (long i = 0; i < LC; i++) s->class_tok[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->pairs[i] = (long)in[k++];
    for (long i = 0; i < L; i++) s->pair_split[i] = (long)in[k++];
}
