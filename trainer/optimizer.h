/* AdamW with ZeRO-1 sharding over data-parallel ranks.
 *
 * The flat fp32 buffers (parameters, gradients) are padded to world * shard floats; rank r owns
 * [r*shard, (r+1)*shard). One optimizer step:
 *   1. reduce-scatter the gradients: this rank's shard of the sum over ranks
 *   2. global gradient norm: sqrt(sum over ranks of the shard's sum of squares)
 *   3. non-finite norm (or loss): skip the update (counted); else clip factor
 *      c = min(1, grad_clip / norm) and, in one pass, AdamW on the shard of g * c (beta1, beta2, eps; decoupled
 *      weight decay only where the tensor table says so: matrices and embeddings)
 *      writing the fp32 master and the working copy (bf16 on CUDA) of the shard
 *   4. all-gather the parameters; cast the other ranks' shards into the working copy
 * The AdamW moments m, v exist only for the local shard. The bias corrections use the number
 * of updates actually applied. */
#ifndef PHASELAB_OPTIMIZER_H
#define PHASELAB_OPTIMIZER_H
#include <stddef.h>
#include "model/tensors.h"

struct Backend;
struct Comm;
struct Model;

typedef struct Optimizer {
    const struct Backend *be;
    struct Comm *comm;
    const TensorTable *tt;
    size_t shard;          /* floats per rank */
    size_t lo, hi;         /* this rank's range [lo, hi) of the flat buffer */
    float *m, *v;          /* [shard] backend memory */
    float *grad_shard;     /* [shard] backend memory (reduce-scatter output) */
    long updates;          /* AdamW steps applied (bias-correction t) */
    double beta1, beta2, eps, weight_decay, grad_clip;
} Optimizer;

/* Padded length of the flat buffers for this world size. */
size_t optimizer_padded_floats(const TensorTable *tt, int world);
int optimizer_init(Optimizer *o, const struct Backend *be, struct Comm *comm, const TensorTable *tt,
                   double beta1, double beta2, double eps, double weight_decay, double grad_clip, char *err);
void optimizer_free(Optimizer *o);
/* Steps 1-4 above on the model's parameters, the owned step: the caller gives the model, this
 * performs clip + AdamW on the fp32 master AND writes the working copy (bf16 on CUDA) in the same
 * pass (Backend.adamw_cast); after the all-gather the other ranks' shards of the working copy
 * are cast from the gathered master. No refresh is left to the caller. loss_finite tells whether
 * every rank's loss was finite. Returns 1 if the update was applied, 0 if skipped (nothing
 * changes); *grad_norm receives the global norm before clipping. */
int optimizer_step(Optimizer *o, struct Model *model, double lr, int loss_finite, double *grad_norm);
#endif
