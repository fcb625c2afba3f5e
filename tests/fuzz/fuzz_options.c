/* libFuzzer harness: command-line option values (common/optval.c: optval_int, optval_u64,
 * optval_double, optval_pair, optval_index_list), the one parser behind every numeric option
 * of the programs: --max-new, --top-k, --context, --seed, --temperature (--generate);
 * --gate-cycle DELTA, --knockout L:H, --layers I,J,... (the analyses); --seq-len, --train-rows,
 * --seed, --long-fraction, ... (--make-synthetic); --threads, --steps (--bench); ./tokenize's
 * --shard-tokens, --vocab-size, ...
 *
 * Input: the option value (the bytes up to the first NUL, as argv would hold it). Each parser is
 * called with the ranges the programs use, and beyond sanitizer reports the harness aborts on
 * a broken property:
 *   - integers, pairs and lists agree with a reference written here from the documented syntax
 *     (decimal digits only, leading zeros allowed, exact value compared against the range; a pair
 *     split at the first separator; a list split at every comma, no element empty): the same
 *     inputs accepted, the same values;
 *   - a value accepted lies in its stated range (integers, numbers; every list index < n);
 *   - re-printing an accepted value and parsing it again gives the same value (integers also
 *     with leading zeros added; numbers printed with %.17g give the same double).
 * A rejected value is the normal outcome. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/optval.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_options: "); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

/* Reference: the n characters at s as a decimal number; 1 = all digits (n >= 1) with *v its value,
 * *big = 1 when the value exceeds 2^64 - 1 (then *v is meaningless). 0 = not a digit string. */
static int ref_digits(const char *s, size_t n, unsigned long long *v, int *big) {
    if (n == 0) return 0;
    unsigned __int128 x = 0;
    *big = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        if (!*big) {
            x = x * 10 + (unsigned)(s[i] - '0');
            if (x > UINT64_MAX) *big = 1;
        }
    }
    *v = (unsigned long long)x;
    return 1;
}

/* The ranges of the programs' integer options (lo >= 0 everywhere). */
static const long long int_ranges[][2] = {
    {0, 1LL << 30},        /* --max-new */
    {1, 1LL << 30},        /* --context */
    {0, INT_MAX},          /* --top-k; a layer or head of --knockout */
    {0, 4},                /* --gate-cycle at W = 4 */
    {0, 65536},            /* --gate-cycle at the largest W */
    {1, 1 << 22},          /* --seq-len, --row-tokens */
    {1, 1LL << 40},        /* --train-rows, --val-rows */
    {0, LLONG_MAX},        /* --seed (make-synthetic) */
    {1, 4096},             /* --bench --threads */
    {0, 0},
    {7, 7},
};
static const uint64_t u64_ranges[][2] = {
    {0, UINT64_MAX},                         /* --generate --seed */
    {1, (uint64_t)1 << 40},                  /* --shard-tokens, --max-doc-bytes (from 4096) */
    {0, (uint64_t)1 << 50},                  /* --val-tokens */
    {1, 256},                                /* ./tokenize --threads */
    {1, UINT32_MAX},                         /* --vocab-size */
    {4096, (uint64_t)1 << 40},
};
static const double dbl_ranges[][2] = {{0, 1}, {0, 1e6}, {-1e300, 1e300}};
static const int list_sizes[] = {1, 2, 300, 1024};

static void check_int(const char *s) {
    size_t n = strlen(s);
    unsigned long long rv;
    int big = 0, digits = ref_digits(s, n, &rv, &big);
    for (size_t r = 0; r < sizeof int_ranges / sizeof int_ranges[0]; r++) {
        long long lo = int_ranges[r][0], hi = int_ranges[r][1], v = -1;
        int ok = optval_int(s, lo, hi, &v) == 0;
        int want = digits && !big && rv >= (unsigned long long)lo && rv <= (unsigned long long)hi;
        if (ok != want) FAIL("optval_int('%s', %lld, %lld) = %s, the reference %s", s, lo, hi, ok ? "accepted" : "refused", want ? "accepts" : "refuses");
        if (!ok) continue;
        if ((unsigned long long)v != rv || v < lo || v > hi) FAIL("optval_int('%s', %lld, %lld) = %lld, expected %llu", s, lo, hi, v, rv);
        char buf[48];
        long long again = -1;
        snprintf(buf, sizeof buf, "%lld", v);
        if (optval_int(buf, lo, hi, &again) || again != v) FAIL("optval_int: %lld re-printed as '%s' does not parse back", v, buf);
        snprintf(buf, sizeof buf, "000%lld", v);
        if (optval_int(buf, lo, hi, &again) || again != v) FAIL("optval_int: %lld with leading zeros '%s' does not parse back", v, buf);
    }
}

static void check_u64(const char *s) {
    size_t n = strlen(s);
    unsigned long long rv;
    int big = 0, digits = ref_digits(s, n, &rv, &big);
    for (size_t r = 0; r < sizeof u64_ranges / sizeof u64_ranges[0]; r++) {
        uint64_t lo = u64_ranges[r][0], hi = u64_ranges[r][1], v = 0;
        int ok = optval_u64(s, lo, hi, &v) == 0;
        int want = digits && !big && rv >= lo && rv <= hi;
        if (ok != want) FAIL("optval_u64('%s', %llu, %llu) = %s, the reference %s", s, (unsigned long long)lo, (unsigned long long)hi,
                             ok ? "accepted" : "refused", want ? "accepts" : "refuses");
        if (!ok) continue;
        if (v != rv || v < lo || v > hi) FAIL("optval_u64('%s') = %llu, expected %llu", s, (unsigned long long)v, rv);
        char buf[48];
        uint64_t again = 0;
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        if (optval_u64(buf, lo, hi, &again) || again != v) FAIL("optval_u64: %s does not parse back", buf);
    }
}

