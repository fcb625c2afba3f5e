/* The words of the [model] enum keys (model/model_config.h) and the parser of model.head_strides, indexed by their value
 * (kernels/variants.h): the one spelling the config parser accepts (trainer/run_config.c) and
 * every writer prints (summary, HF export, cache report). */
#include "model/model_config.h"
#include "common/errors.h"
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>

const char *const config_attention_names[] = {"full", "compressed", NULL};             /* ATTN_* */
const char *const config_gate_names[] = {"scalar", "vector", "uniform", NULL};         /* GATE_* */
const char *const config_local_names[] = {"window", "tail", NULL};                     /* LOCAL_* */
const char *const config_compressor_names[] = {"paper", "deepseek", "shared", NULL};   /* COMPRESSOR_* */
const char *const config_grid_names[] = {"aligned", "staggered", NULL};                /* GRID_* */
const char *const config_boundaries_names[] = {"grid", "learned", NULL};              /* BOUNDARIES_* */

int config_head_strides(const ModelConfig *m, int *out, char *err) {
    const char *p = m->head_strides;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    int n = 0, lo = 0;
    for (;;) {
        char *end = (char *)p;
        while (isspace((unsigned char)*p)) p++;
        long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
        if (v < 0 || end == p)
            return set_err(err, "head_strides = '%s': item %d is not a positive integer; expected S_0,S_1,... one "
                           "stride per KV head, each 1..window", m->head_strides, n + 1);
        if (n == HEAD_STRIDES_MAX)
            return set_err(err, "head_strides names more than %d strides; at most %d KV heads take their own stride",
                           HEAD_STRIDES_MAX, HEAD_STRIDES_MAX);
        if (v < 1 || v > m->window)
            return set_err(err, "head_strides item %d = %ld with window = %d; every head's stride must be 1..window",
                           n + 1, v, m->window);
        out[n++] = (int)v;
        if (!lo || v < lo) lo = (int)v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        if (*p++ != ',')
            return set_err(err, "head_strides = '%s': expected a comma after item %d (S_0,S_1,... one stride per "
                           "KV head)", m->head_strides, n);
    }
    if (n != m->n_kv_heads)
        return set_err(err, "head_strides names %d strides with n_kv_heads = %d; expected one stride per KV head",
                       n, m->n_kv_heads);
    if (m->stride != lo)
        return set_err(err, "head_strides = %s with stride = %d; stride must be the smallest head stride (%d), "
                       "which sets the buffers' window rows and the summary's S", m->head_strides, m->stride, lo);
    return n;
}
