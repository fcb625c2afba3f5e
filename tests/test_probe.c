/* Tests of the lookup probe: the statistics (Wilson interval against hand-computed values,
 * mean / worst / best / gap), the probe-set reader (data/probe.c) on a file written here byte
 * by byte from the format of data/probe.h, its error messages, and probe_evaluate end to end
 * with a stand-in model (model_argmax_at is defined below: an oracle that looks the query up
 * and answers wrongly where the target key sits at an even position). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/probe.h"
#include "common/errors.h"
#include "model/model.h"
#include "tests/check.h"
#include "trainer/probe_eval.h"

/* ---- stand-in model ------------------------------------------------------------------- */
struct Model { int T; int calls; int max_b; int call_T; };

/* the sequence length the evaluation asks for: the stand-in reads rows of that many tokens */
int model_set_seq_len(Model *m, int T, char *err) { (void)err; m->T = T; return 0; }
int model_seq_len(const Model *m) { return m->T; }
/* the probe's chunk-phase fold asks these (learned boundaries, trainer/chunk_phase.h): none here */
int model_has_boundaries(const struct Model *m) { (void)m; return 0; }
const unsigned char *model_boundary_flags(const struct Model *m, int layer) { (void)m, (void)layer; return 0; }

void model_argmax_at(Model *m, const int32_t *tokens, int B, const int *positions, int32_t *out) {
    m->calls++;
    m->call_T = m->T;
    if (B > m->max_b) m->max_b = B;
    for (int b = 0; b < B; b++) {
        const int32_t *row = tokens + (size_t)b * m->T;
        int q = positions[b], s = 0;
        while (s < q && row[s] != row[q]) s++;
        out[b] = (s < q) ? row[s + 1] : -1;
        if (s % 2 == 0) out[b] += 1000;     /* wrong at even key positions */
    }
}

/* ---- a probe file written by hand --------------------------------------------------------- */
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

#define NP 8          /* prompts */
#define LEN 10        /* tokens per prompt, query at 9 */
#define P 4

/* prompt i: protocol i / 4; tokens: 1 K0 V0 K1 V1 K2 V2 K3 V3, then the query K(i%4) at 9;
 * keys 20+j, values 40+j; t_K of record j is 1 + 2j: residues 1, 3, 1, 3 (P = 4). */
static size_t make_file(unsigned char *buf) {
    memset(buf, 0, 256);
    memcpy(buf, "PHLPRBv1", 8);
    put32(buf + 8, 256); put32(buf + 12, 32); put32(buf + 16, NP); put32(buf + 20, P);
    put32(buf + 24, 64); put32(buf + 28, LEN); put64(buf + 32, (uint64_t)NP * LEN);
    memcpy(buf + 40, "synthetic", 9);
    put32(buf + 104, LEN - 1); put32(buf + 108, 4); put32(buf + 112, 0);
    unsigned char *tok = buf + 256 + 32 * NP;
    for (int i = 0; i < NP; i++) {
        int j = i % 4, tk = 1 + 2 * j;
        unsigned char *r = buf + 256 + 32 * i;
        put32(r, i / 4); put32(r + 4, tk % P); put32(r + 8, tk); put32(r + 12, 40 + j);
        put32(r + 16, LEN); put32(r + 20, j); put64(r + 24, (uint64_t)i * LEN);
        uint32_t t[LEN] = {1, 20, 40, 21, 41, 22, 42, 23, 43, 0};
        t[9] = 20 + j;
        for (int k = 0; k < LEN; k++) put32(tok + 4 * ((size_t)i * LEN + k), t[k]);
    }
    return 256 + 32 * NP + 4 * (size_t)NP * LEN;
}