static void check_double(const char *s) {
    for (size_t r = 0; r < sizeof dbl_ranges / sizeof dbl_ranges[0]; r++) {
        double lo = dbl_ranges[r][0], hi = dbl_ranges[r][1], v = NAN;
        if (optval_double(s, lo, hi, &v)) continue;
        if (!isfinite(v) || v < lo || v > hi) FAIL("optval_double('%s', %g, %g) = %g: outside the range", s, lo, hi, v);
        if (v != 0 && fabs(v) < DBL_MIN) FAIL("optval_double('%s') = %g: a subnormal accepted", s, v);
        if (signbit(v) && v == 0) FAIL("optval_double('%s') = -0", s);
        char buf[64];
        double again = NAN;
        snprintf(buf, sizeof buf, "%.17g", v);
        if (optval_double(buf, lo, hi, &again) || memcmp(&again, &v, sizeof v))
            FAIL("optval_double: %.17g re-printed as '%s' does not parse back (%.17g)", v, buf, again);
    }
}

static void check_pair(const char *s) {
    const char *mid = strchr(s, ':');
    unsigned long long ra = 0, rb = 0;
    int big_a = 0, big_b = 0;
    int want = mid && ref_digits(s, (size_t)(mid - s), &ra, &big_a) && ref_digits(mid + 1, strlen(mid + 1), &rb, &big_b) &&
               !big_a && !big_b && ra <= INT_MAX && rb <= INT_MAX;
    long long a = -1, b = -1;
    int ok = optval_pair(s, ':', &a, &b) == 0;
    if (ok != want) FAIL("optval_pair('%s') = %s, the reference %s", s, ok ? "accepted" : "refused", want ? "accepts" : "refuses");
    if (!ok) return;
    if ((unsigned long long)a != ra || (unsigned long long)b != rb || a < 0 || b < 0 || a > INT_MAX || b > INT_MAX)
        FAIL("optval_pair('%s') = %lld:%lld, expected %llu:%llu", s, a, b, ra, rb);
    char buf[64];
    long long a2 = -1, b2 = -1;
    snprintf(buf, sizeof buf, "%lld:%lld", a, b);
    if (optval_pair(buf, ':', &a2, &b2) || a2 != a || b2 != b) FAIL("optval_pair: '%s' does not parse back", buf);
}

static void check_list(const char *s) {
    static int mask[1024], want[1024], again[1024];
    size_t len = strlen(s);
    for (size_t k = 0; k < sizeof list_sizes / sizeof list_sizes[0]; k++) {
        int n = list_sizes[k];
        memset(mask, 0, sizeof(int) * (size_t)n);
        memset(want, 0, sizeof(int) * (size_t)n);
        /* the reference: split at every comma, each element digits with a value below n */
        int ref_ok = 1;
        const char *ref_bad = NULL;
        for (const char *p = s;;) {
            size_t e = strcspn(p, ",");
            unsigned long long v;
            int big = 0;
            if (!ref_digits(p, e, &v, &big) || big || v >= (unsigned long long)n) { ref_ok = 0; ref_bad = p; break; }
            want[v] = 1;
            if (!p[e]) break;
            p += e + 1;
        }
        const char *bad = NULL;
        size_t bad_len = (size_t)-1;
        int ok = optval_index_list(s, n, mask, &bad, &bad_len) == 0;
        if (ok != ref_ok) FAIL("optval_index_list('%s', %d) = %s, the reference %s", s, n, ok ? "accepted" : "refused", ref_ok ? "accepts" : "refuses");
        if (!ok) {
            /* the offending element is named: a part of s that holds no comma */
            if (!bad || bad < s || bad > s + len || bad_len > (size_t)(s + len - bad) || memchr(bad, ',', bad_len))
                FAIL("optval_index_list('%s', %d): the bad element is not a part of the value", s, n);
            if (bad != ref_bad) FAIL("optval_index_list('%s', %d): bad element at %td, the reference's at %td", s, n, bad - s, ref_bad - s);
            continue;
        }
        if (memcmp(mask, want, sizeof(int) * (size_t)n)) FAIL("optval_index_list('%s', %d): another set of indices than the reference", s, n);
        /* re-print the set indices and parse them again */
        char *buf = malloc((size_t)n * 6 + 1), *w = buf;
        if (!buf) abort();
        int any = 0;
        for (int i = 0; i < n; i++)
            if (mask[i]) w += sprintf(w, "%s%d", any++ ? "," : "", i);
        *w = 0;
        if (!any) FAIL("optval_index_list('%s', %d): accepted with no index", s, n);
        memset(again, 0, sizeof(int) * (size_t)n);
        if (optval_index_list(buf, n, again, NULL, NULL) || memcmp(again, mask, sizeof(int) * (size_t)n))
            FAIL("optval_index_list: '%s' does not parse back", buf);
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;                  /* an argv value; longer ones add nothing */
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;                                /* up to the first NUL, as argv holds it */
    check_int(s);
    check_u64(s);
    check_double(s);
    check_pair(s);
    check_list(s);
    free(s);
    return 0;
}
