/* KV-cache accounting for incremental decoding (model/decode.h), printed by `./train --dry-run`
 * and `./train --generate`: bytes per layer and in total for given context lengths, for this
 * model and for full attention of the same shape (attention = full, every other key equal),
 * each figure both from the formula (decode_cache_layout) and measured from the allocations the
 * decoder makes (decode_cache_measure on a backend that only counts the bytes it is asked for). */
#ifndef PHASELAB_CACHE_REPORT_H
#define PHASELAB_CACHE_REPORT_H
#include <stddef.h>
#include <stdio.h>
#include "trainer/run_config.h"
/* One table over contexts[0..n), elements of elem_bytes (2: bf16 on CUDA, 4: fp32 on the CPU).
 * Returns 0, or -1 when a measured figure differs from the formula (it says so in the table). */
int print_cache_report(FILE *f, const ModelConfig *mc, const long *contexts, int n, size_t elem_bytes);
/* "12.34 MiB" */
void cache_human_bytes(double bytes, char *out, int len);
#endif
