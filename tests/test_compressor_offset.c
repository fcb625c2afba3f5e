/* The CPU compressor with a negative static grid offset (docs/spec.md §6.1, §5.4: DeepSeek-V4's CSA
 * geometry o_base = S - W, partial first windows) against an independent double-precision loop.
 *
 * The reference enumerates, for window j of KV head g in sequence b, the positions p = o + jS + i
 * (i = 0..W-1) and keeps the slots with p >= 0 (present); masked slots (p < 0) have alpha = 0 and
 * payload 0; the gate softmax runs per channel over the present slots (uniform gates: 1 / #present);
 * map m(i) = i (paper), i < S ? 0 : 1 (deepseek), 0 (shared); post-norm p' = p w / sqrt(mean p^2 + eps);
 * E = sum over present i of alpha p'. Windows exist while o + jS + W - 1 <= T - 1 (counted here).
 *   - forward: entry, alpha, payload and the post-norm's pn_rstd = 1 / sqrt(mean p^2 + eps) of cpu
 *     compressor_fwd equal the reference (1e-5 relative); every output buffer starts as garbage (7),
 *     and on the masked slots alpha, payload and pn_rstd are exactly 0;
 *   - backward: for L = sum dE . E (random dE), the directional derivatives of cpu compressor_bwd's
 *     da, dgate_w, dgate_b, dpayload_w, dpost_w along random unit directions equal central
 *     differences of the double reference (2e-3 relative): finite differences, not the code's output.
 * Offsets o_base = -4 (V4, W8/S4 deepseek), 1 - W (the lowest), and -7 with S = 2 (several partial
 * windows), with every gate kind and map kind, post-norm on and off, G = 2 heads, B = 2 sequences,
 * each at T = 23 (not a multiple of any S) and T = 24 (a multiple of every S: nW S = T, the case in
 * which sequence b+1's window 0 starts one stride after sequence b's last window, so one batched
 * GEMM over all rows would read sequence b's tail into b+1's masked slots; the CPU keeps one row
 * block per sequence when o < 0). To see such a read, the positions of a that no window pools (the
 * tail past the last window's end, present at T = 24 when o < S - W) are NaN in the float input:
 * the reference never reads them, and every output and gradient must stay finite (a masked slot's
 * dp = 0 times NaN would not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

typedef struct { const char *name; int W, S, base, gate, maps, bias, post; } OffCase;
static const OffCase CASES[] = {
    /* name                                       W  S  base gate          maps(0 paper,1 deepseek,2 shared) bias post */
    {"V4 csa: deepseek vector+bias W8 S4 o -4",    8, 4, -4, GATE_VECTOR,  1, 1, 0},
    {"deepseek scalar+bias post-norm W8 S4 o -4",  8, 4, -4, GATE_SCALAR,  1, 1, 1},
    {"paper scalar+bias W8 S4 o 1-W = -7",         8, 4, -7, GATE_SCALAR,  0, 1, 0},
    {"shared vector post-norm W6 S3 o 1-W = -5",   6, 3, -5, GATE_VECTOR,  2, 1, 1},
    {"paper vector no-bias W8 S2 o -7",            8, 2, -7, GATE_VECTOR,  0, 0, 0},
    {"uniform post-norm W5 S2 o 1-W = -4",         5, 2, -4, GATE_UNIFORM, 0, 0, 1},
};

enum { B = 2, D = 10, G = 2, DH = 6 };
static int T;            /* sequence length of the case being run (23, 24) */

typedef struct {
    const OffCase *oc;
    int nW, c, M;
    double eps;
} Ref;

static int map_of(const Ref *r, int i) {
    return r->oc->maps == 0 ? i : r->oc->maps == 1 ? (i < r->oc->S ? 0 : 1) : 0;
}

/* E [B, nW, G, DH], alpha [B, nW, G, W, c], payload [B, nW, G, W, DH], rstd [B, nW, G, W] (the
 * post-norm's 1 / sqrt(mean p^2 + eps), 0 on masked slots; any may be NULL) */
