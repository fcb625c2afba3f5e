/* The owned optimizer step on the CUDA backend (Backend.adamw_cast, trainer/optimizer.h) and the
 * step's loss kept on the device (Backend.loss_accumulate).
 *
 *   adamw_cast op: the same random p, g, m, v [n] on the CPU and CUDA backends, clip factor
 *     gscale = 0.37 and 1, three steps: p, m, v agree to fp32 tolerance (normalised max error
 *     <= 1e-6) with the CPU's AdamW of g * gscale; and the bf16 working copy w written in the
 *     same pass equals, bit for bit, the round-to-nearest-even bf16 of the CUDA fp32 master p
 *     (computed here on the host from the fp32 bits, independently of the backend).
 *   optimizer_step on a model: a tiny model (full and compressed attention) on the CUDA backend,
 *     two training steps through model_accumulate_micro_batch + optimizer_step, with no other
 *     call in between: afterwards the model's working weights (what the forward reads) equal the
 *     bf16 cast of its fp32 master bit for bit over all n_floats — a step that left the working
 *     copy stale fails here — and the master moved (the step was applied).
 *   loss_accumulate: the step's loss sum on the device equals the sum over the micro-batches of
 *     mean * B * T from model_forward_backward on the same data and weights (relative 1e-6), and
 *     the op on the CPU equals the host's double sum in index order exactly.
 * Without a GPU (or without a CUDA build) each group prints one skip line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "common/errors.h"
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "model/model.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"

static const char *GROUPS[] = {"owned_step_adamw_cast", "owned_step_model", "owned_step_loss"};
#define N_GROUPS ((int)(sizeof GROUPS / sizeof GROUPS[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    for (int i = 0; i < N_GROUPS; i++) check_skip(GROUPS[i], "no GPU (built without CUDA)");
    return 0;
}
#else

/* fp32 -> bf16 bits, round to nearest even (finite inputs) */
static uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static double nrand(uint64_t *s) { return tu_normal(s); }

static void *put(const Backend *be, const void *h, size_t bytes) {
    void *p = be->alloc(be->ctx, bytes);
    be->upload(be->ctx, p, h, bytes);
    return p;
}

static double max_rel_err(const float *a, const float *b, size_t n) {
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(b[i])) return INFINITY;
        e = fmax(e, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)a[i]));
    }
    return s > 0 ? e / s : e;
}

/* Counts the working-copy elements whose bits differ from the cast of the master. */
static size_t stale_count(const Backend *be, const float *master, const void *work, size_t n, size_t *first) {
    float *p = malloc(n * sizeof(float));
    uint16_t *w = malloc(n * sizeof(uint16_t));
    be->download(be->ctx, p, master, n * sizeof(float));
    be->download(be->ctx, w, work, n * sizeof(uint16_t));
    size_t bad = 0;
    *first = n;
    for (size_t i = 0; i < n; i++)
        if (w[i] != bf16_rne(p[i])) { if (!bad) *first = i; bad++; }
    free(p); free(w);
    return bad;
}

