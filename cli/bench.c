/* CPU benchmark: full training steps (forward, backward, AdamW) of the demo-sized model
 * (d_model 256, 4 layers, 8 heads, 2 KV heads, head_dim 32, d_ff 768, vocab 512, T 256,
 * 16 sequences a step) with full attention and with compressed W8/S8 attention, then the
 * docs/spec.md §2b remedies on the same W8/S8 model (compressor = shared, grid = staggered, the
 * gate-coverage penalty with lambda 0.1, and all three together). Prints
 * tokens/s and achieved GFLOP/s (model FLOPs per token x tokens/s) against two references:
 *   sgemm          the GFLOP/s the BLAS's sgemm (OpenBLAS by default, kernels/cpu/cpu_blas.c)
 *                  reaches on a square 1024 matmul (the ceiling);
 *   step GEMMs     the GFLOP/s of the dense matmuls one training step of this model runs, at
 *                  their own shapes, back to back with nothing between them (step_gemm_gflops):
 *                  what the BLAS itself gives these shapes (M = B*T = 4096 rows, K = 256 or 768),
 *                  its packing and its separate beta = 0 pass included;
 *   beside each step the square sgemm timed once right after every timed step, and the median
 *                  over the steps of (that step's GFLOP/s / that sgemm's): on a shared machine
 *                  whose speed drifts during the run (seen: the ceiling 158 -> 231 GFLOP/s in
 *                  one benchmark), the ratio of two timings taken together is the stable figure.
 *                  Its time is left out of tokens/s.
 * Then the probe evaluation's rate (prompts/s) padded to the model's T and at the prompt's own
 * length.
 * --profile: each case's model runs on the timing wrapper (kernels/backend_profile.h), recording
 * off during the timed steps (an op is then one more indirect call, nothing else), then
 * PROFILE_STEPS extra steps recorded and the per-op table printed: ms, calls, % of those steps'
 * wall time, GFLOP/s or GB/s per op and the top GEMM shapes. The figures above it come from the
 * timed steps only. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/bench.h"
#include "common/clock.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"
#include "kernels/kernels.h"
#include "kernels/backend_profile.h"
#include "kernels/cpu/cpu_backend.h"
#include "common/errors.h"
#include "model/model.h"

/* The square sgemm the ceiling is measured on: C [n,n] = A [n,n] B[n,n]^T, n = 1024. */
typedef struct { int n; float *a, *b, *c; } SquareSgemm;

static int square_sgemm_init(SquareSgemm *q) {
    q->n = 1024;
    const size_t nn = (size_t)q->n * q->n;
    q->a = malloc(sizeof(float) * nn); q->b = malloc(sizeof(float) * nn); q->c = malloc(sizeof(float) * nn);
    if (!q->a || !q->b || !q->c) return -1;
    for (size_t i = 0; i < nn; i++) { q->a[i] = (float)(i % 7) * 0.1f; q->b[i] = (float)(i % 5) * 0.1f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q->n, q->n, q->n, 1, q->a, q->n, q->b, q->n, 0, q->c, q->n);
    return 0;
}
static void square_sgemm_free(SquareSgemm *q) { free(q->a); free(q->b); free(q->c); }

/* GFLOP/s of one timing of 2 products (~25 ms at 170 GFLOP/s). */
static double square_sgemm_once(const SquareSgemm *q) {
    const int n = q->n;
    double t0 = clock_seconds();
    for (int r = 0; r < 2; r++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, q->a, n, q->b, n, 0, q->c, n);
    return 2.0 * n * n * n * 2 / (clock_seconds() - t0) / 1e9;
}

/* The ceiling: the best of 5 timings (a busy machine only slows some). */
static double sgemm_gflops(const SquareSgemm *q) {
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        double g = square_sgemm_once(q);
        if (g > best) best = g;
    }
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The dense matmuls of one training step of model c on M = B*T rows, as the model runs them
 * (model/model.c, kernels/cpu/cpu_matmul.c): per layer the fused q|k|v, o, gate, up and down
 * projections, each forward (out [M,N] = in [M,K] w[N,K]^T; o and down accumulate into the
 * residual) and backward (din = dout w, dw += dout^T in; up's din accumulates into gate's), and
 * the tied classifier (logits = x E^T, dx = dlogits E, dE += dlogits^T x). GFLOP/s of the best
 * of `trials` timings after one warm-up, like sgemm_gflops. */
