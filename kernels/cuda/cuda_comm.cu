/* The CUDA backend's device collectives (Backend.collectives, kernels/kernels.h): NCCL on the
 * backend's stream, on fp32 buffers in device memory, each waited for before returning.
 *   reduce_scatter_sum  recv [shard] = sum over ranks r of send_r [rank * shard .. + shard)
 *   allgather           buf [world * shard]: rank r's shard (at r * shard) copied to every rank
 *   allreduce_sum       buf [n] = sum over ranks of buf_r [n]
 * NCCL's sums run in a fixed order for a fixed world size, so results are reproducible.
 *
 * Waiting (finish): not cudaStreamSynchronize, which would block forever when a peer died, but a
 * poll of the stream (cudaStreamQuery) that also reads ncclCommGetAsyncError and the watchdog's
 * abort flag (trainer/comm.c sets it when a collective outlives its timeout). An async NCCL error
 * or the flag aborts the communicator (ncclCommAbort: the kernels still in flight are stopped)
 * and returns -1 naming the cause; trainer/comm.c then ends the job from the main thread.
 * The poll sleeps 50 us between queries once the collective has run 1 ms (a busy wait before).
 * The communicator (ctx->nccl) is made by init from the unique id that rank 0's make_id wrote
 * and trainer/comm.c broadcast over MPI. A build without NCCL (tools/configure found none,
 * no PHASELAB_NCCL) or the CPU emulation has no collectives: cu_collectives is NULL. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kernels/cuda/cuda_common.h"

#if defined(PHASELAB_NCCL) && !defined(PHASELAB_CUEMU)
#include <nccl.h>

static ncclComm_t comm_of(BackendCtx *ctx) { return (ncclComm_t)ctx->nccl; }

#define POLL_SPIN_S 1e-3     /* busy-wait this long before sleeping between polls */
#define POLL_SLEEP_US 50

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* aborts the communicator after a failure; later collectives see ctx->nccl == NULL */
static void abort_comm(BackendCtx *ctx) {
    if (ctx->nccl) ncclCommAbort(comm_of(ctx));
    ctx->nccl = NULL;
}

/* the NCCL result, then the completion of the stream (polled: see the header): 0 or -1 with err
 * naming what failed */
static int finish(BackendCtx *ctx, ncclResult_t r, char *err) {
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, 256, "NCCL: %s", ncclGetErrorString(r));
        abort_comm(ctx);
        return -1;
    }
    const double t0 = now_s();
    for (;;) {
        cudaError_t e = cudaStreamQuery(ctx->stream);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) {
            snprintf(err, 256, "CUDA: %s", cudaGetErrorString(e));
            abort_comm(ctx);
            return -1;
        }
        ncclResult_t ae = ncclSuccess;
        if (ncclCommGetAsyncError(comm_of(ctx), &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress) {
            snprintf(err, 256, "NCCL asynchronous error: %s (communicator aborted)", ncclGetErrorString(ae));
            abort_comm(ctx);
            return -1;
        }
        if (ctx->nccl_abort && *ctx->nccl_abort) {
            snprintf(err, 256, "aborted by the watchdog after its timeout (communicator aborted)");
            abort_comm(ctx);
            return -1;
        }
        if (now_s() - t0 > POLL_SPIN_S) usleep(POLL_SLEEP_US);
    }
}

/* a collective on an aborted communicator fails at once */
static int alive(BackendCtx *ctx, char *err) {
    if (ctx->nccl) return 1;
    snprintf(err, 256, "the NCCL communicator was aborted by an earlier failure");
    return 0;
}

static int nccl_make_id(BackendCtx *ctx, void *id, char *err) {
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
    if (r != ncclSuccess) { snprintf(err, 256, "%s", ncclGetErrorString(r)); return -1; }
    return 0;
}

static int nccl_init(BackendCtx *ctx, const void *id, int world, int rank, const volatile int *abort_flag, char *err) {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t c;
    ncclResult_t r = ncclCommInitRank(&c, world, uid, rank);
    if (r != ncclSuccess) { snprintf(err, 256, "ncclCommInitRank: %s", ncclGetErrorString(r)); return -1; }
    ctx->nccl = (void *)c;
    ctx->nccl_abort = abort_flag;
    return 0;
}

static void nccl_destroy(BackendCtx *ctx) {
    if (ctx->nccl) ncclCommDestroy(comm_of(ctx));
    ctx->nccl = NULL;
}

static int nccl_reduce_scatter_sum(BackendCtx *ctx, const float *send, float *recv, size_t shard, char *err) {
    if (!alive(ctx, err)) return -1;
    return finish(ctx, ncclReduceScatter(send, recv, shard, ncclFloat, ncclSum, comm_of(ctx), ctx->stream), err);
}

static int nccl_allgather(BackendCtx *ctx, float *buf, size_t shard, int rank, char *err) {
    if (!alive(ctx, err)) return -1;
    return finish(ctx, ncclAllGather(buf + (size_t)rank * shard, buf, shard, ncclFloat, comm_of(ctx), ctx->stream), err);
}

static int nccl_allreduce_sum(BackendCtx *ctx, float *buf, size_t n, char *err) {
    if (!alive(ctx, err)) return -1;
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
