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
#include <stdlib.h>
#include <string.h>
#include "cli/summary.h"
#include "common/errors.h"
#include "model/model.h"
#include "model/tensors.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "model/decode.h"
#include "kernels/kernels.h"
#include "kernels/backend_profile.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"
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

/* ---- the step's work per op (print_step_work) ---- */

/* One row of the work table: calls, FLOPs, bytes. At most WORK_ROWS rows (op_rows and
 * matmul_rows stop adding there; a config has about 40). */
typedef struct { char label[80]; long calls; double flops, bytes; int order; } WorkRow;
enum { WORK_ROWS = 64 };

/* The step's predicted time on an H200, op by op (the model the first device run confirms or
 * refutes; docs/performance.md): t_op = max(FLOP / (PRED_FLOP_EFF x peak), bytes /
 * (PRED_BW_EFF x bandwidth)): a roofline at the efficiencies a tuned kernel reaches (cuBLASLt
 * GEMMs ~70% of the dense bf16 peak at these shapes, memory-bound kernels ~80% of HBM bandwidth).
 * Predicted MFU = model FLOPs / (sum of t_op x peak). Ops above PRED_FUSE_PCT of the step's time
 * are marked: the ones where fusing glue would pay (issue: fusion only above 5%). */
#define PRED_PEAK_FLOPS 989e12   /* H200 SXM dense bf16 (kernels/gpu_peaks.c) */
#define PRED_BW 4.8e12           /* H200 HBM3e bytes/s */
#define PRED_FLOP_EFF 0.70
#define PRED_BW_EFF 0.80
#define PRED_FUSE_PCT 5.0

static double predicted_s(const WorkRow *r) {
    const double tf = r->flops / (PRED_FLOP_EFF * PRED_PEAK_FLOPS), tb = r->bytes / (PRED_BW_EFF * PRED_BW);
    return tf > tb ? tf : tb;
}

/* t_sum > 0: the row is a total, whose time is the sum of its rows' (t_sum), not its own roofline */
static void work_row_print(FILE *f, const WorkRow *r, double total_flops, double total_s, double t_sum) {
    char ai[32] = "-", pct[32] = "-", ms[32] = "-", tpct[32] = "-";
    if (r->flops > 0 && r->bytes > 0) snprintf(ai, sizeof ai, "%.1f", r->flops / r->bytes);
    if (r->flops > 0 && total_flops > 0) snprintf(pct, sizeof pct, "%.1f", 100 * r->flops / total_flops);
    const double t = t_sum > 0 ? t_sum : predicted_s(r);
    if (t > 0) snprintf(ms, sizeof ms, "%.3f", 1e3 * t);
    if (t > 0 && total_s > 0) snprintf(tpct, sizeof tpct, "%.1f%s", 100 * t / total_s, 100 * t / total_s > PRED_FUSE_PCT ? "*" : "");
    fprintf(f, "  %-44s %7ld %12.2f %10.3f %9s %7s %10s %7s\n", r->label, r->calls, r->flops / 1e9, r->bytes / 1e9, ai, pct,
            ms, tpct);
}

/* the rows of the ops in `ops` (NULL-terminated {label, op} pairs) that were called */
static int op_rows(const Backend *prof, const char *const (*ops)[2], WorkRow *rows, int n) {
    for (int i = 0; ops[i][0]; i++) {
        OpProfile o;
        if (backend_profile_op(prof, ops[i][1], &o) || o.calls == 0 || n >= WORK_ROWS) continue;
        WorkRow *r = &rows[n++];
        snprintf(r->label, sizeof r->label, "%s (%s)", ops[i][0], ops[i][1]);
        r->calls = o.calls; r->flops = o.flops; r->bytes = o.bytes;
    }
    return n;
}

static int cmp_row_order(const void *a, const void *b) {
    const WorkRow *x = a, *y = b;
    return (x->order > y->order) - (x->order < y->order);
}

/* The matmuls of a micro-batch grouped by what they compute: a GEMM shape [M, N, K] is named by
 * the projections of the config with that [N, K] ("q + o" when two have the same shape: the
 * wrapper sees shapes, not tensors). */
