/* Evaluation at the prompt's own length (issue 18): a batch of prompts runs at their length L
 * (model_set_seq_len) instead of being padded to the model's T. The model is causal (a query at
 * t sees compressed entries whose window ended at or before t and raw tokens s <= t), so for
 * every position t < L
 *     forward(tokens[0..L-1])[t] == forward(tokens[0..L-1] ++ zeros[L..T-1])[t].
 * Checked on tiny models trained for TRAIN_STEPS steps on the synthetic key/value corpus
 * (data/synth.h), each created with T > L (512 or 1024, the prompts 256 tokens), for full
 * attention and compressed W8/S8 (local window), W8/S4, W8/S8 tail and a staggered vector-gate
 * variant:
 *   - probe_evaluate at the prompt's length gives the same correct/total counts per protocol
 *     (pp, ip) and residue as the padded path (probe_evaluate_padded), lookup and needle;
 *   - the final-norm output (the classifier's only input, so the logits) at every t < L and
 *     the per-token losses of model_forward (the filler sweep's path) are equal within fp32
 *     rounding (see below; the count of values that are not bitwise equal is printed), and the
 *     argmax tokens are equal;
 *   - a shorter length allocates nothing (the backend's alloc is counted) and the model's T
 *     is restored after the probe evaluation (validation keeps T).
 * The probe sets come from tools/make-probe (2 prompts per residue and protocol).
 * Scratch: build/scratch/test_eval_length/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/probe.h"
#include "data/synth.h"
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "trainer/comm.h"
#include "trainer/optimizer.h"
#include "trainer/probe_eval.h"

#define DIR "build/scratch/test_eval_length"
#define L_PROMPT 256
#define MICRO 8
#define TRAIN_STEPS 30

static Backend counted;          /* the CPU backend with its alloc counted */
static long n_allocs;
static void *(*cpu_alloc)(BackendCtx *, size_t);
static void *counting_alloc(BackendCtx *ctx, size_t bytes) { n_allocs++; return cpu_alloc(ctx, bytes); }

typedef struct { const char *name; int T; void (*apply)(ModelConfig *c); } Variant;
static void v_full(ModelConfig *c) { c->attention = ATTN_FULL; }
static void v_w8s8(ModelConfig *c) { c->attention = ATTN_COMPRESSED; }
static void v_w8s4(ModelConfig *c) { c->attention = ATTN_COMPRESSED; c->stride = 4; }
static void v_tail(ModelConfig *c) { c->attention = ATTN_COMPRESSED; c->local = LOCAL_TAIL; }
static void v_staggered(ModelConfig *c) {
    c->attention = ATTN_COMPRESSED; c->grid = GRID_STAGGERED; c->gate = GATE_VECTOR; c->post_norm = 1;
}
static const Variant variants[] = {
    {"full_T512", 512, v_full}, {"w8s8_T1024", 1024, v_w8s8}, {"w8s4_T512", 512, v_w8s4},
    {"w8s8_tail_T512", 512, v_tail}, {"w8s8_staggered_vector_postnorm_T512", 512, v_staggered},
};

static ModelConfig base_config(void) {
    ModelConfig c = tu_tiny_config();
    c.d_model = 64; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16; c.d_ff = 128;
    c.vocab_size = SYNTH_VOCAB; c.rope_dims = 16; c.window = 8; c.stride = 8; c.n_local = 16;
    return c;
}

