/* The CPU backend: host memory, fp32 everywhere (act_t == float, working weights are the master
 * weights), OpenMP threads for loops and OpenBLAS for matmuls. Peak FLOP/s for MFU is estimated
 * as cores x 2.5 GHz x 32 fp32 FLOP/cycle (AVX2, two FMA units). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/cpu/cpu_internal.h"

#ifdef PHASELAB_OPENBLAS /* tools/configure: the BLAS is OpenBLAS, which keeps its own thread count */
void openblas_set_num_threads(int);
#endif

static void *cpu_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    memset(p, 0, bytes);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { if (dst != src) memmove(dst, src, bytes); }
static void cpu_zero(void *dst, size_t bytes) { memset(dst, 0, bytes); }
static void cpu_synchronize(void) {}
static void cpu_upload_act(act_t *dst, const float *src, size_t n) { cpu_copy(dst, src, n * sizeof(float)); }
static void cpu_download_act(float *dst, const act_t *src, size_t n) { cpu_copy(dst, src, n * sizeof(float)); }
static void cpu_cast_params(act_t *dst, const float *src, size_t n) { cpu_copy(dst, src, n * sizeof(float)); }

static Backend cpu_backend = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_copy, .download = cpu_copy, .zero = cpu_zero, .copy = cpu_copy,
    .synchronize = cpu_synchronize, .upload_act = cpu_upload_act, .download_act = cpu_download_act,
    .cast_params = cpu_cast_params,
    .add = cpu_add, .swiglu_fwd = cpu_swiglu_fwd, .swiglu_bwd = cpu_swiglu_bwd,
    .embedding_fwd = cpu_embedding_fwd, .embedding_bwd = cpu_embedding_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd, .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .matmul_fwd = cpu_matmul_fwd, .matmul_bwd = cpu_matmul_bwd,
    .rope = cpu_rope,
    .attention_fwd = cpu_attention_fwd, .attention_bwd = cpu_attention_bwd,
    .attention_decode = cpu_attention_decode,
    .compressor_fwd = cpu_compressor_fwd, .compressor_bwd = cpu_compressor_bwd,
    .gate_coverage = cpu_gate_coverage, .staggered_grid = 1,
    .classifier = cpu_classifier, .logits_argmax = cpu_logits_argmax,
    .adamw = cpu_adamw, .sumsq = cpu_sumsq, .scale = cpu_scale,
};

const Backend *backend_cpu(int threads) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
#ifdef PHASELAB_OPENBLAS
    openblas_set_num_threads(threads);
#endif
    cpu_backend.peak_flops = threads * 2.5e9 * 32.0;
    return &cpu_backend;
}
