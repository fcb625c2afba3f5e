/* ./train --generate CKPT (--prompt-ids FILE | --prompt TEXT [--tokenizer SPEC]) [--max-new N]
 *         [--temperature T] [--top-k K] [--seed S] [--context N] [--ignore-eot] [--stepwise-prefill]
 *         [section.key=value ...]
 *
 * Loads a checkpoint, prefills the prompt into the decoder's KV cache (model/decode.h: compressed
 * entries written as their windows complete, raw ring of the last n_local tokens or the tail) in
 * one chunk (decoder_prefill_chunk; --stepwise-prefill: token by token), then decodes one token at a time, streaming each token to stdout as it is produced (decoded
 * text with a tokenizer, else ids). Statistics go to stderr: prefill and decode tokens/s, the
 * cache bytes per layer and in total (measured from the allocations, beside the formula and beside
 * full attention of the same shape) and the peak resident memory.
 *
 * Sampling: temperature 0 (the default) is greedy argmax (first index on ties); T > 0 samples
 * from softmax(logits / T) restricted to the top_k largest logits (0 = the whole vocabulary),
 * with a SplitMix64 generator seeded by --seed, so a run is reproducible.
 * Generation stops after max_new tokens, or at the tokenizer's end-of-text id (unless
 * --ignore-eot). The cache is sized for --context tokens (default prompt + max_new); it may
 * exceed the training seq_len (RoPE positions continue; see model/decode.h).
 *
 * CKPT is a checkpoint or a weights-only directory (trainer/ckpt_source.h). --prompt TEXT is
 * encoded with CKPT's own tokenizer.json (or "bytes" when config.json says so) unless --tokenizer
 * names another, whose fingerprint must then be the checkpoint's. Numbers are parsed as the
 * integers they are (--max-new, --top-k, --context: decimal digits, range-checked; --seed: an
 * unsigned 64-bit integer; --temperature: a finite number), never through a double.
 *
 * In place of CKPT a CONFIG.ini gives the untrained model (docs/spec.md init from train.seed): for
 * throughput and memory measurements of shapes without a checkpoint (e.g. configs/w8s8_kv8.ini).
 *
 * probe_evaluate_decode (./train --eval --decode) scores the lookup probe through the same
 * path: each prompt prefilled token by token, top-1 of the logits at the query position. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "analysis/generate.h"
#include "common/clock.h"
#include "analysis/cache_report.h"
#include "trainer/checkpoint.h"
#include "trainer/ckpt_source.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "trainer/run_config.h"
#include "model/decode.h"
#include "model/layer_kinds.h"
#include "common/errors.h"
#include "common/interrupt.h"
#include "common/grow.h"
#include "common/optval.h"
#include "model/model.h"

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;   /* ru_maxrss is in KiB on Linux */
}

