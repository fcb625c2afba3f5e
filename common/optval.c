/* Command-line option values (definitions and syntax in common/optval.h): integers are read
 * digit by digit with an exact overflow check (no strtol: it takes signs and spaces, and wraps
 * "-1" to 2^64 - 1 in strtoull), numbers through strtod with every non-finite, out-of-range and
 * subnormal result refused. */
#include "common/optval.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The n characters at s as a decimal integer <= max: 0, or -1 when they are not all digits, n is
 * 0, or the value exceeds max. */
static int digits_value(const char *s, size_t n, unsigned long long max, unsigned long long *out) {
    if (n == 0) return -1;
    unsigned long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > max / 10 || (v == max / 10 && d > max % 10)) return -1;     /* v * 10 + d > max */
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int optval_int(const char *s, long long lo, long long hi, long long *out) {
    unsigned long long v;
    if (lo < 0 || hi < lo || digits_value(s, strlen(s), (unsigned long long)hi, &v) || (long long)v < lo) return -1;
    *out = (long long)v;
    return 0;
}

int optval_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    unsigned long long v;
    if (hi < lo || digits_value(s, strlen(s), hi, &v) || v < lo) return -1;
    *out = (uint64_t)v;
    return 0;
}

int optval_double(const char *s, double lo, double hi, double *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || (v != 0 && fabs(v) < DBL_MIN) || !(v >= lo && v <= hi)) return -1;
    *out = v == 0 ? 0.0 : v;                             /* "-0" is 0 */
    return 0;
}

int optval_pair(const char *s, char sep, long long *a, long long *b) {
    const char *mid = strchr(s, sep);
    unsigned long long x, y;
    if (!mid || digits_value(s, (size_t)(mid - s), INT_MAX, &x) || digits_value(mid + 1, strlen(mid + 1), INT_MAX, &y)) return -1;
    *a = (long long)x, *b = (long long)y;
    return 0;
}

int optval_index_list(const char *s, int n, int *mask, const char **bad, size_t *bad_len) {
    if (n < 1) {
        if (bad) *bad = s;
        if (bad_len) *bad_len = strcspn(s, ",");
        return -1;
    }
    for (const char *p = s;;) {
        size_t len = strcspn(p, ",");
        unsigned long long v;
        if (digits_value(p, len, (unsigned long long)n - 1, &v)) {
            if (bad) *bad = p;
            if (bad_len) *bad_len = len;
            return -1;
        }
        mask[v] = 1;
        if (!p[len]) return 0;
        p += len + 1;
    }
}
