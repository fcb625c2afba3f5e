/* The counting backend: alloc returns a dummy pointer and adds the request to a total, upload
 * and free do nothing, every other op is absent. Creating a model or a decoder on it measures
 * exactly what they would ask of a real backend (cli/summary.c: the activation arena;
 * analysis/cache_report.c: the KV cache), without the memory. Its context is the running total. */
#include <stdlib.h>
#include "kernels/kernels.h"

struct BackendCtx {
    size_t counted;   /* bytes asked for so far */
};

static void *count_alloc(BackendCtx *ctx, size_t bytes) { ctx->counted += bytes; return (void *)64; }
static void count_free(BackendCtx *ctx, void *p) { (void)ctx; (void)p; }
static void count_upload(BackendCtx *ctx, void *d, const void *s, size_t n) { (void)ctx; (void)d; (void)s; (void)n; }

Backend *backend_counting(size_t act_bytes) {
    Backend *b = calloc(1, sizeof *b);
    BackendCtx *ctx = calloc(1, sizeof *ctx);
    if (!b || !ctx) { free(b); free(ctx); return NULL; }
    b->name = "count";
    b->act_bytes = act_bytes;
    b->device = -1;
    b->ctx = ctx;
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
