/* Evaluation cost per eval (trainer/eval_cost.h).
 *
 * model_flops_per_token(c, L) is 3 x the forward FLOPs per token at length L (the mean over the
 * L positions of the attention's visible keys), classifier 2 D V included. One forward of a
 * sequence of L tokens with the logits at `scored` rows costs
 *     F(L, scored) = L (model_flops_per_token(c, L) / 3 - 2 D V) + scored * 2 D V.
 * Validation: n_val = floor(eval.val_tokens / T) windows of T tokens, F(T, T) each.
 * Probe: every prompt of length L scores nv rows (1 lookup, nv needle), each row one sequence
 * (probe_eval.c): n_prompts * nv * F(L, 1) at the prompt's length; padded to T (the evaluation
 * before issue 18) n_prompts * nv * F(T, 1).
 * Evaluations per run: floor(steps / every) (+1 for the last step when it is not a multiple;
 * every = 0: 1), against the training FLOPs: per step Bg = batch_tokens / T rows at the step's
 * stage length T_j, Bg T_j model_flops_per_token(c, T_j) (T_j = T without stages).
 * Wall time (print_run_estimate): (training FLOPs + evaluation FLOPs) / an assumed rate, the
 * caller's (./train --dry-run: a matmul timed on the backend, scaled by the step's efficiency). */
#include "trainer/eval_cost.h"

#include <string.h>
#include "common/log.h"
#include "data/probe.h"
#include "data/train_stages.h"
#include "common/errors.h"
#include "model/model.h"

double eval_forward_flops(const ModelConfig *mc, int L, int scored) {
    double cls = 2.0 * mc->d_model * mc->vocab_size;
    return L * (model_flops_per_token(mc, L) / 3.0 - cls) + scored * cls;
}

void eval_cost_of(const Config *cfg, EvalCost *c) {
    const ModelConfig *mc = &cfg->model;
    const int T = cfg->data.seq_len;
    memset(c, 0, sizeof *c);
    c->val_windows = cfg->data.val[0] ? cfg->eval.val_tokens / T : 0;
    c->val_tokens = (double)c->val_windows * T;
    c->val_flops = c->val_windows * eval_forward_flops(mc, T, T);
    /* the probe set: from the file, else make-probe's defaults (1000 per residue, 24 residues, 2
     * protocols, 256 tokens) */
    c->scored = 1;
    snprintf(c->source, sizeof c->source, "none (eval.probe is empty)");
    if (cfg->eval.probe[0]) {
        ProbeSet *ps;
        char err[ERR_LEN];
        if (probe_set_load(&ps, cfg->eval.probe, (uint32_t)mc->vocab_size, T, err) == 0) {
            c->prompts = probe_set_count(ps);
            c->prompt_len = probe_set_max_length(ps);
            c->scored = probe_set_scored_tokens(ps);
            probe_set_free(ps);
            snprintf(c->source, sizeof c->source, "%s", cfg->eval.probe);
        } else {
            c->prompts = 2L * 24 * 1000;
            c->prompt_len = T < 256 ? T : 256;
            snprintf(c->source, sizeof c->source, "%.1000s not readable here; assumed tools/make-probe's default set",
                     cfg->eval.probe);
        }
    }
    double rows = (double)c->prompts * c->scored;
    c->probe_tokens = rows * c->prompt_len;
    c->probe_flops = c->prompt_len ? rows * eval_forward_flops(mc, c->prompt_len, 1) : 0;
    c->padded_tokens = rows * T;
    c->padded_flops = c->prompts ? rows * eval_forward_flops(mc, T, 1) : 0;
}

long run_evaluations(const Config *cfg, long first_step) {
    long every = cfg->eval.every, steps = cfg->train.steps;
    if (first_step >= steps) return 0;
    if (every <= 0) return 1;
    return steps / every - first_step / every + (steps % every != 0);
}

double run_train_flops(const Config *cfg, long first_step) {
    const int T = cfg->data.seq_len;
    const double Bg = (double)(cfg->train.batch_tokens / T);
    TrainStageSpec spec[TRAIN_STAGES_MAX];
    int n = 0;
    char why[ERR_LEN];
    if (train_stages_parse(cfg->data.stages, spec + 1, &n, why)) n = 0;   /* the config loader rejects it */
    n += 1;
    spec[0].first_step = 0;
    spec[0].seq_len = cfg->data.train_seq_len;
    double total = 0;
    for (int j = 0; j < n; j++) {
        long lo = spec[j].first_step, hi = j + 1 < n ? spec[j + 1].first_step : cfg->train.steps;
        if (lo < first_step) lo = first_step;
        if (hi > cfg->train.steps) hi = cfg->train.steps;
        if (hi <= lo) continue;
        int Tj = spec[j].seq_len > 0 ? spec[j].seq_len : T;
        total += (double)(hi - lo) * Bg * Tj * model_flops_per_token(&cfg->model, Tj);
    }
    return total;
}

