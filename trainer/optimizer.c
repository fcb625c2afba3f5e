/* ZeRO-1 AdamW (see trainer/optimizer.h for the algorithm). */
#include <math.h>
#include <stdlib.h>
#include "trainer/optimizer.h"
#include "trainer/comm.h"
#include "kernels/kernels.h"
#include "model/model.h"
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

int optimizer_step(Optimizer *o, Model *model, double lr, int loss_finite, double *grad_norm) {
    const Backend *be = o->be;
    float *params = model_params(model), *grads = model_grads(model);
    char *work = (char *)model_working_params(model);   /* act_t [n_floats]; aliases params on the CPU */
    const size_t n_floats = o->tt->n_floats;
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
    o->updates++;
    float bc1 = (float)(1.0 - pow(o->beta1, (double)o->updates));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)o->updates));
    /* clip + AdamW + working-copy write in one pass over the parts of each tensor in [lo, hi).
     * Consecutive tensors with the same weight decay form one call over [first offset, last
     * end): the alignment padding between them (zero parameters, zero gradients) stays zero, and
     * every element is updated exactly as by a call of its own (the update is elementwise);
     * fewer calls = fewer parallel regions. */
    for (int i = 0; i < o->tt->n;) {
        const TensorInfo *t = &o->tt->t[i];
        int j = i + 1;
        while (j < o->tt->n && o->tt->t[j].decay == t->decay) j++;
        const TensorInfo *last = &o->tt->t[j - 1];
        size_t a = t->offset > o->lo ? t->offset : o->lo;
        size_t b = last->offset + last->numel < o->hi ? last->offset + last->numel : o->hi;
        i = j;
        if (a >= b) continue;
        float wd = t->decay ? (float)o->weight_decay : 0.0f;
        be->adamw_cast(be->ctx, params + a, (act_t *)(work + a * be->act_bytes), g + (a - o->lo), o->m + (a - o->lo),
                       o->v + (a - o->lo), b - a, (float)clip, (float)lr, (float)o->beta1, (float)o->beta2,
                       (float)o->eps, wd, bc1, bc2);
    }
    if (o->comm->world > 1) {
        /* the other ranks' shards of the master arrive here; their working copy is cast from them
         * (no-op where it aliases the master) */
        comm_allgather(o->comm, params, o->shard);
        size_t lo = o->lo < n_floats ? o->lo : n_floats, hi = o->hi < n_floats ? o->hi : n_floats;
        be->cast_params(be->ctx, (act_t *)work, params, lo);
        be->cast_params(be->ctx, (act_t *)(work + hi * be->act_bytes), params + hi, n_floats - hi);
    }
    return 1;
}
