/* Parity of the CUDA backend against the CPU reference backend, op by op (kernels/kernels.h).
 *
 * Every op gets the same random inputs on both backends. Inputs are rounded to bf16 on the host
 * first, so both see identical values; the CUDA result then differs only by its bf16 outputs
 * and intermediates. The comparison is the normalised max error
 *     max_i |cuda_i - cpu_i| / max_i |cpu_i|
 * against a bf16-sized tolerance (1e-2 .. 3e-2; fp32-only ops tighter), plus a NaN check.
 * Determinism checks run a backward twice on the GPU and require identical bits.
 * Without a GPU (or without a CUDA build) each check group prints one skip line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "common/errors.h"
#include "tests/check.h"

static const char *GROUPS[] = {"elementwise", "embedding", "rmsnorm", "matmul", "rope", "attention",
                               "compressor", "classifier", "optimizer", "determinism"};
#define N_GROUPS ((int)(sizeof GROUPS / sizeof GROUPS[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    char name[64];
    for (int i = 0; i < N_GROUPS; i++) {
        snprintf(name, sizeof name, "cuda_parity_%s", GROUPS[i]);
        check_skip(name, "no GPU (built without CUDA)");
    }
    return 0;
}
#else

static const Backend *CPU, *GPU;
static uint64_t rng_state = 12345;

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
static void *put_i32(const Backend *be, const int32_t *h, size_t n) {
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
    char name[192];
    snprintf(name, sizeof name, "cuda_parity_%s: %s", group, what);
    int nan_;
    double e = nerr(ref, got, n, &nan_);
    check(!nan_ && e <= tol, name, "normalised max error %.3g (tolerance %.3g)%s over %zu values", e, tol,
          nan_ ? ", non-finite values" : "", n);
}

/* both backends: upload the same host data */
typedef struct { void *c, *g; } Pair;
static Pair pa(const float *h, size_t n) { Pair p = {put_act(CPU, h, n), put_act(GPU, h, n)}; return p; }
static Pair pf(const float *h, size_t n) { Pair p = {put_f32(CPU, h, n), put_f32(GPU, h, n)}; return p; }
static Pair pi(const int32_t *h, size_t n) { Pair p = {put_i32(CPU, h, n), put_i32(GPU, h, n)}; return p; }
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

/* ---------------------------------------------------------------- */
static void test_elementwise(void) {
    const char *G = "elementwise";
    size_t sizes[2] = {1001, 4096};
    for (int si = 0; si < 2; si++) {
        size_t n = sizes[si];
        char w[64];
        float *hy = hrand(n, 1, 0), *hx = hrand(n, 1, 0), *hg = hrand(n, 2, 0), *hu = hrand(n, 1, 0);
        Pair y = pa(hy, n), x = pa(hx, n), g = pa(hg, n), u = pa(hu, n), h = pa(hy, n), dg = pa(hy, n), du = pa(hy, n);
        CPU->add(CPU->ctx, y.c, x.c, n); GPU->add(GPU->ctx, y.g, x.g, n);
        snprintf(w, sizeof w, "add n=%zu", n); cmp_act(G, w, y, n, 1e-2);
        CPU->swiglu_fwd(CPU->ctx, h.c, g.c, u.c, n); GPU->swiglu_fwd(GPU->ctx, h.g, g.g, u.g, n);
        snprintf(w, sizeof w, "swiglu_fwd n=%zu", n); cmp_act(G, w, h, n, 1e-2);
        CPU->swiglu_bwd(CPU->ctx, dg.c, du.c, x.c, g.c, u.c, n); GPU->swiglu_bwd(GPU->ctx, dg.g, du.g, x.g, g.g, u.g, n);
        snprintf(w, sizeof w, "swiglu_bwd dg n=%zu", n); cmp_act(G, w, dg, n, 1e-2);
        snprintf(w, sizeof w, "swiglu_bwd du n=%zu", n); cmp_act(G, w, du, n, 1e-2);
        /* cast_params fp32 -> act and the act round trip */
        float *hp = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) hp[i] = (float)nrand();
        Pair p32 = pf(hp, n), pact = pa(hy, n);
        CPU->cast_params(CPU->ctx, pact.c, p32.c, n); GPU->cast_params(GPU->ctx, pact.g, p32.g, n);
        snprintf(w, sizeof w, "cast_params n=%zu", n); cmp_act(G, w, pact, n, 5e-3);
        pfree(y); pfree(x); pfree(g); pfree(u); pfree(h); pfree(dg); pfree(du); pfree(p32); pfree(pact);
        free(hy); free(hx); free(hg); free(hu); free(hp);
    }
}

