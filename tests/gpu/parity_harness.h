/* Shared helpers of the op parity table (tests/gpu/test_cuda_parity.c): the same inputs on the
 * CPU reference backend and the CUDA backend, and the comparison of their results.
 *
 * Inputs are normals * scale (+ offset) from one LCG stream, rounded to bf16 on the host, so
 * both backends see identical values. A result is compared by its normalised max error
 *     nerr = max_i |cuda_i - cpu_i| / max_i |cpu_i|      (max_i |cuda_i| when cpu is all zero)
 * against the case's tolerance, plus a NaN check. The check is named
 *     PARITY_NAME_PREFIX "<group>: <what>"   ("cuda_parity_" unless the includer defines it);
 * the stream starts at PARITY_SEED (12345 unless defined), so each test keeps its own inputs. */
#ifndef PHASELAB_TESTS_GPU_PARITY_HARNESS_H
#define PHASELAB_TESTS_GPU_PARITY_HARNESS_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "tests/check.h"

#ifndef PARITY_SEED
#define PARITY_SEED 12345
#endif
#ifndef PARITY_NAME_PREFIX
#define PARITY_NAME_PREFIX "cuda_parity_"
#endif

static const Backend *CPU, *GPU;
static uint64_t rng_state = PARITY_SEED;

static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

/* round to the nearest bf16 (ties to even) */
static float bfr(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* host array of n bf16-representable normals * scale (+ offset) */
static float *hrand(size_t n, double scale, double offset) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = bfr((float)(offset + scale * nrand()));
    return h;
}

static void *put_act(const Backend *be, const float *h, size_t n) {
    void *p = be->alloc(be->ctx, (n ? n : 1) * be->act_bytes);
    if (n) be->upload_act(be->ctx, p, h, n);
    return p;
}
static float *put_f32(const Backend *be, const float *h, size_t n) {
    float *p = be->alloc(be->ctx, (n ? n : 1) * sizeof(float));
    if (n) be->upload(be->ctx, p, h, n * sizeof(float));
    return p;
}
static inline void *put_i32(const Backend *be, const int32_t *h, size_t n) {
    void *p = be->alloc(be->ctx, (n ? n : 1) * sizeof(int32_t));
    if (n) be->upload(be->ctx, p, h, n * sizeof(int32_t));
    return p;
}
static float *get_act(const Backend *be, const void *p, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    be->synchronize(be->ctx);
    if (n) be->download_act(be->ctx, h, p, n);
    return h;
}
static float *get_f32(const Backend *be, const float *p, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    be->synchronize(be->ctx);
    if (n) be->download(be->ctx, h, p, n * sizeof(float));
    return h;
}

/* normalised max error of got against ref */
static double nerr(const float *ref, const float *got, size_t n, int *bad_nan) {
    double mref = 0.0, merr = 0.0;
    *bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) { *bad_nan = 1; continue; }
        double a = fabs(ref[i]);
        if (a > mref) mref = a;
        double e = fabs((double)got[i] - ref[i]);
        if (e > merr) merr = e;
    }
    return mref > 0 ? merr / mref : merr;
}

static void cmp(const char *group, const char *what, const float *ref, const float *got, size_t n, double tol) {
    char name[224];
    snprintf(name, sizeof name, PARITY_NAME_PREFIX "%s: %s", group, what);
    int nan_;
    double e = nerr(ref, got, n, &nan_);
    check(!nan_ && e <= tol, name, "normalised max error %.3g (tolerance %.3g)%s over %zu values", e, tol,
          nan_ ? ", non-finite values" : "", n);
}

/* both backends: upload the same host data */
typedef struct { void *c, *g; } Pair;
static Pair pa(const float *h, size_t n) { Pair p = {put_act(CPU, h, n), put_act(GPU, h, n)}; return p; }
static Pair pf(const float *h, size_t n) { Pair p = {put_f32(CPU, h, n), put_f32(GPU, h, n)}; return p; }
static inline Pair pi(const int32_t *h, size_t n) { Pair p = {put_i32(CPU, h, n), put_i32(GPU, h, n)}; return p; }
static Pair pnull(void) { Pair p = {NULL, NULL}; return p; }

static void cmp_act(const char *group, const char *what, Pair p, size_t n, double tol) {
    float *a = get_act(CPU, p.c, n), *b = get_act(GPU, p.g, n);
    cmp(group, what, a, b, n, tol);
    free(a); free(b);
}
static void cmp_f32(const char *group, const char *what, Pair p, size_t n, double tol) {
    float *a = get_f32(CPU, p.c, n), *b = get_f32(GPU, p.g, n);
    cmp(group, what, a, b, n, tol);
    free(a); free(b);
}
static void pfree(Pair p) {
    if (p.c) CPU->free(CPU->ctx, p.c);
    if (p.g) GPU->free(GPU->ctx, p.g);
}

#endif
