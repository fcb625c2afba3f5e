/* The timing wrapper (kernels/backend_profile.h) around the CPU backend:
 *   - every op of kernels/ops.def is present, the metadata (name, act_bytes, device) is the inner
 *     backend's, and results are bit for bit the unwrapped backend's (matmul fwd/bwd, add,
 *     attention fwd/bwd, classifier, sumsq, alloc);
 *   - the recorded calls, FLOPs and bytes equal the values computed here from the shapes:
 *     matmul 2MNK (bwd: 2MNK for dw, + 2MNK with din), add 3 n 4 bytes, attention 4d (fwd) and
 *     10d (bwd) per (query head, query, visible key) with the visible keys counted by hand for
 *     full causal (T(T+1)/2 per head) and a W4/S4 tail case (18 per head, listed below),
 *     classifier 2NDV (6NDV with dx), sumsq 4n bytes; GEMM shapes broken down by product;
 *   - recording off counts nothing, reset forgets, the report has the rows;
 *   - the clock stops after the inner synchronize: with an inner backend whose synchronize
 *     waits 30 ms for work an op left pending, that op's time is >= 30 ms;
 *   - the step's work of `--summary` (cli/summary.c): a training step of a tiny model (full and
 *     compressed) on the do-nothing backend (backend_counting_nop) records, op by op, the same
 *     calls, FLOPs and bytes as the same step on the CPU backend, and its matmul FLOPs are
 *     2 N L (P D + D Hd + 2 F D + D F) forward and twice that backward (P = (H + 2G) d), the
 *     classifier's 6 N D V. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tests/check.h"
#include "kernels/kernels.h"
#include "kernels/backend_profile.h"
#include "tests/model_testutil.h"
#include "model/model.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"

static unsigned lcg = 12345;
static float rnd(void) {
    lcg = lcg * 1664525u + 1013904223u;
    return (float)((lcg >> 8) & 0xffff) / 65536.0f - 0.5f;
}
/* a backend buffer of n floats filled from the stream (the same stream position gives the same
 * values: both backends get copies of one host array) */
static float *host_rand(size_t n) {
    float *h = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = rnd();
    return h;
}
/* backend buffers of the attention and classifier blocks, released together at the end */
enum { MAX_TRACKED = 256 };
static struct { const Backend *be; void *p; } g_tracked[MAX_TRACKED];
static int g_n_tracked;
static void *talloc(const Backend *be, size_t bytes) {
    void *p = be->alloc(be->ctx, bytes);
    if (g_n_tracked < MAX_TRACKED) { g_tracked[g_n_tracked].be = be; g_tracked[g_n_tracked++].p = p; }
    return p;
}
static void free_tracked(void) {
    for (int i = 0; i < g_n_tracked; i++) g_tracked[i].be->free(g_tracked[i].be->ctx, g_tracked[i].p);
    g_n_tracked = 0;
}
static void *dup_to(const Backend *be, const float *h, size_t n) {
    void *p = be->alloc(be->ctx, n * sizeof(float));
    be->upload(be->ctx, p, h, n * sizeof(float));
    return p;
}
/* dup_to, released by free_tracked */
static void *tdup_to(const Backend *be, const float *h, size_t n) {
    void *p = talloc(be, n * sizeof(float));
    be->upload(be->ctx, p, h, n * sizeof(float));
    return p;
}
static int same_bits(const void *a, const void *b, size_t n_floats) { return !memcmp(a, b, n_floats * sizeof(float)); }

static OpProfile op_of(const Backend *p, const char *name) {
    OpProfile o = {0};
    if (backend_profile_op(p, name, &o)) printf("# no op %s\n", name);
    return o;
}
static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* ---- an inner backend whose synchronize waits for "device work" an op left pending ---- */
static const Backend *g_cpu;
static int g_pending;
static void slow_add(BackendCtx *ctx, act_t *y, const act_t *x, size_t n) {
    g_cpu->add(ctx, y, x, n);
    g_pending = 1;   /* as a GPU op that returns before its kernel ran */
}
static void slow_synchronize(BackendCtx *ctx) {
    if (!g_pending) return;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    g_pending = 0;
}

