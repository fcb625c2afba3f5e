/* Parity of the CUDA backend against the CPU reference backend, op by op (kernels/ops.def), as
 * ONE TABLE of cases (CASES below, the shape of ggml's test-backend-ops): each row is
 *     {group, variant (shape), ops it exercises, tolerances, run function, shape arguments}
 * and is selected by name from the command line:
 *     test_cuda_parity                  every case (the table's order)
 *     test_cuda_parity --list           the cases, one a line: id, ops, tolerances; runs nothing
 *     test_cuda_parity PATTERN ...      the cases whose id "group/variant" matches a PATTERN
 *                                       (shell glob, or substring) or which exercise the op PATTERN:
 *                                       matmul, 'attention/tail*', rmsnorm_bwd, 'W8 S4'
 * Every op of kernels/ops.def must have a case, or sit in EXEMPT with its reason: the check
 * "cuda_parity_coverage" fails otherwise, so a new op lands with its case (it runs with the
 * cases, so in every make test through the CPU emulator of CUDA, tests/cuemu).
 *
 * Every op gets the same random inputs on both backends (tests/gpu/parity_harness.h): inputs are
 * rounded to bf16 on the host first, so the CUDA result differs only by its bf16 outputs and
 * intermediates. The comparison is the normalised max error
 *     max_i |cuda_i - cpu_i| / max_i |cpu_i|
 * against the row's tolerance (Tol: bf16-sized 1e-2 .. 3e-2; fp32-only ops tighter), plus a NaN
 * check. Determinism cases run a backward twice on the GPU and require identical bits.
 * The inputs come from one random stream in table order, so a full run feeds every case exactly
 * the inputs it had before the table existed; a case run alone gets other (fixed) inputs.
 * Without a GPU (or without a CUDA build) each group of the selected cases prints one skip line. */
#include <fnmatch.h>
#include "tests/gpu/parity_harness.h"
#include "common/errors.h"

/* Tolerances of one case (normalised max error; 0 = bit-identical). What each field bounds is
 * said per group at CASES; in general: out = forward outputs, aux = saved statistics or
 * secondary outputs, grad = activation gradients, wgrad = fp32 (accumulated) gradients. */
typedef struct { double out, aux, grad, wgrad; } Tol;

typedef struct ParityCase ParityCase;
struct ParityCase {
    const char *group;     /* check names "cuda_parity_<group>: ..."; one skip line per group */
    const char *variant;   /* the shape / variant; the case's id is "group/variant" */
    const char *ops;       /* the kernels/ops.def ops it exercises, space separated */
    Tol tol;
    void (*run)(const ParityCase *pc);
    int shape[4];          /* per run function: n; N,D,V; rows,C; M,N,K; r,inverse; rows,cols,ld_src,ld_dst;
                              attention: grid (GRID_*, 0 aligned) */
    const void *arg;       /* AttCase / CompCase / DecCase row, or NULL */
    int mode;              /* per run function (ATT_*, COMP_*) */
};

/* ---------------------------------------------------------------- */
/* elementwise: add, swiglu_fwd (out), swiglu_bwd (grad), cast_params fp32 -> act (aux); n = shape[0] */
static void run_elementwise(const ParityCase *pc) {
    const char *G = pc->group;
    const Tol *t = &pc->tol;
    size_t n = (size_t)pc->shape[0];
    char w[64];
    float *hy = hrand(n, 1, 0), *hx = hrand(n, 1, 0), *hg = hrand(n, 2, 0), *hu = hrand(n, 1, 0);
    Pair y = pa(hy, n), x = pa(hx, n), g = pa(hg, n), u = pa(hu, n), h = pa(hy, n), dg = pa(hy, n), du = pa(hy, n);
    CPU->add(CPU->ctx, y.c, x.c, n); GPU->add(GPU->ctx, y.g, x.g, n);
    snprintf(w, sizeof w, "add n=%zu", n); cmp_act(G, w, y, n, t->out);
    CPU->swiglu_fwd(CPU->ctx, h.c, g.c, u.c, n); GPU->swiglu_fwd(GPU->ctx, h.g, g.g, u.g, n);
    snprintf(w, sizeof w, "swiglu_fwd n=%zu", n); cmp_act(G, w, h, n, t->out);
    CPU->swiglu_bwd(CPU->ctx, dg.c, du.c, x.c, g.c, u.c, n); GPU->swiglu_bwd(GPU->ctx, dg.g, du.g, x.g, g.g, u.g, n);
    snprintf(w, sizeof w, "swiglu_bwd dg n=%zu", n); cmp_act(G, w, dg, n, t->grad);
    snprintf(w, sizeof w, "swiglu_bwd du n=%zu", n); cmp_act(G, w, du, n, t->grad);
    /* cast_params fp32 -> act and the act round trip */
    float *hp = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) hp[i] = (float)nrand();
    Pair p32 = pf(hp, n), pact = pa(hy, n);
    CPU->cast_params(CPU->ctx, pact.c, p32.c, n); GPU->cast_params(GPU->ctx, pact.g, p32.g, n);
    snprintf(w, sizeof w, "cast_params n=%zu", n); cmp_act(G, w, pact, n, t->aux);
    pfree(y); pfree(x); pfree(g); pfree(u); pfree(h); pfree(dg); pfree(du); pfree(p32); pfree(pact);
    free(hy); free(hx); free(hg); free(hu); free(hp);
}

/* memory ops: copy backend -> backend and zero, both exact (out); n = shape[0] */
static void run_memory(const ParityCase *pc) {
    const char *G = pc->group;
    size_t n = (size_t)pc->shape[0];
    char w[64];
    float *hx = hrand(n, 1, 0), *hy = hrand(n, 1, 0);
    Pair x = pa(hx, n), y = pa(hy, n);
    CPU->copy(CPU->ctx, y.c, x.c, n * CPU->act_bytes); GPU->copy(GPU->ctx, y.g, x.g, n * GPU->act_bytes);
    snprintf(w, sizeof w, "copy n=%zu", n); cmp_act(G, w, y, n, pc->tol.out);
    CPU->zero(CPU->ctx, x.c, n * CPU->act_bytes); GPU->zero(GPU->ctx, x.g, n * GPU->act_bytes);
    snprintf(w, sizeof w, "zero n=%zu", n); cmp_act(G, w, x, n, pc->tol.out);
    pfree(x); pfree(y); free(hx); free(hy);
}

/* copy_2d: a [rows, cols] block of src (leading dim ld_src) into dst (ld_dst), exact; the
 * columns of dst outside the block keep their values; shape rows, cols, ld_src, ld_dst */
static void run_copy_2d(const ParityCase *pc) {
    const char *G = pc->group;
    int rows = pc->shape[0], cols = pc->shape[1], lds = pc->shape[2], ldd = pc->shape[3];
    size_t ns = (size_t)rows * lds, nd = (size_t)rows * ldd;
    char w[64];
    float *hs = hrand(ns, 1, 0), *hd = hrand(nd, 1, 0);
    Pair src = pa(hs, ns), dst = pa(hd, nd);
    CPU->copy_2d(CPU->ctx, dst.c, ldd, src.c, lds, rows, cols);
    GPU->copy_2d(GPU->ctx, dst.g, ldd, src.g, lds, rows, cols);
    snprintf(w, sizeof w, "copy_2d %dx%d ld %d -> %d", rows, cols, lds, ldd);
    cmp_act(G, w, dst, nd, pc->tol.out);
    pfree(src); pfree(dst); free(hs); free(hd);
}

/* the model's use of copy_2d (model.c): the fused projection's [rows, a + b + c] output split into
 * three [rows, a], [rows, b], [rows, c] blocks, then gathered back into a second [rows, a + b + c]
 * buffer at column offsets 0, a, a + b; exact both ways. Widths that are multiples of 8 take the
 * 16-byte path (the second and third blocks start a and a + b elements into the row), others the
 * 2-byte one; shape rows, a, b, c */
static void run_copy_2d_split(const ParityCase *pc) {
    const char *G = pc->group;
    int rows = pc->shape[0], wd[3] = {pc->shape[1], pc->shape[2], pc->shape[3]}, P = wd[0] + wd[1] + wd[2];
    size_t n = (size_t)rows * P;
    char w[80];
    float *hs = hrand(n, 1, 0), *hg = hrand(n, 1, 0);
    Pair src = pa(hs, n), back = pa(hg, n);
    for (int part = 0, off = 0; part < 3; off += wd[part], part++) {
        size_t np = (size_t)rows * wd[part];
        float *hp = hrand(np, 1, 0);
        Pair blk = pa(hp, np);
        CPU->copy_2d(CPU->ctx, blk.c, wd[part], (act_t *)((char *)src.c + (size_t)off * CPU->act_bytes), P, rows, wd[part]);
        GPU->copy_2d(GPU->ctx, blk.g, wd[part], (act_t *)((char *)src.g + (size_t)off * GPU->act_bytes), P, rows, wd[part]);
        snprintf(w, sizeof w, "copy_2d split part %d (%dx%d of %d)", part, rows, wd[part], P);
        cmp_act(G, w, blk, np, pc->tol.out);
        CPU->copy_2d(CPU->ctx, (act_t *)((char *)back.c + (size_t)off * CPU->act_bytes), P, blk.c, wd[part], rows, wd[part]);
        GPU->copy_2d(GPU->ctx, (act_t *)((char *)back.g + (size_t)off * GPU->act_bytes), P, blk.g, wd[part], rows, wd[part]);
        pfree(blk); free(hp);
    }
    snprintf(w, sizeof w, "copy_2d gather %dx(%d+%d+%d)", rows, wd[0], wd[1], wd[2]);
    cmp_act(G, w, back, n, pc->tol.out);
    pfree(src); pfree(back); free(hs); free(hg);
}

/* embedding: fwd (out), bwd dtable += (wgrad); shape N, D, V */
static void run_embedding(const ParityCase *pc) {
    const char *G = pc->group;
    int N = pc->shape[0], D = pc->shape[1], V = pc->shape[2];
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V) % V;
    float *ht = hrand((size_t)V * D, 1, 0), *hd = hrand((size_t)N * D, 1, 0), *hdt = hrand((size_t)V * D, 1, 0);
    Pair t = pi(tok, N), table = pa(ht, (size_t)V * D), out = pa(hd, (size_t)N * D), dout = pf(hd, (size_t)N * D);
    Pair dtab = pf(hdt, (size_t)V * D);
    CPU->embedding_fwd(CPU->ctx, out.c, t.c, table.c, N, D); GPU->embedding_fwd(GPU->ctx, out.g, t.g, table.g, N, D);
    cmp_act(G, "embedding_fwd", out, (size_t)N * D, pc->tol.out);
    CPU->embedding_bwd(CPU->ctx, dtab.c, t.c, dout.c, N, D); GPU->embedding_bwd(GPU->ctx, dtab.g, t.g, dout.g, N, D);
    cmp_f32(G, "embedding_bwd (dtable +=)", dtab, (size_t)V * D, pc->tol.wgrad);
    pfree(t); pfree(table); pfree(out); pfree(dout); pfree(dtab);
    free(tok); free(ht); free(hd); free(hdt);
}

#ifdef PHASELAB_CUEMU
long cuemu_launch_count(const char *name);   /* tests/cuemu: launches so far of the kernels name* */
long cuemu_mma_count(const char *name);      /* tests/cuemu: warp-level mma_sync calls so far in the kernels name* */
#endif

/* rmsnorm_bwd_residual (the residual norms' backward, fp32 dx; docs/spec.md §1.1), on run_rmsnorm's
 * bf16-exact inputs x, w, dy (no new random draws: the table's stream stays as it was) and ONE rstd
 * (the CPU's, uploaded to both), so the CUDA result differs from the CPU's only by the order of
 * fp32 sums. The old dx, dres0 = din0 + dy / 1024 (host values), is not bf16-exact: an fp32 dx must
 * keep it. For accumulate 0 and 1:
 *   round_act 0: dres and dw within T_RES_F32 of the CPU (a bf16 dres would be off by ~2^-9 relative),
 *                the bf16 copy == bfr(dres) bit for bit, and without a copy (NULL) the same dres bits;
 *   round_act 1: dres == the bf16 copy == what rmsnorm_bwd (bf16 din) gives from bfr(dres0), bit for
 *                bit (PHASELAB_BF16_RESIDUAL_GRAD=1 is the old path), and within t->grad of the CPU.
 * In the emulator the fused kernel must take every one of these calls where it takes rmsnorm_bwd. */
#define T_RES_F32 1e-4
static void run_rmsnorm_residual(const ParityCase *pc, Pair x, Pair wt, Pair rstd, Pair dy, const float *hdin, const float *hdw) {
    const char *G = pc->group;
    const int rows = pc->shape[0], C = pc->shape[1];
    const size_t n = (size_t)rows * C;
    char w[160];
    float *hr = get_f32(CPU, rstd.c, rows), *hdy = get_act(CPU, dy.c, n);
    float *h0 = malloc(sizeof(float) * n), *h0b = malloc(sizeof(float) * n);   /* [rows, C] old dres, and bfr of it */
    for (size_t i = 0; i < n; i++) { h0[i] = hdin[i] + hdy[i] / 1024.0f; h0b[i] = bfr(h0[i]); }
    Pair r1 = pf(hr, rows);
#ifdef PHASELAB_CUEMU
    const long fused_before = cuemu_launch_count("rmsnorm_bwd_fused");
    int calls = 0;
#endif
    for (int acc = 0; acc < 2; acc++)
        for (int rnd = 0; rnd < 2; rnd++) {
            const float *start = rnd ? h0b : h0;
            Pair dres = pf(start, n), copy = pa(start, n), dw = pf(hdw, C);
            CPU->rmsnorm_bwd_residual(CPU->ctx, dres.c, copy.c, dw.c, dy.c, x.c, wt.c, r1.c, rows, C, acc, rnd);
            GPU->rmsnorm_bwd_residual(GPU->ctx, dres.g, copy.g, dw.g, dy.g, x.g, wt.g, r1.g, rows, C, acc, rnd);
            float *gd = get_f32(GPU, dres.g, n), *gc = get_act(GPU, copy.g, n);
            size_t copy_bad = 0, self_bad = 0, ref_bad = 0;
            for (size_t i = 0; i < n; i++) {
                copy_bad += memcmp(&gc[i], (float[]){bfr(gd[i])}, 4) != 0;
                self_bad += rnd && memcmp(&gd[i], (float[]){bfr(gd[i])}, 4) != 0;
            }
            snprintf(w, sizeof w, "rmsnorm_bwd_residual [%d,%d] accumulate=%d round_act=%d: bf16 copy == bf16(dres)%s", rows,
                     C, acc, rnd, rnd ? ", dres bf16-exact" : "");
            char wn[224];
            snprintf(wn, sizeof wn, PARITY_NAME_PREFIX "%s: %s", G, w);
            check(!copy_bad && !self_bad, wn, "%zu copies differ from bf16(dres), %zu dres not bf16-exact, of %zu", copy_bad,
                  self_bad, n);
            snprintf(w, sizeof w, "rmsnorm_bwd_residual dres [%d,%d] accumulate=%d round_act=%d", rows, C, acc, rnd);
            cmp_f32(G, w, dres, n, rnd ? pc->tol.grad : T_RES_F32);
            snprintf(w, sizeof w, "rmsnorm_bwd_residual dw [%d,%d] accumulate=%d round_act=%d", rows, C, acc, rnd);
            cmp_f32(G, w, dw, C, T_RES_F32);
#ifdef PHASELAB_CUEMU
            calls++;
#endif
            if (!rnd) {   /* no copy wanted: the same dres */
                Pair d2 = pf(h0, n);
                GPU->rmsnorm_bwd_residual(GPU->ctx, d2.g, NULL, NULL, dy.g, x.g, wt.g, r1.g, rows, C, acc, 0);
                float *g2 = get_f32(GPU, d2.g, n);
                snprintf(wn, sizeof wn, PARITY_NAME_PREFIX "%s: rmsnorm_bwd_residual [%d,%d] accumulate=%d without copy or dw: "
                         "the same dres bits", G, rows, C, acc);
                check(!memcmp(g2, gd, sizeof(float) * n), wn, "dres differs");
                free(g2); pfree(d2);
#ifdef PHASELAB_CUEMU
                calls++;
#endif
            } else {      /* the old bf16 path: rmsnorm_bwd on a bf16 din */
                Pair din = pa(h0b, n);
                GPU->rmsnorm_bwd(GPU->ctx, din.g, NULL, dy.g, x.g, wt.g, r1.g, rows, C, acc);
                float *gb = get_act(GPU, din.g, n);
                snprintf(wn, sizeof wn, PARITY_NAME_PREFIX "%s: rmsnorm_bwd_residual [%d,%d] accumulate=%d round_act=1 == "
                         "rmsnorm_bwd (bf16 din), bit for bit", G, rows, C, acc);
                for (size_t i = 0; i < n; i++) ref_bad += memcmp(&gb[i], &gd[i], 4) != 0;
                check(!ref_bad, wn, "%zu of %zu values differ", ref_bad, n);
                free(gb); pfree(din);
#ifdef PHASELAB_CUEMU
                calls++;
#endif
            }
            free(gd); free(gc);
            pfree(dres); pfree(copy); pfree(dw);
        }
#ifdef PHASELAB_CUEMU
    const int nvec = C / 8, want_fused = C % 8 == 0 && ((nvec % 32 == 0 && nvec <= 128) || (nvec <= 32 && !(nvec & (nvec - 1))));
    const long fused = cuemu_launch_count("rmsnorm_bwd_fused") - fused_before;
    char wn[224];
    snprintf(wn, sizeof wn, PARITY_NAME_PREFIX "%s: rmsnorm_bwd_residual [%d,%d] takes the %s kernel", G, rows, C,
             want_fused ? "fused" : "unfused");
    check(fused == (want_fused ? calls : 0), wn, "%ld fused launches for %d calls", fused, calls);
#endif
    pfree(r1);
    free(hr); free(hdy); free(h0); free(h0b);
}

