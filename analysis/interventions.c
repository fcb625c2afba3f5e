/* Gate cycling (a roll of the gate tensors along their W axis) and KV-head knockout by mean
 * replacement (an attention hook at the scored positions); definitions in
 * analysis/interventions.h and docs/spec.md §4. */
#include "model/layer_kinds.h"
#include "analysis/interventions.h"

#include <stdlib.h>
#include <string.h>

#include "common/errors.h"

int gate_cycle_check(const ModelConfig *mc, const char *flag, char *err) {
    if (layer_schedule_mixed(mc))
        return set_err(err, "%s: the checkpoint has a mixed layer schedule (layer_attention = %s); gate cycling per layer kind "
                       "is not implemented yet", flag, mc->layer_attention);
    if (mc->attention != ATTN_COMPRESSED)
        return set_err(err, "%s: the checkpoint has full attention; gate cycling needs compressed attention (attention = compressed)", flag);
    if (mc->gate == GATE_UNIFORM)
        return set_err(err, "%s: the checkpoint has uniform gates (no gate maps or biases to cycle); needs gate = scalar or vector", flag);
    if (mc->window != mc->stride)
        return set_err(err, "%s: window W = %d differs from stride S = %d; gate cycling needs W = S (docs/spec.md §4)", flag,
                       mc->window, mc->stride);
    return 0;
}

/* np.roll(x, delta, axis=1) for x [G, A, inner], in place via a scratch copy. */
static void roll_axis1(float *x, int G, int A, size_t inner, int delta) {
    int s = ((delta % A) + A) % A;
    if (s == 0) return;
    float *tmp = malloc(sizeof(float) * (size_t)A * inner);
    for (int g = 0; g < G; g++) {
        float *blk = x + (size_t)g * A * inner;
        for (int i = 0; i < A; i++) memcpy(tmp + (size_t)i * inner, blk + (size_t)(((i - s) % A + A) % A) * inner, sizeof(float) * inner);
        memcpy(blk, tmp, sizeof(float) * (size_t)A * inner);
    }
    free(tmp);
}

int gate_cycle_apply(const TensorTable *tt, float *params, const ModelConfig *mc, int delta, const int *layer_mask,
                     char *err) {
    if (gate_cycle_check(mc, "--gate-cycle", err)) return -1;
    for (int l = 0; l < mc->n_layers; l++) {
        if (layer_mask && !layer_mask[l]) continue;
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
                size_t inner = ti->numel / ((size_t)G * A);
                roll_axis1(params + ti->offset, G, A, inner, delta);
            }
    }
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
    } else if (k->mode == KO_REPLACE && layer == k->layer) {
        int group = H / k->G;
        for (int b = 0; b < B; b++) {
            const float *mu = k->mean + ((size_t)k->protocol[b] * k->n_layers + layer) * Hd;
            for (int a = k->kv_head * group; a < (k->kv_head + 1) * group; a++)
                memcpy(z + (size_t)b * Hd + (size_t)a * d, mu + (size_t)a * d, sizeof(float) * d);
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
