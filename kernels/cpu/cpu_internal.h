/* Internal declarations shared by the CPU backend's files (kernels/cpu/). Every op works on
 * fp32 host memory (act_t == float); loops are parallelised with OpenMP (ctx->threads threads)
 * over independent outputs, so results do not depend on scheduling; matmuls go to OpenBLAS sgemm. */
#ifndef PHASELAB_CPU_INTERNAL_H
#define PHASELAB_CPU_INTERNAL_H
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_backend.h"

/* Loops over fewer elements than this run on the calling thread: a parallel region costs more
 * than the work (incremental decoding runs one row at a time; on a loaded machine an OpenMP
 * barrier waiting for a descheduled thread costs a whole time slice). Each element is computed
 * the same way either way, so results do not change. */
#define CPU_SERIAL_WORK 32768

/* The context of one CPU backend: every parallel loop runs on ctx->threads OpenMP threads
 * (num_threads clause), and OpenBLAS is set to the same count before each sgemm. ctx->threads
 * is at most what the BLAS runs (cpu_blas_max_threads), so the two always agree. A per-thread
 * buffer of a parallel region is sized by the threads of that region (omp_get_num_threads()
 * inside it, or ctx->threads, which bounds the team of num_threads(ctx->threads)), never by
 * omp_get_max_threads(), which is the BLAS's setting (OpenBLAS sets it to its own capped count). */
struct BackendCtx {
    int threads;
    float *cls_keep;        /* the classifier's kept exps (cpu_classifier.c), grown on demand, never shrunk */
    size_t cls_keep_bytes;
};

/* the ops of kernels/ops.def: cpu_NAME */
#define OP(ret, op, params, args) ret cpu_##op params;
#include "kernels/ops.def"
#undef OP

/* fp32 views of activations (act_t is float on this backend) */
static inline float *F(act_t *p) { return (float *)p; }
static inline const float *CF(const act_t *p) { return (const float *)p; }
/* Scratch memory of an op (kernels/cpu/cpu_backend.c): malloc, or calloc for cpu_scratch_zeroed.
 * The ops return nothing, so running out of memory there ends the process as the CUDA backend's
 * cu_fail does: one line "phaselab: out of memory: N bytes for WHAT (CPU backend)" on stderr
 * and the run log, exit status 1 (the checkpoints on disk are complete files). */
void *cpu_scratch(size_t bytes, const char *what);
void *cpu_scratch_zeroed(size_t bytes, const char *what);
/* the BLAS on the context's thread count (kernels/cpu/cpu_blas.c) */
void cpu_blas_threads(const BackendCtx *ctx);
#endif
