/* Inputs and targets of a data window (data/targets.h). */
#include <string.h>
#include "data/targets.h"
#include "data/synth.h"
#include "common/errors.h"

void window_targets(const int32_t *window, int T, int loss_targets, int32_t *targets) {
    if (loss_targets == LOSS_TARGETS_ANSWERS) synth_answer_targets(window, T, targets);
    else memcpy(targets, window + 1, sizeof(int32_t) * (size_t)T);
}

int loss_targets_check(int loss_targets, const char *glob, const char *fingerprint, char *err) {
    if (loss_targets == LOSS_TARGETS_ANSWERS && strcmp(fingerprint, SYNTH_FINGERPRINT) != 0)
        return set_err(err, "%s: [data] loss_targets = answers needs the synthetic corpus (./train --make-synthetic, "
                       "tokenizer fingerprint \"%s\"); these shards have \"%s\"", glob, SYNTH_FINGERPRINT,
                       fingerprint);
    return 0;
}