static int matmul_rows(const Backend *prof, const ModelConfig *m, WorkRow *rows, int n) {
    const int D = m->d_model, Hd = m->n_heads * m->head_dim, Gd = m->n_kv_heads * m->head_dim, F = m->d_ff;
    const struct { const char *name; int N, K; } roles[] = {
        {"q|k|v", Hd + 2 * Gd, D}, {"q", Hd, D}, {"k, v", Gd, D}, {"o", D, Hd}, {"MLP gate, up", F, D}, {"MLP down", D, F}};
    static GemmProfile g[256];
    const int ng = backend_profile_gemms(prof, g, 256), first = n;
    for (int bwd = 0; bwd < 2; bwd++)
        for (int i = 0; i < ng; i++) {
            if ((g[i].product[0] == 'b') != bwd) continue;
            char label[80] = "matmul ";
            int order = 99;
            for (int k = (int)(sizeof roles / sizeof roles[0]) - 1; k >= 0; k--)
                if (roles[k].N == g[i].N && roles[k].K == g[i].K) order = k;
            for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
                if (roles[k].N == g[i].N && roles[k].K == g[i].K)
                    snprintf(label + strlen(label), sizeof label - strlen(label), "%s%s", order != (int)k ? " + " : "",
                             roles[k].name);
            if (order == 99) snprintf(label, sizeof label, "matmul [N %d, K %d]", g[i].N, g[i].K);
            snprintf(label + strlen(label), sizeof label - strlen(label), " %s", bwd ? "bwd" : "fwd");
            WorkRow *r = NULL;
            for (int j = first; j < n && !r; j++) if (!strcmp(rows[j].label, label)) r = &rows[j];
            if (!r) {
                if (n >= WORK_ROWS) continue;
                r = &rows[n++];
                memset(r, 0, sizeof *r);
                snprintf(r->label, sizeof r->label, "%s", label);
                r->order = 100 * bwd + order;
            }
            r->calls += g[i].calls; r->flops += g[i].flops; r->bytes += g[i].bytes;
        }
    qsort(rows + first, n - first, sizeof rows[0], cmp_row_order);   /* the projections in layer order */
    return n;
}

static const char *const MICRO_OPS[][2] = {
    {"attention forward", "attention_fwd"}, {"attention backward", "attention_bwd"},
    {"compressor forward", "compressor_fwd"}, {"compressor backward", "compressor_bwd"},
    {"gate-coverage penalty", "gate_coverage"}, {"classifier + cross-entropy", "classifier"},
    {"RMSNorm forward", "rmsnorm_fwd"}, {"RMSNorm backward", "rmsnorm_bwd"},
    {"residual RMSNorm bwd", "rmsnorm_bwd_residual"}, {"RoPE, forward and backward", "rope"},
    {"SwiGLU forward", "swiglu_fwd"}, {"SwiGLU backward", "swiglu_bwd"},
    {"embedding forward", "embedding_fwd"}, {"embedding backward", "embedding_bwd"},
    {"residual copies", "copy"}, {"q/k/v split and gather", "copy_2d"}, {"tied K/V gradient sum", "add"},
    {"token upload", "upload"}, {"loss sum", "loss_accumulate"},
    {"indexer scores", "indexer_scores"}, {"indexer top-k", "indexer_select"}, {"indexer KL term", "indexer_kl"},
    {"indexer scores backward", "indexer_scores_bwd"}, {NULL, NULL}};
static const char *const STEP_OPS[][2] = {
    {"zero the gradients", "zero"}, {"gradient norm", "sumsq"}, {"AdamW + bf16 working copy", "adamw_cast"}, {NULL, NULL}};

