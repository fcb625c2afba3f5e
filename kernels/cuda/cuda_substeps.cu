/* Sub-step timing inside the CUDA backend's largest ops (kernels/cuda/cuda_backend.h), for a
 * device run's profile: the per-op table (kernels/backend_profile.c) says how long an op took,
 * this says which of its parts took it (the compressor's projection GEMMs vs its pooling
 * kernels, the attention backward's dq vs dK/dV kernels, the classifier's GEMMs vs its
 * cross-entropy pass).
 *
 * An op brackets its parts:
 *   cu_substep_begin(ctx);            ... part A ...   cu_substep(ctx, "op.part_a");
 *                                     ... part B ...   cu_substep(ctx, "op.part_b");
 * With timing off (the default) both are one branch. With timing on, each call synchronizes the
 * stream and charges the host time since the previous mark to the named part, so a part's time
 * includes its launches (what a step pays) and the table's parts of one op add up to that op's
 * synchronized time. Names are string literals "op.part" (no spaces: tests/gpu/check.sh reads
 * the table by columns); at most SUBSTEP_MAX distinct names, later ones counted as "(other)". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_common.h"
extern "C" {
#include "common/clock.h"
#include "kernels/cuda/cuda_backend.h"
}

#define SUBSTEP_MAX 48

struct SubstepTable {
    int on;
    double mark;                       /* host time of the last mark (seconds) */
    int n;
    const char *name[SUBSTEP_MAX + 1]; /* the last slot: "(other)" */
    long calls[SUBSTEP_MAX + 1];
    double seconds[SUBSTEP_MAX + 1];
};

static SubstepTable *table_of(BackendCtx *ctx) {
    if (!ctx->substeps) ctx->substeps = (SubstepTable *)calloc(1, sizeof(SubstepTable));
    return ctx->substeps;
}

void cu_substep_begin(BackendCtx *ctx) {
    SubstepTable *t = ctx->substeps;
    if (!t || !t->on) return;
    CU(cudaStreamSynchronize(ctx->stream));
    t->mark = clock_seconds();
}

void cu_substep(BackendCtx *ctx, const char *name) {
    SubstepTable *t = ctx->substeps;
    if (!t || !t->on) return;
    CU(cudaStreamSynchronize(ctx->stream));
    const double now = clock_seconds();
    int k = 0;
    while (k < t->n && strcmp(t->name[k], name) != 0) k++;
    if (k == t->n) {
        if (t->n < SUBSTEP_MAX) t->name[t->n++] = name;
        else { k = SUBSTEP_MAX; t->name[k] = "(other)"; }
    }
    t->calls[k]++;
    t->seconds[k] += now - t->mark;
    t->mark = now;
}

extern "C" void cuda_backend_substeps(const Backend *be, int on) {
    SubstepTable *t = table_of(be->ctx);
    if (t) t->on = on;
}

extern "C" void cuda_backend_substeps_reset(const Backend *be) {
    SubstepTable *t = be->ctx->substeps;
    if (!t) return;
    const int on = t->on;
    memset(t, 0, sizeof *t);
    t->on = on;
}

extern "C" int cuda_backend_substep(const Backend *be, const char *name, long *calls, double *seconds) {
    const SubstepTable *t = be->ctx->substeps;
    *calls = 0;
    *seconds = 0;
    if (!t) return 0;
    for (int k = 0; k < t->n; k++)
        if (!strcmp(t->name[k], name)) { *calls = t->calls[k]; *seconds = t->seconds[k]; return 1; }
    return 0;
}

extern "C" void cuda_backend_substeps_report(FILE *f, const Backend *be, double step_seconds) {
    SubstepTable *t = be->ctx->substeps;
    int order[SUBSTEP_MAX + 1], n = 0;
    if (t)
        for (int k = 0; k <= SUBSTEP_MAX; k++)
            if (t->calls[k]) order[n++] = k;
    fprintf(f, "sub-steps, cuda backend (parts of the ops above, each synchronized; %d parts):\n", n);
    if (!n) return;
    for (int i = 1; i < n; i++)                    /* most time first (insertion sort, n <= 49) */
        for (int j = i; j > 0 && t->seconds[order[j]] > t->seconds[order[j - 1]]; j--) {
            const int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    fprintf(f, "  %-34s %8s %10s %10s %7s\n", "part", "calls", "ms total", "ms/call", "% step");
    for (int i = 0; i < n; i++) {
        const int k = order[i];
        fprintf(f, "  %-34s %8ld %10.3f %10.4f %7.1f\n", t->name[k], t->calls[k], 1e3 * t->seconds[k],
                1e3 * t->seconds[k] / t->calls[k], step_seconds > 0 ? 100 * t->seconds[k] / step_seconds : 0.0);
    }
}
