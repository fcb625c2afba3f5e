/* Validation loss by residue and gate statistics (definitions in trainer/evaluate.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model/layer_kinds.h"
#include "trainer/evaluate.h"
#include "trainer/comm.h"
#include "common/errors.h"
#include "common/interrupt.h"
#include "model/model.h"
#include "model/dims.h"
#include "data/targets.h"
#include "trainer/probe_eval.h"   /* probe_phase_fold: the fold period S */

int eval_gate_window(const ModelConfig *mc, int T) {
    int W = 0;
    for (int l = 0; l < mc->n_layers; l++) {
        const ModelConfig lc = layer_config(mc, l);
        const ModelDims d = dims_of(&lc, T);
        if (d.compressed && d.window > W) W = d.window;
    }
    return W;
}

void gate_stats_accumulate(const float *alpha, int B, int nW, int G, int W, int c, double *sum_alpha, double *sum_eff) {
    gate_stats_accumulate_heads(alpha, B, nW, G, W, c, NULL, sum_alpha, sum_eff);
}

void gate_stats_accumulate_heads(const float *alpha, int B, int nW, int G, int W, int c, const int *head_windows,
                                 double *sum_alpha, double *sum_eff) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nW; j++)
            for (int g = 0; g < G; g++) {
                if (head_windows && j >= head_windows[g]) continue;   /* the head has no window j */
                const float *al = alpha + (((size_t)b * nW + j) * G + g) * W * c;   /* [W, c] */
                double eff = 0;
                for (int ch = 0; ch < c; ch++) {
                    double h = 0;
                    for (int i = 0; i < W; i++) {
                        double p = al[i * c + ch];
                        if (p > 0) h -= p * log(p);
                        sum_alpha[((size_t)g * W + i) * c + ch] += p;
                    }
                    eff += exp(h);
                }
                sum_eff[g] += eff / c;
            }
}

void gate_stats_finish(const double *sum_alpha, long n, int G, int W, int c, float *eff_static, float *profile) {
    for (int g = 0; g < G; g++) {
        double eff = 0;
        for (int i = 0; i < W; i++) profile[g * W + i] = 0;
        for (int ch = 0; ch < c; ch++) {
            double h = 0;
            for (int i = 0; i < W; i++) {
                double p = n ? sum_alpha[((size_t)g * W + i) * c + ch] / n : 0;
                if (p > 0) h -= p * log(p);
                profile[g * W + i] += (float)(p * W / c);
            }
            eff += exp(h);
        }
        eff_static[g] = (float)(eff / c);
    }
}

/* Gate statistics of a layer with learned chunk boundaries (docs/spec.md §6.5): every entry is a
 * window of W slots ending at its boundary, the token at t in slot W - 1 - (e - t), the slots before
 * the chunk masked (alpha 0, as a partial window of §6.1). The per-token gates [B, T, G, c] are laid
 * out as one sequence's entries [n_b, G, W, c] and accumulated like windows, each head over the
 * sequence's n_b entries: the profile is the mean weight of each slot, the effective numbers count
 * the present slots. */
static void gate_stats_by_chunk_slot(Model *m, int l, const ModelDims *d, int B, int T, int G, int W, int c, float *tok_alpha,
                                     float *ent_alpha, double *sum_alpha, double *sum_eff, double *gate_windows) {
    const int Wl = d->window, cl = d->channels;
    const unsigned char *flags = model_boundary_flags(m, l);
    int *heads = malloc(sizeof(int) * (size_t)G);                                    /* [G] entries per head */
    for (int br = 0; br < 2; br++) {
        if (!heads || !flags || !model_gate_token_alphas(m, l, br, B, tok_alpha)) break;   /* [B, T, G, cl] */
        for (int b = 0; b < B; b++) {
            const unsigned char *bd = flags + (size_t)b * T;
            int n = 0, start = 0;
            for (int e = 0; e < T; e++) {
                if (!bd[e]) continue;
                float *win = ent_alpha + (size_t)n * G * Wl * cl;                       /* [G, Wl, cl] */
                memset(win, 0, sizeof(float) * (size_t)G * Wl * cl);
                for (int t = start; t <= e; t++)
                    for (int g = 0; g < G; g++)
                        memcpy(win + ((size_t)g * Wl + (Wl - 1 - (e - t))) * cl, tok_alpha + (((size_t)b * T + t) * G + g) * cl,
                               sizeof(float) * cl);
                n++, start = e + 1;
            }
            for (int g = 0; g < G; g++) heads[g] = n;
            const size_t o = (size_t)l * 2 + br;
            gate_stats_accumulate_heads(ent_alpha, 1, n, G, Wl, cl, heads, sum_alpha + o * G * W * c, sum_eff + o * G);
            if (br == 0)
                for (int g = 0; g < G; g++) gate_windows[l * G + g] += n;
        }
    }
    free(heads);
}

