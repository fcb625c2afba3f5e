/* Tokenizers: text bytes <-> uint32 token ids.
 *
 * Two kinds behind one interface:
 *   - "bytes": the plain byte-level tokenizer. id = byte value (0..255), end-of-text = 256,
 *     vocabulary 257, fingerprint "bytes". Needs no files; every byte string round-trips.
 *   - byte-level BPE loaded from a HuggingFace tokenizer.json (Qwen2/Qwen3 family). Encoding
 *     follows the HuggingFace `tokenizers` pipeline with add_special_tokens = false:
 *       1. added tokens (e.g. <|endoftext|>) written in the text are matched first, leftmost-
 *          longest, and become single ids; the text between them is processed as follows,
 *       2. NFC normalization (utf8proc),
 *       3. the pre-tokenizer's Split regex (PCRE2, UTF + Unicode properties, JIT) cuts it
 *          into pieces ("Isolated": matches and the gaps between them are pieces),
 *       4. each piece's bytes are merged by the BPE merge ranks (lowest rank first, leftmost
 *          on ties) starting from one symbol per byte; the ByteLevel byte-to-unicode map is
 *          only a spelling of the vocabulary and is undone at load time, so the tables here
 *          are keyed by raw bytes.
 *     Decoding concatenates each id's raw bytes (added tokens: their content).
 *     Fingerprint: sha256 hex of the tokenizer.json file bytes.
 *
 * Invalid UTF-8 given to tokenizer_encode: each maximal ill-formed subsequence (Unicode
 * "maximal subpart" practice, as Python's errors="replace") is replaced by U+FFFD before
 * encoding and counted in the return value (BPE only; the byte tokenizer encodes raw bytes).
 *
 * Threading: a Tokenizer is immutable after loading and shared by all threads; each thread
 * encodes through its own TokenizerState (regex match data, scratch buffers, a cache of
 * frequent pieces). */
#ifndef PHASELAB_TOKENIZER_H
#define PHASELAB_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_BYTES_EOT 256u
#define TOKENIZER_BYTES_VOCAB 257u

typedef struct Tokenizer Tokenizer;
typedef struct TokenizerState TokenizerState;

/* A growable array of token ids that encoders append to. Zero-initialize, free with
 * token_ids_free. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} TokenIds;

/* A growable byte buffer (decode output); always NUL-terminated after a successful call. */
typedef struct {
    char *data;
    size_t len, cap;
} TextBuf;

/* spec "bytes" selects the byte tokenizer; anything else is a path to a tokenizer.json.
 * Returns NULL and fills err (file, line, what was expected) on failure. */
Tokenizer *tokenizer_open(const char *spec, char *err);
void tokenizer_free(Tokenizer *tok);

/* Number of ids the tokenizer can produce (byte: 257; Qwen3: 151669). */
uint32_t tokenizer_n_ids(const Tokenizer *tok);
/* The end-of-text id: 256, or the id of the added token "<|endoftext|>" (UINT32_MAX if the
 * tokenizer.json has none). */
uint32_t tokenizer_eot_id(const Tokenizer *tok);
/* "bytes" or the sha256 hex (64 characters) of tokenizer.json. */
const char *tokenizer_fingerprint(const Tokenizer *tok);
int tokenizer_is_bytes(const Tokenizer *tok);

/* Per-thread encoding state. */
TokenizerState *tokenizer_state_new(const Tokenizer *tok);
void tokenizer_state_free(TokenizerState *st);

/* Appends the ids of text[0, len) to out. Returns the number of invalid UTF-8 sequences
 * replaced by U+FFFD (0 for valid input), or -1 with err filled (out of memory). */
long tokenizer_encode(TokenizerState *st, const char *text, size_t len, TokenIds *out, char *err);

/* Appends the bytes of ids[0, n) to out. Returns 0, or -1 with err naming the position of
 * an id the tokenizer does not have. */
int tokenizer_decode(const Tokenizer *tok, const uint32_t *ids, size_t n, TextBuf *out, char *err);

/* Helpers for the growable arrays; they return 0, or -1 when memory runs out. */
int token_ids_reserve(TokenIds *t, size_t extra);
int token_ids_push(TokenIds *t, uint32_t id);
void token_ids_free(TokenIds *t);
int text_buf_append(TextBuf *b, const void *data, size_t len);
void text_buf_free(TextBuf *b);

/* UTF-8 helpers (data/tok_utf8.c). */
/* Length of the longest valid UTF-8 prefix of s[0, len) (len when all of it is valid). */
size_t utf8_valid_prefix(const char *s, size_t len);
/* Appends s with every maximal ill-formed subsequence replaced by U+FFFD; returns how many
 * were replaced (or -1 when memory runs out). */
long utf8_sanitize(const char *s, size_t len, TextBuf *out);
#endif
