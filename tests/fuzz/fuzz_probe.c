/* libFuzzer harness: lookup-probe set files (data/probe.c, probe_set_load; format in
 * data/probe.h) and the compatibility checks of the sets an analysis combines: a probe and its
 * calibration set (probe_set_same_build, ./train --eval --knockout --calib) and a probe against a
 * checkpoint's tokenizer (ckpt_source_check_probe).
 *
 * Input: a whole probe file, optionally followed by a second one (the calibration set): when the
 * input is longer than the size the first header implies (256 + 32 n_prompts + 4 n_tokens), the
 * rest is the second file. The whole input is loaded twice, without limits and with the limits a
 * model imposes (vocabulary 256, evaluation length 256), and every prompt of a set that loads is
 * read the way the evaluator reads it (trainer/probe_eval.c): all its tokens, the query token
 * at length - 1 and the key at t_key. Then the first and the second file are loaded on their own
 * and compared. Beyond sanitizer reports the harness aborts on a broken property:
 *   - a set is compatible with itself; compatibility is symmetric (a with b iff b with a);
 *   - two compatible sets have the same tokenizer fingerprint, layout, residue count, query
 *     position, prompt length and key/value tokens per record (what the knockout relies on);
 *   - a refused pair's message is one line naming both files;
 *   - against a stand-in checkpoint (tokenizer "synthetic", the set's own, none), a set is
 *     accepted iff the fingerprints match or the checkpoint's is unknown, and a refusal names the
 *     set and the checkpoint.
 * A rejected file is the normal outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "data/probe.h"
#include "common/errors.h"
#include "trainer/ckpt_source.h"
#include "tests/fuzz/fuzz_util.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_probe: "); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static volatile uint32_t sink;  /* unsigned: the sum may wrap */

static void read_set(const ProbeSet *ps) {
    int n = probe_set_count(ps);
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) sink += probe_set_count_protocol(ps, p);
    sink += (uint32_t)probe_set_residues(ps) + (uint32_t)probe_set_max_length(ps) + (uint32_t)probe_set_query_position(ps);
    sink += probe_set_vocab_size(ps) + (uint32_t)strlen(probe_set_fingerprint(ps));
    for (int i = 0; i < n; i++) {
        ProbePrompt pr;
        if (probe_set_prompt(ps, i, &pr) != 0) continue;
        for (int k = 0; k < pr.length; k++) sink += (uint32_t)pr.tokens[k];
        sink += (uint32_t)pr.tokens[pr.length - 1] + (uint32_t)pr.tokens[pr.t_key] + (uint32_t)pr.answer;
        sink += (uint32_t)pr.tokens[probe_set_query_position(ps)];
        sink += (uint32_t)strlen(probe_protocol_name(pr.protocol));
    }
}

/* The size the header at p (size bytes) implies, or 0 when it has no header. */
static uint64_t implied_size(const uint8_t *p, size_t size) {
    if (size < PROBE_HEADER_BYTES) return 0;
    uint64_t n = fuzz_u32(p + 16), n_tokens = (uint64_t)fuzz_u32(p + 32) | (uint64_t)fuzz_u32(p + 36) << 32;
    if (n_tokens > ((uint64_t)1 << 40)) return 0;
    return (uint64_t)PROBE_HEADER_BYTES + (uint64_t)PROBE_RECORD_BYTES * n + 4 * n_tokens;
}

static void check_pair(const ProbeSet *a, const ProbeSet *b) {
    char err[ERR_LEN], err2[ERR_LEN];
    int ab = probe_set_same_build(a, b, "--calib", err), ba = probe_set_same_build(b, a, "--calib", err2);
    if ((ab == 0) != (ba == 0)) FAIL("probe_set_same_build is not symmetric: a with b %d, b with a %d (%s)", ab, ba, ab ? err : err2);
    if (ab && a == b) FAIL("a set is not compatible with itself: %s", err);
    if (ab) {
        if (!strstr(err, probe_set_path(a)) || !strstr(err, probe_set_path(b)) || strchr(err, '\n'))
            FAIL("the refusal '%s' is not one line naming both files", err);
        return;
    }
    ProbeBuilder x = probe_set_builder(a), y = probe_set_builder(b);
    if (strcmp(probe_set_fingerprint(a), probe_set_fingerprint(b)) || x.layout != y.layout ||
        probe_set_residues(a) != probe_set_residues(b) || probe_set_query_position(a) != probe_set_query_position(b) ||
        probe_set_max_length(a) != probe_set_max_length(b) || x.key_tokens != y.key_tokens || x.value_tokens != y.value_tokens ||
        probe_set_scored_tokens(a) != probe_set_scored_tokens(b))
        FAIL("two sets built differently are compatible");
}

/* A probe against stand-in checkpoints: trained on "synthetic", on the set's own tokenizer, on an
 * unknown one. */
static void check_ckpt(const ProbeSet *ps) {
    static CkptSource c;                     /* only what the check reads */
    const char *fp = probe_set_fingerprint(ps);
    const char *ckpt_fps[] = {"synthetic", fp, ""};
    for (int k = 0; k < 3; k++) {
        c.dir = "ckpt";
        c.tokenizer_fp_source = "ckpt/shard";
        snprintf(c.tokenizer_fp, sizeof c.tokenizer_fp, "%s", ckpt_fps[k]);
        char err[ERR_LEN];
        int rc = ckpt_source_check_probe(&c, "--probe", ps, NULL, err);
        int want = !fp[0] || !c.tokenizer_fp[0] || !strcmp(fp, c.tokenizer_fp);
        if ((rc == 0) != want) FAIL("probe of tokenizer '%s' %s by a checkpoint of '%s'", fp, rc ? "refused" : "accepted", c.tokenizer_fp);
        if (rc && (!strstr(err, probe_set_path(ps)) || !strstr(err, "ckpt") || strchr(err, '\n')))
            FAIL("the refusal '%s' does not name the probe and the checkpoint in one line", err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("probe.bin", data, size);
    char err[ERR_LEN];
    ProbeSet *ps;
    if (probe_set_load(&ps, path, 0, 0, err) == 0) {
        read_set(ps);
        check_pair(ps, ps);
        check_ckpt(ps);
        probe_set_free(ps);
    }
    if (probe_set_load(&ps, path, 256, 256, err) == 0) {
        read_set(ps);
        probe_set_free(ps);
    }
    /* a probe and its calibration set */
    uint64_t first = implied_size(data, size);
    if (first < PROBE_HEADER_BYTES || first >= size) return 0;
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s", fuzz_write_file("probe_a.bin", data, (size_t)first));
    snprintf(pb, sizeof pb, "%s", fuzz_write_file("calib_b.bin", data + first, size - (size_t)first));
    ProbeSet *a = NULL, *b = NULL;
    for (int limits = 0; limits < 2; limits++) {
        uint32_t vocab = limits ? 256 : 0;
        int T = limits ? 256 : 0;
        if (probe_set_load(&a, pa, vocab, T, err) == 0 && probe_set_load(&b, pb, vocab, T, err) == 0) {
            if (!limits) read_set(b), check_ckpt(b);
            check_pair(a, a);
            check_pair(b, b);
            check_pair(a, b);
        }
        probe_set_free(a), probe_set_free(b);
        a = b = NULL;
    }
    return 0;
}
