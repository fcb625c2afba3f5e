/* Lookup-probe set reader: loads a PHLPRBv1 file (format in data/probe.h) into memory and
 * validates it completely: header fields, file length, every prompt record against its own
 * tokens (residue = t_K mod P, tokens[t_K] = query, tokens[t_K + 1] = answer, common query
 * position), and every token against the model's vocabulary. Errors name the file and the byte
 * offset of the offending field. */
#include "data/probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errors.h"
#include "common/fsutil.h"

typedef struct {
    int protocol, residue, t_key, length, target_index;
    int32_t answer;
    uint64_t offset;           /* first token, in tokens */
} ProbeRecord;

struct ProbeSet {
    char *path;                /* as given (any length) */
    int n_prompts, residues, max_length, query_position;
    int count_protocol[PROBE_N_PROTOCOLS];
    uint32_t vocab_size;
    uint64_t n_tokens;
    char fingerprint[PROBE_FINGERPRINT_BYTES + 1];
    ProbeBuilder builder;      /* layout and recorded builder options */
    ProbeRecord *records;      /* [n_prompts] */
    int32_t *tokens;           /* [n_tokens] */
};

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd_u64(const unsigned char *p) { return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32; }

const char *probe_protocol_name(int protocol) {
    return protocol == PROBE_PP ? "pp" : protocol == PROBE_IP ? "ip" : "?";
}

void probe_set_free(ProbeSet *ps) {
    if (!ps) return;
    free(ps->records);
    free(ps->tokens);
    free(ps->path);
    free(ps);
}

int probe_builder_max_residues(int layout, long T, int K) {
    long positions;                                  /* target positions 0..hi: hi + 1 of them */
    if (layout == PROBE_LAYOUT_NEEDLE) {
        if (K < 2 || T < K) return 0;
        long R = 3 * (T - K + 1) / (4L * K), F = T - R * K - (K - 1);
        if (R < 2 || F < 1) return 0;
        positions = F + K * (R - 1) + 1;
    } else {
        long R = 64, D = 8;                          /* 2R + 2D + 1 = 145 tokens besides the fillers */
        if (T < 146) {
            D = T / 16 < 1 ? 1 : T / 16 > 8 ? 8 : T / 16;
            R = (T - 2 * D - 1) / 3 < 64 ? (T - 2 * D - 1) / 3 : 64;
        }
        long F = T - 2 * R - 2 * D - 1;
        if (R < 2 || D > R - 1 || F < 1) return 0;
        positions = F + 2 * R - 1;
    }
    long P = positions / 3;
    return P > PROBE_MAX_RESIDUES ? PROBE_MAX_RESIDUES : (int)P;
}

void probe_builder_advice(int layout, int P, int K, long T, char *out, size_t n) {
    const int fit = probe_builder_max_residues(layout, T, K);
    char how[64] = "";
    if (layout == PROBE_LAYOUT_NEEDLE) snprintf(how, sizeof how, " --layout needle --record-tokens %d", K);
    if (fit >= P)
        snprintf(out, n, "rebuild it with tools/make-probe%s --max-len %ld --residues %d", how, T, P);
    else if (fit >= 1)
        snprintf(out, n, "tools/make-probe balances at most %d residues in %ld tokens: rebuild it with tools/make-probe%s "
                 "--max-len %ld --residues %d and set eval.residues=%d", fit, T, how, T, fit, fit);
    else
        snprintf(out, n, "no %s probe fits %ld tokens; evaluate with a longer data.seq_len",
                 layout == PROBE_LAYOUT_NEEDLE ? "needle" : "lookup", T);
}

