/* Private layout of the tokenizers (data/tokenizer.h is the public interface).
 *
 * BPE tables, all keyed by raw bytes (the ByteLevel spelling of tokenizer.json is undone
 * when loading):
 *   token_bytes     id -> (offset, length) into one blob of raw bytes        [n_ids]
 *   byte_id         raw byte -> id of the single-byte token                  [256]
 *   merges          open-addressing hash: (left id, right id) -> (rank, merged id)
 *   added           added tokens matched in the text, grouped by first byte, longest first
 *   nfc_unsafe      bitmap over code points: 1 where a code point may change under NFC or
 *                   interact with its neighbours (combining class != 0, composes with a
 *                   preceding character, or is not NFC itself); text without any such
 *                   code point is already NFC and skips utf8proc. */
#ifndef PHASELAB_TOK_INTERNAL_H
#define PHASELAB_TOK_INTERNAL_H
#include "data/tokenizer.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

typedef struct {
    uint64_t key;       /* (left << 32) | right; EMPTY_KEY when the slot is free */
    uint32_t rank;
    uint32_t merged;
} MergeSlot;

typedef struct {
    const char *text;   /* content bytes */
    uint32_t len;
    uint32_t id;
} AddedToken;

struct Tokenizer {
    int is_bytes;
    char fingerprint[65];
    uint32_t n_ids;
    uint32_t eot_id;
    /* BPE only */
    char *blob;                 /* raw bytes of every token, concatenated */
    uint64_t *token_off;        /* [n_ids] offset into blob (UINT64_MAX: id not defined) */
    uint32_t *token_len;        /* [n_ids] */
    uint32_t byte_id[256];
    MergeSlot *merges;          /* [merge_mask + 1] */
    uint64_t merge_mask;
    AddedToken *added;          /* [n_added], sorted by first byte, then longest first */
    int n_added;
    int added_first[257];       /* added[added_first[b] .. added_first[b+1]) start with byte b */
    int nfc;                    /* normalizer is NFC */
    pcre2_code *regex;          /* JIT-compiled split pattern */
    const uint8_t *nfc_unsafe;  /* [0x110000 / 8] shared static bitmap */
};

/* Per-thread pre-token cache entry: pieces up to CACHE_KEY_MAX bytes producing at most
 * CACHE_IDS_MAX ids. Direct-mapped: a colliding piece simply replaces the entry. */
#define CACHE_KEY_MAX 24
#define CACHE_IDS_MAX 8
#define CACHE_SLOTS (1u << 15)
typedef struct {
    uint8_t key_len;            /* 0: empty slot */
    uint8_t n_ids;
    char key[CACHE_KEY_MAX];
    uint32_t ids[CACHE_IDS_MAX];
} CacheSlot;

struct TokenizerState {
    const Tokenizer *tok;
    pcre2_match_data *match;
    TextBuf sanitized;          /* input after U+FFFD replacement, when it was invalid */
    CacheSlot *cache;           /* [CACHE_SLOTS] */
    /* BPE scratch for one piece: symbols as a doubly linked list over byte positions */
    uint32_t *sym_id;           /* [cap] current token id of the symbol starting at a byte */
    uint32_t *pair_rank;        /* [cap] rank of the merge of a symbol with its successor */
    uint32_t *pair_merged;      /* [cap] id that merge produces */
    uint64_t *heap;             /* [cap] (rank << 32 | position) min-heap for long pieces */
    int32_t *prev, *next;       /* [cap] neighbours in the symbol list, -1 at the ends */
    size_t sym_cap;
    uint64_t cache_hits, cache_misses;
};

/* data/byte_tokenizer.c */
long byte_encode(const char *text, size_t len, TokenIds *out, char *err);
int byte_decode(const uint32_t *ids, size_t n, TextBuf *out, char *err);

/* data/bpe_tokenizer.c */
int bpe_load(Tokenizer *tok, const char *path, char *err);
void bpe_free(Tokenizer *tok);
long bpe_encode(TokenizerState *st, const char *text, size_t len, TokenIds *out, char *err);
int bpe_decode(const Tokenizer *tok, const uint32_t *ids, size_t n, TextBuf *out, char *err);

/* data/tok_bpe_merge.c: merges the bytes of one piece; appends the resulting ids. */
int bpe_merge_piece(TokenizerState *st, const uint8_t *piece, size_t len, TokenIds *out);
/* Looks (left, right) up; returns the rank (UINT32_MAX if no merge) and sets *merged. */
static inline uint32_t merge_lookup(const Tokenizer *tok, uint32_t left, uint32_t right,
                                    uint32_t *merged) {
    uint64_t key = ((uint64_t)left << 32) | right;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint64_t i = (h >> 29) & tok->merge_mask;
    for (;;) {
        const MergeSlot *s = &tok->merges[i];
        if (s->key == key) { *merged = s->merged; return s->rank; }
        if (s->key == UINT64_MAX) return UINT32_MAX;
        i = (i + 1) & tok->merge_mask;
    }
}

/* data/tok_utf8.c: decodes one code point at s (valid UTF-8 assumed), returns its length. */
static inline int utf8_decode_valid(const uint8_t *s, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if (c < 0xF0) { *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); return 3; }
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}
/* The GPT-2 ByteLevel map: byte -> code point used to spell it in tokenizer.json. */
void byte_level_map(uint32_t byte_to_cp[256]);
/* Bitmap of NFC-unsafe code points (see above), built once. */
const uint8_t *nfc_unsafe_bitmap(void);
#endif
