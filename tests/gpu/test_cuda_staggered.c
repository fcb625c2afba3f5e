/* Parity of the CUDA backend against the CPU reference for grid = staggered with G > 1
 * (docs/spec.md §2b): KV head g's window grid starts at o_g = floor(g S / G), window j of head
 * g covers o_g + jS .. o_g + jS + W - 1 and exists iff it ends at or before T - 1 (heads have
 * different window counts), its entry is visible to t iff o_g + jS + W - 1 <= t, its RoPE
 * position is o_g + jS, and the tail (local = tail) is per head. The CPU backend
 * (kernels/cpu/cpu_attention.c, cpu_compressor.c, cpu_coverage.c) is the reference.
 *
 * Three levels, each against the CPU on the same bf16-representable inputs:
 *   attention op   out, lse, dq, dk, dv, dck, dcv, dsink    normalised max error
 *                  max_i |cuda_i - cpu_i| / max_i |cpu_i|  <= 1.5e-2 (out), 5e-3 (lse), 2.5e-2 (grads)
 *   compressor op  entry, alpha, payload, pn_rstd (<= 1.5e-2 / 1e-2), and the backward from the
 *                  CPU's forward state, with the gate-coverage penalty's dalpha added
 *                  (da <= 1.5e-2, weight / bias / post-norm gradients <= 2e-2); the gate-coverage
 *                  op itself: per-sequence penalty (relative 1e-3) and dalpha (1e-3), including
 *                  the zeros of absent windows
 *   whole model    mean loss (relative 2%), token losses (3%), every gradient tensor (relative
 *                  L2 10%), and the penalty (2%): the tolerances of test_cuda_model_parity.c
 * These are the tolerances of tests/gpu/test_cuda_parity.c and test_cuda_model_parity.c.
 * The "jitter" model variants add per-sequence grid shifts u_b (docs/spec.md §6.2) on top of the
 * staggered offsets (o_{b,g} = o_g + u_b).
 * Shapes are chosen so that heads really differ: T - o_g not a multiple of S (fewer windows for
 * the later heads), S = W and S < W, G = 2 and 4. Without a GPU (or a CUDA build) each group
 * prints one skip line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "common/errors.h"
#include "tests/check.h"
#include "tests/model_testutil.h"

static const char *GROUPS[] = {"attention", "compressor", "coverage", "model"};
#define N_GROUPS ((int)(sizeof GROUPS / sizeof GROUPS[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    char name[64];
    for (int i = 0; i < N_GROUPS; i++) {
        snprintf(name, sizeof name, "cuda_staggered_%s", GROUPS[i]);
        check_skip(name, "no GPU (built without CUDA)");
    }
    return 0;
}
#else

#define PARITY_SEED 4242                        /* this test's own input stream */
#define PARITY_NAME_PREFIX "cuda_staggered_"
#include "tests/gpu/parity_harness.h"           /* inputs on both backends, cmp, Pair */
#include "tests/gpu/model_pair_check.h"         /* model_pair_check: the whole-model checks */

/* entries [B, nW, G, d] of windows that do not exist for their head (j >= nW_g) set to 0, as
 * the compressor writes them: the attention op never reads them */
static void zero_absent(float *x, int B, int nW, int G, int d, int T, int W, int S) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nW; j++)
            for (int g = 0; g < G; g++)
                if (j >= vis_n_windows(T, W, S, vis_grid_offset(GRID_STAGGERED, g, S, G)))
                    memset(x + (((size_t)b * nW + j) * G + g) * d, 0, sizeof(float) * d);
}

/* ---- attention op ---- */
typedef struct { const char *name; int B, T, H, G, d, W, S, vis, n_local, sink; } AttCase;

