/* The CUDA backend's GEMM plan cache falls back instead of aborting (kernels/cuda/cuda_backend.cu):
 *   - more GEMM shapes than the cache holds: the least recently used plan is replaced, and every
 *     product stays right (PHASELAB_GEMM_PLAN_CAP=3, 8 shapes, each run twice, interleaved);
 *   - a cuBLASLt algorithm that fails at launch: the next candidate of the heuristic is used
 *     (only in the CPU emulator of CUDA, whose knob CUEMU_LT_FAILING_ALGOS=1 makes the best
 *     candidate fail; a real GPU does not fail on request, so that check is skipped there).
 * Reference: the product computed here in double from the same bf16-rounded inputs; tolerance
 * bf16 output rounding, |diff| <= 2^-7 (1 + |ref|). Without a GPU (or a CUDA build): skips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "kernels/kernels.h"
#include "common/errors.h"

#ifndef PHASELAB_CUDA
int main(void) {
    check_skip("cuda_gemm_plans lru", "no GPU (built without CUDA)");
    check_skip("cuda_gemm_plans algorithm fallback", "no GPU (built without CUDA)");
    return 0;
}
#else
#define N_SHAPES 8
static const int shapes[N_SHAPES][3] = {   /* M, N, K */
    {4, 8, 16}, {5, 8, 16}, {6, 12, 8}, {7, 16, 24}, {3, 4, 32}, {9, 20, 8}, {2, 2, 2}, {11, 6, 10}};

static float bf16_round(float x) {   /* round to nearest even, as the backend's upload does */
    unsigned u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* out [M,N] = in [M,K] @ w[N,K]^T through be->matmul_fwd; returns the worst excess over the
 * tolerance (<= 0: every element within) */
static double run_shape(const Backend *be, int M, int N, int K, unsigned seed) {
    float *in = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), *out = malloc(sizeof(float) * M * N);
    srand(seed);
    for (int i = 0; i < M * K; i++) in[i] = bf16_round((float)rand() / RAND_MAX - 0.5f);
    for (int i = 0; i < N * K; i++) w[i] = bf16_round((float)rand() / RAND_MAX - 0.5f);
    act_t *d_in = be->alloc(be->ctx, (size_t)M * K * 2), *d_w = be->alloc(be->ctx, (size_t)N * K * 2);
    act_t *d_out = be->alloc(be->ctx, (size_t)M * N * 2);
    be->upload_act(be->ctx, d_in, in, (size_t)M * K);
    be->upload_act(be->ctx, d_w, w, (size_t)N * K);
    be->matmul_fwd(be->ctx, d_out, d_in, d_w, M, N, K, 0);
    be->download_act(be->ctx, out, d_out, (size_t)M * N);
    double worst = -1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += (double)in[i * K + k] * w[j * K + k];
            double excess = fabs(out[i * N + j] - ref) - (1.0 + fabs(ref)) / 128.0;
            if (excess > worst) worst = excess;
        }
    be->free(be->ctx, d_in), be->free(be->ctx, d_w), be->free(be->ctx, d_out);
    free(in), free(w), free(out);
    return worst;
}

int main(void) {
    setenv("PHASELAB_GEMM_PLAN_CAP", "3", 1);   /* read when the backend is made */
    char err[ERR_LEN] = "";
    const Backend *be = backend_cuda(0, err);
    if (!be) {
        check_skip("cuda_gemm_plans lru", "no GPU");
        check_skip("cuda_gemm_plans algorithm fallback", "no GPU");
        return 0;
    }
    double worst = -1;
    for (int round = 0; round < 2; round++)   /* the second round meets every shape again, evicted */
        for (int s = 0; s < N_SHAPES; s++) {
            double w = run_shape(be, shapes[s][0], shapes[s][1], shapes[s][2], 100 + s);
            if (w > worst) worst = w;
        }
    check(worst <= 0, "cuda_gemm_plans lru: 8 shapes twice through a 3-plan cache, every product right",
          "worst excess over the bf16 tolerance %g", worst);
#ifdef PHASELAB_CUEMU
    setenv("CUEMU_LT_FAILING_ALGOS", "1", 1);
    double w1 = run_shape(be, 13, 7, 9, 7);     /* a new shape: its best candidate fails */
    double w2 = run_shape(be, 13, 7, 9, 8);     /* the same plan again, now on its fallback */
    unsetenv("CUEMU_LT_FAILING_ALGOS");
    check(w1 <= 0 && w2 <= 0, "cuda_gemm_plans algorithm fallback: the next candidate computes the product",
          "worst excess %g, %g", w1, w2);
#else
    check_skip("cuda_gemm_plans algorithm fallback", "a real GPU's algorithms do not fail on request");
#endif
    return 0;
}
#endif
