/* The op API: every computation of the model's forward and backward pass and of the optimizer,
 * as a table of functions that each backend (kernels/cpu, kernels/cuda) fills in; the table's
 * members, the backends' declarations and both fills come from one list, kernels/ops.def. The
 * model (model/model.c) is written once against this table.
 *
 * Memory: every pointer argument lives in the backend's memory (host memory for the CPU
 * backend, device memory for CUDA), allocated with be->alloc. Element types:
 *   act_t   the backend's activation type: fp32 on the CPU, bf16 on CUDA. Activations and the
 *           working copy of the weights that the forward and backward passes read.
 *   float   fp32 always: master weights, gradients, optimizer state, softmax statistics
 *           (rstd, logsumexp, gate weights alpha), losses, the residual gradient
 *           (rmsnorm_bwd_residual, embedding_bwd; docs/spec.md §1.1).
 *   int32_t token ids and targets (target < 0 = ignored position).
 * On the CPU backend the working weights ARE the master weights (act_t == float).
 *
 * Conventions: a "matrix" W of shape [N, K] acts as y = W x (PyTorch Linear). Row-major
 * everywhere. Backward functions accumulate (+=) into weight gradients; whether they overwrite
 * or accumulate into activation gradients is said per function. Reductions are deterministic:
 * the same inputs give the same bits on every run (no float atomics). */
#ifndef PHASELAB_KERNELS_H
#define PHASELAB_KERNELS_H
#include <stddef.h>
#include <stdint.h>

/* The activation element: fp32 on the CPU, bf16 on CUDA. An incomplete type, so that act_t *
 * and float * do not convert into each other without a cast (the compiler rejects an fp32
 * gradient passed where an activation belongs: -Werror=incompatible-pointer-types). */
typedef struct PhaselabAct act_t;

/* Which raw tokens a query sees (VIS_FULL | VIS_WINDOW | VIS_TAIL) and the per-head window grid
 * (GRID_ALIGNED | GRID_STAGGERED): kernels/visibility.h, the one statement of the rule; it includes
 * kernels/variants.h, the variant enums shared with the config (GATE_*, GRID_*). */
#include "kernels/visibility.h"
/* The lightning indexer's shape (IndexerShape, the ops indexer_*) and its host fp32 math, the
 * CPU backend's implementation: kernels/indexer.h. */
#include "kernels/indexer.h"

/* Shapes of one attention call. q [B,T,H,d], k,v [B,T,G,d], ck,cv [B,nW,G,d]. */
typedef struct {
    int B, T, H, G, d;
    int n_windows, window, stride;   /* compressed entries (n_windows = 0: none); n_windows is KV
                                        head 0's count, the most any head has (buffer rows) */
    int visibility;                  /* VIS_* */
    int n_local;
    int grid;                        /* GRID_*: head g's entries are those of its own grid */
    int grid_base;                   /* o_base, the static grid offset (S - W on csa layers, else 0; docs/spec.md §6.1) */
    const int32_t *grid_shift;       /* [B] per-sequence shift u_b in [0, P) (phase jitter; head g moves by u_b mod S_g), or NULL:
                                        all 0. Host memory, like the shape itself (a backend that
                                        needs it on its device copies it there) */
    const uint8_t *entry_select;     /* [B, T, n_windows] or NULL: entry j is seen by query t only where
                                        it is visible AND entry_select[(b*T + t)*n_windows + j] != 0
                                        (the lightning indexer's top-k, docs/spec.md §5.4); backend
                                        memory; only backends with Backend.entry_select honour it */
    const int *head_stride;          /* [G] S_g, KV head g's stride (model.head_strides, docs/spec.md
                                        §6.4), or NULL: every head has stride. Host memory (the CUDA
                                        backend copies it to the device per call, cuda_attention.cu) */
    const int32_t *entry_ends;       /* [B, n_windows] learned chunk boundaries (docs/spec.md §6.5): sequence b's
                                        entry j ends at entry_ends[b*n_windows + j], j < entry_count[b], shared by
                                        every KV head (vis_query_view_ends); NULL: the window grid (every model
                                        without model.boundaries = learned). Host memory (the CUDA
                                        backend copies it to the device per call; Backend.boundaries) */
    const int32_t *entry_count;      /* [B] n_b, the entries of sequence b (with entry_ends) */
} AttnShape;