static void run_attention_case(const AttCase *ac) {
    const char *G = "attention";
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = ac->B; s.T = ac->T; s.H = ac->H; s.G = ac->G; s.d = ac->d;
    s.window = ac->W; s.stride = ac->S; s.visibility = ac->vis; s.n_local = ac->n_local;
    s.grid = GRID_STAGGERED;
    s.n_windows = vis_n_windows(ac->T, ac->W, ac->S, 0);   /* head 0's count: the most */
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d;
    size_t nc = (size_t)s.B * s.n_windows * s.G * s.d, nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, 1, 0), *hk = hrand(nk, 1, 0), *hv = hrand(nk, 1, 0), *hck = hrand(nc, 1, 0),
          *hcv = hrand(nc, 1, 0), *hdo = hrand(nq, 1, 0), *hs = hrand(s.H, 1, 0), *hds = hrand(s.H, 1, 0);
    zero_absent(hck, s.B, s.n_windows, s.G, s.d, s.T, s.window, s.stride);
    zero_absent(hcv, s.B, s.n_windows, s.G, s.d, s.T, s.window, s.stride);
    Pair q = pa(hq, nq), k = pa(hk, nk), v = pa(hv, nk), ck = pa(hck, nc), cv = pa(hcv, nc), dout = pa(hdo, nq),
         out = pa(hq, nq), lse = pf(hq, nl);
    Pair sink = ac->sink ? pf(hs, s.H) : pnull(), dsink = pf(hds, s.H);
    Pair dq = pa(hq, nq), dk = pa(hk, nk), dv = pa(hk, nk), dck = pa(hck, nc), dcv = pa(hcv, nc);
    CPU->attention_fwd(CPU->ctx, &s, out.c, lse.c, q.c, k.c, v.c, ck.c, cv.c, sink.c);
    GPU->attention_fwd(GPU->ctx, &s, out.g, lse.g, q.g, k.g, v.g, ck.g, cv.g, sink.g);
    char w[192];
    snprintf(w, sizeof w, "%s fwd out", ac->name); cmp_act(G, w, out, nq, 1.5e-2);
    snprintf(w, sizeof w, "%s fwd lse", ac->name); cmp_f32(G, w, lse, nl, 5e-3);
    /* the backward reads the CPU's forward results on both sides (out rounded to bf16) */
    float *hout = get_act(CPU, out.c, nq), *hlse = get_f32(CPU, lse.c, nl);
    for (size_t i = 0; i < nq; i++) hout[i] = bfr(hout[i]);
    Pair out2 = pa(hout, nq), lse2 = pf(hlse, nl);
    CPU->attention_bwd(CPU->ctx, &s, dq.c, dk.c, dv.c, dck.c, dcv.c, ac->sink ? dsink.c : NULL, dout.c, out2.c, lse2.c,
                       q.c, k.c, v.c, ck.c, cv.c, sink.c);
    GPU->attention_bwd(GPU->ctx, &s, dq.g, dk.g, dv.g, dck.g, dcv.g, ac->sink ? dsink.g : NULL, dout.g, out2.g, lse2.g,
                       q.g, k.g, v.g, ck.g, cv.g, sink.g);
    snprintf(w, sizeof w, "%s bwd dq", ac->name); cmp_act(G, w, dq, nq, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dk", ac->name); cmp_act(G, w, dk, nk, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dv", ac->name); cmp_act(G, w, dv, nk, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dck", ac->name); cmp_act(G, w, dck, nc, 2.5e-2);
    snprintf(w, sizeof w, "%s bwd dcv", ac->name); cmp_act(G, w, dcv, nc, 2.5e-2);
    if (ac->sink) { snprintf(w, sizeof w, "%s bwd dsink (+=)", ac->name); cmp_f32(G, w, dsink, s.H, 2e-2); }
    pfree(q); pfree(k); pfree(v); pfree(ck); pfree(cv); pfree(dout); pfree(out); pfree(lse); pfree(sink);
    pfree(dsink); pfree(dq); pfree(dk); pfree(dv); pfree(dck); pfree(dcv); pfree(out2); pfree(lse2);
    free(hq); free(hk); free(hv); free(hck); free(hcv); free(hdo); free(hs); free(hds); free(hout); free(hlse);
}

static const AttCase ATT_CASES[] = {
    /* name                                  B  T    H  G  d    W   S  vis         nloc sink */
    {"staggered G2 tail W8 S8 d32",          2, 150, 4, 2, 32,  8,  8, VIS_TAIL,   16,  0},
    {"staggered G2 window W8 S8 nloc16 sink", 2, 203, 4, 2, 64,  8,  8, VIS_WINDOW, 16,  1},
    {"staggered G4 tail W8 S4 d128 (S<W)",   1, 101, 4, 4, 128, 8,  4, VIS_TAIL,   16,  0},
    {"staggered G4 window W6 S3 nloc5 d40",  1, 91,  8, 4, 40,  6,  3, VIS_WINDOW, 5,   1},
    {"staggered G4 tail W4 S4 nW>64 sink",   1, 603, 4, 4, 16,  4,  4, VIS_TAIL,   16,  1},
    {"staggered G2 tail W16 S8 T<W+o_1",     1, 20,  2, 2, 32,  16, 8, VIS_TAIL,   4,   0},
};

