/* libFuzzer harness: corpus records, the way ./tokenize reads them: the streaming text reader
 * (data/text_reader.c) cuts a file into records, each JSONL line is decoded
 * (data/jsonl.c, jsonl_document: the "text" field of the line's object), invalid UTF-8 is
 * replaced (utf8_sanitize), and the document is encoded with the byte tokenizer and with a
 * small Qwen3-style BPE tokenizer (tests/fuzz/corpus/tokenizer_json/qwen3_mini.json, or
 * $FUZZ_TOKENIZER), then decoded back.
 *
 * Input: byte 0 picks the file kind (mod 5: 0 .jsonl, 1 .txt with a document per block,
 * 2 .txt with a document per file, 3 .jsonl.gz, 4 .txt.zst: the stream decoders), byte 1 the record limit (--max-doc-bytes: 16 + 8 * byte),
 * the rest is the file. Checked properties (abort on violation): records stay within the
 * limit, byte-tokenizer ids decode to the exact (sanitized) document, and sanitized text is
 * valid UTF-8. Any sanitizer report or crash is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data/jsonl.h"
#include "data/text_reader.h"
#include "data/tokenizer.h"
#include "common/errors.h"
#include "tests/fuzz/fuzz_util.h"

static Tokenizer *byte_tok, *bpe_tok;
static TokenizerState *byte_st, *bpe_st;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char err[ERR_LEN];
    const char *bpe = getenv("FUZZ_TOKENIZER");
    if (!bpe) bpe = "tests/fuzz/corpus/tokenizer_json/qwen3_mini.json";
    byte_tok = tokenizer_open("bytes", err);
    bpe_tok = tokenizer_open(bpe, err);
    if (!byte_tok || !bpe_tok) {
        fprintf(stderr, "fuzz_jsonl: %s (run from the repository root or set FUZZ_TOKENIZER)\n", err);
        exit(1);
    }
    byte_st = tokenizer_state_new(byte_tok);
    bpe_st = tokenizer_state_new(bpe_tok);
    return 0;
}

static void encode_document(const char *text, size_t len) {
    char err[ERR_LEN];
    TextBuf clean = {0}, back = {0};
    if (utf8_valid_prefix(text, len) != len) {
        if (utf8_sanitize(text, len, &clean) < 0) abort();
        if (utf8_valid_prefix(clean.data, clean.len) != clean.len) abort();
        text = clean.data;
        len = clean.len;
    }
    TokenIds ids = {0};
    if (tokenizer_encode(byte_st, text, len, &ids, err) < 0) abort();
    if (tokenizer_decode(byte_tok, ids.ids, ids.n, &back, err) != 0) abort();
    if (back.len != len || (len && memcmp(back.data, text, len) != 0)) abort();
    ids.n = 0;
    back.len = 0;
    if (tokenizer_encode(bpe_st, text, len, &ids, err) < 0) abort();
    if (tokenizer_decode(bpe_tok, ids.ids, ids.n, &back, err) != 0) abort();
    token_ids_free(&ids);
    text_buf_free(&back);
    text_buf_free(&clean);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const char *names[5] = {"corpus.jsonl", "corpus.txt", "corpus.txt", "corpus.jsonl.gz", "corpus.txt.zst"};
    int kind = data[0] % 5;
    size_t max_record = 16 + 8 * (size_t)data[1];
    char *path = (char *)fuzz_write_file(names[kind], data + 2, size - 2);
    char err[ERR_LEN];
    TextReader *r = text_reader_open(&path, 1, kind == 2 ? TXT_DOC_PER_FILE : TXT_DOC_PER_BLOCK, max_record, err);
    if (!r) return 0;
    TextRecord rec;
    int got;
    while ((got = text_reader_next(r, &rec, err)) == 1) {
        if (rec.len > max_record) abort();
        if (rec.kind == INPUT_JSONL) {
            if (rec.too_long) continue;
            cJSON *obj;
            const char *text;
            size_t len;
            char why[160];
            if (jsonl_document(rec.data, rec.len, "text", &obj, &text, &len, why, sizeof why) == JSONL_DOCUMENT) {
                encode_document(text, len);
                cJSON_Delete(obj);
            }
        } else {
            encode_document(rec.data, rec.len);
        }
    }
    text_reader_close(r);
    return 0;
}
