/* The causal interventions of docs/spec.md §4 on a loaded model.
 *
 * Gate cycling by delta (docs/spec.md §4.1): in the chosen layers and both branches, with the
 * layer's own W and S (W = S, or W = 2S with the deepseek maps: a csa layer), every block of S
 * slots rolls by delta within itself,
 *     b~_{hS + i} = b_{hS + (i - delta) mod S}           h = 0 .. W/S - 1, i = 0 .. S-1
 * for `{k,v}_gate.bias` [G, W, c], and the same for `{k,v}_gate.weight` [G, A, c, D] when it has a
 * map per slot (A = W); a map shared by a whole block or window (deepseek A = 2, shared A = 1) is
 * unchanged. With W = S this is numpy's np.roll(x, delta, axis=1). Payloads and everything else
 * unchanged: a pure weight transform of the host copy of the parameters; delta = S is the identity.
 *
 * KV-head knockout by mean replacement: for layer l and KV head h, at the scored position of
 * each prompt only, the attention outputs z_{l,a} (before W_o) of the query heads a with
 * floor(a / (H/G)) = h are replaced by their mean over the scored positions of a calibration
 * probe set. Choice where docs/spec.md §4.2 is silent: the mean is taken per protocol (pp prompts are
 * replaced by the pp calibration mean, ip by the ip mean), "same protocol" read literally.
 * The means come from one clean pass over the calibration set with every layer recorded at
 * once (a layer's z depends only on the clean layers below it). */
#ifndef PHASELAB_INTERVENTIONS_H
#define PHASELAB_INTERVENTIONS_H
#include "data/probe.h"
#include "trainer/run_config.h"
#include "model/tensors.h"
#include <stdint.h>

/* 1 when layer l is cycled without --layers: every layer of a one-kind model, and on a mixed
 * schedule every layer with gates (layer_has_gates). */
int gate_cycle_default_layer(const ModelConfig *mc, int l);
/* 0 when gate cycling applies to the layers with layer_mask[l] != 0 (NULL: the
 * gate_cycle_default_layer ones), else -1 with err saying why (prefixed by flag). One
 * kind (no mixed schedule): compressed attention, gates, W = S. A mixed schedule (docs/spec.md §5):
 * each chosen layer compressed (csa, hca, compressed), with gates, and W = S or deepseek W = 2S.
 * *period (may be NULL): the least common multiple of the chosen layers' strides. */
int gate_cycle_check(const ModelConfig *mc, const int *layer_mask, const char *flag, int *period, char *err);
/* The layers --layers names: a comma list whose items are layer indices 0..L-1 or kind names
 * (csa, hca, ... : every layer of that kind); mask [L] gets 1 at each. -1 with err naming the bad
 * item and what was expected. */
int gate_cycle_layers(const ModelConfig *mc, const char *text, int *mask, char *err);
/* Rolls the gate maps and biases of the layers with layer_mask[l] != 0 (NULL: as gate_cycle_check)
 * by delta in params (host fp32, tensor-table layout), each layer within its own stride. Returns
 * 0, or -1 with err. */
int gate_cycle_apply(const TensorTable *tt, float *params, const ModelConfig *mc, int delta,
                     const int *layer_mask, char *err);

enum { KO_OFF = 0, KO_RECORD = 1, KO_REPLACE = 2 };
#define KO_MAX_BATCH 4096

typedef struct {
    int n_layers, H, G, d;
    int mode;                       /* KO_* */
    int layer, kv_head;             /* the head knocked out (KO_REPLACE, targets NULL) */
    const uint8_t *targets;         /* [L, G] or NULL: every (l, h) with targets[l*G + h] knocked out at once */
    double *sum;                    /* [PROBE_N_PROTOCOLS, L, H*d] (KO_RECORD) */
    long count[PROBE_N_PROTOCOLS];  /* rows recorded per protocol */
    float *mean;                    /* [PROBE_N_PROTOCOLS, L, H*d] */
    int protocol[KO_MAX_BATCH];     /* protocols of the rows of the current batch */
} Knockout;

/* --knockout's target: "all" (KO_TARGET_ALL), "L:H" (KO_TARGET_HEAD: *layer, *head), or
 * "KIND:all" / "KIND:H" with KIND a layer kind of the schedule (KO_TARGET_KIND: *kind; every KV
 * head, or KV head H, of every layer of that kind). mask [L*G] (KO_TARGET_HEAD and _KIND) gets
 * 1 at each knocked-out (l, h), 0 elsewhere. -1 with err (the option's message) on bad input. */
enum { KO_TARGET_ALL = 0, KO_TARGET_HEAD = 1, KO_TARGET_KIND = 2 };
int knockout_parse_target(const ModelConfig *mc, const char *text, int *type, int *layer, int *head, int *kind,
                          uint8_t *mask, char *err);

int knockout_init(Knockout *k, const ModelConfig *mc, char *err);
void knockout_free(Knockout *k);
/* ProbeBatchFn and ModelAttnHook to install (ctx = the Knockout). */
void knockout_before_batch(void *ctx, const int *protocol, int B);
void knockout_hook(void *ctx, int layer, float *z, int B, int H, int d);
/* After a KO_RECORD pass: mean = sum / count. -1 with err when a protocol has no rows but
 * need[p] is set. */
int knockout_finish_means(Knockout *k, const int *need, char *err);
#endif