static int write_file(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static double close_to(double a, double b, double tol) { return fabs(a - b) <= tol; }

int main(void) {
    /* --- Wilson interval: hand-computed at z = 1.96 (textbook values) --- */
    {
        double lo, hi;
        /* 8/10: p = .8, z^2 = 3.8415, denom = 1.38415, centre = (.8 + .192073)/1.38415 = .716738,
         * half = 1.96 * sqrt(.016 + .0096037)/1.38415 = .226577 -> [.490161, .943315] */
        probe_wilson(8, 10, PROBE_Z95, &lo, &hi);
        check(close_to(lo, 0.490161, 2e-5) && close_to(hi, 0.943315, 2e-5), "wilson_8_of_10", "[%f, %f]", lo, hi);
        /* 0/10: centre = .192073/1.38415 = .138765, half = 1.96*sqrt(.0096037)/1.38415 = .138765 -> [0, .277531] */
        probe_wilson(0, 10, PROBE_Z95, &lo, &hi);
        check(close_to(lo, 0.0, 1e-9) && close_to(hi, 0.277531, 2e-5), "wilson_0_of_10", "[%f, %f]", lo, hi);
        probe_wilson(10, 10, PROBE_Z95, &lo, &hi);
        check(close_to(lo, 0.722469, 2e-5) && close_to(hi, 1.0, 1e-9), "wilson_10_of_10", "[%f, %f]", lo, hi);
        /* 50/100: centre .5, half = 1.96 sqrt(.0025 + .00009604)/1.038415 = .096184 -> [.403816, .596184] */
        probe_wilson(50, 100, PROBE_Z95, &lo, &hi);
        check(close_to(lo, 0.403816, 2e-5) && close_to(hi, 0.596184, 2e-5), "wilson_50_of_100", "[%f, %f]", lo, hi);
        probe_wilson(0, 0, PROBE_Z95, &lo, &hi);
        check(isnan(lo) && isnan(hi), "wilson_empty_is_nan", "[%f, %f]", lo, hi);
    }

    /* --- summary statistics --- */
    {
        ProbeResult res;
        probe_result_clear(&res, 4);
        long c[4] = {9, 3, 10, 0}, t[4] = {10, 10, 10, 0};   /* 90, 30, 100, (none) */
        for (int r = 0; r < 4; r++) res.correct[PROBE_PP][r] = c[r], res.total[PROBE_PP][r] = t[r];
        probe_result_finalize(&res);
        check(res.present[PROBE_PP] && !res.present[PROBE_IP], "summary_present", "%d %d", res.present[0], res.present[1]);
        check(close_to(res.acc[PROBE_PP][0], 90.0, 1e-9) && close_to(res.acc[PROBE_PP][1], 30.0, 1e-9) &&
              close_to(res.acc[PROBE_PP][2], 100.0, 1e-9) && isnan(res.acc[PROBE_PP][3]),
              "summary_accuracy_percent", "%f %f %f %f", res.acc[0][0], res.acc[0][1], res.acc[0][2], res.acc[0][3]);
        check(close_to(res.mean[PROBE_PP], (90.0 + 30.0 + 100.0) / 3.0, 1e-9), "summary_mean", "%f", res.mean[PROBE_PP]);
        check(close_to(res.worst[PROBE_PP], 30.0, 1e-9) && res.worst_residue[PROBE_PP] == 1, "summary_worst", "%f r=%d",
              res.worst[PROBE_PP], res.worst_residue[PROBE_PP]);
        check(close_to(res.best[PROBE_PP], 100.0, 1e-9) && res.best_residue[PROBE_PP] == 2, "summary_best", "%f r=%d",
              res.best[PROBE_PP], res.best_residue[PROBE_PP]);
        check(close_to(res.gap[PROBE_PP], 70.0, 1e-9), "summary_gap_points", "%f", res.gap[PROBE_PP]);
        /* 9/10: centre (.9 + .192073)/1.38415 = .788983, half 1.96 sqrt(.009 + .0096037)/1.38415 = .193141 */
        check(close_to(res.lo[PROBE_PP][0], 59.5842, 2e-3) && close_to(res.hi[PROBE_PP][0], 98.2124, 2e-3),
              "summary_wilson_percent", "[%f, %f]", res.lo[PROBE_PP][0], res.hi[PROBE_PP][0]);
        check(isnan(res.mean[PROBE_IP]) && isnan(res.gap[PROBE_IP]) && res.worst_residue[PROBE_IP] == -1 &&
              probe_result_acc(&res, PROBE_IP) == NULL && probe_result_acc(&res, PROBE_PP) == res.acc[PROBE_PP],
              "summary_empty_protocol_nan", "mean %f", res.mean[PROBE_IP]);
        FILE *f = fopen("/dev/null", "w");
        if (f) probe_print_table(f, &res), fclose(f);
    }

    /* --- reader --- */
    mkdir("build", 0755); mkdir("build/scratch", 0755); mkdir("build/scratch/test_probe", 0755);
    const char *path = "build/scratch/test_probe/hand.probe";
    static unsigned char buf[65536], bad[65536];
    size_t n = make_file(buf);
    char err[ERR_LEN] = "";
    ProbeSet *ps = NULL;
    if (write_file(path, buf, n)) { check(0, "reader_write_scratch", "cannot write %s", path); return check_exit_code(); }
    int rc = probe_set_load(&ps, path, 64, 16, err);
    check(rc == 0, "reader_loads_valid_file", "%s", err);
    if (rc == 0) {
        ProbePrompt pr;
        int ok = probe_set_count(ps) == NP && probe_set_count_protocol(ps, PROBE_PP) == 4 &&
                 probe_set_count_protocol(ps, PROBE_IP) == 4 && probe_set_residues(ps) == P &&
                 probe_set_vocab_size(ps) == 64 && probe_set_max_length(ps) == LEN &&
                 probe_set_query_position(ps) == LEN - 1 && strcmp(probe_set_fingerprint(ps), "synthetic") == 0;
        check(ok, "reader_header_accessors", "count %d P %d vocab %u len %d fp %s", probe_set_count(ps),
              probe_set_residues(ps), probe_set_vocab_size(ps), probe_set_max_length(ps), probe_set_fingerprint(ps));
        ok = probe_set_prompt(ps, 6, &pr) == 0 && pr.protocol == PROBE_IP && pr.t_key == 5 && pr.residue == 1 &&
             pr.answer == 42 && pr.length == LEN && pr.target_index == 2 && pr.tokens[0] == 1 && pr.tokens[9] == 22;
        check(ok, "reader_prompt_fields", "proto %d tk %d res %d ans %d", pr.protocol, pr.t_key, pr.residue, pr.answer);
        check(probe_set_prompt(ps, NP, &pr) == -1 && probe_set_prompt(ps, -1, &pr) == -1, "reader_prompt_range", "accepted");

        /* --- probe_evaluate with the stand-in model: the target keys sit at odd positions
         * t_K = 1 + 2j, where the stand-in answers right: correct for every prompt. */
        struct Model fake = {16, 0, 0, 0};
        ProbeResult res;
        rc = probe_evaluate(&fake, ps, 16, 3, &res, err);
        check(rc == 0, "evaluate_runs", "%s", err);
        check(fake.calls == 3 && fake.max_b == 3, "evaluate_batches", "calls %d max batch %d", fake.calls, fake.max_b);
        /* the prompts (LEN tokens) run at their own length, not at T = 16; T comes back after */
        check(fake.call_T == LEN && fake.T == 16, "evaluate_at_prompt_length", "ran at %d, left at %d", fake.call_T, fake.T);
        ProbeResult rpad;
        rc = probe_evaluate_padded(&fake, ps, 16, 3, &rpad, err);
        check(rc == 0 && fake.call_T == 16 && !memcmp(rpad.correct, res.correct, sizeof res.correct) &&
              !memcmp(rpad.total, res.total, sizeof res.total), "evaluate_padded_path_same_counts", "rc %d ran at %d", rc,
              fake.call_T);
        /* residues: t_K 1, 3, 5, 7 -> r 1, 3, 1, 3: per protocol 2 prompts at r = 1 and 2 at r = 3 */
        ok = res.total[PROBE_PP][1] == 2 && res.total[PROBE_PP][3] == 2 && res.total[PROBE_IP][1] == 2 &&
             res.total[PROBE_IP][3] == 2 && res.total[PROBE_PP][0] == 0 && res.correct[PROBE_PP][1] == 2 &&
             res.correct[PROBE_IP][3] == 2;
        check(ok, "evaluate_counts_by_residue", "pp r1 %ld/%ld r3 %ld/%ld", res.correct[0][1], res.total[0][1],
              res.correct[0][3], res.total[0][3]);
        check(close_to(res.mean[PROBE_PP], 100.0, 1e-9) && close_to(res.gap[PROBE_IP], 0.0, 1e-9),
              "evaluate_summary", "mean %f gap %f", res.mean[PROBE_PP], res.gap[PROBE_IP]);
        /* sharded over 2 ranks: the counts add up to the unsharded ones */
        ProbeResult r0, r1;
        rc = probe_evaluate_shard(&fake, ps, 16, 2, 0, 2, &r0, err) | probe_evaluate_shard(&fake, ps, 16, 2, 1, 2, &r1, err);
        ok = rc == 0;
        for (int p = 0; p < 2 && ok; p++)
            for (int r = 0; r < P; r++)
                ok &= r0.total[p][r] + r1.total[p][r] == res.total[p][r] && r0.correct[p][r] + r1.correct[p][r] == res.correct[p][r];
        check(ok, "evaluate_shards_add_up", "rc %d %s", rc, err);
        rc = probe_evaluate(&fake, ps, 8, 3, &res, err);
        check(rc != 0 && strstr(err, "do not fit"), "evaluate_rejects_short_T", "rc %d: %s", rc, err);
        probe_set_free(ps);
    }

    /* Prompt 1 of the hand file rewritten so that its target key sits at t_K = 2 (even, residue 2):
     * the stand-in answers wrongly there, which must show as 0/1 at residue 2. */
    {
        memcpy(bad, buf, n);
        unsigned char *tok = bad + 256 + 32 * NP;
        unsigned char *r = bad + 256 + 32 * 1;   /* prompt 1 (pp): t_K 3 (K1 at 3, V1 at 4) */
        /* move the target: t_K = 2 (residue 2), tokens[2] = query key K1, tokens[3] = answer V1 */
        uint32_t t[LEN] = {1, 20, 21, 41, 22, 42, 23, 43, 24, 21};
        for (int k = 0; k < LEN; k++) put32(tok + 4 * ((size_t)1 * LEN + k), t[k]);
        put32(r + 4, 2); put32(r + 8, 2); put32(r + 12, 41);
        write_file(path, bad, n);
        rc = probe_set_load(&ps, path, 64, 16, err);
        check(rc == 0, "reader_loads_even_target", "%s", err);
        if (rc == 0) {
            struct Model fake = {16, 0, 0, 0};
            ProbeResult res;
            probe_evaluate(&fake, ps, 16, 4, &res, err);
            check(res.total[PROBE_PP][2] == 1 && res.correct[PROBE_PP][2] == 0 && close_to(res.worst[PROBE_PP], 0.0, 1e-9) &&
                  res.worst_residue[PROBE_PP] == 2 && close_to(res.gap[PROBE_PP], 100.0, 1e-9) &&
                  close_to(res.mean[PROBE_PP], 200.0 / 3.0, 1e-9),
                  "evaluate_wrong_answers_counted", "r2 %ld/%ld worst %f gap %f mean %f", res.correct[0][2], res.total[0][2],
                  res.worst[0], res.gap[0], res.mean[0]);
            probe_set_free(ps);
        }
    }

    /* --- reader errors name the file and the offset --- */
    struct { const char *name; size_t at; uint32_t value; int trunc; const char *want; uint32_t vocab; int maxlen; } cases[] = {
        {"reader_bad_magic", 0, 0x58585858, 0, "@0:", 64, 16},
        {"reader_bad_record_size", 12, 16, 0, "@12:", 64, 16},
        {"reader_truncated", 0, 0, 4, "@32:", 64, 16},
        {"reader_bad_residue", 256 + 32 * 2 + 4, 2, 0, "@324:", 64, 16},
        {"reader_bad_answer", 256 + 32 * 3 + 12, 77, 0, "@364:", 64, 16},
        {"reader_bad_protocol", 256 + 32 * 5, 7, 0, "@416:", 64, 16},
        {"reader_token_outside_vocab", 256 + 32 * NP + 4 * 10, 100, 0, "outside the vocabulary", 64, 16},
        {"reader_prompt_too_long", 0, 0, 0, "do not fit", 64, 8},
        {"reader_vocab_larger_than_model", 0, 0, 0, "@24:", 16, 16},
        /* q = 2^32-1: q + 1 wraps to 0 (it passed the bounds check and read out of bounds) */
        {"reader_query_position_wraps", 104, 0xFFFFFFFFu, 0, "@104:", 64, 16},
        /* the fingerprint is printed in one-line messages: "synthetic\n" (found by fuzz_probe, whose
         * refusal message then ran over two lines) and a byte after the NUL padding are refused */
        {"reader_fingerprint_newline", 49, 0x0a, 0, "@49: byte 0x0a in the tokenizer fingerprint", 64, 16},
        {"reader_fingerprint_after_padding", 60, 0x41, 0, "@60: byte 0x41", 64, 16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(bad, buf, n);
        if (cases[c].value) put32(bad + cases[c].at, cases[c].value);
        if (write_file(path, bad, n - cases[c].trunc)) continue;
        err[0] = 0;
        ps = NULL;
        rc = probe_set_load(&ps, path, cases[c].vocab, cases[c].maxlen, err);
        check(rc != 0 && ps == NULL && strstr(err, path) && strstr(err, cases[c].want), cases[c].name,
              "rc %d, err \"%s\", expected \"%s\"", rc, err, cases[c].want);
        if (rc == 0) probe_set_free(ps);
    }
    /* t_K = 2^32-1 with a matching residue: t_K + 1 wraps past the "t_K < q - 1" check */
    memcpy(bad, buf, n);
    put32(bad + 256 + 8, 0xFFFFFFFFu);
    put32(bad + 256 + 4, 0xFFFFFFFFu % P);
    write_file(path, bad, n);
    ps = NULL;
    rc = probe_set_load(&ps, path, 64, 16, err);
    check(rc != 0 && strstr(err, "@264:"), "reader_target_key_wraps", "rc %d, err \"%s\"", rc, err);
    if (rc == 0) probe_set_free(ps);
    rc = probe_set_load(&ps, "build/scratch/test_probe/missing.probe", 64, 16, err);
    check(rc != 0 && strstr(err, "missing.probe"), "reader_missing_file", "%s", err);
    /* --- the builder's fit, by hand (tools/make-probe: lookup_fit, max_residues; docs/spec.md §3.5) --- */
    {
        /* lookup T = 64: D = 4, R = (64 - 9) / 3 = 18, F = 64 - 36 - 8 - 1 = 19, positions F + 2R - 1 = 54 -> 18;
         * T = 146: R = 64, D = 8, F = 1, positions 128 -> 42; T = 256: F = 111, positions 238 -> 79;
         * T = 32: D = 2, R = 9, F = 9, positions 26 -> 8; T = 8: D = 1, R = 1 < 2 -> none;
         * needle K = 4, T = 64: R = floor(3 * 61 / 16) = 11, F = 64 - 44 - 3 = 17, positions 17 + 40 + 1 = 58 -> 19 */
        int got[6] = {probe_builder_max_residues(PROBE_LAYOUT_LOOKUP, 64, 2), probe_builder_max_residues(PROBE_LAYOUT_LOOKUP, 146, 2),
                      probe_builder_max_residues(PROBE_LAYOUT_LOOKUP, 256, 2), probe_builder_max_residues(PROBE_LAYOUT_LOOKUP, 32, 2),
                      probe_builder_max_residues(PROBE_LAYOUT_LOOKUP, 8, 2), probe_builder_max_residues(PROBE_LAYOUT_NEEDLE, 64, 4)};
        check(got[0] == 18 && got[1] == 42 && got[2] == 79 && got[3] == 8 && got[4] == 0 && got[5] == 19, "builder_max_residues_by_hand",
              "%d %d %d %d %d %d", got[0], got[1], got[2], got[3], got[4], got[5]);
        char a[320], b[320], c[320];
        probe_builder_advice(PROBE_LAYOUT_LOOKUP, 8, 2, 64, a, sizeof a);
        probe_builder_advice(PROBE_LAYOUT_LOOKUP, 24, 2, 64, b, sizeof b);
        probe_builder_advice(PROBE_LAYOUT_NEEDLE, 8, 4, 6, c, sizeof c);
        check(strstr(a, "--max-len 64 --residues 8") && strstr(b, "at most 18 residues") && strstr(b, "eval.residues=18")
              && !strstr(b, "--residues 24") && strstr(c, "no needle probe fits 6 tokens"), "builder_advice_only_what_works",
              "%s | %s | %s", a, b, c);
    }
    return check_exit_code();
}
