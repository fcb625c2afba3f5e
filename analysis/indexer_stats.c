/* The lightning indexer's selection statistics by the target key's phase and by entry age
 * (analysis/indexer_stats.h, docs/spec.md §5.4). */
#include "analysis/indexer_stats.h"

#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/interrupt.h"
#include "kernels/visibility.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "model/model.h"

IndexerQuery indexer_query_stats(const IndexerGeom *g, const uint8_t *sel, int q, int p) {
    IndexerQuery r = {0, 0, 0, -1};
    r.n_visible = vis_n_entries(q, g->W, g->S, g->o, g->nW);
    for (int j = 0; j < r.n_visible; j++) {
        r.n_selected += sel[j] != 0;
        int start = g->o + j * g->S;
        if (start <= p && p <= vis_entry_end(j, g->W, g->S, g->o)) {
            r.n_holding++;
            if (r.hit < 0) r.hit = 0;
            if (sel[j]) r.hit = 1;
        }
    }
    return r;
}

double indexer_chance_hit(int n, int k, int h) {
    if (h <= 0 || k <= 0 || n <= 0) return 0;
    if (n - h < k) return 1;
    double miss = 1;                       /* C(n-h, k) / C(n, k) = prod_{i<h} (n - k - i) / (n - i) */
    for (int i = 0; i < h; i++) miss *= (double)(n - k - i) / (double)(n - i);
    return 1 - miss;
}

void indexer_stats_free(IndexerStats *st) {
    for (int i = 0; i < st->n_layers; i++) free(st->l[i].visible), free(st->l[i].selected);
    free(st->l);
    memset(st, 0, sizeof *st);
}

void indexer_stats_finalize(IndexerStats *st) {
    for (int i = 0; i < st->n_layers; i++)
        for (int p = 0; p < PROBE_N_PROTOCOLS; p++)
            st->l[i].test[p] = phase_homogeneity_test(st->l[i].hits[p], st->l[i].n[p], st->l[i].g.S);
}

/* Counts one batch: rows b of the last forward, query q[b], key t_K tk[b], protocol pr[b]. */
static void count_batch(struct Model *m, IndexerStats *st, int B, int L, const int *q, const int *tk, const int *proto) {
    for (int i = 0; i < st->n_layers; i++) {
        IndexerLayerStats *ls = &st->l[i];
        int nW = 0;
        const uint8_t *sel = model_indexer_selection(m, ls->layer, &nW);
        if (!sel) continue;
        for (int b = 0; b < B; b++) {
            const uint8_t *row = sel + ((size_t)b * L + q[b]) * nW;
            IndexerQuery r = indexer_query_stats(&ls->g, row, q[b], tk[b]);
            for (int j = 0; j < r.n_visible; j++) {
                ls->visible[r.n_visible - 1 - j]++;
                ls->selected[r.n_visible - 1 - j] += row[j] != 0;
            }
            const int p = proto[b];
            if (r.hit < 0) { ls->uncounted[p]++; continue; }
            const int ph = vis_phase(tk[b], ls->g.S, ls->g.o);
            ls->n[p][ph]++;
            ls->hits[p][ph] += r.hit;
            ls->chance_sum[p][ph] += indexer_chance_hit(r.n_visible, r.n_selected, r.n_holding);
            ls->all_selected[p] += r.n_visible <= ls->g.topk;
        }
    }
}

int indexer_stats_run(struct Model *m, const ModelConfig *mc, const ProbeSet *ps, int T, int micro_batch, IndexerStats *st,
                      char *err) {
    memset(st, 0, sizeof *st);
    for (int l = 0; l < mc->n_layers; l++) st->n_layers += layer_has_indexer(mc, l);
    if (!st->n_layers) return set_err(err, "the model has no lightning indexer (a csa layer with csa_topk > 0, docs/spec.md §5.4)");
    st->l = calloc((size_t)st->n_layers, sizeof *st->l);
    if (!st->l) return set_err(err, "indexer statistics: out of memory");
    for (int l = 0, i = 0; l < mc->n_layers; l++) {
        if (!layer_has_indexer(mc, l)) continue;
        const ModelConfig lc = layer_config(mc, l);
        const ModelDims d = dims_of(&lc, T);
        IndexerLayerStats *ls = &st->l[i++];
        ls->layer = l;
        ls->g = (IndexerGeom){lc.window, lc.stride, dims_grid_offset(&d, 0), d.n_windows, lc.csa_topk};
        if (ls->g.S > PROBE_MAX_RESIDUES) { indexer_stats_free(st); return set_err(err, "indexer statistics: stride %d above %d", lc.stride, PROBE_MAX_RESIDUES); }
        ls->visible = calloc((size_t)(d.n_windows > 0 ? d.n_windows : 1), sizeof(long));
        ls->selected = calloc((size_t)(d.n_windows > 0 ? d.n_windows : 1), sizeof(long));
        if (!ls->visible || !ls->selected) { indexer_stats_free(st); return set_err(err, "indexer statistics: out of memory"); }
    }
    const int n = probe_set_count(ps), nv = probe_set_scored_tokens(ps);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)micro_batch * T), *out = malloc(sizeof(int32_t) * (size_t)micro_batch);
    int *q = malloc(sizeof(int) * (size_t)micro_batch * 3), *tk = q ? q + micro_batch : NULL, *proto = q ? tk + micro_batch : NULL;
    if (!tokens || !out || !q) { free(tokens), free(out), free(q); indexer_stats_free(st); return set_err(err, "indexer statistics: out of memory"); }
    const int T_model = model_seq_len(m);
    int b = 0, L = 0, rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        ProbePrompt pr;
        probe_set_prompt(ps, k, &pr);
        if (b && pr.length != L) {            /* flush: a batch holds prompts of one length */
            if ((rc = model_set_seq_len(m, L, err))) break;
            model_argmax_at(m, tokens, b, q, out);
            count_batch(m, st, b, L, q, tk, proto);
            b = 0;
        }
        L = pr.length;
        memcpy(tokens + (size_t)b * L, pr.tokens, sizeof(int32_t) * (size_t)L);
        q[b] = pr.length - nv, tk[b] = pr.t_key, proto[b] = pr.protocol;
        b++;
        if (b == micro_batch || k + 1 == n) {
            if (interrupt_signal()) { rc = set_err(err, "interrupted by signal %d: nothing written", interrupt_signal()); break; }
            if ((rc = model_set_seq_len(m, L, err))) break;
            model_argmax_at(m, tokens, b, q, out);
            count_batch(m, st, b, L, q, tk, proto);
            b = 0;
        }
    }
    if (model_set_seq_len(m, T_model, rc ? NULL : err)) rc = -1;
    free(tokens), free(out), free(q);
    if (rc) { indexer_stats_free(st); return -1; }
    indexer_stats_finalize(st);
    return 0;
}