static void test_embedding(void) {
    const char *G = "embedding";
    int N = 300, D = 40, V = 50;
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V) % V;
    float *ht = hrand((size_t)V * D, 1, 0), *hd = hrand((size_t)N * D, 1, 0), *hdt = hrand((size_t)V * D, 1, 0);
    Pair t = pi(tok, N), table = pa(ht, (size_t)V * D), out = pa(hd, (size_t)N * D), dout = pa(hd, (size_t)N * D);
    Pair dtab = pf(hdt, (size_t)V * D);
    CPU->embedding_fwd(CPU->ctx, out.c, t.c, table.c, N, D); GPU->embedding_fwd(GPU->ctx, out.g, t.g, table.g, N, D);
    cmp_act(G, "embedding_fwd", out, (size_t)N * D, 1e-6);
    CPU->embedding_bwd(CPU->ctx, dtab.c, t.c, dout.c, N, D); GPU->embedding_bwd(GPU->ctx, dtab.g, t.g, dout.g, N, D);
    cmp_f32(G, "embedding_bwd (dtable +=)", dtab, (size_t)V * D, 1e-5);
    pfree(t); pfree(table); pfree(out); pfree(dout); pfree(dtab);
    free(tok); free(ht); free(hd); free(hdt);
}

static void test_rmsnorm(void) {
    const char *G = "rmsnorm";
    int shapes[3][2] = {{50, 96}, {300, 128}, {7, 33}};
    for (int si = 0; si < 3; si++) {
        int rows = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)rows * C;
        char w[96];
        float *hx = hrand(n, 1.5, 0.2), *hw = hrand(C, 0.2, 1.0), *hdy = hrand(n, 1, 0), *hdin = hrand(n, 1, 0),
              *hdw = hrand(C, 1, 0);
        float *hz = calloc(rows, sizeof(float));
        Pair x = pa(hx, n), wt = pa(hw, C), out = pa(hx, n), rstd = pf(hz, rows), dy = pa(hdy, n);
        free(hz);
        CPU->rmsnorm_fwd(CPU->ctx, out.c, rstd.c, x.c, wt.c, rows, C, 1e-6f);
        GPU->rmsnorm_fwd(GPU->ctx, out.g, rstd.g, x.g, wt.g, rows, C, 1e-6f);
        snprintf(w, sizeof w, "rmsnorm_fwd out [%d,%d]", rows, C); cmp_act(G, w, out, n, 1e-2);
        snprintf(w, sizeof w, "rmsnorm_fwd rstd [%d,%d]", rows, C); cmp_f32(G, w, rstd, rows, 1e-4);
        for (int acc = 0; acc < 2; acc++) {
            Pair din = pa(hdin, n), dw = pf(hdw, C);
            CPU->rmsnorm_bwd(CPU->ctx, din.c, dw.c, dy.c, x.c, wt.c, rstd.c, rows, C, acc);
            GPU->rmsnorm_bwd(GPU->ctx, din.g, dw.g, dy.g, x.g, wt.g, rstd.g, rows, C, acc);
            snprintf(w, sizeof w, "rmsnorm_bwd din [%d,%d] accumulate=%d", rows, C, acc); cmp_act(G, w, din, n, 1.5e-2);
            snprintf(w, sizeof w, "rmsnorm_bwd dw [%d,%d] accumulate=%d", rows, C, acc); cmp_f32(G, w, dw, C, 1e-2);
            pfree(din); pfree(dw);
        }
        pfree(x); pfree(wt); pfree(out); pfree(rstd); pfree(dy);
        free(hx); free(hw); free(hdy); free(hdin); free(hdw);
    }
}

static void test_matmul(void) {
    const char *G = "matmul";
    int shapes[3][3] = {{67, 96, 80}, {33, 50, 24}, {256, 384, 512}};
    for (int si = 0; si < 3; si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        char w[96];
        float *hin = hrand((size_t)M * K, 1, 0), *hw = hrand((size_t)N * K, 0.1, 0), *hout = hrand((size_t)M * N, 1, 0),
              *hdw = hrand((size_t)N * K, 1, 0), *hdin = hrand((size_t)M * K, 1, 0);
        Pair in = pa(hin, (size_t)M * K), wt = pa(hw, (size_t)N * K);
        for (int acc = 0; acc < 2; acc++) {
            Pair out = pa(hout, (size_t)M * N), din = pa(hdin, (size_t)M * K), dw = pf(hdw, (size_t)N * K);
            CPU->matmul_fwd(CPU->ctx, out.c, in.c, wt.c, M, N, K, acc); GPU->matmul_fwd(GPU->ctx, out.g, in.g, wt.g, M, N, K, acc);
            snprintf(w, sizeof w, "matmul_fwd %dx%dx%d accumulate=%d", M, N, K, acc); cmp_act(G, w, out, (size_t)M * N, 1e-2);
            CPU->matmul_bwd(CPU->ctx, din.c, dw.c, out.c, in.c, wt.c, M, N, K, acc);
            GPU->matmul_bwd(GPU->ctx, din.g, dw.g, out.g, in.g, wt.g, M, N, K, acc);
            snprintf(w, sizeof w, "matmul_bwd din %dx%dx%d accumulate=%d", M, N, K, acc); cmp_act(G, w, din, (size_t)M * K, 1.5e-2);
            snprintf(w, sizeof w, "matmul_bwd dw %dx%dx%d", M, N, K); cmp_f32(G, w, dw, (size_t)N * K, 1.5e-2);
            pfree(out); pfree(din); pfree(dw);
        }
        pfree(in); pfree(wt);
        free(hin); free(hw); free(hout); free(hdw); free(hdin);
    }
}

