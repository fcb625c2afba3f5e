/* Tests of data/tokenizer.h: SHA-256 vectors, the UTF-8 replacement rule, the byte tokenizer,
 * and the Qwen3 BPE tokenizer against the reference ids of ../shared/data/qwen3-tokenizer/
 * golden.jsonl (produced by HuggingFace tokenizers), plus fixed reference ids for long pieces
 * and Unicode corner cases (also from HuggingFace tokenizers 0.23), and round trips
 * decode(encode(x)) == x for golden texts, random byte strings (byte tokenizer) and random
 * valid UTF-8 (BPE; compared with utf8proc's NFC of x, since the tokenizer normalizes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <utf8proc.h>
#include "data/tokenizer.h"
#include "common/sha256.h"
#include "tests/check.h"

#define QWEN_DIR "../shared/data/qwen3-tokenizer/"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_sha256(void) {
    char hex[65];
    sha256_hex("", 0, hex);
    check(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "sha256 empty", "got %s", hex);
    sha256_hex("abc", 3, hex);
    check(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "sha256 abc", "got %s", hex);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two, strlen(two), hex);
    check(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "sha256 two blocks", "got %s", hex);
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    sha256_hex(million, 1000000, hex);
    free(million);
    check(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "sha256 million a", "got %s", hex);
}

static void test_utf8_rule(void) {
    struct { const char *in; size_t len; long replaced; const char *out; } cases[] = {
        {"plain", 5, 0, "plain"},
        {"a\xC0\xAF" "b", 4, 2, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b"},        /* C0 never valid; lone continuation */
        {"\xE0\x80\xAF", 3, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  /* overlong: E0 then 80 out of range */
        {"x\xF0\x9F\x98", 4, 1, "x\xEF\xBF\xBD"},                         /* truncated 4-byte: one subpart */
        {"\xED\xA0\x80", 3, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  /* surrogate */
        {"\xF4\x90\x80\x80", 4, 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* > U+10FFFF */
        {"\xE2\x82\xAC\xE2\x82", 5, 1, "\xE2\x82\xAC\xEF\xBF\xBD"},      /* euro then truncated */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TextBuf out = {0};
        long r = utf8_sanitize(cases[i].in, cases[i].len, &out);
        char name[64];
        snprintf(name, sizeof name, "utf8 replacement case %zu", i);
        check(r == cases[i].replaced && out.len == strlen(cases[i].out) && !memcmp(out.data, cases[i].out, out.len),
              name, "replaced %ld (expected %ld), %zu bytes out", r, cases[i].replaced, out.len);
        text_buf_free(&out);
    }
}

static void test_bytes(void) {
    char err[1024];
    Tokenizer *tok = tokenizer_open("bytes", err);
    if (!check(tok != NULL, "byte tokenizer opens", "%s", err)) return;
    check(tokenizer_n_ids(tok) == 257 && tokenizer_eot_id(tok) == 256 && !strcmp(tokenizer_fingerprint(tok), "bytes"),
          "byte tokenizer vocab/eot/fingerprint", "n_ids %u eot %u fp %s", tokenizer_n_ids(tok), tokenizer_eot_id(tok), tokenizer_fingerprint(tok));
    TokenizerState *st = tokenizer_state_new(tok);
    TokenIds ids = {0};
    /* regression (fuzz_jsonl, UBSan): an empty text into an empty TokenIds added 0 to NULL */
    check(tokenizer_encode(st, "", 0, &ids, err) == 0 && ids.n == 0, "byte tokenizer: empty text, no ids",
          "got %zu ids", ids.n);
    tokenizer_encode(st, "h\xC3\xA9!", 4, &ids, err);
    check(ids.n == 4 && ids.ids[0] == 'h' && ids.ids[1] == 0xC3 && ids.ids[2] == 0xA9 && ids.ids[3] == '!',
          "byte tokenizer ids are the bytes", "got %zu ids", ids.n);
    int ok = 1;
    for (int trial = 0; trial < 200 && ok; trial++) {
        size_t n = rng() % 300;
        char buf[300];
        for (size_t i = 0; i < n; i++) buf[i] = (char)rng();
        ids.n = 0;
        TextBuf back = {0};
        ok = tokenizer_encode(st, buf, n, &ids, err) >= 0 && ids.n == n &&
             tokenizer_decode(tok, ids.ids, ids.n, &back, err) == 0 && back.len == n && !memcmp(back.data, buf, n);
        text_buf_free(&back);
    }
    check(ok, "byte tokenizer round trip on random byte strings", "a random string did not round-trip");
    uint32_t bad = 300;
    TextBuf back = {0};
    check(tokenizer_decode(tok, &bad, 1, &back, err) != 0, "byte decode rejects id 300", "accepted");
    text_buf_free(&back);
    token_ids_free(&ids);
    tokenizer_state_free(st);
    tokenizer_free(tok);
}

static char *nfc(const char *s, size_t len, size_t *out_len) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    *out_len = n < 0 ? 0 : (size_t)n;
    return (char *)dst;
}

