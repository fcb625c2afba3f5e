/* Lookup-probe evaluation: batches the prompts of a probe set (data/probe.h) through
 * model_argmax_at, each batch at the length of its prompts (model_set_seq_len; never padded to
 * the model's T), and turns the per-(protocol, residue) counts into accuracies with 95%
 * Wilson intervals and the mean / worst / best / gap summary of docs/spec.md §3.6. */
#include "model/layer_kinds.h"
#include "trainer/probe_eval.h"
#include "common/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errors.h"
#include "common/interrupt.h"
#include "model/model.h"

void probe_wilson(long k, long n, double z, double *lo, double *hi) {
    if (n <= 0) {
        *lo = *hi = NAN;
        return;
    }
    double p = (double)k / (double)n, z2 = z * z, nn = (double)n;
    double denom = 1.0 + z2 / nn;
    double centre = (p + z2 / (2.0 * nn)) / denom;
    double half = z * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / denom;
    *lo = centre - half < 0.0 ? 0.0 : centre - half;
    *hi = centre + half > 1.0 ? 1.0 : centre + half;
}

void probe_result_clear(ProbeResult *res, int residues) {
    memset(res, 0, sizeof *res);
    res->residues = residues < 1 ? 1 : residues > PROBE_MAX_RESIDUES ? PROBE_MAX_RESIDUES : residues;
    res->fold = 8;
    probe_result_finalize(res);
}

void probe_result_finalize(ProbeResult *res) {
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
        double sum = 0.0, worst = NAN, best = NAN;
        int n = 0, wr = -1, br = -1;
        for (int r = 0; r < res->residues; r++) {
            long k = res->correct[p][r], t = res->total[p][r];
            if (t <= 0) {
                res->acc[p][r] = res->lo[p][r] = res->hi[p][r] = NAN;
                continue;
            }
            double a = 100.0 * (double)k / (double)t, lo, hi;
            probe_wilson(k, t, PROBE_Z95, &lo, &hi);
            res->acc[p][r] = a;
            res->lo[p][r] = 100.0 * lo;
            res->hi[p][r] = 100.0 * hi;
            sum += a;
            n++;
            if (wr < 0 || a < worst) worst = a, wr = r;
            if (br < 0 || a > best) best = a, br = r;
        }
        res->present[p] = n > 0;
        res->mean[p] = n ? sum / n : NAN;
        res->worst[p] = worst;
        res->best[p] = best;
        res->gap[p] = n ? best - worst : NAN;
        res->worst_residue[p] = wr;
        res->best_residue[p] = br;
        res->test_residue[p] = phase_homogeneity_test(res->correct[p], res->total[p], res->residues);
        long fc[PROBE_MAX_RESIDUES], ft[PROBE_MAX_RESIDUES];
        if (res->fold >= 1 && fold_by_phase(res->correct[p], res->total[p], res->residues, res->fold, fc, ft) == 0)
            res->test_phase[p] = phase_homogeneity_test(fc, ft, res->fold);
        else
            res->test_phase[p] = (ChiSquare){NAN, NAN, 0, NAN, 0};
    }
}

/* The probe's accuracy is not per KV head: its phase is t_K mod S, KV head 0's grid (o_0 = 0) also
 * for grid = staggered (docs/spec.md §2b; per-head folds: the knockout in analysis/analysis.c).
 * A layer schedule (docs/spec.md §5): the least common multiple of its compressed layers' strides
 * (csa 4 and hca 32: 32), so that a phase is one phase of every layer; 8 without compressed layers.
 * Multi-rate strides (docs/spec.md §6.4): the least common multiple of the KV heads' strides (8, 6:
 * 24), the joint phase of every head's grid; the smallest stride when it exceeds PROBE_MAX_RESIDUES. */
int probe_phase_fold(const ModelConfig *mc) {
    int hs[HEAD_STRIDES_MAX];
    const int n_hs = mc->attention == ATTN_COMPRESSED && !mc->layer_attention[0] ? config_head_strides(mc, hs, NULL) : 0;
    if (n_hs > 0) {
        long fold = 0;
        for (int g = 0; g < n_hs; g++) {
            fold = stride_lcm(fold, hs[g]);
            if (fold > PROBE_MAX_RESIDUES) return mc->stride;
        }
        return (int)fold;
    }
    if (!mc->layer_attention[0]) return mc->attention == ATTN_COMPRESSED ? mc->stride : 8;
    long fold = 0;
    for (int L = 0; L < mc->n_layers; L++) {
        const ModelConfig lc = layer_config(mc, L);
        if (lc.attention != ATTN_COMPRESSED) continue;
        fold = stride_lcm(fold, lc.stride);
        if (fold > PROBE_MAX_RESIDUES) return lc.stride;   /* beyond any probe's residues: the last layer's S */
    }
    return fold ? (int)fold : 8;
}