/* rmsnorm: fwd out (out), rstd (aux), bwd din (grad), dw += (wgrad), accumulate 0 and 1; shape rows, C;
 * then rmsnorm_bwd_residual on the same inputs (run_rmsnorm_residual) */
static void run_rmsnorm(const ParityCase *pc) {
    const char *G = pc->group;
    const Tol *t = &pc->tol;
    int rows = pc->shape[0], C = pc->shape[1];
    size_t n = (size_t)rows * C;
    char w[96];
    float *hx = hrand(n, 1.5, 0.2), *hw = hrand(C, 0.2, 1.0), *hdy = hrand(n, 1, 0), *hdin = hrand(n, 1, 0),
          *hdw = hrand(C, 1, 0);
    float *hz = calloc(rows, sizeof(float));
    Pair x = pa(hx, n), wt = pa(hw, C), out = pa(hx, n), rstd = pf(hz, rows), dy = pa(hdy, n);
    free(hz);
    CPU->rmsnorm_fwd(CPU->ctx, out.c, rstd.c, x.c, wt.c, rows, C, 1e-6f);
    GPU->rmsnorm_fwd(GPU->ctx, out.g, rstd.g, x.g, wt.g, rows, C, 1e-6f);
    snprintf(w, sizeof w, "rmsnorm_fwd out [%d,%d]", rows, C); cmp_act(G, w, out, n, t->out);
    snprintf(w, sizeof w, "rmsnorm_fwd rstd [%d,%d]", rows, C); cmp_f32(G, w, rstd, rows, t->aux);
#ifdef PHASELAB_CUEMU
    /* the fused backward takes C = 8 x (32, 64, 96, 128 or a power of two up to 32) (cuda_norm.cu) */
    const int nvec = C / 8, want_fused = C % 8 == 0 && ((nvec % 32 == 0 && nvec <= 128) || (nvec <= 32 && !(nvec & (nvec - 1))));
    const long fused_before = cuemu_launch_count("rmsnorm_bwd_fused");
#endif
    for (int acc = 0; acc < 2; acc++) {
        Pair din = pa(hdin, n), dw = pf(hdw, C);
        CPU->rmsnorm_bwd(CPU->ctx, din.c, dw.c, dy.c, x.c, wt.c, rstd.c, rows, C, acc);
        GPU->rmsnorm_bwd(GPU->ctx, din.g, dw.g, dy.g, x.g, wt.g, rstd.g, rows, C, acc);
        snprintf(w, sizeof w, "rmsnorm_bwd din [%d,%d] accumulate=%d", rows, C, acc); cmp_act(G, w, din, n, t->grad);
        snprintf(w, sizeof w, "rmsnorm_bwd dw [%d,%d] accumulate=%d", rows, C, acc); cmp_f32(G, w, dw, C, t->wgrad);
        pfree(din); pfree(dw);
    }
#ifdef PHASELAB_CUEMU
    const long fused = cuemu_launch_count("rmsnorm_bwd_fused") - fused_before;
    snprintf(w, sizeof w, "rmsnorm_bwd [%d,%d] takes the %s kernel", rows, C, want_fused ? "fused" : "unfused");
    char wn[224];
    snprintf(wn, sizeof wn, PARITY_NAME_PREFIX "%s: %s", G, w);
    check(fused == (want_fused ? 2 : 0), wn, "%ld fused launches for 2 calls", fused);
#endif
    run_rmsnorm_residual(pc, x, wt, rstd, dy, hdin, hdw);
    pfree(x); pfree(wt); pfree(out); pfree(rstd); pfree(dy);
    free(hx); free(hw); free(hdy); free(hdin); free(hdw);
}

/* matmul: fwd (out), bwd din (grad), dw += (wgrad), accumulate 0 and 1; shape M, N, K */
static void run_matmul(const ParityCase *pc) {
    const char *G = pc->group;
    const Tol *t = &pc->tol;
    int M = pc->shape[0], N = pc->shape[1], K = pc->shape[2];
    char w[96];
    float *hin = hrand((size_t)M * K, 1, 0), *hw = hrand((size_t)N * K, 0.1, 0), *hout = hrand((size_t)M * N, 1, 0),
          *hdw = hrand((size_t)N * K, 1, 0), *hdin = hrand((size_t)M * K, 1, 0);
    Pair in = pa(hin, (size_t)M * K), wt = pa(hw, (size_t)N * K);
    for (int acc = 0; acc < 2; acc++) {
        Pair out = pa(hout, (size_t)M * N), din = pa(hdin, (size_t)M * K), dw = pf(hdw, (size_t)N * K);
        CPU->matmul_fwd(CPU->ctx, out.c, in.c, wt.c, M, N, K, acc); GPU->matmul_fwd(GPU->ctx, out.g, in.g, wt.g, M, N, K, acc);
        snprintf(w, sizeof w, "matmul_fwd %dx%dx%d accumulate=%d", M, N, K, acc); cmp_act(G, w, out, (size_t)M * N, t->out);
        CPU->matmul_bwd(CPU->ctx, din.c, dw.c, out.c, in.c, wt.c, M, N, K, acc);
        GPU->matmul_bwd(GPU->ctx, din.g, dw.g, out.g, in.g, wt.g, M, N, K, acc);
        snprintf(w, sizeof w, "matmul_bwd din %dx%dx%d accumulate=%d", M, N, K, acc); cmp_act(G, w, din, (size_t)M * K, t->grad);
        snprintf(w, sizeof w, "matmul_bwd dw %dx%dx%d", M, N, K); cmp_f32(G, w, dw, (size_t)N * K, t->wgrad);
        pfree(out); pfree(din); pfree(dw);
    }
    pfree(in); pfree(wt);
    free(hin); free(hw); free(hout); free(hdw); free(hdin);
}

/* rope on x [20, 3 heads, d], positions (i % 10) * 3 (out); shape r, inverse, d (0: 32). The CUDA
 * side rotates 4 pairs a thread where r/2, d - r and d are multiples of 4 (r = 32, 16, 24 of d 36),
 * one otherwise (r = 10, 6 of d 38) */
static void run_rope(const ParityCase *pc) {
    const char *G = pc->group;
    int rows = 20, nh = 3, d = pc->shape[2] ? pc->shape[2] : 32, period = 10, mult = 3;
    int r = pc->shape[0], inv = pc->shape[1];
    int positions = (period - 1) * mult + 1;
    float *tab = rope_table(positions, r, 1e6);
    Pair cs = pf(tab, (size_t)positions * r);
    size_t n = (size_t)rows * nh * d;
    float *hx = hrand(n, 1, 0);
    Pair x = pa(hx, n);
    CPU->rope(CPU->ctx, x.c, cs.c, rows, nh, d, r, period, mult, inv);
    GPU->rope(GPU->ctx, x.g, cs.g, rows, nh, d, r, period, mult, inv);
    char w[96];
    snprintf(w, sizeof w, "rope r=%d d=%d inverse=%d", r, d, inv);
    cmp_act(G, w, x, n, pc->tol.out);
    pfree(cs); pfree(x); free(tab); free(hx);
}

/* ---- attention: fwd out (out), lse (aux), bwd dq dk dv dck dcv (grad), dsink += (wgrad) ---- */
typedef struct { const char *name; int B, T, H, G, d, W, S, vis, n_local, compressed, sink; } AttCase;

/* Multi-rate strides (model.head_strides, docs/spec.md §6.4; S is then the smallest): a case whose
 * name says "multirate S_0,S_1,..." gives KV head g the stride S_g (the G numbers after the word,
 * into buf [G]); NULL for every other case (one stride). */
static const int *case_strides(const char *name, int G, int *buf) {
    const char *p = name ? strstr(name, "multirate ") : NULL;
    if (!p) return NULL;
    p += strlen("multirate ");
    for (int g = 0; g < G; g++) {
        char *end;
        buf[g] = (int)strtol(p, &end, 10);
        if (end == p || buf[g] < 1) { fprintf(stderr, "test_cuda_parity: bad strides in case '%s'\n", name); exit(2); }
        p = *end == ',' ? end + 1 : end;
    }
    return buf;
}

/* The buffers' entry rows of a case: the most windows any KV head has (docs/spec.md §6.4; head 0's
 * on a single-stride grid, whose offsets are o_base + o_g >= o_base), at shift 0. */
static int case_windows(int T, int W, int S, const int *hs, int grid, int G, int base) {
    int n = 0;
    for (int g = 0; g < G; g++) {
        const int Sg = vis_head_stride(hs, g, S), x = vis_n_windows(T, W, Sg, vis_entry_offset(grid, g, Sg, G, base, 0));
        if (x > n) n = x;
    }
    return n;
}

/* modes of an attention case. Full attention without a sink goes to cuDNN's fused attention
 * where cuDNN takes it: those cases run three times, with the custom kernels
 * (PHASELAB_ATTN=custom), with bitwise reruns requested (set_deterministic(1): cuDNN forward,
 * custom backward) and with the default path (cuDNN forward and backward); the name gets the
 * path as a suffix. ATT_NO_ENTRY_GRADS passes
 * NULL for dck, dcv and dsink (gradients not wanted while entries and the sink are visible).
 * ATT_SELECT adds a random entry_select [B, T, nW] (each entry kept with probability 1/2, entry 0
 * always: the lightning indexer's top-k, docs/spec.md §5.4). */
enum { ATT_PLAIN = 0, ATT_NO_ENTRY_GRADS, ATT_CUSTOM, ATT_DEFAULT, ATT_CUDNN_BWD, ATT_SPLIT, ATT_SELECT, ATT_LARGE };
static const char *const ATT_SUFFIX[] = {"", " (no dck/dcv/dsink)", " [custom kernels]",
                                         " [deterministic: cuDNN fwd if available, custom bwd]",
                                         " [default: cuDNN fwd+bwd if available]", " [split dK/dV]",
                                         " (entry_select: random top-k)", " (scores x8, custom: lazy rescale)"};
/* ATT_LARGE draws q with standard deviation 8 (scores ~ N(0, 64)): the maxima of a query's key
 * tiles then differ by more than the forward's rescale threshold (8, kernels/cuda/cuda_attention.cu),
 * so the path that rescales the O fragments runs; unit scores never take it after the first tile. */

/* Learned chunk boundaries (docs/spec.md §6.5): a case whose name says "learned" gets random entry ends per
 * sequence instead of the grid: chunk lengths uniform in 1..W from the random stream, entries while they end
 * at or before T - 1 (the tokens after the last stay raw); rows after the count hold T, as boundary_decide
 * writes them. Returns the count. */
static int case_learned_ends(int32_t *ends, int rows, int T, int W) {
    int n = 0;
    for (int start = 0; n < rows;) {
        const int e = start + (int)(urand() * W);      /* length 1..W */
        if (e > T - 1) break;
        ends[n++] = e;
        start = e + 1;
    }
    for (int j = n; j < rows; j++) ends[j] = T;
    return n;
}

static void run_attention(const ParityCase *pc) {
    const AttCase *ac0 = pc->arg;
    const int mode = pc->mode;
    const Tol *t = &pc->tol;
    if (mode == ATT_CUSTOM || mode == ATT_LARGE) setenv("PHASELAB_ATTN", "custom", 1);
    if (mode == ATT_DEFAULT) GPU->set_deterministic(GPU->ctx, 1);
    char name[160];
    snprintf(name, sizeof name, "%s%s", ac0->name, ATT_SUFFIX[mode]);
    AttCase acn = *ac0;
    acn.name = name;
    const AttCase *ac = &acn;
    const char *G = pc->group;
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = ac->B; s.T = ac->T; s.H = ac->H; s.G = ac->G; s.d = ac->d;
    s.window = ac->W; s.stride = ac->S; s.visibility = ac->vis; s.n_local = ac->n_local;
    s.grid = pc->shape[0];   /* GRID_* (0: aligned) */
    s.n_windows = ac->compressed && ac->T >= ac->W ? (ac->T - ac->W) / ac->S + 1 : 0;
    int hs_buf[64];
    const int *mr = case_strides(ac->name, ac->G, hs_buf);
    if (mr && ac->compressed) {   /* multi-rate strides (§6.4): the host strides on both sides */
        s.head_stride = mr;
        s.n_windows = case_windows(ac->T, ac->W, ac->S, mr, s.grid, ac->G, 0);
    }
    int32_t *hends = NULL, hcount[64];
    if (strstr(ac->name, "learned") && ac->compressed) {   /* entry ends (§6.5): host memory on both sides */
        s.n_windows = s.T;
        hends = malloc(sizeof(int32_t) * (size_t)s.B * s.T);
        /* chunks of 1..W tokens in sequence 0, 1..W/2 in sequence 1, ...: the sequences have different
         * entry counts, so a plan made from one sequence's tiles (the dK/dV split) cannot fit the others */
        for (int b = 0; b < s.B; b++) {
            const int longest = s.window >> (b < 30 ? b : 30);
            hcount[b] = case_learned_ends(hends + (size_t)b * s.T, s.T, s.T, longest > 1 ? longest : 1);
        }
        s.entry_ends = hends;
        s.entry_count = hcount;
    }
    AttnShape sg = s;   /* the GPU's: its entry_select is device memory */
    uint8_t *hsel = NULL;
    if (mode == ATT_SELECT) {
        const size_t ns = (size_t)s.B * s.T * s.n_windows;
        hsel = malloc(ns ? ns : 1);
        for (size_t i = 0; i < ns; i++) hsel[i] = urand() < 0.5;
        /* entry 0 of every row stays: the indexer keeps min(k, n_t) >= 1 entries of a query that
         * sees any, and a tail query at the end of a window (raw range empty) needs one */
        for (size_t r = 0; s.n_windows > 0 && r < (size_t)s.B * s.T; r++) hsel[r * s.n_windows] = 1;
        uint8_t *sc = CPU->alloc(CPU->ctx, ns ? ns : 1), *sgp = GPU->alloc(GPU->ctx, ns ? ns : 1);
        CPU->upload(CPU->ctx, sc, hsel, ns); GPU->upload(GPU->ctx, sgp, hsel, ns);
        s.entry_select = sc; sg.entry_select = sgp;
    }
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d;
    size_t nc = (size_t)s.B * (s.n_windows ? s.n_windows : 1) * s.G * s.d, nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, mode == ATT_LARGE ? 8 : 1, 0), *hk = hrand(nk, 1, 0), *hv = hrand(nk, 1, 0), *hck = hrand(nc, 1, 0),
          *hcv = hrand(nc, 1, 0), *hdo = hrand(nq, 1, 0), *hs = hrand(s.H, 1, 0), *hds = hrand(s.H, 1, 0);
    Pair q = pa(hq, nq), k = pa(hk, nk), v = pa(hv, nk), ck = s.n_windows ? pa(hck, nc) : pnull(),
         cv = s.n_windows ? pa(hcv, nc) : pnull(), dout = pa(hdo, nq), out = pa(hq, nq), lse = pf(hq, nl);
    Pair sink = ac->sink ? pf(hs, s.H) : pnull(), dsink = pf(hds, s.H);
    Pair dq = pa(hq, nq), dk = pa(hk, nk), dv = pa(hk, nk), dck = pa(hck, nc), dcv = pa(hcv, nc);
    CPU->attention_fwd(CPU->ctx, &s, out.c, lse.c, q.c, k.c, v.c, ck.c, cv.c, sink.c);
    GPU->attention_fwd(GPU->ctx, &sg, out.g, lse.g, q.g, k.g, v.g, ck.g, cv.g, sink.g);
    char w[192];
    snprintf(w, sizeof w, "%s fwd out", ac->name); cmp_act(G, w, out, nq, t->out);
    snprintf(w, sizeof w, "%s fwd lse", ac->name); cmp_f32(G, w, lse, nl, t->aux);
    /* the backward reads the CPU's forward results on both sides: same out (rounded to bf16) and lse */
    float *hout = get_act(CPU, out.c, nq), *hlse = get_f32(CPU, lse.c, nl);
    for (size_t i = 0; i < nq; i++) hout[i] = bfr(hout[i]);   /* what the GPU side holds */
    Pair out2 = pa(hout, nq), lse2 = pf(hlse, nl);
    int want = mode != ATT_NO_ENTRY_GRADS;
    /* (the CPU reference always computes every gradient: only the CUDA side gets the NULLs) */
    CPU->attention_bwd(CPU->ctx, &s, dq.c, dk.c, dv.c, s.n_windows ? dck.c : NULL, s.n_windows ? dcv.c : NULL,
                       ac->sink ? dsink.c : NULL, dout.c, out2.c, lse2.c, q.c, k.c, v.c, ck.c, cv.c, sink.c);
#ifdef PHASELAB_CUEMU
    const long reductions = cuemu_launch_count("attn_bwd_dkv_reduce_kernel");
#endif
    GPU->attention_bwd(GPU->ctx, &sg, dq.g, dk.g, dv.g, s.n_windows && want ? dck.g : NULL, s.n_windows && want ? dcv.g : NULL,
                       ac->sink && want ? dsink.g : NULL, dout.g, out2.g, lse2.g, q.g, k.g, v.g, ck.g, cv.g, sink.g);
