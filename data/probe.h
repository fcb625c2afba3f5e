/* Lookup-probe sets (docs/spec.md §3.5): the prompts of the controlled retrieval probe, built by
 * tools/make-probe and read here.
 *
 * A prompt: 64 records "key value" (one token each, distinct keys), 8 demonstration records
 * repeated from the list (never the target; prompts shorter than 146 tokens have fewer of both,
 * docs/spec.md §3.5), then the target key again as the prompt's last
 * token (the query). The answer is the target record's value; a model scores when the argmax
 * of the logit at the query position (length - 1) is the answer. Prompts are grouped by
 * protocol (pp = prefix padding, ip = in-sequence padding) and by the residue
 * r = t_K mod P of the position t_K of the target's key in the list.
 *
 * File format (all integers little-endian), size = 256 + 32 * n_prompts + 4 * n_tokens exactly:
 *   Header, 256 bytes:
 *     0-7     magic "PHLPRBv1"
 *     8-11    u32 header size (256)
 *     12-15   u32 prompt record size (32)
 *     16-19   u32 n_prompts
 *     20-23   u32 residues P
 *     24-27   u32 vocabulary size of the tokenizer the prompts were made with (256 = synthetic)
 *     28-31   u32 longest prompt in tokens
 *     32-39   u64 n_tokens (all prompts together)
 *     40-103  tokenizer fingerprint, printable ASCII, NUL-padded (as in token shards: sha256 hex of
 *             tokenizer.json, or "synthetic")
 *     104-107 u32 query position q: every prompt has length q + 1 (the query is its last token)
 *     108-111 u32 records per prompt (64; lookup prompts under 146 tokens: fewer)
 *     112-115 u32 demonstration records per prompt (8, fewer under 146 tokens; needle: 0)
 *     116-119 u32 layout: 0 = lookup (above), 1 = needle (below)
 *     120-123 u32 builder seed (low 32 bits; files from older builders: 0 here and below)
 *     124-127 u32 builder prompts per residue and protocol (0 = unknown)
 *     128-131 u32 builder padding F (fillers per prompt)
 *     132-135 u32 key tokens per record nk (needle; lookup 1)
 *     136-139 u32 value tokens per record nv (needle; lookup 1)
 *     140-255 zero
 *   Prompt table, n_prompts records of 32 bytes:
 *     0-3     u32 protocol: 0 = pp (prefix padding), 1 = ip (in-sequence padding)
 *     4-7     u32 residue r = t_K mod P
 *     8-11    u32 t_K, position of the target key in the list (tokens[t_K] = the query token)
 *     12-15   u32 answer token (= tokens[t_K + 1], the target's value)
 *     16-19   u32 length in tokens (= q + 1)
 *     20-23   u32 index of the target record in the list (0..records-1)
 *     24-31   u64 offset of the prompt's first token in the token array, in tokens
 *   Tokens: n_tokens u32.
 * Needle layout (docs/spec.md §4.3, DeepSeek's position-matched needle): a haystack of records of
 * nk key tokens then nv value tokens, then the target record's nk key tokens again ending at the
 * query position q, then its first nv - 1 value tokens (teacher forced). length = q + nv;
 * t_K = the position of the target record's first key token; tokens[t_K .. t_K+nk-1] equal
 * tokens[q-nk+1 .. q]; answer = tokens[t_K + nk] (the first value token); tokens[q+1+j] =
 * tokens[t_K+nk+j] for j < nv - 1. The prompt scores when the argmax at q + j is the value
 * token tokens[t_K + nk + j] for every j = 0..nv-1.
 * The reader checks all of this (magic, sizes, file length, each prompt's fields against its
 * tokens, every token against the model's vocabulary) and names the file and the byte offset
 * or field of the first thing wrong.
 *
 * Placement used by tools/make-probe (see its header for the derivation): both protocols share
 * the query position q = 144 + F (F fillers per prompt) and, prompt by prompt, the same t_K
 * and target record; t_K per residue follows a mixture of quadratic B-splines with knot spacing
 * P, whose mean and variance are identical on every coset r + PZ, so the groups' mean and
 * variance of t_K agree up to rounding to N prompts (N = 1000, P = 24, max-len 256: means
 * within 0.024 positions, variances within 0.04%; the builder prints the figures). */
#ifndef PHASELAB_PROBE_H
#define PHASELAB_PROBE_H
#include <stddef.h>
#include <stdint.h>

#define PROBE_MAGIC "PHLPRBv1"
#define PROBE_HEADER_BYTES 256
#define PROBE_RECORD_BYTES 32
#define PROBE_FINGERPRINT_BYTES 64
#define PROBE_MAX_RESIDUES 256

