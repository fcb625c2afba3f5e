/* The CPU classifier (kernels/cpu/cpu_classifier.c, docs/spec.md §1.5) against a double-precision
 * reference computed here, on both of its paths:
 *   row chunks         V <= 4096 (V = 1000);
 *   vocabulary chunks  V > 4096 (V = 5000, N = 300: chunks of 3456 and 1544 columns, the last ragged;
 *                      V = 151936 at N = 8: a few rows, many chunks);
 * losses (0 where target < 0), dx = g (softmax - onehot) E, dE += g (softmax - onehot)^T x
 * accumulated onto a non-zero start; forward-only losses equal the losses with gradients bit for
 * bit; 1 and 2 threads agree to float rounding; logits_argmax is the reference's argmax. The
 * vocabulary-chunk cases run on both of that path's routes: pass 1's exps kept for pass 2 (the
 * default budget) and the logits recomputed (PHASELAB_CLASSIFIER_KEEP_MB=0). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_internal.h"   /* BackendCtx.cls_keep_bytes: which route ran */

static uint64_t rng = 88172645463325252ull;
static const char *g_route = "";   /* the vocabulary path's route, in the check names */
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static act_t *up(const Backend *be, const float *h, size_t n) {
    act_t *p = be->alloc(be->ctx, sizeof(float) * n);
    be->upload_act(be->ctx, p, h, n);
    return p;
}

static double rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

