/* The CPU backend: host memory, fp32 everywhere (act_t == float, working weights are the master
 * weights), OpenMP threads for loops and a CBLAS for matmuls (kernels/cpu/cpu_blas.c). Peak
 * FLOP/s for MFU is estimated as cores x 2.5 GHz x the fp32 FLOP a cycle of the CPU's widest vector
 * unit (cpu_flops_per_cycle: two FMA units, 64 with AVX-512, 32 with AVX2 + FMA, 8 otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#include "common/log.h"
#include "kernels/cpu/cpu_internal.h"

static void *scratch_or_exit(void *p, size_t bytes, const char *what) {
    if (p) return p;
    log_error("out of memory: %zu bytes for %s (CPU backend)", bytes, what);
    fflush(stdout);
    fflush(stderr);
    _exit(1);             /* maybe on an OpenMP worker: no atexit handlers while others run */
}
void *cpu_scratch(size_t bytes, const char *what) { return scratch_or_exit(malloc(bytes ? bytes : 1), bytes, what); }
void *cpu_scratch_zeroed(size_t bytes, const char *what) {
    return scratch_or_exit(calloc(bytes ? bytes : 1, 1), bytes, what);
}

void *cpu_alloc(BackendCtx *ctx, size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    memset(p, 0, bytes);
    return p;
}
void cpu_free(BackendCtx *ctx, void *p) { free(p); }
/* fp32 ops in a fixed order with a fixed thread count: every rerun gives the same bits already */
void cpu_set_deterministic(BackendCtx *ctx, int on) {}
void cpu_copy(BackendCtx *ctx, void *dst, const void *src, size_t bytes) { if (dst != src) memmove(dst, src, bytes); }
/* Serial on purpose: a memory-bound pass of a few MiB costs less than a parallel region's
 * fork/join on a shared machine (kernels/cpu/cpu_internal.h, CPU_SERIAL_WORK). */
void cpu_copy_2d(BackendCtx *ctx, act_t *dst, int ld_dst, const act_t *src, int ld_src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        memcpy(F(dst) + (size_t)r * ld_dst, CF(src) + (size_t)r * ld_src, sizeof(float) * (size_t)cols);
}
void cpu_upload(BackendCtx *ctx, void *dst, const void *src, size_t bytes) { cpu_copy(ctx, dst, src, bytes); }
void cpu_download(BackendCtx *ctx, void *dst, const void *src, size_t bytes) { cpu_copy(ctx, dst, src, bytes); }
void cpu_zero(BackendCtx *ctx, void *dst, size_t bytes) { memset(dst, 0, bytes); }
void cpu_synchronize(BackendCtx *ctx) {}
void cpu_upload_act(BackendCtx *ctx, act_t *dst, const float *src, size_t n) { cpu_copy(ctx, dst, src, n * sizeof(float)); }
void cpu_download_act(BackendCtx *ctx, float *dst, const act_t *src, size_t n) { cpu_copy(ctx, dst, src, n * sizeof(float)); }
void cpu_cast_params(BackendCtx *ctx, act_t *dst, const float *src, size_t n) { cpu_copy(ctx, dst, src, n * sizeof(float)); }

/* threads <= 0: every core this process may run on, its CPU affinity mask (taskset, mpirun's
 * --bind-to, a Slurm task's cpuset), at least 1; the online cores where the mask cannot be read.
 * Not the online cores alone: a rank bound to one core (mpirun -np 2 binds each rank to a core)
 * would run one thread per core of the node on it. */
static int resolve_threads(int threads) {
    if (threads <= 0) {
        cpu_set_t set;
        threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    return threads < 1 ? 1 : threads;
}

void cpu_set_blas_threads(int threads) {
    BackendCtx c;
    memset(&c, 0, sizeof c);
    c.threads = resolve_threads(threads);
    cpu_blas_threads(&c);
}

/* Every backend made, one per requested thread count (a registry, not a table that ops read:
 * each op gets its thread count from its own ctx). */
typedef struct CpuBackend {
    Backend be;
    BackendCtx ctx;
    int requested;          /* resolved run.threads; ctx.threads is it capped by the BLAS */
    struct CpuBackend *next;
} CpuBackend;
static CpuBackend *g_made;

/* fp32 FLOP a core retires a cycle at most: two FMA units of 16 (AVX-512), 8 (AVX2) lanes x 2 FLOP,
 * or an SSE add and multiply of 4 lanes. */
static double cpu_flops_per_cycle(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 64.0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 32.0;
    return 8.0;
#else
    return 32.0;
#endif
}

/* More threads than the BLAS runs (OpenBLAS: its MAX_THREADS, 64 in most builds) are capped to
 * its count, with one line when the backend is made: the OpenMP loops then run on as many
 * threads as the sgemms, and no count above the cap reaches an op. */
const Backend *backend_cpu(int threads) {
    threads = resolve_threads(threads);
    for (CpuBackend *c = g_made; c; c = c->next)
        if (c->requested == threads) return &c->be;
    CpuBackend *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    Backend *b = &c->be;
    c->requested = threads;
    const int cap = cpu_blas_max_threads(threads);
    if (cap < threads)
        log_printf("cpu: %d threads asked for (run.threads, 0 = every core it may run on), but %s runs at most %d: using %d threads\n",
                   threads, cpu_blas_name(), cap, cap);
    threads = cap;
    c->ctx.threads = threads;
    b->name = "cpu";
    b->act_bytes = sizeof(float);
    b->peak_flops = threads * 2.5e9 * cpu_flops_per_cycle();
    b->device = -1;
    b->entry_select = 1;         /* AttnShape.entry_select: the lightning indexer's top-k (docs/spec.md §5.4) */
    b->head_stride = 1;          /* the shapes' head_stride: multi-rate strides (docs/spec.md §6.4) */
    b->boundaries = 1;           /* learned chunk boundaries: the ops boundary_*, chunk_compressor_* (docs/spec.md §6.5) */
    b->ctx = &c->ctx;
#define OP(ret, op, params, args) b->op = cpu_##op;
#include "kernels/ops.def"
#undef OP
    c->next = g_made;
    g_made = c;
    return b;
}
