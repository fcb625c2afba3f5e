/* analysis.h5: where the causal analyses of a checkpoint are stored (default CKPT/analysis.h5).
 * Same conventions as metrics.h5 (trainer/metrics.h): NeXus attributes, labelled dimensions,
 * long_name / units on datasets. Every analysis run appends one new group and never touches an
 * older one:
 *   /                      NX_class=NXroot, creator=phaselab, default=<the newest group>
 *   /<kind>_<NNN>          NX_class=NXdata, signal, axes, <axis>_indices, kind, checkpoint,
 *                          step (the checkpoint's step), created (UTC), plus the analysis
 *                          parameters as attributes; NNN = one more than the highest NNN of
 *                          that kind already in the file (000 first)
 *     axis datasets        (int64 or float64, 1-D) marked as HDF5 dimension scales and attached
 *                          to the matching dimension of every signal dataset that names them
 *     data datasets        float64, each dimension labelled
 * Kinds: probe (a probe evaluation: lookup or needle), gate_cycle, knockout, filler_sweep. */
#ifndef PHASELAB_ANALYSIS_H5_H
#define PHASELAB_ANALYSIS_H5_H
#include <stdint.h>

#define AH5_MAX_RANK 4

typedef struct AnalysisH5 AnalysisH5;

/* Opens path (created when missing, its directory must exist) and creates the group for one
 * analysis of this kind. Returns NULL and fills err on failure. */
AnalysisH5 *ah5_begin(const char *path, const char *kind, const char *checkpoint, long step, char *err);
const char *ah5_group_name(const AnalysisH5 *a);

/* Group attributes (the analysis parameters). */
int ah5_attr_str(AnalysisH5 *a, const char *name, const char *value);
int ah5_attr_long(AnalysisH5 *a, const char *name, long value);
int ah5_attr_double(AnalysisH5 *a, const char *name, double value);

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

/* Closes the group and file, setting the root's default to this group. Returns 0, or -1 with
 * err (the first error of any call above is kept and reported here). NULL is a no-op. */
int ah5_end(AnalysisH5 *a, char *err);
#endif