static double step_gemm_gflops(const ModelConfig *c, int M, int trials) {
    const int D = c->d_model, P = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim, Hd = c->n_heads * c->head_dim;
    const int F = c->d_ff, V = c->vocab_size;
    const struct { int N, K, acc_out, acc_din; } mm[] = {
        {P, D, 0, 0}, {D, Hd, 1, 0}, {F, D, 0, 0}, {F, D, 0, 1}, {D, F, 1, 0}};
    int max_dim = V;
    const int dims[] = {D, P, Hd, F};
    for (int i = 0; i < 4; i++) if (dims[i] > max_dim) max_dim = dims[i];
    /* in, dout, w read; out, din, dw written (nothing written is read back: the values stay
     * normal floats over the repetitions) */
    const size_t act = (size_t)M * max_dim, par = (size_t)max_dim * max_dim;
    float *in = malloc(sizeof(float) * act), *dout = malloc(sizeof(float) * act), *out = calloc(act, sizeof(float));
    float *din = calloc(act, sizeof(float)), *w = malloc(sizeof(float) * par), *dw = calloc(par, sizeof(float));
    if (!in || !dout || !out || !din || !w || !dw) { free(in); free(dout); free(out); free(din); free(w); free(dw); return 0; }
    for (size_t i = 0; i < act; i++) { in[i] = (float)(i % 13) * 0.01f; dout[i] = (float)(i % 7) * 0.01f; }
    for (size_t i = 0; i < par; i++) w[i] = (float)(i % 11) * 0.01f;
    double best = 0;
    for (int r = 0; r < trials + 1; r++) {
        double flops = 0, t0 = clock_seconds();
        for (int L = 0; L <= c->n_layers; L++)
            for (int k = 0; k < (L < c->n_layers ? 5 : 1); k++) {
                const int N = L < c->n_layers ? mm[k].N : V, K = L < c->n_layers ? mm[k].K : D;
                const float acc_out = L < c->n_layers ? mm[k].acc_out : 0, acc_din = L < c->n_layers ? mm[k].acc_din : 0;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, in, K, w, K, acc_out, out, N);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1, dout, N, w, K, acc_din, din, K);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1, dout, N, in, K, 1, dw, K);
                flops += 6.0 * M * N * K;
            }
        double g = flops / (clock_seconds() - t0) / 1e9;
        if (r > 0 && g > best) best = g;                /* r = 0 is the warm-up */
    }
    free(in); free(dout); free(out); free(din); free(w); free(dw);
    return best;
}

/* One training step as the trainer runs it: forward, backward, the gate-coverage statistic, AdamW. */
static void bench_step(Model *m, Optimizer *opt, const int32_t *tok, const int32_t *tgt, int B, int T, double lambda) {
    model_zero_grads(m);
    model_forward_backward(m, tok, tgt, B, 1.0 / (B * T), NULL);
    if (lambda > 0) model_gate_coverage(m, B);   /* the trainer logs it every micro-batch */
    double gn;
    optimizer_step(opt, m, 1e-3, 1, &gn);
}

/* --profile: PROFILE_STEPS steps more, recorded, and the per-op table (kernels/backend_profile.h) */
#define PROFILE_STEPS 2
static void bench_profile(const Backend *prof, Model *m, Optimizer *opt, const int32_t *tok, const int32_t *tgt, int B,
                          int T, double lambda, const char *label) {
    backend_profile_reset(prof);
    backend_profile_enable(prof, 1);
    double t0 = clock_seconds();
    for (int s = 0; s < PROFILE_STEPS; s++) bench_step(m, opt, tok, tgt, B, T, lambda);
    backend_profile_enable(prof, 0);
    prof->synchronize(prof->ctx);
    double dt = clock_seconds() - t0;
    printf("per-op profile, %s %d more steps (%.1f ms/step with every op synchronized; not in the figures above)\n",
           label + strspn(label, " "), PROFILE_STEPS, 1e3 * dt / PROFILE_STEPS);
    backend_profile_report(stdout, prof, dt);
    fflush(stdout);
}

static ModelConfig demo_shape(int compressed) {
    ModelConfig m;
    memset(&m, 0, sizeof m);
    m.d_model = 256; m.n_layers = 4; m.n_heads = 8; m.n_kv_heads = 2; m.head_dim = 32; m.d_ff = 768;
    m.vocab_size = 512; m.rope_theta = 1e6; m.norm_eps = 1e-6; m.tie_embeddings = 1; m.qk_norm = 1;
    m.rope_dims = 32; m.attention = compressed ? ATTN_COMPRESSED : ATTN_FULL; m.window = 8; m.stride = 8;
    m.gate = GATE_SCALAR; m.gate_bias = 1; m.local = LOCAL_WINDOW; m.n_local = 16; m.compressor = COMPRESSOR_PAPER;
    return m;
}

/* Probe evaluation of the demo-shaped model created for T_MODEL = 1024 tokens, on prompts of
 * 256 tokens (model_argmax_at at the last position, batches of B): padded to T_MODEL (the
 * evaluation before issue 18) and at the prompt's own length (model_set_seq_len). */
