/* The counting backend: alloc returns a dummy pointer (never dereferenced: 64 + the bytes counted
 * before it, so that two buffers never alias) and adds the request to a total, upload and free
 * do nothing, every other op is absent. Creating a model or a decoder on it measures exactly
 * what they would ask of a real backend (cli/summary.c: the activation arena;
 * analysis/cache_report.c: the KV cache), without the memory. Its context is the running total.
 * backend_counting_nop: the same with every op of kernels/ops.def present and doing nothing
 * (sumsq returns 0), so that a whole training step runs on it: under the timing wrapper
 * (kernels/backend_profile.h) it counts the step's work without doing it (cli/summary.c). */
#include <stdint.h>
#include <stdlib.h>
#include "kernels/kernels.h"

struct BackendCtx {
    size_t counted;   /* bytes asked for so far */
};

static void *count_alloc(BackendCtx *ctx, size_t bytes) {
    void *p = (void *)(uintptr_t)(64 + ctx->counted);
    ctx->counted += bytes;
    return p;
}
static void count_free(BackendCtx *ctx, void *p) { (void)ctx; (void)p; }
static void count_upload(BackendCtx *ctx, void *d, const void *s, size_t n) { (void)ctx; (void)d; (void)s; (void)n; }

Backend *backend_counting(size_t act_bytes) {
    Backend *b = calloc(1, sizeof *b);
    BackendCtx *ctx = calloc(1, sizeof *ctx);
    if (!b || !ctx) { free(b); free(ctx); return NULL; }
    b->name = "count";
    b->act_bytes = act_bytes;
    b->device = -1;
    b->entry_select = 1;   /* plans (and counts the work of) models with the lightning indexer too */
    b->head_stride = 1;    /* ... and with multi-rate strides (docs/spec.md §6.4) */
    b->boundaries = 1;     /* ... and with learned chunk boundaries (docs/spec.md §6.5) */
    b->ctx = ctx;
    b->alloc = count_alloc;
    b->free = count_free;
    b->upload = count_upload;
    return b;
}

/* the no-op ops (alloc, free and upload are the counting ones above) */
#define OP(ret, op, params, args) static inline ret nop_##op params {}
#define OPR(ret, op, params, args) static inline ret nop_##op params { return (ret)0; }
#include "kernels/ops.def"

Backend *backend_counting_nop(size_t act_bytes) {
    Backend *b = backend_counting(act_bytes);
    if (!b) return NULL;
#define OP(ret, op, params, args) b->op = nop_##op;
#include "kernels/ops.def"
    b->alloc = count_alloc;
    b->free = count_free;
    b->upload = count_upload;
    return b;
}

size_t backend_counted(const Backend *b) { return b->ctx->counted; }

void backend_counting_free(Backend *b) {
    if (!b) return;
    free(b->ctx);
    free(b);
}