/* ---- compressor op (+ the gate-coverage penalty's dalpha in the backward) ---- */
/* maps: 0 paper (one map per offset), 1 deepseek, 2 shared */
typedef struct { const char *name; int B, T, D, G, d, W, S, gate, bias, post, maps, coverage; } CompCase;

static CompShape comp_shape_of(const CompCase *cc) {
    CompShape s;
    memset(&s, 0, sizeof s);
    s.B = cc->B; s.T = cc->T; s.D = cc->D; s.G = cc->G; s.d = cc->d; s.window = cc->W; s.stride = cc->S;
    s.n_windows = vis_n_windows(cc->T, cc->W, cc->S, 0);
    s.gate = cc->gate;
    s.channels = cc->gate == GATE_VECTOR ? cc->d : 1;
    s.n_maps = cc->maps == 1 ? 2 : cc->maps == 2 ? 1 : cc->W;
    s.eps = 1e-6f;
    s.grid = GRID_STAGGERED;
    return s;
}

static void run_compressor_case(const CompCase *cc) {
    const char *G = "compressor";
    CompShape s = comp_shape_of(cc);
    int c = s.channels, M = s.n_maps, W = s.window;
    size_t na = (size_t)s.B * s.T * s.D, ne = (size_t)s.B * s.n_windows * s.G * s.d;
    size_t nslot = (size_t)s.B * s.n_windows * s.G * W;
    size_t ngw = (size_t)s.G * M * c * s.D, ngb = (size_t)s.G * W * c, npw = (size_t)s.G * M * s.d * s.D;
    float *ha = hrand(na, 1, 0), *hgw = hrand(ngw, 0.3, 0), *hgb = hrand(ngb, 0.5, 0),
          *hpw = hrand(npw, 1.0 / sqrt((double)s.D), 0), *hpost = hrand(s.d, 0.2, 1.0), *hde = hrand(ne, 1, 0),
          *hda = hrand(na, 0.1, 0), *hdgw = hrand(ngw, 0.1, 0), *hdgb = hrand(ngb, 0.1, 0), *hdpw = hrand(npw, 0.1, 0),
          *hdpost = hrand(s.d, 0.1, 0);
    /* forward outputs start as garbage (NaN-free randoms): absent windows must be written as 0 */
    float *hjunk = hrand(nslot * (c > s.d ? c : s.d) + ne + 1, 1, 3.0);
    int gated = cc->gate != GATE_UNIFORM;
    Pair a = pa(ha, na), gw = gated ? pa(hgw, ngw) : pnull(), gb = gated && cc->bias ? pa(hgb, ngb) : pnull(),
         pw = pa(hpw, npw), post = cc->post ? pa(hpost, s.d) : pnull(), de = pa(hde, ne);
    Pair entry = pa(hjunk, ne), alpha = pf(hjunk, nslot * c), payload = pa(hjunk, nslot * s.d), pnr = pf(hjunk, nslot);
    Pair da = pa(hda, na), dgw = gated ? pf(hdgw, ngw) : pnull(), dgb = gated && cc->bias ? pf(hdgb, ngb) : pnull(),
         dpw = pf(hdpw, npw), dpost = cc->post ? pf(hdpost, s.d) : pnull();
    char w[192];
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
    Pair dal = pnull(), per = pnull();
    if (cc->coverage && gated) {
        /* the penalty op on both backends from the same alpha; its dalpha then joins the backward */
        float *hz = hrand(nslot * c + s.B, 1, 5.0);   /* garbage: every value must be written */
        dal = pf(hz, nslot * c);
        per = pf(hz, s.B);
        CPU->gate_coverage(CPU->ctx, &s, alpha2.c, dal.c, per.c, 0.75f);
        GPU->gate_coverage(GPU->ctx, &s, alpha2.g, dal.g, per.g, 0.75f);
        snprintf(w, sizeof w, "%s per-sequence penalty", cc->name); cmp_f32("coverage", w, per, s.B, 1e-3);
        snprintf(w, sizeof w, "%s dalpha", cc->name); cmp_f32("coverage", w, dal, nslot * c, 1e-3);
        /* the same dalpha (the CPU's) into both backwards */
        float *hdal = get_f32(CPU, dal.c, nslot * c);
        pfree(dal);
        dal = pf(hdal, nslot * c);
        free(hdal); free(hz);
    }
    CPU->compressor_bwd(CPU->ctx, &s, da.c, dgw.c, dgb.c, dpw.c, dpost.c, de.c, alpha2.c, pay2.c, pnr2.c, a.c, gw.c, pw.c,
                        post.c, dal.c);
    GPU->compressor_bwd(GPU->ctx, &s, da.g, dgw.g, dgb.g, dpw.g, dpost.g, de.g, alpha2.g, pay2.g, pnr2.g, a.g, gw.g, pw.g,
                        post.g, dal.g);
    snprintf(w, sizeof w, "%s bwd da (+=)", cc->name); cmp_act(G, w, da, na, 1.5e-2);
    snprintf(w, sizeof w, "%s bwd dpayload_w (+=)", cc->name); cmp_f32(G, w, dpw, npw, 2e-2);
    if (gated) { snprintf(w, sizeof w, "%s bwd dgate_w (+=)", cc->name); cmp_f32(G, w, dgw, ngw, 2e-2); }
    if (gated && cc->bias) { snprintf(w, sizeof w, "%s bwd dgate_b (+=)", cc->name); cmp_f32(G, w, dgb, ngb, 2e-2); }
    if (cc->post) { snprintf(w, sizeof w, "%s bwd dpost_w (+=)", cc->name); cmp_f32(G, w, dpost, s.d, 2e-2); }
    pfree(alpha2); pfree(pay2); pfree(pnr2); pfree(dal); pfree(per);
    free(halpha); free(hpay); free(hpnr);
    pfree(a); pfree(gw); pfree(gb); pfree(pw); pfree(post); pfree(de); pfree(entry); pfree(alpha); pfree(payload);
    pfree(pnr); pfree(da); pfree(dgw); pfree(dgb); pfree(dpw); pfree(dpost);
    free(ha); free(hgw); free(hgb); free(hpw); free(hpost); free(hde); free(hda); free(hdgw); free(hdgb);
    free(hdpw); free(hdpost); free(hjunk);
}

