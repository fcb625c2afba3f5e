/* analysis.h5 writer (layout, provenance and the crash-safety protocol in
 * analysis/analysis_h5.h): takes the writer lock, reads the current file into memory, builds
 * the new group in that image with HDF5's in-memory (core) driver, and publishes the image
 * with the crash-safe writer (tmp, fsync, rename, fsync the directory). HDF5 never writes to
 * disk here. HDF5's automatic error printing is off inside; the first failure is kept and
 * reported once by ah5_end. */
#include "analysis/analysis_h5.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "common/clock.h"
#include "common/errors.h"
#include "common/fsutil.h"
#include "common/grow.h"
#include "common/sha256.h"
#include "phaselab_version.h"

enum { WAIT_DEFAULT_S = 30, WAIT_MAX_S = 86400, POLL_MS = 200, PATH_BYTES = 4096 };

/* The name HDF5 knows the in-memory file by: the core driver refuses to open an image under the
 * name of a file that exists, and this one never can (/dev/null is not a directory). */
#define IMAGE_NAME "/dev/null/phaselab-analysis-image.h5"

struct AnalysisH5 {
    char path[PATH_BYTES];          /* the analysis file, as given */
    char dir[PATH_BYTES], stem[PATH_BYTES];    /* its directory; its name without ".h5" */
    char store[PATH_BYTES + 64];    /* where the image is published: path, or a sidecar */
    char why_sidecar[ERR_LEN];      /* why the result goes to the sidecar ("": to path) */
    char backup[PATH_BYTES + 64];   /* an unclean path is kept under this name ("": no need) */
    char dropped[ERR_LEN];          /* incomplete groups left out of the repaired file */
    char group_name[96];
    unsigned char *orig;            /* the bytes of path as read (NULL: it did not exist) */
    size_t orig_bytes;
    hid_t fapl, file, group;
    int lock_fd, main_fd;           /* flock EX on the lock file, flock SH on path; -1 when not held */
    int failed;
    char err[ERR_LEN];
};

static void fail(AnalysisH5 *a, const char *what) {
    if (!a->failed) snprintf(a->err, sizeof a->err, "%.600s: /%.95s: cannot write %.200s", a->path, a->group_name, what);
    a->failed = 1;
}

/* The innermost message of HDF5's current error stack (call right after the failing call). */
static herr_t innermost(unsigned n, const H5E_error2_t *e, void *data) {
    if (n == 0) snprintf((char *)data, 256, "%s", e->desc ? e->desc : "unknown HDF5 error");
    return 0;
}