static void run_case(int N, int D, int V, double scale) {
    char name[160];
    float *x = malloc(sizeof(float) * N * D), *e = malloc(sizeof(float) * (size_t)V * D);
    float *de0 = malloc(sizeof(float) * (size_t)V * D);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * D; i++) x[i] = (float)(2 * urand() - 1);
    for (size_t i = 0; i < (size_t)V * D; i++) e[i] = (float)((2 * urand() - 1) * scale), de0[i] = (float)(1e-3 * (urand() - 0.5));
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)(urand() * V) % V;
    tg[N - 1] = V - 1;                                 /* a target in the last (ragged) chunk */
    const float g = 1.0f / N;
    /* reference, double */
    double *loss = calloc(N, sizeof(double)), *dx = calloc((size_t)N * D, sizeof(double));
    double *de = malloc(sizeof(double) * (size_t)V * D), *l = malloc(sizeof(double) * V);
    int32_t *am_ref = malloc(sizeof(int32_t) * N);
    for (size_t i = 0; i < (size_t)V * D; i++) de[i] = de0[i];
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        int best = 0;
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int k = 0; k < D; k++) a += (double)x[n * D + k] * e[(size_t)v * D + k];
            l[v] = a;
            if (a > mx) mx = a, best = v;
        }
        am_ref[n] = best;
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        if (tg[n] < 0) continue;
        loss[n] = mx + log(s) - l[tg[n]];
        for (int v = 0; v < V; v++) {
            double p = g * (exp(l[v] - mx) / s - (v == tg[n]));
            for (int k = 0; k < D; k++) dx[n * D + k] += p * e[(size_t)v * D + k], de[(size_t)v * D + k] += p * x[n * D + k];
        }
    }
    float *got[2][4];
    for (int th = 0; th < 2; th++) {
        const Backend *be = backend_cpu(th + 1);
        act_t *xb = up(be, x, (size_t)N * D), *eb = up(be, e, (size_t)V * D), *dxb = be->alloc(be->ctx, sizeof(float) * N * D);
        float *deb = be->alloc(be->ctx, sizeof(float) * (size_t)V * D), *lb = be->alloc(be->ctx, sizeof(float) * N);
        float *lf = be->alloc(be->ctx, sizeof(float) * N);
        int32_t *tb = be->alloc(be->ctx, sizeof(int32_t) * N), *amb = be->alloc(be->ctx, sizeof(int32_t) * N);
        be->upload(be->ctx, tb, tg, sizeof(int32_t) * N);
        be->upload(be->ctx, deb, de0, sizeof(float) * (size_t)V * D);
        be->classifier(be->ctx, xb, eb, tb, N, D, V, lb, dxb, deb, g);
        be->classifier(be->ctx, xb, eb, tb, N, D, V, lf, NULL, NULL, g);
        be->logits_argmax(be->ctx, xb, eb, N, D, V, amb);
        for (int k = 0; k < 4; k++) got[th][k] = malloc(sizeof(float) * (size_t)V * D);
        be->download(be->ctx, got[th][0], lb, sizeof(float) * N);
        be->download_act(be->ctx, got[th][1], dxb, (size_t)N * D);
        be->download(be->ctx, got[th][2], deb, sizeof(float) * (size_t)V * D);
        be->download(be->ctx, got[th][3], lf, sizeof(float) * N);
        int32_t *am = malloc(sizeof(int32_t) * N);
        be->download(be->ctx, am, amb, sizeof(int32_t) * N);
        int wrong = 0;
        for (int n = 0; n < N; n++) wrong += am[n] != am_ref[n];
        snprintf(name, sizeof name, "classifier N=%d D=%d V=%d%s threads %d: logits_argmax = the reference's", N, D, V, g_route, th + 1);
        check(wrong == 0, name, "%d of %d rows differ", wrong, N);
        free(am);
        be->free(be->ctx, xb), be->free(be->ctx, eb), be->free(be->ctx, dxb), be->free(be->ctx, deb);
        be->free(be->ctx, lb), be->free(be->ctx, lf), be->free(be->ctx, tb), be->free(be->ctx, amb);
    }
    double eloss = rel_err(got[0][0], loss, N), edx = rel_err(got[0][1], dx, (size_t)N * D);
    double *dde = malloc(sizeof(double) * (size_t)V * D);   /* the change of dE: what was added */
    float *gde = malloc(sizeof(float) * (size_t)V * D);
    for (size_t i = 0; i < (size_t)V * D; i++) dde[i] = de[i] - de0[i], gde[i] = got[0][2][i] - de0[i];
    double ede = rel_err(gde, dde, (size_t)V * D);
    int zero_ok = 1;
    for (int n = 0; n < N; n++) if (tg[n] < 0 && got[0][0][n] != 0.0f) zero_ok = 0;
    snprintf(name, sizeof name, "classifier N=%d D=%d V=%d%s: losses, dx, dE += against double", N, D, V, g_route);
    check(eloss < 1e-5 && edx < 1e-4 && ede < 1e-4 && zero_ok, name, "rel err loss %.2e dx %.2e dE %.2e, zero where no target %d",
          eloss, edx, ede, zero_ok);
    snprintf(name, sizeof name, "classifier N=%d D=%d V=%d%s: forward-only losses equal bit for bit", N, D, V, g_route);
    check(!memcmp(got[0][0], got[0][3], sizeof(float) * N) && !memcmp(got[1][0], got[1][3], sizeof(float) * N), name, "differ");
    double d_th = 0;
    for (int n = 0; n < N; n++) d_th = fmax(d_th, fabs(got[0][0][n] - got[1][0][n]));
    snprintf(name, sizeof name, "classifier N=%d D=%d V=%d%s: 1 and 2 threads agree", N, D, V, g_route);
    check(d_th < 1e-5, name, "max loss difference %.3g", d_th);
    for (int th = 0; th < 2; th++) for (int k = 0; k < 4; k++) free(got[th][k]);
    free(x), free(e), free(de0), free(tg), free(loss), free(dx), free(de), free(l), free(am_ref), free(dde), free(gde);
}

int main(void) {
    run_case(37, 16, 1000, 0.5);      /* row chunks */
    unsetenv("PHASELAB_CLASSIFIER_KEEP_MB");
    run_case(300, 16, 5000, 0.5);     /* vocabulary chunks of 3456 + 1544, exps kept */
    run_case(8, 8, 151936, 1.0);      /* the Qwen3 vocabulary: 19 chunks of 8192 columns, exps kept */
    const size_t kept1 = backend_cpu(1)->ctx->cls_keep_bytes, kept2 = backend_cpu(2)->ctx->cls_keep_bytes;
    check(kept1 >= sizeof(float) * 300 * 5000 && kept2 >= sizeof(float) * 300 * 5000,
          "classifier: the default budget keeps pass 1's exps (the buffer exists)", "%zu and %zu bytes kept", kept1, kept2);
    setenv("PHASELAB_CLASSIFIER_KEEP_MB", "0", 1);
    g_route = " (logits recomputed)";
    run_case(300, 16, 5000, 0.5);
    run_case(8, 8, 151936, 1.0);
    return check_exit_code();
}
