/* Command-line option values parsed as the types they are: every numeric option of the programs
 * (./train --make-synthetic, --bench, --generate, the analyses' --gate-cycle, --knockout, --layers;
 * ./tokenize) goes through these, so the syntax is one rule everywhere:
 *
 *   integer   decimal digits only, parsed whole as a 64-bit integer, then range-checked: no sign,
 *             space, exponent, fraction or base prefix ("+1", "-0", " 1", "1e3", "0x1", "3e9" and
 *             "inf" are refused, never cast from a double); leading zeros are fine (000...0184
 *             is 184); past 2^63 - 1 (or 2^64 - 1 for optval_u64) it is refused, never wrapped.
 *   number    a finite decimal number (strtod syntax without leading space) in [lo, hi]; nan,
 *             inf, an overflow and an underflow to a subnormal or zero ("1e-400") are refused.
 *   pair      A:B, two integers (above) in 0..INT_MAX each (--knockout LAYER:HEAD).
 *   list      I,J,K: integers in 0..n-1 separated by single commas, at least one, none empty
 *             (--layers); repeats are allowed.
 *
 * Each returns 0 and sets its outputs, or -1 and leaves them untouched; the caller names the
 * option and the allowed range in its message. */
#ifndef PHASELAB_OPTVAL_H
#define PHASELAB_OPTVAL_H
#include <stddef.h>
#include <stdint.h>

/* An integer in [lo, hi] (0 <= lo). */
int optval_int(const char *s, long long lo, long long hi, long long *out);
/* An unsigned 64-bit integer in [lo, hi]. */
int optval_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A finite number in [lo, hi]. */
int optval_double(const char *s, double lo, double hi, double *out);
/* A:B (sep = ':' for --knockout), each an integer in 0..INT_MAX (the caller checks the ranges). */
int optval_pair(const char *s, char sep, long long *a, long long *b);
/* A comma-separated list of integers in 0..n-1: mask [n] gets 1 at each listed index (other entries
 * untouched; on error mask may be partly set). On error *bad and *bad_len (when not NULL) are the
 * offending element of s (may be empty: "0,,1"). */
int optval_index_list(const char *s, int n, int *mask, const char **bad, size_t *bad_len);
#endif