static void h5_message(char out[256]) {
    snprintf(out, 256, "unknown HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, out);
}

/* ---- attributes ---- */

static int set_str_attr(hid_t obj, const char *name, const char *value) {
    hid_t t = H5Tcopy(H5T_C_S1);
    hid_t sp = H5Screate(H5S_SCALAR);
    herr_t rc = -1;
    if (t >= 0 && sp >= 0 && H5Tset_size(t, strlen(value) + 1) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0) {
        if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
        hid_t at = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        rc = at < 0 ? -1 : H5Awrite(at, t, value);
        if (at >= 0 && H5Aclose(at) < 0) rc = -1;
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc < 0 ? -1 : 0;
}

static int set_str_array_attr(hid_t obj, const char *name, const char *const *values, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) if (strlen(values[i]) + 1 > len) len = strlen(values[i]) + 1;
    char *buf = calloc(n > 0 ? (size_t)n : 1, len);
    if (!buf) return -1;
    for (int i = 0; i < n; i++) memcpy(buf + i * len, values[i], strlen(values[i]));
    hid_t t = H5Tcopy(H5T_C_S1);
    hsize_t dim = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    herr_t rc = -1;
    if (t >= 0 && sp >= 0 && H5Tset_size(t, len) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0) {
        hid_t at = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        rc = at < 0 ? -1 : H5Awrite(at, t, buf);
        if (at >= 0 && H5Aclose(at) < 0) rc = -1;
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    free(buf);
    return rc < 0 ? -1 : 0;
}

/* A scalar attribute of the given types. */
static int set_scalar_attr(hid_t obj, const char *name, hid_t file_t, hid_t mem_t, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0) return -1;
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    hid_t at = H5Acreate2(obj, name, file_t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = at < 0 ? -1 : H5Awrite(at, mem_t, v);
    if (at >= 0 && H5Aclose(at) < 0) rc = -1;
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

/* A string attribute of obj (fixed length, or variable length as h5py writes them) into out
 * (n bytes); -1 when absent or not a string. */
static int get_str_attr(hid_t obj, const char *name, char *out, size_t n) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t at = H5Aopen(obj, name, H5P_DEFAULT);
    if (at < 0) return -1;
    hid_t ft = H5Aget_type(at), sp = H5Aget_space(at);
    hid_t mt = ft >= 0 && H5Tget_class(ft) == H5T_STRING ? H5Tcopy(ft) : -1;
    int rc = -1;
    if (mt >= 0 && sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1) {
        if (H5Tis_variable_str(ft) > 0) {
            char *v = NULL;
            if (H5Aread(at, mt, &v) >= 0 && v) snprintf(out, n, "%s", v), rc = 0;
            if (v) H5free_memory(v);
        } else {
            size_t len = H5Tget_size(ft);
            char *buf = calloc(len + 1, 1);
            if (buf && H5Aread(at, mt, buf) >= 0) snprintf(out, n, "%s", buf), rc = 0;
            free(buf);
        }
    }
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(at);
    return rc;
}

/* ---- paths, locks, the wait ---- */

/* path made absolute (realpath when it exists, else joined to the working directory). */
static void absolute_path(const char *path, char *out, size_t n) {
    char buf[PATH_MAX];
    if (realpath(path, buf)) { snprintf(out, n, "%s", buf); return; }
    char cwd[PATH_MAX];
    int k = path[0] != '/' && getcwd(cwd, sizeof cwd) ? snprintf(out, n, "%s/%s", cwd, path) : -1;
    if (k < 0 || (size_t)k >= n) snprintf(out, n, "%s", path);   /* as given, when it cannot be made absolute */
}

/* PHASELAB_ANALYSIS_WAIT: whole seconds in 0..WAIT_MAX_S; otherwise the default, with a warning. */
static int wait_seconds(void) {
    const char *s = getenv("PHASELAB_ANALYSIS_WAIT");
    if (!s || !*s) return WAIT_DEFAULT_S;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > WAIT_MAX_S || s[0] == '-' || s[0] == '+' || s[0] == ' ') {
        fprintf(stderr, "phaselab: warning: PHASELAB_ANALYSIS_WAIT='%s' is not whole seconds in 0..%d; waiting up to %d s\n",
                s, WAIT_MAX_S, WAIT_DEFAULT_S);
        return WAIT_DEFAULT_S;
    }
    return (int)v;
}

static void utc_stamp(char *out, size_t n, const char *fmt) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, n, fmt, &tm);
}

/* DIR/.NAME.lock locked exclusively (non-blocking): 0 and a->lock_fd; 1 busy (why filled); -1
 * error (err filled). */
static int take_lock(AnalysisH5 *a, char *why, char *err) {
    const char *base = strrchr(a->path, '/') ? strrchr(a->path, '/') + 1 : a->path;
    char lock[2 * PATH_BYTES + 16];
    snprintf(lock, sizeof lock, "%s/.%s.lock", a->dir, base);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return set_err(err, "%s: cannot create the analysis file's lock next to it: %s (expected a writable directory; "
                       "give --out FILE elsewhere)", lock, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) { a->lock_fd = fd; return 0; }
    int e = errno;
    if (e != EWOULDBLOCK) {          /* a file system without flock (ENOLCK, ENOTSUP): go on unlocked */
        fprintf(stderr, "phaselab: warning: %s: cannot lock (%s): writing without the analysis writer lock\n", lock, strerror(e));
        a->lock_fd = fd;
        return 0;
    }
    close(fd);
    snprintf(why, ERR_LEN, "another phaselab analysis is writing it");
    return 1;
}

/* Reads path into a->orig under a shared flock kept in a->main_fd: 0 (a->orig NULL when path
 * does not exist or is empty), 1 busy (open for writing elsewhere; why filled), -1 error (err filled). */
static int read_main(AnalysisH5 *a, char *why, char *err) {
    int fd = open(a->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return set_err(err, "%s: cannot open: %s", a->path, strerror(errno));
    }
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {   /* (no flock on this file system: go on) */
        close(fd);
        snprintf(why, ERR_LEN, "another program has it open for writing (HDF5 file lock)");
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return set_err(err, "%s: cannot stat: %s", a->path, strerror(e)); }
    size_t n = (size_t)st.st_size;
    if (n == 0) { a->main_fd = fd; return 0; }        /* empty (a writer stopped at its start): nothing to keep */
    unsigned char *buf = malloc(n);
    if (!buf) { close(fd); return set_err(err, "%s: out of memory: %zu bytes for the analysis file's image", a->path, n); }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return set_err(err, "%s: cannot read: %s", a->path, r < 0 ? strerror(e) : "file shrank while read");
        }
        got += (size_t)r;
    }
    a->orig = buf, a->orig_bytes = n, a->main_fd = fd;
    return 0;
}

