/* Boundary statistics (trainer/boundary_stats.h, docs/spec.md §6.5) on hand-made flag arrays;
 * every expected value is worked out by hand in the comments, not by the code under test:
 *   forced-only chunking   W 4, flags at t = 3, 7 of two rows of 10, p = 0.2 everywhere;
 *   every-token chunking   W 4, every flag set, p = 0.9;
 *   mixed row              chunks of 1, 2, 1, 4, 3 tokens and one unpooled token, one forced
 *                          boundary, all five token classes, four (key, value) pairs;
 *   record splits          ten (key, value) pairs, three split: the 95% Wilson interval of 3/10,
 *                          [0.107791, 0.603222] (the roots p of (p - 0.3)^2 = z^2 p (1 - p) / 10,
 *                          z = 1.959964, solved as a quadratic outside this program);
 *   refused inputs         a chunk longer than W, a flag of 2, a NaN score, a class out of range,
 *                          a layer out of range: nothing is counted;
 *   HDF5 round trip        the writer's datasets and attributes read back with the HDF5 API.
 * Scratch files: build/scratch/test_boundary_stats/. */
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/boundary_stats.h"
#include "common/errors.h"
#include "tests/check.h"

#define SCRATCH "build/scratch/test_boundary_stats"

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static int same_longs(const long *a, const long *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int same_doubles(const double *a, const double *b, int n, double tol) {
    for (int i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && !near(a[i], b[i], tol)) return 0;
    return 1;
}

/* Every class maps out of range: a bad caller-supplied class function. */
static int bad_class(int32_t tok) { return tok < 0 ? 0 : 7; }

/* The mixed row of W 4 (tokens: f filler 208, k key, v value, e end-of-text 0, o other 5):
 *   t      0    1    2    3    4    5    6    7     8    9    10   11
 *   tok    f    k16  v80  k17  v81  e    k18  v82   o    f209 k19  v83
 *   flag   1    0    1    1    0    0    0    1     0    0    1    0
 *   p      .8   .1   .7   .6   .2   .3   .4   .45   .1   .2   .9   .3
 * chunks [0] [1 2] [3] [4 5 6 7] [8 9 10], token 11 unpooled; the chunk 4..7 reached W with
 * p = 0.45 < 1/2 (forced). */
static const int32_t MIX_TOK[12] = {208, 16, 80, 17, 81, 0, 18, 82, 5, 209, 19, 83};
static const unsigned char MIX_FLAG[12] = {1, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0};
static const float MIX_P[12] = {.8f, .1f, .7f, .6f, .2f, .3f, .4f, .45f, .1f, .2f, .9f, .3f};

static void check_forced_only(void) {
    /* two rows of 10, flags at 3 and 7: chunks 0..3 and 4..7 of 4 tokens each, 8..9 unpooled:
     * hist [0 0 0 4], 4 boundaries, 4 unpooled, mean length 4, F = 4/20 = 0.2, G = 0.2,
     * R = 2 (1 * 0.2 * 0.2 + 0.8 * 0.8) = 1.36, forced 4/4 = 1, every token a filler */
    char err[ERR_LEN];
    BoundaryStats s;
    unsigned char f[20] = {0};
    float p[20];
    int32_t tok[20];
    for (int i = 0; i < 20; i++) p[i] = 0.2f, tok[i] = 210;
    f[3] = f[7] = f[13] = f[17] = 1;
    int rc = boundary_stats_init(&s, 1, 4, 2, NULL, err) || boundary_stats_add(&s, 0, f, p, tok, 2, 10, err);
    boundary_stats_finalize(&s);
    long want_hist[4] = {0, 0, 0, 4};
    check(!rc && same_longs(s.hist, want_hist, 4) && s.boundaries[0] == 4 && s.unpooled[0] == 4 &&
              s.positions[0] == 20 && near(s.mean_len[0], 4.0, 1e-12),
          "forced-only chunking: histogram, entries, unpooled tail, mean length",
          "rc %d (%s), hist %ld %ld %ld %ld, boundaries %ld, unpooled %ld, mean %g", rc, rc ? err : "", s.hist[0],
          s.hist[1], s.hist[2], s.hist[3], s.boundaries[0], s.unpooled[0], s.mean_len[0]);
    check(near(s.rate[0], 0.2, 1e-12) && near(s.mean_prob[0], 0.2, 1e-7) && near(s.ratio_loss[0], 1.36, 1e-6) &&
              near(s.forced_frac[0], 1.0, 0) && isnan(s.split_frac[0]) && s.pairs[0] == 0,
          "forced-only chunking: F 0.2, G 0.2, R 1.36, forced 1, no record pairs",
          "F %g G %g R %g forced %g split %g", s.rate[0], s.mean_prob[0], s.ratio_loss[0], s.forced_frac[0],
          s.split_frac[0]);
    check(near(s.class_rate[SYNTH_CLASS_FILLER], 1.0, 0) && near(s.class_chance[SYNTH_CLASS_FILLER], 1.0, 0) &&
              near(s.class_rate[SYNTH_CLASS_KEY], 0.0, 0) && near(s.class_chance[SYNTH_CLASS_KEY], 0.0, 0),
          "forced-only chunking: all boundaries and tokens are fillers", "filler rate %g chance %g",
          s.class_rate[SYNTH_CLASS_FILLER], s.class_chance[SYNTH_CLASS_FILLER]);
    boundary_stats_free(&s);
}

static void check_every_token(void) {
    /* one row of 6, every flag set, p = 0.9: hist [6 0 0 0], 6 boundaries, 0 unpooled, mean
     * length 1, F = 1, G = 0.9, R = 2 (1 * 1 * 0.9 + 0) = 1.8, forced 0/6 */
    char err[ERR_LEN];
    BoundaryStats s;
    unsigned char f[6] = {1, 1, 1, 1, 1, 1};
    float p[6] = {.9f, .9f, .9f, .9f, .9f, .9f};
    int32_t tok[6] = {16, 80, 17, 81, 208, 0};
    int rc = boundary_stats_init(&s, 1, 4, 2, NULL, err) || boundary_stats_add(&s, 0, f, p, tok, 1, 6, err);
    boundary_stats_finalize(&s);
    long want_hist[4] = {6, 0, 0, 0};
    check(!rc && same_longs(s.hist, want_hist, 4) && s.boundaries[0] == 6 && s.unpooled[0] == 0 &&
              near(s.mean_len[0], 1.0, 0) && near(s.rate[0], 1.0, 0) && near(s.mean_prob[0], 0.9, 1e-7) &&
              near(s.ratio_loss[0], 1.8, 1e-6) && near(s.forced_frac[0], 0.0, 0),
          "every-token chunking: hist [6 0 0 0], F 1, G 0.9, R 1.8, forced 0",
          "rc %d, hist %ld %ld, unpooled %ld, F %g G %g R %g forced %g", rc, s.hist[0], s.hist[1], s.unpooled[0],
          s.rate[0], s.mean_prob[0], s.ratio_loss[0], s.forced_frac[0]);
    /* two pairs (16, 80) and (17, 81), both split (every token is a boundary) */
    check(s.pairs[0] == 2 && near(s.split_frac[0], 1.0, 0), "every-token chunking: every record split",
          "pairs %ld split %g", s.pairs[0], s.split_frac[0]);
    boundary_stats_free(&s);
}

static void check_mixed(void) {
    /* hist [2 1 1 1] (lengths 1, 2, 1, 4, 3), 5 boundaries, 1 unpooled, mean (1+2+1+4+3)/5 = 2.2;
     * F = 5/12; sum p = 5.05, G = 5.05/12; R = 2 (5/12 * 5.05/12 + 7/12 * 6.95/12) = 147.8/144;
     * forced: t = 7 only, 1/5 = 0.2, Wilson [0.036224, 0.624465];
     * flagged tokens: t0 filler, t2 value, t3 key, t7 value, t10 key: class shares
     * [key .4, value .4, filler .2, eot 0, other 0]; tokens: 4 keys, 4 values, 2 fillers, 1 eot,
     * 1 other: chance [4/12 4/12 2/12 1/12 1/12];
     * pairs (1,2) (3,4) (6,7) (10,11): flags at keys 3 and 10: 2/4 split, Wilson [0.150039, 0.849961] */
    char err[ERR_LEN];
    BoundaryStats s;
    int rc = boundary_stats_init(&s, 1, 4, 2, NULL, err) ||
             boundary_stats_add(&s, 0, MIX_FLAG, MIX_P, MIX_TOK, 1, 12, err);
    boundary_stats_finalize(&s);
    long want_hist[4] = {2, 1, 1, 1};
    check(!rc && same_longs(s.hist, want_hist, 4) && s.boundaries[0] == 5 && s.unpooled[0] == 1 &&
              near(s.mean_len[0], 2.2, 1e-12),
          "mixed row: hist [2 1 1 1], 5 entries, 1 unpooled, mean length 2.2",
          "rc %d (%s), hist %ld %ld %ld %ld, boundaries %ld, unpooled %ld, mean %g", rc, rc ? err : "", s.hist[0],
          s.hist[1], s.hist[2], s.hist[3], s.boundaries[0], s.unpooled[0], s.mean_len[0]);
    check(near(s.rate[0], 5.0 / 12, 1e-12) && near(s.mean_prob[0], 5.05 / 12, 1e-7) &&
              near(s.ratio_loss[0], 147.8 / 144, 1e-6),
          "mixed row: F 5/12, G 5.05/12, R 147.8/144", "F %.9g G %.9g R %.9g", s.rate[0], s.mean_prob[0],
          s.ratio_loss[0]);
    check(near(s.forced_frac[0], 0.2, 1e-12) && near(s.forced_lo[0], 0.036224108632430196, 1e-9) &&
              near(s.forced_hi[0], 0.6244653702374746, 1e-9),
          "mixed row: forced 1/5 with its Wilson interval", "forced %g [%.9g, %.9g]", s.forced_frac[0],
          s.forced_lo[0], s.forced_hi[0]);
    double want_rate[5] = {.4, .4, .2, 0, 0}, want_chance[5] = {4. / 12, 4. / 12, 2. / 12, 1. / 12, 1. / 12};
    check(same_doubles(s.class_rate, want_rate, 5, 1e-12) && same_doubles(s.class_chance, want_chance, 5, 1e-12),
          "mixed row: boundaries by token class against the class frequencies",
          "rate %g %g %g %g %g, chance %g %g %g %g %g", s.class_rate[0], s.class_rate[1], s.class_rate[2],
          s.class_rate[3], s.class_rate[4], s.class_chance[0], s.class_chance[1], s.class_chance[2],
          s.class_chance[3], s.class_chance[4]);
    check(s.pairs[0] == 4 && s.pair_split[0] == 2 && near(s.split_frac[0], 0.5, 0) &&
              near(s.split_lo[0], 0.15003898915214953, 1e-9) && near(s.split_hi[0], 0.8499610108478506, 1e-9),
          "mixed row: 2 of 4 records split, Wilson [0.150039, 0.849961]", "pairs %ld split %ld [%.9g, %.9g]",
          s.pairs[0], s.pair_split[0], s.split_lo[0], s.split_hi[0]);
    /* a second add of the same row doubles every count and leaves every fraction */
    rc = boundary_stats_add(&s, 0, MIX_FLAG, MIX_P, MIX_TOK, 1, 12, err);
    boundary_stats_finalize(&s);
    check(!rc && s.hist[0] == 4 && s.unpooled[0] == 2 && s.positions[0] == 24 && near(s.rate[0], 5.0 / 12, 1e-12) &&
              near(s.ratio_loss[0], 147.8 / 144, 1e-6) && s.pairs[0] == 8,
          "mixed row added twice: counts double, rates stay", "hist[0] %ld unpooled %ld F %g", s.hist[0],
          s.unpooled[0], s.rate[0]);
    boundary_stats_free(&s);
}

static void check_record_split_wilson(void) {
    /* ten pairs k v k v ... (keys at even t); flags at the keys 0, 2, 4 and at the values 7, 11,
     * 15, 19 (chunks 1, 2, 2, 3, 4, 4, 4 <= W 4): 3 of 10 split, F = 7/20 */
    char err[ERR_LEN];
    BoundaryStats s;
    int32_t tok[20];
    unsigned char f[20] = {0};
    float p[20];
    for (int t = 0; t < 20; t++) tok[t] = t % 2 ? 80 + t : 16 + t, p[t] = 0.6f;
    f[0] = f[2] = f[4] = f[7] = f[11] = f[15] = f[19] = 1;
    int rc = boundary_stats_init(&s, 1, 4, 2, NULL, err) || boundary_stats_add(&s, 0, f, p, tok, 1, 20, err);
    boundary_stats_finalize(&s);
    check(!rc && s.pairs[0] == 10 && s.pair_split[0] == 3 && near(s.split_frac[0], 0.3, 1e-12) &&
              near(s.split_lo[0], 0.10779126740630103, 1e-9) && near(s.split_hi[0], 0.6032218525388546, 1e-9) &&
              near(s.rate[0], 0.35, 1e-12),
          "record splits 3/10 with the 95% Wilson interval [0.107791, 0.603222], chance F 0.35",
          "rc %d, pairs %ld split %ld frac %g [%.9g, %.9g] F %g", rc, s.pairs[0], s.pair_split[0], s.split_frac[0],
          s.split_lo[0], s.split_hi[0], s.rate[0]);
    double want_rate[5] = {3. / 7, 4. / 7, 0, 0, 0};
    check(same_doubles(s.class_rate, want_rate, 5, 1e-12), "record splits: 3 of 7 boundaries on keys, 4 on values",
          "rate %g %g", s.class_rate[0], s.class_rate[1]);
    boundary_stats_free(&s);
}

static void check_refused(void) {
    char err[ERR_LEN];
    BoundaryStats s;
    unsigned char f[6] = {0, 0, 0, 0, 1, 0};   /* chunk 0..4 of 5 tokens > W 4 */
    float p[6] = {.1f, .1f, .1f, .1f, .1f, .1f};
    int32_t tok[6] = {208, 208, 208, 208, 208, 208};
    boundary_stats_init(&s, 2, 4, 2, NULL, err);
    int long_chunk = boundary_stats_add(&s, 0, f, p, tok, 1, 6, err) != 0 && strstr(err, "longer than W");
    unsigned char f2[6] = {0, 2, 0, 1, 0, 0};
    int bad_flag = boundary_stats_add(&s, 0, f2, p, tok, 1, 6, err) != 0 && strstr(err, "flag 2");
    unsigned char f3[6] = {0, 1, 0, 1, 0, 0};
    float p3[6] = {.1f, .1f, NAN, .1f, .1f, .1f};
    int nan_p = boundary_stats_add(&s, 0, f3, p3, tok, 1, 6, err) != 0 && strstr(err, "score");
    int bad_layer = boundary_stats_add(&s, 2, f3, p, tok, 1, 6, err) != 0 && strstr(err, "layer 2");
    check(long_chunk && bad_flag && nan_p && bad_layer && s.positions[0] == 0 && s.hist[0] == 0 && s.prob_sum[0] == 0,
          "refused inputs: chunk longer than W, flag 2, NaN score, layer out of range; nothing counted",
          "long %d flag %d nan %d layer %d positions %ld (%s)", long_chunk, bad_flag, nan_p, bad_layer,
          s.positions[0], err);
    boundary_stats_free(&s);
    boundary_stats_init(&s, 1, 4, 2, bad_class, err);
    int bad_cls = boundary_stats_add(&s, 0, f3, p, tok, 1, 6, err) != 0 && strstr(err, "class 7");
    boundary_stats_free(&s);
    int bad_init = boundary_stats_init(&s, 1, 4, 4, NULL, err) != 0 && boundary_stats_init(&s, 1, 4, 1, NULL, err) != 0;
    check(bad_cls && bad_init, "refused: a class out of range, S >= W, S < 2", "class %d init %d", bad_cls, bad_init);
}

static int read_string_attr(hid_t obj, const char *name, char *out, size_t n) {
    out[0] = 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a);
    char *v = NULL;
    int rc = H5Tis_variable_str(t) > 0 && H5Aread(a, t, &v) >= 0 ? 0 : -1;
    if (!rc && v) snprintf(out, n, "%s", v);
    if (v) H5free_memory(v);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static void check_h5_round_trip(void) {
    /* two layers: layer 0 the mixed row, layer 1 never added (NaN rates, zero counts) */
    char err[ERR_LEN];
    BoundaryStats s;
    mkdir("build", 0777);
    mkdir("build/scratch", 0777);
    mkdir(SCRATCH, 0777);
    const char *path = SCRATCH "/stats.h5";
    boundary_stats_init(&s, 2, 4, 2, NULL, err);
    boundary_stats_add(&s, 0, MIX_FLAG, MIX_P, MIX_TOK, 1, 12, err);
    boundary_stats_finalize(&s);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t grp = file < 0 ? -1 : H5Gcreate2(file, "boundaries_000", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = grp < 0 ? -1 : boundary_stats_write_h5(&s, grp, err);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int again = grp < 0 ? 0 : boundary_stats_write_h5(&s, grp, err) != 0;   /* attributes/datasets exist */
    if (grp >= 0) H5Gclose(grp);
    if (file >= 0) H5Fclose(file);
    check(rc == 0 && again, "hdf5: writer succeeds once, refuses to overwrite", "rc %d again %d (%s)", rc, again, err);

    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    grp = file < 0 ? -1 : H5Gopen2(file, "boundaries_000", H5P_DEFAULT);
    long hist[8] = {0}, unpooled[2] = {0}, pairs[2] = {0};
    double rate[2], prob[2], ratio[2], forced[2], cls[10], chance[5], split[2], lo[2], hi[2];
    int ok = grp >= 0 && H5LTread_dataset_long(grp, "chunk_length_hist", hist) >= 0 &&
             H5LTread_dataset_long(grp, "unpooled", unpooled) >= 0 &&
             H5LTread_dataset_long(grp, "record_split_n", pairs) >= 0 &&
             H5LTread_dataset_double(grp, "boundary_rate", rate) >= 0 &&
             H5LTread_dataset_double(grp, "mean_prob", prob) >= 0 &&
             H5LTread_dataset_double(grp, "ratio_loss", ratio) >= 0 &&
             H5LTread_dataset_double(grp, "forced_fraction", forced) >= 0 &&
             H5LTread_dataset_double(grp, "class_rate", cls) >= 0 &&
             H5LTread_dataset_double(grp, "class_chance", chance) >= 0 &&
             H5LTread_dataset_double(grp, "record_split", split) >= 0 &&
             H5LTread_dataset_double(grp, "record_split_lo", lo) >= 0 &&
             H5LTread_dataset_double(grp, "record_split_hi", hi) >= 0;
    check(ok, "hdf5: every dataset reads back", "group %lld", (long long)grp);
    long want_hist[8] = {2, 1, 1, 1, 0, 0, 0, 0};
    check(ok && same_longs(hist, want_hist, 8) && unpooled[0] == 1 && unpooled[1] == 0 && pairs[0] == 4 &&
              pairs[1] == 0,
          "hdf5: counts read back (hist [L, W], unpooled, record_split_n)", "hist %ld %ld %ld %ld / %ld, unpooled %ld",
          hist[0], hist[1], hist[2], hist[3], hist[4], unpooled[0]);
    check(ok && near(rate[0], 5.0 / 12, 1e-15) && isnan(rate[1]) && near(prob[0], s.mean_prob[0], 0) &&
              near(ratio[0], 147.8 / 144, 1e-6) && isnan(ratio[1]) && near(forced[0], 0.2, 1e-15) &&
              isnan(forced[1]) && same_doubles(cls, s.class_rate, 10, 0) && near(cls[0], 0.4, 1e-15) &&
              isnan(cls[5]) && same_doubles(chance, s.class_chance, 5, 0) && near(split[0], 0.5, 0) &&
              isnan(split[1]) && near(lo[0], 0.15003898915214953, 1e-9) && near(hi[0], 0.8499610108478506, 1e-9),
          "hdf5: rates, shares, chance and intervals read back (NaN for the layer never added)",
          "rate %g %g ratio %g forced %g cls %g split %g", rate[0], rate[1], ratio[0], forced[0], cls[0], split[0]);
    int rank = 0;
    hsize_t dims[2] = {0, 0};
    H5T_class_t tclass;
    size_t tsize;
    ok = grp >= 0 && H5LTget_dataset_ndims(grp, "class_rate", &rank) >= 0 &&
         H5LTget_dataset_info(grp, "class_rate", dims, &tclass, &tsize) >= 0;
    int shape_ok = ok && rank == 2 && dims[0] == 2 && dims[1] == 5 && tclass == H5T_FLOAT && tsize == 8;
    ok = grp >= 0 && H5LTget_dataset_info(grp, "chunk_length_hist", dims, &tclass, &tsize) >= 0;
    shape_ok = shape_ok && ok && dims[0] == 2 && dims[1] == 4 && tclass == H5T_INTEGER && tsize == 8;
    char def[512] = "", lname[256] = "", units[64] = "", label[32] = "";
    hid_t ds = grp < 0 ? -1 : H5Dopen2(grp, "boundary_rate", H5P_DEFAULT);
    int attrs = ds >= 0 && read_string_attr(ds, "definition", def, sizeof def) == 0 &&
                read_string_attr(ds, "long_name", lname, sizeof lname) == 0 &&
                read_string_attr(ds, "units", units, sizeof units) == 0 && strstr(def, "n_bd / n_pos") &&
                strcmp(lname, "boundary rate F (1/token)") == 0 && strcmp(units, "1/token") == 0 &&
                H5DSget_label(ds, 0, label, sizeof label) > 0 && strcmp(label, "layer") == 0;
    if (ds >= 0) H5Dclose(ds);
    long window = 0, target = 0;
    char *names[5] = {0};
    hid_t a = grp < 0 ? -1 : H5Aopen(grp, "class_names", H5P_DEFAULT);
    hid_t at = a < 0 ? -1 : H5Aget_type(a);
    int group_attrs = grp >= 0 && H5LTget_attribute_long(grp, ".", "window", &window) >= 0 &&
                      H5LTget_attribute_long(grp, ".", "target_chunk_length", &target) >= 0 && window == 4 &&
                      target == 2 && at >= 0 && H5Aread(a, at, names) >= 0 && names[0] &&
                      strcmp(names[0], "key") == 0 && names[3] && strcmp(names[3], "eot") == 0;
    for (int k = 0; k < 5; k++)
        if (names[k]) H5free_memory(names[k]);
    if (at >= 0) H5Tclose(at);
    if (a >= 0) H5Aclose(a);
    check(shape_ok && attrs && group_attrs,
          "hdf5: shapes and types, long_name/units/definition, dimension labels, group attributes",
          "shape %d attrs %d (def '%s', long_name '%s', units '%s', label '%s') group %d (W %ld S %ld)", shape_ok,
          attrs, def, lname, units, label, group_attrs, window, target);
    if (grp >= 0) H5Gclose(grp);
    if (file >= 0) H5Fclose(file);
    boundary_stats_free(&s);
}

int main(void) {
    check_forced_only();
    check_every_token();
    check_mixed();
    check_record_split_wilson();
    check_refused();
    check_h5_round_trip();
    return check_exit_code();
}
