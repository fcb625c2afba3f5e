/* ./train: the phaselab program.
 *   ./train CONFIG.ini [section.key=value ...]          train (resumes an existing run)
 *   ./train --dry-run CONFIG.ini [overrides]            validate and print the model summary
 *   ./train --eval CHECKPOINT_DIR [--probe FILE] [--decode] [overrides]   evaluate a checkpoint
 *   ./train --generate (CHECKPOINT_DIR | CONFIG.ini) (--prompt-ids FILE | --prompt TEXT --tokenizer SPEC) [...]
 *   ./train --make-synthetic DIR [--seq-len T] [--train-rows N] [--val-rows N] [--seed S]
 *   ./train --bench [--threads N] [--steps N]           CPU training-step benchmark
 *   ./train --help                                      every config key with its default */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/loader.h"
#include "data/probe.h"
#include "data/synth.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/errors.h"
#include "model/model.h"
#include "trainer/bench.h"
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "trainer/cache_report.h"
#include "trainer/evaluate.h"
#include "trainer/generate.h"
#include "trainer/probe_eval.h"
#include "trainer/summary.h"
#include "trainer/trainer.h"

#ifndef PHASELAB_VERSION
#define PHASELAB_VERSION "unknown"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: ./train CONFIG.ini [section.key=value ...]        train (or resume) a run\n"
            "       ./train --dry-run CONFIG.ini [overrides]          validate, print the model summary\n"
            "       ./train --eval CHECKPOINT_DIR [--probe FILE] [--decode] [overrides]\n"
            "                                                         evaluate a checkpoint (probe, validation);\n"
            "                                                         --decode: probe through the incremental KV cache\n"
            "       ./train --generate (CHECKPOINT_DIR | CONFIG.ini) (--prompt-ids FILE | --prompt TEXT --tokenizer SPEC)\n"
            "               [--max-new N] [--temperature T] [--top-k K] [--seed S] [--context N] [--ignore-eot]\n"
            "               [--stepwise-prefill]\n"
            "                                                         generate through the KV cache (streamed)\n"
            "       ./train --make-synthetic DIR [--seq-len T] [--train-rows N] [--val-rows N] [--seed S]\n"
            "                                                         write the synthetic key/value corpus\n"
            "       ./train --bench [--threads N] [--steps N]         CPU training-step benchmark\n"
            "       ./train --help                                    this text and every config key\n");
}

static void print_help(void) {
    usage(stdout);
    printf("\nConfig keys (INI sections; override any with section.key=value):\n");
    int n;
    const ConfigKeyInfo *k = config_keys(&n);
    const char *section = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(section, k[i].section)) { section = k[i].section; printf("\n[%s]\n", section); }
        char kd[96];
        snprintf(kd, sizeof kd, "%s = %s", k[i].key, k[i].def[0] ? k[i].def : "\"\"");
        printf("  %-34s %s\n", kd, k[i].help);
    }
}

static int load_config(Config *cfg, const char *path, int argc, char **argv) {
    char err[ERR_LEN];
    if (config_load(cfg, path, argc, argv, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 2;
    }
    return 0;
}

static int parse_long(const char *opt, const char *s, long lo, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo) {
        fprintf(stderr, "phaselab: %s: '%s' is not an integer >= %ld\n", opt, s, lo);
        return 2;
    }
    *out = v;
    return 0;
}