static int bench_probe_eval(const Backend *be, int compressed, const char *label) {
    enum { B = 16, T_MODEL = 1024, L = 256, BATCHES = 2 };
    ModelConfig mc = demo_shape(compressed);
    char err[ERR_LEN];
    Model *m = model_create(&mc, be, B, T_MODEL, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    model_init_params(m, 1);
    int32_t *tok = calloc((size_t)B * T_MODEL, sizeof(int32_t)), out[B];
    if (!tok) {
        fprintf(stderr, "phaselab: --bench: out of memory: %zu bytes for the probe prompts\n", sizeof(int32_t) * B * T_MODEL);
        model_free(m);
        return 1;
    }
    int pos[B];
    double rate[2];
    for (int at_len = 0; at_len < 2; at_len++) {
        const int Tb = at_len ? L : T_MODEL;
        memset(tok, 0, sizeof(int32_t) * B * T_MODEL);
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < L; t++) tok[(size_t)b * Tb + t] = (b * 31 + t * 7 + 3) % mc.vocab_size;
            pos[b] = L - 1;
        }
        if (model_set_seq_len(m, Tb, err)) { fprintf(stderr, "phaselab: %s\n", err); model_free(m); free(tok); return 1; }
        model_argmax_at(m, tok, B, pos, out);     /* warm-up */
        double t0 = clock_seconds();
        for (int r = 0; r < BATCHES; r++) model_argmax_at(m, tok, B, pos, out);
        rate[at_len] = (double)BATCHES * B / (clock_seconds() - t0);
    }
    printf("%-26s %8.1f prompts/s padded to T=%d, %8.1f prompts/s at the prompt's length %d (%.1fx)\n", label, rate[0],
           T_MODEL, rate[1], L, rate[1] / rate[0]);
    free(tok);
    model_free(m);
    return 0;
}

/* One case: its training steps timed as above, one line printed. step_peak <= 0: no step-GEMM
 * reference for this shape (the real vocabulary's would need a V x V weight). */