static void test_rope(void) {
    const char *G = "rope";
    int rows = 20, nh = 3, d = 32, period = 10, mult = 3;
    int rs[2] = {32, 16};
    for (int ri = 0; ri < 2; ri++)
        for (int inv = 0; inv < 2; inv++) {
            int r = rs[ri];
            int positions = (period - 1) * mult + 1;
            float *tab = rope_table(positions, r, 1e6);
            Pair cs = pf(tab, (size_t)positions * r);
            size_t n = (size_t)rows * nh * d;
            float *hx = hrand(n, 1, 0);
            Pair x = pa(hx, n);
            CPU->rope(CPU->ctx, x.c, cs.c, rows, nh, d, r, period, mult, inv);
            GPU->rope(GPU->ctx, x.g, cs.g, rows, nh, d, r, period, mult, inv);
            char w[96];
            snprintf(w, sizeof w, "rope r=%d inverse=%d", r, inv);
            cmp_act(G, w, x, n, 1e-2);
            pfree(cs); pfree(x); free(tab); free(hx);
        }
}

/* ---- attention ---- */
typedef struct { const char *name; int B, T, H, G, d, W, S, vis, n_local, compressed, sink; } AttCase;

/* Variants of a case: ATT_NO_ENTRY_GRADS passes NULL for dck, dcv and dsink (gradients not
 * wanted while entries and the sink are visible). The name gets a suffix (g_att_suffix) when a
 * case runs more than once, e.g. with the cuDNN path and with the custom kernels. */
enum { ATT_ALL_GRADS = 0, ATT_NO_ENTRY_GRADS = 1 };
static const char *g_att_suffix = "";

static void run_attention_case_mode(const AttCase *ac, int mode);
static void run_attention_case(const AttCase *ac) { run_attention_case_mode(ac, ATT_ALL_GRADS); }

static void run_attention_case_mode(const AttCase *ac, int mode) {
    char name[160];
    snprintf(name, sizeof name, "%s%s%s", ac->name, mode == ATT_NO_ENTRY_GRADS ? " (no dck/dcv/dsink)" : "", g_att_suffix);
    AttCase acn = *ac;
    acn.name = name;
    ac = &acn;
    const char *G = "attention";
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = ac->B; s.T = ac->T; s.H = ac->H; s.G = ac->G; s.d = ac->d;
    s.window = ac->W; s.stride = ac->S; s.visibility = ac->vis; s.n_local = ac->n_local;
    s.n_windows = ac->compressed && ac->T >= ac->W ? (ac->T - ac->W) / ac->S + 1 : 0;
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d;
    size_t nc = (size_t)s.B * (s.n_windows ? s.n_windows : 1) * s.G * s.d, nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, 1, 0), *hk = hrand(nk, 1, 0), *hv = hrand(nk, 1, 0), *hck = hrand(nc, 1, 0),
          *hcv = hrand(nc, 1, 0), *hdo = hrand(nq, 1, 0), *hs = hrand(s.H, 1, 0), *hds = hrand(s.H, 1, 0);
    Pair q = pa(hq, nq), k = pa(hk, nk), v = pa(hv, nk), ck = s.n_windows ? pa(hck, nc) : pnull(),
         cv = s.n_windows ? pa(hcv, nc) : pnull(), dout = pa(hdo, nq), out = pa(hq, nq), lse = pf(hq, nl);
    Pair sink = ac->sink ? pf(hs, s.H) : pnull(), dsink = pf(hds, s.H);
    Pair dq = pa(hq, nq), dk = pa(hk, nk), dv = pa(hk, nk), dck = pa(hck, nc), dcv = pa(hcv, nc);
    CPU->attention_fwd(CPU->ctx, &s, out.c, lse.c, q.c, k.c, v.c, ck.c, cv.c, sink.c);
    GPU->attention_fwd(GPU->ctx, &s, out.g, lse.g, q.g, k.g, v.g, ck.g, cv.g, sink.g);
    char w[192];
    snprintf(w, sizeof w, "%s fwd out", ac->name); cmp_act(G, w, out, nq, 1.5e-2);
    snprintf(w, sizeof w, "%s fwd lse", ac->name); cmp_f32(G, w, lse, nl, 5e-3);
    /* the backward reads the CPU's forward results on both sides: same out (rounded to bf16) and lse */
    float *hout = get_act(CPU, out.c, nq), *hlse = get_f32(CPU, lse.c, nl);
    for (size_t i = 0; i < nq; i++) hout[i] = bfr(hout[i]);   /* what the GPU side holds */
    Pair out2 = pa(hout, nq), lse2 = pf(hlse, nl);
    int want = mode == ATT_ALL_GRADS;
    /* (the CPU reference always computes every gradient: only the CUDA side gets the NULLs) */
    CPU->attention_bwd(CPU->ctx, &s, dq.c, dk.c, dv.c, s.n_windows ? dck.c : NULL, s.n_windows ? dcv.c : NULL,
                       ac->sink ? dsink.c : NULL, dout.c, out2.c, lse2.c, q.c, k.c, v.c, ck.c, cv.c, sink.c);
    GPU->attention_bwd(GPU->ctx, &s, dq.g, dk.g, dv.g, s.n_windows && want ? dck.g : NULL, s.n_windows && want ? dcv.g : NULL,
                       ac->sink && want ? dsink.g : NULL, dout.g, out2.g, lse2.g, q.g, k.g, v.g, ck.g, cv.g, sink.g);
    snprintf(w, sizeof w, "%s bwd dq", ac->name); cmp_act(G, w, dq, nq, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dk", ac->name); cmp_act(G, w, dk, nk, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dv", ac->name); cmp_act(G, w, dv, nk, 2.5e-2);
    if (s.n_windows && want) {
        snprintf(w, sizeof w, "%s bwd dck", ac->name); cmp_act(G, w, dck, nc, 2.5e-2);
        snprintf(w, sizeof w, "%s bwd dcv", ac->name); cmp_act(G, w, dcv, nc, 2.5e-2);
    }
    if (ac->sink && want) { snprintf(w, sizeof w, "%s bwd dsink (+=)", ac->name); cmp_f32(G, w, dsink, s.H, 2e-2); }
    pfree(q); pfree(k); pfree(v); pfree(ck); pfree(cv); pfree(dout); pfree(out); pfree(lse); pfree(sink);
    pfree(dsink); pfree(dq); pfree(dk); pfree(dv); pfree(dck); pfree(dcv); pfree(out2); pfree(lse2);
    free(hq); free(hk); free(hv); free(hck); free(hcv); free(hdo); free(hs); free(hds); free(hout); free(hlse);
}

