/* Run configuration: INI file + `section.key=value` overrides -> Config (trainer/run_config.h).
 *
 * One key table (CONFIG_KEYS below) is the single source of every key's section, name, type,
 * default (as INI text), allowed range and help line: config_defaults() parses the default
 * strings, the INI handler and the override parser go through the same value parser,
 * config_keys() serves ./train --help, and config_write() prints every key back from it.
 *
 * Order of a load: defaults -> file (inih; each key remembers the line it came from) ->
 * overrides (win; remembered as "command line") -> resolution (rope_dims = head_dim when left
 * at "head_dim", run.name = file base name without .ini or "run") -> validation: the per-key
 * ranges of the table (keys of the compressed attention only when attention = compressed),
 * then the cross-key rules. An error names where the offending value came from:
 *   FILE:LINE: [section] key: what is wrong; what is allowed
 *   command line: section.key: ...
 *   FILE: [section] key (default): ...
 *
 * The system inih is built without INI_HANDLER_LINENO and with a 200-byte line buffer, so the
 * file is fed through our own line reader (ini_parse_stream): it counts lines (one reader call
 * per physical line, the same count inih uses for its error line), checks section headers
 * (inih does not call the handler for a section without keys) and hands lines too long for
 * inih's buffer to the handler itself instead of letting inih split them. */
#include "trainer/run_config.h"
#include "common/errors.h"
#include "common/fsutil.h"
#include "data/train_stages.h"
#include "model/model.h"
#include "model/layer_kinds.h"

#include <ini.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- the key table */

typedef enum { T_INT, T_LONG, T_DOUBLE, T_BOOL, T_ENUM, T_WORD, T_STR, T_U64, T_DIMS } KeyType;

enum {
    F_COMPRESSED = 1,  /* checked only when attention = compressed */
    F_LO_OPEN = 2,     /* value must be > lo (else >= lo) */
    F_HI_OPEN = 4,     /* value must be < hi (else <= hi) */
};

const char *const config_loss_targets_names[] = {"all", "answers", NULL};             /* LOSS_TARGETS_* */
const char *const config_resume_schedule_names[] = {"refuse", "keep", "stretch", NULL};  /* RESUME_SCHEDULE_* */
static const char *const device_words[] = {"auto", "cpu", "cuda", NULL};

#define NOLO (-INFINITY)
#define NOHI (INFINITY)