static const char *const OP_NAMES[] = {
#define OP(ret, op, params, args) #op,
#include "kernels/ops.def"
};
#define N_OP_NAMES ((int)(sizeof OP_NAMES / sizeof OP_NAMES[0]))

/* one training step (micro-batch + optimizer) of the tiny model on the profiled backend prof */
static int tiny_step(const Backend *prof, int compressed) {
    const int B = 2, T = 16;
    ModelConfig cfg = tu_tiny_config();
    if (compressed) cfg.attention = ATTN_COMPRESSED;
    char err[256];
    Model *m = model_create(&cfg, prof, B, T, err);
    if (!m) { printf("# model_create: %s\n", err); return -1; }
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    Optimizer opt;
    memset(&opt, 0, sizeof opt);
    if (optimizer_init(&opt, prof, &comm, model_tensors(m), 0.9, 0.95, 1e-8, 0.1, 1.0, err)) {
        printf("# optimizer_init: %s\n", err);
        model_free(m);
        return -1;
    }
    int32_t tok[2 * 16];
    tu_random_tokens(tok, B * T, cfg.vocab_size, 9);
    backend_profile_reset(prof);
    model_zero_grads(m);
    model_accumulate_micro_batch(m, tok, tok, B, 1.0 / (B * T));
    double gn;
    optimizer_step(&opt, m, 1e-3, 1, &gn);
    optimizer_free(&opt);
    model_free(m);
    return 0;
}

static void test_step_work(const Backend *cpu) {
    Backend *nop = backend_counting_nop(sizeof(float));
    const Backend *pn = nop ? backend_profiled(nop) : NULL, *pc = backend_profiled(cpu);
    int all = pn != NULL;
#define OP(ret, op, params, args) all &= nop && nop->op != NULL;
#include "kernels/ops.def"
#undef OP
    check(all, "profile_nop_backend: backend_counting_nop has every op", "missing ops");
    for (int compressed = 0; compressed < 2 && all; compressed++) {
        char name[160], diff[512] = "";
        int rc = tiny_step(pn, compressed) | tiny_step(pc, compressed);
        for (int i = 0; i < N_OP_NAMES; i++) {
            OpProfile a, b;
            backend_profile_op(pn, OP_NAMES[i], &a);
            backend_profile_op(pc, OP_NAMES[i], &b);
            if (a.calls != b.calls || a.flops != b.flops || a.bytes != b.bytes)
                snprintf(diff + strlen(diff), sizeof diff - strlen(diff), " %s (%ld/%ld calls, %.0f/%.0f FLOPs, %.0f/%.0f bytes)",
                         OP_NAMES[i], a.calls, b.calls, a.flops, b.flops, a.bytes, b.bytes);
        }
        snprintf(name, sizeof name, "profile_step_work %s: the do-nothing backend records the CPU step's calls, FLOPs, bytes",
                 compressed ? "compressed" : "full");
        check(!rc && !*diff, name, "rc %d, differ:%s", rc, diff);
        const ModelConfig c = tu_tiny_config();
        const double N = 2.0 * 16, D = c.d_model, Hd = c.n_heads * c.head_dim, P = Hd + 2.0 * c.n_kv_heads * c.head_dim;
        const double F = c.d_ff, V = c.vocab_size, mm = 2.0 * N * c.n_layers * (P * D + D * Hd + 2 * F * D + D * F);
        OpProfile f, bw, cl;
        backend_profile_op(pn, "matmul_fwd", &f);
        backend_profile_op(pn, "matmul_bwd", &bw);
        backend_profile_op(pn, "classifier", &cl);
        snprintf(name, sizeof name, "profile_step_work %s: matmul FLOPs 2NL(PD + D Hd + 3FD) fwd, twice bwd; classifier 6NDV",
                 compressed ? "compressed" : "full");
        check(near(f.flops, mm) && near(bw.flops, 2 * mm) && near(cl.flops, 6 * N * D * V), name,
              "fwd %.0f (want %.0f), bwd %.0f (want %.0f), classifier %.0f (want %.0f)", f.flops, mm, bw.flops, 2 * mm,
              cl.flops, 6 * N * D * V);
    }
    backend_profile_free(pn);
    backend_profile_free(pc);
    backend_counting_free(nop);
}

