/* The causal interventions of docs/spec.md §4 on a loaded model.
 *
 * Gate cycling by delta (needs W = S): in the chosen layers and both branches,
 *     Z~_i = Z_{(i - delta) mod W},  b~_i = b_{(i - delta) mod W}
 * for `{k,v}_gate.weight` [G, W, c, D] and `{k,v}_gate.bias` [G, W, c], i.e. numpy's
 * np.roll(x, delta, axis=1); payloads and everything else unchanged. A pure weight transform
 * applied to the host copy of the parameters. delta = W is the identity (a roll by W).
 * With compressor = shared the weight's W axis has length 1 (the roll leaves it unchanged) and
 * only the bias rolls.
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

/* 0 when gate cycling applies to this config, else -1 with err saying why (prefixed by flag). */
int gate_cycle_check(const ModelConfig *mc, const char *flag, char *err);
/* Rolls the gate maps and biases of the layers with layer_mask[l] != 0 (NULL: all) by delta in
 * params (host fp32, tensor-table layout). Returns 0, or -1 with err. */
int gate_cycle_apply(const TensorTable *tt, float *params, const ModelConfig *mc, int delta,
                     const int *layer_mask, char *err);

enum { KO_OFF = 0, KO_RECORD = 1, KO_REPLACE = 2 };
#define KO_MAX_BATCH 4096

typedef struct {
    int n_layers, H, G, d;
    int mode;                       /* KO_* */
    int layer, kv_head;             /* the head knocked out (KO_REPLACE) */
    double *sum;                    /* [PROBE_N_PROTOCOLS, L, H*d] (KO_RECORD) */
    long count[PROBE_N_PROTOCOLS];  /* rows recorded per protocol */
    float *mean;                    /* [PROBE_N_PROTOCOLS, L, H*d] */
    int protocol[KO_MAX_BATCH];     /* protocols of the rows of the current batch */
} Knockout;

int knockout_init(Knockout *k, const ModelConfig *mc, char *err);
void knockout_free(Knockout *k);
/* ProbeBatchFn and ModelAttnHook to install (ctx = the Knockout). */
void knockout_before_batch(void *ctx, const int *protocol, int B);
void knockout_hook(void *ctx, int layer, float *z, int B, int H, int d);
/* After a KO_RECORD pass: mean = sum / count. -1 with err when a protocol has no rows but
 * need[p] is set. */
int knockout_finish_means(Knockout *k, const int *need, char *err);
#endif