int probe_set_load(ProbeSet **out, const char *path, uint32_t vocab_limit, int max_len, char *err) {
    *out = NULL;
    size_t size = 0;
    unsigned char *buf = (unsigned char *)fs_read_file(path, &size, err);   /* "PATH: cannot open/read: WHY" */
    if (!buf) return -1;
    ProbeSet *ps = calloc(1, sizeof *ps);
    int rc = -1;
    if (!ps || !(ps->path = strdup(path))) { set_err(err, "%s: out of memory", path); goto done; }

    if (size < PROBE_HEADER_BYTES) {
        set_err(err, "%s@0: file of %zu bytes is shorter than the %d-byte probe header", path, size, PROBE_HEADER_BYTES);
        goto done;
    }
    if (memcmp(buf, PROBE_MAGIC, 8) != 0) {
        set_err(err, "%s@0: bad magic, expected \"%s\" (a probe set made by tools/make-probe)", path, PROBE_MAGIC);
        goto done;
    }
    uint32_t header = rd_u32(buf + 8), recsize = rd_u32(buf + 12), n = rd_u32(buf + 16);
    uint32_t P = rd_u32(buf + 20), vocab = rd_u32(buf + 24), maxlen_f = rd_u32(buf + 28);
    uint64_t n_tokens = rd_u64(buf + 32);
    uint32_t q = rd_u32(buf + 104);
    uint32_t layout = rd_u32(buf + 116), nk = rd_u32(buf + 132), nv = rd_u32(buf + 136);
    if (layout > PROBE_LAYOUT_NEEDLE) { set_err(err, "%s@116: layout %u, expected 0 (lookup) or 1 (needle)", path, layout); goto done; }
    if (layout == PROBE_LAYOUT_LOOKUP) nk = nv = 1;
    else if (nk < 1 || nv < 1 || nk > 64 || nv > 64) {
        set_err(err, "%s@132: needle record of %u key and %u value tokens, expected 1..64 each", path, nk, nv);
        goto done;
    }
    ps->builder = (ProbeBuilder){(int)layout, rd_u32(buf + 120), rd_u32(buf + 124), rd_u32(buf + 128), nk, nv, (int)maxlen_f,
                                 rd_u32(buf + 108), rd_u32(buf + 112)};
    if (header != PROBE_HEADER_BYTES) { set_err(err, "%s@8: header size %u, expected %d", path, header, PROBE_HEADER_BYTES); goto done; }
    if (recsize != PROBE_RECORD_BYTES) { set_err(err, "%s@12: prompt record size %u, expected %d", path, recsize, PROBE_RECORD_BYTES); goto done; }
    if (n == 0 || n > 0x7fffffffu) { set_err(err, "%s@16: n_prompts %u, expected 1..2^31-1", path, n); goto done; }
    if (P == 0 || P > PROBE_MAX_RESIDUES) { set_err(err, "%s@20: residues %u, expected 1..%d", path, P, PROBE_MAX_RESIDUES); goto done; }
    if (vocab == 0 || (vocab_limit && vocab > vocab_limit)) {
        set_err(err, "%s@24: probe vocabulary size %u, expected 1..%u (the model's vocab_size)", path, vocab,
                vocab_limit ? vocab_limit : 0xffffffffu);
        goto done;
    }
    if (maxlen_f == 0 || maxlen_f > 0x7fffffffu) { set_err(err, "%s@28: longest prompt %u, expected >= 1", path, maxlen_f); goto done; }
    if (max_len > 0 && maxlen_f > (uint32_t)max_len) {
        char advice[320];
        probe_builder_advice((int)layout, (int)P, (int)(nk + nv), max_len, advice, sizeof advice);
        set_err(err, "%s@28: prompts of up to %u tokens do not fit the evaluation length %d (%s)", path, maxlen_f, max_len,
                advice);
        goto done;
    }
    /* 64-bit sums: q (and t_K below) near 2^32 must not wrap past the bounds */
    if ((uint64_t)q + 1 < 2ull * nk + nv) { set_err(err, "%s@104: query position %u leaves no room for a target record of %u tokens and its query", path, q, nk + nv); goto done; }
    if ((uint64_t)q + nv > maxlen_f) { set_err(err, "%s@104: query position %u, expected < the longest prompt %u", path, q, maxlen_f); goto done; }
    uint64_t expect = (uint64_t)PROBE_HEADER_BYTES + (uint64_t)PROBE_RECORD_BYTES * n + 4 * n_tokens;
    if (n_tokens > ((uint64_t)1 << 40) || expect != size) {
        set_err(err, "%s@32: n_tokens %llu and n_prompts %u imply %llu bytes, the file has %zu", path,
                (unsigned long long)n_tokens, n, (unsigned long long)expect, size);
        goto done;
    }
    ps->n_prompts = (int)n;
    ps->residues = (int)P;
    ps->vocab_size = vocab;
    ps->max_length = (int)maxlen_f;
    ps->query_position = (int)q;
    ps->n_tokens = n_tokens;
    /* printable ASCII padded with NULs (as in token shards): it is compared with the checkpoint's and
     * printed in one-line messages, so a newline or a control byte there is refused */
    for (int i = 0, len = (int)strnlen((const char *)buf + 40, PROBE_FINGERPRINT_BYTES); i < PROBE_FINGERPRINT_BYTES; i++) {
        unsigned char ch = buf[40 + i];
        if (i < len ? (ch < 32 || ch > 126) : ch != 0) {
            set_err(err, "%s@%d: byte 0x%02x in the tokenizer fingerprint, expected printable ASCII padded with NULs", path, 40 + i, ch);
            goto done;
        }
    }
    memcpy(ps->fingerprint, buf + 40, PROBE_FINGERPRINT_BYTES);
    ps->fingerprint[PROBE_FINGERPRINT_BYTES] = 0;

    const unsigned char *tok = buf + PROBE_HEADER_BYTES + (size_t)PROBE_RECORD_BYTES * n;
    ps->tokens = malloc((n_tokens ? n_tokens : 1) * sizeof(int32_t));
    ps->records = malloc((size_t)n * sizeof(ProbeRecord));
    if (!ps->tokens || !ps->records) { set_err(err, "%s: out of memory", path); goto done; }
    uint32_t limit = vocab_limit ? vocab_limit : vocab;
    for (uint64_t i = 0; i < n_tokens; i++) {
        uint32_t t = rd_u32(tok + 4 * i);
        if (t >= limit) {
            set_err(err, "%s@%llu: token %u at index %llu is outside the vocabulary (expected < %u)", path,
                    (unsigned long long)(tok - buf + 4 * i), t, (unsigned long long)i, limit);
            goto done;
        }
        ps->tokens[i] = (int32_t)t;
    }
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *r = buf + PROBE_HEADER_BYTES + (size_t)PROBE_RECORD_BYTES * i;
        size_t at = (size_t)(r - buf);
        uint32_t proto = rd_u32(r), res = rd_u32(r + 4), tk = rd_u32(r + 8), ans = rd_u32(r + 12);
        uint32_t len = rd_u32(r + 16), tidx = rd_u32(r + 20);
        uint64_t off = rd_u64(r + 24);
        if (proto >= PROBE_N_PROTOCOLS) { set_err(err, "%s@%zu: prompt %u: protocol %u, expected 0 (pp) or 1 (ip)", path, at, i, proto); goto done; }
        if (len != q + nv) { set_err(err, "%s@%zu: prompt %u: length %u, expected query position + %u = %u", path, at + 16, i, len, nv, q + nv); goto done; }
        if (off > n_tokens || len > n_tokens - off) {
            set_err(err, "%s@%zu: prompt %u: tokens [%llu, %llu) run past the %llu tokens of the file", path, at + 24, i,
                    (unsigned long long)off, (unsigned long long)(off + len), (unsigned long long)n_tokens);
            goto done;
        }
        if ((uint64_t)tk + 2ull * nk + nv > (uint64_t)q + 1) {
            set_err(err, "%s@%zu: prompt %u: t_K %u, expected a target record that ends before the query (t_K <= %u)", path, at + 8, i, tk,
                    q + 1 - nk - nk - nv);
            goto done;
        }
        if (res != tk % P) { set_err(err, "%s@%zu: prompt %u: residue %u, expected t_K mod P = %u", path, at + 4, i, res, tk % P); goto done; }
        const int32_t *t = ps->tokens + off;
        for (uint32_t j = 0; j < nk; j++)
            if (t[tk + j] != t[q + 1 - nk + j]) {
                set_err(err, "%s@%zu: prompt %u: token %d at t_K + %u = %u is not the query token %d", path, at + 8, i, t[tk + j], j,
                        tk + j, t[q + 1 - nk + j]);
                goto done;
            }
        if ((uint32_t)t[tk + nk] != ans) {
            set_err(err, "%s@%zu: prompt %u: answer %u is not the token %d after the target key", path, at + 12, i, ans, t[tk + nk]);
            goto done;
        }
        for (uint32_t j = 0; j + 1 < nv; j++)
            if (t[q + 1 + j] != t[tk + nk + j]) {
                set_err(err, "%s@%zu: prompt %u: teacher-forced value token %d at %u is not the target's value token %d", path, at + 16, i,
                        t[q + 1 + j], q + 1 + j, t[tk + nk + j]);
                goto done;
            }
        if (tidx >= rd_u32(buf + 108)) {
            set_err(err, "%s@%zu: prompt %u: target index %u, expected < %u records", path, at + 20, i, tidx, rd_u32(buf + 108));
            goto done;
        }
        if (len > longest) longest = len;
        ps->records[i] = (ProbeRecord){(int)proto, (int)res, (int)tk, (int)len, (int)tidx, (int32_t)ans, off};
        ps->count_protocol[proto]++;
    }
    if (longest != maxlen_f) { set_err(err, "%s@28: longest prompt %u, but the prompts are at most %u tokens", path, maxlen_f, longest); goto done; }
    rc = 0;