#ifdef PHASELAB_CUEMU
    /* the case's shape really splits the dK/dV backward: the reduction of the partials ran */
    if (mode == ATT_SPLIT) {
        char wn[256];
        snprintf(wn, sizeof wn, "cuda_parity_%s: %s bwd dK/dV split (partials reduced)", G, ac->name);
        check(cuemu_launch_count("attn_bwd_dkv_reduce_kernel") > reductions, wn, "no reduction launched: the shape did not split");
    }
#endif
    snprintf(w, sizeof w, "%s bwd dq", ac->name); cmp_act(G, w, dq, nq, t->grad);
    snprintf(w, sizeof w, "%s bwd dk", ac->name); cmp_act(G, w, dk, nk, t->grad);
    snprintf(w, sizeof w, "%s bwd dv", ac->name); cmp_act(G, w, dv, nk, t->grad);
    if (s.n_windows && want) {
        snprintf(w, sizeof w, "%s bwd dck", ac->name); cmp_act(G, w, dck, nc, t->grad);
        snprintf(w, sizeof w, "%s bwd dcv", ac->name); cmp_act(G, w, dcv, nc, t->grad);
    }
    if (ac->sink && want) { snprintf(w, sizeof w, "%s bwd dsink (+=)", ac->name); cmp_f32(G, w, dsink, s.H, t->wgrad); }
    pfree(q); pfree(k); pfree(v); pfree(ck); pfree(cv); pfree(dout); pfree(out); pfree(lse); pfree(sink);
    pfree(dsink); pfree(dq); pfree(dk); pfree(dv); pfree(dck); pfree(dcv); pfree(out2); pfree(lse2);
    free(hq); free(hk); free(hv); free(hck); free(hcv); free(hdo); free(hs); free(hds); free(hout); free(hlse);
    if (hsel) { CPU->free(CPU->ctx, (void *)s.entry_select); GPU->free(GPU->ctx, (void *)sg.entry_select); free(hsel); }
    free(hends);
    if (mode == ATT_CUSTOM || mode == ATT_LARGE) unsetenv("PHASELAB_ATTN");
    if (mode == ATT_DEFAULT) GPU->set_deterministic(GPU->ctx, 0);
}

/* The tensor-core products the custom attention kernels issue (kernels/cuda/cuda_attention.cu,
 * "live" blocks: a warp skips the 16-key blocks of a key tile, or the dK/dV kernel's 16-query
 * blocks, in which none of its 16 rows sees anything). Emulator only (cuemu counts every warp's
 * wmma::mma_sync). The expected counts come from the visible (query, key) pairs themselves, one
 * pair at a time through the view (kernels/visibility.h): a 16 x 16 block of (query, key) pairs
 * costs DP/16 products per tile product it takes part in if one of its pairs is visible, nothing
 * otherwise, where the blocks are
 *   forward (S = Q K^T, O += P V: 2 products) and dq (S, dP = dO V^T, dq += dS K: 3):
 *     queries t / 16, entries j / 16, raw keys (key - raw_lo(t0)) / 16 with t0 the start of t's
 *     64-query tile (its raw walk starts there);
 *   dK/dV (S^T, dP^T, dV += P^T dO, dK += dS^T Q: 4): queries t / 16, entries j / 16, raw keys key / 16;
 * for every (b, h). A kernel that computed every block of the tiles it walks, or skipped a block
 * with a visible pair (which the parity cases would also see), fails the count. */
static long count_blocks(const AttnShape *s, int raw_from_tile) {
    const int nqb = (s->T + 15) / 16, nkb = (s->n_windows + s->T + 15) / 16 + 1;
    unsigned char *seen = malloc((size_t)nqb * nkb * 2);
    long total = 0;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            const int g = h / (s->H / s->G);
            memset(seen, 0, (size_t)nqb * nkb * 2);
            for (int t = 0; t < s->T; t++) {
                const VisQueryView v = attn_query_view(s, b, g, t);
                const int base = raw_from_tile ? attn_query_view(s, b, g, t / 64 * 64).raw_lo : 0;
                for (int j = 0; j < s->n_windows; j++)
                    if (j < v.n_entries) seen[((size_t)(t / 16) * nkb + j / 16) * 2] = 1;
                for (int key = v.raw_lo > base ? v.raw_lo : base; key <= t; key++)
                    seen[((size_t)(t / 16) * nkb + (key - base) / 16) * 2 + 1] = 1;
                if (v.raw_lo < base && v.raw_lo <= t) total = -1000000000L;   /* a raw key before the tile's walk */
            }
            for (size_t i = 0; i < (size_t)nqb * nkb * 2; i++) total += seen[i];
        }
    free(seen);
    return total;
}

/* the 16 x 16 blocks the kernels would compute without the skip, per (b, h): forward / dq: every
 * key tile a query tile walks (KeyTiles: entries up to its last query's count, raw keys from its
 * first query's raw_lo); dK/dV: every query tile from the first to the last that sees a key of the
 * 64-key tile (DkvTile's q_lo, q_hi), here found pair by pair */
static void count_walked(const AttnShape *s, long *fwd, long *kv) {
    const int nt = (s->n_windows + 63) / 64 + (s->T + 63) / 64;
    int *qlo = malloc(sizeof(int) * nt), *qhi = malloc(sizeof(int) * nt);
    *fwd = *kv = 0;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++) {
            const int g = h / (s->H / s->G), nct = (s->n_windows + 63) / 64;
            for (int t0 = 0; t0 < s->T; t0 += 64) {
                const int tl = t0 + 63 < s->T - 1 ? t0 + 63 : s->T - 1;
                const int nc = attn_query_view(s, b, g, tl).n_entries, lo = attn_query_view(s, b, g, t0).raw_lo;
                *fwd += 16L * ((nc + 63) / 64 + (tl >= lo ? (tl - lo) / 64 + 1 : 0));
            }
            for (int i = 0; i < nt; i++) { qlo[i] = s->T; qhi[i] = -1; }
            for (int t = 0; t < s->T; t++) {
                const VisQueryView v = attn_query_view(s, b, g, t);
                for (int j = 0; j < v.n_entries && j < s->n_windows; j++) {
                    if (t < qlo[j / 64]) qlo[j / 64] = t;
                    if (t > qhi[j / 64]) qhi[j / 64] = t;
                }
                for (int key = v.raw_lo; key <= t; key++) {
                    const int i = nct + key / 64;
                    if (t < qlo[i]) qlo[i] = t;
                    if (t > qhi[i]) qhi[i] = t;
                }
            }
            for (int i = 0; i < nt; i++)
                if (qhi[i] >= 0) *kv += 16L * (qhi[i] / 64 - qlo[i] / 64 + 1);
        }
    free(qlo); free(qhi);
}

static void run_attention_products(const ParityCase *pc) {
    const AttCase *ac = pc->arg;
    char w[256];
    snprintf(w, sizeof w, "cuda_parity_%s: products %s", pc->group, ac->name);
#ifndef PHASELAB_CUEMU
    check_skip(w, "needs the emulator's product count (tests/cuemu)");
#else
    setenv("PHASELAB_ATTN", "custom", 1);
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = ac->B; s.T = ac->T; s.H = ac->H; s.G = ac->G; s.d = ac->d;
    s.window = ac->W; s.stride = ac->S; s.visibility = ac->vis; s.n_local = ac->n_local;
    s.n_windows = ac->compressed && ac->T >= ac->W ? (ac->T - ac->W) / ac->S + 1 : 0;
    const int DP = ac->d <= 16 ? 16 : ac->d <= 32 ? 32 : ac->d <= 64 ? 64 : 128;
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d;
    size_t nc = (size_t)s.B * (s.n_windows ? s.n_windows : 1) * s.G * s.d, nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, 1, 0), *hk = hrand(nk, 1, 0), *hc = hrand(nc, 1, 0);
    void *q = put_act(GPU, hq, nq), *k = put_act(GPU, hk, nk), *v = put_act(GPU, hk, nk), *ck = put_act(GPU, hc, nc),
         *cv = put_act(GPU, hc, nc), *out = put_act(GPU, hq, nq), *dout = put_act(GPU, hq, nq);
    void *dq = put_act(GPU, hq, nq), *dk = put_act(GPU, hk, nk), *dv = put_act(GPU, hk, nk), *dck = put_act(GPU, hc, nc),
         *dcv = put_act(GPU, hc, nc);
    float *lse = GPU->alloc(GPU->ctx, nl * sizeof(float));
    const long f0 = cuemu_mma_count("attn_fwd"), q0 = cuemu_mma_count("attn_bwd_dq"), k0 = cuemu_mma_count("attn_bwd_dkv");
    GPU->attention_fwd(GPU->ctx, &s, out, lse, q, k, v, s.n_windows ? ck : NULL, s.n_windows ? cv : NULL, NULL);
    GPU->attention_bwd(GPU->ctx, &s, dq, dk, dv, s.n_windows ? dck : NULL, s.n_windows ? dcv : NULL, NULL, dout, out,
                       lse, q, k, v, s.n_windows ? ck : NULL, s.n_windows ? cv : NULL, NULL);
    GPU->synchronize(GPU->ctx);
    const long fwd = cuemu_mma_count("attn_fwd") - f0, dqn = cuemu_mma_count("attn_bwd_dq") - q0,
               dkv = cuemu_mma_count("attn_bwd_dkv") - k0;
    const long tile_blocks = count_blocks(&s, 1), key_blocks = count_blocks(&s, 0), per = DP / 16;
    long walked, walked_kv;
    count_walked(&s, &walked, &walked_kv);
    char wf[300], wq[300], wk[300];
    snprintf(wf, sizeof wf, "%s: forward", w); snprintf(wq, sizeof wq, "%s: dq", w); snprintf(wk, sizeof wk, "%s: dK/dV", w);
    check(fwd == 2 * per * tile_blocks, wf, "forward: %ld products, expected %ld (2 x %ld x %ld blocks with a visible pair)",
          fwd, 2 * per * tile_blocks, per, tile_blocks);
    check(dqn == 3 * per * tile_blocks, wq, "dq: %ld products, expected %ld (3 x %ld x %ld blocks)", dqn,
          3 * per * tile_blocks, per, tile_blocks);
    check(dkv == 4 * per * key_blocks, wk, "dK/dV: %ld products, expected %ld (4 x %ld x %ld blocks)", dkv,
          4 * per * key_blocks, per, key_blocks);
    printf("# %s: forward and dq %.1f%% of the products without the skip, dK/dV %.1f%% (%ld, %ld, %ld)\n", ac->name,
           100.0 * tile_blocks / walked, 100.0 * key_blocks / walked_kv, fwd, dqn, dkv);
    if (pc->mode) {   /* the same count at the paper's shape (host only: docs/gpu.md quotes it) */
        AttnShape p = s;
        p.B = 1; p.T = 4096; p.H = 1; p.G = 1;
        p.n_windows = (p.T - p.window) / p.stride + 1;
        long pw, pwk;
        count_walked(&p, &pw, &pwk);
        const long pt = count_blocks(&p, 1), pk = count_blocks(&p, 0);
        printf("# the same grid at T = 4096: forward and dq %.1f%% of the products without the skip, dK/dV %.1f%%\n",
               100.0 * pt / pw, 100.0 * pk / pwk);
    }
    void *bufs[] = {q, k, v, ck, cv, out, dout, dq, dk, dv, dck, dcv, lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) GPU->free(GPU->ctx, bufs[i]);
    free(hq); free(hk); free(hc);
    unsetenv("PHASELAB_ATTN");
#endif
}

/* multi-rate strides (model.head_strides, docs/spec.md §6.4): two interleaved grids, co-prime
 * strides, a stride-1 head, and (staggered) strides with their own offsets o_1 = floor(S_1 / 2) */

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
    /* the dK/dV backward split across blocks (kernels/cuda/cuda_attention.cu: a key tile with
     * more than L = 16 (head, query tile) items at these sizes gets ceil(items / 16) chunks):
     * entry tile 0 of 8 heads x 7 query tiles = 56 items, 4 chunks (16 16 16 8), B = 2 */
    {"split window W8 S8 nloc16 H8 G1 d32", 2, 448, 8, 1, 32,  8, 8, VIS_WINDOW, 16,  1,   0},
    /* raw tiles 0..2 split: 40, 32, 24 items (3, 2, 2 chunks); the sink keeps it off cuDNN */
    {"split full T=320 H8 G1 d32 sink",   1, 320, 8, 1, 32,  8, 8, VIS_FULL,   16,  0,   1},
    /* staggered: entry tile 0 of KV head 0 has 56 items (4 chunks), of head 1 (o_1 = 16) 48 (3) */
    {"split staggered G2 tail W64 S32 H16 d16", 1, 400, 16, 2, 16, 64, 32, VIS_TAIL, 16, 1,  0},   /* grid: its row */
    /* the `window` layer kind (docs/spec.md §5.2): a raw sliding window, no entries at any T */
    {"window-only kind nloc16 H4 G2 d64 sink", 2, 200, 4, 2, 64, 8, 8, VIS_WINDOW, 16, 0,   1},
    {"window-only kind nloc32 H8 G1 d32",     1, 150, 8, 1, 32, 8, 8, VIS_WINDOW, 32, 0,   0},
    /* the paper's shapes (issue 39; GPU runs only, is_paper_case): Qwen3-0.6B attention, B = 1 */
    {"paper T=4096 H16 G1 d128 W8 S8 nloc16", 1, 4096, 16, 1, 128, 8, 8, VIS_WINDOW, 16, 1, 0},
    {"paper T=4096 H16 G8 d128 W8 S8 nloc16", 1, 4096, 16, 8, 128, 8, 8, VIS_WINDOW, 16, 1, 0},
    {"paper full T=4096 H16 G8 d128",         1, 4096, 16, 8, 128, 8, 8, VIS_FULL,   16, 0, 0},
    /* multi-rate strides (§6.4; rows 19-22): per-head entry counts, tails and phases */
    {"multirate 8,6,8,6 tail W8 H8 G4 d32 sink",  2, 150, 8, 4, 32, 8, 6, VIS_TAIL,   16, 1, 1},
    {"multirate 4,3 window W4 nloc6 H4 G2 d64",   1, 100, 4, 2, 64, 4, 3, VIS_WINDOW, 6,  1, 0},
    {"multirate 4,1 tail W4 H4 G2 d16 (S=1 head)", 1, 90, 4, 2, 16, 4, 1, VIS_TAIL,   16, 1, 1},
    {"multirate 6,3 staggered tail W6 H4 G2 d32", 2, 80,  4, 2, 32, 6, 3, VIS_TAIL,   16, 1, 0},   /* grid: its row */
    /* learned chunk boundaries (§6.5; rows 23-27): random entry ends per sequence (case_learned_ends), T entry
     * rows; the last two split the dK/dV backward (entry tile 0: 8 heads x 5 query tiles = 40 items), the
     * last with two sequences of different entry counts (the split is planned over every sequence) */
    {"learned tail W8 H4 G2 d32 sink",            2, 150, 4, 2, 32, 8, 4, VIS_TAIL,   16, 1, 1},
    {"learned window W6 nloc5 H4 G1 d64",         2, 100, 4, 1, 64, 6, 3, VIS_WINDOW, 5,  1, 0},
    {"learned tail W4 H6 G3 d36 (unaligned)",     1, 77,  6, 3, 36, 4, 2, VIS_TAIL,   16, 1, 0},
    {"learned split tail W8 H8 G1 d32 sink",      1, 320, 8, 1, 32, 8, 4, VIS_TAIL,   16, 1, 1},
    {"learned split tail B2 W8 H8 G1 d32 sink",   2, 320, 8, 1, 32, 8, 4, VIS_TAIL,   16, 1, 1},
};

/* the product counts (run_attention_products): the paper's W8/S8 with a 16-token window at a small
 * width and T = 512 (8 query tiles), a tail grid with two heads per KV head, full causal attention */
static const AttCase PROD_CASES[] = {
    {"window W8 S8 nloc16 T=512 H2 G1 d16", 1, 512, 2, 1, 16, 8, 8, VIS_WINDOW, 16, 1, 0},
    {"tail W8 S4 T=300 H4 G2 d32",          2, 300, 4, 2, 32, 8, 4, VIS_TAIL,   16, 1, 0},
    {"full T=200 H2 G1 d16",                1, 200, 2, 1, 16, 8, 8, VIS_FULL,   16, 0, 0},
};

/* ---- decode attention: out [H,d] for one query at t over each KV head's visible entries + raw
 * ring slots (decode_head_view: kernels/visibility.h per head; staggered grids differ per head).
 * Rows 0-3 are the rows of the old shape (n_entries, ring_cap, raw_first, n_raw given directly)
 * with the same buffer sizes and visible slots: 10/16/5/16, 0/8/0/3, 200/16/9/12, 33/4/3/4. ---- */
