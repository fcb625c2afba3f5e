/* Tests of trainer/run_config.c: defaults (Qwen3-0.6B shape, docs/spec.md §2 variant defaults),
 * INI loading, command-line overrides, every validation error (file, line and key named in
 * the message), the config_write / config_load round trip and the --help key table.
 * Scratch INI files live under build/scratch/test_config/. */
#include "trainer/run_config.h"
#include "common/errors.h"
#include "tests/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/scratch/test_config"

static void mkdirs(void) {
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
}

/* Writes text to DIR/name.ini; returns the path (static buffer per call site is not needed:
 * callers copy it). */
static const char *write_ini(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, DIR "/%s.ini", name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    size_t got = fread(s, 1, n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* Config equality ignoring the source path. */
static int same_config(const Config *a, const Config *b) {
    Config x = *a, y = *b;
    memset(x.source, 0, sizeof x.source);
    memset(y.source, 0, sizeof y.source);
    return memcmp(&x, &y, sizeof x) == 0;
}

static void test_defaults(void) {
    Config c;
    memset(&c, 0x5a, sizeof c);
    config_defaults(&c);
    const ModelConfig *m = &c.model;
    check(m->d_model == 1024 && m->n_layers == 28 && m->n_heads == 16 && m->n_kv_heads == 8 &&
              m->head_dim == 128 && m->d_ff == 3072 && m->vocab_size == 151936,
          "defaults: Qwen3-0.6B shape", "got D %d L %d H %d G %d d %d ff %d V %d", m->d_model, m->n_layers,
          m->n_heads, m->n_kv_heads, m->head_dim, m->d_ff, m->vocab_size);
    check(m->rope_theta == 1e6 && m->norm_eps == 1e-6 && m->tie_embeddings == 1 && m->qk_norm == 1,
          "defaults: rope_theta 1e6, eps 1e-6, tied, qk_norm", "theta %g eps %g tie %d qk %d", m->rope_theta,
          m->norm_eps, m->tie_embeddings, m->qk_norm);
    check(m->attention == ATTN_FULL && m->window == 8 && m->stride == 8 && m->gate == GATE_SCALAR &&
              m->gate_bias == 1 && m->kv_tied == 0 && m->post_norm == 0 && m->rope_dims == 128 &&
              m->local == LOCAL_WINDOW && m->n_local == 16 && m->compressor == COMPRESSOR_PAPER &&
              m->attn_sink == 0,
          "defaults: docs/spec.md §2 variants (rope_dims resolves to head_dim)",
          "attn %d W %d S %d gate %d bias %d tied %d post %d r %d local %d nl %d comp %d sink %d", m->attention,
          m->window, m->stride, m->gate, m->gate_bias, m->kv_tied, m->post_norm, m->rope_dims, m->local,
          m->n_local, m->compressor, m->attn_sink);
    check(!strcmp(c.data.train, "") && !strcmp(c.data.val, "") && c.data.seq_len == 4096, "defaults: [data]",
          "train '%s' val '%s' T %d", c.data.train, c.data.val, c.data.seq_len);
    const TrainConfig *t = &c.train;
    check(t->steps == 1000 && t->batch_tokens == 524288 && t->micro_batch == 8 && t->lr == 3e-4 &&
              t->min_lr == 3e-5 && t->warmup_steps == 100 && t->weight_decay == 0.1 && t->grad_clip == 1.0 &&
              t->beta1 == 0.9 && t->beta2 == 0.95 && t->eps == 1e-8 && t->seed == 42 && t->max_bad_steps == 5,
          "defaults: [train]", "steps %ld bt %ld mb %d lr %g min %g wu %ld wd %g clip %g b1 %g b2 %g eps %g seed %llu bad %d",
          t->steps, t->batch_tokens, t->micro_batch, t->lr, t->min_lr, t->warmup_steps, t->weight_decay,
          t->grad_clip, t->beta1, t->beta2, t->eps, (unsigned long long)t->seed, t->max_bad_steps);
    check(c.eval.every == 0 && c.eval.val_tokens == 1048576 && c.eval.residues == 24 && !strcmp(c.eval.probe, "") &&
              c.checkpoint.every == 0 && c.checkpoint.keep == 2,
          "defaults: [eval] [checkpoint]", "every %ld vt %ld P %d probe '%s' ck %ld keep %d", c.eval.every,
          c.eval.val_tokens, c.eval.residues, c.eval.probe, c.checkpoint.every, c.checkpoint.keep);
    check(!strcmp(c.run.name, "run") && !strcmp(c.run.dir, "runs") && !strcmp(c.run.device, "auto") &&
              c.run.threads == 0 && c.run.log_every == 10 && c.source[0] == 0,
          "defaults: [run]", "name '%s' dir '%s' device '%s' threads %d log %ld source '%s'", c.run.name,
          c.run.dir, c.run.device, c.run.threads, c.run.log_every, c.source);

    Config l;
    char err[ERR_LEN];
    int rc = config_load(&l, NULL, 0, NULL, err);
    check(rc == 0 && same_config(&c, &l), "load without file = defaults", "rc %d: %s", rc, err);
}

static void test_file_and_overrides(void) {
    char err[ERR_LEN];
    const char *path = write_ini("small",
                                 "# a comment\n"
                                 "; another\n"
                                 "[model]\n"
                                 "d_model = 256   ; inline comment\n"
                                 "n_layers=4\n"
                                 "attention = compressed\n"
                                 "window = 12\n"
                                 "stride = 6\n"
                                 "gate = vector\n"
                                 "kv_tied = yes\n"
                                 "head_dim = 64\n"
                                 "\n"
                                 "[data]\n"
                                 "seq_len = 512\n"
                                 "train = data/x/*.bin\n"
                                 "[train]\n"
                                 "batch_tokens = 8192\n"
                                 "micro_batch = 4\n"
                                 "lr = 1e-3\n"
                                 "seed = 18446744073709551615\n"
                                 "[run]\n"
                                 "device = cpu\n");
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    Config c;
    int rc = config_load(&c, p, 0, NULL, err);
    check(rc == 0, "file: loads", "%s", err);
    check(c.model.d_model == 256 && c.model.n_layers == 4 && c.model.attention == ATTN_COMPRESSED &&
              c.model.window == 12 && c.model.stride == 6 && c.model.gate == GATE_VECTOR && c.model.kv_tied == 1 &&
              c.model.head_dim == 64 && c.model.rope_dims == 64 && c.model.n_heads == 16,
          "file: overrides defaults (rope_dims follows head_dim)", "D %d L %d attn %d W %d S %d gate %d tied %d d %d r %d H %d",
          c.model.d_model, c.model.n_layers, c.model.attention, c.model.window, c.model.stride, c.model.gate,
          c.model.kv_tied, c.model.head_dim, c.model.rope_dims, c.model.n_heads);
    check(c.data.seq_len == 512 && !strcmp(c.data.train, "data/x/*.bin") && c.train.batch_tokens == 8192 &&
              c.train.micro_batch == 4 && c.train.lr == 1e-3 && c.train.seed == UINT64_MAX &&
              !strcmp(c.run.device, "cpu"),
          "file: other sections", "T %d train '%s' bt %ld mb %d lr %g seed %llu dev %s", c.data.seq_len, c.data.train,
          c.train.batch_tokens, c.train.micro_batch, c.train.lr, (unsigned long long)c.train.seed, c.run.device);
    check(!strcmp(c.run.name, "small") && !strcmp(c.source, p), "file: run.name = file base name without .ini",
          "name '%s' source '%s'", c.run.name, c.source);

    char *ov[] = {"model.d_model=512", "train.lr = 2e-3", "run.name=exp1", "model.rope_dims=32", "model.gate=uniform"};
    rc = config_load(&c, p, 5, ov, err);
    check(rc == 0 && c.model.d_model == 512 && c.train.lr == 2e-3 && !strcmp(c.run.name, "exp1") &&
              c.model.rope_dims == 32 && c.model.gate == GATE_UNIFORM && c.model.n_layers == 4,
          "overrides win over the file", "rc %d (%s) D %d lr %g name %s r %d gate %d", rc, err, c.model.d_model,
          c.train.lr, c.run.name, c.model.rope_dims, c.model.gate);

    /* run.name explicitly in the file wins over the file name; a file not ending in .ini keeps its name */
    path = write_ini("named", "[run]\nname = my_run\n");
    rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0 && !strcmp(c.run.name, "my_run"), "file: explicit run.name", "rc %d name '%s'", rc, c.run.name);
    FILE *f = fopen(DIR "/plain.cfg", "w");
    fputs("[model]\nn_layers = 2\n", f);
    fclose(f);
    rc = config_load(&c, DIR "/plain.cfg", 0, NULL, err);
    check(rc == 0 && !strcmp(c.run.name, "plain.cfg"), "file: run.name of a non-.ini file", "rc %d name '%s'", rc,
          c.run.name);

    /* compressed-only keys are not validated under full attention */
    path = write_ini("full_ignores", "[model]\nattention = full\nwindow = 0\nstride = 0\nn_local = 0\n");
    rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0, "full attention: compressed-only keys not validated", "%s", err);
    /* boundary values that are allowed */
    path = write_ini("allowed", "[model]\nrope_dims = 0\n[train]\ngrad_clip = 0\nlr = 0\nmin_lr = 0\nbeta1 = 0\n"
                                "[eval]\nevery = 0\n[run]\nthreads = 0\n");
    rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0 && c.model.rope_dims == 0 && c.train.grad_clip == 0, "boundary values accepted", "%s", err);
    /* multi-rate strides with phase jitter (docs/spec.md §6.2: u in [0, lcm of the strides), head g by u mod S_g) */
    path = write_ini("head_strides_jitter_ok", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\nhead_strides = 8,4\n"
                                               "[train]\nphase_jitter = true\n");
    rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0 && c.train.phase_jitter && !strcmp(c.model.head_strides, "8,4"), "head_strides with phase_jitter accepted",
          "rc %d: %s", rc, err);
    path = write_ini("deepseek_ok", "[model]\nattention = compressed\ncompressor = deepseek\nwindow = 16\nstride = 8\n");
    rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0 && c.model.compressor == COMPRESSOR_DEEPSEEK, "deepseek with window = 2*stride accepted", "%s", err);

    rc = config_load(&c, DIR "/does_not_exist.ini", 0, NULL, err);
    check(rc != 0 && strstr(err, "does_not_exist.ini"), "missing file is an error naming it", "rc %d: %s", rc, err);
}