/* X(section, key, type, default, lo, hi, flags, allowed words, help) */
#define CONFIG_KEYS(X)                                                                           \
    X(model, d_model, T_INT, "1024", 1, 65536, 0, NULL, "model width D (1..65536)")                     \
    X(model, n_layers, T_INT, "28", 1, 1024, 0, NULL, "decoder layers (1..1024)")                     \
    X(model, n_heads, T_INT, "16", 1, 1024, 0, NULL, "query heads H (1..1024, a multiple of n_kv_heads)") \
    X(model, n_kv_heads, T_INT, "8", 1, 1024, 0, NULL,                                             \
      "KV heads G of grouped-query attention (>= 1, must divide n_heads)")                          \
    X(model, head_dim, T_INT, "128", 1, 4096, 0, NULL, "dimension d of one head (1..4096)")           \
    X(model, d_ff, T_INT, "3072", 1, 1048576, 0, NULL, "SwiGLU hidden width (1..2^20)")                  \
    X(model, vocab_size, T_INT, "151936", 1, 16777216, 0, NULL,                                        \
      "vocabulary size (1..2^24; every token of the shards must be below it)")                        \
    X(model, rope_theta, T_DOUBLE, "1000000", 0, NOHI, F_LO_OPEN, NULL, "RoPE base theta (> 0)")   \
    X(model, norm_eps, T_DOUBLE, "1e-6", 0, NOHI, F_LO_OPEN, NULL, "RMSNorm epsilon (> 0)")        \
    X(model, tie_embeddings, T_BOOL, "true", 0, 0, 0, NULL,                                        \
      "output classifier shares the embedding matrix (true|false)")                                \
    X(model, attention, T_ENUM, "full", 0, 0, 0, config_attention_names,                                  \
      "attention of every layer: full (the Qwen3 control) | compressed (docs/spec.md §2)")       \
    X(model, window, T_INT, "8", 1, 65536, F_COMPRESSED, NULL,                                      \
      "compression window W in tokens (compressed only; 1..min(65536, seq_len), >= stride)")                          \
    X(model, stride, T_INT, "8", 1, 65536, F_COMPRESSED, NULL,                                      \
      "compression stride S in tokens (compressed only; 1..window)")                                \
    X(model, gate, T_ENUM, "scalar", 0, 0, F_COMPRESSED, config_gate_names,                               \
      "compressor gate: scalar (one score per offset) | vector (one per channel) | uniform (alpha = 1/W)") \
    X(model, gate_bias, T_BOOL, "true", 0, 0, F_COMPRESSED, NULL,                                  \
      "learned per-offset gate bias (true|false; compressed only)")                                \
    X(model, kv_tied, T_BOOL, "false", 0, 0, F_COMPRESSED, NULL,                                   \
      "compressed values reuse the compressed keys, no value branch (true|false; compressed only)") \
    X(model, post_norm, T_BOOL, "false", 0, 0, F_COMPRESSED, NULL,                                 \
      "RMSNorm each payload before pooling (true|false; compressed only)")                         \
    X(model, qk_norm, T_BOOL, "true", 0, 0, 0, NULL,                                               \
      "RMSNorm of queries, keys and compressed keys (true|false)")                                 \
    X(model, rope_dims, T_DIMS, "head_dim", 0, NOHI, 0, NULL,                                      \
      "rotated dims r, the last r of each head: head_dim, or an even number 0..head_dim (0 = no RoPE)") \
    X(model, local, T_ENUM, "window", 0, 0, F_COMPRESSED, config_local_names,                             \
      "raw tokens a query sees: window (the last n_local) | tail (those no visible entry covers yet)") \
    X(model, n_local, T_INT, "16", 1, 4194304, F_COMPRESSED, NULL,                                    \
      "raw local window length for local = window (>= 1)")                                         \
    X(model, compressor, T_ENUM, "paper", 0, 0, F_COMPRESSED, config_compressor_names,                    \
      "paper (maps per offset) | deepseek (maps shared per half window, keys = values; needs window = 2*stride) | shared (one gate map and one payload map for all offsets)") \
    X(model, grid, T_ENUM, "aligned", 0, 0, F_COMPRESSED, config_grid_names,                              \
      "window grid of the KV heads: aligned (all start at 0) | staggered (head g starts at floor(g*stride/n_kv_heads); compressed only)") \
    X(model, attn_sink, T_BOOL, "false", 0, 0, F_COMPRESSED, NULL,                                 \
      "learned per-head sink logit in the softmax denominator (true|false; any attention)")      \
    X(model, layer_attention, T_STR, "", 0, 0, 0, NULL,                                             \
      "per-layer schedule (docs/spec.md §5): KIND,KIND,... one per layer, KIND*N repeats; kinds full | compressed "  \
      "(the model.* keys) | window (raw n_local window only) | csa | hca; empty = every layer model.attention") \
    X(model, csa_window, T_INT, "8", 1, 65536, 0, NULL, "W of the csa layers (1..min(65536, seq_len))")           \
    X(model, csa_stride, T_INT, "4", 1, 65536, 0, NULL, "S of the csa layers (1..csa_window)")                    \
    X(model, csa_gate, T_ENUM, "vector", 0, 0, 0, config_gate_names, "gate of the csa layers (as model.gate)")  \
    X(model, csa_compressor, T_ENUM, "deepseek", 0, 0, 0, config_compressor_names,                             \
      "compressor of the csa layers (as model.compressor; deepseek = two maps, one per half window)")            \
    X(model, hca_window, T_INT, "32", 1, 65536, 0, NULL, "W = m of the hca layers (1..min(65536, seq_len))")      \
    X(model, hca_stride, T_INT, "32", 1, 65536, 0, NULL, "S of the hca layers (1..hca_window; V4: = hca_window)") \
    X(model, hca_gate, T_ENUM, "vector", 0, 0, 0, config_gate_names, "gate of the hca layers (as model.gate)")  \
    X(model, hca_compressor, T_ENUM, "shared", 0, 0, 0, config_compressor_names,                               \
      "compressor of the hca layers (as model.compressor; shared = one map for the m slots, V4's HCA)")          \
    X(model, csa_topk, T_INT, "16", 0, 1048576, 0, NULL,                                                      \
      "entries the lightning indexer keeps per query in the csa layers (0 = no indexer: every visible entry)") \
    X(model, indexer_heads, T_INT, "4", 1, 1024, 0, NULL, "lightning indexer heads (csa layers with csa_topk > 0)") \
    X(model, indexer_dim, T_INT, "16", 1, 4096, 0, NULL, "dimension of one lightning indexer head and of its keys") \
    X(model, token_shift, T_BOOL, "false", 0, 0, F_COMPRESSED, NULL,                               \
      "the compressor reads a_t + M a_{t-1}, a learned mix of the previous token (docs/spec.md §6.3; true|false; compressed only)") \
    X(model, head_strides, T_STR, "", 0, 0, F_COMPRESSED, NULL,                                     \
      "multi-rate strides (docs/spec.md §6.4): S_0,S_1,... one stride per KV head, each 1..window, the smallest = " \
      "stride; empty = every head stride (compressed only)")                                    \
    X(model, boundaries, T_ENUM, "grid", 0, 0, F_COMPRESSED, config_boundaries_names,                       \
      "where entries end (docs/spec.md §6.5): grid (the window grid) | learned (content-defined chunks: a learned " \
      "score per token and layer; window = the longest chunk, stride = the target mean length; compressed only)") \
    X(data, train, T_STR, "", 0, 0, 0, NULL, "glob of the training token shards (*.bin)")          \
    X(data, stages, T_STR, "", 0, 0, 0, NULL,                                                      \
      "curriculum: later training data, STEP:GLOB, ... (after STEP steps, that glob instead of train; "   \
      "STEPs increasing; GLOB@T: that stage at sequence length T <= seq_len; empty = train for the whole run)") \
    X(data, train_seq_len, T_INT, "0", 0, 4194304, 0, NULL,                                        \
      "sequence length of data.train's steps, before the first stage (0 = seq_len; 1..seq_len: a shorter start)") \
    X(data, val, T_STR, "", 0, 0, 0, NULL, "glob of the validation token shards (empty = no validation loss)") \
    X(data, seq_len, T_INT, "4096", 1, 4194304, 0, NULL, "training sequence length T in tokens (1..2^22)") \
    X(data, tokenizer, T_STR, "", 0, 0, 0, NULL,                                                   \
      "tokenizer.json the shards were made with, copied into checkpoints (empty = next to the shards)") \
    X(data, loss_targets, T_ENUM, "all", 0, 0, 0, config_loss_targets_names,                          \
      "targets the training and validation loss count: all | answers (synthetic corpus only: the value " \
      "after a query key, a key already seen in the row)")                                        \
    X(train, steps, T_LONG, "1000", 1, 1099511627776, 0, NULL, "optimizer steps (>= 1)")                    \
    X(train, batch_tokens, T_LONG, "524288", 1, 1099511627776, 0, NULL,                                     \
      "tokens per optimizer step, all ranks together (a multiple of seq_len * micro_batch)")       \
    X(train, micro_batch, T_INT, "8", 1, 1048576, 0, NULL, "sequences per forward pass per rank (>= 1)") \
    X(train, lr, T_DOUBLE, "3e-4", 0, NOHI, 0, NULL, "peak learning rate (>= 0)")                  \
    X(train, min_lr, T_DOUBLE, "3e-5", 0, NOHI, 0, NULL,                                           \
      "learning rate at the end of the decay (0..lr)")                                             \
    X(train, warmup_steps, T_LONG, "100", 0, 1099511627776, 0, NULL, "linear warm-up steps (>= 0)")         \
    X(train, weight_decay, T_DOUBLE, "0.1", 0, NOHI, 0, NULL, "AdamW decoupled weight decay (>= 0)") \
    X(train, grad_clip, T_DOUBLE, "1.0", 0, NOHI, 0, NULL,                                         \
      "clip of the global gradient norm (>= 0; 0 = no clipping)")                                  \
    X(train, beta1, T_DOUBLE, "0.9", 0, 1, F_HI_OPEN, NULL, "AdamW beta1, in [0, 1)")              \
    X(train, beta2, T_DOUBLE, "0.95", 0, 1, F_HI_OPEN, NULL, "AdamW beta2, in [0, 1)")             \
    X(train, eps, T_DOUBLE, "1e-8", 0, NOHI, F_LO_OPEN, NULL, "AdamW epsilon (> 0)")               \
    X(train, seed, T_U64, "42", 0, 0, 0, NULL,                                                     \
      "seed of the initialisation and the data order (unsigned 64-bit integer)")                   \
    X(train, max_bad_steps, T_INT, "5", 1, 1000000, 0, NULL,                                          \
      "consecutive NaN/Inf steps (skipped) before the run stops (>= 1)")                           \
    X(train, indexer_weight, T_DOUBLE, "1", 0, NOHI, 0, NULL,                                        \
      "weight of the lightning indexer's KL term towards the main attention over entries (docs/spec.md §5.4; >= 0)") \
    X(train, indexer_warmup, T_LONG, "0", 0, NOHI, 0, NULL,                                          \
      "steps of dense csa attention (every visible entry, the KL over all of them) before top-k selection starts") \
    X(train, gate_coverage, T_DOUBLE, "0", 0, NOHI, 0, NULL,                                       \
      "lambda >= 0 of the gate-coverage penalty (docs/spec.md §2b; compressed, non-uniform gates only; 0 = off)") \
    X(train, phase_jitter, T_BOOL, "false", 0, 0, 0, NULL,                                         \
      "shift each training sequence's window grid by a random u in [0, stride) (head_strides: [0, "  \
      "their lcm), head g by u mod S_g; docs/spec.md §6.2; true|false; compressed, stride >= 2 "    \
      "only; evaluation is never shifted)")                   \
    X(train, boundary_ratio, T_DOUBLE, "1", 0, NOHI, 0, NULL,                                   \
      "lambda_r >= 0 of the boundary ratio loss that keeps the mean chunk at stride tokens (docs/spec.md §6.5; " \
      "model.boundaries = learned only)")                                                          \
    X(train, resume_schedule, T_ENUM, "refuse", 0, 0, 0, config_resume_schedule_names,                  \
      "a resume whose train.steps differs from the schedule total of the checkpoint: refuse (exit 2) | keep "  \
      "(the recorded total's warm-up + cosine schedule continues; past its end lr = min_lr) | stretch "       \
      "(the cosine is recomputed for the new train.steps: lr jumps)")                                        \
    X(eval, every, T_LONG, "0", 0, 1099511627776, 0, NULL, "steps between evaluations (>= 0; 0 = only at the end)") \
    X(eval, val_tokens, T_LONG, "1048576", 1, 1099511627776, 0, NULL,                                       \
      "validation tokens per evaluation: floor(val_tokens / seq_len) windows (>= seq_len)")        \
    X(eval, residues, T_INT, "24", 1, 65536, 0, NULL,                                               \
      "P: per-residue loss and probe accuracy group positions by t mod P (>= 1)")                  \
    X(eval, probe, T_STR, "", 0, 0, 0, NULL, "lookup probe-set file (empty = no probe)")           \
    X(checkpoint, every, T_LONG, "0", 0, 1099511627776, 0, NULL,                                            \
      "steps between checkpoints (>= 0; 0 = only at the end)")                                     \
    X(checkpoint, keep, T_INT, "2", 1, 4096, 0, NULL, "newest checkpoints kept on disk (>= 1)")    \
    X(run, name, T_STR, "", 0, 0, 0, NULL,                                                         \
      "run name, the run directory under dir (empty = the config file name without .ini, or run)") \
    X(run, dir, T_STR, "runs", 0, 0, 0, NULL, "directory that holds the run directories")          \
    X(run, device, T_WORD, "auto", 0, 0, 0, device_words,                                          \
      "backend: auto (cuda when a GPU is present, else cpu) | cpu | cuda")                         \
    X(run, threads, T_INT, "0", 0, NOHI, 0, NULL, "CPU threads (>= 0; 0 = every core the process may run on, its CPU affinity; more than the BLAS runs, 64 for OpenBLAS, are capped with one line)")             \
    X(run, log_every, T_LONG, "10", 1, NOHI, 0, NULL, "steps between log lines and training metrics (>= 1)") \
    X(run, deterministic, T_BOOL, "false", 0, 0, 0, NULL,                                           \
      "bitwise reruns on the GPU: the custom attention backward instead of cuDNN's, NCCL NVLS off (CPU: always)")

