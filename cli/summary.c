/* Model summary (see cli/summary.h). Memory plan, per rank, for the CPU (fp32 activations)
 * and CUDA (bf16 activations and working weights) backends:
 *   weights fp32 + gradients fp32 (full buffers) + AdamW m, v (1/world of the buffer, ZeRO-1)
 *   (+ bf16 working weights on CUDA) + the activation arena for one micro-batch. The arena size
 *   is exact: the model is laid out on a backend that only counts bytes.
 * Step rate (step_rate_estimate, for --dry-run's wall time): C [M, N] = A [M, K] W [N, K]^T through
 * the backend's matmul_fwd with M = micro_batch * seq_len, K = d_model, N = d_ff (M capped at
 * 2048, N and K at 4096), one warm-up call, then 3 timings of enough calls for 100 ms each; the
 * best rate 2 M N K / t, times the step's share of it. */
#include <stdio.h>
#include <string.h>
#include "cli/summary.h"
#include "common/errors.h"
#include "model/model.h"
#include "model/tensors.h"
#include "model/dims.h"
#include "kernels/kernels.h"
#include "common/clock.h"


/* bytes of the activation arena for micro-batch B of T tokens */
static size_t arena_estimate(const ModelConfig *mc, int B, int T, size_t act_bytes, char *err) {
    Backend *counting = backend_counting(act_bytes);   /* counts every variant's arena */
    if (!counting) { set_err(err, "out of memory"); return 0; }
    Model *m = model_create(mc, counting, B, T, err);
    size_t bytes = m ? model_arena_bytes(m) : 0;
    if (m) model_free(m);
    backend_counting_free(counting);
    return bytes;
}

static void human(double bytes, char *out, int len) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) { bytes /= 1024; i++; }
    snprintf(out, len, "%.2f %s", bytes, u[i]);
}