static void release_main(AnalysisH5 *a) {
    if (a->main_fd >= 0) close(a->main_fd);
    a->main_fd = -1;
}

static void release_locks(AnalysisH5 *a) {
    release_main(a);
    if (a->lock_fd >= 0) close(a->lock_fd);
    a->lock_fd = -1;
}

static void release_h5(AnalysisH5 *a) {
    if (a->group >= 0) H5Gclose(a->group);
    if (a->file >= 0) H5Fclose(a->file);
    if (a->fapl >= 0) H5Pclose(a->fapl);
    a->group = a->file = a->fapl = -1;
}

/* Removes sidecar temporaries (STEM.pending-*-PID.h5.tmp) of writers that no longer run. */
static void clean_stale_sidecar_tmps(const AnalysisH5 *a) {
    DIR *d = opendir(a->dir);
    if (!d) return;
    const char *base = strrchr(a->stem, '/') ? strrchr(a->stem, '/') + 1 : a->stem;
    char prefix[PATH_BYTES + 16];
    snprintf(prefix, sizeof prefix, "%s.pending-", base);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name), np = strlen(prefix);
        if (n <= np + 7 || strncmp(e->d_name, prefix, np) || strcmp(e->d_name + n - 7, ".h5.tmp")) continue;
        const char *dash = NULL;
        for (const char *p = e->d_name + np; p < e->d_name + n - 7; p++) if (*p == '-') dash = p;
        if (!dash) continue;
        long pid = strtol(dash + 1, NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
            if (pid == (long)getpid()) continue;
            char p[2 * PATH_BYTES + 8];
            snprintf(p, sizeof p, "%s/%s", a->dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

/* ---- the in-memory file ---- */

/* File access on the core driver without a backing store (nothing touches the disk), from
 * image (n bytes) when not NULL. */
static hid_t memory_fapl(const void *image, size_t n) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (p < 0) return -1;
    if (H5Pset_fapl_core(p, 1 << 16, 0) < 0 || H5Pset_fclose_degree(p, H5F_CLOSE_STRONG) < 0 ||
        (image && H5Pset_file_image(p, (void *)image, n) < 0)) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

/* A member of a group of an unclean file can be opened, and a dataset's data read. */
static herr_t check_member(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    int *bad = data;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) { *bad = 1; return 1; }
    if (H5Iget_type(o) == H5I_DATASET) {
        hid_t sp = H5Dget_space(o), ft = H5Dget_type(o);
        hssize_t npts = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        size_t es = ft >= 0 ? H5Tget_size(ft) : 0;
        int vlen = ft >= 0 && (H5Tdetect_class(ft, H5T_VLEN) > 0 || H5Tis_variable_str(ft) > 0);
        if (npts < 0 || es == 0) *bad = 1;
        else if (!vlen && npts > 0) {
            void *buf = malloc((size_t)npts * es);
            if (!buf || H5Dread(o, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) *bad = 1;
            free(buf);
        }
        if (ft >= 0) H5Tclose(ft);
        if (sp >= 0) H5Sclose(sp);
    }
    H5Oclose(o);
    return *bad ? 1 : 0;
}

typedef struct { char (*names)[96]; size_t n, cap; int failed; } NameList;

static herr_t list_groups(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g;
    NameList *l = data;
    if (info->type != H5L_TYPE_HARD || strlen(name) >= 96) return 0;
    char (*names)[96] = grow_array(l->names, &l->cap, l->n + 1, sizeof *names, 16);
    if (!names) { l->failed = 1; return -1; }
    l->names = names;
    snprintf(l->names[l->n++], 96, "%s", name);
    return 0;
}

/* Little-endian unsigned integer of k bytes. */
static uint64_t le_uint(const unsigned char *p, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Whether image [n] has bytes past its end of allocation (EOA): a writer stopped after it wrote
 * objects but before it stored the superblock, so a dangling group may live there and anything
 * allocated at the stored EOA would overlap it. Returns 0 (clean); 1 (unclean, and *patched is a
 * malloc'd copy whose superblock EOA is the end of the image: nothing new is allocated over old
 * bytes); -1 (unclean, superblock version 2 or later, whose checksum this writer does not
 * recompute: why filled); -2 (out of memory). The superblock is found at 0, 512, 1024, ...
 * (after a user block); version 0 / 1 layout: base address, free-space address, EOA at byte
 * 24 (v1: 28) on, each sizeof_offsets (byte 13) long, the EOA relative to the base. */
static int image_unclean(const unsigned char *img, size_t n, unsigned char **patched, char *why) {
    static const unsigned char SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    *patched = NULL;
    for (size_t sb = 0; sb + 64 <= n; sb = sb ? 2 * sb : 512) {
        if (memcmp(img + sb, SIG, 8)) continue;
        int version = img[sb + 8];
        if (version > 1) {
            int k = img[sb + 9];
            if (version > 3 || (k != 2 && k != 4 && k != 8) || sb + 12 + 3 * (size_t)k > n) return 0;
            uint64_t base = le_uint(img + sb + 12, k), eoa = le_uint(img + sb + 12 + 2 * k, k);
            if (base + eoa >= n) return 0;
            snprintf(why, ERR_LEN, "it was left unclean by a stopped writer (%zu bytes past its end of allocation, "
                     "superblock version %d); it is left as it is", n - (size_t)(base + eoa), version);
            return -1;
        }
        int k = img[sb + 13];
        size_t at = sb + (version == 0 ? 24 : 28);
        if ((k != 2 && k != 4 && k != 8) || at + 3 * (size_t)k > n) return 0;
        uint64_t base = le_uint(img + at, k), eoa = le_uint(img + at + 2 * k, k);
        if (base > n || base + eoa >= n) return 0;
        if (!(*patched = malloc(n))) return -2;
        memcpy(*patched, img, n);
        uint64_t end = n - base;
        for (int i = 0; i < k; i++) (*patched)[at + 2 * k + i] = (unsigned char)(end >> (8 * i));
        return 1;
    }
    return 0;
}

/* After image_unclean: unlinks every top-level group that is incomplete (no `signal` naming one
 * of its members, or a member that cannot be opened or read) and names the backup the old file
 * is kept as when any was. Returns 0, -1 on an HDF5 failure or when memory runs out. */
static int drop_incomplete_groups(AnalysisH5 *a) {
    NameList l = {0};
    int rc = H5Literate(a->file, H5_INDEX_NAME, H5_ITER_INC, NULL, list_groups, &l) < 0 || l.failed ? -1 : 0;
    for (size_t i = 0; !rc && i < l.n; i++) {
        hid_t g = H5Oopen(a->file, l.names[i], H5P_DEFAULT);
        int bad = g < 0;
        char signal[256];
        if (!bad && H5Iget_type(g) == H5I_GROUP) {
            bad = get_str_attr(g, "signal", signal, sizeof signal) || H5Lexists(g, signal, H5P_DEFAULT) <= 0;
            if (!bad) H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, check_member, &bad);
        }
        if (g >= 0) H5Oclose(g);
        if (!bad) continue;
        if (H5Ldelete(a->file, l.names[i], H5P_DEFAULT) < 0) { rc = -1; break; }
        size_t k = strlen(a->dropped);
        snprintf(a->dropped + k, sizeof a->dropped - k, "%s/%s", k ? ", " : "", l.names[i]);
    }
    free(l.names);
    if (!rc && a->dropped[0]) {
        char when[32];
        utc_stamp(when, sizeof when, "%Y%m%dT%H%M%SZ");
        snprintf(a->backup, sizeof a->backup, "%s.damaged-%s-%ld.h5", a->stem, when, (long)getpid());
    }
    return rc;
}

typedef struct { const char *prefix; long highest; } Scan;

/* NNN of a top-level group PREFIX_NNN (digits only). */
static herr_t scan_group(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    Scan *s = data;
    size_t n = strlen(s->prefix);
    if (strncmp(name, s->prefix, n) || name[n] != '_' || !name[n + 1] || strlen(name + n + 1) > 9) return 0;
    for (const char *p = name + n + 1; *p; p++) if (*p < '0' || *p > '9') return 0;
    long v = strtol(name + n + 1, NULL, 10);
    if (v > s->highest) s->highest = v;
    return 0;
}

/* A fresh in-memory file with the root attributes; pending_for: the absolute path of the
 * analysis file a sidecar stands in for (NULL for the file itself). */
static int create_memory_file(AnalysisH5 *a, const char *pending_for) {
    a->fapl = memory_fapl(NULL, 0);
    if (a->fapl < 0) return -1;
    a->file = H5Fcreate(IMAGE_NAME, H5F_ACC_TRUNC, H5P_DEFAULT, a->fapl);
    if (a->file < 0) return -1;
    if (set_str_attr(a->file, "NX_class", "NXroot") || set_str_attr(a->file, "creator", "phaselab")) return -1;
    if (pending_for && set_str_attr(a->file, "pending_for", pending_for)) return -1;
    return 0;
}

/* The sidecar STEM.pending-YYYYmmddTHHMMSSZ-PID[-K].h5 (a name no file has yet). */
static void sidecar_name(AnalysisH5 *a) {
    char when[32];
    utc_stamp(when, sizeof when, "%Y%m%dT%H%M%SZ");
    for (int k = 1; k < 1000; k++) {
        if (k == 1) snprintf(a->store, sizeof a->store, "%s.pending-%s-%ld.h5", a->stem, when, (long)getpid());
        else snprintf(a->store, sizeof a->store, "%s.pending-%s-%ld-%d.h5", a->stem, when, (long)getpid(), k);
        if (!fs_exists(a->store)) return;
    }
}

/* Whether a top-level name is an analysis group: KIND_NNN (lower-case letters and '_', then '_'
 * and 3 to 9 digits), what ah5_begin names every group. */
static int is_analysis_name(const char *name) {
    const char *u = strrchr(name, '_');
    if (!u || u == name) return 0;
    for (const char *p = name; p < u; p++) if (!((*p >= 'a' && *p <= 'z') || *p == '_')) return 0;
    size_t n = strlen(u + 1);
    if (n < 3 || n > 9) return 0;
    for (const char *p = u + 1; *p; p++) if (*p < '0' || *p > '9') return 0;
    return 1;
}

static herr_t first_foreign(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    if (is_analysis_name(name)) return 0;
    snprintf((char *)data, 256, "%s", name);
    return 1;
}

/* An existing HDF5 file at path that holds anything but analysis groups (a run's metrics.h5, a
 * file of one's own): 1 and its first such top-level name in what; 0 when it holds only
 * analysis groups, is not HDF5 (the sidecar rule of ah5_begin applies), or cannot be opened now
 * (busy: ah5_begin waits for it). An analysis is never stored into a file phaselab's writer
 * does not own: rewriting its image could lose what the file's own writer relies on (a SWMR
 * metrics.h5 came out unreadable). */
static int holds_foreign(const char *path, char *what) {
    if (H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);   /* a metrics.h5 a run is writing */
    if (f < 0) return 0;
    what[0] = 0;
    herr_t r = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, NULL, first_foreign, what);
    H5Fclose(f);
    return r > 0;
}

int ah5_check_target(const char *path, int named, char *err) {
    size_t len = strlen(path);
    if (len == 0 || len >= PATH_BYTES - 64 || path[len - 1] == '/')
        return set_err(err, "'%.200s': not a usable analysis file name (expected a file path shorter than %d bytes)", path,
                       PATH_BYTES - 64);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return set_err(err, "%.600s: is a directory; expected the analysis file's name (e.g. %.300s/analysis.h5)", path, path);
        if (!S_ISREG(st.st_mode)) return set_err(err, "%.600s: not a regular file; expected an analysis file (.h5)", path);
        char what[256];
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        if (named && st.st_size > 0 && H5Fis_hdf5(path) <= 0)
            return set_err(err, "%.600s: exists and is not an HDF5 file; expected a new file name or an analysis file", path);
        if (holds_foreign(path, what))
            return set_err(err, "%.600s: not an analysis file: it holds /%.200s, which ./train --eval and --score did not write "
                           "(a run's metrics.h5? results are never added to it); expected a new file or an analysis file",
                           path, what);
    }
    char dir[PATH_BYTES];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
    for (;;) {                                    /* the nearest existing ancestor must be a writable directory */
        if (stat(dir, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return set_err(err, "%.600s: %.300s is not a directory", path, dir);
            if (access(dir, W_OK | X_OK) != 0)
                return set_err(err, "%.600s: cannot write in %.300s (%s); give --out FILE in a writable directory", path, dir,
                               strerror(errno));
            return 0;
        }
        if (!strcmp(dir, ".") || !strcmp(dir, "/")) return set_err(err, "%.600s: %s: %s", path, dir, strerror(errno));
        char *s2 = strrchr(dir, '/');
        if (!s2) { snprintf(dir, sizeof dir, "."); continue; }
        if (s2 == dir) { dir[1] = 0; continue; }
        *s2 = 0;
    }
}

/* The analysis file of a checkpoint directory that no longer exists (removed while the analysis
 * ran): rescue, "CKPTNAME.FILE" in the current directory (step_N.analysis.h5, step_N.score.h5),
 * said on stderr; path itself
 * otherwise. Creating the directory again would leave a stub checkpoint that holds nothing else. */
static const char *rescue_path(const char *path, const char *checkpoint, char *rescue, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash || !checkpoint || !*checkpoint) return path;
    size_t dlen = (size_t)(slash - path), clen = strlen(checkpoint);
    while (clen > 1 && checkpoint[clen - 1] == '/') clen--;
    while (dlen > 1 && path[dlen - 1] == '/') dlen--;   /* "CKPT/" + "/analysis.h5" */
    if (dlen != clen || strncmp(path, checkpoint, clen) != 0) return path;   /* --out elsewhere */
    char dir[PATH_BYTES];
    snprintf(dir, sizeof dir, "%.*s", (int)dlen, path);
    if (fs_exists(dir)) return path;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    snprintf(rescue, len, "%.*s.%s", (int)(len > 300 ? len - 300 : 1), base, slash + 1);   /* step_N.analysis.h5, step_N.score.h5 */
    fprintf(stderr, "phaselab: warning: the checkpoint %s no longer exists (removed while the analysis ran); the result "
            "goes to %s in the current directory instead\n", dir, rescue);
    return rescue;
}

