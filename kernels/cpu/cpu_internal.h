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
 * (num_threads clause), and OpenBLAS is set to the same count before each sgemm. */
struct BackendCtx {
    int threads;
};

/* the ops of kernels/ops.def: cpu_NAME */
#define OP(ret, op, params) ret cpu_##op params;
#include "kernels/ops.def"
#undef OP

/* fp32 views of activations (act_t is float on this backend) */
static inline float *F(act_t *p) { return (float *)p; }
static inline const float *CF(const act_t *p) { return (const float *)p; }
/* the BLAS on the context's thread count (kernels/cpu/cpu_blas.c) */
void cpu_blas_threads(const BackendCtx *ctx);
#endif
