/* Command-line option values (common/optval.c): integers are digits only and parsed whole (no
 * sign, space, exponent or base; leading zeros fine; past the range or 2^63 / 2^64 refused, never
 * wrapped), numbers are finite and normal, A:B pairs and comma lists take only such integers.
 * Expected values are written by hand from the syntax in common/optval.h. Also the prompt-id
 * reader of --generate --prompt-ids (analysis/generate.c, prompt_ids_read). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/generate.h"
#include "common/errors.h"
#include "common/optval.h"
#include "tests/check.h"

static int int_ok(const char *s, long long lo, long long hi, long long want) {
    long long v = -12345;
    return optval_int(s, lo, hi, &v) == 0 && v == want;
}
static int int_refused(const char *s, long long lo, long long hi) {
    long long v = -12345;
    return optval_int(s, lo, hi, &v) == -1 && v == -12345;
}

static int ids_read(const char *text, int32_t **ids, int *n, char *err) {
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) return -2;
    int rc = prompt_ids_read(f, "ids.txt", ids, n, err);
    fclose(f);
    return rc;
}

int main(void) {
    /* integers */
    check(int_ok("0", 0, 10, 0) && int_ok("10", 0, 10, 10) && int_ok("7", 7, 7, 7), "optval_int: in range, bounds included", "");
    check(int_ok("000000000000000000000000000184", 0, 1000, 184), "optval_int: leading zeros past 20 digits", "");
    check(int_ok("9223372036854775807", 0, LLONG_MAX, LLONG_MAX), "optval_int: 2^63 - 1", "");
    const char *bad_ints[] = {"", "+1", "-0", "-1", " 1", "1 ", "1e3", "3e9", "0x1", "1.0", "inf", "nan", "1_000", "9223372036854775808",
                              "18446744073709551617"};
    int all = 1;
    for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) all &= int_refused(bad_ints[i], 0, LLONG_MAX);
    check(all, "optval_int: sign, space, exponent, base, fraction, words and overflow refused", "");
    check(int_refused("11", 0, 10) && int_refused("0", 1, 10) && int_refused("4294967297", 0, INT_MAX) &&
          int_refused("3000000000", 0, 1LL << 30), "optval_int: outside the range refused (4294967297 is not 1)", "");
    check(int_refused("5", 0, 0) && int_ok("0", 0, 0, 0), "optval_int: the range 0..0 takes only 0 (no unsigned wrap in the bound)", "");
    check(int_refused("1", -1, 5), "optval_int: a negative lower bound is refused", "");
    /* unsigned 64-bit */
    uint64_t u = 0;
    check(optval_u64("18446744073709551615", 0, UINT64_MAX, &u) == 0 && u == UINT64_MAX, "optval_u64: 2^64 - 1", "%llu", (unsigned long long)u);
    check(optval_u64("18446744073709551616", 0, UINT64_MAX, &u) == -1 && optval_u64("-1", 0, UINT64_MAX, &u) == -1 &&
          optval_u64(" -18446744073709551615", 0, UINT64_MAX, &u) == -1, "optval_u64: 2^64, -1 and ' -(2^64 - 1)' refused, never wrapped", "");
    check(optval_u64("4095", 4096, 1ull << 40, &u) == -1 && optval_u64("4096", 4096, 1ull << 40, &u) == 0 && u == 4096,
          "optval_u64: range", "");
    /* numbers */
    double d = -1;
    check(optval_double("0.5", 0, 1, &d) == 0 && d == 0.5 && optval_double("1e6", 0, 1e6, &d) == 0 && d == 1e6, "optval_double: in range", "");
    check(optval_double("-0", 0, 1, &d) == 0 && d == 0 && !signbit(d), "optval_double: -0 is 0", "");
    const char *bad_dbl[] = {"", " 1", "inf", "-inf", "nan", "1e400", "1e-400", "4.9e-324", "0x1p-1074", "1x", "1.5", "-0.1"};
    all = 1;
    for (size_t i = 0; i < sizeof bad_dbl / sizeof bad_dbl[0]; i++) all &= optval_double(bad_dbl[i], 0, 1, &d) == -1;
    check(all, "optval_double: non-finite, overflow, subnormal, trailing text and out of range refused", "");
    /* pairs */
    long long a = -1, b = -1;
    check(optval_pair("3:1", ':', &a, &b) == 0 && a == 3 && b == 1, "optval_pair: L:H", "%lld:%lld", a, b);
    check(optval_pair("0002147483647:0", ':', &a, &b) == 0 && a == INT_MAX && b == 0, "optval_pair: INT_MAX with leading zeros", "");
    const char *bad_pairs[] = {"0:4294967297", "4294967296:0", "0:-1", "+0:1", "0:1x", "0:", ":1", "0: 1", "1e0:0", "3", "0:1:2", "2147483648:0"};
    all = 1;
    for (size_t i = 0; i < sizeof bad_pairs / sizeof bad_pairs[0]; i++) all &= optval_pair(bad_pairs[i], ':', &a, &b) == -1;
    check(all, "optval_pair: wraps, signs, spaces, empty parts and a third part refused", "");
    /* lists */
    int mask[300] = {0};
    check(optval_index_list("299,0,5,5", 300, mask, NULL, NULL) == 0 && mask[299] && mask[0] && mask[5] && !mask[1],
          "optval_index_list: indices set, repeats allowed", "");
    const char *bad = NULL;
    size_t bad_len = 0;
    check(optval_index_list("0,,1", 300, mask, &bad, &bad_len) == -1 && bad_len == 0 && !strcmp(bad, ",1"),
          "optval_index_list: an empty element is named", "'%s' %zu", bad ? bad : "(null)", bad_len);
    check(optval_index_list("1,300,2", 300, mask, &bad, &bad_len) == -1 && bad_len == 3 && !strncmp(bad, "300", 3),
          "optval_index_list: an index past n is named", "");
    check(optval_index_list("", 300, mask, &bad, &bad_len) == -1 && optval_index_list("1,", 300, mask, NULL, NULL) == -1 &&
          optval_index_list("0", 0, mask, NULL, NULL) == -1, "optval_index_list: empty list, trailing comma, n = 0 refused", "");
    /* the list is read whole: an element past 511 characters is still checked */
    char *longlist = malloc(4000), *w = longlist;
    for (int i = 0; i < 200; i++) w += sprintf(w, "%d,", i % 7);
    strcpy(w, "7");
    check(optval_index_list(longlist, 7, mask, &bad, &bad_len) == -1 && !strcmp(bad, "7"),
          "optval_index_list: a bad index past 600 characters is found", "");
    free(longlist);

    /* prompt ids */
    char err[ERR_LEN];
    int32_t *ids = NULL;
    int n = -1;
    check(ids_read("1 2,,3\r\n\t0000000000000000000042 2147483647\n", &ids, &n, err) == 0 && n == 5 && ids[0] == 1 && ids[2] == 3 &&
          ids[3] == 42 && ids[4] == INT32_MAX, "prompt_ids_read: separators, leading zeros, INT32_MAX", "%d", n);
    free(ids), ids = NULL;
    check(ids_read(" \n,\n", &ids, &n, err) == 0 && n == 0, "prompt_ids_read: separators only give no ids", "");
    free(ids), ids = NULL;
    check(ids_read("1\n2\n2147483648\n", &ids, &n, err) == -1 && !strncmp(err, "ids.txt:3: ", 11), "prompt_ids_read: 2^31 refused on its line",
          "%s", err);
    check(ids_read("1\n-2\n", &ids, &n, err) == -1 && strstr(err, "ids.txt:2: '-'"), "prompt_ids_read: a sign refused on its line", "%s", err);
    FILE *f = fmemopen("1 2\0 3", 6, "r");
    check(f && prompt_ids_read(f, "ids.txt", &ids, &n, err) == -1 && strstr(err, "byte 0x00") && !strchr(err, '\n'),
          "prompt_ids_read: a NUL byte is named as a byte, in one line", "%s", err);
    if (f) fclose(f);
    return check_failures ? 1 : 0;
}
