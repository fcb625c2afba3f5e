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
 * every = 0: 1), against training FLOPs steps * batch_tokens * model_flops_per_token(c, T). */
#include "trainer/eval_cost.h"

#include <string.h>
#include "data/probe.h"
#include "common/errors.h"
#include "model/model.h"

double eval_forward_flops(const ModelConfig *mc, int L, int scored) {
    double cls = 2.0 * mc->d_model * mc->vocab_size;
    return L * (model_flops_per_token(mc, L) / 3.0 - cls) + scored * cls;
}

void print_eval_cost(FILE *f, const Config *cfg) {
    const ModelConfig *mc = &cfg->model;
    const int T = cfg->data.seq_len;
    long n_val = cfg->data.val[0] ? cfg->eval.val_tokens / T : 0;
    double val_tok = (double)n_val * T, val_fl = n_val * eval_forward_flops(mc, T, T);
    /* the probe set: from the file, else make-probe's defaults (1000 per residue, 24 residues, 2
     * protocols, 256 tokens) */
    long prompts = 0;
    int L = 0, nv = 1;
    const char *source = "none (eval.probe is empty)";
    char src[1200], err[ERR_LEN];
    if (cfg->eval.probe[0]) {
        ProbeSet *ps;
        if (probe_set_load(&ps, cfg->eval.probe, (uint32_t)mc->vocab_size, T, err) == 0) {
            prompts = probe_set_count(ps);
            L = probe_set_max_length(ps);
            nv = probe_set_scored_tokens(ps);
            probe_set_free(ps);
            snprintf(src, sizeof src, "%s", cfg->eval.probe);
        } else {
            prompts = 2L * 24 * 1000;
            L = T < 256 ? T : 256;
            snprintf(src, sizeof src, "%s not readable here; assumed tools/make-probe's default set", cfg->eval.probe);
        }
        source = src;
    }
    double rows = (double)prompts * nv;
    double pr_tok = rows * L, pr_fl = L ? rows * eval_forward_flops(mc, L, 1) : 0;
    double pad_tok = rows * T, pad_fl = prompts ? rows * eval_forward_flops(mc, T, 1) : 0;
    fprintf(f, "evaluation cost per eval (forward passes only):\n");
    fprintf(f, "  validation: %ld windows x %d tokens = %.4g tokens, %.4g FLOPs (at seq_len %d)\n", n_val, T, val_tok,
            val_fl, T);
    if (prompts)
        fprintf(f, "  probe (%s): %ld prompts x %d scored row%s at their own length %d = %.4g tokens, %.4g FLOPs "
                "(padded to seq_len %d it would be %.4g tokens, %.4g FLOPs: %.1fx)\n", source, prompts, nv, nv == 1 ? "" : "s",
                L, pr_tok, pr_fl, T, pad_tok, pad_fl, pr_fl > 0 ? pad_fl / pr_fl : 0.0);
    else
        fprintf(f, "  probe: %s\n", source);
    long every = cfg->eval.every, steps = cfg->train.steps;
    long n_eval = every > 0 ? steps / every + (steps % every != 0) : 1;
    double train_fl = (double)steps * cfg->train.batch_tokens * model_flops_per_token(mc, T);
    double per_eval = val_fl + pr_fl;
    double pct = train_fl > 0 ? 100.0 * per_eval * n_eval / train_fl : 0.0;
    double pct_pad = train_fl > 0 ? 100.0 * (val_fl + pad_fl) * n_eval / train_fl : 0.0;
    fprintf(f, "  per eval %.4g FLOPs; %ld evaluations over %ld steps = %.4g FLOPs, %.2f%% of the training FLOPs (%.4g; "
            "with the probe padded to seq_len: %.2f%%)\n", per_eval, n_eval, steps, per_eval * n_eval, pct, train_fl, pct_pad);
}