AnalysisH5 *ah5_begin(const char *path, const char *kind, const char *checkpoint, long step, const char *overrides,
                      char *err) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char rescue[PATH_BYTES];
    path = rescue_path(path, checkpoint, rescue, sizeof rescue);
    AnalysisH5 *a = calloc(1, sizeof *a);
    if (!a) { set_err(err, "%s: out of memory: %zu bytes for the analysis writer", path, sizeof *a); return NULL; }
    a->fapl = a->file = a->group = -1;
    a->lock_fd = a->main_fd = -1;
    size_t len = strlen(path);
    if (len == 0 || len >= PATH_BYTES - 64 || path[len - 1] == '/') {
        set_err(err, "'%.200s': not a usable analysis file name (expected a file path shorter than %d bytes)", path, PATH_BYTES - 64);
        free(a);
        return NULL;
    }
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->store, sizeof a->store, "%s", path);
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(a->dir, sizeof a->dir, ".");
    else if (slash == path) snprintf(a->dir, sizeof a->dir, "/");
    else snprintf(a->dir, sizeof a->dir, "%.*s", (int)(slash - path), path);
    snprintf(a->stem, sizeof a->stem, "%s", path);
    if (len > 3 && !strcmp(a->stem + len - 3, ".h5")) a->stem[len - 3] = 0;
    snprintf(a->group_name, sizeof a->group_name, "%s", kind);
    if (!fs_exists(a->dir) && fs_mkdirs(a->dir, err)) goto fail;      /* --out in a directory still to make */

    /* the lock, then the file; both busy conditions are retried until the deadline */
    int wait = wait_seconds(), announced = 0;
    double t0 = clock_seconds();
    for (;;) {
        char why[ERR_LEN] = "";
        int rc = a->lock_fd < 0 ? take_lock(a, why, err) : 0;
        if (rc == 0) rc = read_main(a, why, err);
        if (rc < 0) goto fail;
        if (rc == 0) break;
        if (clock_seconds() - t0 >= wait) {
            snprintf(a->why_sidecar, sizeof a->why_sidecar, "it stayed busy for %d s: %s", wait, why);
            release_locks(a);
            break;
        }
        if (!announced) {
            fprintf(stderr, "phaselab: warning: %s is busy (%s): waiting up to %d s for it (PHASELAB_ANALYSIS_WAIT)\n",
                    path, why, wait);
            fflush(stderr);
            announced = 1;
        }
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (a->lock_fd >= 0) clean_stale_sidecar_tmps(a);
    unsigned char *patched = NULL;
    int unclean = 0;
    if (!a->why_sidecar[0] && a->orig) {
        unclean = image_unclean(a->orig, a->orig_bytes, &patched, a->why_sidecar);
        if (unclean == -2) { set_err(err, "%s: out of memory: %zu bytes for the analysis file's image", path, a->orig_bytes); goto fail; }
        if (unclean < 0) release_locks(a);
    }
    if (!a->why_sidecar[0] && a->orig) {
        a->fapl = memory_fapl(patched ? patched : a->orig, a->orig_bytes);   /* (HDF5 copies the image) */
        free(patched);
        if (a->fapl < 0) { set_err(err, "%s: cannot set up HDF5's in-memory driver", path); goto fail; }
        a->file = H5Fopen(IMAGE_NAME, H5F_ACC_RDWR, a->fapl);
        if (a->file < 0) {
            char msg[256];
            h5_message(msg);
            snprintf(a->why_sidecar, sizeof a->why_sidecar, "it cannot be read as HDF5 by this build (HDF5 %d.%d.%d: %s); "
                     "it is left as it is", H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE, msg);
            release_h5(a);
            release_locks(a);
        } else {
            char what[256] = "";   /* first: a repair below would drop a foreign file's groups (no `signal`) */
            if (H5Literate(a->file, H5_INDEX_NAME, H5_ITER_INC, NULL, first_foreign, what) > 0) {   /* (ah5_check_target's rule) */
                snprintf(a->why_sidecar, sizeof a->why_sidecar, "it holds /%.200s, which is not an analysis group "
                         "(not a file of analysis results); it is left as it is", what);
                release_h5(a);
                release_locks(a);
            } else if (unclean == 1 && drop_incomplete_groups(a)) {
                set_err(err, "%s: cannot repair the unclean file in memory", path);
                goto fail;
            }
        }
    }
    if (a->why_sidecar[0]) {
        char abs[PATH_BYTES];
        absolute_path(path, abs, sizeof abs);
        sidecar_name(a);
        if (create_memory_file(a, abs)) { set_err(err, "%s: cannot create the in-memory analysis file", a->store); goto fail; }
    } else if (a->file < 0 && create_memory_file(a, NULL)) {
        set_err(err, "%s: cannot create the in-memory analysis file", path);
        goto fail;
    }

    Scan s = {kind, -1};
    H5Literate(a->file, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, scan_group, &s);
    if (s.highest >= 999999999L) { set_err(err, "%s: no group number left for %s", path, kind); goto fail; }
    snprintf(a->group_name, sizeof a->group_name, "%s_%03ld", kind, s.highest + 1);
    a->group = H5Gcreate2(a->file, a->group_name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (a->group < 0) { set_err(err, "%s: cannot create group /%s", path, a->group_name); goto fail; }
    char when[64], ckpt_abs[PATH_BYTES];
    utc_stamp(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ");
    absolute_path(checkpoint, ckpt_abs, sizeof ckpt_abs);
    if (set_str_attr(a->group, "NX_class", "NXdata") || set_str_attr(a->group, "kind", kind) ||
        set_str_attr(a->group, "checkpoint", checkpoint) || set_str_attr(a->group, "checkpoint_path", ckpt_abs) ||
        set_str_attr(a->group, "created", when) || set_str_attr(a->group, "phaselab_version", PHASELAB_VERSION) ||
        set_str_attr(a->group, "overrides", overrides ? overrides : "") || ah5_attr_long(a, "step", step))
        fail(a, "group attributes");
    return a;
fail:
    release_h5(a);
    release_locks(a);
    free(a->orig);
    free(a);
    return NULL;
}

const char *ah5_group_name(const AnalysisH5 *a) { return a->group_name; }

int ah5_attr_str(AnalysisH5 *a, const char *name, const char *value) {
    if (set_str_attr(a->group, name, value)) { fail(a, name); return -1; }
    return 0;
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

int ah5_input_file(AnalysisH5 *a, const char *role, const char *path) {
    char name[128], abs[PATH_BYTES], hex[65], e[ERR_LEN], digest[ERR_LEN + 16];
    absolute_path(path, abs, sizeof abs);
    if (sha256_file_hex(path, hex, e) == 0) snprintf(digest, sizeof digest, "%s", hex);
    else snprintf(digest, sizeof digest, "unavailable: %s", e);
    snprintf(name, sizeof name, "%s_path", role);
    int rc = ah5_attr_str(a, name, abs);
    snprintf(name, sizeof name, "%s_sha256", role);
    return rc | ah5_attr_str(a, name, digest);
}

static int describe(hid_t ds, const char *long_name, const char *units) {
    int rc = 0;
    if (long_name) rc |= set_str_attr(ds, "long_name", long_name);
    if (units) rc |= set_str_attr(ds, "units", units);
    return rc;
}

static int write_axis(AnalysisH5 *a, const char *name, hid_t mem, hid_t file_t, const void *values, int n,
                      const char *long_name, const char *units) {
    hsize_t dim = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t ds = sp < 0 ? -1 : H5Dcreate2(a->group, name, file_t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds < 0 || H5Dwrite(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
             H5DSset_scale(ds, name) < 0 || describe(ds, long_name, units);
    if (ds >= 0 && H5Dclose(ds) < 0) rc = 1;
    if (sp >= 0) H5Sclose(sp);
    if (rc) { fail(a, name); return -1; }
    return 0;
}

int ah5_axis_long(AnalysisH5 *a, const char *name, const long *values, int n, const char *long_name) {
    long long *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) { fail(a, name); return -1; }
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
    if (rank < 1 || rank > AH5_MAX_RANK) { fail(a, name); return -1; }
    hsize_t d[AH5_MAX_RANK];
    for (int i = 0; i < rank; i++) d[i] = (hsize_t)dims[i];
    hid_t sp = H5Screate_simple(rank, d, NULL);
    hid_t ds = sp < 0 ? -1 : H5Dcreate2(a->group, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = ds < 0 || H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
             describe(ds, long_name, units);
    for (int i = 0; !rc && axes && i < rank; i++) {
        if (!axes[i]) continue;
        rc |= H5DSset_label(ds, (unsigned)i, axes[i]) < 0;
        if (H5Lexists(a->group, axes[i], H5P_DEFAULT) > 0) {
            hid_t sc = H5Dopen2(a->group, axes[i], H5P_DEFAULT);
            rc |= sc < 0 || H5DSattach_scale(ds, sc, (unsigned)i) < 0;
            if (sc >= 0) H5Dclose(sc);
        }
    }
    if (ds >= 0 && H5Dclose(ds) < 0) rc = 1;
    if (sp >= 0) H5Sclose(sp);
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

/* The unclean original kept under a->backup before the repaired file replaces it (a hard
 * link, or a copy of the bytes read). */
static int keep_backup(AnalysisH5 *a, char *err) {
    if (link(a->path, a->backup) == 0 && fs_fsync_parent(a->backup, err) == 0) return 0;
    return fs_write_atomic(a->backup, a->orig, a->orig_bytes, err);
}

/* Writes image to a->store (tmp, fsync, rename, fsync the directory) and prints where. */
static int publish(AnalysisH5 *a, const void *image, size_t n, char *err) {
    char e[ERR_LEN];
    if (a->backup[0] && keep_backup(a, e))
        return set_err(err, "%s: cannot keep the unclean analysis file before repairing it: %s; the result was not "
                       "stored (%s is unchanged)", a->backup, e, a->path);
    AtomicFile f;
    struct stat mine, now;
    if (fs_atomic_open(&f, a->store, e))
        return set_err(err, "%s; the result was not stored (%s is unchanged)", e, a->path);
    if (fstat(f.fd, &mine) != 0) mine.st_ino = 0;
    if (fs_atomic_write(&f, image, n, e) || fs_atomic_commit(&f, e)) {
        if (mine.st_ino && stat(a->store, &now) == 0 && now.st_ino == mine.st_ino && now.st_dev == mine.st_dev)
            return set_err(err, "%s; /%s is stored in %s, but may not survive a system crash", e, a->group_name, a->store);
        return set_err(err, "%s; the result was not stored (%s is unchanged)", e, a->path);
    }
    if (a->dropped[0])
        fprintf(stderr, "phaselab: warning: %s had been left unclean by a stopped writer: incomplete group%s %s left "
                "out; the old file is kept as %s\n", a->path, strchr(a->dropped, ',') ? "s" : "", a->dropped, a->backup);
    if (a->why_sidecar[0])
        printf("stored /%s in %s, not in %s: %s (tools/report reads both)\n", a->group_name, a->store, a->path, a->why_sidecar);
    else printf("stored /%s in %s\n", a->group_name, a->store);
    fflush(stdout);
    return 0;
}

int ah5_subgroup(AnalysisH5 *a, const char *name, Ah5GroupWriter write, const void *ctx) {
    if (!a || a->failed) return -1;
    hid_t g = H5Gcreate2(a->group, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) { fail(a, name); return -1; }
    char werr[ERR_LEN] = "";
    int rc = write((long long)g, ctx, werr);
    if (H5Gclose(g) < 0 && !rc) rc = -1, snprintf(werr, sizeof werr, "(close)");
    if (rc) {
        char what[ERR_LEN + 64];
        snprintf(what, sizeof what, "%s: %s", name, werr);
        fail(a, what);
    }
    return rc;
}

int ah5_end(AnalysisH5 *a, char *err) {
    if (!a) return 0;
    unsigned char *image = NULL;
    ssize_t n = -1;
    if (!a->failed && set_str_attr(a->file, "default", a->group_name)) fail(a, "the root attribute default");
    if (a->group >= 0 && H5Gclose(a->group) < 0) fail(a, "(group close)");
    a->group = -1;
    if (!a->failed) {
        if (H5Fflush(a->file, H5F_SCOPE_GLOBAL) < 0) fail(a, "(flush of the in-memory image)");
        else if ((n = H5Fget_file_image(a->file, NULL, 0)) <= 0) fail(a, "(size of the in-memory image)");
        else if (!(image = malloc((size_t)n))) fail(a, "(out of memory for the file image)");
        else if (H5Fget_file_image(a->file, image, (size_t)n) != n) fail(a, "(the in-memory image)");
    }
    release_h5(a);
    int rc = a->failed ? set_err(err, "%s; the result was not stored (%s is unchanged)", a->err, a->path)
                       : publish(a, image, (size_t)n, err);
    free(image);
    release_locks(a);
    free(a->orig);
    free(a);
    return rc;
}