typedef struct { int H, G, d, t, W, S, nW, grid, vis, n_local, ring_cap, sink; } DecCase;   /* (strides: case_strides of the variant) */
static const DecCase DEC_CASES[] = {
    /* H   G  d    t     W  S  nW   grid            vis         n_local ring sink */
    {4,  2, 64,  52,   4, 4, 10,  GRID_ALIGNED,   VIS_WINDOW, 16,     16,  1},   /* 10 entries, ring full from slot 5 */
    {2,  1, 128, 2,    8, 8, 0,   GRID_ALIGNED,   VIS_WINDOW, 8,      8,   0},   /* raw tokens only */
    {16, 8, 128, 1604, 8, 8, 200, GRID_ALIGNED,   VIS_WINDOW, 12,     16,  1},   /* many entries, GQA groups of 2, 12 raw from slot 9 */
    {6,  3, 36,  150,  4, 4, 33,  GRID_ALIGNED,   VIS_WINDOW, 4,      4,   0},   /* unaligned head size */
    {16, 8, 64,  1605, 8, 8, 200, GRID_STAGGERED, VIS_TAIL,   0,      14,  1},   /* per-head entries and tails */
    {8,  4, 32,  9,    4, 2, 12,  GRID_STAGGERED, VIS_TAIL,   0,      4,   0},   /* S < W, o = 0, 0, 1, 1 */
    {6,  3, 36,  77,   5, 3, 30,  GRID_STAGGERED, VIS_WINDOW, 6,      6,   1},   /* per-head entries, one raw window */
    /* multi-rate strides (§6.4): heads with 6 and 8 entries and tails; a stride-1 head's 30
     * entries; staggered 6,3 (o = 0, 1) */
    {8,  4, 32,  50,   8, 6, 12,  GRID_ALIGNED,   VIS_TAIL,   0,      7,   1},   /* strides: the DEC row's name */
    {4,  2, 64,  33,   4, 1, 40,  GRID_ALIGNED,   VIS_WINDOW, 6,      6,   0},
    {4,  2, 32,  40,   6, 3, 14,  GRID_STAGGERED, VIS_TAIL,   0,      6,   1},
    /* learned chunk boundaries (§6.5; the variant says "learned"): random ends up to t, one slot per position;
     * tail: at most W - 1 raw tokens after the last entry */
    {4,  2, 32,  60,   8, 4, 61,  GRID_ALIGNED,   VIS_TAIL,   0,      8,   1},
    {6,  3, 36,  45,   6, 3, 46,  GRID_ALIGNED,   VIS_WINDOW, 5,      5,   0},
};

static void run_attention_decode(const ParityCase *pc) {
    const DecCase *dc = pc->arg;
    DecodeAttnShape s = {.H = dc->H, .G = dc->G, .d = dc->d, .t = dc->t, .window = dc->W, .stride = dc->S,
                         .n_windows = dc->nW, .grid = dc->grid, .visibility = dc->vis, .n_local = dc->n_local,
                         .ring_cap = dc->ring_cap};
    int hs_buf[64];
    s.head_stride = case_strides(pc->variant, dc->G, hs_buf);
    int32_t *hends = NULL;
    if (strstr(pc->variant, "learned")) {   /* entry ends (§6.5) up to t: n_windows slots, the written ones end <= t */
        hends = malloc(sizeof(int32_t) * (size_t)(s.n_windows ? s.n_windows : 1));
        s.entry_count = case_learned_ends(hends, s.n_windows, s.t + 1, s.window);
        s.entry_ends = hends;
    }
    size_t nq = (size_t)s.H * s.d, nc = (size_t)(s.n_windows ? s.n_windows : 1) * s.G * s.d,
           nr = (size_t)s.ring_cap * s.G * s.d;
    float *hq = hrand(nq, 1, 0), *hck = hrand(nc, 1, 0), *hcv = hrand(nc, 1, 0), *hk = hrand(nr, 1, 0),
          *hv = hrand(nr, 1, 0), *hs = hrand(s.H, 1, 0);
    Pair q = pa(hq, nq), ck = pa(hck, nc), cv = pa(hcv, nc), k = pa(hk, nr), v = pa(hv, nr), out = pa(hq, nq);
    Pair sink = dc->sink ? pf(hs, s.H) : pnull();
    CPU->attention_decode(CPU->ctx, &s, out.c, q.c, ck.c, cv.c, k.c, v.c, sink.c);
    GPU->attention_decode(GPU->ctx, &s, out.g, q.g, ck.g, cv.g, k.g, v.g, sink.g);
    char w[160];
    snprintf(w, sizeof w, "%s out", pc->variant);
    cmp_act(pc->group, w, out, nq, pc->tol.out);
    pfree(q); pfree(ck); pfree(cv); pfree(k); pfree(v); pfree(out); pfree(sink);
    free(hq); free(hck); free(hcv); free(hk); free(hv); free(hs); free(hends);
}

/* ---- compressor: fwd entry (out), alpha payload pn_rstd (aux), bwd da += (grad), weight grads += (wgrad);
 * COMP_DETERMINISM: the GPU backward twice, identical bits ---- */
/* maps: 0 paper (one map per offset), 1 deepseek (two half-window maps), 2 shared (docs/spec.md §2b: one) */
/* base: the static grid offset o_base (docs/spec.md §6.1; < 0: partial first windows, masked slots) */
/* (the grid: the ParityCase's shape[0], GRID_*, 0 aligned; strides: case_strides of the name) */
typedef struct { const char *name; int B, T, D, G, d, W, S, gate, bias, post, maps, base; } CompCase;
enum { COMP_PARITY = 0, COMP_DETERMINISM = 1 };

/* The CompShape of a compressor case: its grid (the ParityCase's shape[0]), its per-head strides
 * (case_strides of the name, kept in hs_buf [64]) and the window count they give. */
static CompShape comp_case_shape(const ParityCase *pc, const CompCase *cc, int *hs_buf) {
    CompShape s;
    memset(&s, 0, sizeof s);
    s.B = cc->B; s.T = cc->T; s.D = cc->D; s.G = cc->G; s.d = cc->d; s.window = cc->W; s.stride = cc->S;
    s.grid_base = cc->base;
    s.n_windows = vis_n_windows(cc->T, cc->W, cc->S, cc->base);
    s.grid = pc->shape[0];
    s.head_stride = case_strides(cc->name, cc->G, hs_buf);
    if (s.head_stride || s.grid) s.n_windows = case_windows(cc->T, cc->W, cc->S, s.head_stride, s.grid, cc->G, cc->base);
    s.gate = cc->gate;
    s.channels = cc->gate == GATE_VECTOR ? cc->d : 1;
    s.n_maps = cc->maps == 1 ? 2 : cc->maps == 2 ? 1 : cc->W;
    s.eps = 1e-6f;
    return s;
}

static void run_compressor(const ParityCase *pc) {
    const CompCase *cc = pc->arg;
    const Tol *t = &pc->tol;
    const int check_determinism = pc->mode == COMP_DETERMINISM;
    const char *G = pc->group;
    int hs_buf[64];
    CompShape s = comp_case_shape(pc, cc, hs_buf);
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
        snprintf(w, sizeof w, "%s fwd entry", cc->name); cmp_act(G, w, entry, ne, t->out);
        snprintf(w, sizeof w, "%s fwd alpha", cc->name); cmp_f32(G, w, alpha, nslot * c, t->aux);
        snprintf(w, sizeof w, "%s fwd payload", cc->name); cmp_act(G, w, payload, nslot * s.d, t->aux);
        if (cc->post) { snprintf(w, sizeof w, "%s fwd pn_rstd", cc->name); cmp_f32(G, w, pnr, nslot, t->aux); }
        /* backward from the CPU's forward state on both sides */
        float *halpha = get_f32(CPU, alpha.c, nslot * c), *hpay = get_act(CPU, payload.c, nslot * s.d),
              *hpnr = get_f32(CPU, pnr.c, nslot);
        for (size_t i = 0; i < nslot * s.d; i++) hpay[i] = bfr(hpay[i]);
        Pair alpha2 = pf(halpha, nslot * c), pay2 = pa(hpay, nslot * s.d), pnr2 = pf(hpnr, nslot);
        CPU->compressor_bwd(CPU->ctx, &s, da.c, dgw.c, dgb.c, dpw.c, dpost.c, de.c, alpha2.c, pay2.c, pnr2.c, a.c, gw.c, pw.c, post.c, NULL);
        GPU->compressor_bwd(GPU->ctx, &s, da.g, dgw.g, dgb.g, dpw.g, dpost.g, de.g, alpha2.g, pay2.g, pnr2.g, a.g, gw.g, pw.g, post.g, NULL);
        snprintf(w, sizeof w, "%s bwd da (+=)", cc->name); cmp_act(G, w, da, na, t->grad);
        snprintf(w, sizeof w, "%s bwd dpayload_w (+=)", cc->name); cmp_f32(G, w, dpw, npw, t->wgrad);
        if (gated) { snprintf(w, sizeof w, "%s bwd dgate_w (+=)", cc->name); cmp_f32(G, w, dgw, ngw, t->wgrad); }
        if (gated && cc->bias) { snprintf(w, sizeof w, "%s bwd dgate_b (+=)", cc->name); cmp_f32(G, w, dgb, ngb, t->wgrad); }
        if (cc->post) { snprintf(w, sizeof w, "%s bwd dpost_w (+=)", cc->name); cmp_f32(G, w, dpost, s.d, t->wgrad); }
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
    {"scalar+bias W8 S8",                  2, 40, 48,  2, 16,  8, 8, GATE_SCALAR,  1,   0,   0,   0},
    {"scalar no-bias W8 S4 (overlap)",     2, 40, 48,  2, 16,  8, 4, GATE_SCALAR,  0,   0,   0,   0},
    {"vector+bias post-norm W4 S4",        2, 36, 32,  2, 16,  4, 4, GATE_VECTOR,  1,   1,   0,   0},
    {"vector no-bias W8 S4 G1 d40",        1, 50, 40,  1, 40,  8, 4, GATE_VECTOR,  0,   0,   0,   0},
    {"uniform post-norm W6 S3",            2, 30, 32,  2, 16,  6, 3, GATE_UNIFORM, 0,   1,   0,   0},
    {"uniform W8 S8",                      1, 64, 64,  1, 32,  8, 8, GATE_UNIFORM, 0,   0,   0,   0},
    {"deepseek scalar+bias W8 S4",         2, 44, 48,  2, 16,  8, 4, GATE_SCALAR,  1,   0,   1,   0},
    {"deepseek vector+bias post W8 S4",    1, 40, 32,  2, 16,  8, 4, GATE_VECTOR,  1,   1,   1,   0},
    {"scalar+bias W8 S8 d128 D256",        1, 64, 256, 2, 128, 8, 8, GATE_SCALAR,  1,   0,   0,   0},
    {"shared scalar+bias W8 S8",           2, 40, 48,  2, 16,  8, 8, GATE_SCALAR,  1,   0,   2,   0},
    {"shared scalar no-bias W8 S4",        2, 40, 48,  2, 16,  8, 4, GATE_SCALAR,  0,   0,   2,   0},
    {"shared vector+bias post W6 S3",      1, 36, 32,  2, 16,  6, 3, GATE_VECTOR,  1,   1,   2,   0},
    /* the paper's shapes (GPU runs only, is_paper_case): d_model 1024, T = 4096, 1 and 8 KV heads */
    {"paper T=4096 D1024 G1 d128 W8 S8",   1, 4096, 1024, 1, 128, 8, 8, GATE_SCALAR, 1,   0,   0,   0},
    {"paper T=4096 D1024 G8 d128 W8 S8",   2, 4096, 1024, 8, 128, 8, 8, GATE_SCALAR, 1,   0,   0,   0},
    /* negative static offsets (docs/spec.md §6.1, §5.4: DeepSeek-V4's CSA is o_base = S - W = -4):
     * partial first windows, masked slots; the last row writes da directly (W <= S) */
    /* name                                B  T   D    G  d    W  S  gate            bias post maps base */
    {"csa deepseek vector+bias W8 S4 o-4", 2, 40, 32,  2, 16,  8, 4, GATE_VECTOR,  1,   0,   1,  -4},
    {"csa deepseek scalar+bias post o-4",  2, 44, 48,  2, 16,  8, 4, GATE_SCALAR,  1,   1,   1,  -4},
    {"paper scalar no-bias W8 S4 o-7",     2, 40, 48,  2, 16,  8, 4, GATE_SCALAR,  0,   0,   0,  -7},
    {"shared vector+bias post W6 S3 o-5",  1, 36, 32,  2, 16,  6, 3, GATE_VECTOR,  1,   1,   2,  -5},
    {"uniform post W8 S2 o-7",             2, 30, 32,  1, 16,  8, 2, GATE_UNIFORM, 0,   1,   0,  -7},
    {"paper vector+bias W4 S4 o-3",        2, 36, 32,  2, 16,  4, 4, GATE_VECTOR,  1,   0,   0,  -3},
    /* multi-rate strides (§6.4; rows 20-23): per-head slices with their own row step S_g */
    /* name                                  B  T   D   G  d   W  S  gate          bias post maps base */
    {"multirate 8,6,8,6 scalar+bias W8",     2, 40, 48, 4, 16, 8, 6, GATE_SCALAR,  1,   0,   0,   0},
    {"multirate 4,3 vector+bias post W4",    2, 37, 32, 2, 16, 4, 3, GATE_VECTOR,  1,   1,   0,   0},
    {"multirate 4,1 uniform post W4 (S=1)",  1, 30, 32, 2, 16, 4, 1, GATE_UNIFORM, 0,   1,   0,   0},
    {"multirate 6,3 staggered shared W6",    2, 36, 32, 2, 16, 6, 3, GATE_SCALAR,  1,   0,   2,   0},   /* grid: its rows */
};

/* the compressor backward twice (overlapping windows: the fp32 accumulation path) */
static const CompCase DET_COMP_CASE = {"scalar+bias W8 S4", 2, 64, 64, 2, 32, 8, 4, GATE_SCALAR, 1, 0, 0, 0};
/* ... and on V4's CSA geometry (o_base = -4: the partial first windows' own GEMMs) */
static const CompCase DET_COMP_CASE_V4 = {"deepseek vector+bias W8 S4 o-4", 2, 64, 64, 2, 32, 8, 4, GATE_VECTOR, 1, 0, 1, -4};
/* ... and with multi-rate strides (per-head slices, the fp32 da buffer) */
static const CompCase DET_COMP_CASE_MR = {"multirate 8,6,8,6 scalar+bias W8", 2, 64, 64, 4, 32, 8, 6, GATE_SCALAR, 1, 0, 0, 0};

/* ---- gate-coverage penalty on the shape of a compressor case: per_seq (out), dalpha (grad).
 * alpha [B,nW,G,W,c] is a softmax over the window offsets i of random logits. ---- */
static void run_gate_coverage(const ParityCase *pc) {
    const CompCase *cc = pc->arg;
    int hs_buf[64];
    CompShape s = comp_case_shape(pc, cc, hs_buf);
    const int W = s.window, c = s.channels;
    const size_t nslot = (size_t)s.B * s.n_windows * s.G * W, na = nslot * c;
    float *ha = hrand(na, 1, 0);
    for (size_t r = 0; r < nslot / W; r++)          /* softmax over the present i of [.., W, c]; masked slots 0 */
        for (int ch = 0; ch < c; ch++) {            /* (rows past head g's own windows, §6.4: all 0) */
            float *row = ha + r * W * c + ch;
            const int g = (int)(r % s.G), j = (int)(r / s.G) % s.n_windows, Sg = vis_head_stride(s.head_stride, g, s.stride);
            const int og = vis_entry_offset(s.grid, g, Sg, s.G, s.grid_base, 0);
            const int f = j < vis_n_windows(s.T, W, Sg, og) ? vis_window_first_slot(j, Sg, og) : W;
            double sum = 0;
            for (int i = f; i < W; i++) sum += exp(row[i * c]);
            if (f >= W) sum = 1;
            for (int i = 0; i < W; i++) row[i * c] = i < f ? 0.0f : (float)(exp(row[i * c]) / sum);
        }
    float *hz = hrand(na > (size_t)s.B ? na : (size_t)s.B, 1, 0);
    Pair alpha = pf(ha, na), dalpha = pf(hz, na), per_seq = pf(hz, s.B), per_seq2 = pf(hz, s.B);
    float gs = 0.37f;
    CPU->gate_coverage(CPU->ctx, &s, alpha.c, dalpha.c, per_seq.c, gs);
    GPU->gate_coverage(GPU->ctx, &s, alpha.g, dalpha.g, per_seq.g, gs);
    char w[192];
    snprintf(w, sizeof w, "gate_coverage %s per_seq", cc->name); cmp_f32(pc->group, w, per_seq, s.B, pc->tol.out);
    snprintf(w, sizeof w, "gate_coverage %s dalpha", cc->name); cmp_f32(pc->group, w, dalpha, na, pc->tol.grad);
    /* without dalpha: the same losses */
    CPU->gate_coverage(CPU->ctx, &s, alpha.c, NULL, per_seq2.c, gs);
    GPU->gate_coverage(GPU->ctx, &s, alpha.g, NULL, per_seq2.g, gs);
    snprintf(w, sizeof w, "gate_coverage %s per_seq (no dalpha)", cc->name); cmp_f32(pc->group, w, per_seq2, s.B, pc->tol.out);
    pfree(alpha); pfree(dalpha); pfree(per_seq); pfree(per_seq2);
    free(ha); free(hz);
}

/* ---- classifier: losses (out), dx (grad), demb += (wgrad), the forward-only losses equal bit for
 * bit; logits_argmax: at most the fraction aux of the rows differ (near-ties); shape N, D, V and
 * the logit std (emb scale std / sqrt(D); 0: emb scale 0.5, the first rows' inputs); mode > 0:
 * the CUDA chunk holds at most mode rows (PHASELAB_CLS_LOGITS_BUDGET = mode x 2 x roundup(V, 8)
 * bytes of bf16 logits, kernels/cuda/cuda_classifier.cu), and in the emulator the row kernel
 * must run ceil(N / mode) times (one launch a chunk) ---- */
