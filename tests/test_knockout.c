/* KV-head knockout by mean replacement (analysis/interventions.c) with a hand-built stand-in
 * model in which KV head 1 of layer 0 alone carries the answer: the attention outputs z of its
 * query heads (2, 3) hold the answer token as a number, the other heads a constant, and the
 * model's output is read from z of head 2 after the hook. Then
 *   - knocking out 0:1 replaces the answer by the calibration mean: accuracy drops to 0 (the
 *     mean is no evaluated answer), below chance;
 *   - knocking out 0:0 or 1:1 changes nothing;
 *   - the mean is exactly the mean over the calibration prompts' answers (computed here), per
 *     protocol, and changes when the calibration prompts change; the evaluated prompts never
 *     enter it.
 * Also the needle scorer of probe_evaluate_ex (all value tokens top-1, teacher forced) with the
 * same stand-in: prompts whose second value token the stand-in gets wrong score 0 although
 * their first value token is right.
 * The real model's hook (model_set_attn_hook, before W_o) is tested in test_attn_hook.c. */
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
#include "trainer/probe_bootstrap.h"
#include "analysis/interventions.h"
#include "trainer/probe_eval.h"

enum { H = 4, G = 2, HD = 2, LAYERS = 2 };

struct Model { ModelAttnHook hook; void *ctx; int T; };

int model_set_seq_len(Model *m, int T, char *err) { (void)err; m->T = T; return 0; }
int model_seq_len(const Model *m) { return m->T; }
/* the probe's chunk-phase fold asks these (learned boundaries, trainer/chunk_phase.h): none here */
int model_has_boundaries(const struct Model *m) { (void)m; return 0; }
const unsigned char *model_boundary_flags(const struct Model *m, int layer) { (void)m, (void)layer; return 0; }

void model_argmax_at(Model *m, const int32_t *tokens, int B, const int *positions, int32_t *out) {
    float z[64 * H * HD];
    for (int layer = 0; layer < LAYERS; layer++) {
        for (int b = 0; b < B; b++) {
            const int32_t *row = tokens + (size_t)b * m->T;
            int q = positions[b], s = 0;
            while (s < q && row[s] != row[q]) s++;
            float answer = s < q ? (float)row[s + 1] : -1.0f;
            for (int a = 0; a < H; a++)
                for (int k = 0; k < HD; k++) z[(b * H + a) * HD + k] = a / (H / G) == 1 ? answer : 0.5f;
        }
        if (m->hook) m->hook(m->ctx, layer, z, B, H, HD);
        if (layer == 0)
            for (int b = 0; b < B; b++) out[b] = (int32_t)lroundf(z[(b * H + 2) * HD]);
    }
}

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

#define NP 8
#define LEN 10
#define P 4
/* Prompts i = 0..7: protocol i / 4, records keys 20+j with values vbase + j (+ 8 for ip), the
 * query the key of record i % 4; answers vbase + i % 4 (+ 8 for ip). */
static int write_probe(const char *path, int vbase) {
    static unsigned char buf[256 + 32 * NP + 4 * NP * LEN];
    memset(buf, 0, sizeof buf);
    memcpy(buf, "PHLPRBv1", 8);
    put32(buf + 8, 256); put32(buf + 12, 32); put32(buf + 16, NP); put32(buf + 20, P);
    put32(buf + 24, 256); put32(buf + 28, LEN); put64(buf + 32, (uint64_t)NP * LEN);
    memcpy(buf + 40, "synthetic", 9);
    put32(buf + 104, LEN - 1); put32(buf + 108, 4);
    unsigned char *tok = buf + 256 + 32 * NP;
    for (int i = 0; i < NP; i++) {
        int j = i % 4, tk = 1 + 2 * j, off = i / 4 ? 8 : 0;
        unsigned char *r = buf + 256 + 32 * i;
        put32(r, i / 4); put32(r + 4, tk % P); put32(r + 8, tk); put32(r + 12, vbase + off + j);
        put32(r + 16, LEN); put32(r + 20, j); put64(r + 24, (uint64_t)i * LEN);
        uint32_t t[LEN] = {1, 20, 0, 21, 0, 22, 0, 23, 0, 20 + j};
        for (int k = 0; k < 4; k++) t[2 + 2 * k] = vbase + off + k;
        for (int k = 0; k < LEN; k++) put32(tok + 4 * ((size_t)i * LEN + k), t[k]);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, sizeof buf, f);
    fclose(f);
    return w == sizeof buf ? 0 : -1;
}