static int cmd_make_synthetic(int argc, char **argv) {
    if (argc < 1) { usage(stderr); return 2; }
    const char *dir = argv[0];
    long T = 256, train_rows = 20000, val_rows = 256, seed = 1234;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) { fprintf(stderr, "phaselab: %s needs a value\n", argv[i]); return 2; }
        const char *o = argv[i], *v = argv[++i];
        int rc = !strcmp(o, "--seq-len") ? parse_long(o, v, 1, &T)
               : !strcmp(o, "--train-rows") ? parse_long(o, v, 1, &train_rows)
               : !strcmp(o, "--val-rows") ? parse_long(o, v, 1, &val_rows)
               : !strcmp(o, "--seed") ? parse_long(o, v, 0, &seed)
               : (fprintf(stderr, "phaselab: unknown option %s\n", o), 2);
        if (rc) return rc;
    }
    char err[ERR_LEN];
    if (synth_write_corpus(dir, (int)T, train_rows, val_rows, (uint64_t)seed, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    printf("synthetic corpus: %s/train_000.bin (%ld rows) and %s/val_000.bin (%ld rows) of %ld tokens, vocabulary %d\n",
           dir, train_rows, dir, val_rows, T, SYNTH_VOCAB);
    return 0;
}

static int cmd_eval(int argc, char **argv) {
    if (argc < 1) { usage(stderr); return 2; }
    const char *ckpt = argv[0];
    const char *probe_path = NULL;
    int decode = 0;
    char *overrides[64];
    int n_over = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe") && i + 1 < argc) probe_path = argv[++i];
        else if (!strcmp(argv[i], "--decode")) decode = 1;
        else if (n_over < 64) overrides[n_over++] = argv[i];
    }
    char path[4600], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/config.ini", ckpt);
    Config cfg;
    int rc = load_config(&cfg, path, n_over, overrides);
    if (rc) return rc;
    if (!probe_path && cfg.eval.probe[0]) probe_path = cfg.eval.probe;
    const Backend *be = backend_select(cfg.run.device, cfg.run.threads, 0, err);
    if (!be) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
    int T = cfg.data.seq_len, micro = cfg.train.micro_batch;
    Model *m = model_create(&cfg.model, be, micro, T, err);
    if (!m) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    TrainState st;
    if (checkpoint_read_state(ckpt, &st, err) || checkpoint_load(ckpt, m, NULL, &st, err)) {
        fprintf(stderr, "phaselab: %s\n", err);
        return 1;
    }
    printf("checkpoint %s: step %ld, %ld tokens\n", ckpt, st.step, st.tokens);
    Comm comm = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    if (cfg.data.val[0]) {
        ValSet *val;
        if (val_set_open(&val, cfg.data.val, T, (uint32_t)cfg.model.vocab_size, cfg.eval.val_tokens / T, err)) {
            fprintf(stderr, "phaselab: validation skipped: %s\n", err);
        } else {
            EvalResult r;
            if (evaluate_validation(m, &cfg.model, val, T, micro, cfg.eval.residues, &comm, 1, &r, err)) {
                fprintf(stderr, "phaselab: %s\n", err);
                return 1;
            }
            printf("validation loss %.4f over %ld windows; by residue t mod %d:\n", r.loss, r.windows, r.residues);
            for (int i = 0; i < r.residues; i++) printf("  r=%2d  %.4f\n", i, r.loss_by_residue[i]);
            eval_result_free(&r);
            val_set_close(val);
        }
    }
    if (probe_path) {
        ProbeSet *ps;
        if (probe_set_load(&ps, probe_path, (uint32_t)cfg.model.vocab_size, T, err)) {
            fprintf(stderr, "phaselab: %s\n", err);
            return 1;
        }
        ProbeResult pr;
        double tps = 0;
        if (decode ? probe_evaluate_decode(m, ps, &pr, &tps, err) : probe_evaluate(m, ps, T, micro, &pr, err)) {
            fprintf(stderr, "phaselab: %s\n", err);
            return 1;
        }
        if (decode) printf("lookup probe %s through incremental decoding (KV cache, %.0f tokens/s):\n", probe_path, tps);
        else printf("lookup probe %s:\n", probe_path);
        probe_print_table(stdout, &pr);
        probe_set_free(ps);
    }
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) { print_help(); return 0; }
    if (!strcmp(cmd, "--version")) { printf("phaselab %s\n", PHASELAB_VERSION); return 0; }
    if (!strcmp(cmd, "--make-synthetic")) return cmd_make_synthetic(argc - 2, argv + 2);
    if (!strcmp(cmd, "--eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "--generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "--bench")) {
        long threads = 2, steps = 10;
        for (int i = 2; i < argc; i += 2) {
            if (i + 1 >= argc) { fprintf(stderr, "phaselab: %s needs a value\n", argv[i]); return 2; }
            int rc = !strcmp(argv[i], "--threads") ? parse_long(argv[i], argv[i + 1], 1, &threads)
                   : !strcmp(argv[i], "--steps") ? parse_long(argv[i], argv[i + 1], 1, &steps)
                   : (fprintf(stderr, "phaselab: unknown option %s\n", argv[i]), 2);
            if (rc) return rc;
        }
        return run_bench((int)threads, (int)steps);
    }
    if (!strcmp(cmd, "--dry-run")) {
        if (argc < 3) { usage(stderr); return 2; }
        Config cfg;
        int rc = load_config(&cfg, argv[2], argc - 3, argv + 3);
        if (rc) return rc;
        char err[ERR_LEN];
        printf("config %s: valid\n", argv[2]);
        if (print_model_summary(stdout, &cfg, 1, err)) { fprintf(stderr, "phaselab: %s\n", err); return 2; }
        long ctx[] = {cfg.data.seq_len, 4096, 32768, 131072};
        int n_ctx = cfg.data.seq_len == 4096 || cfg.data.seq_len == 32768 || cfg.data.seq_len == 131072 ? 3 : 4;
        printf("\n");
        print_cache_report(stdout, &cfg.model, n_ctx == 4 ? ctx : ctx + 1, n_ctx, 2);
        return 0;
    }
    if (cmd[0] == '-') { fprintf(stderr, "phaselab: unknown option %s\n", cmd); usage(stderr); return 2; }
    Config cfg;
    int rc = load_config(&cfg, argv[1], argc - 2, argv + 2);
    if (rc) return rc;
    Comm comm;
    char err[ERR_LEN];
    if (comm_init(&comm, &argc, &argv, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
    rc = train_main(&cfg, &comm, PHASELAB_VERSION);
    if (rc && comm.world > 1) comm_abort(&comm, rc);
    comm_finalize(&comm);
    return rc;
}