#ifdef PHASELAB_CUEMU
#define CLS_KERNEL "ce_fused_kernel"   /* kernels/cuda/cuda_classifier.cu */
#endif
static void cls_budget(int max_rows, int V) {
    if (max_rows <= 0) { unsetenv("PHASELAB_CLS_LOGITS_BUDGET"); return; }
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)max_rows * 2 * ((V + 7) / 8 * 8));
    setenv("PHASELAB_CLS_LOGITS_BUDGET", b, 1);
}
static double cls_emb_scale(const ParityCase *pc) { return pc->shape[3] > 0 ? pc->shape[3] / sqrt((double)pc->shape[1]) : 0.5; }

static void run_classifier(const ParityCase *pc) {
    const char *G = pc->group;
    const Tol *tl = &pc->tol;
    int N = pc->shape[0], D = pc->shape[1], V = pc->shape[2];
    char w[160];
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = (i % 7 == 3) ? -1 : (int32_t)(urand() * V) % V;
    float *hx = hrand((size_t)N * D, 1, 0), *he = hrand((size_t)V * D, cls_emb_scale(pc), 0),
          *hdem = hrand((size_t)V * D, 1e-3, 0);
    Pair x = pa(hx, (size_t)N * D), emb = pa(he, (size_t)V * D), t = pi(tg, N), loss = pf(hx, N),
         dx = pa(hx, (size_t)N * D), demb = pf(hdem, (size_t)V * D);
    float gs = 1.0f / N;
    CPU->classifier(CPU->ctx, x.c, emb.c, t.c, N, D, V, loss.c, dx.c, demb.c, gs);
    cls_budget(pc->mode, V);
#ifdef PHASELAB_CUEMU
    const long launches = cuemu_launch_count(CLS_KERNEL);
#endif
    GPU->classifier(GPU->ctx, x.g, emb.g, t.g, N, D, V, loss.g, dx.g, demb.g, gs);
#ifdef PHASELAB_CUEMU
    if (pc->mode > 0) {   /* the shape really splits into chunks, the last one ragged */
        const long want = (N + pc->mode - 1) / pc->mode, got = cuemu_launch_count(CLS_KERNEL) - launches;
        snprintf(w, sizeof w, "cuda_parity_%s: classifier N=%d V=%d in %ld chunks of <= %d rows", G, N, V, want, pc->mode);
        check(got == want, w, "%ld row-kernel launches", got);
    }
#endif
    char tag[48] = "";   /* distinct check names for the chunked rows */
    if (pc->mode > 0) snprintf(tag, sizeof tag, " chunks<=%d", pc->mode);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d%s losses", N, D, V, tag); cmp_f32(G, w, loss, N, tl->out);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d%s dx", N, D, V, tag); cmp_act(G, w, dx, (size_t)N * D, tl->grad);
    snprintf(w, sizeof w, "classifier N=%d D=%d V=%d%s demb (+=)", N, D, V, tag); cmp_f32(G, w, demb, (size_t)V * D, tl->wgrad);
    /* forward only (dx NULL) gives the same losses */
    Pair loss2 = pf(hx, N);
    GPU->classifier(GPU->ctx, x.g, emb.g, t.g, N, D, V, loss2.g, NULL, NULL, gs);
    cls_budget(0, V);
    float *l1 = get_f32(GPU, loss.g, N), *l2 = get_f32(GPU, loss2.g, N);
    snprintf(w, sizeof w, "classifier N=%d V=%d%s forward-only losses equal", N, V, tag);
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
    snprintf(w, sizeof w, "logits_argmax N=%d V=%d%s", N, V, tag);
    check(mism <= (int)(N * tl->aux + 1e-9), w, "%d of %d rows differ", mism, N);
    pfree(x); pfree(emb); pfree(t); pfree(loss); pfree(dx); pfree(demb); pfree(loss2); pfree(am);
    free(tg); free(hx); free(he); free(hdem); free(l1); free(l2); free(a1); free(a2);
}

/* ---- optimizer: 3 AdamW steps of the owned step op (adamw_cast) without a clip (gscale 1) and
 * without a working copy (w NULL), p m v (out); sumsq relative (aux) and deterministic;
 * n = shape[0] ---- */
static void run_optimizer(const ParityCase *pc) {
    const char *G = pc->group;
    size_t n = (size_t)pc->shape[0];
    float *hp = malloc(sizeof(float) * n), *hg = malloc(sizeof(float) * n), *hm = malloc(sizeof(float) * n),
          *hv = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        hp[i] = (float)nrand(); hg[i] = (float)(0.1 * nrand()); hm[i] = (float)(0.01 * nrand());
        hv[i] = (float)(1e-4 * urand());
    }
    Pair p = pf(hp, n), g = pf(hg, n), m = pf(hm, n), v = pf(hv, n);
    for (int step = 0; step < 3; step++) {
        CPU->adamw_cast(CPU->ctx, p.c, NULL, g.c, m.c, v.c, n, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
        GPU->adamw_cast(GPU->ctx, p.g, NULL, g.g, m.g, v.g, n, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
    }
    cmp_f32(G, "adamw_cast gscale=1 p", p, n, pc->tol.out);
    cmp_f32(G, "adamw_cast gscale=1 m", m, n, pc->tol.out);
    cmp_f32(G, "adamw_cast gscale=1 v", v, n, pc->tol.out);
    double s1 = CPU->sumsq(CPU->ctx, g.c, n), s2 = GPU->sumsq(GPU->ctx, g.g, n);
    check(fabs(s1 - s2) <= pc->tol.aux * fabs(s1), "cuda_parity_optimizer: sumsq", "cpu %.17g cuda %.17g", s1, s2);
    double s3 = GPU->sumsq(GPU->ctx, g.g, n);
    check(s2 == s3, "cuda_parity_optimizer: sumsq deterministic", "%.17g vs %.17g", s2, s3);
    pfree(p); pfree(g); pfree(m); pfree(v);
    free(hp); free(hg); free(hm); free(hv);
}

/* ---- the owned step (kernels/ops.def adamw_cast): 3 steps with a clip factor 0.73, the fp32
 * master p m v (out) and the GPU's working copy, zero before the steps, against the CPU master
 * (grad: 2^-8, bf16 rounding of the copy; the CPU's copy is the master itself); loss_accumulate of two micro-batches with
 * ignored targets, in double (aux); n = shape[0] ---- */
static void run_owned_step(const ParityCase *pc) {
    const char *G = pc->group;
    size_t n = (size_t)pc->shape[0];
    float *hp = malloc(sizeof(float) * n), *hg = malloc(sizeof(float) * n), *hm = malloc(sizeof(float) * n),
          *hv = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        hp[i] = (float)nrand(); hg[i] = (float)(0.1 * nrand()); hm[i] = (float)(0.01 * nrand());
        hv[i] = (float)(1e-4 * urand());
    }
    float *zeros = calloc(n, sizeof(float));
    Pair p = pf(hp, n), g = pf(hg, n), m = pf(hm, n), v = pf(hv, n), w = pa(zeros, n);   /* a stale copy fails */
    free(zeros);
    for (int step = 0; step < 3; step++) {
        CPU->adamw_cast(CPU->ctx, p.c, NULL, g.c, m.c, v.c, n, 0.73f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
        GPU->adamw_cast(GPU->ctx, p.g, w.g, g.g, m.g, v.g, n, 0.73f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.142625f);
    }
    cmp_f32(G, "adamw_cast p", p, n, pc->tol.out);
    cmp_f32(G, "adamw_cast m", m, n, pc->tol.out);
    cmp_f32(G, "adamw_cast v", v, n, pc->tol.out);
    float *master = get_f32(CPU, p.c, n), *copy = get_act(GPU, w.g, n);
    cmp(G, "adamw_cast working copy = the updated master", master, copy, n, pc->tol.grad);
    free(master); free(copy);

    const int rows = 7, cols = 301;
    const size_t N = (size_t)rows * cols;
    float *hl = malloc(sizeof(float) * N);
    int32_t *ht = malloc(sizeof(int32_t) * N);
    for (size_t i = 0; i < N; i++) { hl[i] = (float)(3.0 + urand()); ht[i] = (i % 13 == 5) ? -1 : (int32_t)(i % 100); }
    Pair losses = pf(hl, N), targets = pi(ht, N);
    double *acc_c = CPU->alloc(CPU->ctx, sizeof(double)), *acc_g = GPU->alloc(GPU->ctx, sizeof(double));
    for (int mb = 0; mb < 2; mb++) {
        CPU->loss_accumulate(CPU->ctx, acc_c, losses.c, targets.c, rows, cols);
        GPU->loss_accumulate(GPU->ctx, acc_g, losses.g, targets.g, rows, cols);
    }
    double lc, lg;
    CPU->synchronize(CPU->ctx); GPU->synchronize(GPU->ctx);
    CPU->download(CPU->ctx, &lc, acc_c, sizeof lc);
    GPU->download(GPU->ctx, &lg, acc_g, sizeof lg);
    check(fabs(lc - lg) <= pc->tol.aux * fabs(lc) && lc > 0, "cuda_parity_optimizer: loss_accumulate (2 micro-batches)",
          "cpu %.17g cuda %.17g", lc, lg);
    CPU->free(CPU->ctx, acc_c); GPU->free(GPU->ctx, acc_g);
    pfree(losses); pfree(targets); free(hl); free(ht);
    pfree(p); pfree(g); pfree(m); pfree(v); pfree(w);
    free(hp); free(hg); free(hm); free(hv);
}

/* ---- determinism: the attention backward twice on the GPU gives identical bits ----
 * The shape is the row's AttCase (compressed, with a sink), or B2 T300 H4 G2 d64 W8 S4 window.
 * With an AttCase, a backward on other gradients runs between the two (it leaves other values in
 * the backward's workspaces, e.g. the split dK/dV's partial sums: a read of a stale slot shows).
 * DET_ATT_SPLIT: entry tile 0 has 8 heads x 5 query tiles = 40 items, 3 chunks (16 16 8). */
static const AttCase DET_ATT_SPLIT = {"B2 T264 H8 G1 d32 W8 S8 window sink (split dK/dV)", 2, 264, 8, 1, 32, 8, 8,
                                      VIS_WINDOW, 16, 1, 1};
static void run_determinism_attention(const ParityCase *pc) {
    const AttCase *ac = pc->arg;
    /* attention backward twice */
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = 2; s.T = 300; s.H = 4; s.G = 2; s.d = 64; s.window = 8; s.stride = 4; s.visibility = VIS_WINDOW;
    s.n_local = 16;
    if (ac) {
        s.B = ac->B; s.T = ac->T; s.H = ac->H; s.G = ac->G; s.d = ac->d; s.window = ac->W; s.stride = ac->S;
        s.visibility = ac->vis; s.n_local = ac->n_local; s.grid = pc->shape[0];
    }
    s.n_windows = (s.T - s.window) / s.stride + 1;
    size_t nq = (size_t)s.B * s.T * s.H * s.d, nk = (size_t)s.B * s.T * s.G * s.d, nc = (size_t)s.B * s.n_windows * s.G * s.d;
    size_t nl = (size_t)s.B * s.T * s.H;
    float *hq = hrand(nq, 1, 0), *hk = hrand(nk, 1, 0), *hc = hrand(nc, 1, 0), *hs = hrand(s.H, 1, 0);
    void *q = put_act(GPU, hq, nq), *k = put_act(GPU, hk, nk), *v = put_act(GPU, hk, nk), *ck = put_act(GPU, hc, nc),
         *cv = put_act(GPU, hc, nc), *dout = put_act(GPU, hq, nq), *out = put_act(GPU, hq, nq);
    float *lse = put_f32(GPU, hq, nl), *sink = put_f32(GPU, hs, s.H);
    GPU->attention_fwd(GPU->ctx, &s, out, lse, q, k, v, ck, cv, sink);
    unsigned char *res[2];
    size_t bytes = (nq + 2 * nk + 2 * nc) * GPU->act_bytes + s.H * sizeof(float);
#ifdef PHASELAB_CUEMU
    const long reductions = cuemu_launch_count("attn_bwd_dkv_reduce_kernel");
#endif
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
        if (ac && rep == 0)   /* other gradients in between: other values in the workspaces */
            GPU->attention_bwd(GPU->ctx, &s, dq, dk, dv, dck, dcv, dsink, q, out, lse, q, k, v, ck, cv, sink);
        GPU->free(GPU->ctx, dq); GPU->free(GPU->ctx, dk); GPU->free(GPU->ctx, dv); GPU->free(GPU->ctx, dck); GPU->free(GPU->ctx, dcv); GPU->free(GPU->ctx, dsink);
    }
    if (!ac) {
        check(!memcmp(res[0], res[1], bytes), "cuda_parity_determinism: attention bwd twice gives identical bits", "results differ");
    } else {
        char w[192];
        snprintf(w, sizeof w, "cuda_parity_determinism: attention bwd twice gives identical bits (%s)", ac->name);
        check(!memcmp(res[0], res[1], bytes), w, "results differ");
#ifdef PHASELAB_CUEMU
        snprintf(w, sizeof w, "cuda_parity_determinism: %s splits dK/dV (the partials' reduction ran)", ac->name);
        check(cuemu_launch_count("attn_bwd_dkv_reduce_kernel") > reductions, w, "no reduction launched: the shape did not split");
#endif
    }
    free(res[0]); free(res[1]);
    GPU->free(GPU->ctx, q); GPU->free(GPU->ctx, k); GPU->free(GPU->ctx, v); GPU->free(GPU->ctx, ck); GPU->free(GPU->ctx, cv); GPU->free(GPU->ctx, dout); GPU->free(GPU->ctx, out);
    GPU->free(GPU->ctx, lse); GPU->free(GPU->ctx, sink);
    free(hq); free(hk); free(hc); free(hs);
}

/* ---- determinism: the embedding backward twice, many repeated tokens; shape N, D, V ---- */
static void run_determinism_embedding(const ParityCase *pc) {
    int N = pc->shape[0], D = pc->shape[1], V = pc->shape[2];
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V) % V;
    float *hd = hrand((size_t)N * D, 1, 0);
    void *t = put_i32(GPU, tok, N), *d_ = put_f32(GPU, hd, (size_t)N * D);
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
}

/* classifier with gradients twice (several chunks, ignored targets): identical losses, dx and demb
 * bits; shape and mode as run_classifier */
static void run_determinism_classifier(const ParityCase *pc) {
    int N = pc->shape[0], D = pc->shape[1], V = pc->shape[2];
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = (i % 7 == 3) ? -1 : (int32_t)(urand() * V) % V;
    float *hx = hrand((size_t)N * D, 1, 0), *he = hrand((size_t)V * D, cls_emb_scale(pc), 0);
    void *t = put_i32(GPU, tg, N), *x = put_act(GPU, hx, (size_t)N * D), *e = put_act(GPU, he, (size_t)V * D);
    size_t nd = (size_t)N * D, ne = (size_t)V * D;
    float *out[2][3];
    cls_budget(pc->mode, V);
    for (int rep = 0; rep < 2; rep++) {
        float *loss = GPU->alloc(GPU->ctx, sizeof(float) * N), *demb = GPU->alloc(GPU->ctx, sizeof(float) * ne);
        void *dx = GPU->alloc(GPU->ctx, nd * GPU->act_bytes);
        GPU->classifier(GPU->ctx, x, e, t, N, D, V, loss, dx, demb, 1.0f / N);
        out[rep][0] = get_f32(GPU, loss, N);
        out[rep][1] = get_act(GPU, dx, nd);
        out[rep][2] = get_f32(GPU, demb, ne);
        GPU->free(GPU->ctx, loss); GPU->free(GPU->ctx, dx); GPU->free(GPU->ctx, demb);
    }
    cls_budget(0, V);
    char w[160];
    snprintf(w, sizeof w, "cuda_parity_determinism: classifier N=%d D=%d V=%d (chunks of <= %d rows) twice gives identical bits",
             N, D, V, pc->mode);
    int same = !memcmp(out[0][0], out[1][0], sizeof(float) * N) && !memcmp(out[0][1], out[1][1], sizeof(float) * nd) &&
               !memcmp(out[0][2], out[1][2], sizeof(float) * ne);
    check(same, w, "losses %s, dx %s, demb %s", memcmp(out[0][0], out[1][0], sizeof(float) * N) ? "differ" : "equal",
          memcmp(out[0][1], out[1][1], sizeof(float) * nd) ? "differ" : "equal",
          memcmp(out[0][2], out[1][2], sizeof(float) * ne) ? "differ" : "equal");
    for (int rep = 0; rep < 2; rep++) for (int k = 0; k < 3; k++) free(out[rep][k]);
    GPU->free(GPU->ctx, t); GPU->free(GPU->ctx, x); GPU->free(GPU->ctx, e);
    free(tg); free(hx); free(he);
}

/* ---- the lightning indexer (docs/spec.md §5.4): indexer_scores (out: -inf at the same places,
 * finite values by the normalised error), indexer_select (exact, on the CPU's scores, rounded to
 * a coarse grid in the "ties" cases so that many scores tie), indexer_kl (aux: the KL sum
 * relative, the count exact, dscore normalised; with the top-k set and dense), indexer_scores_bwd
 * (grad: diq diw dik, bf16 outputs) on the CPU's dscore; then the GPU's four ops twice, identical
 * bits. The KL and backward read the CPU's scores and selection on both sides (the ops' own
 * inputs), so one op's difference does not move the next op's. ---- */
