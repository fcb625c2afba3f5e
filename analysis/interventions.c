/* Gate cycling (a roll of the gate tensors along their W axis) and KV-head knockout by mean
 * replacement (an attention hook at the scored positions); definitions in
 * analysis/interventions.h and docs/spec.md §4. */
#include "model/layer_kinds.h"
#include "analysis/interventions.h"

#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/optval.h"

/* One layer's config against the rule of analysis/interventions.h; mixed: the schedule's rule. */
static int gate_cycle_layer_check(const ModelConfig *lc, int k, int l, int mixed, const char *flag, char *err) {
    const char *kind = layer_kind_names[k];
    if (lc->attention != ATTN_COMPRESSED) {
        if (mixed) return set_err(err, "%s: layer %d is a %s layer (no compressor, no gates); gate cycling needs csa, hca or compressed layers", flag, l, kind);
        return set_err(err, "%s: the checkpoint has full attention; gate cycling needs compressed attention (attention = compressed)", flag);
    }
    if (lc->boundaries == BOUNDARIES_LEARNED)   /* docs/spec.md §6.5: no grid phase to cycle */
        return set_err(err, "%s: the checkpoint has model.boundaries = learned (content-defined chunks, docs/spec.md §6.5): "
                       "there is no window grid whose phase gate cycling could shift", flag);
    if (lc->head_strides[0])   /* docs/spec.md §6.4: a stride per KV head, one W: W = S cannot hold for every head */
        return set_err(err, "%s: the checkpoint has multi-rate strides (model.head_strides = %s, docs/spec.md §6.4): "
                       "gate cycling needs W = S, which one window W cannot meet for strides that differ; fold the "
                       "probe by each head's own phase with --eval --probe instead", flag, lc->head_strides);
    if (lc->gate == GATE_UNIFORM) {
        if (mixed) return set_err(err, "%s: layer %d (%s) has uniform gates (no gate maps or biases to cycle)", flag, l, kind);
        return set_err(err, "%s: the checkpoint has uniform gates (no gate maps or biases to cycle); needs gate = scalar or vector", flag);
    }
    if (lc->window != lc->stride && !(mixed && lc->compressor == COMPRESSOR_DEEPSEEK && lc->window == 2 * lc->stride)) {
        if (mixed) return set_err(err, "%s: layer %d (%s): window W = %d, stride S = %d; gate cycling needs W = S or the deepseek maps with W = 2S (docs/spec.md §4.1)",
                                  flag, l, kind, lc->window, lc->stride);
        return set_err(err, "%s: window W = %d differs from stride S = %d; gate cycling needs W = S (docs/spec.md §4.1)", flag,
                       lc->window, lc->stride);
    }
    return 0;
}

int gate_cycle_default_layer(const ModelConfig *mc, int l) {
    if (!layer_schedule_mixed(mc)) return 1;
    const ModelConfig lc = layer_config(mc, l);
    return layer_has_gates(&lc);
}

int gate_cycle_check(const ModelConfig *mc, const int *layer_mask, const char *flag, int *period, char *err) {
    const int mixed = layer_schedule_mixed(mc);
    long lcm = 0;
    int n = 0;
    for (int l = 0; l < mc->n_layers; l++) {
        const ModelConfig lc = layer_config(mc, l);
        if (layer_mask ? !layer_mask[l] : !gate_cycle_default_layer(mc, l)) continue;
        if (gate_cycle_layer_check(&lc, layer_kind(mc, l), l, mixed, flag, err)) return -1;
        lcm = stride_lcm(lcm, lc.stride);
        if (lcm > 65536) return set_err(err, "%s: the chosen layers' strides have a common period above 65536", flag);
        n++;
    }
    if (!n) return set_err(err, "%s: no layer of the schedule (layer_attention = %s) has gates to cycle", flag, mc->layer_attention);
    if (period) *period = (int)lcm;
    return 0;
}