typedef struct {
    KeyType type;
    size_t offset, size;        /* of the field inside Config */
    double lo, hi;
    int flags;
    const char *const *words;   /* T_ENUM (index = value), T_WORD */
} KeyRule;

#define AS_INFO(sec, k, type, def, lo, hi, flags, words, help) {#sec, #k, def, help},
#define AS_RULE(sec, k, type, def, lo, hi, flags, words, help) \
    {type, offsetof(Config, sec.k), sizeof(((Config *)0)->sec.k), lo, hi, flags, words},

static const ConfigKeyInfo key_info[] = {CONFIG_KEYS(AS_INFO)};
static const KeyRule key_rule[] = {CONFIG_KEYS(AS_RULE)};
#define N_KEYS ((int)(sizeof key_info / sizeof key_info[0]))

/* Each table row's type must match the C type of its field. */
#define TYPE_MATCHES(f, t)                                                                        \
    _Generic((f) + 0, int: ((t) == T_INT || (t) == T_BOOL || (t) == T_ENUM || (t) == T_DIMS),    \
             long: (t) == T_LONG, double: (t) == T_DOUBLE, uint64_t: (t) == T_U64,                \
             char *: ((t) == T_STR || (t) == T_WORD), default: 0)
#define AS_TYPECHECK(sec, k, type, def, lo, hi, flags, words, help) \
    _Static_assert(TYPE_MATCHES(((Config *)0)->sec.k, type), "config key " #sec "." #k " has the wrong type");
CONFIG_KEYS(AS_TYPECHECK)

static const char *const section_names[] = {"model", "data", "train", "eval", "checkpoint", "run", NULL};

const ConfigKeyInfo *config_keys(int *n) {
    if (n) *n = N_KEYS;
    return key_info;
}

static int find_key(const char *section, const char *key) {
    for (int k = 0; k < N_KEYS; k++)
        if (!strcmp(key_info[k].section, section) && !strcmp(key_info[k].key, key)) return k;
    return -1;
}

static int known_section(const char *section) {
    for (int i = 0; section_names[i]; i++)
        if (!strcmp(section_names[i], section)) return 1;
    return 0;
}

static void *field(Config *cfg, int k) { return (char *)cfg + key_rule[k].offset; }
static const void *cfield(const Config *cfg, int k) { return (const char *)cfg + key_rule[k].offset; }

#define KEY_INDEX(sec, k) key_index_of(#sec, #k)
static int key_index_of(const char *section, const char *key) {
    int k = find_key(section, key);
    if (k < 0) abort(); /* a rule below names a key missing from the table: programming error */
    return k;
}

/* ---------------------------------------------------------------- values <-> text */

/* "a | b | c" */
static void words_list(const char *const *words, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; words[i]; i++)
        used += snprintf(out + used, used < n ? n - used : 0, "%s%s", i ? " | " : "", words[i]);
}

