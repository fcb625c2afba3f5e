/* The timing wrapper (kernels/backend_profile.h) around the CUDA backend (on a GPU, or the CPU
 * emulator of CUDA):
 *   cuda_profile_ops: matmul fwd and bwd and add through the wrapper give the unwrapped
 *     backend's bits; the recorded calls, FLOPs (2MNK; bwd 4MNK with din) and bytes (bf16
 *     activations: (MK + NK + MN) 2 for the forward, 3 n 2 for add) are the values computed here;
 *   cuda_profile_model: two training steps of a tiny model (full and compressed attention, with
 *     run.deterministic's switch on) on the wrapper, recording, and on the bare backend: the fp32
 *     master weights afterwards are equal bit for bit, and the table has the step's ops (matmuls,
 *     attention and, compressed, the compressor) with their FLOPs;
 *   cuda_profile_substeps: the same two compressed steps with the backend's sub-step timing on
 *     (kernels/cuda/cuda_substeps.cu) give the same bits as with it off, and its table has every
 *     part of the compressor, the custom attention backward and the classifier, each called as
 *     often as the model calls its op (per layer and branch), and the report prints them.
 * Without a GPU (or without a CUDA build) each group prints one skip line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "kernels/backend_profile.h"
#include "kernels/cuda/cuda_backend.h"
#include "common/errors.h"
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "model/model.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"

static const char *GROUPS[] = {"cuda_profile_ops", "cuda_profile_model", "cuda_profile_substeps"};
#define N_GROUPS ((int)(sizeof GROUPS / sizeof GROUPS[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    for (int i = 0; i < N_GROUPS; i++) check_skip(GROUPS[i], "no GPU (built without CUDA)");
    return 0;
}
#else

static act_t *put_act(const Backend *be, const float *h, size_t n) {
    act_t *p = be->alloc(be->ctx, n * be->act_bytes);
    be->upload_act(be->ctx, p, h, n);
    return p;
}
static float *get_act(const Backend *be, const act_t *p, size_t n) {
    float *h = malloc(n * sizeof(float));
    be->download_act(be->ctx, h, p, n);
    return h;
}
static int near(double a, double b) { return a == b || (a - b) * (a - b) <= 1e-18 * b * b; }

static void test_ops(const Backend *GPU, const Backend *prof) {
    const int M = 33, N = 24, K = 40;
    const size_t n = 777;
    uint64_t s = 11;
    float *h_in = malloc(sizeof(float) * M * K), *h_w = malloc(sizeof(float) * N * K), *h_do = malloc(sizeof(float) * M * N);
    float *h_x = malloc(sizeof(float) * n), *h_y = malloc(sizeof(float) * n);
    for (int i = 0; i < M * K; i++) h_in[i] = (float)tu_normal(&s);
    for (int i = 0; i < N * K; i++) h_w[i] = (float)tu_normal(&s);
    for (int i = 0; i < M * N; i++) h_do[i] = (float)tu_normal(&s);
    for (size_t i = 0; i < n; i++) { h_x[i] = (float)tu_normal(&s); h_y[i] = (float)tu_normal(&s); }
    float *res[2][4];
    float *dwh[2];
    const Backend *bes[2] = {GPU, prof};
    backend_profile_reset(prof);
    for (int b = 0; b < 2; b++) {
        const Backend *be = bes[b];
        act_t *in = put_act(be, h_in, (size_t)M * K), *w = put_act(be, h_w, (size_t)N * K), *dout = put_act(be, h_do, (size_t)M * N);
        act_t *out = be->alloc(be->ctx, (size_t)M * N * be->act_bytes), *din = be->alloc(be->ctx, (size_t)M * K * be->act_bytes);
        float *dw = be->alloc(be->ctx, sizeof(float) * N * K);
        act_t *x = put_act(be, h_x, n), *y = put_act(be, h_y, n);
        be->matmul_fwd(be->ctx, out, in, w, M, N, K, 0);
        be->matmul_bwd(be->ctx, din, dw, dout, in, w, M, N, K, 0);
        be->add(be->ctx, y, x, n);
        res[b][0] = get_act(be, out, (size_t)M * N);
        res[b][1] = get_act(be, din, (size_t)M * K);
        res[b][2] = get_act(be, y, n);
        dwh[b] = malloc(sizeof(float) * N * K);
        be->download(be->ctx, dwh[b], dw, sizeof(float) * N * K);
        act_t *bufs[] = {in, w, dout, out, din, x, y};
        for (int i = 0; i < 7; i++) be->free(be->ctx, bufs[i]);
        be->free(be->ctx, dw);
    }
    int same = !memcmp(res[0][0], res[1][0], sizeof(float) * M * N) && !memcmp(res[0][1], res[1][1], sizeof(float) * M * K) &&
               !memcmp(res[0][2], res[1][2], sizeof(float) * n) && !memcmp(dwh[0], dwh[1], sizeof(float) * N * K);
    OpProfile f, bw, a;
    backend_profile_op(prof, "matmul_fwd", &f);
    backend_profile_op(prof, "matmul_bwd", &bw);
    backend_profile_op(prof, "add", &a);
    const double mnk2 = 2.0 * M * N * K, A = 2.0;   /* bf16 */
    check(same && GPU->act_bytes == 2 && f.calls == 1 && near(f.flops, mnk2) &&
              near(f.bytes, ((double)M * K + (double)N * K + (double)M * N) * A) && bw.calls == 1 &&
              near(bw.flops, 2 * mnk2) && a.calls == 1 && near(a.bytes, 3.0 * n * A) && f.seconds > 0,
          "cuda_profile_ops: matmul fwd/bwd, add bitwise through the wrapper; 2MNK, 4MNK, bf16 bytes",
          "same %d act %zu; fwd %ld %.0f %.0f; bwd %ld %.0f; add %ld %.0f", same, GPU->act_bytes, f.calls, f.flops,
          f.bytes, bw.calls, bw.flops, a.calls, a.bytes);
    for (int b = 0; b < 2; b++) { for (int i = 0; i < 3; i++) free(res[b][i]); free(dwh[b]); }
    free(h_in); free(h_w); free(h_do); free(h_x); free(h_y);
}

