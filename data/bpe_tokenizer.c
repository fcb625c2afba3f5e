/* Byte-level BPE tokenizer loaded from a HuggingFace tokenizer.json (Qwen2/Qwen3 family).
 *
 * Supported tokenizer.json (anything else is an error naming the key):
 *   normalizer    null | {"type":"NFC"} | Sequence of those
 *   pre_tokenizer Sequence[Split{Regex, behavior "Isolated", invert false},
 *                          ByteLevel{add_prefix_space false, use_regex false}]
 *                 | ByteLevel{add_prefix_space false, use_regex true} (the GPT-2 pattern)
 *   model         BPE, no dropout, no byte fallback, no subword prefix/suffix; merges as
 *                 "a b" strings or [a, b] pairs (rank = position in the list)
 *   added_tokens  matched in the raw text (normalized false, no lstrip/rstrip/single_word)
 * Encoding: added tokens (leftmost-longest) -> NFC -> regex pieces -> per-piece BPE (see
 * data/tok_bpe_merge.c) with a per-thread direct-mapped cache of pieces.
 *
 * Regex dialect: HuggingFace runs the pattern with Oniguruma, where \s is the Unicode
 * White_Space property. PCRE2's \s with UCP also matches U+180E, so \s and \S outside a
 * character class, and \s inside one, are rewritten to the explicit White_Space set. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <utf8proc.h>
#include "data/tok_internal.h"
#include "common/errors.h"
#include "common/sha256.h"
#include "common/fsutil.h"

#define WHITE_SPACE "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---------------------------------------------------------------- loading helpers */

/* The whole tokenizer.json (common/fsutil.h's reader); err as "phaselab: PATH: ..." */
static char *read_file(const char *path, size_t *len, char *err) {
    char why[ERR_LEN];
    char *buf = fs_read_file(path, len, why);
    if (!buf && errno != EIO && errno != ENOMEM)
        set_err(err, "phaselab: %s: cannot open: %s (expected a tokenizer.json or \"bytes\")", path, strerror(errno));
    else if (!buf)
        set_err(err, "phaselab: %s: cannot read", path);
    return buf;
}

/* Decodes a ByteLevel-spelled string (UTF-8 of mapped code points) into raw bytes. */
static int byte_level_decode(const char *spelled, const int16_t *cp_to_byte, TextBuf *out) {
    out->len = 0;
    const uint8_t *s = (const uint8_t *)spelled;
    size_t len = strlen(spelled);
    if (utf8_valid_prefix(spelled, len) != len) return -1;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)utf8_decode_valid(s + i, &cp);
        if (cp >= 512 || cp_to_byte[cp] < 0) return -1;
        char b = (char)cp_to_byte[cp];
        if (text_buf_append(out, &b, 1)) return -1;
    }
    if (text_buf_append(out, NULL, 0)) return -1;
    return 0;
}

/* Temporary raw-bytes -> id table used while loading the merges. */
typedef struct {
    uint32_t *slot;     /* id + 1; 0 = empty */
    uint64_t mask;
} VocabIndex;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h ^ (h >> 31);
}

static const char *token_ptr(const Tokenizer *t, uint32_t id) { return t->blob + t->token_off[id]; }

static void vocab_index_put(VocabIndex *vi, const Tokenizer *t, uint32_t id) {
    uint64_t i = hash_bytes((const uint8_t *)token_ptr(t, id), t->token_len[id]) & vi->mask;
    while (vi->slot[i]) i = (i + 1) & vi->mask;
    vi->slot[i] = id + 1;
}

static uint32_t vocab_index_get(const VocabIndex *vi, const Tokenizer *t, const char *p, size_t n) {
    uint64_t i = hash_bytes((const uint8_t *)p, n) & vi->mask;
    while (vi->slot[i]) {
        uint32_t id = vi->slot[i] - 1;
        if (t->token_len[id] == n && memcmp(token_ptr(t, id), p, n) == 0) return id;
        i = (i + 1) & vi->mask;
    }
    return UINT32_MAX;
}