done:
    free(buf);
    if (rc) probe_set_free(ps);
    else *out = ps;
    return rc;
}

int probe_set_count(const ProbeSet *ps) { return ps->n_prompts; }
int probe_set_count_protocol(const ProbeSet *ps, int protocol) {
    return (protocol >= 0 && protocol < PROBE_N_PROTOCOLS) ? ps->count_protocol[protocol] : 0;
}
int probe_set_residues(const ProbeSet *ps) { return ps->residues; }
uint32_t probe_set_vocab_size(const ProbeSet *ps) { return ps->vocab_size; }
int probe_set_max_length(const ProbeSet *ps) { return ps->max_length; }
int probe_set_query_position(const ProbeSet *ps) { return ps->query_position; }
const char *probe_set_fingerprint(const ProbeSet *ps) { return ps->fingerprint; }
const char *probe_set_path(const ProbeSet *ps) { return ps->path; }

int probe_set_layout(const ProbeSet *ps) { return ps->builder.layout; }
ProbeBuilder probe_set_builder(const ProbeSet *ps) { return ps->builder; }
int probe_set_scored_tokens(const ProbeSet *ps) { return (int)ps->builder.value_tokens; }
int probe_set_candidates(const ProbeSet *ps) {
    return ps->builder.records >= 1 && ps->builder.records <= 0x7fffffffu ? (int)ps->builder.records : 1;
}