static int argmax_f(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const float *sort_logits;
static int by_logit_desc(const void *a, const void *b) {
    float x = sort_logits[*(const int *)a], y = sort_logits[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : (*(const int *)a - *(const int *)b);
}

/* One token from logits [V]: greedy when temperature <= 0, else top-k sampling. */
static int sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng, int *idx,
                        double *prob) {
    if (temperature <= 0) return argmax_f(logits, V);
    int n = V;
    for (int i = 0; i < V; i++) idx[i] = i;
    if (top_k > 0 && top_k < V) {
        sort_logits = logits;
        qsort(idx, V, sizeof *idx, by_logit_desc);
        n = top_k;
    }
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) if (logits[idx[i]] > mx) mx = logits[idx[i]];
    for (int i = 0; i < n; i++) { prob[i] = exp((logits[idx[i]] - mx) / temperature); sum += prob[i]; }
    double u = ((splitmix64(rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += prob[i];
        if (u < acc) return idx[i];
    }
    return idx[n - 1];
}

int prompt_ids_read(FILE *f, const char *path, int32_t **out, int *n, char *err) {
    size_t cap = 0;
    int len = 0, c;
    int32_t *ids = NULL;
    long v = 0;
    int in_num = 0, line = 1;
    while ((c = fgetc(f)) != EOF || in_num) {
        if (c >= '0' && c <= '9') { v = v * 10 + (c - '0'); in_num = 1; if (v > INT32_MAX) break; continue; }
        if (in_num) {
            if (len == INT_MAX) { free(ids); return set_err(err, "%s:%d: more than %d token ids", path, line, INT_MAX); }
            int32_t *grown = grow_array(ids, &cap, (size_t)len + 1, sizeof *ids, 256);
            if (!grown) { free(ids); return set_err(err, "%s: out of memory reading the token ids", path); }
            ids = grown;
            ids[len++] = (int32_t)v;
            v = 0; in_num = 0;
        }
        if (c == EOF) break;
        if (c == '\n') line++;
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != ',') {
            free(ids);
            char what[16];
            snprintf(what, sizeof what, c > ' ' && c < 127 ? "'%c'" : "byte 0x%02x", c);
            return set_err(err, "%s:%d: %s in the token ids: expected non-negative integers separated by spaces or commas",
                           path, line, what);
        }
    }
    if (ferror(f)) { free(ids); return set_err(err, "%s: cannot read the token ids: %s", path, strerror(errno)); }
    if (v > INT32_MAX) { free(ids); return set_err(err, "%s:%d: id too large", path, line); }
    *out = ids;
    *n = len;
    return 0;
}

/* Streams decoded text: prints the valid UTF-8 prefix of what was not printed yet. */
typedef struct { TextBuf buf; size_t printed; } Stream;
static void stream_flush(Stream *s, int final) {
    size_t left = s->buf.len - s->printed;
    size_t n = final ? left : utf8_valid_prefix(s->buf.data + s->printed, left);
    if (!final && n == 0 && left > 4) n = left;        /* an invalid byte: do not stall the stream */
    fwrite(s->buf.data + s->printed, 1, n, stdout);
    s->printed += n;
    fflush(stdout);
}

/* An integer option in [lo, hi] (lo >= 0): decimal digits only, parsed whole as the integer it is
 * (never through a double: 3e9, inf and 1e12 are not integers), range-checked. */
static int parse_count(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    if (optval_int(s, lo, hi, out)) {                    /* common/optval.h */
        fprintf(stderr, "phaselab: %s: '%s' is not allowed: expected an integer in %lld..%lld\n", opt, s, lo, hi);
        return 2;
    }
    return 0;
}

/* --seed: an unsigned 64-bit integer (digits only; strtoull alone would wrap "-1"). */
static int parse_seed(const char *opt, const char *s, uint64_t *out) {
    if (optval_u64(s, 0, UINT64_MAX, out)) {
        fprintf(stderr, "phaselab: %s: '%s' is not allowed: expected an integer in 0..%llu\n", opt, s, (unsigned long long)UINT64_MAX);
        return 2;
    }
    return 0;
}

/* --temperature: a finite number in [0, GEN_MAX_TEMPERATURE] (0 = greedy). */
#define GEN_MAX_TEMPERATURE 1e6
static int parse_temperature(const char *opt, const char *s, double *out) {
    if (optval_double(s, 0, GEN_MAX_TEMPERATURE, out)) {
        fprintf(stderr, "phaselab: %s: '%s' is not allowed: expected a finite number in 0..%g (0 = greedy)\n", opt, s,
                GEN_MAX_TEMPERATURE);
        return 2;
    }
    return 0;
}

/* Positions of the decoder (prompt + new tokens, --context): int throughout model/decode.c. */
#define GEN_MAX_POSITIONS (1LL << 30)

int cmd_generate(int argc, char **argv) {
    if (argc < 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: ./train --generate (CHECKPOINT_DIR | CONFIG.ini) (--prompt-ids FILE | --prompt TEXT [--tokenizer SPEC])\n"
                        "         [--max-new N] [--temperature T] [--top-k K] [--seed S] [--context N] [--ignore-eot]\n"
                        "         [--stepwise-prefill] [section.key=value ...]\n");
        return 2;
    }
    const char *ckpt = argv[0], *ids_path = NULL, *prompt = NULL, *tok_spec = NULL;
    long long max_new = 64, top_k = 0, context = 0;
    double temperature = 0;
    uint64_t seed = 0;
    int ignore_eot = 0, stepwise = 0;
    char **overrides = malloc(sizeof(char *) * (size_t)argc);
    int n_over = 0;
    if (!overrides) { fprintf(stderr, "phaselab: --generate: out of memory\n"); return 1; }
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--ignore-eot")) { ignore_eot = 1; continue; }
        if (!strcmp(o, "--stepwise-prefill")) { stepwise = 1; continue; }
        if (o[0] == '-' && o[1] == '-') {
            static const char *const VALUED[] = {"--prompt-ids", "--prompt", "--tokenizer", "--max-new", "--temperature",
                                                 "--top-k", "--seed", "--context"};
            int known = 0;
            for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++) known |= !strcmp(o, VALUED[k]);
            if (!known) {
                fprintf(stderr, "phaselab: --generate: unknown option %s (expected --prompt-ids FILE or --prompt TEXT, "
                                "--tokenizer, --max-new, --temperature, --top-k, --seed, --context, --ignore-eot, "
                                "--stepwise-prefill, or section.key=value)\n", o);
                free(overrides);
                return 2;
            }
            if (i + 1 >= argc) { fprintf(stderr, "phaselab: --generate: %s needs a value\n", o); free(overrides); return 2; }
            const char *v = argv[++i];
            int rc = !strcmp(o, "--prompt-ids") ? (ids_path = v, 0)
                   : !strcmp(o, "--prompt") ? (prompt = v, 0)
                   : !strcmp(o, "--tokenizer") ? (tok_spec = v, 0)
                   : !strcmp(o, "--max-new") ? parse_count(o, v, 0, GEN_MAX_POSITIONS, &max_new)
                   : !strcmp(o, "--temperature") ? parse_temperature(o, v, &temperature)
                   : !strcmp(o, "--top-k") ? parse_count(o, v, 0, INT_MAX, &top_k)
                   : !strcmp(o, "--seed") ? parse_seed(o, v, &seed)
                   : !strcmp(o, "--context") ? parse_count(o, v, 1, GEN_MAX_POSITIONS, &context)
                   : (fprintf(stderr, "phaselab: --generate: unknown option %s\n", o), 2);
            if (rc) { free(overrides); return rc; }
        } else overrides[n_over++] = argv[i];
    }
    if (!!ids_path == !!prompt) {
        fprintf(stderr, "phaselab: --generate: give exactly one of --prompt-ids FILE or --prompt TEXT\n");
        return 2;
    }
    char err[ERR_LEN];
    /* a CONFIG.ini instead of a checkpoint: the model with its docs/spec.md init from train.seed (for
     * throughput and cache measurements of shapes that have no trained checkpoint) */
    size_t cl = strlen(ckpt);
    const int random_init = cl > 4 && !strcmp(ckpt + cl - 4, ".ini");
    Config cfg;
    CkptSource src;                      /* a checkpoint or a weights-only directory (trainer/ckpt_source.h) */
    memset(&src, 0, sizeof src);
    if (random_init) {
        if (config_load(&cfg, ckpt, n_over, overrides, err)) { fprintf(stderr, "phaselab: %s\n", err); free(overrides); return 2; }
    } else {
        int rc = ckpt_source_open(&src, ckpt, n_over, overrides, stderr, err);
        if (rc) { fprintf(stderr, "phaselab: %s\n", err); free(overrides); return rc == -2 ? 2 : 1; }
        cfg = src.cfg;
    }
    free(overrides);
    const ModelConfig *mc = &cfg.model;
    /* --prompt TEXT: the checkpoint's own tokenizer.json unless --tokenizer names one */
    int own_tokenizer = 0;
    if (prompt && !tok_spec) {
        if (src.tokenizer_json) tok_spec = src.tokenizer_json, own_tokenizer = 1;
        else if (!random_init && !strcmp(src.tokenizer_fp, "bytes")) tok_spec = "bytes", own_tokenizer = 1;
        else {
            fprintf(stderr, "phaselab: --generate: --prompt TEXT needs a tokenizer: %s %s; give --tokenizer (a tokenizer.json, "
                    "or 'bytes') or --prompt-ids FILE\n", ckpt,
                    random_init ? "is a config, not a checkpoint with a tokenizer.json"
                    : src.tokenizer_fp[0] ? "has no tokenizer.json (its token ids are not text: synthetic)"
                    : "has no tokenizer.json");
            ckpt_source_close(&src);
            return 2;
        }
        fprintf(stderr, "tokenizer: %s (the checkpoint's own)\n", tok_spec);
    }
    Tokenizer *tok = NULL;
    if (tok_spec && !(tok = tokenizer_open(tok_spec, err))) { fprintf(stderr, "phaselab: %s\n", err); ckpt_source_close(&src); return 2; }
    if (tok && !random_init && !own_tokenizer) {
        /* another tokenizer than the checkpoint's own file: its fingerprint must be the checkpoint's */
        char *a = src.tokenizer_json ? realpath(src.tokenizer_json, NULL) : NULL, *b = realpath(tok_spec, NULL);
        int same_file = a && b && !strcmp(a, b);
        free(a), free(b);
        if (!same_file && ckpt_source_check_text_tokenizer(&src, "--tokenizer", tok_spec, tokenizer_fingerprint(tok), stderr, err)) {
            fprintf(stderr, "phaselab: %s\n", err);
            tokenizer_free(tok);
            ckpt_source_close(&src);
            return 2;
        }
    }
    int32_t *ids = NULL;
    int n_prompt = 0;
    if (ids_path) {
        FILE *f = !strcmp(ids_path, "-") ? stdin : fopen(ids_path, "r");
        if (!f) { fprintf(stderr, "phaselab: %s: cannot open the prompt ids: %s\n", ids_path, strerror(errno)); return 2; }
        int bad = prompt_ids_read(f, ids_path, &ids, &n_prompt, err);
        if (f != stdin) fclose(f);
        if (bad) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
    } else {
        TokenizerState *st = tokenizer_state_new(tok);
        TokenIds ti = {0};
        if (!st || tokenizer_encode(st, prompt, strlen(prompt), &ti, err) < 0) {
            fprintf(stderr, "phaselab: --prompt: %s\n", st ? err : "out of memory");
            return 1;
        }
        tokenizer_state_free(st);
        if (ti.n > (size_t)GEN_MAX_POSITIONS) {
            fprintf(stderr, "phaselab: --prompt: %zu tokens, more than the %lld positions the decoder takes\n", ti.n, GEN_MAX_POSITIONS);
            return 2;
        }
        ids = malloc(sizeof *ids * (ti.n + 1));
        if (!ids) { fprintf(stderr, "phaselab: --prompt: out of memory for %zu tokens\n", ti.n); return 1; }
        for (size_t i = 0; i < ti.n; i++) ids[i] = (int32_t)ti.ids[i];
        n_prompt = (int)ti.n;
        token_ids_free(&ti);
    }
    if (n_prompt < 1) {
        fprintf(stderr, "phaselab: %s%s: the prompt has no tokens (expected at least one)\n", ids_path ? "--prompt-ids " : "--prompt",
                ids_path ? ids_path : "");
        return 2;
    }
    for (int i = 0; i < n_prompt; i++)
        if (ids[i] < 0 || ids[i] >= mc->vocab_size) {
            fprintf(stderr, "phaselab: %s: prompt token %d is id %d, outside the model's vocabulary 0..%d (%s)\n",
                    ids_path ? ids_path : "--prompt", i, ids[i], mc->vocab_size - 1, random_init ? ckpt : src.config_path);
            return 2;
        }
    /* 64-bit sums: prompt + max_new and the context stay within GEN_MAX_POSITIONS (the decoder's int positions) */
    long long need = (long long)n_prompt + max_new;
    if (need > GEN_MAX_POSITIONS) {
        fprintf(stderr, "phaselab: --max-new %lld: the prompt (%d tokens) + max_new is %lld positions, more than the %lld the "
                "decoder takes\n", max_new, n_prompt, need, GEN_MAX_POSITIONS);
        return 2;
    }
    int n_new = (int)max_new, ctx = context > 0 ? (int)context : (int)need;
    if (ctx < n_prompt + (n_new > 0 ? n_new - 1 : 0)) {
        fprintf(stderr, "phaselab: --context %d is smaller than the prompt (%d) + max_new (%d) - 1\n", ctx, n_prompt, n_new);
        return 2;
    }
    const Backend *be = backend_select(cfg.run.device, cfg.run.threads, 0, err);
    if (!be) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
    /* the model's own activation arena is unused by the decoder: build it for the smallest T */
    int T_min = 1;                 /* one window of every compressed layer (model/layer_kinds.h) */
    for (int L = 0; L < mc->n_layers; L++) {
        const ModelConfig lc = layer_config(mc, L);
        if (lc.attention == ATTN_COMPRESSED && lc.window > T_min) T_min = lc.window;
    }
    Model *m = model_create(mc, be, 1, T_min, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    TrainState ts = {0};
    if (random_init) model_init_params(m, cfg.train.seed);
    else if (ckpt_source_load(&src, m, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    } else ts = src.st;
    Decoder *dec = decoder_create(m, ctx, err);
    if (!dec) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    fprintf(stderr, "%s %s: step %ld; prompt %d tokens, up to %d new, cache for %d positions (training seq_len %d)%s\n",
            random_init ? "untrained model (docs/spec.md §1.4 init) of" : "checkpoint", ckpt, ts.step, n_prompt, n_new, ctx, cfg.data.seq_len,
            ctx > cfg.data.seq_len ? "; past seq_len the RoPE positions continue" : "");
    const DecodeCacheLayout *lay = decoder_layout(dec);
    ModelConfig full = *mc;
    full.attention = ATTN_FULL;
    full.layer_attention[0] = 0;
    DecodeCacheLayout fl;
    decode_cache_layout(&full, ctx, be->act_bytes, &fl);
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    cache_human_bytes((double)decoder_cache_bytes(dec) / mc->n_layers, a, 32);
    cache_human_bytes((double)decoder_cache_bytes(dec), b, 32);
    cache_human_bytes((double)lay->entry_bytes, c, 32);
    cache_human_bytes((double)lay->raw_bytes, d, 32);
    cache_human_bytes((double)lay->input_bytes, e, 32);
    cache_human_bytes((double)fl.total_bytes, f, 32);
    cache_human_bytes((double)decoder_scratch_bytes(dec), g, 32);
    fprintf(stderr, "KV cache (%s, %zu-byte elements), measured from the allocations: %zu B = %s per layer, %s in %d layers "
            "[formula: %d entry slots x %d KV heads (%ld entries%s) %s + %d raw slots %s + %d inputs %s = %zu B per layer, %s]; "
            "full attention at %d tokens: %s (%.1fx); scratch + RoPE table %s\n",
            be->name, be->act_bytes, decoder_cache_bytes(dec) / mc->n_layers, a, b, mc->n_layers, lay->entry_cap, mc->n_kv_heads,
            lay->head_entries,
            lay->head_entries < (long)lay->entry_cap * mc->n_kv_heads ? ": grid = staggered, heads with one window fewer leave a slot unused" : "",
            c, lay->ring_cap, d, lay->input_rows, e,
            lay->layer_bytes, decoder_cache_bytes(dec) == lay->total_bytes ? "equal" : "DIFFERENT", ctx, f,
            decoder_cache_bytes(dec) ? (double)fl.total_bytes / decoder_cache_bytes(dec) : 0.0, g);
    if (mc->layer_attention[0]) {   /* docs/spec.md §5: the layer schedule's cache by kind */
        fprintf(stderr, "KV cache by layer kind (model.layer_attention; the per-layer figures above are the largest layer's):");
        for (int k = 0; k < N_KINDS; k++) {
            int first = -1, count = 0;
            for (int L = 0; L < mc->n_layers; L++) if (layer_kind(mc, L) == k) { if (first < 0) first = L; count++; }
            if (first < 0) continue;
            DecodeCacheLayout l;
            decode_cache_layout_layer(mc, first, ctx, be->act_bytes, &l);
            fprintf(stderr, " %s x%d: %zu B per layer (%.1f B per token)", layer_kind_names[k], count, l.layer_bytes,
                    (double)l.layer_bytes / ctx);
        }
        fprintf(stderr, "\n");
    }

    const int V = mc->vocab_size;
    float *logits = malloc(sizeof(float) * V);
    int *idx = malloc(sizeof(int) * V);
    double *prob = malloc(sizeof(double) * V);
    uint32_t *echo = tok ? malloc(sizeof(uint32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1)) : NULL;
    if (!logits || !idx || !prob || (tok && !echo)) {
        fprintf(stderr, "phaselab: --generate: out of memory: %zu bytes for the sampler over %d tokens\n",
                (sizeof(float) + sizeof(int) + sizeof(double)) * (size_t)V + sizeof(uint32_t) * (size_t)n_prompt, V);
        free(logits), free(idx), free(prob), free(echo);
        return 1;
    }
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    uint32_t eot = tok ? tokenizer_eot_id(tok) : UINT32_MAX;
    Stream s = {{0}, 0};
    /* echo the prompt, then stream the continuation */
    if (tok) {
        uint32_t *u = echo;
        for (int i = 0; i < n_prompt; i++) u[i] = (uint32_t)ids[i];
        if (tokenizer_decode(tok, u, n_prompt, &s.buf, err) == 0) stream_flush(&s, 1);
        free(u);
    } else {
        for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf(" |");
        fflush(stdout);
    }
    int rc = 0;
    double t0 = clock_seconds();
    if ((stepwise ? decoder_prefill : decoder_prefill_chunk)(dec, ids, n_prompt, logits, err)) { fprintf(stderr, "\nphaselab: %s\n", err); return 1; }
    double t_prefill = clock_seconds() - t0, t_decode = 0;
    int generated = 0, steps = 0, stopped_eot = 0;
    while (generated < n_new) {
        int next = sample_token(logits, V, temperature, (int)top_k, &rng, idx, prob);
        generated++;
        if (tok) {
            uint32_t u = (uint32_t)next;
            if (u < tokenizer_n_ids(tok) && tokenizer_decode(tok, &u, 1, &s.buf, err) == 0) stream_flush(&s, 0);
            else { printf("<%d>", next); fflush(stdout); }
        } else {
            printf(" %d", next);
            fflush(stdout);
        }
        if (!ignore_eot && (uint32_t)next == eot) { stopped_eot = 1; break; }
        if (generated == n_new) break;
        double t1 = clock_seconds();
        if (decoder_step(dec, next, logits, err)) { fprintf(stderr, "\nphaselab: %s\n", err); rc = 1; break; }
        t_decode += clock_seconds() - t1;
        steps++;
    }
    if (tok) stream_flush(&s, 1);
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prefill: %d tokens in %.3f s = %.1f tokens/s (%s)\n", n_prompt, t_prefill,
            t_prefill > 0 ? n_prompt / t_prefill : 0.0, stepwise ? "token by token through the cache" : "one chunk");
    fprintf(stderr, "decode: %d tokens generated, %d decode steps in %.3f s = %.1f tokens/s%s; %s; peak RSS %.1f MiB\n",
            generated, steps, t_decode, t_decode > 0 ? steps / t_decode : 0.0, stopped_eot ? " (stopped at end-of-text)" : "",
            temperature > 0 ? "sampled" : "greedy", peak_rss_mib());
    text_buf_free(&s.buf);
    free(logits); free(idx); free(prob); free(ids);
    decoder_free(dec);
    model_free(m);
    if (tok) tokenizer_free(tok);
    ckpt_source_close(&src);
    return rc;
}

