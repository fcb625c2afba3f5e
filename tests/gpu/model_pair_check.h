/* Whole-model parity of two backends, shared by test_cuda_model_parity.c and
 * test_cuda_staggered.c: the same config built on the CPU (the reference) and on the CUDA
 * backend, the same random parameters (tu_random_params, N(0, 0.05) matrices) and tokens, one
 * forward+backward on each, then
 *   gate-coverage penalty   |C_cuda - C_cpu| <= 2e-2 |C_cpu| + 1e-6, C_cpu > 0 (when lambda > 0)
 *   mean loss               |L_cuda - L_cpu| <= 2e-2 |L_cpu|
 *   per-token losses        max_i |l_cuda,i - l_cpu,i| <= 3e-2 max_i |l_cpu,i|
 *   every gradient tensor   ||g_cuda - g_cpu||_2 / ||g_cpu||_2 <= grad_tol, all finite
 * With shift given, both models run with those per-sequence grid shifts (phase jitter).
 * With indexer_weight > 0 (csa layers with the lightning indexer, docs/spec.md §5.4) the KL term is
 * on (model_set_indexer, dense or top-k) and checked too:
 *   KL sum                  |KL_cuda - KL_cpu| <= kl_tol |KL_cpu|, the same query count, KL_cpu > 0
 * and the indexer's tensors (".indexer." in the name) are held to indexer_grad_tol instead.
 * zero_tensor: the tensors whose name contains it are set to 0 on both sides (NULL: none).
 * cuda_grad_hash (may be NULL) gets an FNV-1a hash of the CUDA gradients' bits, so that a caller
 * can tell two runs on one draw apart (the fp32 and bf16 residual gradients, which the tolerances
 * alone cannot); grad_worst (may be NULL) the largest relative L2 error of a non-indexer tensor.
 * Each check is named "PREFIX: what" (PREFIX names the case). The tolerances and why they are
 * what they are: the header of test_cuda_model_parity.c. */
#ifndef PHASELAB_TESTS_GPU_MODEL_PAIR_CHECK_H
#define PHASELAB_TESTS_GPU_MODEL_PAIR_CHECK_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

typedef struct {
    const char *prefix;          /* check names: "PREFIX: mean loss", ... */
    int B, T;                    /* sequences and tokens of the one step */
    double lambda;               /* train.gate_coverage (0: the penalty is off) */
    uint64_t param_seed, token_seed, target_seed;
    int ignore_one_target;       /* 1: target 5 is -1 (an ignored position), the loss over B*T - 1 */
    double grad_tol;             /* relative L2 tolerance of every gradient tensor */
    const int32_t *shift;        /* [B] per-sequence grid shifts (docs/spec.md §6.2), or NULL */
    double indexer_weight;       /* train.indexer_weight (0: the indexer's KL term is off) */
    int indexer_dense;           /* 1: the dense warm-up (every visible entry) */
    double kl_tol, indexer_grad_tol;
    const char *zero_tensor;     /* tensors whose name contains it start at 0 (NULL: none) */
    uint64_t *cuda_grad_hash;    /* out (may be NULL): FNV-1a of the CUDA gradient floats' bits */
    double *grad_worst;          /* out (may be NULL): the largest relative L2 gradient error */
    double boundary_bias_grad_tol; /* > 0: the tolerance of the learned boundaries' bias gradients
                                    (".compressor.boundary.bias", docs/spec.md §6.5) instead of grad_tol */
} ModelPairCase;

