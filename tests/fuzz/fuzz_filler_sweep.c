/* libFuzzer harness: filler-sweep files, ./train --eval CKPT --filler-sweep FILE
 * (analysis/filler_sweep.c, filler_sweep_load and filler_sweep_load_checked; format in
 * analysis/filler_sweep.h).
 *
 * Input: the whole sweep file (INI, section [sweep]). It is written to a scratch file and loaded
 * against three models (vocabulary 256 and T 64, vocabulary 151936 and T 32768, vocabulary 2 and
 * T 8) and against two stand-in checkpoints (filler_sweep_load_checked: a byte-tokenizer
 * checkpoint, and one trained on the BPE tokenizer tok.json that the scratch directory holds, a
 * copy of the fuzz seed tests/fuzz/corpus/tokenizer_json/legacy_merges.json: text keys may name
 * `tokenizer = bytes` or `tokenizer = tok.json`, resolved against the sweep file's directory; a
 * file naming tok.json skips the vocabulary-2 model and the byte checkpoint, as opening it costs
 * milliseconds).
 * Beyond sanitizer reports the harness aborts on a broken property:
 *   - a file giving a key twice, or a key with its alternative (a and a_text, prompt and text), is
 *     refused (nothing silently wins);
 *   - a file that loads has the values a reference reading written here finds (lines split at
 *     newlines, key = value trimmed of white space, comments from ; or # at the start of a line):
 *     a, b, filler, L0 and L1 given as digits are those numbers whole (leading zeros and all: no
 *     value cut at a buffer length), and a prompt given as ids is those ids;
 *   - 1 <= prompt tokens <= T - 4, every prompt token, a, b and the filler inside the vocabulary,
 *     a != b, 0 <= L0, L0 + 3 <= L1 <= T - prompt tokens, a text source recorded;
 *   - against a checkpoint, the tokenizer of text keys is the checkpoint's;
 *   - the spec written back as a sweep file of token ids loads to the same spec.
 * Inputs naming a path with '/' are skipped (a tokenizer path of /dev/zero reads forever, which
 * tests the system, not the parser). A rejected file is the normal outcome. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "analysis/filler_sweep.h"
#include "common/errors.h"
#include "common/fsutil.h"
#include "data/tokenizer.h"
#include "trainer/ckpt_source.h"
#include "tests/fuzz/fuzz_util.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_filler_sweep: "); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static const struct { int vocab, T; } models[] = {{256, 64}, {151936, 32768}, {2, 8}};

static CkptSource ckpt_bytes, ckpt_bpe;       /* stand-ins: only what the sweep reader looks at */
static char tok_fp[65];                      /* tok.json's fingerprint ("" when it is absent) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* notes said to the checkpoint's stream (stdout) would flood the fuzzer's output */
    if (!freopen("/dev/null", "w", stdout)) abort();
    char err[ERR_LEN];
    size_t n = 0;
    char *json = fs_read_file("tests/fuzz/corpus/tokenizer_json/legacy_merges.json", &n, err);
    uint32_t bpe_vocab = 0;
    if (json) {
        const char *path = fuzz_write_file("tok.json", json, n);
        free(json);
        Tokenizer *t = tokenizer_open(path, err);
        if (t) {
            snprintf(tok_fp, sizeof tok_fp, "%s", tokenizer_fingerprint(t));
            bpe_vocab = tokenizer_n_ids(t);
            tokenizer_free(t);
        }
    }
    if (!tok_fp[0]) fprintf(stderr, "fuzz_filler_sweep: no tok.json (%s): text keys with a BPE tokenizer are not covered\n", err);
    ckpt_bytes.dir = "ckpt_bytes";
    ckpt_bytes.cfg.model.vocab_size = 256;
    ckpt_bytes.cfg.data.seq_len = 128;
    snprintf(ckpt_bytes.tokenizer_fp, sizeof ckpt_bytes.tokenizer_fp, "bytes");
    ckpt_bpe.dir = "ckpt_bpe";
    ckpt_bpe.cfg.model.vocab_size = bpe_vocab ? (int)bpe_vocab : 1000;
    ckpt_bpe.cfg.data.seq_len = 256;
    snprintf(ckpt_bpe.tokenizer_fp, sizeof ckpt_bpe.tokenizer_fp, "%s", tok_fp[0] ? tok_fp : "none");
    return 0;
}