int print_step_work(FILE *f, const Config *cfg, int world, char *err) {
    const ModelConfig *mc = &cfg->model;
    const int T = cfg->data.seq_len, B = cfg->train.micro_batch;
    Backend *nop = backend_counting_nop(2);   /* bf16 activations: the CUDA backend's bytes */
    const Backend *prof = nop ? backend_profiled(nop) : NULL;
    if (!prof) { backend_counting_free(nop); return set_err(err, "out of memory"); }
    char merr[ERR_LEN];
    Model *m = model_create(mc, prof, B, T, merr);
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    Optimizer opt;
    memset(&opt, 0, sizeof opt);
    int rc = 0;
    if (!m || (cfg->train.gate_coverage > 0 && model_set_gate_coverage(m, cfg->train.gate_coverage, merr)) ||
        model_set_indexer(m, cfg->train.indexer_weight, 0, merr) ||
        optimizer_init(&opt, prof, &comm, model_tensors(m), cfg->train.beta1, cfg->train.beta2, cfg->train.eps,
                       cfg->train.weight_decay, cfg->train.grad_clip, merr)) {
        rc = set_err(err, "%s: the step's work at micro-batch %d x seq_len %d: %s", cfg->source, B, T, merr);
        goto done;
    }
    int32_t *tok = calloc((size_t)B * T, sizeof(int32_t));
    if (!tok) { rc = set_err(err, "out of memory"); goto done; }
    WorkRow rows[WORK_ROWS];
    /* one micro-batch: forward, backward (the trainer's call), and the step's own ops */
    backend_profile_reset(prof);
    model_accumulate_micro_batch(m, tok, tok, B, 1.0 / ((double)B * T));
    int n = matmul_rows(prof, mc, rows, 0), n_mm = n;
    n = op_rows(prof, MICRO_OPS, rows, n);
    const int n_micro = n;
    backend_profile_reset(prof);
    model_zero_grads(m);
    double gn;
    optimizer_step(&opt, m, 1e-4, 1, &gn);
    n = op_rows(prof, STEP_OPS, rows, n);
    free(tok);
    double micro_flops = 0, micro_bytes = 0, step_flops = 0, step_bytes = 0, mm_flops = 0;
    for (int i = 0; i < n; i++) {
        if (i < n_micro) { micro_flops += rows[i].flops; micro_bytes += rows[i].bytes; }
        else { step_flops += rows[i].flops; step_bytes += rows[i].bytes; }
        if (i < n_mm) mm_flops += rows[i].flops;
    }
    const long Bg = cfg->train.batch_tokens / T, accum = (Bg / world + B - 1) / B;
    fprintf(f, "\nthe step's work per op at micro-batch %d x seq_len %d: the model's own calls, counted with the formulas of\n"
               "  kernels/backend_profile.c; bytes with bf16 activations and fp32 master weights, gradients and AdamW state,\n"
               "  each tensor moved once (the CUDA backend's least traffic); compare FLOP/byte with a GPU's ridge point\n"
               "  (peak FLOP/s / memory bandwidth, e.g. 989e12 / 4.8e12 = 206 on an H200) and each op's time in a device\n"
               "  run's per-op table (bench_cuda with BENCH_PROFILE=1) with max(GFLOP / peak, GB / bandwidth)\n", B, T);
    double micro_s = 0;
    for (int i = 0; i < n_micro; i++) micro_s += predicted_s(&rows[i]);
    fprintf(f, "  H200 ms: the predicted time, max(GFLOP / (%.0f%% of %.0f TFLOP/s), GB / (%.0f%% of %.1f TB/s)); %% time of the\n"
               "  micro-batch, * above %.0f%% (where fusing an op's glue would pay)\n", 100 * PRED_FLOP_EFF,
            PRED_PEAK_FLOPS / 1e12, 100 * PRED_BW_EFF, PRED_BW / 1e12, PRED_FUSE_PCT);
    fprintf(f, "  %-44s %7s %12s %10s %9s %7s %10s %7s\n", "per micro-batch (forward + backward)", "calls", "GFLOP", "GB", "FLOP/byte",
            "% FLOP", "H200 ms", "% time");
    for (int i = 0; i < n_micro; i++) work_row_print(f, &rows[i], micro_flops, micro_s, 0);
    WorkRow total = {.label = "micro-batch total", .flops = micro_flops, .bytes = micro_bytes};
    for (int i = 0; i < n_micro; i++) total.calls += rows[i].calls;
    work_row_print(f, &total, micro_flops, 0, micro_s);
    fprintf(f, "  %-44s\n", "per optimizer step (one rank, all parameters)");
    for (int i = n_micro; i < n; i++) work_row_print(f, &rows[i], 0, 0, 0);
    const double mfu_flops = model_flops_per_token(mc, T) * B * T;
    double opt_s = 0;
    for (int i = n_micro; i < n; i++) opt_s += predicted_s(&rows[i]);
    const double step_s = accum * micro_s + opt_s;
    fprintf(f, "  predicted on one H200 (the roofline above: an upper bound, no overlap, no launch gaps): %.1f ms a micro-batch, %.2f s a step; "
               "MFU %.1f%% (the MFU count / (time x %.0f TFLOP/s))\n", 1e3 * micro_s, step_s,
            step_s > 0 ? 100 * accum * mfu_flops / (step_s * PRED_PEAK_FLOPS) : 0.0, PRED_PEAK_FLOPS / 1e12);
    fprintf(f, "  a step: %ld micro-batches x %.2f GFLOP + the optimizer = %.2f TFLOP, %.2f GB moved at the least; "
               "matmuls %.1f%% of the micro-batch FLOPs; the MFU count (model_flops_per_token x tokens: 3 x forward) "
               "gives %.2f GFLOP per micro-batch\n", accum, micro_flops / 1e9, (accum * micro_flops + step_flops) / 1e12,
            (accum * micro_bytes + step_bytes) / 1e9, micro_flops > 0 ? 100 * mm_flops / micro_flops : 0.0, mfu_flops / 1e9);
done:
    optimizer_free(&opt);
    if (m) model_free(m);
    backend_profile_free(prof);
    backend_counting_free(nop);
    return rc;
}