static const AttCase ATT_CASES[] = {
    /* name                               B  T    H  G  d    W  S  vis         nloc comp sink */
    {"full T=150 H4 G2 d32",              2, 150, 4, 2, 32,  8, 8, VIS_FULL,   16,  0,   0},
    {"full T=130 H4 G1 d64 sink",         1, 130, 4, 1, 64,  8, 8, VIS_FULL,   16,  0,   1},
    {"full T=200 H2 G2 d128",             1, 200, 2, 2, 128, 8, 8, VIS_FULL,   16,  0,   0},
    {"window W8 S8 nloc16 d64 sink",      2, 200, 4, 2, 64,  8, 8, VIS_WINDOW, 16,  1,   1},
    {"window S<W (W6 S3) nloc5 d40 G1",   1, 90,  2, 1, 40,  6, 3, VIS_WINDOW, 5,   1,   0},
    {"tail W8 S4 d128 G4",                1, 100, 4, 4, 128, 8, 4, VIS_TAIL,   16,  1,   0},
    {"tail W4 S4 nW>64 d16 sink",         1, 600, 2, 1, 16,  4, 4, VIS_TAIL,   16,  1,   1},
    {"window W8 S8 T<W (no entries)",     1, 6,   2, 1, 32,  8, 8, VIS_WINDOW, 4,   1,   1},
    {"window W16 S8 nloc16 d128 H16 G8",  1, 300, 16, 8, 128, 16, 8, VIS_WINDOW, 16, 1,   0},
    {"window W4 S4 nloc1 d36 (unaligned)", 1, 70,  2, 1, 36,  4, 4, VIS_WINDOW, 1,   1,   1},
    {"full T=77 H6 G3 d36 (unaligned)",   2, 77,  6, 3, 36,  8, 8, VIS_FULL,   16,  0,   0},
};

static void test_attention(void) {
    /* Full attention without a sink goes to cuDNN's fused attention where cuDNN takes it: those
     * cases run three times, with the custom kernels (PHASELAB_ATTN=custom), with the default
     * path (cuDNN forward) and with the cuDNN backward too (PHASELAB_CUDNN_ATTN_BWD=1). */
    for (size_t i = 0; i < sizeof ATT_CASES / sizeof ATT_CASES[0]; i++) {
        const AttCase *ac = &ATT_CASES[i];
        if (ac->vis == VIS_FULL && !ac->sink) {
            setenv("PHASELAB_ATTN", "custom", 1);
            g_att_suffix = " [custom kernels]";
            run_attention_case(ac);
            unsetenv("PHASELAB_ATTN");
            g_att_suffix = " [default: cuDNN fwd if available]";
            run_attention_case(ac);
            setenv("PHASELAB_CUDNN_ATTN_BWD", "1", 1);
            g_att_suffix = " [cuDNN fwd+bwd if available]";
            run_attention_case(ac);
            unsetenv("PHASELAB_CUDNN_ATTN_BWD");
            g_att_suffix = "";
        } else {
            run_attention_case(ac);
        }
    }
    run_attention_case_mode(&ATT_CASES[3], ATT_NO_ENTRY_GRADS);   /* window W8 S8 with a sink */
}

/* ---- compressor ---- */
/* maps: 0 paper (one map per offset), 1 deepseek (two half-window maps), 2 shared (SPEC.md 2b: one) */
typedef struct { const char *name; int B, T, D, G, d, W, S, gate, bias, post, maps; } CompCase;

