/* Tests of train/metrics.c, the metrics.h5 writer. Reads every file back with the HDF5 C API
 * (never with the writer's code) and compares against values written in this file:
 *   - a new file: rows of /train /val /probe /gates, probe mean/worst/best/gap worked out by
 *     hand, NaN rows for a missing probe protocol, the `step` dimension scale attached to
 *     dim 0 of every dataset, NeXus and root attributes (config, code_version);
 *   - steps that do not increase are refused; accuracies outside 0..100 are refused;
 *   - resume: truncation to step <= resume_step, appending after it, no duplicated step,
 *     updated config attribute, a missing file created, a wrong shape refused by name;
 *   - a writer killed with SIGKILL in SWMR mode: the file still resumes;
 *   - a model without compressed attention gets no /gates group;
 *   - an uncreatable path gives an error naming it.
 * Mode `test_metrics --writer PATH`: a SWMR writer driven line by line on stdin
 * ("next" appends one row to every group and answers "row K", "close" closes and answers
 * "closed"); tests/test_metrics_swmr.py reads the file with h5py while it runs.
 * Scratch files: build/scratch/test_metrics/. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "common/errors.h"
#include "tests/check.h"
#include "trainer/metrics.h"

#define SCRATCH "build/scratch/test_metrics"

/* P = 4 residues, L = 2 layers, G = 3 KV heads, W = 5 offsets */
static const MetricsShape SHAPE = {.n_layers = 2, .n_kv_heads = 3, .window = 5, .residues = 4, .has_gates = 1};
/* the SWMR writer of tests/test_metrics_nexus.py also writes /val_stats: S = 2 phases */
static const MetricsShape WRITER_SHAPE = {.n_layers = 2, .n_kv_heads = 3, .window = 5, .residues = 4, .has_gates = 1,
                                          .phases = 2};
enum { P = 4, L = 2, G = 3, W = 5, GATE_ROW = L * G * 2, PROFILE_ROW = L * G * 2 * W };

/* ---- reading back with plain HDF5 ----------------------------------------------------- */

static hid_t open_read(const char *path) {
    return H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
}

/* Reads a whole dataset as `type`; returns a malloc'd buffer, rows in *n_rows (dim 0). */
static void *read_dataset(hid_t file, const char *name, hid_t type, size_t elem, long *n_rows, long *row_elems) {
    *n_rows = -1;
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return NULL;
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t s = H5Dget_space(d);
    hsize_t dims[8] = {0};
    int rank = H5Sget_simple_extent_ndims(s);
    H5Sget_simple_extent_dims(s, dims, NULL);
    long total = 1, per_row = 1;
    for (int i = 0; i < rank; i++) total *= (long)dims[i];
    for (int i = 1; i < rank; i++) per_row *= (long)dims[i];
    void *buf = malloc(elem * (size_t)(total ? total : 1));
    if (total > 0 && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        free(buf);
        buf = NULL;
    }
    H5Sclose(s);
    H5Dclose(d);
    *n_rows = (long)dims[0];
    if (row_elems) *row_elems = per_row;
    return buf;
}

static int64_t *read_i64(hid_t f, const char *name, long *n) {
    return read_dataset(f, name, H5T_NATIVE_INT64, 8, n, NULL);
}
static double *read_f64(hid_t f, const char *name, long *n) {
    return read_dataset(f, name, H5T_NATIVE_DOUBLE, 8, n, NULL);
}