/* One error case: INI text, expected line (0: no line expected), strings the message must hold. */
typedef struct {
    const char *name, *ini;
    int line;
    const char *key, *also;
} ErrCase;

static const ErrCase err_cases[] = {
    {"unknown_section", "[model]\nd_model = 64\n[optim]\nlr = 1\n", 3, "optim", "[model]"},
    {"unknown_section_empty", "[model]\n[bogus]\n", 2, "bogus", "unknown section"},
    {"unknown_key", "[model]\nd_model = 64\ndmodel = 32\n", 3, "dmodel", "d_model"},
    {"key_wrong_section", "[model]\nseq_len = 32\n", 2, "seq_len", "[data]"},
    {"key_before_section", "d_model = 32\n[model]\n", 1, "d_model", "[model]"},
    {"malformed_line", "[model]\nd_model 1024\n", 2, "d_model 1024", "malformed"},
    {"malformed_section", "[model]\nn_layers = 2\n[train\n", 3, "[train", "malformed"},
    {"duplicate_key", "[model]\nd_model = 64\nn_layers = 2\nd_model = 32\n", 4, "d_model", "line 2"},
    {"int_not_number", "[model]\nd_model = 1o24\n", 2, "d_model", "1o24"},
    {"int_fraction", "[model]\nn_layers = 2.5\n", 2, "n_layers", "integer"},
    {"int_overflow", "[model]\nd_model = 99999999999\n", 2, "d_model", "32 bits"},
    {"long_overflow", "[train]\nsteps = 99999999999999999999\n", 2, "steps", "64 bits"},
    {"double_not_number", "[model]\nnorm_eps = abc\n", 2, "norm_eps", "abc"},
    {"double_nan", "[train]\nlr = nan\n", 2, "lr", "number"},
    {"u64_negative", "[train]\nseed = -1\n", 2, "seed", "unsigned"},
    {"bool_word", "[model]\ntie_embeddings = maybe\n", 2, "tie_embeddings", "true | false"},
    {"d_model_zero", "[model]\nd_model = 0\n", 2, "d_model", ">= 1"},
    {"n_layers_negative", "[model]\nn_layers = -3\n", 2, "n_layers", ">= 1"},
    {"norm_eps_zero", "[model]\nnorm_eps = 0\n", 2, "norm_eps", "> 0"},
    {"rope_theta_negative", "[model]\nrope_theta = -1\n", 2, "rope_theta", "> 0"},
    {"attention_word", "[model]\nattention = sparse\n", 2, "attention", "full | compressed"},
    {"gate_word", "[model]\nattention = compressed\ngate = softmax\n", 3, "gate", "scalar | vector | uniform"},
    {"local_word", "[model]\nlocal = all\n", 2, "local", "window | tail"},
    {"compressor_word", "[model]\ncompressor = v4\n", 2, "compressor", "paper | deepseek"},
    {"gqa_kv", "[model]\nn_heads = 16\nn_kv_heads = 6\n", 3, "n_kv_heads", "n_heads = 16"},
    {"gqa_heads_only", "[model]\nd_model = 64\nn_heads = 12\n", 3, "n_heads", "n_kv_heads = 8"},
    {"rope_odd", "[model]\nhead_dim = 64\nrope_dims = 33\n", 3, "rope_dims", "head_dim = 64"},
    {"rope_too_big", "[model]\nrope_dims = 256\nhead_dim = 128\n", 2, "rope_dims", "head_dim = 128"},
    {"rope_negative", "[model]\nrope_dims = -2\n", 2, "rope_dims", "even"},
    {"head_dim_odd_rope_default", "[model]\nhead_dim = 63\n", 2, "head_dim", "even"},
    {"stride_gt_window", "[model]\nattention = compressed\nwindow = 4\nstride = 8\n", 4, "stride", "window = 4"},
    {"window_lt_stride_default", "[model]\nattention = compressed\nwindow = 4\n", 3, "window", "stride = 8"},
    {"stride_zero", "[model]\nattention = compressed\nstride = 0\n", 3, "stride", ">= 1"},
    {"window_zero", "[model]\nattention = compressed\nwindow = 0\n", 3, "window", ">= 1"},
    {"deepseek_window", "[model]\nattention = compressed\nwindow = 8\nstride = 8\ncompressor = deepseek\n", 3,
     "window", "2 * stride = 16"},
    {"deepseek_default_window", "[model]\nattention = compressed\ncompressor = deepseek\n", 3, "compressor",
     "window = 8"},
    {"n_local_zero", "[model]\nattention = compressed\nn_local = 0\n", 3, "n_local", ">= 1"},
    {"residues_zero", "[eval]\nresidues = 0\n", 2, "residues", ">= 1"},
    {"seq_len_zero", "[data]\nseq_len = 0\n", 2, "seq_len", ">= 1"},
    {"micro_batch_zero", "[train]\nmicro_batch = 0\n", 2, "micro_batch", ">= 1"},
    {"batch_tokens_multiple", "[data]\nseq_len = 1024\n[train]\nmicro_batch = 4\nbatch_tokens = 10000\n", 5,
     "batch_tokens", "4096"},
    {"batch_tokens_via_seq_len", "[data]\nseq_len = 1000\n", 2, "seq_len", "8000"},
    {"lr_negative", "[train]\nlr = -1e-3\n", 2, "lr", ">= 0"},
    {"min_lr_gt_lr", "[train]\nlr = 1e-4\nmin_lr = 1e-3\n", 3, "min_lr", "lr = 0.0001"},
    {"steps_zero", "[train]\nsteps = 0\n", 2, "steps", ">= 1"},
    {"keep_zero", "[checkpoint]\nkeep = 0\n", 2, "keep", ">= 1"},
    {"grad_clip_negative", "[train]\ngrad_clip = -0.5\n", 2, "grad_clip", ">= 0"},
    {"beta1_one", "[train]\nbeta1 = 1\n", 2, "beta1", "[0, 1)"},
    {"beta2_negative", "[train]\nbeta2 = -0.1\n", 2, "beta2", "[0, 1)"},
    {"eps_zero", "[train]\neps = 0\n", 2, "eps", "> 0"},
    {"device_word", "[run]\ndevice = gpu\n", 2, "device", "auto | cpu | cuda"},
    {"threads_negative", "[run]\nthreads = -1\n", 2, "threads", ">= 0"},
    {"log_every_zero", "[run]\nlog_every = 0\n", 2, "log_every", ">= 1"},
    {"val_tokens_small", "[data]\nval = v/*.bin\nseq_len = 512\n[train]\nbatch_tokens = 4096\n[eval]\nval_tokens = 100\n",
     7, "val_tokens", "seq_len = 512"},
    {"run_name_slash", "[run]\nname = a/b\n", 2, "name", "'/'"},
    {"string_semicolon", "[data]\ntrain =;x\n", 2, "train", "';'"},
    {"eval_every_negative", "[eval]\nevery = -1\n", 2, "every", ">= 0"},
    /* docs/spec.md §2b */
    {"grid_word", "[model]\nattention = compressed\ngrid = shifted\n", 3, "grid", "aligned | staggered"},
    {"grid_staggered_full", "[model]\ngrid = staggered\n", 2, "grid", "attention = compressed"},
    /* docs/spec.md §6.2 */
    {"phase_jitter_full", "[train]\nphase_jitter = true\n", 2, "phase_jitter", "attention = full"},
    {"phase_jitter_stride1", "[model]\nattention = compressed\nstride = 1\n[train]\nphase_jitter = true\n", 5,
     "phase_jitter", "stride = 1"},
    {"phase_jitter_word", "[train]\nphase_jitter = maybe\n", 2, "phase_jitter", "true"},
    {"token_shift_full", "[model]\ntoken_shift = true\n", 2, "token_shift", "attention = compressed"},
    /* docs/spec.md §5.1: token shift with a layer schedule is not built */
    {"token_shift_schedule", "[model]\nattention = compressed\nn_layers = 2\nlayer_attention = compressed,hca\ntoken_shift = true\n", 5,
     "token_shift", "layer_attention"},
    {"token_shift_schedule_one_kind", "[model]\nattention = compressed\nn_layers = 2\nlayer_attention = compressed*2\ntoken_shift = true\n", 5,
     "token_shift", "layer_attention"},
    /* docs/spec.md §6.4: multi-rate strides */
    {"head_strides_full", "[model]\nhead_strides = 8,4\n", 2, "head_strides", "attention = compressed"},
    {"head_strides_word", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\nhead_strides = 8,four\n", 5,
     "head_strides", "item 2 is not a positive integer"},
    {"head_strides_count", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\nhead_strides = 8,4,4\n", 5,
     "head_strides", "one stride per KV head"},
    {"head_strides_gt_window", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\nhead_strides = 9,4\n", 5,
     "head_strides", "1..window"},
    {"head_strides_zero", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\nhead_strides = 0,4\n", 5,
     "head_strides", "1..window"},
    {"head_strides_not_min", "[model]\nattention = compressed\nn_kv_heads = 2\nhead_strides = 8,4\n", 4,
     "head_strides", "smallest head stride (4)"},
    {"head_strides_deepseek", "[model]\nattention = compressed\nn_kv_heads = 2\nstride = 4\ncompressor = deepseek\nhead_strides = 8,4\n", 6,
     "head_strides", "model.compressor = deepseek"},
    {"head_strides_schedule", "[model]\nattention = compressed\nn_layers = 2\nn_kv_heads = 2\nstride = 4\nlayer_attention = compressed*2\nhead_strides = 8,4\n", 7,
     "head_strides", "model.layer_attention"},
    /* docs/spec.md §6.5: learned chunk boundaries, every rule */
    {"boundaries_word", "[model]\nattention = compressed\nboundaries = chunky\n", 3, "boundaries", "grid | learned"},
    {"boundaries_full", "[model]\nboundaries = learned\n", 2, "boundaries", "attention = full"},
    {"boundaries_w_eq_s", "[model]\nattention = compressed\nwindow = 8\nstride = 8\nboundaries = learned\n", 3,
     "window", "window > stride >= 2"},
    {"boundaries_s1", "[model]\nattention = compressed\nwindow = 8\nstride = 1\nboundaries = learned\n", 4,
     "stride", "window > stride >= 2"},
    {"boundaries_staggered", "[model]\nattention = compressed\nwindow = 16\ngrid = staggered\nboundaries = learned\n", 5,
     "boundaries", "model.grid = staggered"},
    {"boundaries_head_strides", "[model]\nattention = compressed\nwindow = 16\nn_kv_heads = 2\nstride = 4\nhead_strides = 8,4\n"
     "boundaries = learned\n", 7, "boundaries", "model.head_strides"},
    {"boundaries_jitter", "[model]\nattention = compressed\nwindow = 16\nboundaries = learned\n[train]\nphase_jitter = true\n", 4,
     "boundaries", "train.phase_jitter"},
    {"boundaries_deepseek", "[model]\nattention = compressed\nwindow = 16\ncompressor = deepseek\nboundaries = learned\n", 5,
     "boundaries", "model.compressor = deepseek"},
    {"boundaries_coverage", "[model]\nattention = compressed\nwindow = 16\nboundaries = learned\n[train]\ngate_coverage = 0.1\n", 4,
     "boundaries", "train.gate_coverage"},
    {"boundaries_schedule", "[model]\nattention = compressed\nn_layers = 2\nwindow = 16\nlayer_attention = compressed*2\n"
     "boundaries = learned\n", 6, "boundaries", "model.layer_attention"},
    {"boundary_ratio_negative", "[train]\nboundary_ratio = -0.1\n", 2, "boundary_ratio", ">= 0"},
    {"boundary_ratio_inf", "[train]\nboundary_ratio = inf\n", 2, "boundary_ratio", "finite"},
    {"boundary_ratio_nan", "[train]\nboundary_ratio = nan\n", 2, "boundary_ratio", "finite"},
    {"compressor_shared_word", "[model]\ncompressor = shard\n", 2, "compressor", "paper | deepseek | shared"},
    {"coverage_negative", "[model]\nattention = compressed\n[train]\ngate_coverage = -0.1\n", 4, "gate_coverage", ">= 0"},
    {"coverage_inf", "[model]\nattention = compressed\n[train]\ngate_coverage = inf\n", 4, "gate_coverage", "finite"},
    {"coverage_nan", "[model]\nattention = compressed\n[train]\ngate_coverage = nan\n", 4, "gate_coverage", "finite"},
    {"coverage_full", "[train]\ngate_coverage = 0.1\n", 2, "gate_coverage", "attention = full"},
    {"coverage_uniform", "[model]\nattention = compressed\ngate = uniform\n[train]\ngate_coverage = 0.1\n", 5,
     "gate_coverage", "gate = uniform"},
};