typedef struct { const char *name; int B, T, W, S, o, HI, dI, topk, H, G, d, ties; } IdxCase;
static const IdxCase IDX_CASES[] = {
    /* name                                          B  T    W  S  o   HI dI  k    H  G  d   ties */
    {"B2 T64 W4 S2 HI4 dI16 k5 H4 G2 d16",           2, 64,  4, 2, 0,  4, 16, 5,   4, 2, 16, 0},
    {"B1 T200 W8 S4 o-4 HI2 dI80 k16 H2 G1 d32 ties", 1, 200, 8, 4, -4, 2, 80, 16,  2, 1, 32, 1},
    {"B1 T400 W2 S1 HI2 dI16 k150 H2 G2 d16 ties",   1, 400, 2, 1, 0,  2, 16, 150, 2, 2, 16, 1},
    /* dI 1100: the backward's blocks take 3 heads each (HC dI <= 4096), here 3 + 1 */
    {"B1 T24 W4 S2 HI4 dI1100 k3 H2 G1 d16",        1, 24,  4, 2, 0,  4, 1100, 3, 2, 1, 16, 0},
};

static void cmp_bytes(const char *group, const char *what, const uint8_t *a, const uint8_t *b, size_t n) {
    char name[320];
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) if (a[i] != b[i]) { if (!bad) first = i; bad++; }
    snprintf(name, sizeof name, PARITY_NAME_PREFIX "%s: %s", group, what);
    check(bad == 0, name, "%zu of %zu bytes differ (first at %zu)", bad, n, first);
}

static void run_indexer(const ParityCase *pc) {
    const IdxCase *ic = pc->arg;
    const char *G = pc->group;
    const Tol *tol = &pc->tol;
    IndexerShape s = {.B = ic->B, .T = ic->T, .t0 = 0, .W = ic->W, .S = ic->S, .o = ic->o, .HI = ic->HI, .dI = ic->dI,
                      .topk = ic->topk, .H = ic->H, .G = ic->G, .d = ic->d};
    s.nW = vis_n_windows(s.T, s.W, s.S, s.o);
    const size_t BT = (size_t)s.B * s.T, nsc = BT * s.nW, niq = BT * s.HI * s.dI, niw = BT * s.HI,
                 nik = (size_t)s.B * s.nW * s.dI, nq = BT * s.H * s.d, nck = (size_t)s.B * s.nW * s.G * s.d, nl = BT * s.H;
    float *hiq = hrand(niq, 1, 0), *hiw = hrand(niw, 1, 0), *hik = hrand(nik, 1, 0), *hq = hrand(nq, 0.5, 0),
          *hck = hrand(nck, 0.5, 0), *hl = hrand(nl, 1, 2), *hz = hrand(nsc > niq ? nsc : niq, 1, 0);
    Pair iq = pa(hiq, niq), iw = pa(hiw, niw), ik = pa(hik, nik), q = pa(hq, nq), ck = pa(hck, nck), lse = pf(hl, nl);
    Pair score = pf(hz, nsc);
    char w[224];
    /* scores */
    CPU->indexer_scores(CPU->ctx, &s, score.c, iq.c, iw.c, ik.c);
    GPU->indexer_scores(GPU->ctx, &s, score.g, iq.g, iw.g, ik.g);
    float *sc = get_f32(CPU, score.c, nsc), *sg = get_f32(GPU, score.g, nsc);
    {
        size_t inf_diff = 0;
        double mref = 0, merr = 0;
        for (size_t i = 0; i < nsc; i++) {
            if (isinf(sc[i]) || isinf(sg[i])) { inf_diff += !(isinf(sc[i]) && isinf(sg[i]) && sc[i] < 0 && sg[i] < 0); continue; }
            if (fabs(sc[i]) > mref) mref = fabs(sc[i]);
            if (!(fabs((double)sg[i] - sc[i]) <= merr)) merr = fabs((double)sg[i] - sc[i]);   /* NaN counts */
        }
        const double e = mref > 0 ? merr / mref : merr;
        snprintf(w, sizeof w, PARITY_NAME_PREFIX "%s: %s scores", G, ic->name);
        check(inf_diff == 0 && e <= tol->out, w, "normalised max error %.3g (tolerance %.3g), %zu entries -inf on one side only",
              e, tol->out, inf_diff);
    }
    /* select, on the CPU's scores (coarse in the ties cases) */
    if (ic->ties)
        for (size_t i = 0; i < nsc; i++) if (isfinite(sc[i])) sc[i] = floorf(sc[i] * 2.0f) * 0.5f;
    Pair score2 = pf(sc, nsc);
    uint8_t *selc = CPU->alloc(CPU->ctx, nsc), *selg = GPU->alloc(GPU->ctx, nsc);
    CPU->indexer_select(CPU->ctx, &s, selc, score2.c);
    GPU->indexer_select(GPU->ctx, &s, selg, score2.g);
    uint8_t *hsc = malloc(nsc), *hsg = malloc(nsc);
    CPU->download(CPU->ctx, hsc, selc, nsc);
    GPU->synchronize(GPU->ctx);
    GPU->download(GPU->ctx, hsg, selg, nsc);
    snprintf(w, sizeof w, "%s select (top-%d, lower j wins ties)", ic->name, s.topk);
    cmp_bytes(G, w, hsc, hsg, nsc);
    GPU->upload(GPU->ctx, selg, hsc, nsc);   /* the KL below reads the CPU's selection on both sides */
    /* the KL term: top-k set, then dense */
    for (int dense = 0; dense < 2; dense++) {
        Pair dscore = pf(hz, nsc);
        long cc = -1, cg = -2;
        const double klc = CPU->indexer_kl(CPU->ctx, &s, dscore.c, q.c, ck.c, lse.c, score2.c, dense ? NULL : selc, &cc);
        const double klg = GPU->indexer_kl(GPU->ctx, &s, dscore.g, q.g, ck.g, lse.g, score2.g, dense ? NULL : selg, &cg);
        const double rel = fabs(klg - klc) / fmax(fabs(klc), 1e-30);
        snprintf(w, sizeof w, PARITY_NAME_PREFIX "%s: %s kl%s sum and count", G, ic->name, dense ? " dense" : "");
        check(cc == cg && rel <= tol->aux && isfinite(klg), w, "KL %.9g vs CPU %.9g (relative %.3g, tolerance %.3g), count %ld vs %ld",
              klg, klc, rel, tol->aux, cg, cc);
        snprintf(w, sizeof w, "%s kl%s dscore", ic->name, dense ? " dense" : "");
        cmp_f32(G, w, dscore, nsc, tol->aux);
        if (!dense) {   /* the backward of the scores for this dscore (the CPU's on both sides) */
            float *hds = get_f32(CPU, dscore.c, nsc);
            Pair ds2 = pf(hds, nsc), diq = pa(hz, niq), diw = pa(hz, niw), dik = pa(hz, nik);
            CPU->indexer_scores_bwd(CPU->ctx, &s, diq.c, diw.c, dik.c, ds2.c, iq.c, iw.c, ik.c, 0.7f);
            GPU->indexer_scores_bwd(GPU->ctx, &s, diq.g, diw.g, dik.g, ds2.g, iq.g, iw.g, ik.g, 0.7f);
            snprintf(w, sizeof w, "%s scores_bwd diq", ic->name); cmp_act(G, w, diq, niq, tol->grad);
            snprintf(w, sizeof w, "%s scores_bwd diw", ic->name); cmp_act(G, w, diw, niw, tol->grad);
            snprintf(w, sizeof w, "%s scores_bwd dik", ic->name); cmp_act(G, w, dik, nik, tol->grad);
            /* determinism: the GPU's four ops again, the same bits */
            float *o1[5], *o2[5];
            double k1 = 0, k2 = 0;
            for (int rep = 0; rep < 2; rep++) {
                float **o = rep ? o2 : o1;
                long c;
                GPU->indexer_scores(GPU->ctx, &s, score.g, iq.g, iw.g, ik.g);
                GPU->indexer_select(GPU->ctx, &s, selg, score.g);
                double kl = GPU->indexer_kl(GPU->ctx, &s, dscore.g, q.g, ck.g, lse.g, score.g, selg, &c);
                GPU->indexer_scores_bwd(GPU->ctx, &s, diq.g, diw.g, dik.g, dscore.g, iq.g, iw.g, ik.g, 0.7f);
                if (rep) k2 = kl; else k1 = kl;
                o[0] = get_f32(GPU, score.g, nsc); o[1] = get_f32(GPU, dscore.g, nsc);
                o[2] = get_act(GPU, diq.g, niq); o[3] = get_act(GPU, diw.g, niw); o[4] = get_act(GPU, dik.g, nik);
            }
            const size_t sz[5] = {nsc, nsc, niq, niw, nik};
            int same = k1 == k2;
            for (int i = 0; i < 5; i++) { same &= !memcmp(o1[i], o2[i], sizeof(float) * sz[i]); free(o1[i]); free(o2[i]); }
            snprintf(w, sizeof w, PARITY_NAME_PREFIX "%s: %s the GPU's ops twice give identical bits", G, ic->name);
            check(same, w, "scores, KL, dscore, diq, diw or dik differ between two runs");
            GPU->upload(GPU->ctx, selg, hsc, nsc);
            pfree(ds2); pfree(diq); pfree(diw); pfree(dik); free(hds);
        }
        pfree(dscore);
    }
    CPU->free(CPU->ctx, selc); GPU->free(GPU->ctx, selg);
    pfree(iq); pfree(iw); pfree(ik); pfree(q); pfree(ck); pfree(lse); pfree(score); pfree(score2);
    free(hiq); free(hiw); free(hik); free(hq); free(hck); free(hl); free(hz); free(sc); free(sg); free(hsc); free(hsg);
}

/* ---------------------------------------------------------------- */
/* learned chunk boundaries (docs/spec.md §6.5; kernels/cuda/cuda_boundaries.cu). One case runs the whole
 * chain on the same inputs: boundary_decide (prob, prob_sg: out; flags, entry ends and counts: exact, with
 * every score at least BD_MARGIN from 1/2 so the fp32 dot products' summation order cannot flip one, and
 * sequence 0's first W scores below 1/2 so that a forced boundary exists whatever the draw; the
 * held form leaves prob_sg alone), then, on the CPU's entry ends, chunk_compressor_fwd (entry: out; alpha,
 * payload, pn_rstd: aux) and _bwd from the CPU's forward state (da: grad; weight gradients: wgrad),
 * boundary_scale and _bwd with sg(p) != p (factor c_j != 1: x, dx grad; dprob wgrad) and boundary_bwd
 * (dq, dw_bd, dc_bd: wgrad; da: grad). BD_DETERMINISM: the GPU's backward ops twice, identical bits. */
typedef struct { const char *name; int B, T, D, G, d, W, S, gate, bias, post, maps; float c_bd; } BdCase;
enum { BD_PARITY = 0, BD_DETERMINISM = 1 };
#define BD_MARGIN 1e-3