int probe_set_same_build(const ProbeSet *a, const ProbeSet *b, const char *what, char *err) {
    const ProbeBuilder *x = &a->builder, *y = &b->builder;
    if (strcmp(a->fingerprint, b->fingerprint))
        return set_err(err, "%s %s: tokenizer fingerprint '%s', but the probe set %s has '%s': expected a set built with "
                       "the same tokenizer (tools/make-probe with the same vocabulary, another --seed)", what, b->path,
                       b->fingerprint, a->path, a->fingerprint);
    if (x->layout != y->layout)
        return set_err(err, "%s %s: layout %s, but the probe set %s is %s: expected the same layout", what, b->path,
                       y->layout == PROBE_LAYOUT_NEEDLE ? "needle" : "lookup", a->path, x->layout == PROBE_LAYOUT_NEEDLE ? "needle" : "lookup");
    if (a->residues != b->residues)
        return set_err(err, "%s %s: %d residues, but the probe set %s has %d: expected the same residue count "
                       "(tools/make-probe --residues %d)", what, b->path, b->residues, a->path, a->residues, a->residues);
    if (a->query_position != b->query_position)
        return set_err(err, "%s %s: query position %d (prompts of %d tokens), but the probe set %s has %d (%d tokens): "
                       "expected the same prompt length (the same --max-len and --padding)", what, b->path,
                       b->query_position, b->max_length, a->path, a->query_position, a->max_length);
    if (x->key_tokens != y->key_tokens || x->value_tokens != y->value_tokens)
        return set_err(err, "%s %s: records of %u key + %u value tokens, but the probe set %s has %u + %u: expected the "
                       "same --record-tokens", what, b->path, y->key_tokens, y->value_tokens, a->path, x->key_tokens,
                       x->value_tokens);
    return 0;
}

int probe_set_prompt(const ProbeSet *ps, int i, ProbePrompt *out) {
    if (i < 0 || i >= ps->n_prompts) return -1;
    const ProbeRecord *r = &ps->records[i];
    *out = (ProbePrompt){r->protocol, r->residue, r->t_key, r->answer, r->length, r->target_index,
                         ps->tokens + r->offset};
    return 0;
}