/* A JSON number usable as a token id: a whole number in [0, 2^32 - 2]. */
static int json_is_id(const cJSON *x) {
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 4294967295.0 &&
           x->valuedouble == (double)(uint32_t)x->valuedouble;
}

/* Rewrites \s (and \S outside classes) to the White_Space set (see the header comment). */
static char *rewrite_pattern(const char *pat) {
    size_t n = strlen(pat);
    /* worst case: every 2-byte escape becomes "[^" WHITE_SPACE "]" */
    size_t grow = sizeof WHITE_SPACE - 1 + 3;
    if (n > (SIZE_MAX - 1) / grow) return NULL;
    char *out = malloc(n * grow + 1);
    if (!out) return NULL;
    size_t o = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[i + 1];
            if (e == 's') o += (size_t)sprintf(out + o, in_class ? "%s" : "[%s]", WHITE_SPACE);
            else if (e == 'S' && !in_class) o += (size_t)sprintf(out + o, "[^%s]", WHITE_SPACE);
            else { out[o++] = c; out[o++] = e; }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            out[o++] = c;
            if (i + 1 < n && pat[i + 1] == '^') out[o++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') out[o++] = pat[++i];   /* literal ] first */
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static int compile_regex(Tokenizer *t, const char *path, const char *pattern, char *err) {
    char *pat = rewrite_pattern(pattern);
    if (!pat) return set_err(err, "phaselab: %s: out of memory for the pre-tokenizer regex", path);
    int code;
    PCRE2_SIZE off;
    t->regex = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    free(pat);
    if (!t->regex) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return set_err(err, "phaselab: %s: pre_tokenizer regex does not compile: %s", path, (char *)msg);
    }
    if (pcre2_jit_compile(t->regex, PCRE2_JIT_COMPLETE) != 0)
        fprintf(stderr, "phaselab: warning: PCRE2 JIT unavailable, the tokenizer runs interpreted\n");
    return 0;
}

static int json_is(const cJSON *obj, const char *key, const char *value) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && strcmp(v->valuestring, value) == 0;
}