/* A few AdamW steps on rows of the synthetic corpus at L_PROMPT tokens (targets: the next token). */
static int train_a_little(Model *m, int steps, char *err) {
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    Optimizer opt;
    if (optimizer_init(&opt, model_backend(m), &comm, model_tensors(m), 0.9, 0.95, 1e-8, 0.1, 1.0, err)) return -1;
    SynthParams sp;
    synth_default_params(&sp);
    uint32_t row[L_PROMPT + 1];
    int32_t *tok = malloc(sizeof(int32_t) * MICRO * L_PROMPT), *tgt = malloc(sizeof(int32_t) * MICRO * L_PROMPT);
    int rc = model_set_seq_len(m, L_PROMPT, err);
    for (int s = 0; s < steps && !rc; s++) {
        for (int b = 0; b < MICRO; b++) {
            synth_row(&sp, L_PROMPT + 1, 7, SYNTH_STREAM_TRAIN, (uint64_t)s * MICRO + b, row);
            for (int t = 0; t < L_PROMPT; t++) tok[b * L_PROMPT + t] = (int32_t)row[t], tgt[b * L_PROMPT + t] = (int32_t)row[t + 1];
        }
        model_zero_grads(m);
        model_forward_backward(m, tok, tgt, MICRO, 1.0 / (MICRO * L_PROMPT), NULL);
        double gn;
        optimizer_step(&opt, m, 3e-3, 1, &gn);
    }
    free(tok); free(tgt);
    optimizer_free(&opt);
    return rc;
}

static int same_counts(const ProbeResult *a, const ProbeResult *b) {
    return !memcmp(a->correct, b->correct, sizeof a->correct) && !memcmp(a->total, b->total, sizeof a->total);
}
static long sum_of(const long (*x)[PROBE_MAX_RESIDUES], int p) {
    long s = 0;
    for (int r = 0; r < PROBE_MAX_RESIDUES; r++) s += x[p][r];
    return s;
}

/* Probe counts at the prompt's length against the padded path. */
static void check_probe(Model *m, const ProbeSet *ps, int T, const char *name, const char *what) {
    char err[ERR_LEN] = "", label[256];
    ProbeResult at_len, padded;
    long allocs = n_allocs;
    int rc = probe_evaluate(m, ps, T, MICRO, &at_len, err);
    long new_allocs = n_allocs - allocs;
    rc |= probe_evaluate_padded(m, ps, T, MICRO, &padded, err);
    printf("# %s %s at the prompt's length: pp %ld/%ld, ip %ld/%ld correct\n", name, what, sum_of(at_len.correct, PROBE_PP),
           sum_of(at_len.total, PROBE_PP), sum_of(at_len.correct, PROBE_IP), sum_of(at_len.total, PROBE_IP));
    snprintf(label, sizeof label, "%s %s: correct/total per protocol and residue at the prompt's length == padded to T", name,
             what);
    check(rc == 0 && same_counts(&at_len, &padded) && sum_of(at_len.total, PROBE_PP) > 0 && sum_of(at_len.total, PROBE_IP) > 0,
          label, "rc %d %s; padded pp %ld/%ld ip %ld/%ld", rc, err, sum_of(padded.correct, PROBE_PP),
          sum_of(padded.total, PROBE_PP), sum_of(padded.correct, PROBE_IP), sum_of(padded.total, PROBE_IP));
    snprintf(label, sizeof label, "%s %s: no allocation at the shorter length, T restored", name, what);
    check(new_allocs == 0 && model_seq_len(m) == T, label, "%ld allocations, T now %d", new_allocs, model_seq_len(m));
}