/* Reads a string attribute (variable- or fixed-length) of object `obj` into out. */
static int read_string_attr(hid_t file, const char *obj, const char *name, char *out, size_t cap) {
    out[0] = 0;
    if (H5Aexists_by_name(file, obj, name, H5P_DEFAULT) <= 0) return -1;
    hid_t a = H5Aopen_by_name(file, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    int rc = -1;
    if (H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            hid_t s = H5Aget_space(a);
            if (H5Sget_simple_extent_ndims(s) == 0) {
                char *value = NULL;
                if (H5Aread(a, t, &value) >= 0 && value) {
                    snprintf(out, cap, "%s", value);
                    rc = 0;
                }
                H5free_memory(value);
            } else { /* array of strings: join with '|' */
                hsize_t n = 0;
                H5Sget_simple_extent_dims(s, &n, NULL);
                char **values = calloc(n, sizeof *values);
                if (H5Aread(a, t, values) >= 0) {
                    for (hsize_t i = 0; i < n; i++)
                        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "|" : "", values[i]);
                    rc = 0;
                }
                for (hsize_t i = 0; i < n; i++) H5free_memory(values[i]);
                free(values);
            }
            H5Sclose(s);
        } else {
            size_t size = H5Tget_size(t);
            char *value = calloc(size + 1, 1);
            if (H5Aread(a, t, value) >= 0) {
                snprintf(out, cap, "%s", value);
                rc = 0;
            }
            free(value);
        }
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static int same_double(double a, double b) { return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-12 * (1 + fabs(b)); }

static int steps_equal(hid_t f, const char *name, const long *want, long n_want, char *why) {
    long n;
    int64_t *got = read_i64(f, name, &n);
    int ok = got && n == n_want;
    for (long i = 0; ok && i < n; i++) ok = got[i] == want[i];
    why[0] = 0;
    snprintf(why, 256, "%s has %ld rows:", name, n);
    for (long i = 0; got && i < n && i < 12; i++) snprintf(why + strlen(why), 256 - strlen(why), " %lld", (long long)got[i]);
    snprintf(why + strlen(why), 256 - strlen(why), ", expected %ld rows", n_want);
    free(got);
    return ok;
}

/* ---- test data -------------------------------------------------------------------------- */

static void fill_gates(float *eff_static, float *eff_window, float *profile, long step) {
    for (int i = 0; i < GATE_ROW; i++) {
        eff_static[i] = (float)(1 + i + step);
        eff_window[i] = (float)(0.5 + i + step);
    }
    for (int i = 0; i < PROFILE_ROW; i++) profile[i] = (float)(i * 0.25 + step);
}

static char scratch_path[512];
static const char *scratch(const char *name) {
    snprintf(scratch_path, sizeof scratch_path, SCRATCH "/%s", name);
    return scratch_path;
}

/* Writes the first file: train 0,10,20,30; val 10,30; probe 10 (both), 30 (pp only); gates 10,30. */
static void write_first_file(const char *path) {
    char err[ERR_LEN] = "";
    Metrics *m = metrics_open(path, &SHAPE, "[model]\nd_model = 64\n", "v-test-1", -1, err);
    if (!check(m != NULL, "create a new metrics file", "%s", err)) exit(1);
    int rc = 0;
    for (long step = 0; step <= 30; step += 10)
        rc |= metrics_log_train(m, step, step * 100, 5.0 - step * 0.1, 1e-3 * (step + 1), 0.5 + step,
                                1000.0 + step, 0.25, err);
    check(rc == 0, "log four train rows", "%s", err);

    double by_residue[P] = {4.0, 4.1, 4.2, 4.3};
    rc = metrics_log_val(m, 10, 4.15, by_residue, err);
    by_residue[0] = 3.0;
    rc |= metrics_log_val(m, 30, 3.5, by_residue, err);
    check(rc == 0, "log two val rows", "%s", err);

    double acc_pp[P] = {90, 40, 70, 80}, acc_ip[P] = {50, 50, NAN, 20};
    rc = metrics_log_probe(m, 10, acc_pp, acc_ip, err);
    double acc_pp2[P] = {100, 100, 100, 0};
    rc |= metrics_log_probe(m, 30, acc_pp2, NULL, err);
    check(rc == 0, "log two probe rows (one without in-sequence padding)", "%s", err);

    float es[GATE_ROW], ew[GATE_ROW], pr[PROFILE_ROW];
    fill_gates(es, ew, pr, 10);
    rc = metrics_log_gates(m, 10, es, ew, pr, err);
    fill_gates(es, ew, pr, 30);
    rc |= metrics_log_gates(m, 30, es, ew, pr, err);
    check(rc == 0, "log two gates rows", "%s", err);

    err[0] = 0;
    check(metrics_log_train(m, 30, 1, 1, 1, 1, 1, 1, err) != 0 && strstr(err, "step 30") && strstr(err, path),
          "a repeated train step is refused, naming file and step", "got '%s'", err);
    check(metrics_log_val(m, 20, 1, by_residue, err) != 0, "a decreasing val step is refused", "accepted");
    double fraction[P] = {0.5, 150, 0.2, 0.1};
    err[0] = 0;
    check(metrics_log_probe(m, 40, fraction, NULL, err) != 0 && strstr(err, "acc_pp[1]"),
          "an accuracy above 100 is refused", "got '%s'", err);
    check(metrics_rows(m, "train") == 4 && metrics_rows(m, "val") == 2 && metrics_rows(m, "probe") == 2 &&
              metrics_rows(m, "gates") == 2,
          "row counts after refused appends", "train %ld val %ld probe %ld gates %ld", metrics_rows(m, "train"),
          metrics_rows(m, "val"), metrics_rows(m, "probe"), metrics_rows(m, "gates"));
    check(metrics_close(m) == 0, "close the metrics file", "metrics_close failed");
}

static void check_first_file(const char *path) {
    char why[256];
    hid_t f = open_read(path);
    if (!check(f >= 0, "reopen the metrics file with the HDF5 C API", "cannot open %s", path)) return;

    long want_train[] = {0, 10, 20, 30};
    check(steps_equal(f, "/train/step", want_train, 4, why), "train steps 0 10 20 30", "%s", why);
    long n;
    double *loss = read_f64(f, "/train/loss", &n);
    int64_t *tokens = read_i64(f, "/train/tokens", &n);
    double *lr = read_f64(f, "/train/lr", &n);
    check(loss && n == 4 && same_double(loss[2], 3.0) && same_double(loss[3], 2.0) && tokens[3] == 3000 &&
              same_double(lr[1], 0.011),
          "train loss, tokens, lr values", "rows %ld loss[2] %g tokens[3] %lld lr[1] %g", n, loss ? loss[2] : -1,
          tokens ? (long long)tokens[3] : -1LL, lr ? lr[1] : -1);
    free(loss), free(tokens), free(lr);
    double *mfu = read_f64(f, "/train/mfu", &n);
    double *tps = read_f64(f, "/train/tokens_per_sec", &n);
    double *gn = read_f64(f, "/train/grad_norm", &n);
    check(mfu && tps && gn && same_double(mfu[0], 0.25) && same_double(tps[2], 1020) && same_double(gn[3], 30.5),
          "train mfu, tokens_per_sec, grad_norm values", "mismatch");
    free(mfu), free(tps), free(gn);

    long want_val[] = {10, 30};
    check(steps_equal(f, "/val/step", want_val, 2, why), "val steps 10 30", "%s", why);
    long row_elems = 0;
    double *by = read_dataset(f, "/val/loss_by_residue", H5T_NATIVE_DOUBLE, 8, &n, &row_elems);
    check(by && n == 2 && row_elems == P && same_double(by[0], 4.0) && same_double(by[3], 4.3) &&
              same_double(by[4], 3.0) && same_double(by[5], 4.1),
          "val loss_by_residue is [n,P] with the logged rows", "rows %ld, row length %ld", n, row_elems);
    free(by);

    /* probe row 0: pp {90,40,70,80}: mean 70 worst 40 best 90 gap 50;
     *              ip {50,50,NaN,20} over finite residues: mean 40 worst 20 best 50 gap 30
     * probe row 1: pp {100,100,100,0}: mean 75 worst 0 best 100 gap 100; ip missing: NaN */
    const char *names[] = {"mean_pp", "worst_pp", "best_pp", "gap_pp", "mean_ip", "worst_ip", "best_ip", "gap_ip"};
    double want[2][8] = {{70, 40, 90, 50, 40, 20, 50, 30}, {75, 0, 100, 100, NAN, NAN, NAN, NAN}};
    for (int k = 0; k < 8; k++) {
        char name[64], test[96];
        snprintf(name, sizeof name, "/probe/%s", names[k]);
        snprintf(test, sizeof test, "probe %s rows", names[k]);
        double *v = read_f64(f, name, &n);
        check(v && n == 2 && same_double(v[0], want[0][k]) && same_double(v[1], want[1][k]), test,
              "got %g %g, expected %g %g", v ? v[0] : -1, v && n > 1 ? v[1] : -1, want[0][k], want[1][k]);
        free(v);
    }
    double *acc_ip = read_dataset(f, "/probe/acc_ip", H5T_NATIVE_DOUBLE, 8, &n, &row_elems);
    int all_nan = acc_ip && n == 2;
    for (int r = 0; all_nan && r < P; r++) all_nan = isnan(acc_ip[P + r]);
    check(all_nan && same_double(acc_ip[3], 20), "probe acc_ip row is NaN when not given", "row 1 not all NaN");
    free(acc_ip);

    long gate_rows = 0;
    float *es = read_dataset(f, "/gates/eff_static", H5T_NATIVE_FLOAT, 4, &gate_rows, &row_elems);
    check(es && gate_rows == 2 && row_elems == GATE_ROW && es[0] == 11.0f && es[GATE_ROW + 5] == 36.0f,
          "gates eff_static is [n,L,G,2] with the logged rows", "rows %ld row length %ld", gate_rows, row_elems);
    free(es);
    float *pr = read_dataset(f, "/gates/profile", H5T_NATIVE_FLOAT, 4, &gate_rows, &row_elems);
    check(pr && gate_rows == 2 && row_elems == PROFILE_ROW && pr[PROFILE_ROW - 1] == (PROFILE_ROW - 1) * 0.25f + 10 &&
              pr[PROFILE_ROW + 4] == 31.0f,
          "gates profile is [n,L,G,2,W] with the logged rows", "rows %ld row length %ld", gate_rows, row_elems);
    free(pr);
    hid_t d = H5Dopen2(f, "/gates/profile", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[5], maxdims[5];
    int rank = H5Sget_simple_extent_dims(s, dims, maxdims);
    check(rank == 5 && dims[1] == L && dims[2] == G && dims[3] == 2 && dims[4] == W && maxdims[0] == H5S_UNLIMITED,
          "gates profile dims [n,2,3,2,5], first dimension unlimited", "rank %d", rank);
    H5Sclose(s);
    H5Dclose(d);

    /* dimension scales: step of each group attached to dim 0 of every other dataset */
    const char *groups[] = {"train", "val", "probe", "gates"};
    int attached = 1, is_scale = 1;
    char missing[4400] = "";
    for (int g = 0; g < 4; g++) {
        char name[64];
        snprintf(name, sizeof name, "/%s/step", groups[g]);
        hid_t step = H5Dopen2(f, name, H5P_DEFAULT);
        is_scale &= H5DSis_scale(step) > 0;
        hid_t group = H5Gopen2(f, groups[g], H5P_DEFAULT);
        H5G_info_t info;
        H5Gget_info(group, &info);
        for (hsize_t i = 0; i < info.nlinks; i++) {
            char member[64];
            H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, member, sizeof member, H5P_DEFAULT);
            if (strcmp(member, "step") == 0) continue;
            hid_t ds = H5Dopen2(group, member, H5P_DEFAULT);
            if (H5DSis_attached(ds, step, 0) <= 0) {
                attached = 0;
                snprintf(missing, sizeof missing, "/%s/%s", groups[g], member);
            }
            H5Dclose(ds);
        }
        H5Gclose(group);
        H5Dclose(step);
    }
    check(is_scale, "every group's step is a dimension scale", "H5DSis_scale false");
    check(attached, "step is attached to dim 0 of every dataset (H5DSis_attached)", "not attached to %s", missing);
    char label[64] = "";
    d = H5Dopen2(f, "/val/loss_by_residue", H5P_DEFAULT);
    H5DSget_label(d, 1, label, sizeof label);
    H5Dclose(d);
    check(strcmp(label, "residue") == 0, "loss_by_residue dim 1 labelled residue", "label '%s'", label);

    /* NeXus and root attributes */
    char value[4096];
    read_string_attr(f, "/", "NX_class", value, sizeof value);
    check(strcmp(value, "NXroot") == 0, "root NX_class = NXroot", "'%s'", value);
    read_string_attr(f, "/", "config", value, sizeof value);
    check(strcmp(value, "[model]\nd_model = 64\n") == 0, "root config attribute holds the config text", "'%s'", value);
    read_string_attr(f, "/", "code_version", value, sizeof value);
    check(strcmp(value, "v-test-1") == 0, "root code_version attribute", "'%s'", value);
    /* NeXus: root default -> /entry (NXentry) -> val_loss (NXdata); raw tables have no class */
    read_string_attr(f, "/", "default", value, sizeof value);
    check(strcmp(value, "entry") == 0, "root default = entry", "'%s'", value);
    read_string_attr(f, "/entry", "NX_class", value, sizeof value);
    check(strcmp(value, "NXentry") == 0, "/entry NX_class = NXentry", "'%s'", value);
    read_string_attr(f, "/entry", "default", value, sizeof value);
    check(strcmp(value, "val_loss") == 0, "/entry default = val_loss", "'%s'", value);
    read_string_attr(f, "/entry/val_loss", "NX_class", value, sizeof value);
    check(strcmp(value, "NXdata") == 0, "/entry/val_loss NX_class = NXdata", "'%s'", value);
    read_string_attr(f, "/entry/train_loss", "signal", value, sizeof value);
    check(strcmp(value, "loss") == 0, "/entry/train_loss signal is loss", "'%s'", value);
    read_string_attr(f, "/entry/gate_profile", "axes", value, sizeof value);
    check(strcmp(value, "step|layer|kv_head|branch|window_offset") == 0, "/entry/gate_profile axes name every dimension",
          "'%s'", value);
    int plain = 1;
    for (int g = 0; g < 4; g++) {
        char obj[32];
        snprintf(obj, sizeof obj, "/%s", groups[g]);
        if (read_string_attr(f, obj, "NX_class", value, sizeof value) == 0) plain = 0, snprintf(missing, sizeof missing, "%s", obj);
    }
    check(plain, "raw tables carry no NX_class", "%s has one", missing);
    read_string_attr(f, "/train/loss", "units", value, sizeof value);
    check(strcmp(value, "nats") == 0, "/train/loss units nats", "'%s'", value);
    read_string_attr(f, "/probe/gap_pp", "units", value, sizeof value);
    check(strcmp(value, "percentage points") == 0, "/probe/gap_pp units percentage points", "'%s'", value);
    check(read_string_attr(f, "/probe/acc_pp", "long_name", value, sizeof value) == 0 && value[0],
          "/probe/acc_pp has a long_name", "missing");
    H5Fclose(f);
}

static void test_resume(const char *path) {
    char err[ERR_LEN] = "", why[256];
    Metrics *m = metrics_open(path, &SHAPE, "[model]\nd_model = 64\n[train]\nsteps = 99\n", "v-test-2", 20, err);
    if (!check(m != NULL, "reopen for resume at step 20", "%s", err)) return;
    check(metrics_rows(m, "train") == 3 && metrics_rows(m, "val") == 1 && metrics_rows(m, "probe") == 1 &&
              metrics_rows(m, "gates") == 1,
          "resume truncates every group to steps <= 20", "train %ld val %ld probe %ld gates %ld",
          metrics_rows(m, "train"), metrics_rows(m, "val"), metrics_rows(m, "probe"), metrics_rows(m, "gates"));
    check(metrics_log_train(m, 20, 1, 1, 1, 1, 1, 1, err) != 0, "after resume, step 20 cannot be logged again",
          "accepted");
    int rc = metrics_log_train(m, 30, 3001, 9.5, 0.1, 1, 1, 0.5, err);
    rc |= metrics_log_train(m, 40, 4001, 9.0, 0.1, 1, 1, 0.5, err);
    double by_residue[P] = {7, 7, 7, 7};
    rc |= metrics_log_val(m, 30, 7.0, by_residue, err);
    double acc[P] = {10, 20, 30, 40};
    rc |= metrics_log_probe(m, 30, acc, acc, err);
    check(rc == 0, "append after resume", "%s", err);
    metrics_close(m);

    hid_t f = open_read(path);
    long want_train[] = {0, 10, 20, 30, 40}, want_val[] = {10, 30}, want_gates[] = {10};
    check(steps_equal(f, "/train/step", want_train, 5, why), "resumed train steps 0 10 20 30 40, none twice", "%s", why);
    check(steps_equal(f, "/val/step", want_val, 2, why), "resumed val steps 10 30", "%s", why);
    check(steps_equal(f, "/probe/step", want_val, 2, why), "resumed probe steps 10 30", "%s", why);
    check(steps_equal(f, "/gates/step", want_gates, 1, why), "resumed gates steps 10", "%s", why);
    long n, n_tokens;
    double *loss = read_f64(f, "/train/loss", &n);
    int64_t *tokens = read_i64(f, "/train/tokens", &n_tokens);
    check(loss && n == 5 && n_tokens == 5 && same_double(loss[2], 3.0) && same_double(loss[3], 9.5) &&
              same_double(loss[4], 9.0) && tokens[3] == 3001,
          "resumed train rows: old rows kept, new rows after them", "rows %ld", n);
    free(loss), free(tokens);
    double *val_loss = read_f64(f, "/val/loss", &n);
    check(val_loss && n == 2 && same_double(val_loss[0], 4.15) && same_double(val_loss[1], 7.0),
          "resumed val loss: row 30 replaced by the new value", "rows %ld", n);
    free(val_loss);
    double *gap = read_f64(f, "/probe/gap_ip", &n);
    check(gap && n == 2 && same_double(gap[0], 30) && same_double(gap[1], 30), "resumed probe gap_ip rows", "rows %ld", n);
    free(gap);
    long rows_es;
    float *es = read_dataset(f, "/gates/eff_static", H5T_NATIVE_FLOAT, 4, &rows_es, NULL);
    check(es && rows_es == 1 && es[0] == 11.0f, "resumed gates truncated to one row", "rows %ld", rows_es);
    free(es);
    char value[256];
    read_string_attr(f, "/", "code_version", value, sizeof value);
    check(strcmp(value, "v-test-2") == 0, "resume rewrites code_version", "'%s'", value);
    read_string_attr(f, "/", "config", value, sizeof value);
    check(strstr(value, "steps = 99") != NULL, "resume rewrites the config attribute", "'%s'", value);
    hid_t d = H5Dopen2(f, "/train/loss", H5P_DEFAULT), step = H5Dopen2(f, "/train/step", H5P_DEFAULT);
    check(H5DSis_attached(d, step, 0) > 0, "dimension scale still attached after resume", "not attached");
    H5Dclose(d), H5Dclose(step);
    H5Fclose(f);

    /* resume at a step before every row: empty groups that still take rows */
    m = metrics_open(path, &SHAPE, "", "v", 5, err);
    check(m && metrics_rows(m, "train") == 1 && metrics_rows(m, "val") == 0, "resume at step 5 keeps only step 0",
          "%s", m ? "wrong row counts" : err);
    check(m && metrics_log_val(m, 10, 1, by_residue, err) == 0, "val step 10 can be logged again after resume to 5",
          "%s", err);
    metrics_close(m);

    /* a different number of residues is refused, naming the dataset */
    MetricsShape other = SHAPE;
    other.residues = 8;
    err[0] = 0;
    m = metrics_open(path, &other, "", "v", 5, err);
    check(m == NULL && strstr(err, path) && strstr(err, "/val/loss_by_residue") && strstr(err, "[n,8]"),
          "resume with a different eval.residues is refused", "got '%s'", err);
    metrics_close(m);

    /* resume_step < 0 replaces the file */
    m = metrics_open(path, &SHAPE, "", "v", -1, err);
    check(m && metrics_rows(m, "train") == 0, "resume_step < 0 starts a fresh file", "%s", m ? "rows kept" : err);
    metrics_close(m);
}

static void test_resume_missing_file(void) {
    char err[ERR_LEN] = "";
    const char *path = scratch("missing.h5");
    unlink(path);
    /* a config far above HDF5's 64 KiB compact-attribute limit */
    size_t big = 200000;
    char *config = malloc(big + 1), *back = malloc(big + 16);
    for (size_t i = 0; i < big; i++) config[i] = i % 64 == 63 ? '\n' : (char)('a' + i % 26);
    config[big] = 0;
    Metrics *m = metrics_open(path, &SHAPE, config, "v", 100, err);
    int ok = m && metrics_rows(m, "train") == 0 && metrics_log_train(m, 101, 1, 1, 1, 1, 1, 1, err) == 0;
    metrics_close(m);
    check(ok && access(path, F_OK) == 0, "resume with no metrics file creates it", "%s", err);
    hid_t f = open_read(path);
    read_string_attr(f, "/", "config", back, big + 16);
    check(strcmp(back, config) == 0, "a 200 kB config text round-trips as the root attribute",
          "read back %zu bytes", strlen(back));
    H5Fclose(f);
    free(config), free(back);
}

static void test_killed_writer(void) {
    const char *path = scratch("killed.h5");
    unlink(path);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        char err[ERR_LEN];
        Metrics *m = metrics_open(path, &SHAPE, "", "v", -1, err);
        if (!m) _exit(3);
        for (long step = 0; step < 5; step++)
            if (metrics_log_train(m, step, step, 1, 1, 1, 1, 1, err)) _exit(4);
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "SWMR writer child killed with SIGKILL",
               "child status %d", status))
        return;
    char err[ERR_LEN] = "";
    Metrics *m = metrics_open(path, &SHAPE, "", "v", 2, err);
    check(m && metrics_rows(m, "train") == 3, "a file left by a killed writer resumes, truncated to step 2", "%s",
          m ? "wrong row count" : err);
    check(m && metrics_log_train(m, 3, 3, 1, 1, 1, 1, 1, err) == 0, "and takes new rows", "%s", err);
    metrics_close(m);
    hid_t f = open_read(path);
    char why[256];
    long want[] = {0, 1, 2, 3};
    check(f >= 0 && steps_equal(f, "/train/step", want, 4, why), "killed-writer file reads back 0 1 2 3", "%s", why);
    if (f >= 0) H5Fclose(f);
}

