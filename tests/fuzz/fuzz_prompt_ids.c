/* libFuzzer harness: prompt-id files, ./train --generate CKPT --prompt-ids FILE (analysis/generate.c,
 * prompt_ids_read; syntax in analysis/generate.h).
 *
 * Input: the whole file, read from memory (fmemopen) by the program's own reader. Beyond
 * sanitizer reports the harness aborts on a broken property:
 *   - it agrees with a reference written here from the documented syntax (non-negative decimal
 *     integers, each at most INT32_MAX, leading zeros allowed, separated by any run of spaces,
 *     tabs, newlines, CRs and commas): the same files accepted, the same ids in the same order;
 *   - a refused file's message names it and the line of the first offending byte
 *     ("ids.txt:LINE: ...");
 *   - the ids of an accepted file, re-printed comma-separated, read back the same.
 * A rejected file is the normal outcome. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "analysis/generate.h"
#include "common/errors.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_prompt_ids: "); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static FILE *open_mem(const void *data, size_t size) {
    /* fmemopen refuses a zero-length buffer on some C libraries: an empty file is /dev/null */
    FILE *f = size ? fmemopen((void *)data, size, "r") : fopen("/dev/null", "r");
    if (!f) { perror("fmemopen"); abort(); }
    return f;
}

static int read_ids(const void *data, size_t size, int32_t **ids, int *n, char *err) {
    FILE *f = open_mem(data, size);
    int rc = prompt_ids_read(f, "ids.txt", ids, n, err);
    fclose(f);
    return rc;
}

static int is_sep(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the reference: ids, or the line of the first offending byte */
    int32_t *want = malloc(sizeof(int32_t) * (size / 2 + 1));
    if (!want) return 0;
    int n_want = 0, bad_line = 0, line = 1;
    for (size_t i = 0; i < size && !bad_line;) {
        if (is_sep(data[i])) { line += data[i] == '\n'; i++; continue; }
        if (data[i] < '0' || data[i] > '9') { bad_line = line; break; }
        long long v = 0;
        for (; i < size && data[i] >= '0' && data[i] <= '9'; i++) {
            v = v * 10 + (data[i] - '0');
            if (v > INT32_MAX) { bad_line = line; break; }
        }
        if (!bad_line) want[n_want++] = (int32_t)v;
    }

    char err[ERR_LEN];
    err[0] = 0;
    int32_t *ids = NULL;
    int n = -1;
    int rc = read_ids(data, size, &ids, &n, err);
    if ((rc == 0) != (bad_line == 0))
        FAIL("prompt_ids_read %s the file, the reference %s it (%s)", rc ? "refused" : "accepted", bad_line ? "refuses" : "accepts", err);
    if (rc) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "ids.txt:%d: ", bad_line);
        if (strncmp(err, prefix, strlen(prefix)) || strchr(err, '\n'))
            FAIL("the message '%s' is not one line starting with '%s'", err, prefix);
        free(want);
        return 0;
    }
    if (n != n_want) FAIL("%d ids read, the reference reads %d", n, n_want);
    if (n > 0 && !ids) FAIL("%d ids but no array", n);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0) FAIL("id %d is negative (%d)", i, ids[i]);
        if (ids[i] != want[i]) FAIL("id %d is %d, the reference reads %d", i, ids[i], want[i]);
    }
    /* re-printed and read again */
    char *text = malloc((size_t)n * 12 + 1), *w = text;
    if (!text) abort();
    for (int i = 0; i < n; i++) w += sprintf(w, i ? ",%d" : "%d", ids[i]);
    int32_t *again = NULL;
    int n_again = -1;
    if (read_ids(text, (size_t)(w - text), &again, &n_again, err) || n_again != n ||
        (n && memcmp(again, ids, sizeof(int32_t) * (size_t)n)))
        FAIL("the %d ids re-printed do not read back the same", n);
    free(again);
    free(text);
    free(ids);
    free(want);
    return 0;
}