/* Needle file: 8 prompts "1 | K0 a0 b0 | K1 a1 b1 | K2 a2 b2 | Kj aj" (nk 1, nv 2, q = 10,
 * length 12), keys 20+k, a_k = 40+k, b_k = 60+k, target j = i % 3; in odd prompts with j >= 1
 * the slot b0 holds a_j, so the stand-in's second prediction (the token after the first a_j)
 * is K1 instead of b_j: those prompts fail. */
#define NLEN 12
static int write_needle(const char *path) {
    static unsigned char buf[256 + 32 * NP + 4 * NP * NLEN];
    memset(buf, 0, sizeof buf);
    memcpy(buf, "PHLPRBv1", 8);
    put32(buf + 8, 256); put32(buf + 12, 32); put32(buf + 16, NP); put32(buf + 20, P);
    put32(buf + 24, 256); put32(buf + 28, NLEN); put64(buf + 32, (uint64_t)NP * NLEN);
    memcpy(buf + 40, "synthetic", 9);
    put32(buf + 104, NLEN - 2); put32(buf + 108, 3); put32(buf + 112, 0);
    put32(buf + 116, 1); put32(buf + 132, 1); put32(buf + 136, 2);
    unsigned char *tok = buf + 256 + 32 * NP;
    for (int i = 0; i < NP; i++) {
        int j = i % 3, tk = 1 + 3 * j;
        uint32_t t[NLEN] = {1, 20, 40, 60, 21, 41, 61, 22, 42, 62, 0, 0};
        if (i % 2 && j >= 1) t[3] = 40 + j;
        t[10] = 20 + j, t[11] = 40 + j;
        unsigned char *r = buf + 256 + 32 * i;
        put32(r, 0); put32(r + 4, tk % P); put32(r + 8, tk); put32(r + 12, 40 + j);
        put32(r + 16, NLEN); put32(r + 20, j); put64(r + 24, (uint64_t)i * NLEN);
        for (int k = 0; k < NLEN; k++) put32(tok + 4 * ((size_t)i * NLEN + k), t[k]);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, sizeof buf, f);
    fclose(f);
    return w == sizeof buf ? 0 : -1;
}

static double acc_all(const ProbeResult *r) {
    long c = 0, t = 0;
    for (int p = 0; p < 2; p++) for (int i = 0; i < r->residues; i++) c += r->correct[p][i], t += r->total[p][i];
    return t ? 100.0 * c / t : NAN;
}