/* two training steps of the tiny model on be; the fp32 master after them (malloc'd) */
static float *two_steps(const Backend *be, int compressed, size_t *n_out) {
    const int T = 16, B = 2;
    ModelConfig cfg = tu_tiny_config();
    if (compressed) cfg.attention = ATTN_COMPRESSED;
    char err[ERR_LEN] = "";
    Model *m = model_create(&cfg, be, B, T, err);
    if (!m) { printf("# model_create: %s\n", err); return NULL; }
    tu_random_params(m, 5 + compressed, 0.05);
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    Optimizer opt;
    memset(&opt, 0, sizeof opt);
    if (optimizer_init(&opt, be, &comm, model_tensors(m), 0.9, 0.95, 1e-8, 0.1, 1.0, err)) {
        printf("# optimizer_init: %s\n", err);
        model_free(m);
        return NULL;
    }
    int32_t tok[2 * 16], tgt[2 * 16];
    for (int step = 0; step < 2; step++) {
        tu_random_tokens(tok, B * T, cfg.vocab_size, 300 + step);
        tu_random_tokens(tgt, B * T, cfg.vocab_size, 400 + step);
        model_zero_grads(m);
        model_accumulate_micro_batch(m, tok, tgt, B, 1.0 / (B * T));
        double gn;
        optimizer_step(&opt, m, 1e-2, 1, &gn);
    }
    *n_out = model_tensors(m)->n_floats;
    float *p = malloc(*n_out * sizeof(float));
    model_download_params(m, p);
    optimizer_free(&opt);
    model_free(m);
    return p;
}

static void test_model(const Backend *GPU, const Backend *prof) {
    GPU->set_deterministic(GPU->ctx, 1);   /* two runs compared bit for bit (cuDNN's backward is not) */
    for (int compressed = 0; compressed < 2; compressed++) {
        backend_profile_reset(prof);
        size_t n0 = 0, n1 = 0;
        float *bare = two_steps(GPU, compressed, &n0), *wrapped = two_steps(prof, compressed, &n1);
        OpProfile mm, at, cp;
        backend_profile_op(prof, "matmul_fwd", &mm);
        backend_profile_op(prof, "attention_bwd", &at);
        backend_profile_op(prof, "compressor_fwd", &cp);
        char name[128];
        snprintf(name, sizeof name, "cuda_profile_model: %s: two steps through the wrapper == bare, ops recorded",
                 compressed ? "compressed" : "full");
        check(bare && wrapped && n0 == n1 && !memcmp(bare, wrapped, n0 * sizeof(float)) && mm.calls > 0 && mm.flops > 0 &&
                  at.calls == 2 * 2 && at.flops > 0 && (compressed ? cp.calls > 0 && cp.flops > 0 : cp.calls == 0),
              name, "bare %p wrapped %p n %zu/%zu; matmul_fwd %ld, attention_bwd %ld, compressor_fwd %ld", (void *)bare,
              (void *)wrapped, n0, n1, mm.calls, at.calls, cp.calls);
        free(bare); free(wrapped);
    }
    GPU->set_deterministic(GPU->ctx, 0);
}