/* Shapes of one compressor branch (docs/spec.md §2). */
typedef struct {
    int B, T, D, G, d;
    int window, stride, n_windows;
    int gate;         /* GATE_* (kernels/variants.h) */
    int channels;     /* c: 1 (scalar, uniform) or d (vector) */
    int n_maps;       /* W (paper), 2 (deepseek: offsets < S use map 0, the rest map 1), 1 (shared) */
    float eps;        /* post-norm epsilon */
    int grid;         /* GRID_*: head g's window j covers o_g + jS .. o_g + jS + W - 1, and only
                         its first vis_n_windows(T, W, S, o_g) of the n_windows rows exist (the rest
                         of the buffers are zero: entry, payload, alpha) */
    int grid_base;    /* o_base (docs/spec.md §6.1), > -W: a negative one gives partial first windows,
                         whose slots before the sequence are masked (alpha 0, payload 0, no gradient) */
    const int32_t *grid_shift;   /* [B] u_b in [0, P), or NULL (all 0); host memory, as in AttnShape */
    const int *head_stride;      /* [G] S_g (docs/spec.md §6.4), or NULL: every head stride; host memory */
    const int32_t *entry_ends;   /* [B, n_windows] learned chunk boundaries (docs/spec.md §6.5), as in AttnShape;
                                    only the chunk ops (chunk_compressor_*, boundary_*) read them */
    const int32_t *entry_count;  /* [B] n_b */
} CompShape;

/* Map index of window offset i (paper: i; deepseek: 0 for i < S, else 1; shared: 0). */
static inline int map_index(int n_maps, int window, int stride, int i) {
    return n_maps == window ? i : n_maps == 1 ? 0 : (i < stride ? 0 : 1);
}
static inline int comp_map_index(const CompShape *s, int i) { return map_index(s->n_maps, s->window, s->stride, i); }
/* KV head g's stride S_g (vis_head_stride), the grid offset o = o_base + o_g + u_b of KV head g in
 * sequence b (kernels/visibility.h,
 * docs/spec.md §6.1), and the head's window count there: its first vis_n_windows rows of the
 * n_windows the buffers hold (the most: n_windows is counted at o_base, the smallest offset). */
static inline int comp_head_stride(const CompShape *s, int g) { return vis_head_stride(s->head_stride, g, s->stride); }
static inline int comp_head_offset(const CompShape *s, int b, int g) {
    return vis_entry_offset(s->grid, g, comp_head_stride(s, g), s->G, s->grid_base, s->grid_shift ? s->grid_shift[b] : 0);
}
static inline int comp_head_windows(const CompShape *s, int b, int g) {
    int n = vis_n_windows(s->T, s->window, comp_head_stride(s, g), comp_head_offset(s, b, g));
    return n < s->n_windows ? n : s->n_windows;
}
/* The same for an attention call (host and device: on a device, grid_shift is the device copy). */
VIS_FN int attn_head_stride(const AttnShape *s, int g) { return vis_head_stride(s->head_stride, g, s->stride); }
VIS_FN int attn_head_offset(const AttnShape *s, int b, int g) {
    return vis_entry_offset(s->grid, g, attn_head_stride(s, g), s->G, s->grid_base, s->grid_shift ? s->grid_shift[b] : 0);
}
/* What query t of sequence b reading KV head g sees (kernels/visibility.h): the grid of the head, or the
 * sequence's learned entry ends when the shape has them (docs/spec.md §6.5). */
VIS_FN VisQueryView attn_query_view(const AttnShape *s, int b, int g, int t) {
    if (s->entry_ends)
        return vis_query_view_ends(s->visibility, t, s->entry_ends + (size_t)b * s->n_windows, s->entry_count[b], s->n_local);
    return vis_query_view(s->visibility, t, s->window, attn_head_stride(s, g), attn_head_offset(s, b, g), s->n_windows,
                          s->n_local);
}