static void test_adamw_cast(const Backend *CPU, const Backend *GPU) {
    const size_t n = 100003;
    uint64_t s = 12;
    float *h[4];
    for (int k = 0; k < 4; k++) h[k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        h[0][i] = (float)nrand(&s); h[1][i] = (float)(0.1 * nrand(&s)); h[2][i] = (float)(0.01 * nrand(&s));
        h[3][i] = (float)(1e-4 * tu_uniform(&s));
    }
    const float gscales[2] = {0.37f, 1.0f};
    for (int gi = 0; gi < 2; gi++) {
        float *cp = put(CPU, h[0], n * 4), *cg = put(CPU, h[1], n * 4), *cm = put(CPU, h[2], n * 4), *cv = put(CPU, h[3], n * 4);
        float *gp = put(GPU, h[0], n * 4), *gg = put(GPU, h[1], n * 4), *gm = put(GPU, h[2], n * 4), *gv = put(GPU, h[3], n * 4);
        act_t *gw = GPU->alloc(GPU->ctx, n * GPU->act_bytes);
        for (int step = 1; step <= 3; step++) {
            float bc1 = (float)(1.0 - pow(0.9, step)), bc2 = (float)(1.0 - pow(0.95, step));
            CPU->adamw_cast(CPU->ctx, cp, (act_t *)cp, cg, cm, cv, n, gscales[gi], 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
            GPU->adamw_cast(GPU->ctx, gp, gw, gg, gm, gv, n, gscales[gi], 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
        }
        float *a = malloc(n * 4), *b = malloc(n * 4);
        const char *what[3] = {"p", "m", "v"};
        float *cpu_buf[3] = {cp, cm, cv}, *gpu_buf[3] = {gp, gm, gv};
        for (int k = 0; k < 3; k++) {
            CPU->download(CPU->ctx, a, cpu_buf[k], n * 4);
            GPU->download(GPU->ctx, b, gpu_buf[k], n * 4);
            double e = max_rel_err(a, b, n);
            char name[96];
            snprintf(name, sizeof name, "owned_step_adamw_cast: %s vs CPU AdamW, gscale %g", what[k], gscales[gi]);
            check(e <= 1e-6, name, "normalised max error %.3g (tolerance 1e-6)", e);
        }
        size_t first, bad = stale_count(GPU, gp, gw, n, &first);
        char name[96];
        snprintf(name, sizeof name, "owned_step_adamw_cast: bf16 copy == cast of the fp32 master, gscale %g", gscales[gi]);
        check(bad == 0, name, "%zu of %zu elements differ (first at %zu)", bad, n, first);
        free(a); free(b);
        float *bufs[8] = {cp, cg, cm, cv, gp, gg, gm, gv};
        for (int k = 0; k < 8; k++) (k < 4 ? CPU : GPU)->free((k < 4 ? CPU : GPU)->ctx, bufs[k]);
        GPU->free(GPU->ctx, gw);
    }
    for (int k = 0; k < 4; k++) free(h[k]);
}

static void test_model_step(const Backend *GPU) {
    const int T = 32, B = 2;
    for (int variant = 0; variant < 2; variant++) {
        ModelConfig cfg = tu_tiny_config();
        if (variant) cfg.attention = ATTN_COMPRESSED;
        const char *vname = variant ? "compressed" : "full";
        char err[ERR_LEN] = "", name[128];
        Model *m = model_create(&cfg, GPU, B, T, err);
        if (!m) { check(0, "owned_step_model: model_create", "%s", err); continue; }
        tu_random_params(m, 7 + variant, 0.05);
        Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
        Optimizer opt;
        memset(&opt, 0, sizeof opt);
        if (optimizer_init(&opt, GPU, &comm, model_tensors(m), 0.9, 0.95, 1e-8, 0.1, 1.0, err)) {
            check(0, "owned_step_model: optimizer_init", "%s", err);
            model_free(m);
            continue;
        }
        const size_t n = model_tensors(m)->n_floats;
        float *before = malloc(n * 4), *after = malloc(n * 4);
        model_download_params(m, before);
        int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
        int applied = 1;
        double dev_loss = 0.0, host_loss = 0.0;
        for (int step = 0; step < 2; step++) {
            tu_random_tokens(tok, B * T, cfg.vocab_size, 100 + step);
            tu_random_tokens(tgt, B * T, cfg.vocab_size, 200 + step);
            if (step == 1) {   /* the host mean of the same forward, for the loss check */
                model_zero_grads(m);
                host_loss = model_forward_backward(m, tok, tgt, B, 1.0 / (B * T), NULL) * B * T;
            }
            model_zero_grads(m);
            model_accumulate_micro_batch(m, tok, tgt, B, 1.0 / (B * T));
            if (step == 1) dev_loss = model_step_loss_sum(m);
            double gn;
            applied &= optimizer_step(&opt, m, 1e-2, 1, &gn);
        }
        model_download_params(m, after);
        size_t moved = 0;
        for (size_t i = 0; i < n; i++) moved += before[i] != after[i];
        snprintf(name, sizeof name, "owned_step_model: %s: two steps applied and the master moved", vname);
        check(applied && moved > n / 2, name, "applied %d, %zu of %zu parameters changed", applied, moved, n);
        size_t first, bad = stale_count(GPU, model_params(m), model_working_params(m), n, &first);
        snprintf(name, sizeof name, "owned_step_model: %s: working bf16 weights == cast of the fp32 master", vname);
        check(bad == 0, name, "%zu of %zu stale working weights (first at %zu)", bad, n, first);
        double rel = fabs(dev_loss - host_loss) / fabs(host_loss);
        snprintf(name, sizeof name, "owned_step_loss: %s: device step loss sum == host mean * B * T", vname);
        check(rel <= 1e-6 && host_loss > 0, name, "device %.9g host %.9g (relative %.2g)", dev_loss, host_loss, rel);
        free(before); free(after); free(tok); free(tgt);
        optimizer_free(&opt);
        model_free(m);
    }
}

/* The CPU op against the host arithmetic it replaced, exactly (ignored targets included). */
static void test_loss_cpu(const Backend *CPU) {
    const int rows = 3, cols = 37, N = rows * cols;
    float l[111];
    int32_t t[111];
    uint64_t s = 5;
    double sum = 0.0;
    long count = 0;
    for (int i = 0; i < N; i++) {
        l[i] = (float)(3.0 + nrand(&s));
        t[i] = i % 7 == 3 ? -1 : i;
        if (t[i] >= 0) { sum += l[i]; count++; }
    }
    double want = 1.25 + sum / count * rows * cols;
    double *acc = put(CPU, &(double){1.25}, sizeof(double));
    float *dl = put(CPU, l, sizeof l);
    int32_t *dt = put(CPU, t, sizeof t);
    CPU->loss_accumulate(CPU->ctx, acc, dl, dt, rows, cols);
    check(acc[0] == want, "owned_step_loss: CPU loss_accumulate == host sum / count * rows * cols",
          "%.17g vs %.17g", acc[0], want);
    CPU->free(CPU->ctx, acc); CPU->free(CPU->ctx, dl); CPU->free(CPU->ctx, dt);
}

int main(void) {
    char err[ERR_LEN] = "";
    const Backend *CPU = backend_cpu(0), *GPU = backend_cuda(0, err);
    if (!GPU) {
        for (int i = 0; i < N_GROUPS; i++) check_skip(GROUPS[i], "no GPU");
        fprintf(stderr, "(%s)\n", err);
        return 0;
    }
    test_adamw_cast(CPU, GPU);
    test_model_step(GPU);
    test_loss_cpu(CPU);
    return check_exit_code();
}
#endif
