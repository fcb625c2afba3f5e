/* Communication between data-parallel ranks (processes): MPI for bootstrap and, on the CPU
 * backend, for the collectives; NCCL for the collectives on the CUDA backend (its unique id is
 * broadcast over MPI). A plain ./train without mpirun/srun is a world of one and never touches
 * MPI. Local rank (GPU index) comes from an MPI shared-memory communicator split.
 *
 * Collectives work on flat fp32 buffers in the backend's memory, with EQUAL shards: the
 * gradient/parameter buffers are padded to world * shard floats. They are deterministic for a
 * fixed world size. A collective that does not finish within the timeout aborts the whole job
 * with a message naming this rank and the operation. */
#ifndef PHASELAB_COMM_H
#define PHASELAB_COMM_H
#include <stddef.h>

struct Backend;

typedef struct Comm {
    int rank, world;             /* global */
    int local_rank, local_world; /* within the node */
    int using_mpi;               /* launched by mpirun / srun with more than one rank, or MPI forced */
    double timeout_s;            /* collective watchdog; <= 0 disables */
    void *impl;                  /* private */
    /* calls so far, counted on every rank whatever the world size (tests: one control per step) */
    long n_allreduce_sum_host, n_allreduce_max_int, n_step_control;
} Comm;

/* The step's control record: the only control all-reduce of a training step carries the loss,
 * the gate-coverage sum and the flags together. */
typedef struct StepControl {
    double loss_sum;       /* summed over ranks */
    double coverage_sum;   /* summed over ranks */
    int failed;            /* max over ranks: a data error on some rank */
    int stop_signal;       /* max over ranks: the signal number asking the run to stop (0: none) */
} StepControl;

/* Detects the launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, SLURM_PROCID with
 * SLURM_STEP_NUM_TASKS; PHASELAB_MPI=0/1 forces it; SLURM_NTASKS alone is not a launch, sbatch
 * sets it too) and initialises MPI only when there is more than one rank. */
int comm_init(Comm *c, int *argc, char ***argv, char *err);
/* After the backend is chosen: on CUDA creates the NCCL communicator (unique id over MPI). */
int comm_attach_backend(Comm *c, const struct Backend *be, char *err);
void comm_finalize(Comm *c);
/* The first two ranks a < b whose device identities (ids [world, id_bytes], e.g. GPU UUIDs; an
 * all-zero identity is "none" and never matches) are equal: returns 1 with *r1 = a, *r2 = b, or 0
 * with both -1. comm_attach_backend refuses a world where two ranks share a GPU. */
int comm_first_shared_device(const unsigned char *ids, size_t id_bytes, int world, int *r1, int *r2);
/* Aborts every rank (exit code), e.g. after a fatal error on one rank. */
void comm_abort(Comm *c, int code);

void comm_barrier(Comm *c);
/* In-place sum over ranks of n doubles in HOST memory (losses, norms, counters). */
void comm_allreduce_sum_host(Comm *c, double *x, int n);
/* Max over ranks of n ints (host) — e.g. "did any rank see a signal". */
void comm_allreduce_max_int(Comm *c, int *x, int n);
/* ONE all-reduce of the step's control record (the sums summed in double, the flags maxed). */
void comm_step_control(Comm *c, StepControl *s);
/* Broadcast of bytes in host memory from rank 0. */
void comm_bcast_host(Comm *c, void *buf, size_t bytes);
/* Gather of `bytes` (small: one MPI_Gather) from every rank to rank 0's recv [world * bytes], rank r's
 * at r * bytes (recv is not touched on other ranks; a world of one copies send). */
void comm_gather_host(Comm *c, const void *send, size_t bytes, void *recv);
/* Backend memory: send [world * shard] -> recv [shard] = sum over ranks of this rank's shard. */
void comm_reduce_scatter_sum(Comm *c, const float *send, float *recv, size_t shard);
/* Backend memory: in-place all-gather: buf [world * shard], this rank's shard at rank*shard. */
void comm_allgather(Comm *c, float *buf, size_t shard);
/* Backend memory: in-place sum over ranks of n floats. */
void comm_allreduce_sum(Comm *c, float *buf, size_t n);
#endif