/* Shortest decimal that reads back as exactly v. */
static void format_double(double v, char *out, size_t n) {
    if (v == floor(v) && fabs(v) < 1e15) { /* 1000000 rather than 1e+06 */
        snprintf(out, n, "%.0f", v);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

/* The INI text of key k's value in cfg. */
static void value_text(const Config *cfg, int k, char *out, size_t n) {
    const KeyRule *r = &key_rule[k];
    const void *p = cfield(cfg, k);
    switch (r->type) {
    case T_INT: snprintf(out, n, "%d", *(const int *)p); break;
    case T_DIMS:
        if (*(const int *)p == -1) snprintf(out, n, "head_dim");
        else snprintf(out, n, "%d", *(const int *)p);
        break;
    case T_LONG: snprintf(out, n, "%ld", *(const long *)p); break;
    case T_DOUBLE: format_double(*(const double *)p, out, n); break;
    case T_BOOL: snprintf(out, n, "%s", *(const int *)p ? "true" : "false"); break;
    case T_ENUM: {
        int v = *(const int *)p, nw = 0;
        while (r->words[nw]) nw++;
        snprintf(out, n, "%s", v >= 0 && v < nw ? r->words[v] : "?");
        break;
    }
    case T_WORD:
    case T_STR: snprintf(out, n, "%s", (const char *)p); break;
    case T_U64: snprintf(out, n, "%" PRIu64, *(const uint64_t *)p); break;
    }
}

/* 0: ok, -1: not an integer, -2: an integer outside lo..hi */
static int parse_integer(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return -1;
    if (errno == ERANGE || v < lo || v > hi) return -2;
    *out = v;
    return 0;
}

/* Parses text into key k of cfg. On error returns -1 and writes "what is wrong; what is
 * allowed" into msg. Ranges are checked later (validate), only syntax here. */
static int parse_value(Config *cfg, int k, const char *text, char *msg, size_t msg_n) {
    const KeyRule *r = &key_rule[k];
    void *p = field(cfg, k);
    long long ll;
    switch (r->type) {
    case T_INT: {
        int bad = parse_integer(text, INT_MIN, INT_MAX, &ll);
        if (bad == -2)
            return snprintf(msg, msg_n, "%s is too large; expected an integer that fits in 32 bits (|v| < 2^31)", text), -1;
        if (bad)
            return snprintf(msg, msg_n, "\"%s\" is not an integer; expected a decimal integer", text), -1;
        *(int *)p = (int)ll;
        return 0;
    }
    case T_DIMS:
        if (!strcmp(text, "head_dim")) { *(int *)p = -1; return 0; }
        if (parse_integer(text, INT_MIN, INT_MAX, &ll))
            return snprintf(msg, msg_n, "\"%s\" is not an integer; expected head_dim or an even integer 0..head_dim", text), -1;
        if (ll < 0)
            return snprintf(msg, msg_n, "%lld is negative; expected head_dim or an even integer 0..head_dim", ll), -1;
        *(int *)p = (int)ll;
        return 0;
    case T_LONG:
        if (parse_integer(text, LONG_MIN, LONG_MAX, &ll) == -2)
            return snprintf(msg, msg_n, "%s is too large; expected an integer that fits in 64 bits", text), -1;
        if (parse_integer(text, LONG_MIN, LONG_MAX, &ll))
            return snprintf(msg, msg_n, "\"%s\" is not an integer; expected a decimal integer", text), -1;
        *(long *)p = (long)ll;
        return 0;
    case T_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (end == text || *end || !isfinite(v) || (errno == ERANGE && fabs(v) > 1))
            return snprintf(msg, msg_n, "\"%s\" is not a number; expected a finite decimal number such as 3e-4", text), -1;
        *(double *)p = v;
        return 0;
    }
    case T_BOOL:
        if (!strcasecmp(text, "true") || !strcasecmp(text, "yes") || !strcmp(text, "1")) { *(int *)p = 1; return 0; }
        if (!strcasecmp(text, "false") || !strcasecmp(text, "no") || !strcmp(text, "0")) { *(int *)p = 0; return 0; }
        return snprintf(msg, msg_n, "\"%s\" is not a boolean; expected true | false (also yes | no | 1 | 0)", text), -1;
    case T_ENUM:
    case T_WORD: {
        for (int i = 0; r->words[i]; i++) {
            if (strcmp(text, r->words[i])) continue;
            if (r->type == T_ENUM) *(int *)p = i;
            else snprintf((char *)p, r->size, "%s", r->words[i]);
            return 0;
        }
        char list[256];
        words_list(r->words, list, sizeof list);
        return snprintf(msg, msg_n, "\"%s\" is not allowed; expected %s", text, list), -1;
    }
    case T_STR: {
        size_t len = strlen(text);
        if (len >= r->size)
            return snprintf(msg, msg_n, "value is %zu characters long; at most %zu are allowed", len, r->size - 1), -1;
        /* what the INI could not hold back (config_write must round-trip) */
        for (size_t i = 0; i < len; i++) {
            if (iscntrl((unsigned char)text[i]))
                return snprintf(msg, msg_n, "value contains a control character; expected printable text"), -1;
            if (text[i] == ';' && (i == 0 || isspace((unsigned char)text[i - 1])))
                return snprintf(msg, msg_n, "\"%s\" has a ';' that an INI reads as a comment; expected no ';' at the start or after a space", text), -1;
        }
        if (len && (isspace((unsigned char)text[0]) || isspace((unsigned char)text[len - 1])))
            return snprintf(msg, msg_n, "\"%s\" starts or ends with a space; expected none", text), -1;
        memcpy(p, text, len + 1);
        return 0;
    }
    case T_U64: {
        char *end;
        const char *s = text;
        while (isspace((unsigned char)*s)) s++;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (*s == '-' || *s == '+' || end == text || *end || errno == ERANGE)
            return snprintf(msg, msg_n, "\"%s\" is not an unsigned integer; expected a decimal integer 0..18446744073709551615", text), -1;
        *(uint64_t *)p = (uint64_t)v;
        return 0;
    }
    }
    return -1;
}

/* ---------------------------------------------------------------- load context */

enum { FROM_DEFAULT = 0, FROM_COMMAND_LINE = -1 }; /* else the line number in the file */

typedef struct {
    Config *cfg;
    const char *path;        /* NULL: no file */
    int origin[N_KEYS];      /* FROM_* or the file line a key was set at */
    /* line reader state */
    FILE *f;
    char *line;              /* the current physical line, whole */
    size_t line_cap;
    int line_no;
    int line_too_long;       /* the current line did not fit inih's buffer */
    /* first error */
    int err_line;            /* line of the first error in the file; 0 = none yet */
    char *err;
} LoadCtx;

/* "FILE:LINE: [section] key", "command line: section.key" or "FILE: [section] key (default)". */
static void key_location(const LoadCtx *c, int k, char *out, size_t n) {
    const ConfigKeyInfo *ki = &key_info[k];
    int o = c->origin[k];
    if (o > 0) snprintf(out, n, "%s:%d: [%s] %s", c->path, o, ki->section, ki->key);
    else if (o == FROM_COMMAND_LINE) snprintf(out, n, "command line: %s.%s", ki->section, ki->key);
    else if (c->path) snprintf(out, n, "%s: [%s] %s (default)", c->path, ki->section, ki->key);
    else snprintf(out, n, "[%s] %s (default)", ki->section, ki->key);
}

/* Error about key k: "LOCATION: message". Returns -1. */
static int key_error(const LoadCtx *c, int k, const char *fmt, ...) {
    char loc[1200], msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    key_location(c, k, loc, sizeof loc);
    return set_err(c->err, "%s: %s", loc, msg);
}

/* Chooses the key a cross-key error points at: the likely culprit, unless it was left at its
 * default while one of the others (listed after it, -1 ends the list) was set explicitly. */
static int blame(const LoadCtx *c, int likely, ...) {
    if (c->origin[likely] != FROM_DEFAULT) return likely;
    va_list ap;
    va_start(ap, likely);
    int k, chosen = likely;
    while ((k = va_arg(ap, int)) >= 0)
        if (c->origin[k] != FROM_DEFAULT) { chosen = k; break; }
    va_end(ap);
    return chosen;
}

/* "[model] d_model n_layers ..." or, when the key lives in another section, a pointer there. */
static void unknown_key_hint(const char *section, const char *key, char *out, size_t n) {
    for (int k = 0; k < N_KEYS; k++)
        if (!strcmp(key_info[k].key, key) && strcmp(key_info[k].section, section)) {
            snprintf(out, n, "%s belongs in [%s]", key, key_info[k].section);
            return;
        }
    size_t used = snprintf(out, n, "keys of [%s]:", section);
    for (int k = 0; k < N_KEYS; k++)
        if (!strcmp(key_info[k].section, section))
            used += snprintf(out + used, used < n ? n - used : 0, " %s", key_info[k].key);
}

static void sections_list(char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; section_names[i]; i++)
        used += snprintf(out + used, used < n ? n - used : 0, "%s[%s]", i ? " " : "", section_names[i]);
}