static void test_no_gates(void) {
    char err[ERR_LEN] = "";
    const char *path = scratch("full_attention.h5");
    MetricsShape shape = {.n_layers = 0, .n_kv_heads = 0, .window = 0, .residues = 24, .has_gates = 0};
    Metrics *m = metrics_open(path, &shape, "", "v", -1, err);
    if (!check(m != NULL, "create a metrics file for a full-attention model", "%s", err)) return;
    float x = 0;
    check(metrics_log_gates(m, 0, &x, &x, &x, err) != 0 && strstr(err, "gates"),
          "logging gates without compressed attention is an error", "got '%s'", err);
    check(metrics_log_probe(m, 0, NULL, NULL, err) == 0, "an all-NaN probe row is accepted", "%s", err);
    metrics_close(m);
    hid_t f = open_read(path);
    check(H5Lexists(f, "/gates", H5P_DEFAULT) == 0 && H5Lexists(f, "/probe", H5P_DEFAULT) > 0 &&
              H5Lexists(f, "/probe/acc_pp", H5P_DEFAULT) > 0,
          "no /gates group, /probe present", "layout differs");
    H5Fclose(f);
    m = metrics_open(path, &shape, "", "v", 0, err);
    check(m && metrics_rows(m, "probe") == 1, "full-attention file resumes", "%s", m ? "rows" : err);
    metrics_close(m);
}

