/* The growable arrays of data/tokenizer.h: TokenIds (token ids) and TextBuf (bytes), grown by
 * the one capacity rule of common/grow.h. The bottom of the tokenizer files: every other tok_*
 * and *_tokenizer file may call these, and these call none of them. */
#include <stdlib.h>
#include <string.h>
#include "data/tokenizer.h"
#include "common/grow.h"

int token_ids_reserve(TokenIds *t, size_t extra) {
    if (t->n + extra <= t->cap) return 0;
    uint32_t *ids = grow_array(t->ids, &t->cap, t->n + extra, sizeof *ids, 256);
    if (!ids) return -1;
    t->ids = ids;
    return 0;
}

int token_ids_push(TokenIds *t, uint32_t id) {
    if (t->n == t->cap && token_ids_reserve(t, 1)) return -1;
    t->ids[t->n++] = id;
    return 0;
}

void token_ids_free(TokenIds *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

int text_buf_append(TextBuf *b, const void *data, size_t len) {
    char *d = grow_array(b->data, &b->cap, b->len + len + 1, 1, 256);
    if (!d) return -1;
    b->data = d;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return 0;
}

void text_buf_free(TextBuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