/* The layer stack of a schedule (model.layer_attention, docs/spec.md §5): per kind its layers,
 * geometry, parameters, forward FLOPs and decode-cache bytes per token (bf16, at seq_len). */
static void print_layer_stack(FILE *f, const ModelConfig *m, const TensorTable *tt, int T) {
    fprintf(f, "\n  layer stack (model.layer_attention = %s):\n", m->layer_attention);
    fprintf(f, "  %-10s %6s %-12s %10s %14s %18s %20s\n", "kind", "layers", "geometry", "entries@T", "params/layer",
            "fwd FLOPs/token/L", "cache B/token/L");
    for (int k = 0; k < N_KINDS; k++) {
        int n = 0, first = -1;
        for (int L = 0; L < m->n_layers; L++)
            if (layer_kind(m, L) == k) { if (first < 0) first = L; n++; }
        if (!n) continue;
        const ModelConfig lc = layer_config(m, first);
        const ModelDims ld = dims_of(&lc, T);
        char geo[32];
        if (lc.attention == ATTN_COMPRESSED) snprintf(geo, sizeof geo, "W%d/S%d+%d", lc.window, lc.stride, lc.n_local);
        else if (lc.attention == ATTN_WINDOW) snprintf(geo, sizeof geo, "raw%d", lc.n_local);
        else snprintf(geo, sizeof geo, "causal");
        size_t params = 0;
        for (int i = 0; i < tt->n; i++) if (tt->t[i].layer == first) params += tt->t[i].numel;
        DecodeCacheLayout lay;
        decode_cache_layout_layer(m, first, T, 2, &lay);
        fprintf(f, "  %-10s %6d %-12s %10d %14zu %18.4g %20.1f\n", layer_kind_names[k], n, geo, ld.n_windows, params,
                2.0 * model_layer_flops_per_token(&lc, T), (double)lay.layer_bytes / T);
    }
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
    if (dims.multirate) {   /* docs/spec.md §6.4 */
        fprintf(f, "\n  multi-rate strides: KV head g pools every S_g tokens, S_g =");
        for (int g = 0; g < m->n_kv_heads && g < 16; g++) fprintf(f, "%s%d", g ? ", " : " ", dims_head_stride(&dims, g));
        if (m->n_kv_heads > 16) fprintf(f, ", ...");
        int lo = dims.n_windows, hi = 0;
        for (int g = 0; g < m->n_kv_heads; g++) {
            const int n = dims_head_windows(&dims, g);
            if (n < lo) lo = n;
            if (n > hi) hi = n;
        }
        fprintf(f, " (windows per head at seq_len %d: %d..%d)", T, lo, hi);
    }
    if (m->token_shift && dims.compressed)   /* docs/spec.md §6.3 */
        fprintf(f, "\n  token shift: the compressor reads a_t + M a_{t-1} (M [%d, %d] per layer, 0 at init)", m->d_model, m->d_model);
    if (cfg->train.phase_jitter && dims.compressed)   /* docs/spec.md §6.2 */
        fprintf(f, "\n  phase jitter: in training, sequence g's grids are shifted by u = splitmix64(seed + phi (g + 1)) mod %d "
                "(%s); evaluation, decoding and the phase fold use u = 0", dims_shift_period(&dims),
                dims.multirate ? "the lcm of the KV heads' strides; offsets o_g + (u mod S_g)" : "offsets o_g + u");
    if (cfg->train.gate_coverage > 0)
        fprintf(f, "\n  training objective: cross-entropy + gate_coverage %g * mean over sequences of "
                "sum over layers and branches of (ln W - H(gbar)) (logged as /train/gate_coverage)", cfg->train.gate_coverage);
    fprintf(f, "\n  d_model %d, %d layers, %d query heads, %d KV heads, head_dim %d, d_ff %d, vocab %d, RoPE on %d dims\n",
            m->d_model, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->d_ff, m->vocab_size, m->rope_dims);
    if (m->layer_attention[0]) print_layer_stack(f, m, &tt, T);
    fprintf(f, "\n%-64s %-24s %14s\n", "tensor", "shape", "parameters");
    for (int i = 0; i < tt.n; i++) {
        const TensorInfo *t = &tt.t[i];
        /* a schedule: the first layer of each kind in full; else layer 0 and the last layer in full,
         * the identical middle layers elided */
        if (m->layer_attention[0] && t->layer >= 0) {
            int k = layer_kind(m, t->layer), first = 0;
            while (layer_kind(m, first) != k) first++;
            if (first != t->layer) continue;
        } else if (t->layer > 0 && t->layer < m->n_layers - 1) {
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
    return print_step_work(f, cfg, world, err);
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
