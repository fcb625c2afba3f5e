/* libFuzzer harness: the BPE tokenizer loader (data/bpe_tokenizer.c via tokenizer_open), i.e. a
 * HuggingFace tokenizer.json: vocabulary, merges, added tokens, normalizer and the
 * pre-tokenizer regex (rewritten for PCRE2, compiled with JIT).
 *
 * Input: the tokenizer.json text. A tokenizer that loads then encodes a fixed set of texts
 * (ASCII, digits, whitespace runs, contractions, non-Latin scripts, combining marks that NFC
 * composes, added-token spellings, invalid UTF-8), decodes the ids back, and decodes every id
 * it claims to have plus a few it must reject. The decoded text of valid UTF-8 must equal the
 * NFC of the input, which for these texts is checked only for the ASCII ones (a broken
 * round trip aborts: BPE is lossless). Any sanitizer report or crash is a finding; a rejected
 * file is the normal outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "data/tokenizer.h"
#include "common/errors.h"
#include "tests/fuzz/fuzz_util.h"

static const char *texts[] = {
    "Hello, world! It's 2024: we'll see 12345 cats.",
    "  leading and trailing spaces   \n\n\ttabs\r\n",
    "<|endoftext|>after an added token<|im_start|>user<|im_end|>",
    "I'm, you're, they've, he'd, she'll, it's, DON'T",
    "caf\xc3\xa9 cafe\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 \xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xf0\x9f\x98\x80",
    "invalid \xff\xfe utf-8 \xc3 \xe2\x82 end",
    "\xe1\xa0\x8e mongolian vowel separator \xe2\x80\x83 em space \xc2\xa0 nbsp",
    "",
};

static int is_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 0;
    return 1;
}

static void exercise(Tokenizer *tok) {
    TokenizerState *st = tokenizer_state_new(tok);
    if (!st) return;
    char err[ERR_LEN];
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        TokenIds ids = {0};
        TextBuf back = {0};
        size_t len = strlen(texts[i]);
        if (tokenizer_encode(st, texts[i], len, &ids, err) >= 0 &&
            tokenizer_decode(tok, ids.ids, ids.n, &back, err) == 0 && is_ascii(texts[i]) &&
            (back.len != len || memcmp(back.data, texts[i], len) != 0))
            abort();  /* ASCII text is its own NFC: BPE must give it back unchanged */
        token_ids_free(&ids);
        text_buf_free(&back);
    }
    uint32_t n = tokenizer_n_ids(tok);
    TextBuf all = {0};
    for (uint32_t id = 0; id < n && id < 4096; id++) tokenizer_decode(tok, &id, 1, &all, err);
    uint32_t bad[] = {n, n + 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, tokenizer_eot_id(tok)};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) tokenizer_decode(tok, &bad[i], 1, &all, err);
    text_buf_free(&all);
    (void)tokenizer_fingerprint(tok);
    tokenizer_state_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("tokenizer.json", data, size);
    char err[ERR_LEN];
    Tokenizer *tok = tokenizer_open(path, err);
    if (!tok) return 0;
    exercise(tok);
    tokenizer_free(tok);
    return 0;
}
