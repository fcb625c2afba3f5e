/* analysis.h5: where the causal analyses of a checkpoint are stored (default CKPT/analysis.h5).
 * Same conventions as metrics.h5 (trainer/metrics.h): NeXus attributes, labelled dimensions,
 * long_name / units on datasets. Every analysis run adds one new group and never touches an
 * older one:
 *   /                      NX_class=NXroot, creator=phaselab, default=<the newest group>
 *   /<kind>_<NNN>          NX_class=NXdata, signal, axes, <axis>_indices, kind, plus the
 *                          provenance below and the analysis parameters as attributes;
 *                          NNN = one more than the highest NNN of that kind in the file (000
 *                          first), counted over complete groups only
 *     axis datasets        (int64 or float64, 1-D) marked as HDF5 dimension scales and attached
 *                          to the matching dimension of every signal dataset that names them
 *     data datasets        float64, each dimension labelled
 * Kinds: probe (a probe evaluation: lookup or needle), val (the validation loss of ./train --eval with
 * its standard errors, docs/spec.md §4.8), gate_cycle, knockout, filler_sweep.
 *
 * Provenance of every group, written by ah5_begin: phaselab_version (git describe of the code
 * that wrote it, PHASELAB_VERSION), created (UTC, ISO 8601), checkpoint (as given),
 * checkpoint_path (absolute), step (the checkpoint's step), overrides (the command line's
 * section.key=value overrides the checkpoint's config was read with, space-separated; "" when
 * none: an analysis of a changed model, e.g. model.stride=2, says so in its own group, and
 * tools/report never pools it with the unchanged one). The callers add, through
 * ah5_input_file, <role>_path (absolute) and <role>_sha256 of every input file (probe,
 * calibration, sweep_file), and as attributes the builder seeds and prompts per residue of
 * the probe and calibration sets (probe_seed, probe_per_residue, calibration_seed,
 * calibration_per_residue; 0 = not recorded by the tools/make-probe that built the file) and
 * decode (1: scored through the incremental KV cache, ./train --eval --decode).
 *
 * Crash safety: a result is never written into analysis.h5 in place. ah5_begin takes the
 * writer lock (flock on DIR/.NAME.lock, next to the file), reads the whole current file into
 * memory (holding a shared flock on it, the lock HDF5 and h5py take: a program that has it
 * open for writing makes it busy; readers do not) and opens that image with HDF5's in-memory
 * driver; the new group is built there. ah5_end takes the finished image and publishes it
 * with the crash-safe writer of common/fsutil.h: NAME.h5.tmp, fsync, rename over NAME.h5,
 * fsync the directory. A kill or a full disk at any write therefore leaves either the old file
 * or the new one, each complete, and HDF5 never writes to disk (no HDF5 exit handler can trip
 * over a failed write). A file left unclean by an older writer (bytes past its end of
 * allocation, where a dangling group may live) is repaired in the copy: the end of allocation
 * moves to the end of the file, so nothing new is allocated over old bytes, and a group that
 * is incomplete there (no `signal`, or a member that cannot be read) is left out of the new
 * file, which then keeps the old one as NAME.damaged-YYYYmmddTHHMMSSZ-PID.h5 (announced).
 *
 * Busy: when the lock is held by another analysis, or NAME.h5 is open for writing elsewhere,
 * the writer says so on stderr and retries for up to PHASELAB_ANALYSIS_WAIT seconds (default
 * 30, 0..86400). When it stays busy, or NAME.h5 cannot be read as HDF5 by this build, the
 * result goes to a sidecar file next to it, NAME.pending-YYYYmmddTHHMMSSZ-PID.h5 (written the
 * same crash-safe way, the same layout, its one group numbered 000, root attribute
 * pending_for = the absolute path of NAME.h5); NAME.h5 is left as it is. tools/report reads
 * the sidecars as well. On success ah5_end prints one line on stdout saying where the group
 * was stored ("stored /knockout_002 in CKPT/analysis.h5"). */
#ifndef PHASELAB_ANALYSIS_H5_H
#define PHASELAB_ANALYSIS_H5_H
#include <stdint.h>

#define AH5_MAX_RANK 4

typedef struct AnalysisH5 AnalysisH5;

/* Whether path can take an analysis file, before any work: not a directory or a special file,
 * not an HDF5 file holding anything but analysis groups (a run's metrics.h5), its nearest
 * existing ancestor a writable directory (ah5_begin creates the missing ones). named = 1 when
 * the user named the file (--out): an existing non-empty file that is not HDF5 is then refused
 * too (the default CKPT/analysis.h5 in that state keeps the sidecar rule: a damaged analysis
 * file must not stop the next result). Returns 0, or -1 with err naming path. */
int ah5_check_target(const char *path, int named, char *err);

/* Takes the file (waiting while it is busy, see above) and starts the group for one analysis
 * of this kind. Returns NULL and fills err on failure (out of memory, the lock file cannot be
 * created next to path); nothing is written then. */
AnalysisH5 *ah5_begin(const char *path, const char *kind, const char *checkpoint, long step, const char *overrides,
                      char *err);
const char *ah5_group_name(const AnalysisH5 *a);

/* Group attributes (the analysis parameters). */
int ah5_attr_str(AnalysisH5 *a, const char *name, const char *value);
int ah5_attr_long(AnalysisH5 *a, const char *name, long value);
int ah5_attr_double(AnalysisH5 *a, const char *name, double value);
/* An input file of the analysis: <role>_path (absolute) and <role>_sha256 (of its bytes now;
 * "unavailable: WHY" when it cannot be read). */
int ah5_input_file(AnalysisH5 *a, const char *role, const char *path);

/* A 1-D axis dataset (int64), made a dimension scale. */
int ah5_axis_long(AnalysisH5 *a, const char *name, const long *values, int n, const char *long_name);
int ah5_axis_double(AnalysisH5 *a, const char *name, const double *values, int n, const char *long_name,
                    const char *units);
/* A float64 dataset of the given rank; axes[i] names the axis dataset of dim i (attached as its
 * scale and used as the dim label). */
int ah5_data(AnalysisH5 *a, const char *name, const double *values, int rank, const int *dims,
             const char *const *axes, const char *long_name, const char *units);
/* NXdata signal and axes (the axes of the signal dataset, in order). */
int ah5_signal(AnalysisH5 *a, const char *signal, const char *const *axes, int n_axes);

/* A subgroup NAME of this group written by a module's own HDF5 writer: write(group, ctx, err) gets
 * the new, open subgroup and returns 0, or -1 with err (ERR_LEN bytes), which fails the result
 * like any call above. */
typedef int (*Ah5GroupWriter)(long long group, const void *ctx, char *err);
int ah5_subgroup(AnalysisH5 *a, const char *name, Ah5GroupWriter write, const void *ctx);

/* Sets the root's default to this group, publishes the file (see above), releases the locks
 * and prints the "stored" line. Returns 0, or -1 with err: the first error of any call above,
 * or the write that failed, and whether the result was stored. NULL is a no-op. */
int ah5_end(AnalysisH5 *a, char *err);
#endif