static int bench_case(const Backend *be, const ModelConfig *mc, int B, int T, int steps, double lambda, const char *label,
                      double peak, double step_peak, int profile, const SquareSgemm *square) {
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    char err[ERR_LEN];
    /* --profile: the model on the timing wrapper, not recording until bench_profile */
    const Backend *prof = profile ? backend_profiled(be) : NULL;
    if (profile && !prof) { fprintf(stderr, "phaselab: --bench --profile: out of memory\n"); return 1; }
    if (prof) backend_profile_enable(prof, 0);
    const Backend *mbe = prof ? prof : be;
    Model *m = model_create(mc, mbe, B, T, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    if (model_set_gate_coverage(m, lambda, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    model_init_params(m, 1);
    Optimizer opt;
    if (optimizer_init(&opt, mbe, &comm, model_tensors(m), 0.9, 0.95, 1e-8, 0.1, 1.0, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
    double t0 = 0, best_step = 1e30, busy = 0;
    double *paired = malloc(sizeof(double) * steps);   /* [steps] step / sgemm beside it (steps >= 1) */
    if (!tok || !tgt || !paired) {
        fprintf(stderr, "phaselab: --bench: out of memory: %zu bytes for the step's tokens and timings\n",
                sizeof(int32_t) * 2 * B * T + sizeof(double) * steps);
        return 1;
    }
    for (int i = 0; i < B * T; i++) { tok[i] = (i * 7 + 3) % mc->vocab_size; tgt[i] = (i * 11 + 5) % mc->vocab_size; }
    for (int s = 0; s < steps + 2; s++) {
        if (s == 2) t0 = clock_seconds();    /* two warm-up steps */
        double ts = clock_seconds();
        bench_step(m, &opt, tok, tgt, B, T, lambda);
        double step_s = clock_seconds() - ts;
        if (s >= 2) {
            if (step_s < best_step) best_step = step_s;
            /* the ceiling timed right after this step: a shared machine's speed drifts over
             * a run, and a ratio of two timings taken together cancels the drift */
            double ta = clock_seconds(), sg = square_sgemm_once(square);
            busy += clock_seconds() - ta;
            paired[s - 2] = (double)B * T / step_s * model_flops_per_token(mc, T) / 1e9 / sg;
        }
    }
    double dt = clock_seconds() - t0 - busy;
    qsort(paired, steps, sizeof(double), cmp_double);
    const double paired_median = steps % 2 ? paired[steps / 2] : 0.5 * (paired[steps / 2 - 1] + paired[steps / 2]);
    free(paired);
    double tps = (double)steps * B * T / dt;
    double gf = tps * model_flops_per_token(mc, T) / 1e9;
    /* the best step is measured the way the references are (the best of several timings: a busy
     * machine only slows some); the mean over the timed steps comes first */
    double gf_best = (double)B * T / best_step * model_flops_per_token(mc, T) / 1e9;
    char vs_step[64] = "";
    if (step_peak > 0) snprintf(vs_step, sizeof vs_step, ", %.1f%% of the step GEMMs", 100 * gf / step_peak);
    printf("%-26s %8.0f tokens/s  %6.1f GFLOP/s  (%.1f%% of sgemm%s)  %.1f ms/step;"
           "  best step %.1f ms (%.1f%% of sgemm);  %.1f%% of the sgemm timed beside each step (median)\n",
           label, tps, gf, 100 * gf / peak, vs_step, 1000 * dt / steps, 1000 * best_step, 100 * gf_best / peak,
           100 * paired_median);
    fflush(stdout);
    if (prof) bench_profile(prof, m, &opt, tok, tgt, B, T, lambda, label);
    free(tok); free(tgt);
    optimizer_free(&opt);
    model_free(m);
    backend_profile_free(prof);
    return 0;
}

/* The real-vocabulary tiny shape of a new user's first real-text run (issue 40): d_model 128,
 * 2 layers, 4 heads, 2 KV heads, head_dim 32, d_ff 384, the Qwen3 vocabulary 151,936, W8/S8;
 * its step is ~99% classifier (6 V D FLOPs a token). */
static ModelConfig vocab_shape(void) {
    ModelConfig m = demo_shape(1);
    m.d_model = 128; m.n_layers = 2; m.n_heads = 4; m.n_kv_heads = 2; m.head_dim = 32; m.d_ff = 384;
    m.vocab_size = 151936;
    return m;
}

int run_bench(int threads, int steps, int profile, const char *cases) {
    const Backend *be = backend_cpu(threads);
    const int B = 16, T = 256;
    const int all = !strcmp(cases, "all"), demo = all || !strcmp(cases, "demo"), vocab = all || !strcmp(cases, "vocab"),
              probe = all || !strcmp(cases, "probe");
    cpu_set_blas_threads(threads);       /* the references run on the cores the model runs on */
    SquareSgemm square;
    if (square_sgemm_init(&square)) {
        square_sgemm_free(&square);
        fprintf(stderr, "phaselab: --bench: out of memory for the sgemm reference's buffers\n");
        return 1;
    }
    double peak = sgemm_gflops(&square);
    /* the BLAS's own count, not the request: a BLAS that ignored it shows here */
    printf("%s sgemm 1024x1024x1024: %.1f GFLOP/s (%d threads)\n", cpu_blas_name(), peak, cpu_blas_thread_count());
    const ModelConfig shape = demo_shape(0);
    double step_peak = demo ? step_gemm_gflops(&shape, B * T, 3) : 1;
    if (!(step_peak > 0)) { fprintf(stderr, "phaselab: --bench: out of memory for the step GEMMs' buffers\n"); return 1; }
    if (demo)
        printf("%s sgemm at the step's matmul shapes (M %d, K %d/%d): %.1f GFLOP/s (%.1f%% of sgemm)\n", cpu_blas_name(),
               B * T, shape.d_model, shape.d_ff, step_peak, 100 * step_peak / peak);
    static const char *const labels[] = {"full attention:", "compressed W8/S8 scalar:", "  + compressor shared:",
                                         "  + grid staggered:", "  + gate_coverage 0.1:", "  + all three:"};
    for (int variant = 0; demo && variant < 6; variant++) {
        const int compressed = variant > 0;
        ModelConfig mc = demo_shape(compressed);
        if (variant == 2 || variant == 5) mc.compressor = COMPRESSOR_SHARED;
        if (variant == 3 || variant == 5) mc.grid = GRID_STAGGERED;
        double lambda = variant == 4 || variant == 5 ? 0.1 : 0.0;
        if (bench_case(be, &mc, B, T, steps, lambda, labels[variant], peak, step_peak, profile, &square)) return 1;
    }
    if (vocab) {   /* 4 x 256 tokens a step; no step-GEMM reference (it would need a V x V weight) */
        const ModelConfig mv = vocab_shape();
        if (bench_case(be, &mv, 4, T, steps, 0.0, "vocab 151936 d128 W8/S8:", peak, 0, profile, &square)) return 1;
    }
    square_sgemm_free(&square);
    if (!probe) return 0;
    printf("probe evaluation (lookup prompts of 256 tokens, model T 1024, batches of 16):\n");
    if (bench_probe_eval(be, 0, "  full attention:") || bench_probe_eval(be, 1, "  compressed W8/S8 scalar:")) return 1;
    return 0;
}
