/* UTF-8 and Unicode helpers of the tokenizers.
 *
 * Validation follows the Unicode well-formed byte sequences (Unicode 15, table 3-7):
 *   00..7F | C2..DF 80..BF | E0 A0..BF 80..BF | E1..EC 80..BF 80..BF | ED 80..9F 80..BF
 *   | EE..EF 80..BF 80..BF | F0 90..BF 80..BF 80..BF | F1..F3 80..BF{3} | F4 80..8F 80..BF{2}
 * Replacement rule for ill-formed input: each "maximal subpart" (the longest prefix of a
 * well-formed sequence that starts at the bad position, at least one byte) becomes one
 * U+FFFD - the W3C/Unicode recommended practice, the same as Python's errors="replace".
 *
 * The ByteLevel map (GPT-2): bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF are spelled as the
 * code point of the same value; the other 68 bytes, in increasing order, as 256, 257, ...
 *
 * The NFC quick-check bitmap marks code points that may change under NFC or change their
 * neighbours: canonical combining class != 0, characters that compose with a preceding one
 * (utf8proc's comb_index with bit 15 set; Hangul medial and final jamo), and characters
 * that are not their own NFC (singletons, composition exclusions). A string without any of
 * them is NFC, which lets plain text skip the normalizer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "data/tok_internal.h"

/* Length of the well-formed sequence at s (0 if ill-formed); *bad gets the maximal subpart
 * length when ill-formed. */
static size_t utf8_sequence(const uint8_t *s, size_t len, size_t *bad) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else { *bad = 1; return 0; }
    size_t i = 1;
    for (int k = 0; k < need; k++, i++) {
        if (i >= len) { *bad = i; return 0; }
        uint8_t b = s[i];
        uint8_t l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
        if (b < l || b > h) { *bad = i; return 0; }
    }
    return i;
}

size_t utf8_valid_prefix(const char *text, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, bad;
    while (i < len) {
        /* ASCII fast path: 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        if (s[i] < 0x80) { i++; continue; }
        size_t n = utf8_sequence(s + i, len - i, &bad);
        if (!n) return i;
        i += n;
    }
    return len;
}

long utf8_sanitize(const char *text, size_t len, TextBuf *out) {
    const uint8_t *s = (const uint8_t *)text;
    static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    long replaced = 0;
    size_t i = 0;
    while (i < len) {
        size_t good = utf8_valid_prefix(text + i, len - i);
        if (text_buf_append(out, text + i, good)) return -1;
        i += good;
        if (i >= len) break;
        size_t bad = 1;
        utf8_sequence(s + i, len - i, &bad);
        if (text_buf_append(out, replacement, 3)) return -1;
        replaced++;
        i += bad;
    }
    return replaced;
}

void byte_level_map(uint32_t byte_to_cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

static uint8_t nfc_bitmap[0x110000 / 8];
static pthread_once_t nfc_once = PTHREAD_ONCE_INIT;

static void build_nfc_bitmap(void) {
    for (uint32_t cp = 0x300; cp < 0x110000; cp++) {
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        int unsafe = p->combining_class != 0;
        if (p->comb_index != UINT16_MAX && (p->comb_index & 0x8000)) unsafe = 1;
        if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) unsafe = 1;
        if (!unsafe && p->decomp_seqindex != UINT16_MAX) {
            utf8proc_uint8_t in[4], *nfc = NULL;
            utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, in);
            utf8proc_ssize_t m = utf8proc_map(in, n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m != n || memcmp(in, nfc, (size_t)n) != 0) unsafe = 1;
            free(nfc);
        }
        if (unsafe) nfc_bitmap[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
}

const uint8_t *nfc_unsafe_bitmap(void) {
    pthread_once(&nfc_once, build_nfc_bitmap);
    return nfc_bitmap;
}
