/* The per-layer attention schedule (model/layer_kinds.h, docs/spec.md §5): parsing
 * model.layer_attention and deriving each layer's config from its kind. */
#include "model/layer_kinds.h"
#include "common/errors.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *const layer_kind_names[] = {"full", "compressed", "window", "csa", "hca", NULL};   /* KIND_* */

static int kind_of_word(const char *w, size_t n) {
    for (int k = 0; layer_kind_names[k]; k++)
        if (strlen(layer_kind_names[k]) == n && !strncmp(layer_kind_names[k], w, n)) return k;
    return -1;
}

int layer_schedule_parse(const ModelConfig *c, int *kinds, char *err) {
    const char *s = c->layer_attention;
    const int base = c->attention == ATTN_COMPRESSED ? KIND_COMPRESSED : KIND_FULL;
    if (!s[0]) {
        for (int L = 0; kinds && L < c->n_layers; L++) kinds[L] = base;
        return 0;
    }
    int L = 0, item = 0;
    for (const char *p = s;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        item++;
        const char *star = memchr(p, '*', n);
        size_t wn = star ? (size_t)(star - p) : n;
        int kind = kind_of_word(p, wn);
        if (kind < 0)
            return set_err(err, "item %d \"%.*s\" is not a layer kind; expected full | compressed | window | csa | hca, "
                           "optionally KIND*N", item, (int)n, p);
        long reps = 1;
        if (star) {
            char *stop;
            const char *num = star + 1;
            if (num == p + n || !isdigit((unsigned char)*num))
                return set_err(err, "item %d \"%.*s\": expected KIND*N with N a positive integer", item, (int)n, p);
            reps = strtol(num, &stop, 10);
            if (stop != p + n || reps < 1 || reps > 1024)
                return set_err(err, "item %d \"%.*s\": expected KIND*N with N in 1..1024", item, (int)n, p);
        }
        for (long r = 0; r < reps; r++, L++)
            if (L < c->n_layers && kinds) kinds[L] = kind;
        if (L > c->n_layers) break;
        if (!end) break;
        p = end + 1;
    }
    if (L != c->n_layers)
        return set_err(err, "\"%s\" names %d layers; n_layers = %d needs exactly one kind per layer", s, L, c->n_layers);
    return 0;
}

int layer_kind(const ModelConfig *c, int L) {
    const int base = c->attention == ATTN_COMPRESSED ? KIND_COMPRESSED : KIND_FULL;
    if (!c->layer_attention[0] || L < 0 || L >= c->n_layers) return base;
    int *kinds = malloc(sizeof(int) * (size_t)c->n_layers);
    char err[ERR_LEN];
    int k = base;
    if (kinds && !layer_schedule_parse(c, kinds, err)) k = kinds[L];
    free(kinds);
    return k;
}

ModelConfig layer_config(const ModelConfig *c, int L) {
    ModelConfig l = *c;
    l.indexer_topk = 0;
    l.csa_layer = 0;
    const int kind = layer_kind(c, L);
    switch (kind) {
    case KIND_FULL: l.attention = ATTN_FULL; break;
    case KIND_COMPRESSED: l.attention = ATTN_COMPRESSED; break;
    case KIND_WINDOW: l.attention = ATTN_WINDOW; l.grid = GRID_ALIGNED; break;
    case KIND_CSA:
    case KIND_HCA: {
        const int csa = kind == KIND_CSA;
        l.attention = ATTN_COMPRESSED;
        l.window = csa ? c->csa_window : c->hca_window;
        l.stride = csa ? c->csa_stride : c->hca_stride;
        l.gate = csa ? c->csa_gate : c->hca_gate;
        l.compressor = csa ? c->csa_compressor : c->hca_compressor;
        l.local = LOCAL_WINDOW;
        l.grid = GRID_ALIGNED;
        l.indexer_topk = csa ? c->csa_topk : 0;
        l.csa_layer = csa;
        break;
    }
    }
    return l;
}

int layer_has_indexer(const ModelConfig *c, int L) {
    return c->csa_topk > 0 && layer_kind(c, L) == KIND_CSA;
}

int model_has_indexer(const ModelConfig *c) {
    for (int L = 0; L < c->n_layers; L++) if (layer_has_indexer(c, L)) return 1;
    return 0;
}

int layer_schedule_mixed(const ModelConfig *c) {
    if (!c->layer_attention[0]) return 0;
    const int base = c->attention == ATTN_COMPRESSED ? KIND_COMPRESSED : KIND_FULL;
    for (int L = 0; L < c->n_layers; L++)
        if (layer_kind(c, L) != base) return 1;
    return 0;
}

int layer_schedule_check(const ModelConfig *c, int seq_len, const char **bad_key, char *err) {
    *bad_key = "layer_attention";
    int *kinds = malloc(sizeof(int) * (size_t)c->n_layers);
    if (!kinds) return set_err(err, "out of memory for the layer schedule");
    int rc = layer_schedule_parse(c, kinds, err);
    int used[N_KINDS] = {0};
    for (int L = 0; !rc && L < c->n_layers; L++) used[kinds[L]] = 1;
    free(kinds);
    if (rc) return rc;
    for (int csa = 1; csa >= 0; csa--) {
        if (!used[csa ? KIND_CSA : KIND_HCA]) continue;
        const char *name = csa ? "csa" : "hca";
        const int W = csa ? c->csa_window : c->hca_window, S = csa ? c->csa_stride : c->hca_stride;
        const int comp = csa ? c->csa_compressor : c->hca_compressor;
        if (S > W) {
            *bad_key = csa ? "csa_stride" : "hca_stride";
            return set_err(err, "%s_stride = %d is larger than %s_window = %d; the stride must be 1..window", name, S, name, W);
        }
        if (W > seq_len) {
            *bad_key = csa ? "csa_window" : "hca_window";
            return set_err(err, "%s_window = %d is longer than seq_len = %d; a sequence must hold one window", name, W, seq_len);
        }
        if (comp == COMPRESSOR_DEEPSEEK && W != 2 * S) {
            *bad_key = csa ? "csa_compressor" : "hca_compressor";
            return set_err(err, "%s_compressor = deepseek with %s_window = %d and %s_stride = %d; deepseek needs window = "
                           "2 * stride", name, name, W, name, S);
        }
    }
    return 0;
}

int layer_has_gates(const ModelConfig *lc) { return lc->attention == ATTN_COMPRESSED && lc->gate != GATE_UNIFORM; }

long stride_lcm(long acc, long S) {
    if (!acc) return S;
    long a = acc, b = S;
    while (b) { long r = a % b; a = b; b = r; }
    return acc / a * S;
}
