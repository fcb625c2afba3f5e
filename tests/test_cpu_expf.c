/* The CPU backend's vectorizable expf (kernels/cpu/cpu_expf.h) against libm's expf (in double:
 * exp((double)x) rounded): at most 2 ulp over a dense grid of [-87.3, 88.3] and at the ends;
 * exactly 0 at -inf and below -87.34 (a masked score must add nothing to a softmax); 1 at 0;
 * NaN for NaN; and the same bits when called in a `omp simd` loop as one at a time. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "kernels/cpu/cpu_expf.h"
#include "tests/check.h"

static double ulp_err(float got, double want) {
    float w = (float)want;
    double ulp = nextafterf(w, INFINITY) - w;
    return fabs((double)got - want) / ulp;
}

int main(void) {
    double worst = 0, worst_x = 0;
    for (long i = 0; i <= 2000000; i++) {
        float x = -87.3f + (float)i * (175.6f / 2000000.0f);
        double e = ulp_err(cpu_expf(x), exp((double)x));
        if (e > worst) worst = e, worst_x = x;
    }
    check(worst <= 2.0, "cpu_expf within 2 ulp of exp on [-87.3, 88.3]", "%.2f ulp at x = %.9g", worst, worst_x);
    check(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-87.4f) == 0.0f && cpu_expf(-1000.0f) == 0.0f, "cpu_expf: 0 below -87.34 and at -inf",
          "%g %g", cpu_expf(-INFINITY), cpu_expf(-87.4f));
    check(cpu_expf(0.0f) == 1.0f && isnan(cpu_expf(NAN)) && isfinite(cpu_expf(1000.0f)), "cpu_expf: 1 at 0, NaN at NaN, finite above",
          "%g %g %g", cpu_expf(0.0f), cpu_expf(NAN), cpu_expf(1000.0f));
    enum { N = 1003 };
    float x[N], a[N], b[N];
    for (int i = 0; i < N; i++) x[i] = -60.0f + 0.1234f * i;
    #pragma omp simd
    for (int i = 0; i < N; i++) a[i] = cpu_expf(x[i]);
    for (int i = 0; i < N; i++) {
        volatile float xi = x[i];
        b[i] = cpu_expf(xi);
    }
    check(!memcmp(a, b, sizeof a), "cpu_expf: the 8-lane form gives the scalar bits", "differ");
    return check_failures ? 1 : 0;
}