int probe_evaluate_decode(struct Model *m, const ProbeSet *ps, ProbeResult *res, double *tokens_per_s, char *err) {
    int P = probe_set_residues(ps);
    if (P > PROBE_MAX_RESIDUES) return set_err(err, "%s: %d residues, at most %d supported", probe_set_path(ps), P, PROBE_MAX_RESIDUES);
    Decoder *dec = decoder_create(m, probe_set_max_length(ps), err);
    if (!dec) return -1;
    probe_result_clear(res, P);
    res->candidates = probe_set_candidates(ps);
    const int V = model_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * V);
    if (!logits) {
        decoder_free(dec);
        return set_err(err, "out of memory: %zu bytes for the logits", sizeof(float) * (size_t)V);
    }
    long tokens = 0;
    double t0 = clock_seconds();
    int n = probe_set_count(ps), rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (interrupt_signal()) {           /* SIGINT/SIGTERM (common/interrupt.h) */
            rc = set_err(err, "interrupted by signal %d after %d of %d probe prompts: nothing written", interrupt_signal(), i, n);
            break;
        }
        ProbePrompt pr;
        probe_set_prompt(ps, i, &pr);
        decoder_reset(dec);
        rc = decoder_prefill(dec, pr.tokens, pr.length, logits, err);
        tokens += pr.length;
        res->total[pr.protocol][pr.residue]++;
        res->correct[pr.protocol][pr.residue] += argmax_f(logits, V) == pr.answer;
    }
    double dt = clock_seconds() - t0;
    if (tokens_per_s) *tokens_per_s = dt > 0 ? tokens / dt : 0;
    free(logits);
    decoder_free(dec);
    probe_result_finalize(res);
    return rc;
}
