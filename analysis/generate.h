/* ./train --generate: text generation from a checkpoint through the incremental decoder
 * (model/decode.h), and the lookup probe scored through the same path (./train --eval --decode). */
#ifndef PHASELAB_GENERATE_H
#define PHASELAB_GENERATE_H
#include <stdint.h>
#include <stdio.h>
#include "data/probe.h"
#include "trainer/probe_eval.h"
struct Model;
/* argv after "--generate": CKPT [options] [section.key=value ...]; returns the exit status. */
int cmd_generate(int argc, char **argv);
/* The prompt ids of --prompt-ids FILE, read from f (path names it in errors): non-negative
 * decimal integers (each at most INT32_MAX, leading zeros allowed) separated by spaces, tabs,
 * newlines, CRs or commas; anything else is an error naming the line. Returns 0 with *ids
 * (malloc'd, NULL when there are none) and *n (may be 0), or -1 with err. */
int prompt_ids_read(FILE *f, const char *path, int32_t **ids, int *n, char *err);
/* Scores every prompt of ps like probe_evaluate, but each prompt is prefilled token by token
 * into a KV cache and the answer is the argmax of the decoder's logits at the query position.
 * *tokens_per_s (may be NULL) receives the decode throughput. Returns 0, or -1 with err. */
int probe_evaluate_decode(struct Model *m, const ProbeSet *ps, ProbeResult *res, double *tokens_per_s, char *err);
#endif
