/* ZeRO-1 AdamW (see trainer/optimizer.h for the algorithm). */
#include <math.h>
#include <stdlib.h>
#include "trainer/optimizer.h"
#include "trainer/comm.h"
#include "kernels/kernels.h"
#include "common/errors.h"

size_t optimizer_padded_floats(const TensorTable *tt, int world) {
    size_t shard = (tt->n_floats + world - 1) / world;
    shard = (shard + 15) & ~(size_t)15;
    return shard * world;
}

int optimizer_init(Optimizer *o, const Backend *be, Comm *comm, const TensorTable *tt, double beta1, double beta2,
                   double eps, double weight_decay, double grad_clip, char *err) {
    o->be = be;
    o->comm = comm;
    o->tt = tt;
    o->shard = optimizer_padded_floats(tt, comm->world) / comm->world;
    o->lo = (size_t)comm->rank * o->shard;
    o->hi = o->lo + o->shard;
    o->m = be->alloc(be->ctx, o->shard * sizeof(float));
    o->v = be->alloc(be->ctx, o->shard * sizeof(float));
    o->grad_shard = comm->world > 1 ? be->alloc(be->ctx, o->shard * sizeof(float)) : NULL;
    o->updates = 0;
    o->beta1 = beta1; o->beta2 = beta2; o->eps = eps; o->weight_decay = weight_decay; o->grad_clip = grad_clip;
    if (!o->m || !o->v || (comm->world > 1 && !o->grad_shard))
        return set_err(err, "out of %s memory for the optimizer state (%.1f MiB)", be->name, 3.0 * o->shard * 4 / 1048576.0);
    return 0;
}

void optimizer_free(Optimizer *o) {
    if (o->m) o->be->free(o->be->ctx, o->m);
    if (o->v) o->be->free(o->be->ctx, o->v);
    if (o->grad_shard) o->be->free(o->be->ctx, o->grad_shard);
    o->m = o->v = o->grad_shard = NULL;
}

int optimizer_step(Optimizer *o, float *params, float *grads, double lr, int loss_finite, double *grad_norm) {
    const Backend *be = o->be;
    float *g = grads + o->lo;
    if (o->comm->world > 1) {
        comm_reduce_scatter_sum(o->comm, grads, o->grad_shard, o->shard);
        g = o->grad_shard;
    }
    double ss = be->sumsq(be->ctx, g, o->shard);
    comm_allreduce_sum_host(o->comm, &ss, 1);
    double norm = sqrt(ss);
    *grad_norm = norm;
    if (!loss_finite || !isfinite(norm)) return 0;
    double clip = (o->grad_clip > 0 && norm > o->grad_clip) ? o->grad_clip / norm : 1.0;
    if (clip != 1.0) be->scale(be->ctx, g, o->shard, (float)clip);
    o->updates++;
    float bc1 = (float)(1.0 - pow(o->beta1, (double)o->updates));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)o->updates));
    /* AdamW over the parts of each tensor that fall in [lo, hi) */
    for (int i = 0; i < o->tt->n; i++) {
        const TensorInfo *t = &o->tt->t[i];
        size_t a = t->offset > o->lo ? t->offset : o->lo;
        size_t b = t->offset + t->numel < o->hi ? t->offset + t->numel : o->hi;
        if (a >= b) continue;
        float wd = t->decay ? (float)o->weight_decay : 0.0f;
        be->adamw(be->ctx, params + a, g + (a - o->lo), o->m + (a - o->lo), o->v + (a - o->lo), b - a, (float)lr,
                  (float)o->beta1, (float)o->beta2, (float)o->eps, wd, bc1, bc2);
    }
    if (o->comm->world > 1) comm_allgather(o->comm, params, o->shard);
    return 1;
}