static void test_golden(Tokenizer *tok, TokenizerState *st) {
    FILE *f = fopen(QWEN_DIR "golden.jsonl", "r");
    if (!f) { check_skip("golden ids", "../shared not found"); return; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lines = 0, texts_ok = 0, ids_total = 0, ids_ok = 0, round_ok = 0;
    char first_bad[512] = "";
    char err[1024];
    TokenIds ids = {0};
    while ((n = getline(&line, &cap, f)) > 0) {
        lines++;
        cJSON *obj = cJSON_Parse(line);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(obj, "ids");
        if (!cJSON_IsString(text) || !cJSON_IsArray(want)) {
            check(0, "golden.jsonl parses", "line %ld", lines);
            cJSON_Delete(obj);
            continue;
        }
        size_t len = strlen(text->valuestring);
        ids.n = 0;
        tokenizer_encode(st, text->valuestring, len, &ids, err);
        size_t nw = (size_t)cJSON_GetArraySize(want);
        ids_total += (long)nw;
        size_t match = 0;
        for (size_t i = 0; i < nw && i < ids.n; i++)
            if ((double)ids.ids[i] == cJSON_GetArrayItem(want, (int)i)->valuedouble) match++;
        ids_ok += (long)match;
        if (match == nw && ids.n == nw) texts_ok++;
        else if (!first_bad[0]) {
            size_t at = 0;
            while (at < nw && at < ids.n && (double)ids.ids[at] == cJSON_GetArrayItem(want, (int)at)->valuedouble) at++;
            snprintf(first_bad, sizeof first_bad, "line %ld: %zu ids (expected %zu), first difference at %zu (got %u, expected %.0f)",
                     lines, ids.n, nw, at, at < ids.n ? ids.ids[at] : 0, at < nw ? cJSON_GetArrayItem(want, (int)at)->valuedouble : -1.0);
        }
        TextBuf back = {0};
        size_t nlen;
        char *expect = nfc(text->valuestring, len, &nlen);
        if (tokenizer_decode(tok, ids.ids, ids.n, &back, err) == 0 && back.len == nlen && !memcmp(back.data, expect, nlen)) round_ok++;
        free(expect);
        text_buf_free(&back);
        cJSON_Delete(obj);
    }
    free(line);
    fclose(f);
    token_ids_free(&ids);
    check(lines == 71, "golden.jsonl has 71 texts", "%ld lines", lines);
    check(texts_ok == lines && ids_total == 38431, "golden ids: every id of every text",
          "%ld/%ld texts, %ld/%ld ids match; %s", texts_ok, lines, ids_ok, ids_total, first_bad);
    check(round_ok == lines, "golden round trip decode(encode(x)) == NFC(x)", "%ld/%ld texts", round_ok, lines);
}

/* Reference ids from HuggingFace tokenizers 0.23 with the same tokenizer.json. */
static void test_reference_cases(TokenizerState *st) {
    static char spaces[201], equals[101], as[151];
    memset(spaces, ' ', 200); memset(equals, '=', 100); memset(as, 'a', 150);
    static const uint32_t ids_equals[] = {8152, 3058, 605};
    static const uint32_t ids_spaces[] = {56940, 37144};
    static const uint32_t ids_as[] = {69440, 69440, 69440, 69440, 69440, 69440, 69440, 69440, 69440, 69440,
                                      69440, 69440, 69440, 69440, 69440, 69440, 69440, 69440, 28458, 5305};
    static const uint32_t ids_acute[] = {87, 53839, 53839, 53839};
    static const uint32_t ids_angstrom[] = {144044};
    static const uint32_t ids_jamo[] = {126317};
    static const uint32_t ids_reorder[] = {124635, 53839};
    static const uint32_t ids_mongolian[] = {123970, 236, 123970, 236, 64};
    static const uint32_t ids_nel[] = {64, 126, 227, 65, 4102, 272};
    static const uint32_t ids_zwsp[] = {67, 15692, 220, 22441, 87};
    struct { const char *name, *text; const uint32_t *ids; size_t n; } cases[] = {
        {"100 '=' (long piece, heap merge)", equals, ids_equals, 3},
        {"200 spaces (long piece)", spaces, ids_spaces, 2},
        {"150 'a' (long piece)", as, ids_as, 20},
        {"x + 3 combining acute", "x\xCC\x81\xCC\x81\xCC\x81", ids_acute, 4},
        {"Angstrom sign U+212B (NFC singleton)", "\xE2\x84\xAB", ids_angstrom, 1},
        {"Hangul jamo compose to U+AC01", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", ids_jamo, 1},
        {"combining marks reorder (e + acute + dot below)", "e\xCC\x81\xCC\xA3", ids_reorder, 2},
        {"U+180E is not white space", "\xE1\xA0\x8E\xE1\xA0\x8E" "a", ids_mongolian, 5},
        {"U+0085 and U+00A0 are white space", "a\xC2\x85" "b\xC2\xA0 c", ids_nel, 6},
        {"U+200B not space, U+3000 space", "d\xE2\x80\x8B \xE3\x80\x80x", ids_zwsp, 5},
    };
    char err[1024];
    TokenIds ids = {0};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ids.n = 0;
        tokenizer_encode(st, cases[c].text, strlen(cases[c].text), &ids, err);
        int ok = ids.n == cases[c].n;
        for (size_t i = 0; ok && i < ids.n; i++) ok = ids.ids[i] == cases[c].ids[i];
        char name[160];
        snprintf(name, sizeof name, "reference ids: %s", cases[c].name);
        check(ok, name, "got %zu ids (expected %zu), first %u", ids.n, cases[c].n, ids.n ? ids.ids[0] : 0);
    }
    /* invalid UTF-8 is replaced by U+FFFD and counted */
    TokenIds want = {0};
    ids.n = 0;
    long r = tokenizer_encode(st, "a\xFF" "b", 3, &ids, err);
    tokenizer_encode(st, "a\xEF\xBF\xBD" "b", 5, &want, err);
    int same = ids.n == want.n && !memcmp(ids.ids, want.ids, ids.n * 4);
    check(r == 1 && same, "BPE invalid UTF-8 becomes U+FFFD and is counted", "replaced %ld, same ids %d", r, same);
    token_ids_free(&want);
    token_ids_free(&ids);
}

/* Random valid UTF-8 drawn from ASCII, Latin, combining marks, CJK, Hangul, emoji, spaces. */
static size_t random_utf8(char *buf, size_t max_chars) {
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F},
                                         {0x300, 0x36F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x4E00, 0x9FFF},
                                         {0x1100, 0x11FF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F6FF}, {0x2000, 0x206F},
                                         {0x3000, 0x30FF}, {0x0E00, 0x0E7F}, {0x10000, 0x10FFFF}};
    size_t nr = sizeof ranges / sizeof *ranges, len = 0, n = rng() % max_chars;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = ranges[rng() % nr];
        uint32_t cp = r[0] + (uint32_t)(rng() % (r[1] - r[0] + 1));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        len += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)buf + len);
    }
    buf[len] = 0;
    return len;
}

