/* Learning-rate schedule: linear warm-up from lr/warmup to lr over warmup_steps, then cosine
 * decay to min_lr at the last step:
 *   s < warmup:  lr * (s + 1) / warmup
 *   else:        min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (s - warmup) / max(1, steps - warmup - 1)
 * s is the 0-based index of the optimizer step about to be taken. */
#ifndef PHASELAB_SCHEDULE_H
#define PHASELAB_SCHEDULE_H
double lr_at_step(long step, long total_steps, long warmup_steps, double lr, double min_lr);
#endif
