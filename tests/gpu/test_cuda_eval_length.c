/* Evaluation at the prompt's own length (issue 18) on the CUDA backend: a batch run at length
 * L < T (model_set_seq_len) against the same prompts padded with token 0 to the model's T. The
 * model is causal, so at every position t < L
 *     forward(tokens[0..L-1])[t] == forward(tokens[0..L-1] ++ zeros[L..T-1])[t].
 * Tiny models of full attention and compressed W8/S8, W8/S4 and W8/S8 tail attention (random
 * parameters: matrices N(0, 0.05), norms 1 + N(0, 0.2), gate biases and sinks N(0, 1)), T = 128,
 * prompts of L = 72 tokens (not a multiple of the kernels' 64-row tiles) and of 6 tokens (shorter
 * than one window: no compressed entry exists).
 * Checks: the final-norm output (the logits' input) at t < L and the argmax at the last position
 * of every row, within bf16 rounding: |diff| <= 2^-7 (1 + |x|). On a GPU cuBLASLt may pick
 * another algorithm for another number of rows; in the CPU emulator of CUDA (tests/cuemu) the
 * GEMMs are OpenBLAS sgemms, whose rounding of a row also depends on the row count on some CPUs
 * (AMD Zen: tests/test_eval_length.c), and a last-bit fp32 difference can flip a bf16 rounding
 * (seen: 1 of 3456 values, 0.0039). A shorter batch allocates nothing (the backend's
 * alloc is counted). Without a GPU (or a CUDA build) it prints one skip line per variant. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

typedef struct { const char *name; void (*apply)(ModelConfig *c); } Variant;
static void v_full(ModelConfig *c) { c->attention = ATTN_FULL; }
static void v_w8s8(ModelConfig *c) { c->attention = ATTN_COMPRESSED; c->window = 8; c->stride = 8; c->n_local = 16; }
static void v_w8s4(ModelConfig *c) { v_w8s8(c); c->stride = 4; }
static void v_tail(ModelConfig *c) { v_w8s8(c); c->local = LOCAL_TAIL; c->attn_sink = 1; }
static const Variant variants[] = {{"full", v_full}, {"w8s8", v_w8s8}, {"w8s4", v_w8s4}, {"w8s8_tail_sink", v_tail}};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    char name[128];
    for (int i = 0; i < N_VARIANTS; i++) {
        snprintf(name, sizeof name, "cuda_eval_length %s", variants[i].name);
        check_skip(name, "no GPU (built without CUDA)");
    }
    return 0;
}
#else
#define T_MAX 128
#define B 3

static Backend counted;
static long n_allocs;
static void *(*real_alloc)(BackendCtx *, size_t);
static void *counting_alloc(BackendCtx *ctx, size_t bytes) { n_allocs++; return real_alloc(ctx, bytes); }

static void compare(Model *m, const char *vname, int L) {
    const int D = model_config(m)->d_model, V = model_config(m)->vocab_size;
    int32_t *pad = calloc((size_t)B * T_MAX, sizeof(int32_t)), *cut = malloc(sizeof(int32_t) * B * L);
    tu_random_tokens(cut, B * L, V, 11 + L);
    for (int b = 0; b < B; b++) memcpy(pad + (size_t)b * T_MAX, cut + (size_t)b * L, sizeof(int32_t) * L);
    float *h_pad = malloc(sizeof(float) * (size_t)B * T_MAX * D), *h_cut = malloc(sizeof(float) * (size_t)B * L * D);
    int pos[B];
    int32_t am_pad[B], am_cut[B];
    for (int b = 0; b < B; b++) pos[b] = L - 1 - b;
    char err[ERR_LEN] = "", name[160];
    int rc = model_set_seq_len(m, T_MAX, err);
    model_debug_final_hidden(m, pad, B, h_pad);
    model_argmax_at(m, pad, B, pos, am_pad);
    long allocs = n_allocs;
    rc |= model_set_seq_len(m, L, err);
    model_debug_final_hidden(m, cut, B, h_cut);
    model_argmax_at(m, cut, B, pos, am_cut);
    long new_allocs = n_allocs - allocs;
    rc |= model_set_seq_len(m, T_MAX, err);
    long diff = 0, far = 0;
    double max_abs = 0;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < (size_t)L * D; i++) {
            float x = h_pad[(size_t)b * T_MAX * D + i], y = h_cut[(size_t)b * L * D + i];
            if (memcmp(&x, &y, sizeof x)) {
                double e = fabs((double)x - y);
                diff++;
                far += !(e <= (1.0 + fabs(x)) / 128.0);
                if (e > max_abs) max_abs = e;
            }
        }
    const int ok_hidden = far == 0;
    printf("# %s L=%d: %ld of %d final-norm values differ from padded T=%d (max |diff| %.3g)\n", vname, L, diff, B * L * D,
           T_MAX, max_abs);
    snprintf(name, sizeof name, "cuda_eval_length %s L=%d: final-norm output and argmax equal to padded T=%d", vname, L, T_MAX);
    check(rc == 0 && ok_hidden && !memcmp(am_pad, am_cut, sizeof am_pad), name,
          "rc %d %s; %ld values differ (%ld beyond bf16 rounding), max |diff| %.3g; argmax %d %d %d vs %d %d %d", rc, err, diff,
          far, max_abs, am_pad[0], am_pad[1], am_pad[2], am_cut[0], am_cut[1], am_cut[2]);
    snprintf(name, sizeof name, "cuda_eval_length %s L=%d: no allocation at the shorter length", vname, L);
    check(new_allocs == 0, name, "%ld allocations", new_allocs);
    free(pad); free(cut); free(h_pad); free(h_cut);
}

int main(void) {
    char err[ERR_LEN] = "", name[128];
    const Backend *gpu = backend_cuda(0, err);
    for (int v = 0; v < N_VARIANTS; v++) {
        snprintf(name, sizeof name, "cuda_eval_length %s", variants[v].name);
        if (!gpu) { check_skip(name, "no GPU"); continue; }
        counted = *gpu;
        real_alloc = gpu->alloc;
        counted.alloc = counting_alloc;
        ModelConfig c = tu_tiny_config();
        variants[v].apply(&c);
        Model *m = model_create(&c, &counted, B, T_MAX, err);
        if (!check(m != NULL, name, "model_create: %s", err)) continue;
        tu_random_params(m, 5 + v, 0.05);
        compare(m, variants[v].name, 72);
        compare(m, variants[v].name, 6);
        model_free(m);
    }
    return check_failures ? 1 : 0;
}
#endif