const char *probe_fold_note(const ModelConfig *mc) {
    if (mc->attention != ATTN_COMPRESSED || mc->layer_attention[0]) return "";
    if (mc->boundaries == BOUNDARIES_LEARNED)
        return " (position only: learned boundaries have no grid; their phase is the chunk phase)";
    if (mc->grid == GRID_STAGGERED) return " (KV head 0's grid; head g's phase is (t - o_g) mod S)";
    return "";
}

void probe_result_set_fold(ProbeResult *res, const ModelConfig *mc) {
    res->fold = probe_phase_fold(mc);
    res->fold_note = probe_fold_note(mc);
}

const double *probe_result_acc(const ProbeResult *res, int protocol) {
    if (protocol < 0 || protocol >= PROBE_N_PROTOCOLS || !res->present[protocol]) return NULL;
    return res->acc[protocol];
}

int probe_evaluate_shard(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                         ProbeResult *res, char *err) {
    return probe_evaluate_ex(m, ps, T, micro_batch, rank, world, NULL, NULL, NULL, res, err);
}



typedef struct { int index, length; } PromptRef;
static int by_length(const void *a_, const void *b_) {    /* length, then index: a stable order */
    const PromptRef *a = a_, *b = b_;
    if (a->length != b->length) return a->length < b->length ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* pad_to_T: every prompt padded to T with token 0 (the evaluation before prompts ran at their own
 * length), kept for the tests' comparison only (probe_evaluate_padded); 0 everywhere else. */
/* chunk: when not NULL (a model with learned chunk boundaries), each prompt is also counted by the
 * chunk phase of its target key in every layer (trainer/chunk_phase.h), from the boundary flags of
 * the forward that scored it. */
static int probe_evaluate_rows(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                               ProbeBatchFn before_batch, void *ctx, const char *progress, int pad_to_T,
                               ChunkPhaseCounts *chunk, unsigned char *hits, ProbeResult *res, char *err) {
    int P = probe_set_residues(ps);
    if (P > PROBE_MAX_RESIDUES) return set_err(err, "%s: %d residues, at most %d supported", probe_set_path(ps), P, PROBE_MAX_RESIDUES);
    if (probe_set_max_length(ps) > T)
        return set_err(err, "%s: prompts of %d tokens do not fit the sequence length %d", probe_set_path(ps),
                       probe_set_max_length(ps), T);
    if (micro_batch < 1 || world < 1 || rank < 0 || rank >= world)
        return set_err(err, "probe_evaluate: micro_batch %d, rank %d, world %d: expected micro_batch >= 1, 0 <= rank < world",
                       micro_batch, rank, world);
    probe_result_clear(res, P);
    res->candidates = probe_set_candidates(ps);
    /* A lookup prompt is one row scored at its query position; a needle prompt nv rows, the same
     * tokens scored at q, q+1, ..., q+nv-1 (teacher forced), right when all of them are. */
    const int nv = probe_set_scored_tokens(ps), nk = (int)probe_set_builder(ps).key_tokens;
    if (nv > micro_batch)
        return set_err(err, "%s: needle records with %d value tokens need micro_batch >= %d (have %d)", probe_set_path(ps), nv, nv,
                       micro_batch);
    const int n = probe_set_count(ps), mine = rank < n ? (n - rank + world - 1) / world : 0;
    int32_t *tokens = malloc((size_t)micro_batch * T * sizeof *tokens);     /* [B, L], L <= T */
    int *positions = malloc((size_t)micro_batch * sizeof *positions);       /* [B] */
    int32_t *answers = malloc((size_t)micro_batch * sizeof *answers);       /* [B] */
    int32_t *argmax = malloc((size_t)micro_batch * sizeof *argmax);         /* [B] */
    int *proto = malloc((size_t)micro_batch * sizeof *proto);               /* [B] */
    int *resid = malloc((size_t)micro_batch * sizeof *resid);               /* [B] */
    int *tkey = malloc((size_t)micro_batch * sizeof *tkey);                 /* [B] t_K */
    int *pidx = malloc((size_t)micro_batch * sizeof *pidx);                 /* [B] the row's prompt index */
    PromptRef *order = malloc((size_t)(mine ? mine : 1) * sizeof *order);   /* this rank's prompts */
    if (!tokens || !positions || !answers || !argmax || !proto || !resid || !tkey || !pidx || !order) {
        free(tokens), free(positions), free(answers), free(argmax), free(proto), free(resid), free(tkey), free(pidx), free(order);
        return set_err(err, "probe_evaluate: out of memory for %d x %d tokens", micro_batch, T);
    }
    /* Each batch runs at the length L of its prompts (the model is causal: the logits at the
     * scored positions < L are those of the prompt padded to T), so this rank's prompts are
     * taken in order of length and a batch holds prompts of one length only. */
    for (int k = 0; k < mine; k++) {
        ProbePrompt pr;
        probe_set_prompt(ps, rank + k * world, &pr);
        order[k] = (PromptRef){rank + k * world, pad_to_T ? T : pr.length};
    }
    qsort(order, (size_t)mine, sizeof *order, by_length);
    const int T_model = model_seq_len(m);
    int b = 0, L = 0, rc = 0;
    double t_start = clock_seconds(), last_print = t_start;
    for (int k = 0; k < mine && !rc; k++) {
        ProbePrompt pr;
        probe_set_prompt(ps, order[k].index, &pr);
        L = order[k].length;
        int q = pr.length - nv;
        for (int j = 0; j < nv; j++) {
            int32_t *row = tokens + (size_t)b * L;
            memcpy(row, pr.tokens, (size_t)pr.length * sizeof *row);
            memset(row + pr.length, 0, (size_t)(L - pr.length) * sizeof *row);
            positions[b] = q + j;
            answers[b] = nv == 1 ? pr.answer : pr.tokens[pr.t_key + nk + j];
            proto[b] = pr.protocol;
            resid[b] = pr.residue;
            tkey[b] = pr.t_key;
            pidx[b] = order[k].index;
            b++;
        }
        /* no room for another prompt, the next prompt has another length, or this rank's last */
        if (b + nv > micro_batch || k + 1 >= mine || order[k + 1].length != L) {
            if (interrupt_signal()) {                   /* SIGINT/SIGTERM of an analysis (common/interrupt.h) */
                rc = set_err(err, "interrupted by signal %d after %d of %d probe prompts: nothing written",
                             interrupt_signal(), k + 1 - b / nv, mine);
                break;
            }
            if (model_set_seq_len(m, L, err)) { rc = -1; break; }
            if (before_batch) before_batch(ctx, proto, b);
            model_argmax_at(m, tokens, b, positions, argmax);
            if (progress) {
                double now = clock_seconds();
                if (now - last_print >= 2.0 || k + 1 >= mine) {
                    fprintf(stderr, "%s: %d/%d prompts (%.0f%%), %.0fs\n", progress, k + 1, mine, 100.0 * (k + 1) / mine,
                            now - t_start);
                    last_print = now;
                }
            }
            for (int j = 0; j < b; j += nv) {
                int right = 1;
                for (int x = 0; x < nv; x++) right &= argmax[j + x] == answers[j + x];
                res->total[proto[j]][resid[j]]++;
                res->correct[proto[j]][resid[j]] += right;
                if (hits) hits[pidx[j]] = (unsigned char)right;
                for (int l = 0; chunk && l < chunk->layers; l++)
                    chunk_phase_add(chunk, proto[j], l, model_boundary_flags(m, l) + (size_t)j * L, L, tkey[j], right);
            }
            b = 0;
        }
    }
    if (model_set_seq_len(m, T_model, rc ? NULL : err)) rc = -1;     /* validation keeps the model's T */
    free(tokens), free(positions), free(answers), free(argmax), free(proto), free(resid), free(tkey), free(pidx), free(order);
    if (rc) return rc;
    probe_result_finalize(res);
    return 0;
}

int probe_evaluate_chunked(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                           ChunkPhaseCounts *chunk, ProbeResult *res, char *err) {
    if (chunk && (!model_has_boundaries(m) || chunk->protocols != PROBE_N_PROTOCOLS))
        return set_err(err, "probe_evaluate_chunked: chunk-phase counts need a model with learned chunk boundaries "
                            "and %d protocols", PROBE_N_PROTOCOLS);
    return probe_evaluate_rows(m, ps, T, micro_batch, rank, world, NULL, NULL, NULL, 0, chunk, NULL, res, err);
}

int probe_evaluate_ex(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                      ProbeBatchFn before_batch, void *ctx, const char *progress, ProbeResult *res, char *err) {
    return probe_evaluate_rows(m, ps, T, micro_batch, rank, world, before_batch, ctx, progress, 0, NULL, NULL, res, err);
}

int probe_evaluate_hits(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeBatchFn before_batch, void *ctx,
                        const char *progress, ChunkPhaseCounts *chunk, unsigned char *hits, ProbeResult *res, char *err) {
    if (chunk && (!model_has_boundaries(m) || chunk->protocols != PROBE_N_PROTOCOLS))
        return set_err(err, "probe_evaluate_hits: chunk-phase counts need a model with learned chunk boundaries "
                            "and %d protocols", PROBE_N_PROTOCOLS);
    return probe_evaluate_rows(m, ps, T, micro_batch, 0, 1, before_batch, ctx, progress, 0, chunk, hits, res, err);
}

int probe_evaluate(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeResult *res, char *err) {
    return probe_evaluate_shard(m, ps, T, micro_batch, 0, 1, res, err);
}

int probe_evaluate_padded(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeResult *res, char *err) {
    return probe_evaluate_rows(m, ps, T, micro_batch, 0, 1, NULL, NULL, NULL, 1, NULL, NULL, res, err);
}

void probe_print_table(FILE *f, const ProbeResult *res) {
    fprintf(f, "lookup probe: top-1 accuracy A(r) %% by residue r = t_K mod %d, 95%% Wilson interval\n", res->residues);
    fprintf(f, "%7s", "residue");
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++)
        if (res->present[p]) fprintf(f, " | %2s %6s %11s %15s", probe_protocol_name(p), "A(r)", "correct", "95% CI");
    fprintf(f, "\n");
    for (int r = 0; r < res->residues; r++) {
        fprintf(f, "%7d", r);
        for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
            if (!res->present[p]) continue;
            if (res->total[p][r] == 0) {
                fprintf(f, " | %2s %6s %11s %15s", "", "-", "0/0", "-");
                continue;
            }
            char cnt[48], ci[48];
            snprintf(cnt, sizeof cnt, "%ld/%ld", res->correct[p][r], res->total[p][r]);
            snprintf(ci, sizeof ci, "[%5.1f, %5.1f]", res->lo[p][r], res->hi[p][r]);
            fprintf(f, " | %2s %6.1f %11s %15s", "", res->acc[p][r], cnt, ci);
        }
        fprintf(f, "\n");
    }
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
        if (!res->present[p]) {
            fprintf(f, "%s: no prompts\n", probe_protocol_name(p));
            continue;
        }
        fprintf(f, "%s: mean %.1f  worst %.1f (r=%d)  best %.1f (r=%d)  gap %.1f pp\n", probe_protocol_name(p),
                res->mean[p], res->worst[p], res->worst_residue[p], res->best[p], res->best_residue[p], res->gap[p]);
    }
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
        if (!res->present[p]) continue;
        const ChiSquare *a = &res->test_residue[p], *b = &res->test_phase[p];
        char chance[256];
        int at_chance = probe_not_retrieving(res, p, chance, sizeof chance);
        fprintf(f, "%s phase-effect test: across residues chi2 %.2f (df %d) p %.3g | by phase t_K mod %d%s chi2 %.2f (df %d) p %.3g  -> %s\n",
                probe_protocol_name(p), a->chi2, a->df, a->p, res->fold, res->fold_note ? res->fold_note : "", b->chi2, b->df, b->p,
                at_chance ? chance : (b->p < 0.05 || a->p < 0.05) ? "not flat (p < 0.05)" : "homogeneity not rejected");
        if (a->permutations || b->permutations)
            fprintf(f, "%s phase-effect test: smallest expected count %.2g < %g (%s%s%s): p from %d permuted tables "
                    "(Monte Carlo permutation test, seed %u; docs/spec.md 3.7), not from the chi-square distribution; "
                    "p >= 1/%d\n",
                    probe_protocol_name(p), a->permutations ? a->min_expected : b->min_expected, PHASE_MIN_EXPECTED,
                    a->permutations ? "across residues" : "", a->permutations && b->permutations ? ", " : "",
                    b->permutations ? "by phase" : "", PHASE_PERMUTATIONS, PHASE_PERMUTATION_SEED, PHASE_PERMUTATIONS + 1);
    }
}

int probe_not_retrieving(const ProbeResult *res, int p, char *line, size_t len) {
    if (p < 0 || p >= PROBE_N_PROTOCOLS || !res->present[p] || res->candidates < 1) return 0;
    long k = 0, n = 0;
    for (int r = 0; r < res->residues; r++) k += res->correct[p][r], n += res->total[p][r];
    if (n <= 0) return 0;
    double lo, hi, chance = 1.0 / res->candidates;
    probe_wilson(k, n, PROBE_Z95, &lo, &hi);
    if (lo > chance) return 0;
    snprintf(line, len, "not retrieving: mean accuracy %.1f%% (95%% CI %.1f-%.1f%%) %s chance 1/%d = %.2f%%",
             100.0 * (double)k / (double)n, 100.0 * lo, 100.0 * hi, hi >= chance ? "includes" : "is below", res->candidates,
             100.0 * chance);
    return 1;
}
