/* Learning-rate schedule values against hand-computed numbers: warm-up lr*(s+1)/warmup, then a
 * cosine from lr to min_lr that ends exactly at min_lr on the last step. */
#include <math.h>
#include "tests/check.h"
#include "trainer/schedule.h"

int main(void) {
    const long steps = 110, warm = 10;
    const double lr = 1e-3, mn = 1e-4;
    check(fabs(lr_at_step(0, steps, warm, lr, mn) - 1e-4) < 1e-15, "warm-up first step is lr/warmup", "%g",
          lr_at_step(0, steps, warm, lr, mn));
    check(fabs(lr_at_step(4, steps, warm, lr, mn) - 5e-4) < 1e-15, "warm-up is linear", "%g", lr_at_step(4, steps, warm, lr, mn));
    check(fabs(lr_at_step(10, steps, warm, lr, mn) - lr) < 1e-15, "peak right after warm-up", "%g", lr_at_step(10, steps, warm, lr, mn));
    /* steps 10..109: p = (s-10)/99; the middle p = 0.5 is s = 59.5, so check s = 109 and a quarter point */
    check(fabs(lr_at_step(109, steps, warm, lr, mn) - mn) < 1e-15, "last step reaches min_lr", "%g",
          lr_at_step(109, steps, warm, lr, mn));
    double q = mn + (lr - mn) * 0.5 * (1 + cos(M_PI * 33.0 / 99.0));
    check(fabs(lr_at_step(43, steps, warm, lr, mn) - q) < 1e-15, "cosine value at p = 1/3", "%g vs %g",
          lr_at_step(43, steps, warm, lr, mn), q);
    int mono = 1;
    for (long s = 11; s < steps; s++) mono &= lr_at_step(s, steps, warm, lr, mn) <= lr_at_step(s - 1, steps, warm, lr, mn);
    check(mono, "cosine decays monotonically", "not monotone");
    check(fabs(lr_at_step(0, 5, 0, lr, mn) - lr) < 1e-15, "no warm-up starts at lr", "%g", lr_at_step(0, 5, 0, lr, mn));
    return check_exit_code();
}