/* Shapes of one decode attention call (model/decode.c): ONE query position t, H heads, against a
 * cache of compressed entries (ck, cv [n_windows, G, d]: slot (j, g) holds entry j of KV head g)
 * and raw tokens in a ring of ring_cap slots (k, v [ring_cap, G, d]: position p in slot
 * p % ring_cap). What KV head g shows the query is the visibility rule of kernels/visibility.h
 * for that head's grid (decode_head_view): its first n_entries entries, then its raw tokens
 * lo..t (n_raw of them, from ring slot raw_first, wrapping). With grid = staggered heads differ
 * in both (docs/spec.md §2b); on the aligned grid every head sees the same slots. */
typedef struct {
    int H, G, d;
    int t;                           /* the query position */
    int window, stride, n_windows;   /* entry slots per head (n_windows = 0: no compressed entries) */
    int grid;                        /* GRID_* */
    int grid_base;                   /* o_base (docs/spec.md §6.1); decoding has no shift (u = 0) */
    int visibility, n_local;         /* VIS_*, raw window length for VIS_WINDOW */
    int ring_cap;                    /* raw slots (>= 1) */
    const uint8_t *entry_select;     /* [n_windows] or NULL: entry x is seen only where entry_select[x]
                                        != 0 (the indexer's top-k, docs/spec.md §5.4; Backend.entry_select) */
    const int *head_stride;          /* [G] S_g (docs/spec.md §6.4), or NULL: every head stride; host memory */
    const int32_t *entry_ends;       /* [entry_count] learned chunk boundaries (docs/spec.md §6.5): entry slot j
                                        ends at entry_ends[j], every KV head alike (vis_query_view_ends); NULL:
                                        the grid. Host memory (copied per call on CUDA; Backend.boundaries) */
    int entry_count;                 /* the entries written so far (with entry_ends) */
} DecodeAttnShape;

/* The part of the cache KV head g shows the query of a decode call: entries 0..n_entries-1 and
 * n_raw raw tokens starting at ring slot raw_first (kernels/visibility.h; host and device). */
VIS_FN void decode_head_view(const DecodeAttnShape *s, int g, int *n_entries, int *raw_first, int *n_raw) {
    const int S = vis_head_stride(s->head_stride, g, s->stride);
    const int o = vis_entry_offset(s->grid, g, S, s->G, s->grid_base, 0);
    const VisQueryView v = s->entry_ends ? vis_query_view_ends(s->visibility, s->t, s->entry_ends, s->entry_count, s->n_local)
                                         : vis_query_view(s->visibility, s->t, s->window, S, o, s->n_windows, s->n_local);
    *n_entries = v.n_entries;
    *n_raw = s->t - v.raw_lo + 1;
    *raw_first = s->ring_cap > 0 ? v.raw_lo % s->ring_cap : 0;
}

/* A backend is an interface (the ops of kernels/ops.def) plus a context: everything an op
 * needs besides its arguments (CPU: the thread count; CUDA: the device, stream, cuBLASLt handle
 * and plan cache, workspaces, memory accounting, the NCCL communicator). No op touches a global:
 * two backends (two CPU thread counts, two GPUs) coexist. Every op takes be->ctx first:
 *     be->matmul_fwd(be->ctx, out, in, w, M, N, K, 0);
 * Each backend defines struct BackendCtx privately (kernels/cpu/cpu_internal.h,
 * kernels/cuda/cuda_common.h); callers only pass the pointer. */
typedef struct BackendCtx BackendCtx;

/* Device collectives on fp32 buffers in the backend's memory, over the communicator that
 * comm_init made (NCCL on CUDA). NULL in Backend.collectives on a backend whose memory is host
 * memory: trainer/comm.c then runs MPI on the buffers itself. Each returns 0, or -1 with err
 * filled; each waits for the collective before returning. */
typedef struct BackendCollectives {
    size_t id_bytes;   /* size of the communicator's unique id (rank 0 makes it, MPI broadcasts it) */
    int (*make_id)(BackendCtx *ctx, void *id, char *err);
    /* abort_flag: set (non-zero) by the caller's watchdog thread when a collective ran past its
     * timeout; a collective waiting for its completion then aborts the communicator and returns
     * -1 (the caller ends the job from its own thread) */
    int (*init)(BackendCtx *ctx, const void *id, int world, int rank, const volatile int *abort_flag, char *err);
    void (*destroy)(BackendCtx *ctx);
    /* send [world * shard] -> recv [shard] = sum over ranks of this rank's shard */
    int (*reduce_scatter_sum)(BackendCtx *ctx, const float *send, float *recv, size_t shard, char *err);
    /* in place: buf [world * shard], this rank's shard at rank * shard */
    int (*allgather)(BackendCtx *ctx, float *buf, size_t shard, int rank, char *err);
    /* in place: buf [n] = sum over ranks */
    int (*allreduce_sum)(BackendCtx *ctx, float *buf, size_t n, char *err);
} BackendCollectives;