static int json_true(const cJSON *obj, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

static int load_normalizer(Tokenizer *t, const cJSON *norm, const char *path, char *err) {
    if (!norm || cJSON_IsNull(norm)) return 0;
    if (json_is(norm, "type", "NFC")) { t->nfc = 1; return 0; }
    if (json_is(norm, "type", "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(norm, "normalizers"))
            if (load_normalizer(t, item, path, err)) return -1;
        return 0;
    }
    return set_err(err, "phaselab: %s: normalizer: unsupported (expected null, NFC or a Sequence of NFC)", path);
}

static int load_pre_tokenizer(Tokenizer *t, const cJSON *pre, const char *path, char *err) {
    const char *bad = "phaselab: %s: pre_tokenizer: %s (expected Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)] or ByteLevel(use_regex=true))";
    if (!pre || cJSON_IsNull(pre)) return set_err(err, bad, path, "missing");
    const cJSON *parts[2] = {pre, NULL};
    int n_parts = 1;
    if (json_is(pre, "type", "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
        n_parts = cJSON_GetArraySize(list);
        if (n_parts < 1 || n_parts > 2) return set_err(err, bad, path, "Sequence of unexpected length");
        parts[0] = cJSON_GetArrayItem(list, 0);
        parts[1] = n_parts == 2 ? cJSON_GetArrayItem(list, 1) : NULL;
    }
    const char *pattern = NULL;
    int byte_level = 0;
    for (int i = 0; i < n_parts; i++) {
        const cJSON *p = parts[i];
        if (json_is(p, "type", "Split")) {
            const cJSON *rx = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
            if (!cJSON_IsString(rx)) return set_err(err, bad, path, "Split without a Regex pattern");
            if (!json_is(p, "behavior", "Isolated")) return set_err(err, bad, path, "Split behavior is not Isolated");
            if (json_true(p, "invert")) return set_err(err, bad, path, "Split with invert=true");
            pattern = rx->valuestring;
        } else if (json_is(p, "type", "ByteLevel")) {
            if (json_true(p, "add_prefix_space")) return set_err(err, bad, path, "ByteLevel add_prefix_space=true");
            if (json_true(p, "use_regex")) {
                if (pattern) return set_err(err, bad, path, "two regexes");
                pattern = GPT2_PATTERN;
            }
            byte_level = 1;
        } else {
            return set_err(err, bad, path, "unsupported pre-tokenizer type");
        }
    }
    if (!byte_level || !pattern) return set_err(err, bad, path, "no ByteLevel step or no regex");
    return compile_regex(t, path, pattern, err);
}

static int cmp_added(const void *a, const void *b) {
    const AddedToken *x = a, *y = b;
    uint8_t fx = (uint8_t)x->text[0], fy = (uint8_t)y->text[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return 0;
}

/* ---------------------------------------------------------------- bpe_load */

int bpe_load(Tokenizer *t, const char *path, char *err) {
    size_t len;
    char *text = read_file(path, &len, err);
    if (!text) return -1;
    sha256_hex(text, len, t->fingerprint);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long line = 1;
        if (at && at >= text && at <= text + len)
            for (const char *p = text; p < at; p++) line += *p == '\n';
        free(text);
        return set_err(err, "phaselab: %s:%ld: invalid JSON (expected a HuggingFace tokenizer.json)", path, line);
    }
    free(text);
    int rc = -1;
    TextBuf raw = {0};
    VocabIndex vi = {0};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model) || !json_is(model, "type", "BPE") || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        set_err(err, "phaselab: %s: model: expected {\"type\": \"BPE\", \"vocab\": {...}, \"merges\": [...]}", path);
        goto done;
    }
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
    if (cJSON_IsTrue(fb) || (dropout && !cJSON_IsNull(dropout)) ||
        (cJSON_IsString(prefix) && prefix->valuestring[0]) || (cJSON_IsString(suffix) && suffix->valuestring[0])) {
        set_err(err, "phaselab: %s: model: byte_fallback, dropout, continuing_subword_prefix and end_of_word_suffix are not supported (expected false/null/\"\")", path);
        goto done;
    }
    if (load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), path, err)) goto done;
    if (load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path, err)) goto done;

    /* ids: the vocabulary and the added tokens */
    uint32_t max_id = 0;
    size_t blob_bytes = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        if (!json_is_id(item)) {
            set_err(err, "phaselab: %s: model.vocab[\"%s\"]: expected a non-negative integer id", path, item->string);
            goto done;
        }
        if ((uint32_t)item->valuedouble > max_id) max_id = (uint32_t)item->valuedouble;
        blob_bytes += strlen(item->string);
    }
    cJSON_ArrayForEach(item, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        if (!json_is_id(id) || !cJSON_IsString(content) || !content->valuestring[0]) {
            set_err(err, "phaselab: %s: added_tokens: expected {\"id\": N, \"content\": \"non-empty\"}", path);
            goto done;
        }
        if (json_true(item, "lstrip") || json_true(item, "rstrip") || json_true(item, "single_word") || json_true(item, "normalized")) {
            set_err(err, "phaselab: %s: added token \"%s\": lstrip/rstrip/single_word/normalized=true are not supported (expected false)", path, content->valuestring);
            goto done;
        }
        if ((uint32_t)id->valuedouble > max_id) max_id = (uint32_t)id->valuedouble;
        blob_bytes += strlen(content->valuestring);
        t->n_added++;
    }
    /* ids are dense (HuggingFace numbers its entries 0..n-1): an id past the number of entries
     * is a corrupt file, not a reason to allocate tables for 2^32 ids */
    size_t n_entries = (size_t)cJSON_GetArraySize(vocab) + (size_t)t->n_added;
    if ((size_t)max_id >= n_entries) {
        set_err(err, "phaselab: %s: token id %u, expected < %zu (the number of model.vocab and added_tokens entries)",
                path, max_id, n_entries);
        goto done;
    }
    t->n_ids = max_id + 1;
    t->blob = malloc(blob_bytes + 1);
    t->token_off = malloc(t->n_ids * sizeof *t->token_off);
    t->token_len = calloc(t->n_ids, sizeof *t->token_len);
    t->added = calloc((size_t)t->n_added + 1, sizeof *t->added);
    if (!t->blob || !t->token_off || !t->token_len || !t->added) { set_err(err, "phaselab: %s: out of memory for %u token ids", path, t->n_ids); goto done; }
    for (uint32_t i = 0; i < t->n_ids; i++) t->token_off[i] = UINT64_MAX;

    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[512];
    byte_level_map(byte_to_cp);
    for (int i = 0; i < 512; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (int16_t)b;

    size_t used = 0;
    cJSON_ArrayForEach(item, vocab) {
        uint32_t id = (uint32_t)item->valuedouble;
        if (byte_level_decode(item->string, cp_to_byte, &raw)) {
            set_err(err, "phaselab: %s: model.vocab[\"%s\"]: a character outside the ByteLevel alphabet", path, item->string);
            goto done;
        }
        if (t->token_off[id] != UINT64_MAX) {
            set_err(err, "phaselab: %s: model.vocab: id %u appears twice", path, id);
            goto done;
        }
        memcpy(t->blob + used, raw.data, raw.len);
        t->token_off[id] = used;
        t->token_len[id] = (uint32_t)raw.len;
        used += raw.len;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = UINT32_MAX;
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (t->token_off[id] != UINT64_MAX && t->token_len[id] == 1)
            t->byte_id[(uint8_t)t->blob[t->token_off[id]]] = id;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] == UINT32_MAX) {
            set_err(err, "phaselab: %s: model.vocab: no token for byte 0x%02x (expected all 256 ByteLevel bytes)", path, b);
            goto done;
        }

    /* raw bytes -> id index, then the merge table */
    vi.mask = 1;
    while (vi.mask < (uint64_t)t->n_ids * 2) vi.mask <<= 1;
    vi.slot = calloc(vi.mask, sizeof *vi.slot);
    vi.mask -= 1;
    if (!vi.slot) { set_err(err, "phaselab: tokenizer: out of memory"); goto done; }
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (t->token_off[id] != UINT64_MAX) vocab_index_put(&vi, t, id);

    size_t n_merges = (size_t)cJSON_GetArraySize(merges);
    t->merge_mask = 1;
    while (t->merge_mask < n_merges * 2 + 2) t->merge_mask <<= 1;
    t->merges = malloc(t->merge_mask * sizeof *t->merges);
    if (!t->merges) { set_err(err, "phaselab: tokenizer: out of memory"); goto done; }
    for (uint64_t i = 0; i < t->merge_mask; i++) t->merges[i].key = UINT64_MAX;
    t->merge_mask -= 1;
    TextBuf left = {0}, right = {0};
    uint32_t rank = 0;
    cJSON_ArrayForEach(item, merges) {
        const char *a = NULL, *b = NULL;
        char *split = NULL;
        if (cJSON_IsString(item)) {
            split = strdup(item->valuestring);
            if (!split) {
                text_buf_free(&left); text_buf_free(&right);
                set_err(err, "phaselab: %s: out of memory: %zu bytes for model.merges[%u]", path, strlen(item->valuestring) + 1, rank);
                goto done;
            }
            char *sp = strchr(split, ' ');
            if (sp) { *sp = 0; a = split; b = sp + 1; }
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(item, 0)) && cJSON_IsString(cJSON_GetArrayItem(item, 1))) {
            a = cJSON_GetArrayItem(item, 0)->valuestring;
            b = cJSON_GetArrayItem(item, 1)->valuestring;
        }
        int ok = a && b && !byte_level_decode(a, cp_to_byte, &left) && !byte_level_decode(b, cp_to_byte, &right);
        uint32_t ia = UINT32_MAX, ib = UINT32_MAX, im = UINT32_MAX;
        if (ok) {
            ia = vocab_index_get(&vi, t, left.data, left.len);
            ib = vocab_index_get(&vi, t, right.data, right.len);
            ok = !text_buf_append(&left, right.data, right.len);
            if (ok) im = vocab_index_get(&vi, t, left.data, left.len);
        }
        free(split);
        if (!ok || ia == UINT32_MAX || ib == UINT32_MAX || im == UINT32_MAX) {
            text_buf_free(&left); text_buf_free(&right);
            set_err(err, "phaselab: %s: model.merges[%u]: expected a pair of vocabulary tokens whose concatenation is in the vocabulary", path, rank);
            goto done;
        }
        uint64_t key = (uint64_t)ia << 32 | ib;
        uint64_t i = ((key * 0x9E3779B97F4A7C15ull) >> 29) & t->merge_mask;
        while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
        if (t->merges[i].key == UINT64_MAX) {   /* a repeated pair keeps its first (lowest) rank */
            t->merges[i].key = key;
            t->merges[i].rank = rank;
            t->merges[i].merged = im;
        }
        rank++;
    }
    text_buf_free(&left); text_buf_free(&right);

    /* added tokens: decode to their content, match by first byte, longest first */
    int k = 0;
    t->eot_id = UINT32_MAX;
    cJSON_ArrayForEach(item, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(item, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(item, "content")->valuestring;
        size_t n = strlen(content);
        /* an id already taken (by the vocabulary or an earlier added token) must name the same
         * text, or decoding would not give back what was encoded (found by fuzz_tokenizer_json) */
        if (t->token_off[id] != UINT64_MAX &&
            (t->token_len[id] != n || memcmp(t->blob + t->token_off[id], content, n) != 0)) {
            set_err(err, "phaselab: %s: added token \"%s\": id %u already names another token (expected one text per id)",
                    path, content, id);
            goto done;
        }
        memcpy(t->blob + used, content, n);
        t->token_off[id] = used;
        t->token_len[id] = (uint32_t)n;
        t->added[k].text = t->blob + used;
        t->added[k].len = (uint32_t)n;
        t->added[k].id = id;
        used += n;
        k++;
        if (strcmp(content, "<|endoftext|>") == 0) t->eot_id = id;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    for (int b = 0, i = 0; b <= 256; b++) {
        while (i < t->n_added && (uint8_t)t->added[i].text[0] < b) i++;
        t->added_first[b] = b == 256 ? t->n_added : i;
    }
    t->nfc_unsafe = nfc_unsafe_bitmap();
    rc = 0;
done:
    free(vi.slot);
    text_buf_free(&raw);
    cJSON_Delete(root);
    return rc;
}

void bpe_free(Tokenizer *t) {
    free(t->blob);
    free(t->token_off);
    free(t->token_len);
    free(t->merges);
    free(t->added);
    if (t->regex) pcre2_code_free(t->regex);
}

/* ---------------------------------------------------------------- encoding */

static inline uint64_t piece_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
    }
    return h;
}