static void test_substeps(const Backend *GPU) {
    GPU->set_deterministic(GPU->ctx, 1);   /* the custom attention backward: its dq / dK/dV parts */
    size_t n0 = 0, n1 = 0;
    float *off = two_steps(GPU, 1, &n0);
    cuda_backend_substeps_reset(GPU);
    cuda_backend_substeps(GPU, 1);
    float *on = two_steps(GPU, 1, &n1);
    cuda_backend_substeps(GPU, 0);
    GPU->set_deterministic(GPU->ctx, 0);
    /* per step the tiny model calls each of compressor_fwd / _bwd once per layer and branch (K, V),
     * attention_bwd once per layer, the classifier once */
    const ModelConfig cfg = tu_tiny_config();
    const long steps = 2, comp = steps * cfg.n_layers * 2, attn = steps * cfg.n_layers;
    static const struct { const char *name; int per; } parts[] = {
        {"compressor_fwd.pack", 1}, {"compressor_fwd.gemm", 1}, {"compressor_fwd.pool", 1},
        {"compressor_bwd.pack", 1}, {"compressor_bwd.pool", 1}, {"compressor_bwd.colsums", 1},
        {"compressor_bwd.dw_gemm", 1}, {"compressor_bwd.dw_unpack", 1}, {"compressor_bwd.da_gemm", 1},
        {"attention_bwd.pre", 2}, {"attention_bwd.dq", 2}, {"attention_bwd.dkv", 2},
        {"classifier.logits_gemm", 3}, {"classifier.cross_entropy", 3}, {"classifier.dx_gemm", 3},
        {"classifier.demb_gemm", 3}};
    int bad = 0;
    char first_bad[160] = "";
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        long calls;
        double sec;
        int found = cuda_backend_substep(GPU, parts[i].name, &calls, &sec);
        long want = parts[i].per == 1 ? comp : parts[i].per == 2 ? attn : steps;   /* classifier: one chunk a step */
        if (!found || calls != want || !(sec > 0)) {
            if (!bad++) snprintf(first_bad, sizeof first_bad, "%s: found %d, %ld calls (want %ld), %.3g s",
                                 parts[i].name, found, calls, want, sec);
        }
    }
    long none_calls;
    double none_sec;
    const int stray = cuda_backend_substep(GPU, "attention_bwd.cudnn", &none_calls, &none_sec);
    char *rep = NULL;
    size_t rep_len = 0;
    FILE *mf = open_memstream(&rep, &rep_len);
    cuda_backend_substeps_report(mf, GPU, 1.0);
    fclose(mf);
    const int printed = rep && strstr(rep, "sub-steps, cuda backend") && strstr(rep, "  compressor_bwd.dw_gemm ") &&
                        strstr(rep, "  attention_bwd.dkv ");
    check(off && on && n0 == n1 && !memcmp(off, on, n0 * sizeof(float)),
          "cuda_profile_substeps: two compressed steps with sub-step timing on == off, bit for bit", "n %zu/%zu", n0, n1);
    check(!bad && !stray && printed,
          "cuda_profile_substeps: every part of the compressor, attention backward and classifier, once per op call",
          "%d parts wrong (%s); cudnn part recorded %d; report printed %d", bad, first_bad, stray, printed);
    free(rep); free(off); free(on);
}

int main(void) {
    char err[ERR_LEN] = "";
    const Backend *GPU = backend_cuda(0, err);
    if (!GPU) {
        for (int i = 0; i < N_GROUPS; i++) check_skip(GROUPS[i], "no GPU");
        return 0;
    }
    const Backend *prof = backend_profiled(GPU);
    if (!prof) { check(0, "cuda_profile_ops: backend_profiled", "out of memory"); return check_exit_code(); }
    test_ops(GPU, prof);
    test_model(GPU, prof);
    test_substeps(GPU);
    backend_profile_free(prof);
    return check_exit_code();
}
#endif
