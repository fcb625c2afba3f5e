/* ./train: the phaselab program.
 *   ./train CONFIG.ini [section.key=value ...]          train (resumes an existing run)
 *   ./train --dry-run CONFIG.ini [overrides]            validate and print the model summary
 *   ./train --eval CHECKPOINT_DIR [--probe FILE] [overrides]   evaluate a checkpoint
 *   ./train --make-synthetic DIR [--seq-len T] [--train-rows N] [--val-rows N] [--seed S]
 *   ./train --bench [--threads N] [--steps N]           CPU training-step benchmark
 *   ./train --help                                      every config key with its default */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
#include "trainer/evaluate.h"
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
            "       ./train --eval CHECKPOINT_DIR [--probe FILE] [overrides]\n"
            "                                                         evaluate a checkpoint (probe, validation)\n"
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

/* A relative path of a checkpoint's config.ini (data.val, eval.probe) is relative to the
 * directory the run was started from, recorded in state.json (working_dir); a value given on
 * this command line (an override, or --probe) is relative to the current directory. Fills
 * out with the path to use; says in one line what it resolved. */
static void resolve_run_path(const char *key, const char *value, const char *from_checkpoint, const char *run_dir,
                             char *out, size_t len) {
    snprintf(out, len, "%s", value);
    if (!value[0] || value[0] == '/' || strcmp(value, from_checkpoint) != 0 || !run_dir[0]) return;
    snprintf(out, len, "%s/%s", run_dir, value);
    printf("%s = %s (relative to the run's directory %s)\n", key, value, run_dir);
}

/* Does the glob match at least one file? */
static int glob_matches(const char *pattern) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    int n = rc == 0 ? (int)g.gl_pathc : 0;
    if (rc == 0) globfree(&g);
    return n > 0;
}

static int cmd_eval(int argc, char **argv) {
    if (argc < 1) { usage(stderr); return 2; }
    const char *ckpt = argv[0];
    const char *probe_arg = NULL;
    char *overrides[64];
    int n_over = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe") && i + 1 < argc) probe_arg = argv[++i];
        else if (n_over < 64) overrides[n_over++] = argv[i];
        else { fprintf(stderr, "phaselab: --eval: more than 64 overrides\n"); return 2; }
    }
    char path[4600], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/config.ini", ckpt);
    Config cfg, saved;
    int rc = load_config(&saved, path, 0, NULL);
    if (rc) return rc;
    rc = load_config(&cfg, path, n_over, overrides);
    if (rc) return rc;
    char run_dir[4096], val_glob[4200], probe_file[4200];
    int recorded = checkpoint_working_dir(ckpt, run_dir, sizeof run_dir);
    resolve_run_path("data.val", cfg.data.val, saved.data.val, run_dir, val_glob, sizeof val_glob);
    if (probe_arg) snprintf(probe_file, sizeof probe_file, "%s", probe_arg);
    else resolve_run_path("eval.probe", cfg.eval.probe, saved.eval.probe, run_dir, probe_file, sizeof probe_file);
    if (val_glob[0] && !glob_matches(val_glob)) {
        fprintf(stderr, "phaselab: %s: data.val = '%s' matches no file (%s); name the validation shards with "
                        "data.val=GLOB (relative to the current directory)\n",
                path, cfg.data.val,
                !strcmp(cfg.data.val, saved.data.val) && recorded && cfg.data.val[0] != '/'
                    ? "looked relative to the run's directory recorded in state.json"
                    : recorded ? "as given" : "this checkpoint records no run directory; looked relative to the current directory");
        return 2;
    }
    if (probe_file[0] && access(probe_file, R_OK) != 0) {
        fprintf(stderr, "phaselab: %s: eval.probe = '%s' cannot be read (%s); name the probe set with --probe FILE\n",
                path, probe_file, strerror(errno));
        return 2;
    }
    if (!val_glob[0] && !probe_file[0]) {
        fprintf(stderr, "phaselab: %s: nothing to evaluate: the checkpoint's config has no data.val and no "
                        "eval.probe; give data.val=GLOB or --probe FILE\n", path);
        return 2;
    }
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
    int evaluated = 0;
    if (val_glob[0]) {
        ValSet *val;
        if (val_set_open(&val, val_glob, T, (uint32_t)cfg.model.vocab_size, cfg.eval.val_tokens / T, err)) {
            fprintf(stderr, "phaselab: validation: %s (name other shards with data.val=GLOB)\n", err);
            return 1;
        }
        EvalResult r;
        if (evaluate_validation(m, &cfg.model, val, T, micro, cfg.eval.residues, &comm, 1, &r, err)) {
            fprintf(stderr, "phaselab: %s\n", err);
            return 1;
        }
        if (r.windows < 1) {
            fprintf(stderr, "phaselab: %s: no validation window of %d tokens evaluated\n", val_glob, T + 1);
            return 1;
        }
        printf("validation loss %.4f over %ld windows; by residue t mod %d:\n", r.loss, r.windows, r.residues);
        for (int i = 0; i < r.residues; i++) printf("  r=%2d  %.4f\n", i, r.loss_by_residue[i]);
        eval_result_free(&r);
        val_set_close(val);
        evaluated++;
    }
    if (probe_file[0]) {
        ProbeSet *ps;
        if (probe_set_load(&ps, probe_file, (uint32_t)cfg.model.vocab_size, T, err)) {
            fprintf(stderr, "phaselab: %s\n", err);
            return 1;
        }
        ProbeResult pr;
        if (probe_evaluate(m, ps, T, micro, &pr, err)) { fprintf(stderr, "phaselab: %s\n", err); return 1; }
        printf("lookup probe %s:\n", probe_file);
        probe_print_table(stdout, &pr);
        probe_set_free(ps);
        evaluated++;
    }
    model_free(m);
    if (!evaluated) {
        fprintf(stderr, "phaselab: %s: nothing evaluated\n", ckpt);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) { print_help(); return 0; }
    if (!strcmp(cmd, "--version")) { printf("phaselab %s\n", PHASELAB_VERSION); return 0; }
    if (!strcmp(cmd, "--make-synthetic")) return cmd_make_synthetic(argc - 2, argv + 2);
    if (!strcmp(cmd, "--eval")) return cmd_eval(argc - 2, argv + 2);
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