void eval_result_free(EvalResult *r) {
    free(r->loss_by_residue);
    free(r->eff_static);
    free(r->eff_window);
    free(r->profile);
    loss_stats_free(&r->by_residue);
    loss_stats_free(&r->by_phase);
    if (r->has_boundaries) boundary_stats_free(&r->bounds);
    memset(r, 0, sizeof *r);
}

int evaluate_validation(Model *m, const ModelConfig *mc, const ValSet *val, int T, int micro_batch, int residues,
                        int loss_targets, Comm *comm, int show_progress, EvalResult *res, char *err) {
    memset(res, 0, sizeof *res);
    if (loss_targets_check(loss_targets, val_set_glob(val), val_set_tokenizer(val), err)) return -1;
    const int P = residues, L = mc->n_layers, G = mc->n_kv_heads;
    /* each layer's sizes (a layer schedule, docs/spec.md §5: its own config); gate statistics for
     * every compressed layer, in slots as wide as the widest W, c and nW of them */
    ModelDims *ld = malloc(sizeof(ModelDims) * (L > 0 ? L : 1));
    if (!ld) return set_err(err, "out of memory for %d layers' sizes", L);
    const int W = eval_gate_window(mc, T);
    int c = 0, nW = 0;
    for (int l = 0; l < L; l++) {
        const ModelConfig lc = layer_config(mc, l);
        ld[l] = dims_of(&lc, T);
        if (!ld[l].compressed) continue;
        if (ld[l].channels > c) c = ld[l].channels;
        if (!ld[l].boundaries && ld[l].n_windows > nW) nW = ld[l].n_windows;   /* learned boundaries: per token */
    }
    const int gates = W > 0;
    long n_val = val_set_n_windows(val);
    const int S = probe_phase_fold(mc);
    /* accumulators, reduced over ranks in one call: [P sums, P counts, L*2*G*W*c alpha, L*2*G eff,
     * G windows per KV head (grid = staggered: each head's own window count, docs/spec.md §2b),
     * then per window: [n_val, P] sums and counts, [n_val, S] sums and counts (each window is one
     * rank's: the others add zeros)] */
    size_t n_alpha = gates ? (size_t)L * 2 * G * W * c : 0, n_eff = gates ? (size_t)L * 2 * G : 0;
    size_t n_win = (size_t)n_val * (2 * (size_t)P + 2 * (size_t)S);
    size_t n_acc = 2 * (size_t)P + n_alpha + n_eff + (size_t)L * G + n_win;
    int *head_windows = malloc(sizeof(int) * (L * G > 0 ? L * G : 1));    /* [L, G] */
    double *acc = calloc(n_acc, sizeof(double));
    double *loss_sum = acc, *count = acc + P, *sum_alpha = acc + 2 * P, *sum_eff = sum_alpha + n_alpha;
    double *gate_windows = sum_eff + n_eff;
    double *win_rsum = gate_windows + (size_t)L * G, *win_rcnt = win_rsum + (size_t)n_val * P;     /* [n_val, P] */
    double *win_psum = win_rcnt + (size_t)n_val * P, *win_pcnt = win_psum + (size_t)n_val * S;   /* [n_val, S] */
    long *win_of = malloc(sizeof(long) * (micro_batch > 0 ? micro_batch : 1));   /* [micro_batch] window index */
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(T + 1) * micro_batch);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T * micro_batch), *tgt = malloc(sizeof(int32_t) * (size_t)T * micro_batch);
    float *losses = malloc(sizeof(float) * (size_t)T * micro_batch);
    const size_t alpha_floats = (size_t)micro_batch * nW * G * W * c;
    float *alpha = gates ? malloc(sizeof(float) * (alpha_floats ? alpha_floats : 1)) : NULL;
    /* learned chunk boundaries (docs/spec.md §6.5): the per-token gates [B, T, G, c] laid out as the
     * entries of one sequence at a time [T, G, W, c] (masked slots 0), and the boundary statistics */
    const int bounded = model_has_boundaries(m);
    float *tok_alpha = bounded && gates ? malloc(sizeof(float) * (size_t)micro_batch * T * G * (c ? c : 1)) : NULL;
    float *ent_alpha = bounded && gates ? malloc(sizeof(float) * (size_t)T * G * W * (c ? c : 1)) : NULL;
    int rc = 0;
    if (bounded && (gates && (!tok_alpha || !ent_alpha)))
        rc = set_err(err, "out of memory for the per-token gate weights (micro-batch %d x %d)", micro_batch, T);
    if (bounded && !rc && boundary_stats_init(&res->bounds, L, mc->window, mc->stride, NULL, err)) rc = -1;
    res->has_boundaries = bounded && !rc;
    if (rc) {
    } else if (!head_windows || !acc || !win_of || !buf || !tok || !tgt || !losses || (gates && !alpha))
        rc = set_err(err, "out of memory: %zu bytes for the validation buffers (micro-batch %d x %d)",
                     sizeof(int) * G + sizeof(double) * n_acc + sizeof(int32_t) * ((size_t)T + 1 + 2 * (size_t)T) * micro_batch +
                         sizeof(float) * ((size_t)T * micro_batch + (gates ? alpha_floats : 0)),
                     micro_batch, T);
    else
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++) head_windows[l * G + g] = dims_head_windows(&ld[l], g);
    long mine = 0, done = 0;
    for (long k = comm->rank; k < n_val; k += comm->world) mine++;
    int tty = show_progress && isatty(STDERR_FILENO);
    long k = comm->rank;
    while (k < n_val && !rc) {
        if (interrupt_signal()) {                        /* SIGINT/SIGTERM of an analysis (common/interrupt.h) */
            rc = set_err(err, "interrupted by signal %d after %ld of %ld validation windows: nothing written",
                         interrupt_signal(), done, mine);
            break;
        }
        int B = 0;
        for (; B < micro_batch && k < n_val; B++, k += comm->world) {
            win_of[B] = k;
            if (val_set_window(val, k, buf + (size_t)B * (T + 1), err)) { rc = -1; break; }
            memcpy(tok + (size_t)B * T, buf + (size_t)B * (T + 1), sizeof(int32_t) * T);
            window_targets(buf + (size_t)B * (T + 1), T, loss_targets, tgt + (size_t)B * T);
        }
        if (rc || B == 0) break;
        model_forward(m, tok, tgt, B, losses);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                if (tgt[(size_t)b * T + t] < 0) continue;    /* not a counted target */
                loss_sum[t % P] += losses[(size_t)b * T + t];
                count[t % P] += 1;
                size_t wr = (size_t)win_of[b] * P + t % P, wp = (size_t)win_of[b] * S + t % S;
                win_rsum[wr] += losses[(size_t)b * T + t], win_rcnt[wr] += 1;
                win_psum[wp] += losses[(size_t)b * T + t], win_pcnt[wp] += 1;
            }
        for (int l = 0; res->has_boundaries && !rc && l < L; l++) {
            int Bb = 0, Tb = 0;
            const unsigned char *flags = model_boundary_flags(m, l);
            if (!flags || model_boundary_batch(m, &Bb, &Tb) || Bb != B || Tb != T) continue;
            if (boundary_stats_add(&res->bounds, l, flags, model_boundary_probs(m, l), tok, B, T, err)) rc = -1;
        }
        if (gates) {
            for (int l = 0; l < L; l++) {
                if (!ld[l].compressed) continue;
                if (ld[l].boundaries) {
                    gate_stats_by_chunk_slot(m, l, &ld[l], B, T, G, W, c, tok_alpha, ent_alpha, sum_alpha, sum_eff, gate_windows);
                    continue;
                }
                for (int br = 0; br < 2; br++) {
                    model_gate_alphas(m, l, br, B, alpha);          /* [B, nW_l, G, W_l, c_l] */
                    size_t o = ((size_t)l * 2 + br);
                    gate_stats_accumulate_heads(alpha, B, ld[l].n_windows, G, ld[l].window, ld[l].channels, head_windows + l * G,
                                                sum_alpha + o * G * W * c, sum_eff + o * G);
                }
                for (int g = 0; g < G; g++) gate_windows[l * G + g] += (double)B * head_windows[l * G + g];
            }
        }
        done += B;
        if (tty) fprintf(stderr, "\r  evaluating: %ld/%ld validation windows", done, mine);
    }
    if (tty) fprintf(stderr, "\r%60s\r", "");
    int fail = rc != 0;
    comm_allreduce_max_int(comm, &fail, 1);
    if (fail) {
        if (!rc) set_err(err, "validation failed on another rank");
        rc = -1;
    } else {
        comm_allreduce_sum_host(comm, acc, (int)n_acc);
        if (res->has_boundaries) {                       /* the boundary statistics' counts over the ranks */
            const long nb = boundary_stats_n_counts(&res->bounds);
            double *bs = malloc(sizeof(double) * (size_t)nb);
            if (!bs) {
                eval_result_free(res);
                rc = set_err(err, "out of memory: %ld values for the boundary statistics", nb);
                goto done;
            }
            boundary_stats_pack(&res->bounds, bs);
            comm_allreduce_sum_host(comm, bs, (int)nb);
            boundary_stats_unpack(&res->bounds, bs);
            free(bs);
            boundary_stats_finalize(&res->bounds);
        }
        res->residues = P;
        res->loss_by_residue = calloc(P, sizeof(double));
        if (gates) {
            res->eff_static = calloc((size_t)L * G * 2, sizeof(float));
            res->eff_window = calloc((size_t)L * G * 2, sizeof(float));
            res->profile = calloc((size_t)L * G * 2 * W, sizeof(float));
        }
        float *es = gates ? malloc(sizeof(float) * G) : NULL, *pr = gates ? malloc(sizeof(float) * G * W) : NULL;
        if (!res->loss_by_residue || (gates && (!res->eff_static || !res->eff_window || !res->profile || !es || !pr))) {
            free(es);
            free(pr);
            eval_result_free(res);
            rc = set_err(err, "out of memory: %zu bytes for the validation results",
                         sizeof(double) * P + (gates ? sizeof(float) * ((size_t)L * G * 2 * (W + 2) + (size_t)G * (W + 1)) : 0));
            goto done;
        }
        double total = 0, ntok = 0;
        for (int r = 0; r < P; r++) {
            res->loss_by_residue[r] = count[r] > 0 ? loss_sum[r] / count[r] : NAN;
            total += loss_sum[r];
            ntok += count[r];
        }
        res->loss = ntok > 0 ? total / ntok : NAN;
        res->tokens = (long)ntok;
        res->windows = n_val;                 /* every window is scored, each on its counted targets */
        res->has_gates = gates;
        res->L = L; res->G = G; res->W = W;
        res->phases = S;
        if (loss_stats_compute(win_rsum, win_rcnt, n_val, P, LOSS_STATS_B, LOSS_STATS_SEED, &res->by_residue, err) ||
            loss_stats_compute(win_psum, win_pcnt, n_val, S, LOSS_STATS_B, LOSS_STATS_SEED, &res->by_phase, err)) {
            free(es);
            free(pr);
            eval_result_free(res);
            rc = -1;
            goto done;
        }
        if (gates) {
            for (int l = 0; l < L; l++)
                for (int br = 0; br < 2; br++) {
                    size_t o = (size_t)l * 2 + br;
                    const int Wl = ld[l].window, cl = ld[l].channels;
                    for (int g = 0; g < G; g++) {          /* metrics layout [L, G, 2(, W)] */
                        size_t dst = ((size_t)l * G + g) * 2 + br;
                        for (int i = 0; i < W; i++) res->profile[dst * W + i] = NAN;   /* offsets past the layer's W */
                        if (!ld[l].compressed) {           /* a layer without a compressor (schedule): NaN */
                            res->eff_static[dst] = res->eff_window[dst] = NAN;
                            continue;
                        }
                        long nwin = (long)gate_windows[l * G + g];   /* each head over its own windows */
                        gate_stats_finish(sum_alpha + o * G * W * c + (size_t)g * Wl * cl, nwin, 1, Wl, cl, es + g, pr + (size_t)g * W);
                        res->eff_static[dst] = es[g];
                        res->eff_window[dst] = nwin ? (float)(sum_eff[o * G + g] / nwin) : NAN;
                        memcpy(res->profile + dst * W, pr + (size_t)g * W, sizeof(float) * Wl);
                    }
                }
        }
        free(es);
        free(pr);
    }
done:
    free(head_windows);
    free(ld);
    free(win_of);
    free(acc); free(buf); free(tok); free(tgt); free(losses); free(alpha); free(tok_alpha); free(ent_alpha);
    if (rc && res->has_boundaries) eval_result_free(res);
    return rc;
}
