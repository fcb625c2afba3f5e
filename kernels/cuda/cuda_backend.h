/* The CUDA backend's public extras (kernels/cuda/), callable from C: its memory accounting and
 * sub-step timing, beyond the op API of kernels/kernels.h (the backend itself is backend_cuda there). Used by the
 * GPU benchmark (tests/gpu/bench_cuda.c). Implemented in kernels/cuda/cuda_backend.cu and
 * kernels/cuda/cuda_substeps.cu. */
#ifndef PHASELAB_CUDA_BACKEND_H
#define PHASELAB_CUDA_BACKEND_H
#include <stddef.h>
#include <stdio.h>
#include "kernels/kernels.h"

/* Device bytes allocated through this CUDA backend (buffers + scratch): now and peak;
 * reset_peak sets the peak to the current count. */
size_t cuda_backend_current_bytes(const Backend *be);
size_t cuda_backend_peak_bytes(const Backend *be);
void cuda_backend_reset_peak(const Backend *be);

/* Sub-step timing inside the largest ops (kernels/cuda/cuda_substeps.cu): on = 1 makes the
 * compressor, attention and classifier ops synchronize after each of their parts and add its
 * time to a per-part table; reset clears the table; report prints it ("sub-steps, ..." then one
 * row per part, most time first, % of step_seconds). For a profiled step only: it slows a step. */
void cuda_backend_substeps(const Backend *be, int on);
void cuda_backend_substeps_reset(const Backend *be);
void cuda_backend_substeps_report(FILE *f, const Backend *be, double step_seconds);
/* one part's calls and seconds so far; 0 (and zeros) when the table has no such part */
int cuda_backend_substep(const Backend *be, const char *name, long *calls, double *seconds);
#endif
