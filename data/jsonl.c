/* JSONL documents (rules in data/jsonl.h): one line's JSON object, parsed with cJSON, and its
 * string field. */
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data/jsonl.h"

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') return 0;
    return 1;
}

/* Does a JSON text hold the escape \u0000 (an odd run of backslashes before "u0000")? */
static int json_has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 5 < n; i++) {
        if (s[i] != '\\' || memcmp(s + i + 1, "u0000", 5) != 0) continue;
        size_t run = 0;
        while (run <= i && s[i - run] == '\\') run++;
        if (run % 2 == 1) return 1;
    }
    return 0;
}

int jsonl_document(const char *line, size_t len, const char *field, struct cJSON **obj_out,
                   const char **text, size_t *text_len, char *why, size_t why_len) {
    *obj_out = NULL;
    *text = NULL;
    *text_len = 0;
    if (is_blank(line, len)) return JSONL_BLANK;
    if (json_has_nul_escape(line, len)) {
        snprintf(why, why_len, "the text holds \\u0000 (a NUL character; expected text without NUL)");
        return JSONL_BAD;
    }
    cJSON *obj = cJSON_ParseWithLength(line, len);
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, field) : NULL;
    if (!obj || !cJSON_IsObject(obj))
        snprintf(why, why_len, "invalid JSON (expected one JSON object per line)");
    else if (!v)
        snprintf(why, why_len, "no \"%s\" field (expected a string field \"%s\")", field, field);
    else if (!cJSON_IsString(v))
        snprintf(why, why_len, "field \"%s\" is not a string", field);
    else {
        *obj_out = obj;
        *text = v->valuestring;
        *text_len = strlen(v->valuestring);
        return JSONL_DOCUMENT;
    }
    cJSON_Delete(obj);
    return JSONL_BAD;
}
