/* The cost of one evaluation (validation loss + lookup probe), as ./train --dry-run states it
 * (issue 18). See trainer/eval_cost.c for the formulas. */
#ifndef PHASELAB_EVAL_COST_H
#define PHASELAB_EVAL_COST_H
#include <stdio.h>
#include "trainer/run_config.h"

/* Forward FLOPs of one sequence of L tokens with the logits computed at `scored` rows only
 * (scored = L: the validation loss; 1 or nv: a probe prompt). */
double eval_forward_flops(const ModelConfig *mc, int L, int scored);

/* Prints the evaluation cost per eval and over the run: validation (windows, tokens, FLOPs at
 * seq_len), probe (prompts, tokens and FLOPs at the prompt's length, and what padding to
 * seq_len would cost), evaluations per run and their share of the training FLOPs. The probe
 * figures come from eval.probe when it can be read, else from tools/make-probe's defaults
 * (said so). */
void print_eval_cost(FILE *f, const Config *cfg);
#endif
