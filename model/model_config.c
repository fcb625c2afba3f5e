/* The words of the [model] enum keys (model/model_config.h), indexed by their value
 * (kernels/variants.h): the one spelling the config parser accepts (trainer/run_config.c) and
 * every writer prints (summary, HF export, cache report). */
#include "model/model_config.h"
#include <stddef.h>

const char *const config_attention_names[] = {"full", "compressed", NULL};             /* ATTN_* */
const char *const config_gate_names[] = {"scalar", "vector", "uniform", NULL};         /* GATE_* */
const char *const config_local_names[] = {"window", "tail", NULL};                     /* LOCAL_* */
const char *const config_compressor_names[] = {"paper", "deepseek", "shared", NULL};   /* COMPRESSOR_* */
const char *const config_grid_names[] = {"aligned", "staggered", NULL};                /* GRID_* */