int gate_cycle_layers(const ModelConfig *mc, const char *text, int *mask, char *err) {
    const int L = mc->n_layers;
    for (int l = 0; l < L; l++) mask[l] = 0;
    const char *s = text;
    for (;;) {
        size_t len = strcspn(s, ",");
        char item[64];
        if (len == 0 || len >= sizeof item)
            return set_err(err, "--layers: '%.*s' is not a layer: expected a comma-separated list of layers in 0..%d or layer kinds "
                           "(csa, hca, compressed)", (int)(len > 200 ? 200 : len), s, L - 1);
        memcpy(item, s, len);
        item[len] = 0;
        int kind = -1;
        for (int k = 0; layer_kind_names[k]; k++) if (!strcmp(item, layer_kind_names[k])) kind = k;
        if (kind >= 0) {
            int any = 0;
            for (int l = 0; l < L; l++) if (layer_kind(mc, l) == kind) mask[l] = 1, any = 1;
            if (!any) return set_err(err, "--layers: the schedule has no %s layer (layer_attention = %s)", item, mc->layer_attention[0] ? mc->layer_attention : "(none)");
        } else {
            long long v;
            if (optval_int(item, 0, L - 1, &v))
                return set_err(err, "--layers: '%s' is not a layer: expected a comma-separated list of layers in 0..%d or layer kinds "
                               "(csa, hca, compressed)", item, L - 1);
            mask[v] = 1;
        }
        if (!s[len]) break;
        s += len + 1;
    }
    return 0;
}

/* For x [G, A, inner] with A = nb blocks of S: every block rolls by delta within itself
 * (np.roll on each block's axis), in place via a scratch copy. */
static int roll_blocks(float *x, int G, int A, int S, size_t inner, int delta) {
    int s = ((delta % S) + S) % S;
    if (s == 0) return 0;
    float *tmp = malloc(sizeof(float) * (size_t)S * inner);
    if (!tmp) return -1;
    for (int g = 0; g < G; g++)
        for (int h = 0; h < A / S; h++) {
            float *blk = x + ((size_t)g * A + (size_t)h * S) * inner;
            for (int i = 0; i < S; i++) memcpy(tmp + (size_t)i * inner, blk + (size_t)(((i - s) % S + S) % S) * inner, sizeof(float) * inner);
            memcpy(blk, tmp, sizeof(float) * (size_t)S * inner);
        }
    free(tmp);
    return 0;
}

int gate_cycle_apply(const TensorTable *tt, float *params, const ModelConfig *mc, int delta, const int *layer_mask,
                     char *err) {
    if (gate_cycle_check(mc, layer_mask, "--gate-cycle", NULL, err)) return -1;
    for (int l = 0; l < mc->n_layers; l++) {
        const ModelConfig lc = layer_config(mc, l);
        if (layer_mask ? !layer_mask[l] : !gate_cycle_default_layer(mc, l)) continue;
        const int W = lc.window, S = lc.stride;
        for (int br = 0; br < 2; br++)
            for (int kind = 0; kind < 2; kind++) {
                char name[TENSOR_NAME_LEN];
                snprintf(name, sizeof name, "model.layers.%d.self_attn.compressor.%s_gate.%s", l, br ? "v" : "k",
                         kind ? "bias" : "weight");
                int t = tensor_table_find(tt, name);
                if (t < 0) continue;             /* tied values, no bias: absent tensors */
                const TensorInfo *ti = &tt->t[t];
                if (ti->ndim < 2) return set_err(err, "%s: expected [G, W, ...], has %d dims", name, ti->ndim);
                int G = (int)ti->shape[0], A = (int)ti->shape[1];
                if (A != W) continue;            /* a map per block (deepseek) or per window (shared): unchanged */
                size_t inner = ti->numel / ((size_t)G * A);
                if (roll_blocks(params + ti->offset, G, A, S, inner, delta))
                    return set_err(err, "%s: out of memory for the roll's scratch (%zu floats)", name, (size_t)S * inner);
            }
    }
    return 0;
}