static void run_boundaries(const ParityCase *pc) {
    const BdCase *bc = pc->arg;
    const Tol *t = &pc->tol;
    const char *G = pc->group;
    char w[192];
    CompShape s;
    memset(&s, 0, sizeof s);
    s.B = bc->B; s.T = bc->T; s.D = bc->D; s.G = bc->G; s.d = bc->d; s.window = bc->W; s.stride = bc->S;
    s.n_windows = bc->T;                         /* one entry row per token (n_b <= T) */
    s.gate = bc->gate; s.channels = bc->gate == GATE_VECTOR ? bc->d : 1;
    s.n_maps = bc->maps == 2 ? 1 : bc->W;
    s.eps = 1e-6f;
    const int B = s.B, T = s.T, D = s.D, c = s.channels, M = s.n_maps, W = s.window, gated = bc->gate != GATE_UNIFORM;
    const size_t N = (size_t)B * T, na = N * D, nt = N * s.G, ne = N * s.G * s.d;
    const size_t ngw = (size_t)s.G * M * c * D, ngb = (size_t)s.G * W * c, npw = (size_t)s.G * M * s.d * D;
    float *ha = hrand(na, 1, 0), *hw = hrand(D, 2.0 / sqrt((double)D), 0), hc = bfr(bc->c_bd);
    /* scores away from 1/2 on both backends (the same bf16 inputs: only the summation order differs) */
    int kmax = 0;                                /* the largest weight moves a score off 1/2 */
    for (int k = 1; k < D; k++) if (fabsf(hw[k]) > fabsf(hw[kmax])) kmax = k;
    for (size_t n = 0; n < N; n++) {
        double q = hc;
        for (int k = 0; k < D; k++) q += (double)hw[k] * ha[n * D + k];
        if (fabs(q) < 0.02) ha[n * D + kmax] = bfr(ha[n * D + kmax] + (q >= 0 ? 0.1f : -0.1f) / hw[kmax]);
        if (n < (size_t)W && q > -0.5)      /* sequence 0's first W scores below 1/2: a forced boundary at W - 1 */
            ha[n * D + kmax] = bfr(ha[n * D + kmax] + (float)((-1.0 - q) / hw[kmax]));
    }
    float *hgw = hrand(ngw, 0.3, 0), *hgb = hrand(ngb, 0.5, 0), *hpw = hrand(npw, 1.0 / sqrt((double)D), 0),
          *hpost = hrand(s.d, 0.2, 1.0), *hde = hrand(ne, 1, 0), *hda = hrand(na, 0.1, 0), *hdgw = hrand(ngw, 0.1, 0),
          *hdgb = hrand(ngb, 0.1, 0), *hdpw = hrand(npw, 0.1, 0), *hdpost = hrand(s.d, 0.1, 0), *hdp = hrand(N, 0.5, 0),
          *hdx = hrand(ne, 1, 0), *hdw = hrand(D, 0.1, 0), *hdc = hrand(1, 0.1, 0), *hnoise = hrand(N, 0.05, 0),
          *hz = calloc(ne * (c > 1 ? c : 1) + N + 1, sizeof(float));
    Pair a = pa(ha, na), wbd = pa(hw, D), cbd = pa(&hc, 1);
    Pair prob = pf(hz, N), psg = pf(hz, N), flag = {CPU->alloc(CPU->ctx, N), GPU->alloc(GPU->ctx, N)};
    Pair ends = pi((const int32_t *)hz, N), count = pi((const int32_t *)hz, B);
    Pair gw = gated ? pa(hgw, ngw) : pnull(), gb = gated && bc->bias ? pa(hgb, ngb) : pnull(), pw = pa(hpw, npw),
         post = bc->post ? pa(hpost, s.d) : pnull();
    CPU->boundary_decide(CPU->ctx, &s, prob.c, psg.c, flag.c, ends.c, count.c, a.c, wbd.c, cbd.c, 0);
    GPU->boundary_decide(GPU->ctx, &s, prob.g, psg.g, flag.g, ends.g, count.g, a.g, wbd.g, cbd.g, 0);
    float *hprob = get_f32(CPU, prob.c, N);
    int32_t *hends = malloc(N * sizeof(int32_t)), *hcount = malloc(B * sizeof(int32_t));
    CPU->download(CPU->ctx, hends, ends.c, N * sizeof(int32_t));
    CPU->download(CPU->ctx, hcount, count.c, B * sizeof(int32_t));
    double margin = 1.0;
    long n_entries = 0, n_forced = 0;
    for (size_t n = 0; n < N; n++) margin = fmin(margin, fabs(hprob[n] - 0.5));
    for (int b = 0; b < B; b++) {
        n_entries += hcount[b];
        for (int j = 0; j < hcount[b]; j++) n_forced += hprob[(size_t)b * T + hends[(size_t)b * T + j]] < 0.5f;
    }
    snprintf(w, sizeof w, PARITY_NAME_PREFIX "%s: %s decide: scores away from 1/2%s", G, bc->name,
             pc->mode == BD_PARITY ? ", natural and forced boundaries" : "");
    const int want_both = pc->mode == BD_PARITY;   /* the parity rows cover both kinds of boundary */
    check(margin >= BD_MARGIN && (!want_both || (n_forced > 0 && n_forced < n_entries)), w,
          "min |p - 1/2| %.3g, %ld entries, %ld forced", margin, n_entries, n_forced);
    if (pc->mode == BD_PARITY) {
        snprintf(w, sizeof w, "%s decide prob", bc->name); cmp_f32(G, w, prob, N, 1e-5);
        snprintf(w, sizeof w, "%s decide prob_sg", bc->name); cmp_f32(G, w, psg, N, 1e-5);
        uint8_t *f1 = malloc(N), *f2 = malloc(N);
        int32_t *e2 = malloc(N * sizeof(int32_t)), *c2 = malloc(B * sizeof(int32_t));
        CPU->download(CPU->ctx, f1, flag.c, N);
        GPU->synchronize(GPU->ctx);
        GPU->download(GPU->ctx, f2, flag.g, N);
        GPU->download(GPU->ctx, e2, ends.g, N * sizeof(int32_t));
        GPU->download(GPU->ctx, c2, count.g, B * sizeof(int32_t));
        snprintf(w, sizeof w, "%s decide flags", bc->name); cmp_bytes(G, w, f1, f2, N);
        snprintf(w, sizeof w, "%s decide entry ends", bc->name); cmp_bytes(G, w, (uint8_t *)hends, (uint8_t *)e2, N * 4);
        snprintf(w, sizeof w, "%s decide entry counts", bc->name); cmp_bytes(G, w, (uint8_t *)hcount, (uint8_t *)c2, (size_t)B * 4);
        /* held: prob again, prob_sg (and the decisions) untouched */
        Pair prob2 = pf(hz, N), psg2 = pf(hnoise, N);
        CPU->boundary_decide(CPU->ctx, &s, prob2.c, psg2.c, flag.c, ends.c, count.c, a.c, wbd.c, cbd.c, 1);
        GPU->boundary_decide(GPU->ctx, &s, prob2.g, psg2.g, flag.g, ends.g, count.g, a.g, wbd.g, cbd.g, 1);
        snprintf(w, sizeof w, "%s decide held: prob", bc->name); cmp_f32(G, w, prob2, N, 1e-5);
        snprintf(w, sizeof w, "%s decide held: prob_sg untouched", bc->name); cmp_f32(G, w, psg2, N, 0);
        pfree(prob2); pfree(psg2);
        free(f1); free(f2); free(e2); free(c2);
    }
    s.entry_ends = hends;
    s.entry_count = hcount;
    Pair entry = pa(hz, ne), alpha = pf(hz, nt * c), payload = pa(hz, ne), pnr = pf(hz, nt);
    Pair da = pa(hda, na), dgw = gated ? pf(hdgw, ngw) : pnull(), dgb = gated && bc->bias ? pf(hdgb, ngb) : pnull(),
         dpw = pf(hdpw, npw), dpost = bc->post ? pf(hdpost, s.d) : pnull(), de = pa(hde, ne);
    /* sg(p) held at other values: c_j = 1 + p - sg(p) != 1 */
    float *hsg = malloc(N * sizeof(float));
    for (size_t n = 0; n < N; n++) hsg[n] = hprob[n] + hnoise[n];
    Pair psg_h = pf(hsg, N);
    CPU->chunk_compressor_fwd(CPU->ctx, &s, entry.c, alpha.c, payload.c, pnr.c, a.c, gw.c, gb.c, pw.c, post.c);
    GPU->chunk_compressor_fwd(GPU->ctx, &s, entry.g, alpha.g, payload.g, pnr.g, a.g, gw.g, gb.g, pw.g, post.g);
    /* the backward from the CPU's forward state on both sides */
    float *halpha = get_f32(CPU, alpha.c, nt * c), *hpay = get_act(CPU, payload.c, ne), *hpnr = get_f32(CPU, pnr.c, nt),
          *hent = get_act(CPU, entry.c, ne);
    for (size_t i = 0; i < ne; i++) { hpay[i] = bfr(hpay[i]); hent[i] = bfr(hent[i]); }
    Pair alpha2 = pf(halpha, nt * c), pay2 = pa(hpay, ne), pnr2 = pf(hpnr, nt), x = pa(hent, ne), dx = pa(hdx, ne);
    Pair dprob = pf(hdp, N), dwbd = pf(hdw, D), dcbd = pf(hdc, 1), da2 = pa(hda, na);
    if (pc->mode == BD_PARITY) {
        snprintf(w, sizeof w, "%s chunk fwd entry", bc->name); cmp_act(G, w, entry, ne, t->out);
        snprintf(w, sizeof w, "%s chunk fwd alpha", bc->name); cmp_f32(G, w, alpha, nt * c, t->aux);
        snprintf(w, sizeof w, "%s chunk fwd payload", bc->name); cmp_act(G, w, payload, ne, t->aux);
        if (bc->post) { snprintf(w, sizeof w, "%s chunk fwd pn_rstd", bc->name); cmp_f32(G, w, pnr, nt, t->aux); }
        CPU->chunk_compressor_bwd(CPU->ctx, &s, da.c, dgw.c, dgb.c, dpw.c, dpost.c, de.c, alpha2.c, pay2.c, pnr2.c, a.c, gw.c, pw.c, post.c);
        GPU->chunk_compressor_bwd(GPU->ctx, &s, da.g, dgw.g, dgb.g, dpw.g, dpost.g, de.g, alpha2.g, pay2.g, pnr2.g, a.g, gw.g, pw.g, post.g);
        snprintf(w, sizeof w, "%s chunk bwd da (+=)", bc->name); cmp_act(G, w, da, na, t->grad);
        snprintf(w, sizeof w, "%s chunk bwd dpayload_w (+=)", bc->name); cmp_f32(G, w, dpw, npw, t->wgrad);
        if (gated) { snprintf(w, sizeof w, "%s chunk bwd dgate_w (+=)", bc->name); cmp_f32(G, w, dgw, ngw, t->wgrad); }
        if (gated && bc->bias) { snprintf(w, sizeof w, "%s chunk bwd dgate_b (+=)", bc->name); cmp_f32(G, w, dgb, ngb, t->wgrad); }
        if (bc->post) { snprintf(w, sizeof w, "%s chunk bwd dpost_w (+=)", bc->name); cmp_f32(G, w, dpost, s.d, t->wgrad); }
        /* the straight-through factor on the CPU's entries */
        CPU->boundary_scale(CPU->ctx, &s, x.c, prob.c, psg_h.c);
        GPU->boundary_scale(GPU->ctx, &s, x.g, prob.g, psg_h.g);
        snprintf(w, sizeof w, "%s scale x", bc->name); cmp_act(G, w, x, ne, t->grad);
        float *hx = get_act(CPU, x.c, ne);
        for (size_t i = 0; i < ne; i++) hx[i] = bfr(hx[i]);
        Pair x2 = pa(hx, ne);
        CPU->boundary_scale_bwd(CPU->ctx, &s, dprob.c, dx.c, x2.c, prob.c, psg_h.c);
        GPU->boundary_scale_bwd(GPU->ctx, &s, dprob.g, dx.g, x2.g, prob.g, psg_h.g);
        snprintf(w, sizeof w, "%s scale_bwd dprob (+=)", bc->name); cmp_f32(G, w, dprob, N, t->wgrad);
        snprintf(w, sizeof w, "%s scale_bwd dx", bc->name); cmp_act(G, w, dx, ne, t->grad);
        pfree(x2); free(hx);
        /* the score's backward from the same dprob on both sides */
        Pair dq = pf(hdp, N);
        CPU->boundary_bwd(CPU->ctx, &s, da2.c, dwbd.c, dcbd.c, dq.c, prob.c, a.c, wbd.c, 0.37f);
        GPU->boundary_bwd(GPU->ctx, &s, da2.g, dwbd.g, dcbd.g, dq.g, prob.g, a.g, wbd.g, 0.37f);
        snprintf(w, sizeof w, "%s score bwd dq", bc->name); cmp_f32(G, w, dq, N, 1e-5);
        snprintf(w, sizeof w, "%s score bwd dw_bd (+=)", bc->name); cmp_f32(G, w, dwbd, D, t->wgrad);
        snprintf(w, sizeof w, "%s score bwd dc_bd (+=)", bc->name); cmp_f32(G, w, dcbd, 1, 1e-4);
        snprintf(w, sizeof w, "%s score bwd da (+=)", bc->name); cmp_act(G, w, da2, na, t->grad);
        pfree(dq);
    } else {                /* every backward op twice on the GPU from identical state: identical bits */
        size_t nb[6] = {na * GPU->act_bytes, npw * sizeof(float), ngw * sizeof(float), N * sizeof(float), ne * GPU->act_bytes,
                        D * sizeof(float)};
        unsigned char *r[2][6];
        for (int rep = 0; rep < 2; rep++) {
            Pair da_r = pa(hda, na), dpw_r = pf(hdpw, npw), dgw_r = gated ? pf(hdgw, ngw) : pf(hz, 1), dp_r = pf(hdp, N),
                 dx_r = pa(hdx, ne), dw_r = pf(hdw, D), dc_r = pf(hdc, 1);
            GPU->chunk_compressor_bwd(GPU->ctx, &s, da_r.g, gated ? dgw_r.g : NULL, NULL, dpw_r.g, NULL, de.g, alpha.g, payload.g,
                                      pnr.g, a.g, gw.g, pw.g, post.g);
            GPU->boundary_scale_bwd(GPU->ctx, &s, dp_r.g, dx_r.g, entry.g, prob.g, psg_h.g);
            GPU->boundary_bwd(GPU->ctx, &s, da_r.g, dw_r.g, dc_r.g, dp_r.g, prob.g, a.g, wbd.g, 0.37f);
            GPU->synchronize(GPU->ctx);
            void *src[6] = {da_r.g, dpw_r.g, dgw_r.g, dp_r.g, dx_r.g, dw_r.g};
            for (int k = 0; k < 6; k++) {
                if (!gated && k == 2) nb[k] = 0;
                r[rep][k] = malloc(nb[k] + 1);
                if (nb[k]) GPU->download(GPU->ctx, r[rep][k], src[k], nb[k]);
            }
            pfree(da_r); pfree(dpw_r); pfree(dgw_r); pfree(dp_r); pfree(dx_r); pfree(dw_r); pfree(dc_r);
        }
        int same = 1;
        for (int k = 0; k < 6; k++) { same &= !memcmp(r[0][k], r[1][k], nb[k]); free(r[0][k]); free(r[1][k]); }
        snprintf(w, sizeof w, "cuda_parity_determinism: boundary backward ops twice give identical bits (%s)", bc->name);
        check(same, w, "results differ");
    }
    pfree(a); pfree(wbd); pfree(cbd); pfree(prob); pfree(psg); pfree(flag); pfree(ends); pfree(count); pfree(gw); pfree(gb);
    pfree(pw); pfree(post); pfree(entry); pfree(alpha); pfree(payload); pfree(pnr); pfree(da); pfree(dgw); pfree(dgb); pfree(dpw);
    pfree(dpost); pfree(de); pfree(psg_h); pfree(alpha2); pfree(pay2); pfree(pnr2); pfree(x); pfree(dx); pfree(dprob); pfree(dwbd);
    pfree(dcbd); pfree(da2);
    free(ha); free(hw); free(hgw); free(hgb); free(hpw); free(hpost); free(hde); free(hda); free(hdgw); free(hdgb); free(hdpw);
    free(hdpost); free(hdp); free(hdx); free(hdw); free(hdc); free(hnoise); free(hz); free(hprob); free(hends); free(hcount);
    free(hsg); free(halpha); free(hpay); free(hpnr); free(hent);
}

static const BdCase BD_CASES[] = {
    /* name                                  B  T   D   G  d   W  S  gate          bias post maps c_bd */
    {"learned scalar+bias W8 S4",            2, 40, 48, 2, 16, 8, 4, GATE_SCALAR,  1,   0,   0,   -1.0f},
    {"learned vector+bias post W6 S3",       2, 36, 32, 2, 16, 6, 3, GATE_VECTOR,  1,   1,   0,   -1.5f},
    {"learned uniform post W8 S4 G1",        1, 50, 32, 1, 16, 8, 4, GATE_UNIFORM, 0,   1,   0,   -1.0f},
    {"learned shared scalar no-bias W4 S2",  2, 30, 32, 2, 16, 4, 2, GATE_SCALAR,  0,   0,   2,   -1.0f},
};
static const BdCase DET_BD_CASE = {"learned vector+bias post W8 S4", 2, 64, 64, 2, 32, 8, 4, GATE_VECTOR, 1, 1, 0, -1.0f};

/* ---------------------------------------------------------------- */
/* THE TABLE. A full run executes the rows in this order (one random stream: see the header).
 * Tolerances per group (out, aux, grad, wgrad):
 *   elementwise  add swiglu_fwd | cast_params | swiglu_bwd dg du | -      (memory: copy zero copy_2d, exact)
 *   embedding    embedding_fwd | - | - | embedding_bwd dtable
 *   rmsnorm      out | rstd | din | dw     (rmsnorm_bwd_residual: fp32 dres and dw T_RES_F32, bit checks)
 *   matmul       out | - | din | dw
 *   rope         x | - | - | -
 *   attention    out | lse | dq dk dv dck dcv | dsink               (decode: out)
 *   compressor   entry | alpha payload pn_rstd | da | dgate_w dgate_b dpayload_w dpost_w
 *                (gate_coverage: per_seq | - | dalpha | -)
 *   classifier   losses | fraction of argmax rows that may differ (near-ties) | dx | demb
 *   optimizer    adamw_cast p m v | sumsq (relative) | - | -
 *                (owned step: adamw_cast p m v | loss_accumulate (relative) | working copy | -)
 *   determinism  bit-identical (no tolerances)
 *   indexer      scores | kl sum (relative) and dscore | diq diw dik | -   (select: exact) */
#define TOL(o, a, g, w) {o, a, g, w}
#define T_ELEM   TOL(1e-2, 5e-3, 1e-2, 0)
#define T_RMS    TOL(1e-2, 1e-4, 1.5e-2, 1e-2)
#define T_MM     TOL(1e-2, 0, 1.5e-2, 1.5e-2)
#define T_ATT    TOL(1.5e-2, 5e-3, 2.5e-2, 2e-2)
#define T_COMP   TOL(1.5e-2, 1e-2, 1.5e-2, 2e-2)
#define T_EXACT  TOL(0, 0, 0, 0)
/* bf16 logits (kernels/cuda/cuda_classifier.cu): rounding a logit l moves its probability by a
 * relative |l| 2^-9, so the gradients' normalised error is bounded by ~max|l| 2^-9 = 0.033 at
 * logit std 4 (max |l| ~17); measured 1.2e-2 .. 2.2e-2 depending on the draw. The tolerance is
 * that bound, not a measured value plus margin. */
#define T_CLS_BF16 TOL(5e-3, 0.05, 3.5e-2, 3.5e-2)
#define ATT_OPS  "attention_fwd attention_bwd"
#define ATT(i, m) {"attention", NULL, ATT_OPS, T_ATT, run_attention, {0}, &ATT_CASES[i], m}
#define COMP(i)   {"compressor", NULL, "compressor_fwd compressor_bwd", T_COMP, run_compressor, {0}, &COMP_CASES[i], COMP_PARITY}
#define COV(i)    {"compressor", NULL, "gate_coverage", TOL(1e-4, 0, 1e-4, 0), run_gate_coverage, {0}, &COMP_CASES[i], 0}
#define DEC(i, v) {"attention", v, "attention_decode", TOL(1.5e-2, 0, 0, 0), run_attention_decode, {0}, &DEC_CASES[i], 0}
#define ELEM_OPS "add swiglu_fwd swiglu_bwd cast_params"
/* the indexer (docs/spec.md §5.4): scores fp32 from the same bf16 inputs in the CPU's summation
 * order (only FMA contraction differs): 1e-5; the KL's P_j and sums are fp64 on both sides, P kept
 * as fp32 on the GPU (2^-24 relative): 1e-5; diq diw dik are bf16 outputs of fp32 sums: the
 * rounding alone is 2^-9 of a value, 1e-2 of the largest leaves room for the sums' order */
#define IDX_OPS "indexer_scores indexer_select indexer_kl indexer_scores_bwd"
#define IDX(i) {"indexer", NULL, IDX_OPS, TOL(1e-5, 1e-5, 1e-2, 0), run_indexer, {0}, &IDX_CASES[i], 0}
/* learned chunk boundaries (docs/spec.md §6.5): the compressor's tolerances (prob, dq: 1e-5; decisions exact) */
#define BD_OPS "boundary_decide chunk_compressor_fwd chunk_compressor_bwd boundary_scale boundary_scale_bwd boundary_bwd"
#define BD(i) {"boundaries", NULL, BD_OPS, T_COMP, run_boundaries, {0}, &BD_CASES[i], BD_PARITY}