static void test_errors(void) {
    int n = sizeof err_cases / sizeof err_cases[0];
    for (int i = 0; i < n; i++) {
        const ErrCase *e = &err_cases[i];
        char path[512], err[ERR_LEN], name[128], loc[600];
        snprintf(path, sizeof path, "%s", write_ini(e->name, e->ini));
        snprintf(name, sizeof name, "error: %s", e->name);
        snprintf(loc, sizeof loc, "%s:%d:", path, e->line);
        Config c;
        err[0] = 0;
        int rc = config_load(&c, path, 0, NULL, err);
        check(rc != 0 && strstr(err, loc) == err && strstr(err, e->key) && strstr(err, e->also) &&
                  !strchr(err, '\n'),
              name, "rc %d, expected a one-line message starting \"%s\" naming \"%s\" and \"%s\"; got \"%s\"", rc, loc,
              e->key, e->also, err);
    }
}

static void test_override_errors(void) {
    struct {
        const char *name;
        const char *ov[2];
        int n;
        const char *want, *also;
    } cases[] = {
        {"override: bad value", {"model.d_model=0"}, 1, "command line: model.d_model", ">= 1"},
        {"override: unparsable", {"train.lr=fast"}, 1, "command line: train.lr", "fast"},
        {"override: unknown key", {"model.layers=3"}, 1, "command line: model.layers", "unknown key"},
        {"override: unknown section", {"optim.lr=3"}, 1, "command line: optim.lr", "unknown section"},
        {"override: malformed", {"d_model"}, 1, "command line", "section.key=value"},
        {"override: cross-key names the override",
         {"model.attention=compressed", "model.compressor=deepseek"}, 2, "command line: model.compressor", "window = 8"},
        {"override: enum word", {"run.device=tpu"}, 1, "command line: run.device", "auto | cpu | cuda"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        char err[ERR_LEN] = "";
        int rc = config_load(&c, NULL, cases[i].n, (char **)cases[i].ov, err);
        check(rc != 0 && strstr(err, cases[i].want) && strstr(err, cases[i].also), cases[i].name,
              "rc %d, expected \"%s\" and \"%s\" in \"%s\"", rc, cases[i].want, cases[i].also, err);
    }
    /* an override error points at the command line even when the file set the key */
    char path[512], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s", write_ini("override_file", "[model]\nd_model = 64\n"));
    char *ov[] = {"model.d_model=-1"};
    Config c;
    int rc = config_load(&c, path, 1, ov, err);
    check(rc != 0 && strstr(err, "command line: model.d_model") && !strstr(err, ":2:"),
          "override: error located on the command line, not the file", "rc %d: %s", rc, err);
    /* an override can repair a bad file value */
    snprintf(path, sizeof path, "%s", write_ini("override_fix", "[model]\nn_kv_heads = 6\n"));
    char *fix[] = {"model.n_kv_heads=4"};
    rc = config_load(&c, path, 1, fix, err);
    check(rc == 0 && c.model.n_kv_heads == 4, "override: repairs a cross-key error of the file", "rc %d: %s", rc, err);
}

/* Lines longer than inih's 200-byte buffer: comments, inline comments, section headers with
 * comments, and the line numbers of errors after them. */
static void test_long_lines(void) {
    char pad[400], ini[4096], path[512], err[ERR_LEN];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    snprintf(ini, sizeof ini, "; %s\n[model] ; %s\nd_model = 64 ; %s\n[train]\nsteps = 12\n", pad, pad, pad);
    snprintf(path, sizeof path, "%s", write_ini("long_ok", ini));
    Config c;
    int rc = config_load(&c, path, 0, NULL, err);
    check(rc == 0 && c.model.d_model == 64 && c.train.steps == 12, "long lines: comments and inline comments",
          "rc %d: %s", rc, err);
    snprintf(ini, sizeof ini, "; %s\n[model]\nd_model = 64 ; %s\nn_layers = 0\n", pad, pad);
    snprintf(path, sizeof path, "%s", write_ini("long_then_error", ini));
    rc = config_load(&c, path, 0, NULL, err);
    char want[600];
    snprintf(want, sizeof want, "%s:4: [model] n_layers", path);
    check(rc != 0 && strstr(err, want) == err, "long lines: later line numbers stay right", "rc %d: %s", rc, err);
    snprintf(ini, sizeof ini, "[data]\ntrain %s\n", pad);
    snprintf(path, sizeof path, "%s", write_ini("long_malformed", ini));
    rc = config_load(&c, path, 0, NULL, err);
    snprintf(want, sizeof want, "%s:2:", path);
    check(rc != 0 && strstr(err, want) == err && strstr(err, "malformed"), "long lines: malformed long line",
          "rc %d: %s", rc, err);
    char big[1200];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    snprintf(ini, sizeof ini, "[data]\nval = %s\n", big);
    snprintf(path, sizeof path, "%s", write_ini("long_too_long", ini));
    rc = config_load(&c, path, 0, NULL, err);
    snprintf(want, sizeof want, "%s:2: [data] val", path);
    check(rc != 0 && strstr(err, want) == err && strstr(err, "at most 1023"), "long lines: value longer than the field",
          "rc %d: %s", rc, err);
}

static void test_round_trip(void) {
    char err[ERR_LEN];
    /* a config far from the defaults, including a value longer than inih's 200-byte line */
    char long_glob[700];
    memset(long_glob, 'g', sizeof long_glob);
    memcpy(long_glob, "data/", 5);
    strcpy(long_glob + sizeof long_glob - 7, "/*.bin");
    char ini[4096];
    snprintf(ini, sizeof ini,
             "[model]\nd_model = 96\nn_layers = 3\nn_heads = 6\nn_kv_heads = 2\nhead_dim = 16\nd_ff = 200\n"
             "vocab_size = 300\nrope_theta = 10000.5\nnorm_eps = 1.25e-5\ntie_embeddings = false\n"
             "attention = compressed\nwindow = 12\nstride = 6\ngate = vector\ngate_bias = no\nkv_tied = 1\n"
             "post_norm = true\nqk_norm = false\nrope_dims = 8\nlocal = tail\nn_local = 5\ncompressor = deepseek\n"
             "attn_sink = yes\n"
             "[data]\ntrain = %s\nval = val/*.bin\nseq_len = 96\n"
             "[train]\nsteps = 77\nbatch_tokens = 1152\nmicro_batch = 3\nlr = 0.1\nmin_lr = 0.01\nwarmup_steps = 7\n"
             "weight_decay = 0\ngrad_clip = 0.3\nbeta1 = 0.1\nbeta2 = 0.999\neps = 3.3e-9\nseed = 12345678901234\n"
             "max_bad_steps = 2\n"
             "[eval]\nevery = 5\nval_tokens = 960\nresidues = 12\nprobe = probes/p.bin\n"
             "[checkpoint]\nevery = 9\nkeep = 4\n"
             "[run]\nname = rt\ndir = /tmp/runs\ndevice = cuda\nthreads = 3\nlog_every = 2\n",
             long_glob);
    char path[512];
    snprintf(path, sizeof path, "%s", write_ini("round_trip_src", ini));
    Config a, b, d;
    int rc = config_load(&a, path, 0, NULL, err);
    check(rc == 0 && !strcmp(a.data.train, long_glob) && a.model.compressor == COMPRESSOR_DEEPSEEK &&
              a.model.norm_eps == 1.25e-5 && a.train.eps == 3.3e-9 && a.model.local == LOCAL_TAIL,
          "round trip: non-default source loads (long line intact)", "rc %d: %s", rc, err);
    rc = config_write(&a, DIR "/round_trip_out.ini", err);
    check(rc == 0, "round trip: config_write", "%s", err);
    rc = config_load(&b, DIR "/round_trip_out.ini", 0, NULL, err);
    check(rc == 0 && same_config(&a, &b), "round trip: load(write(cfg)) == cfg", "rc %d: %s", rc, err);

    char *s = config_to_string(&a), *file = read_all(DIR "/round_trip_out.ini");
    check(s && file && !strcmp(s, file), "round trip: config_to_string equals the written file", "differ");
    /* sections in order, every key present */
    const char *order[] = {"[model]", "[data]", "[train]", "[eval]", "[checkpoint]", "[run]"};
    const char *prev = s;
    int in_order = 1;
    for (int i = 0; i < 6; i++) {
        const char *at = s ? strstr(s, order[i]) : NULL;
        if (!at || at < prev) in_order = 0;
        if (at) prev = at;
    }
    check(in_order, "written config: sections in order", "%s", s ? s : "(null)");
    int nk, missing = 0;
    const ConfigKeyInfo *keys = config_keys(&nk);
    for (int k = 0; k < nk && s; k++) {
        char want[128];
        snprintf(want, sizeof want, "\n%s =", keys[k].key);
        if (!strstr(s, want)) missing++;
    }
    check(s && missing == 0, "written config: every key present", "%d keys missing", missing);
    check(s && strstr(s, "\nrope_dims = 8\n") && strstr(s, "\nname = rt\n") && strstr(s, "\ngate = vector\n") &&
              strstr(s, "\nnorm_eps = 1.25e-05\n") && strstr(s, "\ntie_embeddings = false\n"),
          "written config: resolved values", "%s", s ? s : "(null)");
    free(s);
    free(file);

    /* defaults round trip, with run.name and rope_dims resolved */
    config_defaults(&d);
    rc = config_write(&d, DIR "/defaults_out.ini", err);
    rc = rc ? rc : config_load(&b, DIR "/defaults_out.ini", 0, NULL, err);
    check(rc == 0 && same_config(&d, &b), "round trip: defaults", "rc %d: %s", rc, err);
    rc = config_write(&d, DIR "/no_such_dir/x.ini", err);
    check(rc != 0 && strstr(err, "no_such_dir/x.ini"), "config_write: unwritable path is an error", "rc %d: %s", rc, err);
}

static void test_key_table(void) {
    int n = 0;
    const ConfigKeyInfo *keys = config_keys(&n);
    const char *sections[] = {"model", "data", "train", "eval", "checkpoint", "run"};
    int bad = 0, sec = 0;
    for (int k = 0; k < n; k++) {
        if (!keys[k].section || !keys[k].key || !keys[k].def || !keys[k].help || !keys[k].key[0] || !keys[k].help[0])
            bad++;
        while (sec < 6 && strcmp(keys[k].section, sections[sec])) sec++;
    }
    check(n == 77 && bad == 0, "--help table: 77 keys (50 + data.tokenizer, grid, gate_coverage, phase_jitter, token_shift, head_strides, boundaries, train.boundary_ratio, data.loss_targets, data.stages, data.train_seq_len, train.resume_schedule, run.deterministic and the layer schedule's 14: layer_attention, csa_{window,stride,gate,compressor,topk}, hca_{window,stride,gate,compressor}, indexer_{heads,dim}, train.indexer_{weight,warmup}), each with a non-empty help line", "n %d, %d incomplete", n, bad);
    check(sec < 6, "--help table: grouped by section in file order", "sections out of order");
    const char *expect[] = {"model.d_model", "model.rope_dims", "model.attn_sink", "data.seq_len", "train.max_bad_steps",
                            "eval.probe", "checkpoint.keep", "run.log_every", "run.device"};
    int found = 0;
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        for (int k = 0; k < n; k++) {
            char full[128];
            snprintf(full, sizeof full, "%s.%s", keys[k].section, keys[k].key);
            if (!strcmp(full, expect[i])) { found++; break; }
        }
    check(found == (int)(sizeof expect / sizeof expect[0]), "--help table: lists the keys of every section",
          "%d of %zu found", found, sizeof expect / sizeof expect[0]);
    int rope = -1, gate = -1;
    for (int k = 0; k < n; k++) {
        if (!strcmp(keys[k].key, "rope_dims")) rope = k;
        if (!strcmp(keys[k].key, "gate")) gate = k;
    }
    check(rope >= 0 && !strcmp(keys[rope].def, "head_dim") && gate >= 0 && !strcmp(keys[gate].def, "scalar") &&
              strstr(keys[gate].help, "vector") && strstr(keys[gate].help, "uniform"),
          "--help table: defaults as INI text, help names allowed words", "rope def '%s' gate def '%s'",
          rope >= 0 ? keys[rope].def : "?", gate >= 0 ? keys[gate].def : "?");

    /* a file with every key at its table default loads to config_defaults() (+ file-derived name) */
    char ini[8192];
    size_t used = 0;
    const char *cur = "";
    for (int k = 0; k < n; k++) {
        if (strcmp(cur, keys[k].section)) used += snprintf(ini + used, sizeof ini - used, "[%s]\n", keys[k].section);
        cur = keys[k].section;
        used += snprintf(ini + used, sizeof ini - used, "%s = %s\n", keys[k].key, keys[k].def);
    }
    char path[512], err[ERR_LEN];
    snprintf(path, sizeof path, "%s", write_ini("all_defaults", ini));
    Config a, d;
    int rc = config_load(&a, path, 0, NULL, err);
    config_defaults(&d);
    snprintf(d.run.name, sizeof d.run.name, "all_defaults");
    check(rc == 0 && same_config(&a, &d), "--help table: default strings parse to config_defaults()", "rc %d: %s", rc,
          err);
}

int main(void) {
    mkdirs();
    test_defaults();
    test_file_and_overrides();
    test_errors();
    test_override_errors();
    test_long_lines();
    test_round_trip();
    test_key_table();
    return check_exit_code();
}
