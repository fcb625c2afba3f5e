/* CUDA training-step benchmark (a program, not a test): the Qwen3-0.6B shape (D 1024, 28 layers,
 * H 16, d 128, FFN 3072, vocab 151936, tied) at T = 4096, full steps (forward, backward with the
 * fused classifier, then the trainer's owned optimizer step, optimizer_step of trainer/optimizer.h
 * on one rank: the gradient norm (sumsq), then clip + AdamW over every parameter writing the fp32
 * master and the bf16 working weights in one pass, Backend.adamw_cast), for
 *   full attention, 8 KV heads;  compressed W8/S8 (paper defaults), 8 KV heads;  W8/S8, 1 KV head.
 * Prints tokens/s, MFU (model_flops_per_token x tokens/s / the backend's peak bf16 FLOP/s),
 * peak device memory allocated through the backend, and the forward-only share of a step.
 * Usage: bench_cuda [micro_batch (default 4)] [timed steps (default 5)]
 * BENCH_PROFILE=1 (environment): each case's model runs on the timing wrapper
 * (kernels/backend_profile.h), recording off during the timed and forward-only steps, then one
 * step more recorded (every op synchronized, so device time is attributed per op) and its per-op
 * table printed after the case's line ("per-op profile, CASE: ...", the table of
 * backend_profile_report; tests/gpu/check.sh's bench phase reads it), then the parts of the
 * compressor, attention and classifier ops in that step ("sub-steps, ...", kernels/cuda/cuda_substeps.cu).
 * The figures on the case's line come from the unrecorded steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/kernels.h"
#include "kernels/backend_profile.h"
#include "common/clock.h"
#include "kernels/cuda/cuda_backend.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"
#include "trainer/run_config.h"
#include "common/errors.h"
#include "model/model.h"

#ifndef PHASELAB_CUDA
int main(void) {
    printf("bench_cuda: built without CUDA\n");
    return 0;
}
#else

typedef struct { const char *name; int compressed, kv_heads; } BenchCase;

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 4, steps = argc > 2 ? atoi(argv[2]) : 5;
    const int T = 4096, warmup = 2;
    char err[ERR_LEN] = "";
    const Backend *be = backend_cuda(0, err);
    if (!be) {
        printf("bench_cuda: no GPU: %s\n", err);
        return 0;
    }
    const char *prof_env = getenv("BENCH_PROFILE");
    const int profile = prof_env && *prof_env && strcmp(prof_env, "0") != 0;
    printf("bench_cuda: Qwen3-0.6B shape, T=%d, micro-batch %d (%d tokens/step), peak %.0f TFLOP/s%s\n", T, B, B * T,
           be->peak_flops / 1e12, profile ? ", per-op profile of one more step per case" : "");
    BenchCase cases[] = {{"full attention, 8 KV heads", 0, 8},
                         {"compressed W8/S8, 8 KV heads", 1, 8},
                         {"compressed W8/S8, 1 KV head", 1, 1}};
    int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
    uint64_t s = 7;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % 151936);
    }
    for (int i = 0; i < B * T; i++) tgt[i] = tok[(i + 1) % (B * T)];
    for (int ci = 0; ci < 3; ci++) {
        Config c;
        config_defaults(&c);
        ModelConfig m = c.model;
        m.attention = cases[ci].compressed ? ATTN_COMPRESSED : ATTN_FULL;
        m.window = 8;
        m.stride = 8;
        m.n_kv_heads = cases[ci].kv_heads;
        cuda_backend_reset_peak(be);
        /* BENCH_PROFILE: the model on the timing wrapper, not recording until the profiled step */
        const Backend *prof = profile ? backend_profiled(be) : NULL;
        if (prof) backend_profile_enable(prof, 0);
        const Backend *mbe = prof ? prof : be;
        Model *mod = model_create(&m, mbe, B, T, err);
        if (!mod) {
            printf("bench_cuda %s: model_create failed: %s\n", cases[ci].name, err);
            backend_profile_free(prof);
            continue;
        }
        model_init_params(mod, 1);
        const TensorTable *tt = model_tensors(mod);
        /* the optimizer as the trainer makes it (trainer/trainer.c), on one rank */
        Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
        Optimizer opt;
        memset(&opt, 0, sizeof opt);
        if (optimizer_init(&opt, mbe, &comm, tt, c.train.beta1, c.train.beta2, c.train.eps, c.train.weight_decay,
                           c.train.grad_clip, err)) {
            printf("bench_cuda %s: %s\n", cases[ci].name, err);
            optimizer_free(&opt);
            model_free(mod);
            backend_profile_free(prof);
            continue;
        }
        double t0 = 0, loss = 0;
        for (int it = 0; it < warmup + steps; it++) {
            if (it == warmup) { be->synchronize(be->ctx); t0 = clock_seconds(); }
            model_zero_grads(mod);
            loss = model_forward_backward(mod, tok, tgt, B, 1.0 / (B * T), NULL);
            double grad_norm;
            optimizer_step(&opt, mod, 1e-4, 1, &grad_norm);
        }
        be->synchronize(be->ctx);
        double dt = (clock_seconds() - t0) / steps;
        /* forward only */
        be->synchronize(be->ctx);
        double f0 = clock_seconds();
        for (int it = 0; it < 2; it++) model_forward(mod, tok, tgt, B, NULL);
        be->synchronize(be->ctx);
        double dtf = (clock_seconds() - f0) / 2;
        double tps = B * T / dt;
        double mfu = model_flops_per_token(&m, T) * tps / be->peak_flops;
        printf("bench_cuda %-30s %9.0f tokens/s  MFU %5.1f%%  step %.3f s (forward %.3f s)  peak memory %.2f GiB  "
               "loss %.3f  params %.1fM\n",
               cases[ci].name, tps, 100 * mfu, dt, dtf, cuda_backend_peak_bytes(be) / 1073741824.0, loss, tt->n_params / 1e6);
        fflush(stdout);
        if (prof) {   /* one step more, every op synchronized and timed, and the parts of the largest ops */
            backend_profile_reset(prof);
            cuda_backend_substeps_reset(be);
            cuda_backend_substeps(be, 1);
            backend_profile_enable(prof, 1);
            be->synchronize(be->ctx);
            double p0 = clock_seconds();
            model_zero_grads(mod);
            model_forward_backward(mod, tok, tgt, B, 1.0 / (B * T), NULL);
            double grad_norm;
            optimizer_step(&opt, mod, 1e-4, 1, &grad_norm);
            backend_profile_enable(prof, 0);
            be->synchronize(be->ctx);
            double pdt = clock_seconds() - p0;
            cuda_backend_substeps(be, 0);
            printf("per-op profile, %s: 1 more step (%.3f s with every op synchronized; not in the figures above)\n",
                   cases[ci].name, pdt);
            backend_profile_report(stdout, prof, pdt);
            cuda_backend_substeps_report(stdout, be, pdt);
            fflush(stdout);
        }
        optimizer_free(&opt);
        model_free(mod);
        backend_profile_free(prof);
    }
    free(tok);
    free(tgt);
    return 0;
}
#endif