static void test_bad_paths(void) {
    char err[ERR_LEN] = "";
    const char *path = SCRATCH "/no_such_dir/metrics.h5";
    Metrics *m = metrics_open(path, &SHAPE, "", "v", -1, err);
    check(m == NULL && strstr(err, path) != NULL, "an uncreatable metrics path is an error naming it", "got '%s'", err);
    metrics_close(m);
    printf("# error message: %s\n", err);

    const char *not_hdf5 = scratch("not_hdf5.h5");
    FILE *fp = fopen(not_hdf5, "w");
    fputs("this is not an HDF5 file\n", fp);
    fclose(fp);
    err[0] = 0;
    m = metrics_open(not_hdf5, &SHAPE, "", "v", 10, err);
    check(m == NULL && strstr(err, not_hdf5) != NULL, "resuming onto a non-HDF5 file is an error naming it",
          "got '%s'", err);
    metrics_close(m);
    printf("# error message: %s\n", err);

    MetricsShape bad = SHAPE;
    bad.residues = 0;
    err[0] = 0;
    m = metrics_open(scratch("bad_shape.h5"), &bad, "", "v", -1, err);
    check(m == NULL && strstr(err, "residues"), "residues = 0 is refused", "got '%s'", err);
}

/* ---- SWMR writer mode for tests/test_metrics_swmr.py ------------------------------------ */