static const CompCase COMP_CASES[] = {
    /* name                                     B  T   D   G  d   W  S  gate           bias post maps cov */
    {"G2 scalar+bias W8 S8",                    2, 43, 48, 2, 16, 8, 8, GATE_SCALAR,  1,   0,   0,   1},
    {"G2 scalar no-bias W8 S4 (S<W)",           2, 41, 48, 2, 16, 8, 4, GATE_SCALAR,  0,   0,   0,   1},
    {"G4 vector+bias post-norm W4 S4",          2, 38, 32, 4, 16, 4, 4, GATE_VECTOR,  1,   1,   0,   1},
    {"G4 vector no-bias W8 S4 d40 (S<W)",       1, 50, 40, 4, 40, 8, 4, GATE_VECTOR,  0,   0,   0,   1},
    {"G4 shared vector+bias post W6 S3",        1, 37, 32, 4, 16, 6, 3, GATE_VECTOR,  1,   1,   2,   1},
    {"G2 shared scalar no-bias W8 S8",          2, 45, 48, 2, 16, 8, 8, GATE_SCALAR,  0,   0,   2,   1},
    {"G2 deepseek scalar+bias W8 S4",           2, 44, 48, 2, 16, 8, 4, GATE_SCALAR,  1,   0,   1,   1},
    {"G4 uniform post-norm W6 S3",              2, 31, 32, 4, 16, 6, 3, GATE_UNIFORM, 0,   1,   0,   0},
    {"G2 scalar W8 S8 T<W+o_1 (head 1: none)",  1, 11, 32, 2, 16, 8, 8, GATE_SCALAR,  1,   0,   0,   1},
};

