/* The CUDA backend's device collectives (Backend.collectives, kernels/kernels.h): NCCL on the
 * backend's stream, on fp32 buffers in device memory, each waited for before returning.
 *   reduce_scatter_sum  recv [shard] = sum over ranks r of send_r [rank * shard .. + shard)
 *   allgather           buf [world * shard]: rank r's shard (at r * shard) copied to every rank
 *   allreduce_sum       buf [n] = sum over ranks of buf_r [n]
 * NCCL's sums run in a fixed order for a fixed world size, so results are reproducible.
 * The communicator (ctx->nccl) is made by init from the unique id that rank 0's make_id wrote
 * and trainer/comm.c broadcast over MPI. A build without NCCL (tools/configure found none,
 * no PHASELAB_NCCL) or the CPU emulation has no collectives: cu_collectives is NULL. */
#include <stdio.h>
#include <string.h>
#include "kernels/cuda/cuda_common.h"

#if defined(PHASELAB_NCCL) && !defined(PHASELAB_CUEMU)
#include <nccl.h>

static ncclComm_t comm_of(BackendCtx *ctx) { return (ncclComm_t)ctx->nccl; }

/* the NCCL result, then the stream: 0 or -1 with err naming which failed */
static int finish(BackendCtx *ctx, ncclResult_t r, char *err) {
    if (r != ncclSuccess) { snprintf(err, 256, "NCCL: %s", ncclGetErrorString(r)); return -1; }
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) { snprintf(err, 256, "CUDA: %s", cudaGetErrorString(e)); return -1; }
    return 0;
}

static int nccl_make_id(BackendCtx *ctx, void *id, char *err) {
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
    if (r != ncclSuccess) { snprintf(err, 256, "%s", ncclGetErrorString(r)); return -1; }
    return 0;
}

static int nccl_init(BackendCtx *ctx, const void *id, int world, int rank, char *err) {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t c;
    ncclResult_t r = ncclCommInitRank(&c, world, uid, rank);
    if (r != ncclSuccess) { snprintf(err, 256, "ncclCommInitRank: %s", ncclGetErrorString(r)); return -1; }
    ctx->nccl = (void *)c;
    return 0;
}

static void nccl_destroy(BackendCtx *ctx) {
    if (ctx->nccl) ncclCommDestroy(comm_of(ctx));
    ctx->nccl = NULL;
}

static int nccl_reduce_scatter_sum(BackendCtx *ctx, const float *send, float *recv, size_t shard, char *err) {
    return finish(ctx, ncclReduceScatter(send, recv, shard, ncclFloat, ncclSum, comm_of(ctx), ctx->stream), err);
}

static int nccl_allgather(BackendCtx *ctx, float *buf, size_t shard, int rank, char *err) {
    return finish(ctx, ncclAllGather(buf + (size_t)rank * shard, buf, shard, ncclFloat, comm_of(ctx), ctx->stream), err);
}

static int nccl_allreduce_sum(BackendCtx *ctx, float *buf, size_t n, char *err) {
    return finish(ctx, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_of(ctx), ctx->stream), err);
}

static const BackendCollectives nccl_collectives = {
    sizeof(ncclUniqueId), nccl_make_id, nccl_init, nccl_destroy,
    nccl_reduce_scatter_sum, nccl_allgather, nccl_allreduce_sum,
};
const BackendCollectives *cu_collectives = &nccl_collectives;
#else
const BackendCollectives *cu_collectives = NULL;
#endif