/* Records the first error found while reading the file (at the current line). */
static int file_error(LoadCtx *c, const char *fmt, ...) {
    if (c->err_line) return 0;
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->err_line = c->line_no;
    set_err(c->err, "%s:%d: %s", c->path, c->line_no, msg);
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Sets key section.key from the file line being read. */
static int set_from_file(LoadCtx *c, const char *section, const char *key, const char *value) {
    char hint[ERR_LEN];
    if (!*section) {
        unknown_key_hint("", key, hint, sizeof hint);
        char secs[128];
        sections_list(secs, sizeof secs);
        if (strstr(hint, "belongs in"))
            return file_error(c, "%s: key before any section header; %s", key, hint);
        return file_error(c, "%s: key before any section header; expected one of %s first", key, secs);
    }
    if (!known_section(section)) return 0; /* reported at its header line */
    int k = find_key(section, key);
    if (k < 0) {
        unknown_key_hint(section, key, hint, sizeof hint);
        return file_error(c, "[%s] %s: unknown key; %s", section, key, hint);
    }
    if (c->origin[k] > 0) {
        const char *raw = c->line ? c->line : "";
        if (isspace((unsigned char)raw[0]))
            return file_error(c, "[%s] %s: continuation of line %d; write the value on one line", section, key, c->origin[k]);
        return file_error(c, "[%s] %s: set twice (first at line %d); expected each key once", section, key, c->origin[k]);
    }
    char msg[ERR_LEN];
    if (parse_value(c->cfg, k, value, msg, sizeof msg))
        return file_error(c, "[%s] %s: %s", section, key, msg);
    c->origin[k] = c->line_no;
    return 1;
}

/* inih handler: one name = value pair of the current line. */
static int on_pair(void *user, const char *section, const char *name, const char *value) {
    LoadCtx *c = user;
    if (c->err_line) return 1;
    if (c->line_too_long) {
        /* inih saw a stand-in (see read_line); split the real line as inih would */
        char *s = trim(c->line);
        char *sep = strpbrk(s, "=:");
        if (!sep) return file_error(c, "malformed line; expected \"key = value\"");
        *sep = 0;
        char *val = sep + 1;
        for (char *q = val; *q; q++)
            if (*q == ';' && q > val && isspace((unsigned char)q[-1])) { *q = 0; break; }
        return set_from_file(c, section, trim(s), trim(val));
    }
    return set_from_file(c, section, name, value);
}

/* inih reader: one physical line per call. */
static char *read_line(char *buf, int size, void *stream) {
    LoadCtx *c = stream;
    ssize_t n = getline(&c->line, &c->line_cap, c->f);
    if (n < 0) return NULL;
    c->line_no++;
    c->line_too_long = 0;
    if (c->line_no == 1 && !strncmp(c->line, "\xEF\xBB\xBF", 3)) {
        memmove(c->line, c->line + 3, n - 2);
        n -= 3;
    }
    /* a section header: inih only tells the handler about sections that hold keys */
    const char *s = c->line;
    while (isspace((unsigned char)*s)) s++;
    const char *close = *s == '[' ? strchr(s, ']') : NULL;
    if (close && !c->err_line) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(close - s - 1), s + 1);
        char *t = trim(name);
        if (!known_section(t)) {
            char secs[128];
            sections_list(secs, sizeof secs);
            file_error(c, "[%s]: unknown section; expected one of %s", t, secs);
        }
    }
    if (n + 1 > size) {
        /* does not fit inih's buffer: give inih the header alone, a comment, or a stand-in pair
         * whose real text on_pair splits itself */
        if (close && close - s + 3 <= size) snprintf(buf, size, "%.*s\n", (int)(close - s + 1), s);
        else if (*s == '[' || *s == ';' || *s == '#') snprintf(buf, size, ";\n");
        else {
            c->line_too_long = 1;
            snprintf(buf, size, "long = line\n");
        }
        return buf;
    }
    memcpy(buf, c->line, n + 1);
    return buf;
}

/* The text of line `line_no` of path, for the message about a malformed line. */
static void file_line_text(const char *path, int line_no, char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    for (int i = 1; getline(&line, &cap, f) >= 0; i++)
        if (i == line_no) {
            snprintf(out, n, "%.80s", trim(line));
            break;
        }
    free(line);
    fclose(f);
}

static int load_file(LoadCtx *c) {
    c->f = fopen(c->path, "r");
    if (!c->f) return set_err(c->err, "%s: cannot open: %s", c->path, strerror(errno));
    int rc = ini_parse_stream(read_line, c, on_pair, c);
    fclose(c->f);
    c->f = NULL;
    free(c->line);
    c->line = NULL;
    if (rc > 0 && (!c->err_line || rc < c->err_line)) {
        char text[128];
        file_line_text(c->path, rc, text, sizeof text);
        return set_err(c->err, "%s:%d: malformed line \"%s\"; expected \"[section]\", \"key = value\" or a comment", c->path, rc, text);
    }
    if (c->err_line) return -1;
    if (rc < 0) return set_err(c->err, "%s: could not be read (inih error %d)", c->path, rc);
    return 0;
}