static void ref_forward(const Ref *r, const double *a, const double *gw, const double *gb, const double *pw,
                        const double *post, double *E, double *alpha, double *payload, double *rstd) {
    const int W = r->oc->W, S = r->oc->S, c = r->c, M = r->M;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < r->nW; j++)
            for (int g = 0; g < G; g++) {
                double s[16][DH], p[16][DH], al[16][DH];
                int present = 0;
                for (int i = 0; i < W; i++) {
                    const int pos = r->oc->base + j * S + i, m = map_of(r, i);
                    for (int x = 0; x < DH; x++) { p[i][x] = 0; s[i][x] = 0; al[i][x] = 0; }
                    if (pos < 0) continue;
                    present++;
                    const double *ap = a + ((size_t)b * T + pos) * D;
                    for (int x = 0; x < DH; x++) {
                        double acc = 0;
                        for (int k = 0; k < D; k++) acc += pw[(((size_t)g * M + m) * DH + x) * D + k] * ap[k];
                        p[i][x] = acc;
                    }
                    if (r->oc->gate != GATE_UNIFORM)
                        for (int ch = 0; ch < c; ch++) {
                            double acc = gb ? gb[((size_t)g * W + i) * c + ch] : 0;
                            for (int k = 0; k < D; k++) acc += gw[(((size_t)g * M + m) * c + ch) * D + k] * ap[k];
                            s[i][ch] = acc;
                        }
                }
                for (int ch = 0; ch < c; ch++) {
                    if (r->oc->gate == GATE_UNIFORM) {
                        for (int i = 0; i < W; i++) al[i][ch] = r->oc->base + j * S + i >= 0 ? 1.0 / present : 0;
                        continue;
                    }
                    double mx = -1e300, sum = 0;
                    for (int i = 0; i < W; i++) if (r->oc->base + j * S + i >= 0 && s[i][ch] > mx) mx = s[i][ch];
                    for (int i = 0; i < W; i++) if (r->oc->base + j * S + i >= 0) sum += exp(s[i][ch] - mx);
                    for (int i = 0; i < W; i++) al[i][ch] = r->oc->base + j * S + i >= 0 ? exp(s[i][ch] - mx) / sum : 0;
                }
                const size_t row = ((size_t)b * r->nW + j) * G + g;
                if (alpha) for (int i = 0; i < W; i++) for (int ch = 0; ch < c; ch++) alpha[(row * W + i) * c + ch] = al[i][ch];
                if (payload) for (int i = 0; i < W; i++) for (int x = 0; x < DH; x++) payload[(row * W + i) * DH + x] = p[i][x];
                if (rstd)
                    for (int i = 0; i < W; i++) {
                        double ss = 0;
                        for (int x = 0; x < DH; x++) ss += p[i][x] * p[i][x];
                        rstd[row * W + i] = r->oc->base + j * S + i >= 0 ? 1.0 / sqrt(ss / DH + r->eps) : 0;
                    }
                if (!E) continue;
                for (int x = 0; x < DH; x++) E[row * DH + x] = 0;
                for (int i = 0; i < W; i++) {
                    if (r->oc->base + j * S + i < 0) continue;
                    double scale = 1.0;
                    if (post) {
                        double ss = 0;
                        for (int x = 0; x < DH; x++) ss += p[i][x] * p[i][x];
                        scale = 1.0 / sqrt(ss / DH + r->eps);
                    }
                    for (int x = 0; x < DH; x++)
                        E[row * DH + x] += al[i][c == 1 ? 0 : x] * p[i][x] * scale * (post ? post[x] : 1.0);
                }
            }
}

static double objective(const Ref *r, const double *a, const double *gw, const double *gb, const double *pw,
                        const double *post, const double *dE, double *E) {
    ref_forward(r, a, gw, gb, pw, post, E, NULL, NULL, NULL);
    double L = 0;
    for (size_t x = 0; x < (size_t)B * r->nW * G * DH; x++) L += dE[x] * E[x];
    return L;
}

static void fill(uint64_t *s, float *f, double *d, size_t n, double std, double mean) {
    for (size_t i = 0; i < n; i++) { f[i] = (float)(mean + std * tu_normal(s)); d[i] = f[i]; }
}