static int encode_piece(TokenizerState *st, const uint8_t *p, size_t n, TokenIds *out) {
    if (n == 1) return token_ids_push(out, st->tok->byte_id[p[0]]);
    if (n > CACHE_KEY_MAX) return bpe_merge_piece(st, p, n, out);
    CacheSlot *slot = &st->cache[piece_hash(p, n) & (CACHE_SLOTS - 1)];
    if (slot->key_len == n && memcmp(slot->key, p, n) == 0) {
        if (token_ids_reserve(out, slot->n_ids)) return -1;
        memcpy(out->ids + out->n, slot->ids, slot->n_ids * sizeof(uint32_t));
        out->n += slot->n_ids;
        return 0;
    }
    size_t start = out->n;
    if (bpe_merge_piece(st, p, n, out)) return -1;
    size_t produced = out->n - start;
    if (produced <= CACHE_IDS_MAX) {
        slot->key_len = (uint8_t)n;
        slot->n_ids = (uint8_t)produced;
        memcpy(slot->key, p, n);
        memcpy(slot->ids, out->ids + start, produced * sizeof(uint32_t));
    }
    return 0;
}

/* 1 when s[0, n) may change under NFC (contains an NFC-unsafe code point). */
static int needs_nfc(const Tokenizer *t, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] < 0xCC) { i++; continue; }   /* below U+0300 (or a continuation byte) */
        if (s[i] < 0xC0) { i++; continue; }
        uint32_t cp;
        i += (size_t)utf8_decode_valid(s + i, &cp);
        if (t->nfc_unsafe[cp >> 3] >> (cp & 7) & 1) return 1;
    }
    return 0;
}