static int apply_override(LoadCtx *c, const char *arg) {
    char buf[2048];
    if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
        return set_err(c->err, "command line: override too long (%zu characters)", strlen(arg));
    char *eq = strchr(buf, '=');
    char *dot = strchr(buf, '.');
    if (arg[0] == '-' && arg[1] == '-')   /* ./train CONFIG --dry-run: an option after the config */
        return set_err(c->err, "command line: \"%s\": options go before the config (./train %s CONFIG.ini "
                       "[section.key=value ...]); after it only section.key=value overrides", arg, arg);
    if (!eq || !dot || dot > eq)
        return set_err(c->err, "command line: \"%s\": malformed override; expected section.key=value", arg);
    *eq = 0;
    *dot = 0;
    char *section = trim(buf), *key = trim(dot + 1), *value = trim(eq + 1);
    char hint[ERR_LEN];
    if (!known_section(section)) {
        sections_list(hint, sizeof hint);
        return set_err(c->err, "command line: %s.%s: unknown section %s; expected one of %s", section, key, section, hint);
    }
    int k = find_key(section, key);
    if (k < 0) {
        unknown_key_hint(section, key, hint, sizeof hint);
        return set_err(c->err, "command line: %s.%s: unknown key; %s", section, key, hint);
    }
    char msg[ERR_LEN];
    if (parse_value(c->cfg, k, value, msg, sizeof msg))
        return set_err(c->err, "command line: %s.%s: %s", section, key, msg);
    c->origin[k] = FROM_COMMAND_LINE;
    return 0;
}

/* ---------------------------------------------------------------- resolution, validation */

static void resolve(Config *cfg, const char *path) {
    if (cfg->model.rope_dims == -1) cfg->model.rope_dims = cfg->model.head_dim;
    if (!cfg->run.name[0]) {
        const char *base = path ? strrchr(path, '/') : NULL;
        base = base ? base + 1 : path;
        if (!base || !*base) {
            snprintf(cfg->run.name, sizeof cfg->run.name, "run");
        } else {
            size_t n = strlen(base);
            if (n > 4 && !strcmp(base + n - 4, ".ini")) n -= 4;
            if (n >= sizeof cfg->run.name) n = sizeof cfg->run.name - 1;
            memcpy(cfg->run.name, base, n);
            cfg->run.name[n] = 0;
        }
    }
}

/* "must be >= 1", "must be > 0", "must be in [0, 1)" */
static void range_text(const KeyRule *r, char *out, size_t n) {
    char lo[32], hi[32];
    format_double(r->lo, lo, sizeof lo);
    format_double(r->hi, hi, sizeof hi);
    int has_lo = isfinite(r->lo), has_hi = isfinite(r->hi);
    int integer = r->type == T_INT || r->type == T_LONG;
    if (has_lo && has_hi && integer)      /* integers: the lower bound first, the upper one a size cap */
        snprintf(out, n, "must be %s %s and <= %s", r->flags & F_LO_OPEN ? ">" : ">=", lo, hi);
    else if (has_lo && has_hi)
        snprintf(out, n, "must be in %c%s, %s%c", r->flags & F_LO_OPEN ? '(' : '[', lo, hi, r->flags & F_HI_OPEN ? ')' : ']');
    else if (has_lo) snprintf(out, n, "must be %s %s", r->flags & F_LO_OPEN ? ">" : ">=", lo);
    else snprintf(out, n, "must be %s %s", r->flags & F_HI_OPEN ? "<" : "<=", hi);
}

static int check_range(const LoadCtx *c, int k) {
    const KeyRule *r = &key_rule[k];
    const void *p = cfield(c->cfg, k);
    double v;
    switch (r->type) {
    case T_INT: case T_DIMS: v = *(const int *)p; break;
    case T_LONG: v = (double)*(const long *)p; break;
    case T_DOUBLE: v = *(const double *)p; break;
    default: return 0;
    }
    if (!isfinite(r->lo) && !isfinite(r->hi)) return 0;
    int bad = (isfinite(r->lo) && (r->flags & F_LO_OPEN ? v <= r->lo : v < r->lo)) ||
              (isfinite(r->hi) && (r->flags & F_HI_OPEN ? v >= r->hi : v > r->hi));
    if (!bad) return 0;
    char val[64], range[96];
    value_text(c->cfg, k, val, sizeof val);
    range_text(r, range, sizeof range);
    return key_error(c, k, "%s is out of range; %s", val, range);
}