int main(void) {
    const Backend *cpu = backend_cpu(2);
    const Backend *prof = backend_profiled(cpu);
    g_cpu = cpu;
    check(prof && backend_is_profiled(prof) && !backend_is_profiled(cpu), "profile_made", "backend_profiled failed");
    if (!prof) return check_exit_code();
    int all = 1;
#define OP(ret, op, params, args) all &= prof->op != NULL;
#include "kernels/ops.def"
#undef OP
    check(all && !strcmp(prof->name, cpu->name) && prof->act_bytes == cpu->act_bytes && prof->device == cpu->device &&
              prof->peak_flops == cpu->peak_flops && prof->collectives == NULL,
          "profile_interface: every op present, the inner backend's name, act_bytes, device, peak", "name %s act %zu",
          prof->name, prof->act_bytes);
    OpProfile dummy;
    check(backend_profile_op(prof, "no_such_op", &dummy) == -1 && backend_profile_op(cpu, "add", &dummy) == -1,
          "profile_op_lookup: an unknown op or an unprofiled backend is -1", "lookup accepted");
    backend_profile_reset(prof);   /* creation made no calls, but start clean */

    /* ---- matmul fwd and bwd ---- */
    const int M = 37, N = 23, K = 19;
    float *h_in = host_rand((size_t)M * K), *h_w = host_rand((size_t)N * K), *h_dout = host_rand((size_t)M * N);
    float *res[2][4];   /* [backend][out, din, dw, din2] */
    const Backend *bes[2] = {cpu, prof};
    for (int b = 0; b < 2; b++) {
        const Backend *be = bes[b];
        act_t *in = dup_to(be, h_in, (size_t)M * K), *w = dup_to(be, h_w, (size_t)N * K), *dout = dup_to(be, h_dout, (size_t)M * N);
        act_t *out = be->alloc(be->ctx, sizeof(float) * M * N), *din = be->alloc(be->ctx, sizeof(float) * M * K);
        float *dw = be->alloc(be->ctx, sizeof(float) * N * K);
        be->matmul_fwd(be->ctx, out, in, w, M, N, K, 0);
        be->matmul_bwd(be->ctx, din, dw, dout, in, w, M, N, K, 0);
        be->matmul_bwd(be->ctx, NULL, dw, dout, in, w, M, N, K, 0);
        be->matmul_fwd(be->ctx, out, in, w, M, N, K, 1);
        res[b][0] = (float *)out; res[b][1] = (float *)din; res[b][2] = dw;
        be->free(be->ctx, in); be->free(be->ctx, w); be->free(be->ctx, dout);
    }
    check(same_bits(res[0][0], res[1][0], (size_t)M * N) && same_bits(res[0][1], res[1][1], (size_t)M * K) &&
              same_bits(res[0][2], res[1][2], (size_t)N * K),
          "profile_matmul_bitwise: out, din, dw equal to the unwrapped backend's", "results differ");
    OpProfile f = op_of(prof, "matmul_fwd"), bw = op_of(prof, "matmul_bwd");
    const double mnk2 = 2.0 * M * N * K;
    check(f.calls == 2 && near(f.flops, 2 * mnk2) && near(f.bytes, 4.0 * ((double)M * K + N * K + M * N + (double)M * K + N * K + 2.0 * M * N)),
          "profile_matmul_fwd_work: 2 calls, 2MNK FLOPs each, (MK + NK + MN (2 accumulating)) x 4 bytes",
          "calls %ld flops %.0f (want %.0f) bytes %.0f", f.calls, f.flops, 2 * mnk2, f.bytes);
    check(bw.calls == 2 && near(bw.flops, 3 * mnk2) && f.seconds > 0 && bw.seconds > 0,
          "profile_matmul_bwd_work: din+dw 4MNK, dw only 2MNK; times recorded", "calls %ld flops %.0f (want %.0f)",
          bw.calls, bw.flops, 3 * mnk2);
    GemmProfile g[8];
    int ng = backend_profile_gemms(prof, g, 8), seen = 0;
    for (int i = 0; i < ng; i++) {
        if (g[i].M != M || g[i].N != N || g[i].K != K) continue;
        if (!strcmp(g[i].product, "fwd") && g[i].calls == 2 && near(g[i].flops, 2 * mnk2)) seen |= 1;
        if (!strcmp(g[i].product, "bwd din+dw") && g[i].calls == 1 && near(g[i].flops, 2 * mnk2)) seen |= 2;
        if (!strcmp(g[i].product, "bwd dw") && g[i].calls == 1 && near(g[i].flops, mnk2)) seen |= 4;
    }
    check(ng == 3 && seen == 7, "profile_gemm_shapes: fwd, bwd din+dw, bwd dw of [37, 23, 19]", "%d shapes, seen %d", ng,
          seen);
    for (int b = 0; b < 2; b++) {
        bes[b]->free(bes[b]->ctx, res[b][0]); bes[b]->free(bes[b]->ctx, res[b][1]); bes[b]->free(bes[b]->ctx, res[b][2]);
    }

    /* ---- add; recording off; reset ---- */
    const size_t n = 1000;
    float *h_x = host_rand(n), *h_y = host_rand(n);
    act_t *y[2];
    for (int b = 0; b < 2; b++) {
        y[b] = dup_to(bes[b], h_y, n);
        act_t *x = dup_to(bes[b], h_x, n);
        bes[b]->add(bes[b]->ctx, y[b], x, n);
        bes[b]->free(bes[b]->ctx, x);
    }
    OpProfile a = op_of(prof, "add");
    check(same_bits(y[0], y[1], n) && a.calls == 1 && near(a.bytes, 3.0 * n * 4) && a.flops == 0,
          "profile_add: bitwise, 1 call, 3 n x 4 bytes", "calls %ld bytes %.0f", a.calls, a.bytes);
    const long uploads = op_of(prof, "upload").calls;
    backend_profile_enable(prof, 0);
    act_t *x2 = dup_to(prof, h_x, n);
    prof->add(prof->ctx, y[1], x2, n);
    cpu->add(cpu->ctx, y[0], x2, n);
    OpProfile a_off = op_of(prof, "add"), up_off = op_of(prof, "upload");
    check(a_off.calls == 1 && up_off.calls == uploads && uploads > 0 && same_bits(y[0], y[1], n),
          "profile_off: not recording, calls are forwarded and not counted", "add calls %ld, uploads %ld (%ld before)",
          a_off.calls, up_off.calls, uploads);
    backend_profile_enable(prof, 1);
    double ss[2];
    for (int b = 0; b < 2; b++) ss[b] = bes[b]->sumsq(bes[b]->ctx, (const float *)y[b], n);
    OpProfile sq = op_of(prof, "sumsq");
    check(ss[0] == ss[1] && sq.calls == 1 && near(sq.bytes, 4.0 * n), "profile_value_op: sumsq's value and 4 n bytes",
          "%.17g vs %.17g, bytes %.0f", ss[0], ss[1], sq.bytes);
    prof->free(prof->ctx, x2);
    cpu->free(cpu->ctx, y[0]); prof->free(prof->ctx, y[1]);

    /* ---- attention: visible keys counted by hand ---- */
    static const int strides_4_2[2] = {4, 2};   /* docs/spec.md §6.4: multi-rate strides */
    /* learned boundaries (docs/spec.md §6.5), tail, T 8: sequence 0's entries end at 3, 7; sequence
     * 1's at 1, 4, 6 (slots past the count hold T). Keys (entries + raw tokens after the last
     * visible end) per query t = 0..7: sequence 0: 1,2,3, 1,2,3,4, 2 = 18; sequence 1: 1, 1,2,3,
     * 2,3, 3,4 = 19; 37 over the batch, 18.5 per sequence */
    static const int32_t ends_b2[6] = {3, 7, 8, 1, 4, 6}, count_b2[2] = {2, 3};
    struct { const char *name; AttnShape s; double keys_per_head; } att[4] = {
        /* full causal: query t sees t + 1 keys: T (T + 1) / 2 per (sequence, query head) */
        {"full T=10", {.B = 2, .T = 10, .H = 4, .G = 2, .d = 8, .visibility = VIS_FULL, .grid = GRID_ALIGNED}, 55},
        /* W4/S4 tail, T 8, one KV head: entries n_t = 0 (t < 3), 1 (t = 3..6), 2 (t = 7); raw tokens
         * after the last visible window: t + 1 (t < 3), t - 3 (t = 3..6), 0 (t = 7):
         * 1+2+3 + (1+0)+(1+1)+(1+2)+(1+3) + 2 = 18 */
        {"tail W4/S4 T=8", {.B = 2, .T = 8, .H = 3, .G = 1, .d = 8, .n_windows = 2, .window = 4, .stride = 4,
                            .visibility = VIS_TAIL, .grid = GRID_ALIGNED}, 18},
        /* multi-rate W4 tail, T 8, strides 4, 2 (one query head each): head 0 as above, 18; head 1
         * (S 2: entries end at 3, 5, 7): 1+2+3 + (1+0)+(1+1)+(2+0)+(2+1)+(3+0) = 17; mean 17.5 */
        {"tail W4 strides 4,2 T=8", {.B = 2, .T = 8, .H = 2, .G = 2, .d = 8, .n_windows = 3, .window = 4, .stride = 2,
                                     .visibility = VIS_TAIL, .grid = GRID_ALIGNED, .head_stride = strides_4_2}, 17.5},
        {"learned ends tail T=8", {.B = 2, .T = 8, .H = 2, .G = 1, .d = 8, .n_windows = 3, .window = 4, .stride = 2,
                                   .visibility = VIS_TAIL, .grid = GRID_ALIGNED, .entry_ends = ends_b2,
                                   .entry_count = count_b2}, 18.5},
    };
    for (int c = 0; c < 4; c++) {
        const AttnShape *s = &att[c].s;
        const size_t nq = (size_t)s->B * s->T * s->H * s->d, nk = (size_t)s->B * s->T * s->G * s->d;
        const size_t ne = (size_t)s->B * (s->n_windows ? s->n_windows : 1) * s->G * s->d, nl = (size_t)s->B * s->T * s->H;
        float *hq = host_rand(nq), *hk = host_rand(nk), *hv = host_rand(nk), *hck = host_rand(ne), *hcv = host_rand(ne);
        float *hdo = host_rand(nq);
        float *got[2][4];
        backend_profile_reset(prof);
        for (int b = 0; b < 2; b++) {
            const Backend *be = bes[b];
            act_t *q = tdup_to(be, hq, nq), *k = tdup_to(be, hk, nk), *v = tdup_to(be, hv, nk);
            act_t *ck = s->n_windows ? tdup_to(be, hck, ne) : NULL, *cv = s->n_windows ? tdup_to(be, hcv, ne) : NULL;
            act_t *dout = tdup_to(be, hdo, nq), *out = talloc(be, nq * 4), *dq = talloc(be, nq * 4);
            act_t *dk = talloc(be, nk * 4), *dv = talloc(be, nk * 4);
            act_t *dck = s->n_windows ? talloc(be, ne * 4) : NULL, *dcv = s->n_windows ? talloc(be, ne * 4) : NULL;
            float *lse = talloc(be, nl * 4);
            be->attention_fwd(be->ctx, s, out, lse, q, k, v, ck, cv, NULL);
            be->attention_bwd(be->ctx, s, dq, dk, dv, dck, dcv, NULL, dout, out, lse, q, k, v, ck, cv, NULL);
            got[b][0] = (float *)out; got[b][1] = (float *)dq; got[b][2] = (float *)dk; got[b][3] = (float *)dv;
        }
        int same = same_bits(got[0][0], got[1][0], nq) && same_bits(got[0][1], got[1][1], nq) &&
                   same_bits(got[0][2], got[1][2], nk) && same_bits(got[0][3], got[1][3], nk);
        const double pairs = att[c].keys_per_head * s->B * s->H;
        OpProfile af = op_of(prof, "attention_fwd"), ab = op_of(prof, "attention_bwd");
        char name[128];
        snprintf(name, sizeof name, "profile_attention %s: bitwise; fwd 4d and bwd 10d FLOPs per (head, query, visible key)",
                 att[c].name);
        check(same && af.calls == 1 && ab.calls == 1 && near(af.flops, 4.0 * s->d * pairs) && near(ab.flops, 10.0 * s->d * pairs),
              name, "same %d, fwd %.0f (want %.0f), bwd %.0f (want %.0f)", same, af.flops, 4.0 * s->d * pairs, ab.flops,
              10.0 * s->d * pairs);
        free(hq); free(hk); free(hv); free(hck); free(hcv); free(hdo);
    }

    /* ---- classifier ---- */
    {
        const int Nr = 5, D = 8, V = 11;
        float *hx = host_rand((size_t)Nr * D), *he = host_rand((size_t)V * D);
        int32_t tg[5] = {1, 10, -1, 3, 0};
        float *loss[2], *dxs[2], *des[2];
        backend_profile_reset(prof);
        for (int b = 0; b < 2; b++) {
            const Backend *be = bes[b];
            act_t *x = tdup_to(be, hx, (size_t)Nr * D), *e = tdup_to(be, he, (size_t)V * D);
            int32_t *t = talloc(be, sizeof tg);
            be->upload(be->ctx, t, tg, sizeof tg);
            loss[b] = talloc(be, sizeof(float) * Nr);
            dxs[b] = talloc(be, sizeof(float) * Nr * D);
            des[b] = talloc(be, sizeof(float) * V * D);
            be->classifier(be->ctx, x, e, t, Nr, D, V, loss[b], (act_t *)dxs[b], des[b], 0.5f);
            be->classifier(be->ctx, x, e, t, Nr, D, V, loss[b], NULL, NULL, 0.5f);
        }
        OpProfile cl = op_of(prof, "classifier");
        const double ndv2 = 2.0 * Nr * D * V;
        check(same_bits(loss[0], loss[1], Nr) && same_bits(dxs[0], dxs[1], (size_t)Nr * D) &&
                  same_bits(des[0], des[1], (size_t)V * D) && cl.calls == 2 && near(cl.flops, 3 * ndv2 + ndv2),
              "profile_classifier: bitwise; 6NDV with dx, 2NDV without", "calls %ld flops %.0f (want %.0f)", cl.calls,
              cl.flops, 4 * ndv2);
        free(hx); free(he);
    }

    /* ---- the report ---- */
    {
        char *buf = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&buf, &len);
        backend_profile_report(mf, prof, 1.0);
        fclose(mf);
        check(buf && strstr(buf, "classifier") && strstr(buf, "GFLOP/s") && strstr(buf, "(between ops)"),
              "profile_report: a row per op called, rates, the time between ops", "report:\n%s", buf ? buf : "");
        free(buf);
        backend_profile_reset(prof);
        OpProfile z = op_of(prof, "classifier");
        GemmProfile gz[1];
        check(z.calls == 0 && z.seconds == 0 && backend_profile_gemms(prof, gz, 1) == 0, "profile_reset: counts forgotten",
              "calls %ld", z.calls);
    }

    /* ---- the clock includes the inner synchronize ---- */
    {
        Backend slow = *cpu;
        slow.add = slow_add;
        slow.synchronize = slow_synchronize;
        const Backend *ps = backend_profiled(&slow);
        float *yy = malloc(sizeof(float) * 64), *xx = calloc(64, sizeof(float));
        for (int i = 0; i < 64; i++) yy[i] = (float)i;
        ps->add(ps->ctx, (act_t *)yy, (const act_t *)xx, 64);
        OpProfile s = op_of(ps, "add");
        check(s.calls == 1 && s.seconds >= 0.029 && !g_pending,
              "profile_synchronized: an op's time includes the inner synchronize that waits for its work",
              "%.4f s (want >= 0.03)", s.seconds);
        backend_profile_free(ps);
        free(yy); free(xx);
    }
    test_step_work(cpu);
    free_tracked();
    backend_profile_free(prof);
    free(h_in); free(h_w); free(h_dout); free(h_x); free(h_y);
    return check_exit_code();
}
