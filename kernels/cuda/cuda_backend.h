/* The CUDA backend's public extras (kernels/cuda/), callable from C: its memory accounting,
 * beyond the op API of kernels/kernels.h (the backend itself is backend_cuda there). Used by the
 * GPU benchmark (tests/gpu/bench_cuda.c). Implemented in kernels/cuda/cuda_backend.cu. */
#ifndef PHASELAB_CUDA_BACKEND_H
#define PHASELAB_CUDA_BACKEND_H
#include <stddef.h>
#include "kernels/kernels.h"

/* Device bytes allocated through this CUDA backend (buffers + scratch): now and peak;
 * reset_peak sets the peak to the current count. */
size_t cuda_backend_current_bytes(const Backend *be);
size_t cuda_backend_peak_bytes(const Backend *be);
void cuda_backend_reset_peak(const Backend *be);
#endif
