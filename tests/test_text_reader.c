/* Tests of the JSONL record rules: data/text_reader.c's line limit (a .jsonl line longer than
 * max_record is returned as too_long, wherever the read buffer's boundaries fall) and
 * data/jsonl.c's document decoding (blank, \u0000, invalid JSON, missing or non-string field).
 * Scratch files live in build/scratch/test_text_reader/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "data/jsonl.h"
#include "data/text_reader.h"
#include "common/errors.h"
#include "tests/check.h"

#define DIR "build/scratch/test_text_reader"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* Lines of 15, 16, 17 and 40 bytes (plus '\n') and one of 17 bytes ending in CRLF, read with
 * max_record 16: the whole file fits the first read, so only the rule itself can say "too long"
 * (regression: lines already in the buffer were returned whole, whatever their length). */
static void test_line_limit(void) {
    const char *path = DIR "/lines.jsonl";
    write_file(path, "{\"text\":\"12345\"}\n"                        /* 16 */
                     "{\"text\":\"123456\"}\n"                       /* 17 */
                     "{\"text\":\"1234\"}\n"                         /* 15 */
                     "{\"text\":\"123456789012345678901234567890\"}\n" /* 41 */
                     "{\"text\":\"12345\"}\r\n"                      /* 16 + CR */
                     "last\n");
    char err[ERR_LEN];
    char *paths[1] = {(char *)path};
    TextReader *r = text_reader_open(paths, 1, TXT_DOC_PER_BLOCK, 16, err);
    if (!check(r != NULL, "text_reader: open a .jsonl file", "%s", err)) return;
    const int want_too_long[] = {0, 1, 0, 1, 1, 0};
    const size_t want_len[] = {16, 0, 15, 0, 0, 4};
    const unsigned want_line[] = {1, 2, 3, 4, 5, 6};
    int n = 0, ok = 1;
    char why[200] = "";
    TextRecord rec;
    while (text_reader_next(r, &rec, err) == 1) {
        if (n >= 6) { ok = 0; snprintf(why, sizeof why, "more than 6 records"); break; }
        if (rec.too_long != want_too_long[n] || rec.len != want_len[n] || rec.line != want_line[n] ||
            rec.len > 16) {
            if (ok) snprintf(why, sizeof why, "record %d: too_long %d len %zu line %llu, expected %d %zu %u", n,
                             rec.too_long, rec.len, (unsigned long long)rec.line, want_too_long[n], want_len[n],
                             want_line[n]);
            ok = 0;
        }
        n++;
    }
    check(ok && n == 6, "text_reader: a .jsonl line longer than max_record is too_long, even when buffered",
          "%s (%d records)", why, n);
    text_reader_close(r);
}

static int doc(const char *line, const char **text, size_t *len, char *why) {
    cJSON *obj;
    int r = jsonl_document(line, strlen(line), "text", &obj, text, len, why, 160);
    static char copy[256];
    if (r == JSONL_DOCUMENT) {
        snprintf(copy, sizeof copy, "%.*s", (int)*len, *text);
        *text = copy;
        cJSON_Delete(obj);
    }
    return r;
}

static void test_jsonl_document(void) {
    const char *text;
    size_t len;
    char why[160];
    int r = doc("{\"text\": \"caf\\u00e9\", \"id\": 1}", &text, &len, why);
    check(r == JSONL_DOCUMENT && len == 5 && memcmp(text, "caf\xc3\xa9", 5) == 0, "jsonl: the text field, decoded",
          "got %d, %zu bytes", r, r == JSONL_DOCUMENT ? len : 0);
    check(doc(" \t\r\n", &text, &len, why) == JSONL_BLANK, "jsonl: a blank line is blank", "not blank");
    check(doc("{\"text\": \"a\\u0000b\"}", &text, &len, why) == JSONL_BAD && strstr(why, "u0000"),
          "jsonl: \\u0000 is a bad line", "%s", why);
    check(doc("{\"text\": \"a\\\\u0000b\"}", &text, &len, why) == JSONL_DOCUMENT && len == 8,
          "jsonl: an escaped backslash before u0000 is text", "got %zu bytes", len);
    check(doc("[1, 2]", &text, &len, why) == JSONL_BAD && strstr(why, "invalid JSON"), "jsonl: an array is bad",
          "%s", why);
    check(doc("{\"text\": \"unterminated}", &text, &len, why) == JSONL_BAD, "jsonl: broken JSON is bad", "accepted");
    check(doc("{\"id\": 3}", &text, &len, why) == JSONL_BAD && strstr(why, "no \"text\" field"),
          "jsonl: a missing field is bad", "%s", why);
    check(doc("{\"text\": 5}", &text, &len, why) == JSONL_BAD && strstr(why, "not a string"),
          "jsonl: a non-string field is bad", "%s", why);
}

int main(void) {
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
    test_line_limit();
    test_jsonl_document();
    return check_exit_code();
}