static const ParityCase CASES[] = {
    /* group        variant (NULL: the row's name)  ops                                  tolerances  run  shape  arg  mode */
    {"elementwise", "n=1001", ELEM_OPS, T_ELEM, run_elementwise, {1001}, NULL, 0},
    {"elementwise", "n=4096", ELEM_OPS, T_ELEM, run_elementwise, {4096}, NULL, 0},
    {"embedding", "N=300 D=40 V=50", "embedding_fwd embedding_bwd", TOL(1e-6, 0, 0, 1e-5), run_embedding, {300, 40, 50}, NULL, 0},
    {"rmsnorm", "[50,96]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {50, 96}, NULL, 0},
    {"rmsnorm", "[300,128]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {300, 128}, NULL, 0},
    {"rmsnorm", "[7,33]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {7, 33}, NULL, 0},
    /* the fused backward's shapes: 32 lanes x V = 1..4 vectors per row; 8 and 2 lanes per row */
    {"rmsnorm", "[90,1024]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {90, 1024}, NULL, 0},
    {"rmsnorm", "[45,768]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {45, 768}, NULL, 0},
    {"rmsnorm", "[33,512]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {33, 512}, NULL, 0},
    {"rmsnorm", "[1100,256]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {1100, 256}, NULL, 0},
    {"rmsnorm", "[77,64]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {77, 64}, NULL, 0},
    {"rmsnorm", "[5,16]", "rmsnorm_fwd rmsnorm_bwd rmsnorm_bwd_residual", T_RMS, run_rmsnorm, {5, 16}, NULL, 0},
    {"matmul", "67x96x80", "matmul_fwd matmul_bwd", T_MM, run_matmul, {67, 96, 80}, NULL, 0},
    {"matmul", "33x50x24", "matmul_fwd matmul_bwd", T_MM, run_matmul, {33, 50, 24}, NULL, 0},
    {"matmul", "256x384x512", "matmul_fwd matmul_bwd", T_MM, run_matmul, {256, 384, 512}, NULL, 0},
    {"rope", "r=32 inverse=0", "rope", TOL(1e-2, 0, 0, 0), run_rope, {32, 0}, NULL, 0},
    {"rope", "r=32 inverse=1", "rope", TOL(1e-2, 0, 0, 0), run_rope, {32, 1}, NULL, 0},
    {"rope", "r=16 inverse=0", "rope", TOL(1e-2, 0, 0, 0), run_rope, {16, 0}, NULL, 0},
    {"rope", "r=16 inverse=1", "rope", TOL(1e-2, 0, 0, 0), run_rope, {16, 1}, NULL, 0},
    {"rope", "r=24 d=36 inverse=1", "rope", TOL(1e-2, 0, 0, 0), run_rope, {24, 1, 36}, NULL, 0},
    {"rope", "r=10 d=32 inverse=0", "rope", TOL(1e-2, 0, 0, 0), run_rope, {10, 0, 32}, NULL, 0},
    {"rope", "r=6 d=38 inverse=1", "rope", TOL(1e-2, 0, 0, 0), run_rope, {6, 1, 38}, NULL, 0},
    ATT(0, ATT_CUSTOM), ATT(0, ATT_DEFAULT), ATT(0, ATT_CUDNN_BWD),
    ATT(1, ATT_PLAIN),
    ATT(2, ATT_CUSTOM), ATT(2, ATT_DEFAULT), ATT(2, ATT_CUDNN_BWD),
    ATT(3, ATT_PLAIN), ATT(4, ATT_PLAIN), ATT(5, ATT_PLAIN), ATT(6, ATT_PLAIN), ATT(7, ATT_PLAIN), ATT(8, ATT_PLAIN),
    ATT(9, ATT_PLAIN),
    ATT(10, ATT_CUSTOM), ATT(10, ATT_DEFAULT), ATT(10, ATT_CUDNN_BWD),
    ATT(3, ATT_NO_ENTRY_GRADS),
    ATT(14, ATT_PLAIN), ATT(15, ATT_PLAIN),
    COMP(0), COMP(1), COMP(2), COMP(3), COMP(4), COMP(5), COMP(6), COMP(7), COMP(8), COMP(9), COMP(10), COMP(11),
    {"classifier", "N=37 D=64 V=1000", "classifier logits_argmax", TOL(1e-2, 0.05, 2e-2, 2e-2), run_classifier, {37, 64, 1000}, NULL, 0},
    /* more rows than one chunk of the CUDA backend */
    {"classifier", "N=500 D=32 V=151936", "classifier logits_argmax", TOL(1e-2, 0.05, 2e-2, 2e-2), run_classifier, {500, 32, 151936}, NULL, 0},
    {"optimizer", "n=100003", "adamw_cast sumsq", TOL(1e-6, 1e-9, 0, 0), run_optimizer, {100003}, NULL, 0},
    {"determinism", "attention bwd B2 T300 W8 S4 sink", "attention_fwd attention_bwd", T_EXACT, run_determinism_attention, {0}, NULL, 0},
    {"determinism", "embedding bwd N=4096 D=64 V=17", "embedding_bwd", T_EXACT, run_determinism_embedding, {4096, 64, 17}, NULL, 0},
    {"determinism", NULL, "compressor_fwd compressor_bwd", T_EXACT, run_compressor, {0}, &DET_COMP_CASE, COMP_DETERMINISM},
    /* added with the table (after the rows above, so their inputs stay what they were) */
    {"elementwise", "memory n=1001", "copy zero", T_EXACT, run_memory, {1001}, NULL, 0},
    DEC(0, "decode H4 G2 d64 entries10 ring16 wrapped sink"), DEC(1, "decode H2 G1 d128 raw3 only"),
    DEC(2, "decode H16 G8 d128 entries200 ring16 sink"), DEC(3, "decode H6 G3 d36 entries33 ring4 (unaligned)"),
    COV(0), COV(3), COV(7),
    /* added with the owned optimizer step */
    {"optimizer", "owned step n=100003", "adamw_cast loss_accumulate", TOL(1e-6, 1e-12, 4e-3, 0), run_owned_step, {100003}, NULL, 0},
    /* added with staggered decoding (per-head views of the cache) */
    DEC(4, "decode H16 G8 d64 staggered tail sink"), DEC(5, "decode H8 G4 d32 staggered W4/S2 tail"),
    DEC(6, "decode H6 G3 d36 staggered W5/S3 window sink"),
    /* added with the fused q/k/v projection (issue 18): split a [rows, 7+5+3] block and gather one back */
    {"elementwise", "copy_2d split 37x5 ld 15 -> 5", "copy_2d", T_EXACT, run_copy_2d, {37, 5, 15, 5}, NULL, 0},
    {"elementwise", "copy_2d gather 37x3 ld 3 -> 15", "copy_2d", T_EXACT, run_copy_2d, {37, 3, 3, 15}, NULL, 0},
    {"elementwise", "copy_2d q/k/v 37x(32+16+16) 16-byte", "copy_2d", T_EXACT, run_copy_2d_split, {37, 32, 16, 16}, NULL, 0},
    {"elementwise", "copy_2d q/k/v 9000x(16+8+8) rows past the grid", "copy_2d", T_EXACT, run_copy_2d_split, {9000, 16, 8, 8}, NULL, 0},
    {"elementwise", "copy_2d q/k/v 21x(12+8+8) offset 12", "copy_2d", T_EXACT, run_copy_2d_split, {21, 12, 8, 8}, NULL, 0},
    {"elementwise", "copy_2d q/k/v 19x(1040+264+264) 2 column blocks", "copy_2d", T_EXACT, run_copy_2d_split, {19, 1040, 264, 264}, NULL, 0},
    /* added with the split dK/dV backward (issue 39): shapes whose key tiles get several blocks */
    ATT(11, ATT_SPLIT), ATT(12, ATT_SPLIT),
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {GRID_STAGGERED}, &ATT_CASES[13], ATT_SPLIT},
    {"determinism", "attention bwd B2 T264 H8 G1 W8 S8 sink split dK/dV", "attention_fwd attention_bwd", T_EXACT,
     run_determinism_attention, {0}, &DET_ATT_SPLIT, 0},
    /* added with the large-chunk bf16-logit classifier (issue 39): a ragged V (not a multiple of the
     * 8-logit vector), 1 row in 7 ignored, logit std 4 (bf16 logits: errors measured ~2e-3 losses,
     * ~1.2e-2 dx and demb; they grow with the largest logit, see the file's header) in one chunk;
     * chunks of <= 192 rows (6: 5 x 192 + 40), in parity and twice for identical bits */
    {"classifier", "N=1024 D=256 V=32771 std 4", "classifier logits_argmax", T_CLS_BF16, run_classifier, {1024, 256, 32771, 4}, NULL, 0},
    {"classifier", "N=1000 D=64 V=12347 std 4 chunks <= 192 rows", "classifier logits_argmax", T_CLS_BF16, run_classifier,
     {1000, 64, 12347, 4}, NULL, 192},
    {"determinism", "classifier N=1000 D=128 V=8195 chunks <= 192 rows", "classifier", T_EXACT, run_determinism_classifier,
     {1000, 128, 8195, 4}, NULL, 192},
    /* added with the forward's O in fragments and its lazy rescale (issue 39): large scores */
    ATT(2, ATT_LARGE), ATT(3, ATT_LARGE), ATT(6, ATT_LARGE),
    /* the paper's shapes (issue 39), GPU runs only (is_paper_case; check.sh paper_parity selects
     * "T=4096"): attention W8/S8 window 16 with 1 and 8 KV heads and full attention (custom kernels
     * and the default route), the compressor at d_model 1024, the classifier at 4096 rows (T=4096,
     * B=1) of the Qwen3 vocabulary */
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {0}, &ATT_CASES[16], ATT_PLAIN},
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {0}, &ATT_CASES[17], ATT_PLAIN},
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {0}, &ATT_CASES[18], ATT_CUSTOM},
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {0}, &ATT_CASES[18], ATT_DEFAULT},
    {"compressor", NULL, "compressor_fwd compressor_bwd", T_COMP, run_compressor, {0}, &COMP_CASES[12], COMP_PARITY},
    {"compressor", NULL, "compressor_fwd compressor_bwd", T_COMP, run_compressor, {0}, &COMP_CASES[13], COMP_PARITY},
    {"classifier", "paper T=4096 N=4096 D=1024 V=151936", "classifier logits_argmax", T_CLS_BF16, run_classifier,
     {4096, 1024, 151936, 0}, NULL, 0},
    /* added with DeepSeek-V4's CSA geometry (negative o_base: partial first windows) */
    COMP(14), COMP(15), COMP(16), COMP(17), COMP(18), COMP(19), COV(14), COV(16), COV(18),
    {"determinism", NULL, "compressor_fwd compressor_bwd", T_EXACT, run_compressor, {0}, &DET_COMP_CASE_V4, COMP_DETERMINISM},
    /* added with the lightning indexer on CUDA (docs/spec.md §5.4): its four ops, and the attention
     * with a top-k entry_select on a window and a tail case (custom kernels: cuDNN takes no such mask) */
    IDX(0), IDX(1), IDX(2), IDX(3),
    ATT(3, ATT_SELECT), ATT(5, ATT_SELECT), ATT(6, ATT_SELECT),
    /* added with multi-rate strides on CUDA (model.head_strides, docs/spec.md §6.4) */
    ATT(19, ATT_PLAIN), ATT(20, ATT_PLAIN), ATT(21, ATT_PLAIN), ATT(19, ATT_SELECT),
    {"attention", NULL, ATT_OPS, T_ATT, run_attention, {GRID_STAGGERED}, &ATT_CASES[22], ATT_PLAIN},
    COMP(20), COMP(21), COMP(22), COV(20), COV(21),
    {"compressor", NULL, "compressor_fwd compressor_bwd", T_COMP, run_compressor, {GRID_STAGGERED}, &COMP_CASES[23], COMP_PARITY},
    {"compressor", NULL, "gate_coverage", TOL(1e-4, 0, 1e-4, 0), run_gate_coverage, {GRID_STAGGERED}, &COMP_CASES[23], 0},
    {"determinism", NULL, "compressor_fwd compressor_bwd", T_EXACT, run_compressor, {0}, &DET_COMP_CASE_MR, COMP_DETERMINISM},
    DEC(7, "decode H8 G4 d32 multirate 8,6,8,6 tail sink"), DEC(8, "decode H4 G2 d64 multirate 4,1 window"),
    DEC(9, "decode H4 G2 d32 multirate 6,3 staggered tail sink"),
    BD(0), BD(1), BD(2), BD(3),
    ATT(23, ATT_PLAIN), ATT(24, ATT_PLAIN), ATT(25, ATT_PLAIN), ATT(26, ATT_SPLIT), ATT(27, ATT_SPLIT),
    /* the products the custom kernels issue (the live-block skip; emulator only) */
    {"attention", "products window W8 S8 nloc16 H2 G1 d16", ATT_OPS, T_ATT, run_attention_products, {0}, &PROD_CASES[0], 1},
    {"attention", "products tail W8 S4 H4 G2 d32", ATT_OPS, T_ATT, run_attention_products, {0}, &PROD_CASES[1], 0},
    {"attention", "products full T=200 H2 G1 d16", ATT_OPS, T_ATT, run_attention_products, {0}, &PROD_CASES[2], 0},
    DEC(10, "decode learned H4 G2 d32 tail sink"), DEC(11, "decode learned H6 G3 d36 window"),
    {"determinism", NULL, BD_OPS, T_EXACT, run_boundaries, {0}, &DET_BD_CASE, BD_DETERMINISM},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Ops of kernels/ops.def that need no case of their own, and why. */
static const char *const EXEMPT[] = {
    /* every case's inputs and results pass through these (parity_harness.h put_* / get_*, the
     * bit comparisons of the determinism cases): a broken one fails every case */
    "alloc", "free", "upload", "download", "synchronize", "upload_act", "download_act",
    /* an option, no computation: its effect (the custom attention backward) is what the
     * determinism cases check */
    "set_deterministic",
};

/* the case's id "group/variant" (the variant defaults to the name of its AttCase / CompCase row) */
static void case_id(const ParityCase *pc, char *buf, size_t len) {
    if (pc->variant) { snprintf(buf, len, "%s/%s", pc->group, pc->variant); return; }
    const char *name = *(const char *const *)pc->arg;   /* AttCase, CompCase and BdCase start with name */
    snprintf(buf, len, "%s/%s%s%s", pc->group, pc->run == run_gate_coverage ? "gate_coverage " : "", name,
             pc->run == run_attention ? ATT_SUFFIX[pc->mode] : pc->mode == COMP_DETERMINISM ? " bwd twice" : "");   /* BD_DETERMINISM too */
}

/* The paper's shapes (T = 4096, d_model 1024, 151,936 logits a row: ids "GROUP/paper ..."): they run
 * only when a pattern selects them (tests/gpu/check.sh's paper_parity phase, "T=4096"), never in
 * the default run, where the emulator would take hours on them. */
static int is_paper_case(const ParityCase *pc) {
    char id[256];
    case_id(pc, id, sizeof id);
    return strstr(id, "/paper ") != NULL;
}

/* 1 when the space-separated list has the word */
static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
    return 0;
}

static int case_matches(const ParityCase *pc, const char *pat) {
    char id[256];
    case_id(pc, id, sizeof id);
    return fnmatch(pat, id, 0) == 0 || strstr(id, pat) != NULL || has_word(pc->ops, pat);
}

/* every op of kernels/ops.def has a case or an exemption; every op a case names exists */
static void check_coverage(void) {
    static const char *const OPS[] = {
#define OP(ret, name, params, args) #name,
#include "kernels/ops.def"
    };
    const int n_ops = (int)(sizeof OPS / sizeof OPS[0]), n_ex = (int)(sizeof EXEMPT / sizeof EXEMPT[0]);
    char missing[1024] = "", unknown[1024] = "";
    int n_missing = 0;
    for (int o = 0; o < n_ops; o++) {
        int found = 0;
        for (int c = 0; c < N_CASES && !found; c++) found = has_word(CASES[c].ops, OPS[o]);
        for (int e = 0; e < n_ex && !found; e++) found = !strcmp(EXEMPT[e], OPS[o]);
        if (!found) {
            n_missing++;
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s", OPS[o]);
        }
    }
    check(!n_missing, "cuda_parity_coverage: every op of kernels/ops.def has a case or an exemption",
          "%d of %d ops have no case in tests/gpu/test_cuda_parity.c CASES (nor an EXEMPT entry):%s", n_missing, n_ops,
          missing);
    for (int c = 0; c < N_CASES; c++) {
        char ops[256];
        snprintf(ops, sizeof ops, "%s", CASES[c].ops);
        for (char *w = strtok(ops, " "); w; w = strtok(NULL, " ")) {
            int found = 0;
            for (int o = 0; o < n_ops && !found; o++) found = !strcmp(OPS[o], w);
            if (!found && !has_word(unknown, w))
                snprintf(unknown + strlen(unknown), sizeof unknown - strlen(unknown), " %s", w);
        }
    }
    check(!*unknown, "cuda_parity_coverage: every op a case names is in kernels/ops.def", "unknown ops:%s", unknown);
}

static void usage(FILE *f) {
    fprintf(f, "usage: test_cuda_parity [--list] [PATTERN ...]\n"
               "  runs the op parity cases whose id (group/variant, see --list) matches a PATTERN (shell glob\n"
               "  or substring) or which exercise the op PATTERN; all of them without a PATTERN. The pattern\n"
               "  'coverage' selects the op-coverage check (which also runs in every full run with a GPU).\n");
}

int main(int argc, char **argv) {
    int list = 0, n_pat = 0;
    const char **pats = calloc((size_t)argc, sizeof *pats);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-') { fprintf(stderr, "test_cuda_parity: unknown option %s\n", argv[i]); usage(stderr); return 2; }
        else pats[n_pat++] = argv[i];
    }
    int sel[N_CASES], n_sel = 0, coverage = n_pat == 0;
    for (int c = 0; c < N_CASES; c++) {
        sel[c] = n_pat == 0 && !is_paper_case(&CASES[c]);
        for (int p = 0; p < n_pat && !sel[c]; p++) sel[c] = case_matches(&CASES[c], pats[p]);
        n_sel += sel[c];
    }
    for (int p = 0; p < n_pat; p++) coverage |= strstr("coverage", pats[p]) != NULL || fnmatch(pats[p], "coverage", 0) == 0;
    if (n_pat && !n_sel && !coverage) {
        fprintf(stderr, "test_cuda_parity: no case matches the pattern(s) (see --list)\n");
        return 2;
    }
    if (list) {
        for (int c = 0; c < N_CASES; c++) {
            if (!sel[c]) continue;
            char id[256];
            case_id(&CASES[c], id, sizeof id);
            const Tol *t = &CASES[c].tol;
            printf("%-58s ops: %-40s tol out=%g aux=%g grad=%g wgrad=%g\n", id, CASES[c].ops, t->out, t->aux, t->grad, t->wgrad);
        }
        free(pats);
        return 0;
    }
    char err[ERR_LEN] = "";
    CPU = backend_cpu(0);
#ifdef PHASELAB_CUDA
    GPU = backend_cuda(0, err);
    const char *why = "no GPU";
#else
    GPU = NULL;
    const char *why = "no GPU (built without CUDA)";
#endif
    if (!GPU) {   /* one skip line per group of the selected cases, in table order */
        for (int c = 0; c < N_CASES; c++) {
            int first = sel[c];
            for (int e = 0; e < c && first; e++) first = !(sel[e] && !strcmp(CASES[e].group, CASES[c].group));
            if (!first) continue;
            char name[64];
            snprintf(name, sizeof name, "cuda_parity_%s", CASES[c].group);
            check_skip(name, why);
        }
        if (*err) fprintf(stderr, "(%s)\n", err);
    } else {
        for (int c = 0; c < N_CASES; c++)
            if (sel[c]) CASES[c].run(&CASES[c]);
        /* (with the cases only: a run without a GPU stays all skips, which tests/gpu/check.sh
         * counts as a failure on a GPU machine; make test runs it in tests/cuemu) */
        if (coverage) check_coverage();
    }
    free(pats);
    return check_exit_code();
}
