/* JSONL documents: the text of one line of a .jsonl corpus, the string field FIELD of the
 * line's JSON object (./tokenize --field, default "text"). The rules of ./tokenize's bad-line
 * accounting (data/tokenize_pipeline.c) live here so that they can be tested and fuzzed alone:
 *   - a line of only spaces, tabs, CR and LF is blank (an empty document);
 *   - a line holding the escape \u0000 is bad (cJSON hands strings over NUL-terminated, so
 *     the document would be cut short silently);
 *   - a line that is not a JSON object, lacks FIELD or has a non-string FIELD is bad. */
#ifndef PHASELAB_JSONL_H
#define PHASELAB_JSONL_H
#include <stddef.h>

struct cJSON;

enum { JSONL_DOCUMENT = 1, JSONL_BLANK = 0, JSONL_BAD = -1 };

/* Decodes line[0, len). JSONL_DOCUMENT: *text / *text_len are the field's UTF-8 bytes, owned
 * by *obj (free it with cJSON_Delete after use). JSONL_BLANK: nothing to free. JSONL_BAD: why
 * (a clause such as "invalid JSON (expected one JSON object per line)") is in why[why_len]. */
int jsonl_document(const char *line, size_t len, const char *field, struct cJSON **obj,
                   const char **text, size_t *text_len, char *why, size_t why_len);
#endif
