/* analysis.h5 writer (layout in analysis/analysis_h5.h): opens or creates the file, numbers a
 * new group per analysis, writes axis datasets as dimension scales and labelled float64 data,
 * with NeXus NXdata attributes. HDF5's automatic error printing is off inside; the first
 * failure is kept and reported once by ah5_end. */
#include "analysis/analysis_h5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "common/errors.h"

struct AnalysisH5 {
    char path[512], group_name[96];
    hid_t file, group;
    int failed;
    char err[ERR_LEN];
};

static void fail(AnalysisH5 *a, const char *what) {
    if (!a->failed) snprintf(a->err, sizeof a->err, "%s: /%s: cannot write %s", a->path, a->group_name, what);
    a->failed = 1;
}

typedef struct { const char *prefix; int highest; } Scan;

static herr_t scan_group(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    Scan *s = data;
    size_t n = strlen(s->prefix);
    if (!strncmp(name, s->prefix, n) && name[n] == '_') {
        char *end;
        long v = strtol(name + n + 1, &end, 10);
        if (*end == 0 && v > s->highest) s->highest = (int)v;
    }
    return 0;
}

static int set_str_attr(hid_t obj, const char *name, const char *value) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    hid_t sp = H5Screate(H5S_SCALAR);
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    hid_t at = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = at < 0 ? -1 : H5Awrite(at, t, value);
    if (at >= 0) H5Aclose(at);
    H5Sclose(sp);
    H5Tclose(t);
    return rc < 0 ? -1 : 0;
}

static int set_str_array_attr(hid_t obj, const char *name, const char *const *values, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) if (strlen(values[i]) + 1 > len) len = strlen(values[i]) + 1;
    char *buf = calloc((size_t)n, len);
    for (int i = 0; i < n; i++) memcpy(buf + i * len, values[i], strlen(values[i]));
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, len);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    hsize_t dim = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t at = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = at < 0 ? -1 : H5Awrite(at, t, buf);
    if (at >= 0) H5Aclose(at);
    H5Sclose(sp);
    H5Tclose(t);
    free(buf);
    return rc < 0 ? -1 : 0;
}

