/* BPE merging of one pre-tokenized piece.
 *
 * The piece starts as one symbol per byte (the single-byte token ids). Repeatedly, among all
 * adjacent symbol pairs (a, b) that have a merge rule, the one with the lowest rank is
 * replaced by its merged token; ties (the same pair at several places) go to the leftmost.
 * This is the order of HuggingFace tokenizers' Word::merge_all (a heap ordered by rank,
 * then position), so the results agree id for id.
 *
 * Symbols live in arrays indexed by the byte position where they start, linked by prev/next.
 * Short pieces (the vast majority) find the best pair by a linear scan of cached pair ranks;
 * long pieces use a min-heap of (rank << 32 | position) with lazy deletion, so a piece of
 * n bytes costs O(n log n) instead of O(n^2). */
#include <stdlib.h>
#include "data/tok_internal.h"

#define SCAN_MAX 48

static int ensure_scratch(TokenizerState *st, size_t n) {
    if (n <= st->sym_cap) return 0;
    size_t cap = st->sym_cap ? st->sym_cap : 256;
    while (cap < n) cap *= 2;
    uint32_t *a = realloc(st->sym_id, cap * sizeof *a);
    if (a) st->sym_id = a;
    uint32_t *b = realloc(st->pair_rank, cap * sizeof *b);
    if (b) st->pair_rank = b;
    uint32_t *c = realloc(st->pair_merged, cap * sizeof *c);
    if (c) st->pair_merged = c;
    uint64_t *d = realloc(st->heap, cap * 2 * sizeof *d);
    if (d) st->heap = d;
    int32_t *e = realloc(st->prev, cap * sizeof *e);
    if (e) st->prev = e;
    int32_t *f = realloc(st->next, cap * sizeof *f);
    if (f) st->next = f;
    if (!a || !b || !c || !d || !e || !f) return -1;
    st->sym_cap = cap;
    return 0;
}

/* Rank of the pair starting at symbol i (UINT32_MAX when it has no successor or no rule). */
static inline void update_pair(TokenizerState *st, int32_t i) {
    int32_t j = st->next[i];
    st->pair_rank[i] = j < 0 ? UINT32_MAX
                             : merge_lookup(st->tok, st->sym_id[i], st->sym_id[j], &st->pair_merged[i]);
}

/* Merges symbol i with its successor using the cached pair. */
static inline void merge_at(TokenizerState *st, int32_t i) {
    int32_t j = st->next[i];
    st->sym_id[i] = st->pair_merged[i];
    st->next[i] = st->next[j];
    if (st->next[j] >= 0) st->prev[st->next[j]] = i;
    st->sym_id[j] = UINT32_MAX;     /* dead */
}

static void heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (heap[p] <= v) break;
        heap[i] = heap[p];
        i = p;
    }
    heap[i] = v;
}

static uint64_t heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap[c + 1] < heap[c]) c++;
        if (v <= heap[c]) break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n > 0) heap[i] = v;
    return top;
}

int bpe_merge_piece(TokenizerState *st, const uint8_t *piece, size_t len, TokenIds *out) {
    const Tokenizer *tok = st->tok;
    if (len == 0) return 0;
    if (ensure_scratch(st, len)) return -1;
    int32_t n = (int32_t)len;
    for (int32_t i = 0; i < n; i++) {
        st->sym_id[i] = tok->byte_id[piece[i]];
        st->prev[i] = i - 1;
        st->next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (int32_t i = 0; i < n; i++) update_pair(st, i);

    if (n <= SCAN_MAX) {
        for (;;) {
            uint32_t best = UINT32_MAX;
            int32_t at = -1;
            for (int32_t i = 0; i >= 0; i = st->next[i])
                if (st->pair_rank[i] < best) { best = st->pair_rank[i]; at = i; }
            if (at < 0) break;
            merge_at(st, at);
            update_pair(st, at);
            if (st->prev[at] >= 0) update_pair(st, st->prev[at]);
        }
    } else {
        size_t hn = 0;
        for (int32_t i = 0; i < n; i++)
            if (st->pair_rank[i] != UINT32_MAX) heap_push(st->heap, &hn, (uint64_t)st->pair_rank[i] << 32 | (uint32_t)i);
        while (hn > 0) {
            uint64_t top = heap_pop(st->heap, &hn);
            int32_t at = (int32_t)(top & 0xFFFFFFFFu);
            uint32_t rank = (uint32_t)(top >> 32);
            if (st->sym_id[at] == UINT32_MAX || st->pair_rank[at] != rank) continue;   /* stale */
            merge_at(st, at);
            update_pair(st, at);
            if (st->pair_rank[at] != UINT32_MAX) heap_push(st->heap, &hn, (uint64_t)st->pair_rank[at] << 32 | (uint32_t)at);
            int32_t p = st->prev[at];
            if (p >= 0) {
                update_pair(st, p);
                if (st->pair_rank[p] != UINT32_MAX) heap_push(st->heap, &hn, (uint64_t)st->pair_rank[p] << 32 | (uint32_t)p);
            }
        }
    }
    size_t count = 0;
    for (int32_t i = 0; i >= 0; i = st->next[i]) count++;
    if (token_ids_reserve(out, count)) return -1;
    for (int32_t i = 0; i >= 0; i = st->next[i]) out->ids[out->n++] = st->sym_id[i];
    return 0;
}