/* ---- the reference reading: what the file says, line by line */
enum { R_PROMPT, R_TEXT, R_A, R_B, R_FILLER, R_A_TEXT, R_B_TEXT, R_FILLER_TEXT, R_L0, R_L1, R_TOKENIZER, R_N };
static const char *const ref_keys[R_N] = {"prompt", "text", "a", "b", "filler", "a_text", "b_text", "filler_text", "L0", "L1", "tokenizer"};
static const int ref_alt[R_N] = {R_TEXT, R_PROMPT, R_A_TEXT, R_B_TEXT, R_FILLER_TEXT, R_A, R_B, R_FILLER, -1, -1, -1};

typedef struct {
    char *value[R_N];      /* the last value given (heap), NULL when absent */
    int given[R_N];        /* how many times */
} RefSweep;

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static void ref_read(const uint8_t *data, size_t size, RefSweep *r) {
    memset(r, 0, sizeof *r);
    for (size_t at = 0; at < size;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
        char *line = malloc(len + 1);                       /* (a C string: up to a NUL, as the reader sees it) */
        if (!line) abort();
        memcpy(line, data + at, len);
        line[len] = 0;
        at += len + 1;
        char *t = trim(line), *eq = strchr(t, '=');
        if (*t && *t != ';' && *t != '#' && *t != '[' && eq) {
            *eq = 0;
            const char *key = trim(t);
            for (int k = 0; k < R_N; k++)
                if (!strcmp(key, ref_keys[k])) {
                    free(r->value[k]);
                    r->value[k] = strdup(trim(eq + 1));
                    r->given[k]++;
                }
        }
        free(line);
    }
}

static void ref_free(RefSweep *r) {
    for (int k = 0; k < R_N; k++) free(r->value[k]);
}

/* 1 and *v when s is a digit string of at most 18 digits after its leading zeros. */
static int ref_number(const char *s, long long *v) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    while (s[0] == '0' && s[1]) s++;
    if (strlen(s) > 18) return 0;
    *v = strtoll(s, NULL, 10);
    return 1;
}

/* A loaded spec against the reference reading. */
static void check_reference(const RefSweep *r, const FillerSweepSpec *s) {
    for (int k = 0; k < R_N; k++) {
        if (r->given[k] > 1) FAIL("%s is given %d times, and the file loads", ref_keys[k], r->given[k]);
        if (ref_alt[k] >= 0 && r->given[k] && r->given[ref_alt[k]]) FAIL("%s and %s are both given, and the file loads", ref_keys[k], ref_keys[ref_alt[k]]);
    }
    const struct { int key; long long got; } nums[] = {{R_A, s->a}, {R_B, s->b}, {R_FILLER, s->filler}, {R_L0, s->L0}, {R_L1, s->L1}};
    for (int i = 0; i < 5; i++) {
        long long v;
        if (r->value[nums[i].key] && ref_number(r->value[nums[i].key], &v) && v != nums[i].got)
            FAIL("%s = '%.60s' loads as %lld", ref_keys[nums[i].key], r->value[nums[i].key], nums[i].got);
    }
    if (r->value[R_PROMPT] && r->value[R_PROMPT][0]) {
        int n = 0;
        for (const char *p = r->value[R_PROMPT]; *p;) {
            while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
            if (!*p) break;
            size_t len = strcspn(p, " \t\r\n\v\f,");
            char *one = strndup(p, len);
            long long v;
            if (!one) abort();
            if (!ref_number(one, &v)) FAIL("prompt token '%.40s' is not a number, and the file loads", one);
            if (n >= s->n_prompt || s->prompt[n] != v) FAIL("prompt token %d: '%.40s' loads as %d", n, one, n < s->n_prompt ? s->prompt[n] : -1);
            free(one);
            n++;
            p += len;
        }
        if (n != s->n_prompt) FAIL("a prompt of %d ids loads as %d tokens", n, s->n_prompt);
    }
}

