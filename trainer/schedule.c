/* Learning-rate schedule (formula in trainer/schedule.h). */
#include <math.h>
#include "trainer/schedule.h"

double lr_at_step(long step, long total_steps, long warmup_steps, double lr, double min_lr) {
    if (step < warmup_steps) return lr * (double)(step + 1) / (double)warmup_steps;
    long span = total_steps - warmup_steps - 1;
    if (span < 1) span = 1;
    double p = (double)(step - warmup_steps) / (double)span;
    if (p > 1.0) p = 1.0;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p));
}