static int run_writer(const char *path) {
    char err[ERR_LEN] = "", line[64];
    Metrics *m = metrics_open(path, &WRITER_SHAPE, "[model]\nname = swmr\n", "swmr-writer", -1, err);
    if (!m) {
        printf("error %s\n", err);
        return 1;
    }
    printf("open\n");
    fflush(stdout);
    long k = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "close", 5) == 0) break;
        if (strncmp(line, "next", 4) != 0) continue;
        /* row k: train step 10k, loss 1/(k+1), tokens 1000k; val loss_by_residue r + k;
         * probe acc_pp[r] = 10 (r + 1) + k, acc_ip NaN; gates eff_static[i] = i + k */
        double by_residue[P], acc[P];
        for (int r = 0; r < P; r++) by_residue[r] = r + k, acc[r] = 10.0 * (r + 1) + k;
        float es[GATE_ROW], ew[GATE_ROW], pr[PROFILE_ROW];
        for (int i = 0; i < GATE_ROW; i++) es[i] = (float)(i + k), ew[i] = 1;
        for (int i = 0; i < PROFILE_ROW; i++) pr[i] = 1;
        /* val_stats: means as /val, standard errors 0.1, 100 tokens each, p = 0.5 */
        double se[P] = {0.1, 0.1, 0.1, 0.1}, tok[P] = {100, 100, 100, 100}, ph_mean[2] = {2.0 + k, 3.0 + k};
        LossStats by_r = {.K = P, .units = 8, .B = 10, .mean = by_residue, .se = se, .tokens = tok, .overall_se = 0.05,
                          .F = 1, .df1 = 3, .df2 = 5, .p = 0.5};
        LossStats by_p = {.K = 2, .units = 8, .B = 10, .mean = ph_mean, .se = se, .tokens = tok, .F = 1, .df1 = 1, .df2 = 7,
                          .p = 0.5};
        if (metrics_log_train(m, 10 * k, 1000 * k, 1.0 / (k + 1), 1e-3, 1, 100, 0.5, err) ||
            metrics_log_val(m, 10 * k, 2.0 + k, by_residue, err) || metrics_log_val_stats(m, 10 * k, &by_r, &by_p, err) ||
            metrics_log_probe(m, 10 * k, acc, NULL, err) || metrics_log_gates(m, 10 * k, es, ew, pr, err)) {
            printf("error %s\n", err);
            return 1;
        }
        printf("row %ld\n", k);
        fflush(stdout);
        k++;
    }
    int rc = metrics_close(m);
    printf(rc ? "error close\n" : "closed\n");
    fflush(stdout);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--writer") == 0) return run_writer(argv[2]);
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(SCRATCH, 0755);
    const char *path = scratch("metrics.h5");
    write_first_file(path);
    check_first_file(path);
    test_resume(path);
    test_resume_missing_file();
    test_killed_writer();
    test_no_gates();
    test_bad_paths();
    return check_exit_code();
}