static void run_compressor_case(const CompCase *cc, int check_determinism) {
    const char *G = check_determinism ? "determinism" : "compressor";
    CompShape s;
    memset(&s, 0, sizeof s);
    s.B = cc->B; s.T = cc->T; s.D = cc->D; s.G = cc->G; s.d = cc->d; s.window = cc->W; s.stride = cc->S;
    s.n_windows = cc->T >= cc->W ? (cc->T - cc->W) / cc->S + 1 : 0;
    s.gate = cc->gate;
    s.channels = cc->gate == GATE_VECTOR ? cc->d : 1;
    s.n_maps = cc->maps == 1 ? 2 : cc->maps == 2 ? 1 : cc->W;
    s.eps = 1e-6f;
    int c = s.channels, M = s.n_maps, W = s.window;
    size_t na = (size_t)s.B * s.T * s.D, ne = (size_t)s.B * s.n_windows * s.G * s.d;
    size_t nslot = (size_t)s.B * s.n_windows * s.G * W;
    size_t ngw = (size_t)s.G * M * c * s.D, ngb = (size_t)s.G * W * c, npw = (size_t)s.G * M * s.d * s.D;
    float *ha = hrand(na, 1, 0), *hgw = hrand(ngw, 0.3, 0), *hgb = hrand(ngb, 0.5, 0),
          *hpw = hrand(npw, 1.0 / sqrt((double)s.D), 0), *hpost = hrand(s.d, 0.2, 1.0), *hde = hrand(ne, 1, 0),
          *hda = hrand(na, 0.1, 0), *hdgw = hrand(ngw, 0.1, 0), *hdgb = hrand(ngb, 0.1, 0), *hdpw = hrand(npw, 0.1, 0),
          *hdpost = hrand(s.d, 0.1, 0), *hz = calloc(nslot * (c > s.d ? c : s.d) + 1, sizeof(float));
    int gated = cc->gate != GATE_UNIFORM;
    Pair a = pa(ha, na), gw = gated ? pa(hgw, ngw) : pnull(), gb = gated && cc->bias ? pa(hgb, ngb) : pnull(),
         pw = pa(hpw, npw), post = cc->post ? pa(hpost, s.d) : pnull(), de = pa(hde, ne);
    Pair entry = pa(hz, ne), alpha = pf(hz, nslot * c), payload = pa(hz, nslot * s.d), pnr = pf(hz, nslot);
    Pair da = pa(hda, na), dgw = gated ? pf(hdgw, ngw) : pnull(), dgb = gated && cc->bias ? pf(hdgb, ngb) : pnull(),
         dpw = pf(hdpw, npw), dpost = cc->post ? pf(hdpost, s.d) : pnull();
    char w[192];
    if (!check_determinism) {
        CPU->compressor_fwd(CPU->ctx, &s, entry.c, alpha.c, payload.c, pnr.c, a.c, gw.c, gb.c, pw.c, post.c);
        GPU->compressor_fwd(GPU->ctx, &s, entry.g, alpha.g, payload.g, pnr.g, a.g, gw.g, gb.g, pw.g, post.g);
        snprintf(w, sizeof w, "%s fwd entry", cc->name); cmp_act(G, w, entry, ne, 1.5e-2);
        snprintf(w, sizeof w, "%s fwd alpha", cc->name); cmp_f32(G, w, alpha, nslot * c, 1e-2);
        snprintf(w, sizeof w, "%s fwd payload", cc->name); cmp_act(G, w, payload, nslot * s.d, 1e-2);
        if (cc->post) { snprintf(w, sizeof w, "%s fwd pn_rstd", cc->name); cmp_f32(G, w, pnr, nslot, 1e-2); }
        /* backward from the CPU's forward state on both sides */
        float *halpha = get_f32(CPU, alpha.c, nslot * c), *hpay = get_act(CPU, payload.c, nslot * s.d),
              *hpnr = get_f32(CPU, pnr.c, nslot);
        for (size_t i = 0; i < nslot * s.d; i++) hpay[i] = bfr(hpay[i]);
        Pair alpha2 = pf(halpha, nslot * c), pay2 = pa(hpay, nslot * s.d), pnr2 = pf(hpnr, nslot);
        CPU->compressor_bwd(CPU->ctx, &s, da.c, dgw.c, dgb.c, dpw.c, dpost.c, de.c, alpha2.c, pay2.c, pnr2.c, a.c, gw.c, pw.c, post.c, NULL);
        GPU->compressor_bwd(GPU->ctx, &s, da.g, dgw.g, dgb.g, dpw.g, dpost.g, de.g, alpha2.g, pay2.g, pnr2.g, a.g, gw.g, pw.g, post.g, NULL);
        snprintf(w, sizeof w, "%s bwd da (+=)", cc->name); cmp_act(G, w, da, na, 1.5e-2);
        snprintf(w, sizeof w, "%s bwd dpayload_w (+=)", cc->name); cmp_f32(G, w, dpw, npw, 2e-2);
        if (gated) { snprintf(w, sizeof w, "%s bwd dgate_w (+=)", cc->name); cmp_f32(G, w, dgw, ngw, 2e-2); }
        if (gated && cc->bias) { snprintf(w, sizeof w, "%s bwd dgate_b (+=)", cc->name); cmp_f32(G, w, dgb, ngb, 2e-2); }
        if (cc->post) { snprintf(w, sizeof w, "%s bwd dpost_w (+=)", cc->name); cmp_f32(G, w, dpost, s.d, 2e-2); }
        pfree(alpha2); pfree(pay2); pfree(pnr2);
        free(halpha); free(hpay); free(hpnr);
    } else {
        /* the GPU backward twice from identical state: identical bits */
        GPU->compressor_fwd(GPU->ctx, &s, entry.g, alpha.g, payload.g, pnr.g, a.g, gw.g, gb.g, pw.g, post.g);
        size_t nbytes[2] = {na * GPU->act_bytes, npw * sizeof(float)};
        unsigned char *r1[2], *r2[2];
        for (int rep = 0; rep < 2; rep++) {
            Pair da_r = pa(hda, na), dpw_r = pf(hdpw, npw), dgw_r = gated ? pf(hdgw, ngw) : pnull();
            GPU->compressor_bwd(GPU->ctx, &s, da_r.g, dgw_r.g, NULL, dpw_r.g, NULL, de.g, alpha.g, payload.g, pnr.g, a.g, gw.g, pw.g, post.g, NULL);
            GPU->synchronize(GPU->ctx);
            unsigned char **r = rep ? r2 : r1;
            r[0] = malloc(nbytes[0]); r[1] = malloc(nbytes[1]);
            GPU->download(GPU->ctx, r[0], da_r.g, nbytes[0]);
            GPU->download(GPU->ctx, r[1], dpw_r.g, nbytes[1]);
            pfree(da_r); pfree(dpw_r); pfree(dgw_r);
        }
        snprintf(w, sizeof w, "cuda_parity_determinism: compressor bwd twice gives identical bits (%s)", cc->name);
        check(!memcmp(r1[0], r2[0], nbytes[0]) && !memcmp(r1[1], r2[1], nbytes[1]), w, "results differ");
        for (int i = 0; i < 2; i++) { free(r1[i]); free(r2[i]); }
    }
    pfree(a); pfree(gw); pfree(gb); pfree(pw); pfree(post); pfree(de); pfree(entry); pfree(alpha); pfree(payload);
    pfree(pnr); pfree(da); pfree(dgw); pfree(dgb); pfree(dpw); pfree(dpost);
    free(ha); free(hgw); free(hgb); free(hpw); free(hpost); free(hde); free(hda); free(hdgw); free(hdgb);
    free(hdpw); free(hdpost); free(hz);
}

