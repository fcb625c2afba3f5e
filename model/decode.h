/* Incremental decoding with a real KV cache (docs/spec.md §1-§2 run the way they are deployed):
 * one token at a time, each layer keeping
 *   - the compressed entries Khat_j (after cknorm + RoPE at o_g + jS) and Vhat_j (absent when K/V
 *     are tied), each written ONCE, when its window completes (position o_g + jS + W - 1 arrives;
 *     o_g = 0 on the aligned grid, floor(gS/G) for KV head g with grid = staggered, docs/spec.md §2b);
 *   - a ring buffer of raw keys/values: the last n_local tokens (local = window) or the current
 *     tail e_t < s <= t (local = tail, e_t per KV head; at most max(W, S) - 1 tokens on the aligned
 *     grid, up to o_g more with staggered grids); full attention keeps every
 *     token (ring = the whole context);
 *   - the last W normalized inputs a_p (compressed only): the compressor of head g's window j
 *     runs on a_{o_g+jS..o_g+jS+W-1} when the window completes, with the same kernel as training (so the entry
 *     equals the full forward's). Keeping W rows of D (instead of per-offset partial sums)
 *     is the simple exact choice; it is counted in the cache bytes.
 * Decoding may run past the training seq_len: positions just continue (the RoPE table is built
 * for the decoder's max_context, new windows keep completing every S tokens). Within the
 * training T the logits equal model_forward's at every position (tests/test_decode.c).
 * One sequence at a time (batch 1). */
#ifndef PHASELAB_DECODE_H
#define PHASELAB_DECODE_H
#include <stddef.h>
#include <stdint.h>
#include "model/model_config.h"

struct Backend;
struct Model;
typedef struct Decoder Decoder;

/* The cache of one layer for a context of `context` tokens, elements of elem_bytes bytes. */
typedef struct {
    long context;
    int entry_cap;          /* entry slots per KV head: KV head 0's n_windows(context), the most any
                               head has (0 for full attention) */
    long head_entries;      /* entries the KV heads have at the full context, summed over the heads:
                               G * entry_cap on the aligned grid; grid = staggered: heads with one
                               window fewer leave their last slot unused (allocated, never written) */
    int value_entries;      /* 1 when entries carry their own values (not tied), else 0 */
    int ring_cap;           /* raw K/V slots: n_local | the most raw tokens a tail query of any head
                               sees, max_g max(o_g + W - 1, S - 1) (aligned: max(W,S)-1) | context (full) */
    int input_rows;         /* normalized inputs kept: W (compressed), 0 (full) */
    size_t entry_bytes;     /* entry_cap * G * d * elem * (1 + value_entries) */
    size_t raw_bytes;       /* 2 * ring_cap * G * d * elem */
    size_t input_bytes;     /* input_rows * D * elem */
    size_t index_bytes;     /* a csa layer's lightning indexer (docs/spec.md §5.4): its keys, entry_cap * dI * elem */
    size_t layer_bytes;     /* the sum of the four */
    size_t total_bytes;     /* layer_bytes * n_layers */
} DecodeCacheLayout;

/* The formula. With a layer schedule (model.layer_attention, docs/spec.md §5) each per-layer field
 * is the largest layer's and total_bytes the exact sum over the layers; ... */
void decode_cache_layout(const ModelConfig *c, long context, size_t elem_bytes, DecodeCacheLayout *out);
/* ... and layer L's own (total_bytes = its layer_bytes). The window kind keeps a ring of
 * min(context, n_local) raw keys/values and nothing else. */
void decode_cache_layout_layer(const ModelConfig *c, int L, long context, size_t elem_bytes, DecodeCacheLayout *out);

/* Allocates the cache (only the cache: no weights, no scratch) of cfg on backend be for
 * max_context tokens and returns the bytes its allocations took (0 on failure). Used by
 * --dry-run with a counting backend: the figure is measured from the allocation calls. */
size_t decode_cache_measure(const ModelConfig *cfg, const struct Backend *be, long max_context);

/* A decoder over model m (its working weights, its backend) for up to max_context positions. */
Decoder *decoder_create(struct Model *m, int max_context, char *err);
void decoder_free(Decoder *dec);
/* Forgets the sequence (position 0 again); the cache memory stays allocated. */
void decoder_reset(Decoder *dec);
int decoder_position(const Decoder *dec);
int decoder_max_context(const Decoder *dec);
/* Bytes allocated for the cache (measured: the sum of the alloc calls) and for the per-step
 * scratch + RoPE table; layout: the formula's view of the same cache. */
size_t decoder_cache_bytes(const Decoder *dec);
size_t decoder_scratch_bytes(const Decoder *dec);
const DecodeCacheLayout *decoder_layout(const Decoder *dec);
/* Feeds `token` at position decoder_position() and advances. logits (host, [vocab], may be NULL:
 * the classifier is then skipped) receives the next-token logits of that position.
 * Returns 0, or -1 with err filled (context full, token out of range, backend without decode). */
int decoder_step(Decoder *dec, int32_t token, float *logits, char *err);
/* decoder_step over tokens[0..n), logits only for the last one. */
int decoder_prefill(Decoder *dec, const int32_t *tokens, int n, float *logits, char *err);
/* The same result in one chunk, from position 0 only: the training forward's ops over all n
 * rows at once (matmuls of n rows, attention_fwd, compressor_fwd over the prompt's complete
 * windows), then the cache is filled from it (entries, the raw ring's last tokens, the last W
 * inputs). Temporary buffers for n rows are allocated for the call and freed.
 * With learned chunk boundaries (docs/spec.md §6.5) it is decoder_prefill, token by token. */
int decoder_prefill_chunk(Decoder *dec, const int32_t *tokens, int n, float *logits, char *err);
#endif