/* Normalizes, splits by the regex and merges one stretch of text between added tokens. */
static int encode_segment(TokenizerState *st, const uint8_t *s, size_t n, TokenIds *out) {
    const Tokenizer *t = st->tok;
    if (n == 0) return 0;
    uint8_t *normalized = NULL;
    if (t->nfc && needs_nfc(t, s, n)) {
        utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &normalized, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) return -1;
        s = normalized;
        n = (size_t)m;
    }
    int rc = 0;
    size_t pos = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->match);
    while (pos < n) {
        int m = pcre2_jit_match(t->regex, s, n, pos, PCRE2_NO_UTF_CHECK, st->match, NULL);
        if (m == PCRE2_ERROR_JIT_BADOPTION)
            m = pcre2_match(t->regex, s, n, pos, PCRE2_NO_UTF_CHECK, st->match, NULL);
        size_t a, b;
        if (m < 0) { a = n; b = n; }           /* no further match: the rest is one gap piece */
        else { a = ov[0]; b = ov[1]; }
        if (a > pos && (rc = encode_piece(st, s + pos, a - pos, out))) break;
        if (b > a && (rc = encode_piece(st, s + a, b - a, out))) break;
        if (b == a) {                           /* empty match: step over one character */
            if (a >= n) break;
            uint32_t cp;
            size_t step = (size_t)utf8_decode_valid(s + a, &cp);
            if ((rc = encode_piece(st, s + a, step, out))) break;
            b = a + step;
        }
        pos = b;
    }
    free(normalized);
    return rc;
}