int main(void) {
    const Backend *be = backend_cpu(2);
    uint64_t seed = 12345;
    static const int LENGTHS[] = {23, 24};
    for (size_t li = 0; li < sizeof LENGTHS / sizeof LENGTHS[0]; li++)
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        const OffCase *oc = &CASES[ci];
        T = LENGTHS[li];
        char cname[160];
        snprintf(cname, sizeof cname, "%s T %d", oc->name, T);
        Ref r = {.oc = oc, .c = oc->gate == GATE_VECTOR ? DH : 1, .M = oc->maps == 0 ? oc->W : oc->maps == 1 ? 2 : 1, .eps = 1e-6};
        r.nW = 0;
        while (oc->base + r.nW * oc->S + oc->W - 1 <= T - 1) r.nW++;      /* windows that exist, enumerated */
        const int W = oc->W, c = r.c, M = r.M, gated = oc->gate != GATE_UNIFORM;
        CompShape s = {.B = B, .T = T, .D = D, .G = G, .d = DH, .window = W, .stride = oc->S, .n_windows = r.nW,
                       .gate = oc->gate, .channels = c, .n_maps = M, .eps = (float)r.eps, .grid = GRID_ALIGNED,
                       .grid_base = oc->base};
        char name[400];
        snprintf(name, sizeof name, "compressor offset %s: %d windows (vis_n_windows)", cname, r.nW);
        check(vis_n_windows(T, W, oc->S, oc->base) == r.nW, name, "%d", vis_n_windows(T, W, oc->S, oc->base));
        const size_t na = (size_t)B * T * D, ngw = (size_t)G * M * c * D, ngb = (size_t)G * W * c, npw = (size_t)G * M * DH * D;
        const size_t ne = (size_t)B * r.nW * G * DH, nslot = (size_t)B * r.nW * G * W;
        float *a = malloc(na * 4), *gw = malloc(ngw * 4), *gb = malloc(ngb * 4), *pw = malloc(npw * 4), *post = malloc(DH * 4);
        double *ad = malloc(na * 8), *gwd = malloc(ngw * 8), *gbd = malloc(ngb * 8), *pwd = malloc(npw * 8), *postd = malloc(DH * 8);
        fill(&seed, a, ad, na, 1.0, 0);
        fill(&seed, gw, gwd, ngw, 0.5, 0);
        fill(&seed, gb, gbd, ngb, 0.7, 0);
        fill(&seed, pw, pwd, npw, 0.4, 0);
        fill(&seed, post, postd, DH, 0.2, 1.0);
        /* positions no window pools (past the last window's end e = o + (nW-1) S + W - 1): NaN in the
         * float input only; a read of them through a masked slot of the next sequence shows as NaN */
        const int last_end = oc->base + (r.nW - 1) * oc->S + W - 1;
        int n_poison = 0;
        for (int b = 0; b < B; b++)
            for (int t = last_end + 1; t < T; t++, n_poison++)
                for (int k = 0; k < D; k++) a[((size_t)b * T + t) * D + k] = NAN;
        /* garbage in the output buffers: masked slots must be written, not left */
        float *entry = malloc(ne * 4), *alpha = malloc(nslot * c * 4), *payload = malloc(nslot * DH * 4), *pnr = malloc(nslot * 4);
        for (size_t x = 0; x < ne; x++) entry[x] = 7.0f;
        for (size_t x = 0; x < nslot * c; x++) alpha[x] = 7.0f;
        for (size_t x = 0; x < nslot * DH; x++) payload[x] = 7.0f;
        for (size_t x = 0; x < nslot; x++) pnr[x] = 7.0f;
        const float *gwp = gated ? gw : NULL, *gbp = gated && oc->bias ? gb : NULL, *postp = oc->post ? post : NULL;
        const double *gwdp = gated ? gwd : NULL, *gbdp = gated && oc->bias ? gbd : NULL, *postdp = oc->post ? postd : NULL;
        be->compressor_fwd(be->ctx, &s, (act_t *)entry, alpha, (act_t *)payload, oc->post ? pnr : NULL, (const act_t *)a,
                           (const act_t *)gwp, (const act_t *)gbp, (const act_t *)pw, (const act_t *)postp);
        double *E = malloc(ne * 8), *Al = malloc(nslot * c * 8), *P = malloc(nslot * DH * 8), *R = malloc(nslot * 8);
        ref_forward(&r, ad, gwdp, gbdp, pwd, postdp, E, Al, P, R);
        /* worst errors; a NaN counts as infinite (fmax would drop it) */
        double we = 0, wa = 0, wp = 0, wr = 0, me = 0;
#define WORSE(w, e) do { const double e_ = (e); (w) = e_ == e_ ? fmax((w), e_) : INFINITY; } while (0)
        for (size_t x = 0; x < ne; x++) { WORSE(we, fabs(entry[x] - E[x])); me = fmax(me, fabs(E[x])); }
        for (size_t x = 0; x < nslot * c; x++) WORSE(wa, fabs(alpha[x] - Al[x]));
        for (size_t x = 0; x < nslot * DH; x++) WORSE(wp, fabs(payload[x] - P[x]) / (1 + fabs(P[x])));
        if (oc->post) for (size_t x = 0; x < nslot; x++) WORSE(wr, fabs(pnr[x] - R[x]) / (1 + fabs(R[x])));
#undef WORSE
        snprintf(name, sizeof name, "compressor offset %s: forward = double reference (entry, alpha, payload%s; %d positions NaN)",
                 cname, oc->post ? ", pn_rstd" : "", n_poison);
        check(we <= 1e-5 * (1 + me) && wa <= 1e-5 && wp <= 1e-5 && wr <= 1e-5, name,
              "entry %.3g (of %.3g), alpha %.3g, payload %.3g, pn_rstd %.3g", we, me, wa, wp, wr);
        /* window 0's masked slots: alpha and payload exactly 0 */
        int masked_bad = 0, n_masked = 0;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < r.nW; j++)
                for (int g = 0; g < G; g++)
                    for (int i = 0; i < W; i++)
                        if (oc->base + j * oc->S + i < 0) {
                            const size_t sl = (((size_t)b * r.nW + j) * G + g) * W + i;
                            n_masked++;
                            for (int ch = 0; ch < c; ch++) masked_bad += alpha[sl * c + ch] != 0.0f;
                            for (int x = 0; x < DH; x++) masked_bad += payload[sl * DH + x] != 0.0f;
                            if (oc->post) masked_bad += pnr[sl] != 0.0f;
                        }
        snprintf(name, sizeof name, "compressor offset %s: %d masked slots have alpha = payload = 0%s", cname, n_masked,
                 oc->post ? " = pn_rstd" : "");
        check(masked_bad == 0 && n_masked > 0, name, "%d nonzero", masked_bad);

        /* backward from L = sum dE . E */
        float *dE = malloc(ne * 4);
        double *dEd = malloc(ne * 8);
        fill(&seed, dE, dEd, ne, 1.0, 0);
        float *da = calloc(na, 4), *dgw = calloc(ngw, 4), *dgb = calloc(ngb, 4), *dpw = calloc(npw, 4), *dpost = calloc(DH, 4);
        be->compressor_bwd(be->ctx, &s, (act_t *)da, gated ? dgw : NULL, gated && oc->bias ? dgb : NULL, dpw,
                           oc->post ? dpost : NULL, (const act_t *)dE, alpha, (const act_t *)payload, oc->post ? pnr : NULL,
                           (const act_t *)a, (const act_t *)gwp, (const act_t *)pw, (const act_t *)postp, NULL);
        struct { const char *t; float *grad; double *param; size_t n; int on; } T_[] = {
            {"a", da, ad, na, 1}, {"gate_w", dgw, gwd, ngw, gated}, {"gate_b", dgb, gbd, ngb, gated && oc->bias},
            {"payload_w", dpw, pwd, npw, 1}, {"post_w", dpost, postd, DH, oc->post},
        };
        int bad = 0;
        double worst = 0;
        char why[256] = "";
        for (size_t k = 0; k < sizeof T_ / sizeof T_[0]; k++) {
            if (!T_[k].on) continue;
            for (int dir = 0; dir < 2; dir++) {
                double *u = malloc(T_[k].n * 8), norm = 0, analytic = 0;
                for (size_t x = 0; x < T_[k].n; x++) { u[x] = tu_normal(&seed); norm += u[x] * u[x]; }
                norm = sqrt(norm);
                for (size_t x = 0; x < T_[k].n; x++) { u[x] /= norm; analytic += u[x] * T_[k].grad[x]; }
                const double h = 1e-5;
                for (size_t x = 0; x < T_[k].n; x++) T_[k].param[x] += h * u[x];
                double lp = objective(&r, ad, gwdp, gbdp, pwd, postdp, dEd, E);
                for (size_t x = 0; x < T_[k].n; x++) T_[k].param[x] -= 2 * h * u[x];
                double lm = objective(&r, ad, gwdp, gbdp, pwd, postdp, dEd, E);
                for (size_t x = 0; x < T_[k].n; x++) T_[k].param[x] += h * u[x];
                double numeric = (lp - lm) / (2 * h);
                double rel = fabs(analytic - numeric) / fmax(fmax(fabs(analytic), fabs(numeric)), 1e-2);
                if (rel != rel) rel = INFINITY;       /* a NaN gradient fails */
                if (rel > worst) worst = rel;
                if (rel > 2e-3 && !bad++) snprintf(why, sizeof why, "%s: analytic %.6g vs numeric %.6g", T_[k].t, analytic, numeric);
                free(u);
            }
        }
        printf("# %s: largest relative gradient error %.2e\n", cname, worst);
        snprintf(name, sizeof name, "compressor offset %s: backward = finite differences of the double reference", cname);
        check(bad == 0, name, "%d mismatches, first %s", bad, why);
        free(a); free(gw); free(gb); free(pw); free(post); free(ad); free(gwd); free(gbd); free(pwd); free(postd);
        free(entry); free(alpha); free(payload); free(pnr); free(E); free(Al); free(P); free(R); free(dE); free(dEd);
        free(da); free(dgw); free(dgb); free(dpw); free(dpost);
    }
    return check_exit_code();
}