static int validate(const LoadCtx *c) {
    const Config *cfg = c->cfg;
    const ModelConfig *m = &cfg->model;
    int compressed = m->attention == ATTN_COMPRESSED;
    if (m->n_layers >= 1 && m->n_layers <= 1024) {   /* the layer schedule (docs/spec.md §5): parsed first, its
                                                       * compressed layers switch on model.* checks (a bad n_layers:
                                                       * its range check below) */
        char why[ERR_LEN];
        const char *bad;
        if (layer_schedule_parse(m, NULL, why)) return key_error(c, KEY_INDEX(model, layer_attention), "%s", why);
        for (int L = 0; L < m->n_layers; L++)
            if (layer_kind(m, L) == KIND_COMPRESSED) compressed = 1;
        for (int k = 0; k < N_KEYS; k++)
            if (!strncmp(key_info[k].key, "csa_", 4) || !strncmp(key_info[k].key, "hca_", 4) ||
                !strncmp(key_info[k].key, "indexer_", 8))
                if (check_range(c, k)) return -1;
        if (layer_schedule_check(m, cfg->data.seq_len, &bad, why))
            return key_error(c, find_key("model", bad), "%s", why);
    }
    for (int k = 0; k < N_KEYS; k++) {
        if ((key_rule[k].flags & F_COMPRESSED) && !compressed) continue;
        if (check_range(c, k)) return -1;
    }

    /* [model] */
    if (m->n_heads % m->n_kv_heads) {
        int k = blame(c, KEY_INDEX(model, n_kv_heads), KEY_INDEX(model, n_heads), -1);
        return key_error(c, k, "n_heads = %d is not a multiple of n_kv_heads = %d; n_kv_heads must divide n_heads",
                         m->n_heads, m->n_kv_heads);
    }
    if (m->rope_dims > m->head_dim || m->rope_dims % 2) {
        int k = blame(c, KEY_INDEX(model, rope_dims), KEY_INDEX(model, head_dim), -1);
        return key_error(c, k, "rope_dims = %d with head_dim = %d; rope_dims must be even and 0..head_dim",
                         m->rope_dims, m->head_dim);
    }
    if (!compressed && m->grid == GRID_STAGGERED)
        return key_error(c, KEY_INDEX(model, grid), "grid = staggered with attention = full; a staggered grid needs "
                         "attention = compressed (full attention has no windows), else grid = aligned");
    int gated_layer = 0;   /* some compressed layer with gates: the penalty has something to act on (§2b.3, §5) */
    for (int L = 0; L < m->n_layers; L++) {
        const ModelConfig lc = layer_config(m, L);
        if (layer_has_gates(&lc)) gated_layer = 1;
    }
    if (cfg->train.gate_coverage > 0 && !gated_layer) {
        char v[32];
        format_double(cfg->train.gate_coverage, v, sizeof v);
        return key_error(c, KEY_INDEX(train, gate_coverage), "gate_coverage = %s with %s would do nothing; it needs "
                         "attention = compressed with gate = scalar | vector, else gate_coverage = 0", v,
                         compressed ? "gate = uniform" : "attention = full");
    }
    if (!compressed && m->token_shift)
        return key_error(c, KEY_INDEX(model, token_shift), "token_shift = true with attention = full; the token shift "
                         "feeds the compressor, which needs attention = compressed, else token_shift = false");
    if (m->token_shift && m->layer_attention[0])
        return key_error(c, KEY_INDEX(model, token_shift), "token_shift = true with a layer_attention schedule is not "
                         "implemented (docs/spec.md §5); use token_shift = false or model.layer_attention = (empty)");
    if (cfg->train.phase_jitter && layer_schedule_mixed(m))
        return key_error(c, KEY_INDEX(train, phase_jitter), "phase_jitter = true with a mixed layer_attention schedule is "
                         "not implemented (docs/spec.md §5); use phase_jitter = false or a one-kind schedule");
    if (cfg->train.phase_jitter && (!compressed || m->stride < 2))
        return key_error(c, KEY_INDEX(train, phase_jitter), "phase_jitter = true with %s would do nothing; it needs "
                         "attention = compressed with stride >= 2 (a grid to shift), else phase_jitter = false",
                         compressed ? "stride = 1 (one phase)" : "attention = full (no grid)");
    if (m->head_strides[0] && !compressed)
        return key_error(c, KEY_INDEX(model, head_strides), "head_strides = %s with attention = full; per-head strides "
                         "need attention = compressed, else head_strides = (empty)", m->head_strides);
    if (m->head_strides[0] && compressed) {   /* docs/spec.md §6.4 */
        int hs[HEAD_STRIDES_MAX], uniform = 1;
        char why[ERR_LEN];
        const int n = config_head_strides(m, hs, why);
        if (n < 0) return key_error(c, KEY_INDEX(model, head_strides), "%s", why);
        for (int g = 1; g < n; g++) uniform &= hs[g] == hs[0];
        const char *other = m->layer_attention[0] ? "model.layer_attention (a schedule)"
                          : m->compressor == COMPRESSOR_DEEPSEEK && !uniform ? "model.compressor = deepseek" : NULL;
        if (other)
            return key_error(c, KEY_INDEX(model, head_strides), "head_strides = %s with %s is not implemented "
                             "(docs/spec.md §6.4); use head_strides = (empty) or drop %s", m->head_strides, other, other);
    }
    if (m->boundaries == BOUNDARIES_LEARNED) {   /* docs/spec.md §6.5 Rules */
        if (!compressed)
            return key_error(c, KEY_INDEX(model, boundaries), "boundaries = learned with attention = full; learned chunk "
                             "boundaries need attention = compressed, else boundaries = grid");
        if (m->stride < 2 || m->window <= m->stride) {
            int k = m->stride < 2 ? blame(c, KEY_INDEX(model, stride), KEY_INDEX(model, boundaries), -1)
                                  : blame(c, KEY_INDEX(model, window), KEY_INDEX(model, stride), KEY_INDEX(model, boundaries), -1);
            return key_error(c, k, "boundaries = learned with window = %d and stride = %d; it needs window > stride >= 2 "
                             "(window the longest chunk, stride the target mean chunk length)", m->window, m->stride);
        }
        const char *other = m->grid == GRID_STAGGERED ? "model.grid = staggered"
                          : m->head_strides[0] ? "model.head_strides"
                          : cfg->train.phase_jitter ? "train.phase_jitter = true"
                          : m->compressor == COMPRESSOR_DEEPSEEK ? "model.compressor = deepseek"
                          : cfg->train.gate_coverage > 0 ? "train.gate_coverage > 0"
                          : m->layer_attention[0] ? "model.layer_attention (a schedule)" : NULL;
        if (other)
            return key_error(c, KEY_INDEX(model, boundaries), "boundaries = learned with %s: that key defines a window "
                             "grid or needs one (docs/spec.md §6.5); use boundaries = grid or drop %s", other, other);
    }
    if (compressed) {
        if (m->stride > m->window) {
            int k = blame(c, KEY_INDEX(model, stride), KEY_INDEX(model, window), -1);
            return key_error(c, k, "stride = %d is larger than window = %d; stride must be 1..window", m->stride, m->window);
        }
        if (m->window > cfg->data.seq_len) {
            int k = blame(c, KEY_INDEX(model, window), KEY_INDEX(data, seq_len), -1);
            return key_error(c, k, "window = %d is longer than seq_len = %d; a sequence must hold at least one "
                             "compression window (window <= seq_len)", m->window, cfg->data.seq_len);
        }
        if (m->compressor == COMPRESSOR_DEEPSEEK && m->window != 2 * m->stride) {
            int k = blame(c, KEY_INDEX(model, window), KEY_INDEX(model, compressor), KEY_INDEX(model, stride), -1);
            return key_error(c, k, "compressor = deepseek with window = %d and stride = %d; deepseek needs window = 2 * stride = %d",
                             m->window, m->stride, 2 * m->stride);
        }
    }

    /* [train] */
    long per_pass = (long)cfg->data.seq_len * cfg->train.micro_batch;
    if (cfg->train.batch_tokens % per_pass) {
        int k = blame(c, KEY_INDEX(train, batch_tokens), KEY_INDEX(data, seq_len), KEY_INDEX(train, micro_batch), -1);
        return key_error(c, k, "batch_tokens = %ld is not a multiple of seq_len * micro_batch = %d * %d = %ld; "
                         "batch_tokens must be a multiple of %ld (e.g. %ld)",
                         cfg->train.batch_tokens, cfg->data.seq_len, cfg->train.micro_batch, per_pass, per_pass,
                         cfg->train.batch_tokens / per_pass > 0 ? cfg->train.batch_tokens / per_pass * per_pass : per_pass);
    }
    {   /* the kernels' int shapes (model/model.h) */
        char why[ERR_LEN];
        if (model_shape_check(m, 1, 1, why)) {          /* one token: only the compressor's sizes can fail */
            int k = blame(c, KEY_INDEX(model, stride), KEY_INDEX(model, window), KEY_INDEX(model, d_model),
                          KEY_INDEX(model, n_kv_heads), KEY_INDEX(model, head_dim), -1);
            return key_error(c, k, "%s", why);
        }
        if (model_shape_check(m, cfg->train.micro_batch, cfg->data.seq_len, why)) {
            int k = blame(c, KEY_INDEX(train, micro_batch), KEY_INDEX(data, seq_len), KEY_INDEX(model, n_heads), -1);
            return key_error(c, k, "%s", why);
        }
    }
    if (cfg->train.min_lr > cfg->train.lr) {
        int k = blame(c, KEY_INDEX(train, min_lr), KEY_INDEX(train, lr), -1);
        char lo[32], hi[32];
        format_double(cfg->train.min_lr, lo, sizeof lo);
        format_double(cfg->train.lr, hi, sizeof hi);
        return key_error(c, k, "min_lr = %s is larger than lr = %s; min_lr must be 0..lr", lo, hi);
    }

    /* [data] stages */
    TrainStageSpec stages[TRAIN_STAGES_MAX - 1];
    int n_stages;
    char why[ERR_LEN];
    if (train_stages_parse(cfg->data.stages, stages, &n_stages, why))
        return key_error(c, KEY_INDEX(data, stages), "%s", why);
    /* a stage's sequence length: at most the model's context, and (compressed) one window long */
    int shortest = 1;                /* the longest window of a compressed layer */
    for (int L = 0; L < m->n_layers; L++) {
        const ModelConfig lc = layer_config(m, L);
        if (lc.attention == ATTN_COMPRESSED && lc.window > shortest) shortest = lc.window;
    }
    if (cfg->data.train_seq_len && (cfg->data.train_seq_len > cfg->data.seq_len || cfg->data.train_seq_len < shortest)) {
        int k = blame(c, KEY_INDEX(data, train_seq_len), KEY_INDEX(data, seq_len), -1);
        return key_error(c, k, "train_seq_len = %d; expected 0 (= seq_len) or %d..%d (%s..seq_len)", cfg->data.train_seq_len,
                         shortest, cfg->data.seq_len, compressed || shortest > 1 ? "one compression window" : "1");
    }
    for (int j = 0; j < n_stages; j++)
        if (stages[j].seq_len && (stages[j].seq_len > cfg->data.seq_len || stages[j].seq_len < shortest)) {
            int k = blame(c, KEY_INDEX(data, stages), KEY_INDEX(data, seq_len), -1);
            return key_error(c, k, "stage %d (%ld:%s@%d): sequence length %d; expected %d..%d (%s..seq_len)", j + 1,
                             stages[j].first_step, stages[j].glob, stages[j].seq_len, stages[j].seq_len, shortest,
                             cfg->data.seq_len, compressed || shortest > 1 ? "one compression window" : "1");
        }
    /* a stage at or past train.steps is allowed (a short smoke run of a long config, or steps added
     * on resume): --dry-run and the run's log say it is not reached */

    /* [eval] */
    if (cfg->data.val[0] && cfg->eval.val_tokens < cfg->data.seq_len) {
        int k = blame(c, KEY_INDEX(eval, val_tokens), KEY_INDEX(data, seq_len), KEY_INDEX(data, val), -1);
        return key_error(c, k, "val_tokens = %ld is less than one window of seq_len = %d; val_tokens must be >= seq_len",
                         cfg->eval.val_tokens, cfg->data.seq_len);
    }

    /* [run] */
    const char *name = cfg->run.name;
    if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return key_error(c, KEY_INDEX(run, name), "\"%s\" is not a plain name; expected a directory name without '/'", name);
    if (!cfg->run.dir[0]) return key_error(c, KEY_INDEX(run, dir), "empty; expected a directory path");
    return 0;
}