/* Final-norm output, argmax and per-token losses of MICRO prompts at L_PROMPT against padded. */
static void check_activations(Model *m, const ProbeSet *ps, int T, const char *name) {
    const ModelConfig *c = model_config(m);
    const int D = c->d_model, n = probe_set_count(ps);
    char err[ERR_LEN] = "", label[256];
    int32_t *pad = calloc((size_t)MICRO * T, sizeof(int32_t)), *cut = calloc((size_t)MICRO * L_PROMPT, sizeof(int32_t));
    int32_t *tg_pad = malloc(sizeof(int32_t) * MICRO * T), *tg_cut = malloc(sizeof(int32_t) * MICRO * L_PROMPT);
    float *h_pad = malloc(sizeof(float) * (size_t)MICRO * T * D), *h_cut = malloc(sizeof(float) * (size_t)MICRO * L_PROMPT * D);
    float *l_pad = malloc(sizeof(float) * (size_t)MICRO * T), *l_cut = malloc(sizeof(float) * (size_t)MICRO * L_PROMPT);
    int pos[MICRO];
    for (int i = 0; i < MICRO * T; i++) tg_pad[i] = -1;
    for (int b = 0; b < MICRO; b++) {        /* half pp, half ip prompts */
        ProbePrompt pr;
        probe_set_prompt(ps, b < MICRO / 2 ? b : n - 1 - b, &pr);
        memcpy(pad + (size_t)b * T, pr.tokens, sizeof(int32_t) * pr.length);
        memcpy(cut + (size_t)b * L_PROMPT, pr.tokens, sizeof(int32_t) * pr.length);
        for (int t = 0; t < L_PROMPT; t++) {
            int32_t y = t + 1 < pr.length ? pr.tokens[t + 1] : pr.answer;
            tg_pad[(size_t)b * T + t] = y;
            tg_cut[(size_t)b * L_PROMPT + t] = y;
        }
        pos[b] = pr.length - 1;
    }
    int32_t am_pad[MICRO], am_cut[MICRO];
    int rc = model_set_seq_len(m, T, err);
    model_debug_final_hidden(m, pad, MICRO, h_pad);
    model_argmax_at(m, pad, MICRO, pos, am_pad);
    double loss_pad = model_forward(m, pad, tg_pad, MICRO, l_pad);
    long allocs = n_allocs;
    rc |= model_set_seq_len(m, L_PROMPT, err);
    model_debug_final_hidden(m, cut, MICRO, h_cut);
    model_argmax_at(m, cut, MICRO, pos, am_cut);
    double loss_cut = model_forward(m, cut, tg_cut, MICRO, l_cut);
    long new_allocs = n_allocs - allocs;
    rc |= model_set_seq_len(m, T, err);
    /* Within fp32 rounding (|diff| <= 1e-5 (1 + |x|)), with the same argmax, not bitwise: the
     * BLAS may round row r of a product differently when the matrix has another number of rows
     * (B*L against B*T in every linear layer; nW(L) against nW(T) windows in the compressor).
     * OpenBLAS does on AMD Zen even single-threaded (an sgemm of 4096 x 64 x 192 and the same
     * sgemm of its first 2048 rows differ in 20346 of 393216 values), and on AVX-512 machines
     * through its small-matrix kernels. A causality error (a query that sees a later token)
     * changes values by far more. */
    long hid_diff = 0, hid_far = 0, loss_diff = 0, loss_far = 0;
    double max_abs = 0, max_loss = 0;
    for (int b = 0; b < MICRO; b++) {
        const float *a = h_pad + (size_t)b * T * D, *z = h_cut + (size_t)b * L_PROMPT * D;
        for (size_t i = 0; i < (size_t)L_PROMPT * D; i++)
            if (memcmp(&a[i], &z[i], sizeof(float))) {
                double e = fabs((double)a[i] - z[i]);
                hid_diff++;
                hid_far += !(e <= 1e-5 * (1.0 + fabs(a[i])));
                if (e > max_abs) max_abs = e;
            }
        for (int t = 0; t < L_PROMPT; t++) {
            float x = l_pad[(size_t)b * T + t], y = l_cut[(size_t)b * L_PROMPT + t];
            if (memcmp(&x, &y, sizeof x)) {
                double e = fabs((double)x - y);
                loss_diff++;
                loss_far += !(e <= 1e-5 * (1.0 + fabs(x)));
                if (e > max_loss) max_loss = e;
            }
        }
    }
    printf("# %s: final-norm output at t < %d: %ld of %d values differ from padded T=%d (max |diff| %.3g); "
           "losses: %ld of %d differ (max %.3g)\n", name, L_PROMPT, hid_diff, MICRO * L_PROMPT * D, T, max_abs, loss_diff,
           MICRO * L_PROMPT, max_loss);
    snprintf(label, sizeof label, "%s: final-norm output (the logits' input) at t < L within fp32 rounding of padded", name);
    check(rc == 0 && hid_far == 0, label, "rc %d %s; %ld values differ (%ld beyond rounding), max |diff| %.3g",
          rc, err, hid_diff, hid_far, max_abs);
    snprintf(label, sizeof label, "%s: argmax at the query equal, per-token losses within fp32 rounding", name);
    check(!memcmp(am_pad, am_cut, sizeof am_pad) && loss_far == 0, label,
          "%ld losses differ (%ld beyond rounding), mean %.9g vs %.9g", loss_diff, loss_far, loss_pad, loss_cut);
    snprintf(label, sizeof label, "%s: forward passes at the shorter length allocate nothing", name);
    check(new_allocs == 0, label, "%ld allocations", new_allocs);
    free(pad); free(cut); free(tg_pad); free(tg_cut); free(h_pad); free(h_cut); free(l_pad); free(l_cut);
}