enum { PROBE_PP = 0, PROBE_IP = 1, PROBE_N_PROTOCOLS = 2 };

enum { PROBE_LAYOUT_LOOKUP = 0, PROBE_LAYOUT_NEEDLE = 1 };

typedef struct ProbeSet ProbeSet;

/* The builder options recorded in the header (0 where an older builder left them out). */
typedef struct {
    int layout;                  /* PROBE_LAYOUT_* */
    uint32_t seed, per_residue, padding, key_tokens, value_tokens;
    int max_len;                 /* longest prompt */
    uint32_t records;            /* records per prompt (header 108-111, >= 1): the candidate values a
                                  * prompt offers, so chance accuracy is 1 / records */
    uint32_t demos;              /* demonstration records per prompt (header 112-115; needle 0) */
} ProbeBuilder;

/* The most residues tools/make-probe can balance in prompts of max_len tokens with its default
 * fit (lookup: 64 records and 8 demonstrations from 146 tokens on, fewer below; needle: records
 * of record_tokens tokens filling 3/4 of the prompt): P <= (target positions) / 3, the
 * B-spline design's need. 0 when no prompt of that layout fits. Mirrors the builder's rule
 * (tools/make-probe lookup_fit, main_needle; tests/test_probe_builder.py checks they agree), so
 * an error can recommend a build that works. */
int probe_builder_max_residues(int layout, long max_len, int record_tokens);
/* One recommendation for a probe set of this layout, P residues and record_tokens (needle) at
 * evaluation length T: "tools/make-probe ... --max-len T --residues P" when that works, else the
 * most residues that fit (with eval.residues), else that none fits. Writes into out[n]. */
void probe_builder_advice(int layout, int P, int record_tokens, long T, char *out, size_t n);

/* One prompt, as stored (tokens point into the set's memory). */
typedef struct {
    int protocol;              /* PROBE_PP | PROBE_IP */
    int residue;               /* t_key mod P */
    int t_key;                 /* position of the target key in the list */
    int32_t answer;            /* the target's value token */
    int length;                /* tokens; the query is at length - 1 */
    int target_index;          /* record index of the target in the list */
    const int32_t *tokens;     /* [length] */
} ProbePrompt;

/* Loads and validates path. vocab_limit: the model's vocabulary (every token and the file's
 * vocabulary size must be below / at most it; 0 = no check). max_len: every prompt must fit
 * in max_len tokens (the evaluation length T; <= 0 = no check). Returns 0 and *ps, or -1 with
 * "FILE@OFFSET: ..." (or "FILE: prompt I: field ...") in err. */
int probe_set_load(ProbeSet **ps, const char *path, uint32_t vocab_limit, int max_len, char *err);
void probe_set_free(ProbeSet *ps);

int probe_set_count(const ProbeSet *ps);                    /* prompts, both protocols */
int probe_set_count_protocol(const ProbeSet *ps, int protocol);
int probe_set_residues(const ProbeSet *ps);                 /* P */
uint32_t probe_set_vocab_size(const ProbeSet *ps);
int probe_set_max_length(const ProbeSet *ps);               /* longest prompt */
int probe_set_query_position(const ProbeSet *ps);           /* q, common to all prompts */
const char *probe_set_fingerprint(const ProbeSet *ps);      /* NUL-terminated */
const char *probe_set_path(const ProbeSet *ps);
/* Prompt i (0 <= i < count); returns 0, or -1 when i is out of range. */
int probe_set_prompt(const ProbeSet *ps, int i, ProbePrompt *out);

int probe_set_layout(const ProbeSet *ps);                   /* PROBE_LAYOUT_* */
ProbeBuilder probe_set_builder(const ProbeSet *ps);
/* Scored positions of every prompt: 1 (lookup) or nv (needle: q, q+1, ..., q+nv-1). */
int probe_set_scored_tokens(const ProbeSet *ps);

/* Chance accuracy of a prompt, 1 / N with N = the candidate values it offers (the records per
 * prompt of the header: a model that answers with some record's value without retrieving the
 * target's is right 1 / N of the time). */
int probe_set_candidates(const ProbeSet *ps);

/* Whether probe set b (another file combined with a, e.g. the calibration set of a knockout) was
 * built like a: tokenizer fingerprint, layout, residues, query position (prompt length), key and
 * value tokens per record. Returns 0, or -1 with one line naming both files and both values of
 * the first difference (prefixed by what, e.g. "--calib"). */
int probe_set_same_build(const ProbeSet *a, const ProbeSet *b, const char *what, char *err);

/* Protocol names: "pp", "ip". */
const char *probe_protocol_name(int protocol);
#endif
