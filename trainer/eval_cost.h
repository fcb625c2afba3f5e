/* The cost of one evaluation (validation loss + lookup probe), as ./train --dry-run states it
 * (issue 18), and the FLOPs of a whole run (training steps at each stage's length plus its
 * evaluations) behind --dry-run's wall-time estimate. See trainer/eval_cost.c for the formulas. */
#ifndef PHASELAB_EVAL_COST_H
#define PHASELAB_EVAL_COST_H
#include <stdio.h>
#include "trainer/run_config.h"

/* Forward FLOPs of one sequence of L tokens with the logits computed at `scored` rows only
 * (scored = L: the validation loss; 1 or nv: a probe prompt). */
double eval_forward_flops(const ModelConfig *mc, int L, int scored);

/* One evaluation: validation windows and their FLOPs at seq_len; the probe's prompts, scored
 * rows and FLOPs at the prompt's length (and padded to seq_len). */
typedef struct {
    long val_windows;
    double val_tokens, val_flops;
    long prompts;                /* 0: no probe */
    int prompt_len, scored;      /* longest prompt; scored rows per prompt (1 lookup, nv needle) */
    double probe_tokens, probe_flops, padded_tokens, padded_flops;
    char source[1200];           /* where the probe figures come from */
} EvalCost;
/* The probe figures come from eval.probe when it can be read, else from tools/make-probe's
 * defaults (said so in source). */
void eval_cost_of(const Config *cfg, EvalCost *c);

/* Evaluations a run makes after step first_step: at every multiple of eval.every up to
 * train.steps and at the last step (eval.every = 0: the last step only). */
long run_evaluations(const Config *cfg, long first_step);
/* Training FLOPs (forward + backward) of the steps first_step .. train.steps - 1: each step
 * Bg = batch_tokens / seq_len rows at its stage's length T_j (data.train_seq_len, data.stages),
 * Bg * T_j * model_flops_per_token(T_j). */
double run_train_flops(const Config *cfg, long first_step);

/* Prints the evaluation cost per eval and over the run: validation (windows, tokens, FLOPs at
 * seq_len), probe (prompts, tokens and FLOPs at the prompt's length, and what padding to
 * seq_len would cost), evaluations per run and their share of the training FLOPs. */
void print_eval_cost(FILE *f, const Config *cfg);

/* Prints the wall-time estimate of the steps first_step .. train.steps - 1 and their
 * evaluations at flops_per_s (rate_text says where that rate comes from): training FLOPs / rate
 * + evaluation FLOPs / rate, for one rank (checkpoint writes and start-up not included). */
void print_run_estimate(FILE *f, const Config *cfg, long first_step, double flops_per_s, const char *rate_text);
#endif
