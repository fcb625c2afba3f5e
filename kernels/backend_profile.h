/* The timing wrapper: a Backend whose every op (kernels/ops.def, generated from the one op list)
 * forwards to an inner backend and records, per op, the calls, the seconds and the work done:
 * FLOPs for the compute ops and the bytes a memory-bound op must move at the least (each tensor
 * it reads or writes once), so a report gives achieved GFLOP/s or GB/s per op, and for the
 * matmuls per GEMM shape (M, N, K and which product). The formulas are in backend_profile.c.
 *
 * Timing. While recording, each op runs as inner->synchronize, start the clock, the op,
 * inner->synchronize, stop the clock: an asynchronous backend's (CUDA's) device time is
 * attributed to the op that queued it, and nothing queued before it is. The CPU synchronize is a
 * no-op, so there the figure is the op's own wall time. The synchronizations remove the overlap
 * of host and device work, so a profiled step is slower than an unprofiled one: time steps
 * without recording (backend_profile_enable(p, 0)) and profile extra steps (cli/bench.c).
 * Not recording, an op is a plain forward (one more indirect call, no clock, no synchronize).
 * The device collectives (Backend.collectives) are forwarded, never timed.
 *
 * The profiled backend has every field of the inner one but the context, the ops and the
 * collectives (name, act_bytes, peak, device, shape limits), so callers that test them behave
 * the same; an op the inner backend lacks (NULL) is NULL here too. Results are
 * the inner backend's bit for bit (tests/test_backend_profile.c). One thread at a time. */
#ifndef PHASELAB_BACKEND_PROFILE_H
#define PHASELAB_BACKEND_PROFILE_H
#include <stdio.h>
#include "kernels/kernels.h"

/* A profiled backend around inner, recording from the start; NULL when out of memory or when
 * inner has no synchronize op (the counting backend). It holds the pointer to inner (which must
 * outlive it); backend_profile_free releases it. */
const Backend *backend_profiled(const Backend *inner);
void backend_profile_free(const Backend *profiled);
/* 1 when b was made by backend_profiled */
int backend_is_profiled(const Backend *b);
/* Recording on (1) or off (0): off, ops forward only and nothing is counted. */
void backend_profile_enable(const Backend *profiled, int on);
/* Forget every count (the op table and the GEMM shapes). */
void backend_profile_reset(const Backend *profiled);

/* What was recorded for one op. */
typedef struct {
    long calls;
    double seconds;   /* summed over the calls, each synchronized (above) */
    double flops;     /* summed FLOPs (0 for an op without a FLOP count) */
    double bytes;     /* summed bytes moved at the least (0 where not counted) */
} OpProfile;
/* 0 and *out filled for the op named `op` (a name of kernels/ops.def), -1 for an unknown name. */
int backend_profile_op(const Backend *profiled, const char *op, OpProfile *out);

/* One GEMM shape of the matmul ops: product "fwd" (matmul_fwd: out [M,N] = in [M,K] w [N,K]^T),
 * "bwd dw" (matmul_bwd without din: dw [N,K] += dout^T in) or "bwd din+dw" (both products). */
typedef struct {
    const char *product;
    int M, N, K;
    long calls;
    double seconds, flops, bytes;
} GemmProfile;
/* Up to max shapes, the most time first; returns how many there are (at most max). */
int backend_profile_gemms(const Backend *profiled, GemmProfile *out, int max);

/* The table: one row per op called (most time first): op, calls, ms total, ms/call, % of
 * step_seconds (the wall time of the period recorded, e.g. the profiled steps together), achieved
 * GFLOP/s and GB/s (where counted), then the time in no op (host work between ops), and the top
 * GEMM shapes by time. */
void backend_profile_report(FILE *f, const Backend *profiled, double step_seconds);
#endif