int print_model_summary(FILE *f, const Config *cfg, int world, char *err) {
    TensorTable tt;
    if (tensor_table_build(&tt, &cfg->model, err)) return -1;
    const ModelConfig *m = &cfg->model;
    const int T = cfg->data.seq_len;
    const ModelDims dims = dims_of(m, T);
    fprintf(f, "model: %s attention", config_attention_names[m->attention]);
    if (dims.compressed)
        fprintf(f, " W%d/S%d (%s gate%s, %s%s%s, local %s, compressor %s%s)", m->window, m->stride,
                config_gate_names[m->gate],
                m->gate_bias ? "" : " without bias",
                dims.tied_kv ? "tied K/V" : "separate K/V",
                m->post_norm ? ", post-norm" : "", m->qk_norm ? "" : ", no QK-norm",
                config_local_names[m->local], config_compressor_names[m->compressor],
                m->attn_sink ? ", attention sink" : "");
    if (dims.grid == GRID_STAGGERED) {   /* docs/spec.md §2b */
        fprintf(f, "\n  %s grid: KV head g's windows start at o_g =", config_grid_names[dims.grid]);
        for (int g = 0; g < m->n_kv_heads && g < 16; g++) fprintf(f, "%s%d", g ? ", " : " ", dims_grid_offset(&dims, g));
        if (m->n_kv_heads > 16) fprintf(f, ", ...");
        fprintf(f, " (windows per head at seq_len %d: %d..%d)", T, dims_head_windows(&dims, m->n_kv_heads - 1),
                dims_head_windows(&dims, 0));
    }
    if (cfg->train.gate_coverage > 0)
        fprintf(f, "\n  training objective: cross-entropy + gate_coverage %g * mean over sequences of "
                "sum over layers and branches of (ln W - H(gbar)) (logged as /train/gate_coverage)", cfg->train.gate_coverage);
    fprintf(f, "\n  d_model %d, %d layers, %d query heads, %d KV heads, head_dim %d, d_ff %d, vocab %d, RoPE on %d dims\n",
            m->d_model, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->d_ff, m->vocab_size, m->rope_dims);
    fprintf(f, "\n%-64s %-24s %14s\n", "tensor", "shape", "parameters");
    for (int i = 0; i < tt.n; i++) {
        const TensorInfo *t = &tt.t[i];
        /* layer 0 and the last layer in full; the identical middle layers elided */
        if (t->layer > 0 && t->layer < m->n_layers - 1) {
            if (t->layer == 1 && strstr(t->name, "input_layernorm"))
                fprintf(f, "  ... layers 1..%d hold the same tensors as layer 0 ...\n", m->n_layers - 2);
            continue;
        }
        char shape[64] = "[";
        for (int k = 0; k < t->ndim; k++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
        strcat(shape, "]");
        fprintf(f, "%-64s %-24s %14zu\n", t->name, shape, t->numel);
    }
    fprintf(f, "\nparameters: %zu\n", tt.n_params);
    size_t emb = (size_t)m->vocab_size * m->d_model;
    fprintf(f, "parameters without the embedding: %zu\n", tt.n_params - emb * (m->tie_embeddings ? 1 : 2));
    double fpt = model_flops_per_token(m, T);
    fprintf(f, "FLOPs per token (training, forward + backward) at seq_len %d: %.4g (%.3f GFLOP)\n", T, fpt, fpt / 1e9);
    long Bg = cfg->train.batch_tokens / T;
    int micro = cfg->train.micro_batch;
    fprintf(f, "batch: %ld tokens = %ld sequences per step; micro-batch %d; world %d -> %ld accumulation steps per rank\n",
            cfg->train.batch_tokens, Bg, micro, world, (Bg / world + micro - 1) / micro);
    for (int cuda = 0; cuda < 2; cuda++) {
        char a[32], b[32], c[32], d[32], e[32], wk[32];
        double w = tt.n_floats * 4.0, g = w, opt = 2.0 * w / world, work = cuda ? tt.n_floats * 2.0 : 0;
        char merr[ERR_LEN];
        size_t arena_bytes = arena_estimate(m, micro, T, cuda ? 2 : 4, merr);
        if (!arena_bytes) {
            tensor_table_free(&tt);
            return set_err(err, "%s: [model] with [train] micro_batch %d and [data] seq_len %d: %s", cfg->source, micro,
                           T, merr);
        }
        double arena = (double)arena_bytes;
        human(w, a, 32); human(g, b, 32); human(opt, c, 32); human(arena, d, 32); human(work, wk, 32);
        human(w + g + opt + work + arena, e, 32);
        fprintf(f, "memory plan per rank, %s: weights %s + gradients %s + AdamW state %s%s%s + activations %s "
                "(micro-batch %d) = %s\n", cuda ? "CUDA backend (bf16 activations)" : "CPU backend (fp32)", a, b, c,
                cuda ? " + bf16 working weights " : "", cuda ? wk : "", d, micro, e);
    }
    tensor_table_free(&tt);
    return 0;
}

double step_rate_estimate(const Backend *be, const Config *cfg, char *how, size_t len) {
    const ModelConfig *m = &cfg->model;
    long M = (long)cfg->train.micro_batch * cfg->data.seq_len;
    int N = m->d_ff < 4096 ? m->d_ff : 4096, K = m->d_model < 4096 ? m->d_model : 4096;
    if (M > 2048) M = 2048;
    size_t e = be->act_bytes;
    act_t *a = be->alloc(be->ctx, (size_t)M * K * e), *w = be->alloc(be->ctx, (size_t)N * K * e),
          *c = be->alloc(be->ctx, (size_t)M * N * e);
    double rate = 0;
    if (!a || !w || !c) {
        snprintf(how, len, "no rate: the %s backend could not allocate a [%ld, %d] x [%d, %d] matmul to time", be->name,
                 M, K, K, N);
    } else {
        be->matmul_fwd(be->ctx, c, a, w, (int)M, N, K, 0);            /* warm-up (plans, pages) */
        be->synchronize(be->ctx);
        double t0 = clock_seconds();
        be->matmul_fwd(be->ctx, c, a, w, (int)M, N, K, 0);
        be->synchronize(be->ctx);
        double one = clock_seconds() - t0;
        int reps = one > 0 && one < 0.1 ? (int)(0.1 / one) + 1 : 1;
        for (int trial = 0; trial < 3; trial++) {
            t0 = clock_seconds();
            for (int r = 0; r < reps; r++) be->matmul_fwd(be->ctx, c, a, w, (int)M, N, K, 0);
            be->synchronize(be->ctx);
            double t = clock_seconds() - t0, r_t = t > 0 ? 2.0 * M * N * K * reps / t : 0;
            if (r_t > rate) rate = r_t;
        }
        int cuda = !strcmp(be->name, "cuda");
        double share = cuda ? 0.4 : 0.6;
        snprintf(how, len, "%.4g FLOP/s timed here for the %s backend's matmul at the step's MLP shape [%ld, %d] x "
                 "[%d, %d] (best of 3), x %.1f, %s", rate, be->name, M, K, K, N, share,
                 cuda ? "an assumed share of it for a whole CUDA training step (not measured)"
                      : "the share of it a whole CPU training step reaches (docs/performance.md: 48-89% of the step's "
                        "own GEMM rate)");
        rate *= share;
    }
    if (a) be->free(be->ctx, a);
    if (w) be->free(be->ctx, w);
    if (c) be->free(be->ctx, c);
    return rate;
}