static const CompCase COMP_CASES[] = {
    /* name                                B  T   D    G  d    W  S  gate            bias post maps */
    {"scalar+bias W8 S8",                  2, 40, 48,  2, 16,  8, 8, GATE_SCALAR,  1,   0,   0},
    {"scalar no-bias W8 S4 (overlap)",     2, 40, 48,  2, 16,  8, 4, GATE_SCALAR,  0,   0,   0},
    {"vector+bias post-norm W4 S4",        2, 36, 32,  2, 16,  4, 4, GATE_VECTOR,  1,   1,   0},
    {"vector no-bias W8 S4 G1 d40",        1, 50, 40,  1, 40,  8, 4, GATE_VECTOR,  0,   0,   0},
    {"uniform post-norm W6 S3",            2, 30, 32,  2, 16,  6, 3, GATE_UNIFORM, 0,   1,   0},
    {"uniform W8 S8",                      1, 64, 64,  1, 32,  8, 8, GATE_UNIFORM, 0,   0,   0},
    {"deepseek scalar+bias W8 S4",         2, 44, 48,  2, 16,  8, 4, GATE_SCALAR,  1,   0,   1},
    {"deepseek vector+bias post W8 S4",    1, 40, 32,  2, 16,  8, 4, GATE_VECTOR,  1,   1,   1},
    {"scalar+bias W8 S8 d128 D256",        1, 64, 256, 2, 128, 8, 8, GATE_SCALAR,  1,   0,   0},
    {"shared scalar+bias W8 S8",           2, 40, 48,  2, 16,  8, 8, GATE_SCALAR,  1,   0,   2},
    {"shared scalar no-bias W8 S4",        2, 40, 48,  2, 16,  8, 4, GATE_SCALAR,  0,   0,   2},
    {"shared vector+bias post W6 S3",      1, 36, 32,  2, 16,  6, 3, GATE_VECTOR,  1,   1,   2},
};

static void test_compressor(void) {
    for (size_t i = 0; i < sizeof COMP_CASES / sizeof COMP_CASES[0]; i++) run_compressor_case(&COMP_CASES[i], 0);
}