static inline int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void model_pair_check(const Backend *cpu, const Backend *gpu, const ModelConfig *cfg, const ModelPairCase *pc) {
    const int B = pc->B, T = pc->T, n = B * T;
    char err[ERR_LEN] = "", name[256];
    Model *mc = model_create(cfg, cpu, B, T, err);
    snprintf(name, sizeof name, "%s: cpu model builds", pc->prefix);
    if (!check(mc != NULL, name, "%s", err)) return;
    Model *mg = model_create(cfg, gpu, B, T, err);
    snprintf(name, sizeof name, "%s: cuda model builds", pc->prefix);
    if (!check(mg != NULL, name, "%s", err)) { model_free(mc); return; }
    if (pc->lambda > 0) {
        int rc1 = model_set_gate_coverage(mc, pc->lambda, err);
        int rc2 = rc1 ? 0 : model_set_gate_coverage(mg, pc->lambda, err);
        snprintf(name, sizeof name, "%s: gate coverage enabled", pc->prefix);
        if (!check(!rc1 && !rc2, name, "%s", err)) { model_free(mc); model_free(mg); return; }
    }
    if (pc->shift) {
        int rc1 = model_set_grid_shift(mc, pc->shift, B, err);
        int rc2 = rc1 ? 0 : model_set_grid_shift(mg, pc->shift, B, err);
        snprintf(name, sizeof name, "%s: grid shifts set", pc->prefix);
        if (!check(!rc1 && !rc2, name, "%s", err)) { model_free(mc); model_free(mg); return; }
    }
    if (pc->indexer_weight > 0) {
        int rc1 = model_set_indexer(mc, pc->indexer_weight, pc->indexer_dense, err);
        int rc2 = rc1 ? 0 : model_set_indexer(mg, pc->indexer_weight, pc->indexer_dense, err);
        snprintf(name, sizeof name, "%s: indexer KL term enabled", pc->prefix);
        if (!check(!rc1 && !rc2, name, "%s", err)) { model_free(mc); model_free(mg); return; }
    }
    tu_random_params(mc, pc->param_seed, 0.05);
    const TensorTable *tt = model_tensors(mc);
    float *host = calloc(tt->n_floats, sizeof(float));
    float *gc = calloc(tt->n_floats, sizeof(float)), *gg = calloc(tt->n_floats, sizeof(float));
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n);
    float *lc = malloc(sizeof(float) * n), *lg = malloc(sizeof(float) * n);   /* [B*T] token losses */
    model_download_params(mc, host);
    if (pc->zero_tensor) {
        for (int i = 0; i < tt->n; i++)
            if (strstr(tt->t[i].name, pc->zero_tensor)) memset(host + tt->t[i].offset, 0, tt->t[i].numel * sizeof(float));
        model_upload_params(mc, host);
    }
    model_upload_params(mg, host);
    tu_random_tokens(tok, n, cfg->vocab_size, pc->token_seed);
    tu_random_tokens(tgt, n, cfg->vocab_size, pc->target_seed);
    if (pc->ignore_one_target) tgt[5] = -1;
    const double scale = 1.0 / (n - (pc->ignore_one_target ? 1 : 0));
    model_zero_grads(mc);
    model_zero_grads(mg);
    double Lc = model_forward_backward(mc, tok, tgt, B, scale, lc);
    double Lg = model_forward_backward(mg, tok, tgt, B, scale, lg);
    if (pc->lambda > 0) {
        double Cc = model_gate_coverage(mc, B), Cg = model_gate_coverage(mg, B);
        snprintf(name, sizeof name, "%s: gate coverage penalty", pc->prefix);
        printf("# %s: cpu %.6g cuda %.6g\n", name, Cc, Cg);
        check(isfinite(Cg) && Cc > 0 && fabs(Cg - Cc) <= 2e-2 * fabs(Cc) + 1e-6, name, "cpu %.6g cuda %.6g", Cc, Cg);
    }
    if (pc->indexer_weight > 0) {
        long nc = 0, ng = 0;
        double Kc = model_indexer_kl(mc, &nc), Kg = model_indexer_kl(mg, &ng);
        snprintf(name, sizeof name, "%s: indexer KL", pc->prefix);
        printf("# %s: cpu %.6g cuda %.6g (relative %.3g) over %ld / %ld queries\n", name, Kc, Kg, fabs(Kg - Kc) / fabs(Kc), nc, ng);
        check(isfinite(Kg) && Kc > 0 && nc == ng && fabs(Kg - Kc) <= pc->kl_tol * fabs(Kc), name,
              "cpu %.6g cuda %.6g over %ld / %ld queries", Kc, Kg, nc, ng);
    }
    snprintf(name, sizeof name, "%s: mean loss", pc->prefix);
    printf("# %s: cpu %.6f cuda %.6f\n", name, Lc, Lg);
    check(isfinite(Lg) && fabs(Lg - Lc) <= 2e-2 * fabs(Lc), name, "cpu %.6f cuda %.6f", Lc, Lg);
    double mx = 0, me = 0;
    for (int i = 0; i < n; i++) {
        if (fabs(lc[i]) > mx) mx = fabs(lc[i]);
        if (fabs(lc[i] - lg[i]) > me || !isfinite(lg[i])) me = isfinite(lg[i]) ? fabs(lc[i] - lg[i]) : INFINITY;
    }
    snprintf(name, sizeof name, "%s: token losses", pc->prefix);
    printf("# %s: normalised max error %.3g\n", name, mx > 0 ? me / mx : me);
    check(me <= 3e-2 * mx, name, "normalised max error %.3g", mx > 0 ? me / mx : me);
    cpu->download(cpu->ctx, gc, model_grads(mc), tt->n_floats * sizeof(float));
    gpu->synchronize(gpu->ctx);
    gpu->download(gpu->ctx, gg, model_grads(mg), tt->n_floats * sizeof(float));
    int bad = 0;
    double worst = 0, worst_ind = 0, *rels = calloc(tt->n, sizeof(double));   /* [tensors] relative L2 errors */
    const char *worst_name = "", *worst_ind_name = "";
    char why[1024] = "";
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        double nc = 0, nd = 0;
        int finite = 1;
        for (size_t j = 0; j < t->numel; j++) {
            double a = gc[t->offset + j], b = gg[t->offset + j];
            if (!isfinite(b)) finite = 0;
            nc += a * a;
            nd += (a - b) * (a - b);
        }
        double rel = nc > 0 ? sqrt(nd / nc) : sqrt(nd);
        const int ind = strstr(t->name, ".indexer.") != NULL;
        rels[i] = rel;
        if (ind && rel > worst_ind) { worst_ind = rel; worst_ind_name = t->name; }
        if (!ind && rel > worst) { worst = rel; worst_name = t->name; }
        /* the learned boundaries' bias (docs/spec.md §6.5): boundary_bias_grad_tol when set */
        const int bd_bias = pc->boundary_bias_grad_tol > 0 && strstr(t->name, ".compressor.boundary.bias") != NULL;
        if (!finite || rel > (ind && pc->indexer_weight > 0 ? pc->indexer_grad_tol : bd_bias ? pc->boundary_bias_grad_tol : pc->grad_tol)) {
            bad++;
            size_t len = strlen(why);
            if (len < sizeof why - 128)
                snprintf(why + len, sizeof why - len, "%s%s rel L2 %.3g%s", bad > 1 ? "; " : "", t->name, rel,
                         finite ? "" : " (non-finite)");
        }
    }
    if (pc->cuda_grad_hash) {
        uint64_t h = 1469598103934665603ull;
        const unsigned char *bytes = (const unsigned char *)gg;
        for (size_t j = 0; j < tt->n_floats * sizeof(float); j++) h = (h ^ bytes[j]) * 1099511628211ull;
        *pc->cuda_grad_hash = h;
    }
    if (pc->grad_worst) *pc->grad_worst = worst;
    qsort(rels, tt->n, sizeof(double), cmp_double);
    printf("# %s: largest gradient relative L2 error %.3g (%s), median over the %d tensors %.3g\n", pc->prefix, worst,
           worst_name, tt->n, rels[tt->n / 2]);
    free(rels);
    if (pc->indexer_weight > 0)
        printf("# %s: largest indexer gradient relative L2 error %.3g (%s)\n", pc->prefix, worst_ind, worst_ind_name);
    snprintf(name, sizeof name, "%s: gradients of %d tensors", pc->prefix, tt->n);
    check(bad == 0, name, "%d tensors differ: %s", bad, why);
    free(host); free(gc); free(gg); free(tok); free(tgt); free(lc); free(lg);
    model_free(mc);
    model_free(mg);
}
#endif