/* ---------------------------------------------------------------- API */

static void apply_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char msg[ERR_LEN];
    for (int k = 0; k < N_KEYS; k++)
        if (parse_value(cfg, k, key_info[k].def, msg, sizeof msg)) {
            fprintf(stderr, "phaselab: trainer/run_config.c: default of [%s] %s: %s\n", key_info[k].section, key_info[k].key, msg);
            abort();
        }
}

void config_defaults(Config *cfg) {
    apply_defaults(cfg);
    resolve(cfg, NULL);
}

int config_load(Config *cfg, const char *path, int n_overrides, char **overrides, char *err) {
    LoadCtx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.path = path;
    c.err = err;
    if (err) err[0] = 0;
    apply_defaults(cfg);
    if (path) {
        if (strlen(path) >= sizeof cfg->source)
            return set_err(err, "%s: path too long (at most %zu characters)", path, sizeof cfg->source - 1);
        snprintf(cfg->source, sizeof cfg->source, "%s", path);
        if (load_file(&c)) return -1;
    }
    for (int i = 0; i < n_overrides; i++)
        if (apply_override(&c, overrides[i])) return -1;
    resolve(cfg, path);
    return validate(&c);
}

char *config_to_string(const Config *cfg) {
    size_t cap = 8192, used = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    const char *section = "";
    char value[1100];
    for (int k = 0; k < N_KEYS; k++) {
        value_text(cfg, k, value, sizeof value);
        for (;;) {
            int sec_change = strcmp(section, key_info[k].section) != 0;
            int n = snprintf(out + used, cap - used, "%s%s%s%s%s =%s%s\n",
                             sec_change && used ? "\n" : "", sec_change ? "[" : "",
                             sec_change ? key_info[k].section : "", sec_change ? "]\n" : "",
                             key_info[k].key, value[0] ? " " : "", value);
            if ((size_t)n < cap - used) { used += n; break; }
            char *grown = realloc(out, cap * 2);
            if (!grown) { free(out); return NULL; }
            out = grown;
            cap *= 2;
        }
        section = key_info[k].section;
    }
    return out;
}

int config_diff(const Config *was, const Config *now, const char *section, char *out, size_t len) {
    int n = 0;
    char a[1100], b[1100];
    if (len) out[0] = 0;
    for (int k = 0; k < N_KEYS; k++) {
        if (section && strcmp(section, key_info[k].section)) continue;
        value_text(was, k, a, sizeof a);
        value_text(now, k, b, sizeof b);
        if (!strcmp(a, b)) continue;
        size_t used = strlen(out);
        if (len > used)
            snprintf(out + used, len - used, "%s%s.%s %s -> %s", n ? ", " : "", key_info[k].section, key_info[k].key,
                     a[0] ? a : "(empty)", b[0] ? b : "(empty)");
        n++;
    }
    return n;
}

int config_write(const Config *cfg, const char *path, char *err) {
    char *text = config_to_string(cfg);
    if (!text) return set_err(err, "%s: out of memory formatting the config", path);
    int rc = fs_write_atomic(path, text, strlen(text), err);   /* PATH.tmp, fsync, rename */
    free(text);
    return rc;
}