/* ---- classifier ---- */
static void run_classifier(int N, int D, int V) {
    const char *G = "classifier";
    char w[128];
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = (i % 7 == 3) ? -1 : (int32_t)(urand() * V) % V;
    float *hx = hrand((size_t)N * D, 1, 0), *he = hrand((size_t)V * D, 0.5, 0), *hdem = hrand((size_t)V * D, 1e-3, 0);
    Pair x = pa(hx, (size_t)N * D), emb = pa(he, (size_t)V * D), t = pi(tg, N), loss = pf(hx, N),
         dx = pa(hx, (size_t)N * D), demb = pf(hdem, (size_t)V * D);
    float gs = 1.0f / N;
    CPU->classifier(CPU->ctx, x.c, emb.c, t.c, N, D, V, loss.c, dx.c, demb.c, gs);
    GPU->classifier(GPU->ctx, x.g, emb.g, t.g, N, D, V, loss.g, dx.g, demb.g, gs);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d losses", N, D, V); cmp_f32(G, w, loss, N, 1e-2);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d dx", N, D, V); cmp_act(G, w, dx, (size_t)N * D, 2e-2);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d demb (+=)", N, D, V); cmp_f32(G, w, demb, (size_t)V * D, 2e-2);
    /* forward only (dx NULL) gives the same losses */
    Pair loss2 = pf(hx, N);
    GPU->classifier(GPU->ctx, x.g, emb.g, t.g, N, D, V, loss2.g, NULL, NULL, gs);
    float *l1 = get_f32(GPU, loss.g, N), *l2 = get_f32(GPU, loss2.g, N);
    snprintf(w, sizeof w, "classifier N=%d V=%d forward-only losses equal", N, V);
    check(!memcmp(l1, l2, sizeof(float) * N), w, "losses differ");
    /* argmax: allow a few near-ties to differ */
    Pair am = pi(tg, N);
    CPU->logits_argmax(CPU->ctx, x.c, emb.c, N, D, V, am.c);
    GPU->logits_argmax(GPU->ctx, x.g, emb.g, N, D, V, am.g);
    int32_t *a1 = malloc(sizeof(int32_t) * N), *a2 = malloc(sizeof(int32_t) * N);
    CPU->download(CPU->ctx, a1, am.c, sizeof(int32_t) * N);
    GPU->synchronize(GPU->ctx);
    GPU->download(GPU->ctx, a2, am.g, sizeof(int32_t) * N);
    int mism = 0;
    for (int i = 0; i < N; i++) mism += a1[i] != a2[i];
    snprintf(w, sizeof w, "logits_argmax N=%d V=%d", N, V);
    check(mism <= N / 20, w, "%d of %d rows differ", mism, N);
    pfree(x); pfree(emb); pfree(t); pfree(loss); pfree(dx); pfree(demb); pfree(loss2); pfree(am);
    free(tg); free(hx); free(he); free(hdem); free(l1); free(l2); free(a1); free(a2);
}

static void test_classifier(void) {
    run_classifier(37, 64, 1000);
    run_classifier(500, 32, 151936);   /* more rows than one chunk of the CUDA backend */
}