static int same_spec(const FillerSweepSpec *x, const FillerSweepSpec *y) {
    return x->n_prompt == y->n_prompt && !memcmp(x->prompt, y->prompt, sizeof(int32_t) * (size_t)x->n_prompt) && x->a == y->a &&
           x->b == y->b && x->filler == y->filler && x->L0 == y->L0 && x->L1 == y->L1;
}

static void check_spec(const FillerSweepSpec *s, int vocab, int T, const CkptSource *src) {
    if (s->n_prompt < 1 || s->n_prompt > T - 4 || !s->prompt) FAIL("a prompt of %d tokens accepted at T %d", s->n_prompt, T);
    for (int i = 0; i < s->n_prompt; i++)
        if (s->prompt[i] < 0 || s->prompt[i] >= vocab) FAIL("prompt token %d is %d, outside the vocabulary %d", i, s->prompt[i], vocab);
    if (s->a < 0 || s->a >= vocab || s->b < 0 || s->b >= vocab || s->filler < 0 || s->filler >= vocab)
        FAIL("a %d, b %d, filler %d: outside the vocabulary %d", s->a, s->b, s->filler, vocab);
    if (s->a == s->b) FAIL("a == b == %d accepted", s->a);
    if (s->L0 < 0 || s->L1 < s->L0 + 3 || s->L1 > T - s->n_prompt)
        FAIL("L0 %d, L1 %d accepted with %d prompt tokens at T %d", s->L0, s->L1, s->n_prompt, T);
    if (!s->text_source) FAIL("no text source recorded");
    if (src && s->tokenizer_fingerprint[0] && strcmp(s->tokenizer_fingerprint, src->tokenizer_fp))
        FAIL("text keys of tokenizer '%s' accepted for a checkpoint of '%s'", s->tokenizer_fingerprint, src->tokenizer_fp);
    /* written back as token ids, loaded again: the same spec */
    size_t cap = (size_t)s->n_prompt * 12 + 256;
    char *text = malloc(cap), *w = text;
    if (!text) abort();
    w += sprintf(w, "[sweep]\nprompt =");
    for (int i = 0; i < s->n_prompt; i++) w += sprintf(w, " %d", s->prompt[i]);
    w += sprintf(w, "\na = %d\nb = %d\nfiller = %d\nL0 = %d\nL1 = %d\n", s->a, s->b, s->filler, s->L0, s->L1);
    const char *path = fuzz_write_file("again.ini", text, (size_t)(w - text));
    free(text);
    FillerSweepSpec again;
    char err[ERR_LEN];
    if (filler_sweep_load(path, vocab, T, &again, err)) FAIL("the spec written back does not load: %s", err);
    if (!same_spec(s, &again)) FAIL("the spec written back loads to another spec");
    filler_sweep_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (memchr(data, '/', size)) return 0;
    char path[1024];                        /* (fuzz_write_file's slots are reused by check_spec) */
    snprintf(path, sizeof path, "%s", fuzz_write_file("sweep.ini", data, size));
    char err[ERR_LEN];
    FillerSweepSpec spec;
    RefSweep ref;
    ref_read(data, size, &ref);
    /* opening tok.json costs milliseconds: a file naming it is loaded only where it can load or
     * fail on its own terms (a small and a large vocabulary, the checkpoint trained on it) */
    const int bpe = memmem(data, size, "tok.json", 8) != NULL;
    for (size_t m = 0; m < sizeof models / sizeof models[0] - (size_t)bpe; m++) {
        if (filler_sweep_load(path, models[m].vocab, models[m].T, &spec, err) == 0) {
            check_reference(&ref, &spec);
            check_spec(&spec, models[m].vocab, models[m].T, NULL);
            filler_sweep_free(&spec);
        } else if (spec.prompt || spec.text_source) {
            FAIL("a refused file leaves allocations in the spec (%s)", err);
        }
    }
    const CkptSource *srcs[] = {&ckpt_bytes, &ckpt_bpe};
    for (int k = bpe; k < 2; k++) {
        if (filler_sweep_load_checked(path, srcs[k], &spec, err) == 0) {
            check_reference(&ref, &spec);
            check_spec(&spec, srcs[k]->cfg.model.vocab_size, srcs[k]->cfg.data.seq_len, srcs[k]);
            filler_sweep_free(&spec);
        }
    }
    ref_free(&ref);
    return 0;
}
