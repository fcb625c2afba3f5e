/* The tokenizer interface of data/tokenizer.h: chooses the byte or BPE implementation and
 * creates per-thread states (the growable id and byte arrays both use: data/tok_buffers.c). */
#include <stdlib.h>
#include <string.h>
#include "data/tok_internal.h"
#include "common/errors.h"

Tokenizer *tokenizer_open(const char *spec, char *err) {
    Tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) { set_err(err, "phaselab: tokenizer: out of memory"); return NULL; }
    if (strcmp(spec, "bytes") == 0) {
        tok->is_bytes = 1;
        tok->n_ids = TOKENIZER_BYTES_VOCAB;
        tok->eot_id = TOKENIZER_BYTES_EOT;
        strcpy(tok->fingerprint, "bytes");
        return tok;
    }
    if (bpe_load(tok, spec, err)) { tokenizer_free(tok); return NULL; }
    return tok;
}

void tokenizer_free(Tokenizer *tok) {
    if (!tok) return;
    if (!tok->is_bytes) bpe_free(tok);
    free(tok);
}

uint32_t tokenizer_n_ids(const Tokenizer *tok) { return tok->n_ids; }
uint32_t tokenizer_eot_id(const Tokenizer *tok) { return tok->eot_id; }
const char *tokenizer_fingerprint(const Tokenizer *tok) { return tok->fingerprint; }
int tokenizer_is_bytes(const Tokenizer *tok) { return tok->is_bytes; }

TokenizerState *tokenizer_state_new(const Tokenizer *tok) {
    TokenizerState *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->tok = tok;
    if (tok->is_bytes) return st;
    st->match = pcre2_match_data_create_from_pattern(tok->regex, NULL);
    st->cache = calloc(CACHE_SLOTS, sizeof *st->cache);
    if (!st->match || !st->cache) { tokenizer_state_free(st); return NULL; }
    return st;
}

void tokenizer_state_free(TokenizerState *st) {
    if (!st) return;
    if (st->match) pcre2_match_data_free(st->match);
    free(st->cache);
    free(st->sym_id); free(st->pair_rank); free(st->pair_merged); free(st->heap); free(st->prev); free(st->next);
    text_buf_free(&st->sanitized);
    free(st);
}

long tokenizer_encode(TokenizerState *st, const char *text, size_t len, TokenIds *out, char *err) {
    if (st->tok->is_bytes) return byte_encode(text, len, out, err);
    return bpe_encode(st, text, len, out, err);
}

int tokenizer_decode(const Tokenizer *tok, const uint32_t *ids, size_t n, TextBuf *out, char *err) {
    if (tok->is_bytes) return byte_decode(ids, n, out, err);
    return bpe_decode(tok, ids, n, out, err);
}