/* ---- optimizer ---- */
static void test_optimizer(void) {
    const char *G = "optimizer";
    size_t n = 100003;
    float *hp = malloc(sizeof(float) * n), *hg = malloc(sizeof(float) * n), *hm = malloc(sizeof(float) * n),
          *hv = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        hp[i] = (float)nrand(); hg[i] = (float)(0.1 * nrand()); hm[i] = (float)(0.01 * nrand());
        hv[i] = (float)(1e-4 * urand());
    }
    Pair p = pf(hp, n), g = pf(hg, n), m = pf(hm, n), v = pf(hv, n);
    for (int step = 0; step < 3; step++) {
        CPU->adamw(CPU->ctx, p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
        GPU->adamw(GPU->ctx, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
    }
    cmp_f32(G, "adamw p", p, n, 1e-6);
    cmp_f32(G, "adamw m", m, n, 1e-6);
    cmp_f32(G, "adamw v", v, n, 1e-6);
    double s1 = CPU->sumsq(CPU->ctx, g.c, n), s2 = GPU->sumsq(GPU->ctx, g.g, n);
    check(fabs(s1 - s2) <= 1e-9 * fabs(s1), "cuda_parity_optimizer: sumsq", "cpu %.17g cuda %.17g", s1, s2);
    double s3 = GPU->sumsq(GPU->ctx, g.g, n);
    check(s2 == s3, "cuda_parity_optimizer: sumsq deterministic", "%.17g vs %.17g", s2, s3);
    CPU->scale(CPU->ctx, g.c, n, 0.37f); GPU->scale(GPU->ctx, g.g, n, 0.37f);
    cmp_f32(G, "scale", g, n, 1e-7);
    pfree(p); pfree(g); pfree(m); pfree(v);
    free(hp); free(hg); free(hm); free(hv);
}

/* ---- determinism of the GPU backward passes ---- */
static void test_determinism(void) {
    /* attention backward twice */
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = 2; s.T = 300; s.H = 4; s.G = 2; s.d = 64; s.window = 8; s.stride = 4; s.visibility = VIS_WINDOW;
    s.n_local = 16; s.n_windows = (s.T - s.window) / s.stride + 1;
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d, nc = (size_t)s.B * s.n_windows * s.G * s.d;
    size_t nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, 1, 0), *hk = hrand(nk, 1, 0), *hc = hrand(nc, 1, 0), *hs = hrand(s.H, 1, 0);
    void *q = put_act(GPU, hq, nq), *k = put_act(GPU, hk, nk), *v = put_act(GPU, hk, nk), *ck = put_act(GPU, hc, nc),
         *cv = put_act(GPU, hc, nc), *dout = put_act(GPU, hq, nq), *out = put_act(GPU, hq, nq);
    float *lse = put_f32(GPU, hq, nl), *sink = put_f32(GPU, hs, s.H);
    GPU->attention_fwd(GPU->ctx, &s, out, lse, q, k, v, ck, cv, sink);
    unsigned char *res[2];
    size_t bytes = (nq + 2 * nk + 2 * nc) * GPU->act_bytes + s.H * sizeof(float);
    for (int rep = 0; rep < 2; rep++) {
        void *dq = GPU->alloc(GPU->ctx, nq * GPU->act_bytes), *dk = GPU->alloc(GPU->ctx, nk * GPU->act_bytes),
             *dv = GPU->alloc(GPU->ctx, nk * GPU->act_bytes), *dck = GPU->alloc(GPU->ctx, nc * GPU->act_bytes),
             *dcv = GPU->alloc(GPU->ctx, nc * GPU->act_bytes);
        float *dsink = GPU->alloc(GPU->ctx, s.H * sizeof(float));
        GPU->attention_bwd(GPU->ctx, &s, dq, dk, dv, dck, dcv, dsink, dout, out, lse, q, k, v, ck, cv, sink);
        GPU->synchronize(GPU->ctx);
        unsigned char *r = res[rep] = malloc(bytes), *o = r;
        GPU->download(GPU->ctx, o, dq, nq * GPU->act_bytes); o += nq * GPU->act_bytes;
        GPU->download(GPU->ctx, o, dk, nk * GPU->act_bytes); o += nk * GPU->act_bytes;
        GPU->download(GPU->ctx, o, dv, nk * GPU->act_bytes); o += nk * GPU->act_bytes;
        GPU->download(GPU->ctx, o, dck, nc * GPU->act_bytes); o += nc * GPU->act_bytes;
        GPU->download(GPU->ctx, o, dcv, nc * GPU->act_bytes); o += nc * GPU->act_bytes;
        GPU->download(GPU->ctx, o, dsink, s.H * sizeof(float));
        GPU->free(GPU->ctx, dq); GPU->free(GPU->ctx, dk); GPU->free(GPU->ctx, dv); GPU->free(GPU->ctx, dck); GPU->free(GPU->ctx, dcv); GPU->free(GPU->ctx, dsink);
    }
    check(!memcmp(res[0], res[1], bytes), "cuda_parity_determinism: attention bwd twice gives identical bits", "results differ");
    free(res[0]); free(res[1]);
    GPU->free(GPU->ctx, q); GPU->free(GPU->ctx, k); GPU->free(GPU->ctx, v); GPU->free(GPU->ctx, ck); GPU->free(GPU->ctx, cv); GPU->free(GPU->ctx, dout); GPU->free(GPU->ctx, out);
    GPU->free(GPU->ctx, lse); GPU->free(GPU->ctx, sink);
    free(hq); free(hk); free(hc); free(hs);

    /* embedding backward twice, with many repeated tokens */
    int N = 4096, D = 64, V = 17;
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V) % V;
    float *hd = hrand((size_t)N * D, 1, 0);
    void *t = put_i32(GPU, tok, N), *d_ = put_act(GPU, hd, (size_t)N * D);
    float *r1 = malloc(sizeof(float) * V * D), *r2 = malloc(sizeof(float) * V * D);
    for (int rep = 0; rep < 2; rep++) {
        float *dt = GPU->alloc(GPU->ctx, sizeof(float) * V * D);
        GPU->embedding_bwd(GPU->ctx, dt, t, d_, N, D);
        GPU->synchronize(GPU->ctx);
        GPU->download(GPU->ctx, rep ? r2 : r1, dt, sizeof(float) * V * D);
        GPU->free(GPU->ctx, dt);
    }
    check(!memcmp(r1, r2, sizeof(float) * V * D), "cuda_parity_determinism: embedding bwd twice gives identical bits", "differ");
    GPU->free(GPU->ctx, t); GPU->free(GPU->ctx, d_);
    free(tok); free(hd); free(r1); free(r2);

    /* compressor backward twice (overlapping windows: the fp32 accumulation path) */
    CompCase cc = {"scalar+bias W8 S4", 2, 64, 64, 2, 32, 8, 4, GATE_SCALAR, 1, 0, 0};
    run_compressor_case(&cc, 1);
}

int main(void) {
    char err[ERR_LEN] = "";
    CPU = backend_cpu(0);
    GPU = backend_cuda(0, err);
    if (!GPU) {
        char name[64];
        for (int i = 0; i < N_GROUPS; i++) {
            snprintf(name, sizeof name, "cuda_parity_%s", GROUPS[i]);
            check_skip(name, "no GPU");
        }
        fprintf(stderr, "(%s)\n", err);
        return 0;
    }
    test_elementwise();
    test_embedding();
    test_rmsnorm();
    test_matmul();
    test_rope();
    test_attention();
    test_compressor();
    test_classifier();
    test_optimizer();
    test_determinism();
    return check_exit_code();
}
#endif