int main(void) {
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
    const char *lookup = DIR "/lookup.bin", *needle = DIR "/needle.bin";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 tools/make-probe --synthetic --quiet --per-residue 2 --max-len %d --out %s >/dev/null",
             L_PROMPT, lookup);
    int rc1 = system(cmd);
    snprintf(cmd, sizeof cmd, "python3 tools/make-probe --layout needle --synthetic --quiet --per-residue 2 --max-len %d "
             "--out %s >/dev/null", L_PROMPT, needle);
    int rc2 = system(cmd);
    ProbeSet *ps = NULL, *pn = NULL;
    char err[ERR_LEN] = "";
    if (!check(rc1 == 0 && rc2 == 0 && probe_set_load(&ps, lookup, SYNTH_VOCAB, L_PROMPT, err) == 0 &&
                   probe_set_load(&pn, needle, SYNTH_VOCAB, L_PROMPT, err) == 0,
               "tools/make-probe builds the lookup and needle sets", "make-probe %d %d; %s", rc1, rc2, err))
        return 1;
    check(probe_set_max_length(ps) == L_PROMPT && probe_set_scored_tokens(pn) > 1, "probe sets: 256-token lookup, needle",
          "lookup %d tokens, needle scores %d", probe_set_max_length(ps), probe_set_scored_tokens(pn));
    counted = *backend_cpu(1);
    cpu_alloc = counted.alloc;
    counted.alloc = counting_alloc;
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        ModelConfig c = base_config();
        variants[v].apply(&c);
        Model *m = model_create(&c, &counted, MICRO, variants[v].T, err);
        char label[256];
        snprintf(label, sizeof label, "%s: created", variants[v].name);
        if (!check(m != NULL, label, "model_create: %s", err)) continue;
        model_init_params(m, 3 + v);
        snprintf(label, sizeof label, "%s: trained %d steps", variants[v].name, TRAIN_STEPS);
        if (!check(train_a_little(m, TRAIN_STEPS, err) == 0, label, "training: %s", err)) { model_free(m); continue; }
        char e2[ERR_LEN] = "";
        check(model_set_seq_len(m, variants[v].T + 1, e2) != 0 && strstr(e2, "expected 1 <= T"),
              "model_set_seq_len refuses T above the model's", "%s", e2);
        model_set_seq_len(m, variants[v].T, err);
        check_probe(m, ps, variants[v].T, variants[v].name, "lookup");
        if (v == 1 || v == 3) check_probe(m, pn, variants[v].T, variants[v].name, "needle");
        check_activations(m, ps, variants[v].T, variants[v].name);
        model_free(m);
    }
    probe_set_free(ps);
    probe_set_free(pn);
    return check_failures ? 1 : 0;
}
