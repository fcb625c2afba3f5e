/* ./train --score CKPT --input FILE [--ids] [--period P] [--out FILE.h5] [--csv PREFIX]
 *                 [--micro-batch B] [section.key=value ...]
 *
 * Per-token log-probabilities of any token stream under a checkpoint, and their fold by phase
 * with bootstrap standard errors over the windows and the homogeneity test of trainer/loss_stats.h
 * (docs/spec.md §4.9, §4.8). The input is, by its content:
 *   - a token shard (data/shard.h, magic PHLTOKv1): its ids, whose tokenizer fingerprint must be
 *     the checkpoint's;
 *   - with --ids: decimal ids separated by spaces, commas or newlines (as --generate --prompt-ids);
 *   - otherwise text (UTF-8), encoded with the checkpoint's own tokenizer.json ("bytes" when the
 *     checkpoint was trained on the byte tokenizer); a checkpoint without a text tokenizer
 *     (synthetic ids) is refused with the way out (--ids or a shard).
 * The n tokens are cut into windows of T+1 tokens sharing one boundary token (§3.2; T =
 * data.seq_len), the last one padded when short, so that each of tokens 1..n-1 is scored exactly
 * once: token i = kT + t + 1 is predicted at position t of window k. Its log-probability is
 * -ell (natural log); its phase is t mod P, P = --period (default S for compressed attention, 8
 * for full attention: the probe's fold, trainer/probe_eval.h).
 *
 * Output: one group /score_NNN in FILE.h5 (default CKPT/score.h5; the crash-safe writer of
 * analysis/analysis_h5.h) holding the phase fold (nll, nll_errors, count [P]) as its signal and the
 * per-token arrays (token_id, logprob, window, position [n-1]); PREFIX_NNN.phase.csv (phase, tokens,
 * nll, se; last row "all") and PREFIX_NNN.tokens.csv (index, window, position, phase, token_id,
 * logprob), PREFIX defaulting to FILE.h5 without ".h5" and NNN the group's number, so that a later
 * call never replaces them (CKPT/score_000.phase.csv for /score_000 of CKPT/score.h5); both written
 * crash-safe. The fold and the
 * overall mean with its SE are printed. CKPT may be weights only (trainer/ckpt_source.h).
 * Exit: 0; 2 for bad input (one line naming the file and what was expected), nothing written;
 * 1 at runtime. */
#ifndef PHASELAB_SCORE_H
#define PHASELAB_SCORE_H
/* argv after "--score": CKPT [options] [section.key=value ...]; returns the exit status. */
int cmd_score(int argc, char **argv);
#endif