void print_run_estimate(FILE *f, const Config *cfg, long first_step, double flops_per_s, const char *rate_text) {
    EvalCost c;
    eval_cost_of(cfg, &c);
    long steps = cfg->train.steps, n_eval = run_evaluations(cfg, first_step);
    double train_fl = run_train_flops(cfg, first_step), eval_fl = n_eval * (c.val_flops + c.probe_flops);
    fprintf(f, "wall-time estimate (modelled from FLOPs, not timed): ");
    if (first_step >= steps) {
        fprintf(f, "none: the run is already at step %ld of %ld\n", first_step, steps);
        return;
    }
    if (!(flops_per_s > 0)) {
        fprintf(f, "unavailable (%s)\n", rate_text);
        return;
    }
    char tt[32], te[32], tall[32];
    format_duration(train_fl / flops_per_s, tt, sizeof tt);
    format_duration(eval_fl / flops_per_s, te, sizeof te);
    format_duration((train_fl + eval_fl) / flops_per_s, tall, sizeof tall);
    fprintf(f, "%s (%.3g s) on one rank (about 1/N of it on N ranks)\n", tall, (train_fl + eval_fl) / flops_per_s);
    fprintf(f, "  training: steps %ld..%ld, %.4g FLOPs (model_flops_per_token x tokens, at each stage's length) = %s\n",
            first_step + 1, steps, train_fl, tt);
    fprintf(f, "  evaluation: %ld evaluation%s x %.4g FLOPs (forward only) = %.4g FLOPs = %s\n", n_eval,
            n_eval == 1 ? "" : "s", c.val_flops + c.probe_flops, eval_fl, te);
    fprintf(f, "  assumed rate: %.4g FLOP/s, %s; checkpoint writes and start-up not included\n", flops_per_s, rate_text);
}

void print_eval_cost(FILE *f, const Config *cfg) {
    const int T = cfg->data.seq_len;
    EvalCost c;
    eval_cost_of(cfg, &c);
    long n_val = c.val_windows, prompts = c.prompts;
    int L = c.prompt_len, nv = c.scored;
    double val_tok = c.val_tokens, val_fl = c.val_flops, pr_tok = c.probe_tokens, pr_fl = c.probe_flops,
           pad_tok = c.padded_tokens, pad_fl = c.padded_flops;
    const char *source = c.source;
    fprintf(f, "evaluation cost per eval (forward passes only):\n");
    fprintf(f, "  validation: %ld windows x %d tokens = %.4g tokens, %.4g FLOPs (at seq_len %d)\n", n_val, T, val_tok,
            val_fl, T);
    if (prompts)
        fprintf(f, "  probe (%s): %ld prompts x %d scored row%s at their own length %d = %.4g tokens, %.4g FLOPs "
                "(padded to seq_len %d it would be %.4g tokens, %.4g FLOPs: %.1fx)\n", source, prompts, nv, nv == 1 ? "" : "s",
                L, pr_tok, pr_fl, T, pad_tok, pad_fl, pr_fl > 0 ? pad_fl / pr_fl : 0.0);
    else
        fprintf(f, "  probe: %s\n", source);
    long steps = cfg->train.steps;
    long n_eval = run_evaluations(cfg, 0);
    double train_fl = run_train_flops(cfg, 0);
    double per_eval = val_fl + pr_fl;
    double pct = train_fl > 0 ? 100.0 * per_eval * n_eval / train_fl : 0.0;
    double pct_pad = train_fl > 0 ? 100.0 * (val_fl + pad_fl) * n_eval / train_fl : 0.0;
    fprintf(f, "  per eval %.4g FLOPs; %ld evaluations over %ld steps = %.4g FLOPs, %.2f%% of the training FLOPs (%.4g; "
            "with the probe padded to seq_len: %.2f%%)\n", per_eval, n_eval, steps, per_eval * n_eval, pct, train_fl, pct_pad);
}