long bpe_encode(TokenizerState *st, const char *text, size_t len, TokenIds *out, char *err) {
    const Tokenizer *t = st->tok;
    long replaced = 0;
    if (utf8_valid_prefix(text, len) != len) {
        st->sanitized.len = 0;
        replaced = utf8_sanitize(text, len, &st->sanitized);
        if (replaced < 0) return set_err(err, "phaselab: tokenizer: out of memory");
        text = st->sanitized.data;
        len = st->sanitized.len;
    }
    const uint8_t *s = (const uint8_t *)text;
    size_t seg = 0, i = 0;
    /* common case: every added token starts with the same byte ('<' for Qwen) -> memchr */
    int single_first = t->n_added > 0 && (uint8_t)t->added[0].text[0] == (uint8_t)t->added[t->n_added - 1].text[0];
    while (i < len) {
        if (t->n_added == 0) { i = len; break; }
        if (single_first) {
            const void *hit = memchr(s + i, (uint8_t)t->added[0].text[0], len - i);
            if (!hit) { i = len; break; }
            i = (size_t)((const uint8_t *)hit - s);
        }
        int lo = t->added_first[s[i]], hi = t->added_first[s[i] + 1];
        int found = -1;
        for (int k = lo; k < hi; k++)
            if (t->added[k].len <= len - i && memcmp(s + i, t->added[k].text, t->added[k].len) == 0) { found = k; break; }
        if (found < 0) { i++; continue; }
        if (encode_segment(st, s + seg, i - seg, out) || token_ids_push(out, t->added[found].id))
            return set_err(err, "phaselab: tokenizer: out of memory");
        i += t->added[found].len;
        seg = i;
    }
    if (encode_segment(st, s + seg, len - seg, out)) return set_err(err, "phaselab: tokenizer: out of memory");
    return replaced;
}

int bpe_decode(const Tokenizer *t, const uint32_t *ids, size_t n, TextBuf *out, char *err) {
    if (text_buf_append(out, NULL, 0)) return set_err(err, "phaselab: tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || t->token_off[id] == UINT64_MAX)
            return set_err(err, "phaselab: decode: id %u at position %zu is not in the tokenizer (expected < %u)", id, i, t->n_ids);
        if (text_buf_append(out, t->blob + t->token_off[id], t->token_len[id]))
            return set_err(err, "phaselab: tokenizer: out of memory");
    }
    return 0;
}
