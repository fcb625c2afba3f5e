/* Inputs and targets: which tokens of a data window a model reads and which next tokens a loss
 * counts. A window of data/loader.h holds T + 1 tokens; the model reads window[0..T-1] and the
 * target of position t is window[t+1] where it counts, -1 (the kernels' ignored target) where
 * it does not. One rule for the training loss and the validation loss alike. */
#ifndef PHASELAB_TARGETS_H
#define PHASELAB_TARGETS_H
#include <stdint.h>

/* data.loss_targets. all: every next-token target. answers: only the value after a query key
 * of the synthetic corpus (data/synth.h, synth_answer_targets), in the training loss and the
 * validation loss alike; the lookup probe is unaffected. */
enum { LOSS_TARGETS_ALL = 0, LOSS_TARGETS_ANSWERS = 1 };

/* The one rule for the targets a loss counts (data.loss_targets, LOSS_TARGETS_*), used by the
 * training step and the validation loss: window [T+1] (a window of data/loader.h) -> targets
 * [T], window[t+1] where the target counts, -1 where it does not (kernels' ignored target). */
void window_targets(const int32_t *window, int T, int loss_targets, int32_t *targets);
/* loss_targets = answers needs shards of the synthetic corpus (tokenizer fingerprint
 * "synthetic"): error naming the data glob and its fingerprint otherwise. */
int loss_targets_check(int loss_targets, const char *glob, const char *fingerprint, char *err);
#endif
