/* The one monotonic clock of the code base: seconds since an arbitrary fixed point
 * (CLOCK_MONOTONIC), for durations, rates and deadlines; never for dates. */
#ifndef PHASELAB_CLOCK_H
#define PHASELAB_CLOCK_H
#include <time.h>

static inline double clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
