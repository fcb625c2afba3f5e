/* The plain byte-level tokenizer: every byte b of the text is the id b (0..255); id 256 is
 * the end-of-text separator; vocabulary 257. It needs no files, accepts any byte string
 * (no UTF-8 requirement) and decoding is the exact inverse of encoding. */
#include "data/tok_internal.h"
#include "common/errors.h"

long byte_encode(const char *text, size_t len, TokenIds *out, char *err) {
    if (len == 0) return 0;   /* (out->ids may still be NULL: no pointer arithmetic on it) */
    if (token_ids_reserve(out, len)) return set_err(err, "phaselab: tokenizer: out of memory");
    const uint8_t *s = (const uint8_t *)text;
    uint32_t *dst = out->ids + out->n;
    for (size_t i = 0; i < len; i++) dst[i] = s[i];
    out->n += len;
    return 0;
}

int byte_decode(const uint32_t *ids, size_t n, TextBuf *out, char *err) {
    if (text_buf_append(out, NULL, 0)) return set_err(err, "phaselab: tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == TOKENIZER_BYTES_EOT) continue;   /* end-of-text decodes to nothing */
        if (ids[i] > 255)
            return set_err(err, "phaselab: decode: id %u at position %zu is not a byte id (0..256)",
                           ids[i], i);
        char c = (char)ids[i];
        if (text_buf_append(out, &c, 1)) return set_err(err, "phaselab: tokenizer: out of memory");
    }
    return 0;
}