int main(void) {
    char err[ERR_LEN];
    mkdir("build/scratch", 0755);
    mkdir("build/scratch/test_knockout", 0755);
    const char *ev = "build/scratch/test_knockout/eval.bin", *ca = "build/scratch/test_knockout/calib_a.bin",
               *cb = "build/scratch/test_knockout/calib_b.bin";
    if (write_probe(ev, 40) || write_probe(ca, 60) || write_probe(cb, 90)) { check(0, "write probe files", ""); return 1; }
    ProbeSet *pe, *pa, *pb;
    if (probe_set_load(&pe, ev, 256, LEN, err) || probe_set_load(&pa, ca, 256, LEN, err) || probe_set_load(&pb, cb, 256, LEN, err)) {
        check(0, "load probe files", "%s", err);
        return 1;
    }
    ModelConfig mc;
    memset(&mc, 0, sizeof mc);
    mc.n_layers = LAYERS, mc.n_heads = H, mc.n_kv_heads = G, mc.head_dim = HD;
    Knockout ko;
    check(knockout_init(&ko, &mc, err) == 0, "knockout_init", "%s", err);
    Model m = {knockout_hook, &ko, LEN};
    ProbeResult r;

    ko.mode = KO_OFF;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 100.0, "clean stand-in answers every prompt", "%.1f%%", acc_all(&r));

    /* calibration A: pp answers 60..63 (mean 61.5), ip answers 68..71 (mean 69.5) */
    ko.mode = KO_RECORD;
    probe_evaluate_ex(&m, pa, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    int need[2] = {1, 1};
    check(knockout_finish_means(&ko, need, err) == 0, "calibration means", "%s", err);
    size_t Hd = H * HD;
    float pp_mean = ko.mean[(0 * LAYERS + 0) * Hd + 2 * HD], ip_mean = ko.mean[(1 * LAYERS + 0) * Hd + 2 * HD];
    check(ko.count[0] == 4 && ko.count[1] == 4, "one recorded row per calibration prompt", "%ld %ld", ko.count[0], ko.count[1]);
    check(pp_mean == 61.5f && ip_mean == 69.5f, "mean is over the calibration prompts only, per protocol",
          "pp %g ip %g, expected 61.5 69.5", pp_mean, ip_mean);
    check(ko.mean[(0 * LAYERS + 0) * Hd + 0] == 0.5f, "mean of a constant head is that constant", "%g", ko.mean[0]);

    /* each prompt's outcome (probe_evaluate_hits) and the paired interval of the relative change
     * (trainer/probe_bootstrap.h): clean all right, knocked out all wrong: exactly [-100, -100] */
    const int n_pe = probe_set_count(pe);
    unsigned char *clean_hits = malloc((size_t)n_pe), *ko_hits = malloc((size_t)n_pe);
    ko.mode = KO_OFF;
    probe_evaluate_hits(&m, pe, LEN, 3, knockout_before_batch, &ko, NULL, NULL, clean_hits, &r, err);
    ko.mode = KO_REPLACE, ko.layer = 0, ko.kv_head = 1;
    probe_evaluate_hits(&m, pe, LEN, 3, knockout_before_batch, &ko, NULL, NULL, ko_hits, &r, err);
    int all1 = 1, all0 = 1;
    for (int i = 0; i < n_pe; i++) all1 &= clean_hits[i] == 1, all0 &= ko_hits[i] == 0;
    double lo, hi;
    probe_rel_change_ci(pe, 0, clean_hits, ko_hits, &lo, &hi);
    check(all1 && all0 && lo == -100 && hi == -100, "knockout 0:1: every prompt's outcome recorded, the change's interval [-100, -100]",
          "clean all right %d, knocked out all wrong %d, [%g, %g]", all1, all0, lo, hi);
    probe_rel_change_ci(pe, 0, clean_hits, clean_hits, &lo, &hi);
    check(lo == 0 && hi == 0, "the clean model against itself: [0, 0]", "[%g, %g]", lo, hi);
    free(clean_hits), free(ko_hits);

    ko.mode = KO_REPLACE, ko.layer = 0, ko.kv_head = 1;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 0.0, "knocking out the answer-carrying KV head 0:1 drops accuracy to 0 (below chance 25%)", "%.1f%%", acc_all(&r));
    ko.kv_head = 0;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 100.0, "knocking out KV head 0:0 changes nothing", "%.1f%%", acc_all(&r));
    ko.layer = 1, ko.kv_head = 1;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 100.0, "knocking out KV head 1:1 (unused layer) changes nothing", "%.1f%%", acc_all(&r));
    /* a kind's knockout: a mask [L, G] of heads knocked out at once (analysis/interventions.h) */
    uint8_t tg[LAYERS * G];
    memset(tg, 0, sizeof tg);
    tg[1 * G + 0] = tg[1 * G + 1] = tg[0 * G + 0] = 1;             /* every head but 0:1 */
    ko.targets = tg;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 100.0, "a mask of every KV head but the answer-carrying 0:1 changes nothing", "%.1f%%", acc_all(&r));
    tg[0 * G + 1] = 1;
    probe_evaluate_ex(&m, pe, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    check(acc_all(&r) == 0.0, "adding 0:1 to the mask knocks the answer out (the mask, not layer/kv_head, decides)", "%.1f%%", acc_all(&r));
    ko.targets = NULL;

    /* the replacement really is the calibration mean: with the evaluated set AS calibration the
     * knocked-out stand-in would answer round(41.5) = 42 for pp; with calibration B (mean 91.5)
     * the answers become 92 (pp) and 100 (ip) */
    knockout_free(&ko);
    knockout_init(&ko, &mc, err);
    m.ctx = &ko;
    ko.mode = KO_RECORD;
    probe_evaluate_ex(&m, pb, LEN, 3, 0, 1, knockout_before_batch, &ko, NULL, &r, err);
    knockout_finish_means(&ko, need, err);
    check(ko.mean[2 * HD] == 91.5f, "changing the calibration prompts changes the mean", "%g", ko.mean[2 * HD]);
    ko.mode = KO_REPLACE, ko.layer = 0, ko.kv_head = 1;
    int32_t tokens[LEN], out;
    ProbePrompt pr;
    probe_set_prompt(pe, 0, &pr);
    memcpy(tokens, pr.tokens, sizeof tokens);
    int pos = LEN - 1, proto0 = 0;
    knockout_before_batch(&ko, &proto0, 1);
    model_argmax_at(&m, tokens, 1, &pos, &out);
    check(out == 92, "a knocked-out prompt reads the calibration mean", "%d", out);

    /* a calibration set without ip prompts is refused when the evaluated set has ip prompts */
    Knockout k2;
    knockout_init(&k2, &mc, err);
    k2.count[0] = 3;
    check(knockout_finish_means(&k2, need, err) == -1 && strstr(err, "ip"), "calibration must cover the evaluated protocols", "%s", err);
    knockout_free(&k2);
    knockout_free(&ko);

    /* needle scoring: the odd prompts with j >= 1 (i = 1, 5, 7) fail, the other 5 score */
    const char *np_path = "build/scratch/test_knockout/needle.bin";
    ProbeSet *pn = NULL;
    if (write_needle(np_path) || probe_set_load(&pn, np_path, 256, NLEN, err)) {
        check(0, "needle file loads", "%s", err);
    } else {
        Model plain = {NULL, NULL, NLEN};
        probe_evaluate_ex(&plain, pn, NLEN, 4, 0, 1, NULL, NULL, NULL, &r, err);
        long c = 0, t = 0;
        for (int i = 0; i < P; i++) c += r.correct[0][i], t += r.total[0][i];
        check(t == 8 && c == 5, "needle: a prompt scores only when every value token is right", "%ld/%ld, expected 5/8", c, t);
        unsigned char hits[8];
        memset(hits, 7, sizeof hits);
        probe_evaluate_hits(&plain, pn, NLEN, 4, NULL, NULL, NULL, NULL, hits, &r, err);
        char got[9];
        for (int i = 0; i < 8; i++) got[i] = hits[i] == 1 ? '1' : hits[i] == 0 ? '0' : '?';
        got[8] = 0;
        check(!strcmp(got, "10111010"), "needle: each prompt's outcome lands at its own index (prompts 1, 5, 7 wrong)",
              "%s, expected 10111010", got);
        probe_set_free(pn);
    }
    probe_set_free(pe), probe_set_free(pa), probe_set_free(pb);
    return check_exit_code();
}