typedef struct Backend {
    const char *name;                /* "cpu" | "cuda" */
    size_t act_bytes;                /* sizeof one act_t element */
    double peak_flops;               /* for MFU: fp32 (cpu) or bf16 dense (cuda) FLOP/s */
    int device;                      /* the GPU this backend runs on (-1: host) */
    unsigned char device_uuid[16];   /* that GPU's UUID (all zero on the host): two ranks that
                                      * name the same one are refused (trainer/comm.c) */
    BackendCtx *ctx;                 /* first argument of every op */
    const BackendCollectives *collectives;   /* NULL: host memory, MPI does the collectives */
    /* Shape limits of the backend's kernels (0 = none): model_create refuses a config beyond
     * them with one line instead of an op aborting in the first step. CUDA: head_dim <= 128
     * (the attention tiles), compressed attention with at most 64 KV heads (compressor slices). */
    int max_head_dim, max_comp_kv_heads;
    int entry_select;                /* 1: attention_fwd/bwd and attention_decode honour entry_select (CPU, CUDA) */
    int head_stride;                 /* 1: the attention and compressor ops honour the shapes' head_stride
                                        (multi-rate strides, docs/spec.md §6.4: CPU, CUDA); 0: model_create refuses
                                        a model.head_strides config */
    int boundaries;                  /* 1: the backend runs learned chunk boundaries (model.boundaries = learned,
                                        docs/spec.md §6.5: the chunk ops, entry ends in the attention
                                        shapes; CPU, CUDA); 0: model_create refuses such a config */
    /* the ops, one member per line of kernels/ops.def: ret (*name)(BackendCtx *ctx, ...) */
#define OP(ret, op, params, args) ret (*op) params;
#include "kernels/ops.def"
#undef OP
} Backend;

/* The CPU backend (fp32, OpenMP, a CBLAS); threads <= 0 uses every core. Each call returns
 * a backend of its own (its context holds the thread count); they live until exit. */
const Backend *backend_cpu(int threads);
/* (its BLAS controls, cpu_set_blas_threads and cpu_blas_name: kernels/cpu/cpu_backend.h) */
#ifdef PHASELAB_CUDA
/* The CUDA backend on the given device (taken modulo the visible devices, so a rank that sees one
 * GPU through CUDA_VISIBLE_DEVICES takes it; two ranks that land on the same GPU are refused by
 * comm_attach_backend, which compares Backend.device_uuid); one per device, made on the first call for it and returned by later ones. NULL
 * (and err filled) when no usable GPU exists. The calling thread's current device becomes it. */
const Backend *backend_cuda(int device, char *err);
/* (its memory accounting, cuda_backend_peak_bytes ...: kernels/cuda/cuda_backend.h) */
#endif
/* The counting backend (kernels/backend_count.c): alloc only adds the request to a total (and
 * returns a dummy pointer), so building a model or decoder on it measures their memory. NULL
 * when out of memory; backend_counting_free releases it. */
Backend *backend_counting(size_t act_bytes);
/* The counting backend with every op present and doing nothing (sumsq returns 0): a model's
 * training step runs on it, so the timing wrapper around it counts the step's work (cli/summary.c).
 * Released with backend_counting_free. */
Backend *backend_counting_nop(size_t act_bytes);
size_t backend_counted(const Backend *b);
void backend_counting_free(Backend *b);

/* Picks a backend for run.device = auto | cpu | cuda; prints one line saying which. */
const Backend *backend_select(const char *device, int threads, int local_rank, char *err);

/* The host RoPE tables that the rope op reads (cos_sin), shared by every backend:
 * rope_table, entry_rope_table (kernels/rope_table.h). */
#include "kernels/rope_table.h"
#endif