int knockout_parse_target(const ModelConfig *mc, const char *text, int *type, int *layer, int *head, int *kind,
                          uint8_t *mask, char *err) {
    const int L = mc->n_layers, G = mc->n_kv_heads;
    if (!strcmp(text, "all")) { *type = KO_TARGET_ALL; return 0; }
    const char *colon = strchr(text, ':');
    int k = -1;
    if (colon)
        for (int i = 0; layer_kind_names[i]; i++)
            if (strlen(layer_kind_names[i]) == (size_t)(colon - text) && !strncmp(text, layer_kind_names[i], (size_t)(colon - text))) k = i;
    if (k >= 0) {
        const char *h = colon + 1;
        long long v = -1;
        if (strcmp(h, "all") && optval_int(h, 0, G - 1, &v))
            return set_err(err, "--knockout: '%s' is not allowed: after %s: expected all or a KV head 0..%d", text, layer_kind_names[k], G - 1);
        int any = 0;
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++) {
                int on = layer_kind(mc, l) == k && (v < 0 || g == v);
                mask[(size_t)l * G + g] = (uint8_t)on;
                any |= on;
            }
        if (!any) return set_err(err, "--knockout: the checkpoint has no %s layer (layer_attention = %s)", layer_kind_names[k],
                                 mc->layer_attention[0] ? mc->layer_attention : "(none)");
        *type = KO_TARGET_KIND, *kind = k, *head = (int)v;
        return 0;
    }
    /* L:H, two decimal integers (no sign, no space), each parsed whole and range-checked: never a
     * wrap of 4294967297 to 1 */
    long long l, h;
    if (optval_pair(text, ':', &l, &h))
        return set_err(err, "--knockout: '%s' is not allowed: expected L:H (layer 0..%d, KV head 0..%d), KIND:all or KIND:H "
                       "(KIND a layer kind: full, compressed, window, csa, hca) or all", text, L - 1, G - 1);
    if (l >= L || h >= G)
        return set_err(err, "--knockout: KV head %s does not exist: the model has layers 0..%d and KV heads 0..%d", text, L - 1, G - 1);
    memset(mask, 0, (size_t)L * G);
    mask[l * G + h] = 1;
    *type = KO_TARGET_HEAD, *layer = (int)l, *head = (int)h;
    return 0;
}

int knockout_init(Knockout *k, const ModelConfig *mc, char *err) {
    memset(k, 0, sizeof *k);
    k->n_layers = mc->n_layers, k->H = mc->n_heads, k->G = mc->n_kv_heads, k->d = mc->head_dim;
    size_t n = (size_t)PROBE_N_PROTOCOLS * k->n_layers * k->H * k->d;
    k->sum = calloc(n, sizeof(double));
    k->mean = calloc(n, sizeof(float));
    if (!k->sum || !k->mean) { knockout_free(k); return set_err(err, "knockout: out of memory"); }
    return 0;
}

void knockout_free(Knockout *k) {
    free(k->sum);
    free(k->mean);
    k->sum = NULL, k->mean = NULL;
}

void knockout_before_batch(void *ctx, const int *protocol, int B) {
    Knockout *k = ctx;
    for (int b = 0; b < B && b < KO_MAX_BATCH; b++) k->protocol[b] = protocol[b];
}

void knockout_hook(void *ctx, int layer, float *z, int B, int H, int d) {
    Knockout *k = ctx;
    size_t Hd = (size_t)H * d;
    if (k->mode == KO_RECORD) {
        for (int b = 0; b < B; b++) {
            int p = k->protocol[b];
            double *s = k->sum + ((size_t)p * k->n_layers + layer) * Hd;
            for (size_t i = 0; i < Hd; i++) s[i] += z[(size_t)b * Hd + i];
            if (layer == 0) k->count[p]++;
        }
    } else if (k->mode == KO_REPLACE) {
        int group = H / k->G;
        for (int h = 0; h < k->G; h++) {
            if (k->targets ? !k->targets[(size_t)layer * k->G + h] : layer != k->layer || h != k->kv_head) continue;
            for (int b = 0; b < B; b++) {
                const float *mu = k->mean + ((size_t)k->protocol[b] * k->n_layers + layer) * Hd;
                for (int a = h * group; a < (h + 1) * group; a++)
                    memcpy(z + (size_t)b * Hd + (size_t)a * d, mu + (size_t)a * d, sizeof(float) * d);
            }
        }
    }
}

int knockout_finish_means(Knockout *k, const int *need, char *err) {
    size_t per = (size_t)k->n_layers * k->H * k->d;
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
        if (k->count[p] == 0) {
            if (need && need[p])
                return set_err(err, "--calib: the calibration set has no %s prompts, the evaluated set has; build it with the same tools/make-probe options",
                               probe_protocol_name(p));
            continue;
        }
        for (size_t i = 0; i < per; i++) k->mean[p * per + i] = (float)(k->sum[p * per + i] / (double)k->count[p]);
    }
    return 0;
}