AnalysisH5 *ah5_begin(const char *path, const char *kind, const char *checkpoint, long step, char *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    AnalysisH5 *a = calloc(1, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s", path);
    a->file = a->group = -1;
    if (access(path, F_OK) == 0) {
        a->file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        if (a->file < 0) {
            set_err(err, "%s: exists but cannot be opened as HDF5 for appending (remove it or give --out)", path);
            free(a);
            return NULL;
        }
    } else {
        a->file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
        if (a->file < 0) {
            set_err(err, "%s: cannot create the analysis file", path);
            free(a);
            return NULL;
        }
        set_str_attr(a->file, "NX_class", "NXroot");
        set_str_attr(a->file, "creator", "phaselab");
    }
    Scan s = {kind, -1};
    H5Literate(a->file, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, scan_group, &s);
    snprintf(a->group_name, sizeof a->group_name, "%s_%03d", kind, s.highest + 1);
    a->group = H5Gcreate2(a->file, a->group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (a->group < 0) {
        set_err(err, "%s: cannot create group /%s", path, a->group_name);
        H5Fclose(a->file);
        free(a);
        return NULL;
    }
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (set_str_attr(a->group, "NX_class", "NXdata") || set_str_attr(a->group, "kind", kind) ||
        set_str_attr(a->group, "checkpoint", checkpoint) || set_str_attr(a->group, "created", when) ||
        ah5_attr_long(a, "step", step))
        fail(a, "group attributes");
    return a;
}

const char *ah5_group_name(const AnalysisH5 *a) { return a->group_name; }

int ah5_attr_str(AnalysisH5 *a, const char *name, const char *value) {
    if (set_str_attr(a->group, name, value)) { fail(a, name); return -1; }
    return 0;
}

/* A scalar attribute of the given types. */
static int set_scalar_attr(hid_t obj, const char *name, hid_t file_t, hid_t mem_t, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    hid_t at = H5Acreate2(obj, name, file_t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = at < 0 ? -1 : H5Awrite(at, mem_t, v);
    if (at >= 0) H5Aclose(at);
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

int ah5_attr_long(AnalysisH5 *a, const char *name, long value) {
    long long v = value;
    if (set_scalar_attr(a->group, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &v)) { fail(a, name); return -1; }
    return 0;
}

int ah5_attr_double(AnalysisH5 *a, const char *name, double value) {
    if (set_scalar_attr(a->group, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value)) { fail(a, name); return -1; }
    return 0;
}

static int describe(AnalysisH5 *a, hid_t ds, const char *long_name, const char *units) {
    int rc = 0;
    if (long_name) rc |= set_str_attr(ds, "long_name", long_name);
    if (units) rc |= set_str_attr(ds, "units", units);
    return rc;
    (void)a;
}

static int write_axis(AnalysisH5 *a, const char *name, hid_t mem, hid_t file_t, const void *values, int n,
                      const char *long_name, const char *units) {
    hsize_t dim = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t ds = H5Dcreate2(a->group, name, file_t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds < 0 || H5Dwrite(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
             H5DSset_scale(ds, name) < 0 || describe(a, ds, long_name, units);
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    if (rc) { fail(a, name); return -1; }
    return 0;
}

int ah5_axis_long(AnalysisH5 *a, const char *name, const long *values, int n, const char *long_name) {
    long long *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) v[i] = values[i];
    int rc = write_axis(a, name, H5T_NATIVE_LLONG, H5T_STD_I64LE, v, n, long_name, NULL);
    free(v);
    return rc;
}

int ah5_axis_double(AnalysisH5 *a, const char *name, const double *values, int n, const char *long_name,
                    const char *units) {
    return write_axis(a, name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, values, n, long_name, units);
}

int ah5_data(AnalysisH5 *a, const char *name, const double *values, int rank, const int *dims,
             const char *const *axes, const char *long_name, const char *units) {
    hsize_t d[AH5_MAX_RANK];
    for (int i = 0; i < rank; i++) d[i] = (hsize_t)dims[i];
    hid_t sp = H5Screate_simple(rank, d, NULL);
    hid_t ds = H5Dcreate2(a->group, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds < 0 || H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
             describe(a, ds, long_name, units);
    for (int i = 0; !rc && axes && i < rank; i++) {
        if (!axes[i]) continue;
        rc |= H5DSset_label(ds, (unsigned)i, axes[i]) < 0;
        if (H5Lexists(a->group, axes[i], H5P_DEFAULT) > 0) {
            hid_t sc = H5Dopen2(a->group, axes[i], H5P_DEFAULT);
            rc |= sc < 0 || H5DSattach_scale(ds, sc, (unsigned)i) < 0;
            if (sc >= 0) H5Dclose(sc);
        }
    }
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    if (rc) { fail(a, name); return -1; }
    return 0;
}

int ah5_signal(AnalysisH5 *a, const char *signal, const char *const *axes, int n_axes) {
    int rc = set_str_attr(a->group, "signal", signal) || set_str_array_attr(a->group, "axes", axes, n_axes);
    for (int i = 0; !rc && i < n_axes; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%s_indices", axes[i]);
        long long idx = i;
        rc |= set_scalar_attr(a->group, nm, H5T_STD_I64LE, H5T_NATIVE_LLONG, &idx);
    }
    if (rc) { fail(a, "NXdata signal/axes"); return -1; }
    return 0;
}

int ah5_end(AnalysisH5 *a, char *err) {
    if (!a) return 0;
    if (!a->failed && set_str_attr(a->file, "default", a->group_name)) fail(a, "root default");
    if (a->group >= 0) H5Gclose(a->group);
    if (a->file >= 0 && H5Fclose(a->file) < 0) fail(a, "(close)");
    int rc = a->failed ? set_err(err, "%s", a->err) : 0;
    free(a);
    return rc;
}