/* ---- whole model ---- */
typedef struct { const char *name; void (*apply)(ModelConfig *c); double lambda; const int32_t *shift; } Variant;
/* docs/spec.md §6.2: staggered grids with per-sequence shifts on top (offsets o_g + u_b up to 2S - 2) */
static const int32_t SHIFT_A[] = {3, 2}, SHIFT_B[] = {1, 0}, SHIFT_S3[] = {2, 1};

static void v_base(ModelConfig *c) { c->attention = ATTN_COMPRESSED; c->grid = GRID_STAGGERED; }
static void v_g2_window(ModelConfig *c) { v_base(c); }
static void v_g2_tail_overlap(ModelConfig *c) { v_base(c); c->window = 4; c->stride = 2; c->local = LOCAL_TAIL; }
static void v_g4_tail_vec_post(ModelConfig *c) {
    v_base(c); c->n_kv_heads = 4; c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1;
}
static void v_g4_window_overlap_shared(ModelConfig *c) {
    v_base(c); c->n_kv_heads = 4; c->window = 6; c->stride = 3; c->compressor = COMPRESSOR_SHARED;
}
static void v_g2_tail_shared_vec_nobias(ModelConfig *c) {
    v_base(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->compressor = COMPRESSOR_SHARED; c->gate_bias = 0;
}
static void v_g4_tail_overlap_sink_tied(ModelConfig *c) {
    v_base(c); c->n_kv_heads = 4; c->window = 4; c->stride = 2; c->local = LOCAL_TAIL; c->attn_sink = 1; c->kv_tied = 1;
}

static const Variant VARIANTS[] = {
    {"G2 window W4 S4 + coverage", v_g2_window, 0.5, NULL},
    {"G2 tail W4 S2 + coverage", v_g2_tail_overlap, 0.5, NULL},
    {"G4 tail vector post-norm W4 S4 + coverage", v_g4_tail_vec_post, 0.5, NULL},
    {"G4 window shared W6 S3 + coverage", v_g4_window_overlap_shared, 0.5, NULL},
    {"G2 tail shared vector no-bias W4 S4 + coverage", v_g2_tail_shared_vec_nobias, 0.5, NULL},
    {"G4 tail W4 S2 sink kv-tied", v_g4_tail_overlap_sink_tied, 0.0, NULL},
    {"jitter G2 window W4 S4 + coverage", v_g2_window, 0.5, SHIFT_A},
    {"jitter G4 tail vector post-norm W4 S4 + coverage", v_g4_tail_vec_post, 0.5, SHIFT_A},
    {"jitter G4 window shared W6 S3", v_g4_window_overlap_shared, 0.0, SHIFT_S3},
    {"jitter G4 tail W4 S2 sink kv-tied", v_g4_tail_overlap_sink_tied, 0.0, SHIFT_B},
};

static void run_model_variant(const Variant *v, int vi) {
    ModelConfig cfg = tu_tiny_config();
    v->apply(&cfg);
    char prefix[160];
    snprintf(prefix, sizeof prefix, "cuda_staggered_model %s", v->name);
    ModelPairCase pc = {.prefix = prefix, .B = 2, .T = 41,   /* T - o_g not a multiple of S for some heads */
                        .lambda = v->lambda, .param_seed = 700 + vi, .token_seed = 31 + vi, .target_seed = 37 + vi,
                        .ignore_one_target = 0, .grad_tol = 0.1, .shift = v->shift};
    model_pair_check(CPU, GPU, &cfg, &pc);
}

int main(void) {
    char err[ERR_LEN] = "";
    CPU = backend_cpu(0);
    GPU = backend_cuda(0, err);
    if (!GPU) {
        char name[64];
        for (int i = 0; i < N_GROUPS; i++) {
            snprintf(name, sizeof name, "cuda_staggered_%s", GROUPS[i]);
            check_skip(name, "no GPU");
        }
        fprintf(stderr, "(%s)\n", err);
        return 0;
    }
    for (size_t i = 0; i < sizeof ATT_CASES / sizeof ATT_CASES[0]; i++) run_attention_case(&ATT_CASES[i]);
    for (size_t i = 0; i < sizeof COMP_CASES / sizeof COMP_CASES[0]; i++) run_compressor_case(&COMP_CASES[i]);
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) run_model_variant(&VARIANTS[i], (int)i);
    return check_exit_code();
}
#endif