static void test_bpe_round_trip(Tokenizer *tok, TokenizerState *st) {
    char err[1024], buf[4 * 400 + 1];
    TokenIds ids = {0};
    int ok = 1;
    char why[256] = "";
    for (int trial = 0; trial < 2000 && ok; trial++) {
        size_t len = random_utf8(buf, 400);
        ids.n = 0;
        TextBuf back = {0};
        size_t nlen;
        char *expect = nfc(buf, len, &nlen);
        long r = tokenizer_encode(st, buf, len, &ids, err);
        ok = r == 0 && tokenizer_decode(tok, ids.ids, ids.n, &back, err) == 0 && back.len == nlen && !memcmp(back.data, expect, nlen);
        if (!ok) snprintf(why, sizeof why, "trial %d: %zu bytes in, %zu out (NFC %zu)", trial, len, back.len, nlen);
        for (size_t i = 0; ok && i < ids.n; i++) ok = ids.ids[i] < tokenizer_n_ids(tok);
        free(expect);
        text_buf_free(&back);
    }
    check(ok, "BPE round trip on random valid UTF-8 (== NFC(x))", "%s", why);
    uint32_t bad = 151700;
    TextBuf back = {0};
    check(tokenizer_decode(tok, &bad, 1, &back, err) != 0, "BPE decode rejects an id beyond the tokenizer", "accepted");
    text_buf_free(&back);
    token_ids_free(&ids);
}

static void test_qwen(void) {
    char err[1024];
    FILE *probe = fopen(QWEN_DIR "tokenizer.json", "r");
    if (!probe) { check_skip("qwen3 tokenizer", "../shared not found"); return; }
    fclose(probe);
    Tokenizer *tok = tokenizer_open(QWEN_DIR "tokenizer.json", err);
    if (!check(tok != NULL, "qwen3 tokenizer.json loads", "%s", err)) return;
    check(tokenizer_eot_id(tok) == 151643 && tokenizer_n_ids(tok) == 151669, "qwen3 eot 151643, 151669 ids",
          "eot %u, %u ids", tokenizer_eot_id(tok), tokenizer_n_ids(tok));
    check(!strcmp(tokenizer_fingerprint(tok), "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
          "qwen3 fingerprint is the sha256 of tokenizer.json", "got %s", tokenizer_fingerprint(tok));
    TokenizerState *st = tokenizer_state_new(tok);
    test_golden(tok, st);
    test_reference_cases(st);
    test_bpe_round_trip(tok, st);
    tokenizer_state_free(st);
    tokenizer_free(tok);
    Tokenizer *none = tokenizer_open("build/scratch/no-such-tokenizer.json", err);
    check(none == NULL && strstr(err, "no-such-tokenizer.json"), "a missing tokenizer.json is reported by name", "%s", err);
}

int main(void) {
    test_sha256();
    test_utf8_rule();
    test_bytes();
    test_qwen();
    return check_exit_code();
}
