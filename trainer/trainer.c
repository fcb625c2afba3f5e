/* The training loop.
 *
 *  1. Run directory RUN = run.dir/run.name: resolved config.ini, log.txt, metrics.h5 (rank 0),
 *     checkpoints/.
 *  2. Data: training windows of T+1 tokens from [data] train in a deterministic shuffled order
 *     (data/loader.h: sample g of the run is a pure function of g and the seed); the global batch
 *     of step s is samples [s*Bg, (s+1)*Bg), Bg = batch_tokens / T, split into equal contiguous
 *     parts over the ranks, each processed in micro-batches of train.micro_batch sequences with
 *     gradient accumulation. The union over ranks of one step is the single-process batch.
 *  3. Loss scale 1/(Bg*T): the accumulated gradient is that of the global mean loss. A stage of
 *     data.stages (or data.train_seq_len) at a shorter length T_j trains the same Bg rows at
 *     T_j (model_set_seq_len; the arena stays sized for T) with scale 1/(Bg*T_j), Bg*T_j tokens a
 *     step; evaluation always runs at T.
 *  4. Optimizer step: ZeRO-1 AdamW (trainer/optimizer.h) with the warm-up + cosine schedule and
 *     global-norm clipping; the step owns the working-copy write. The per-token losses stay on
 *     the backend (one download of the step's sum); ONE control all-reduce per step carries the
 *     loss, the coverage sum, the data-failure flag and the stop signal (comm_step_control). A non-finite loss or gradient norm skips the update (counted and
 *     logged); max_bad_steps in a row stop the run with exit status 3, the last checkpoint intact.
 *  5. Every log_every steps a progress line and a /train row; every eval.every steps (and at
 *     the end) the per-residue validation loss, gate statistics and lookup probe; every
 *     checkpoint.every steps (and at the end) a checkpoint.
 *  6. Resume: the same command on an existing run directory continues from the newest complete
 *     checkpoint, bit for bit as if never interrupted (CPU, same thread count); a config change
 *     that breaks this (model, data, batch, seed) is refused, and so is a train.steps other than
 *     the total the checkpoint's schedule was computed for (state.json schedule_steps) unless
 *     train.resume_schedule = keep (that total stays: lr_at_step(s, recorded total), min_lr past
 *     its end) or stretch (the new train.steps). The start-up checks (trainer/run_inputs.h, the
 *     resume rules, the run directory) are shared with --dry-run (train_dry_run). SIGTERM, SIGUSR1 and SIGINT make
 *     every rank finish the current step, write a checkpoint and exit 0 (a signal counts in the
 *     step whose control all-reduce sees it: one arriving later stops after the next step). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "model/layer_kinds.h"
#include "trainer/trainer.h"
#include "trainer/phase_jitter.h"
#include "common/clock.h"
#include "trainer/checkpoint.h"
#include "trainer/comm.h"
#include "trainer/evaluate.h"
#include "trainer/hf_export.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/probe_eval.h"
#include "kernels/cpu/cpu_backend.h"
#include "trainer/kind_fold.h"
#include "trainer/run_inputs.h"
#include "trainer/schedule.h"
#include "data/loader.h"
#include "data/probe.h"
#include "data/train_stages.h"
#include "kernels/kernels.h"
#include "common/errors.h"
#include "model/model.h"

static volatile sig_atomic_t stop_signal;

/* Test hooks (environment variables, used by tests/test_mpi_train.py):
 *   PHASELAB_TRACE_SAMPLES=PATH   each rank appends "step rank sample window stage" lines to PATH.rankR
 *                                 (window: an index of that stage's window list)
 *   PHASELAB_FAIL_RANK=R, PHASELAB_FAIL_STEP=S   rank R kills itself (SIGKILL) before step S
 *   PHASELAB_TRACE_COMM=PATH      each rank appends "step rank step_controls max_int_allreduces
 *                                 sum_host_allreduces" lines to PATH.rankR: the host all-reduces
 *                                 from the start of the step through its optimizer step
 *                                 (tests/test_step_collectives.py)
 *   PHASELAB_STOP_SAVE_DELAY_MS=N every rank sleeps N ms before the checkpoint a stop signal
 *                                 asks for: a save slower than mpirun's SIGTERM grace */
typedef struct { FILE *trace, *comm_trace; int fail_rank; long fail_step, stop_save_delay_ms; } TestHooks;

static void hooks_init(TestHooks *h, int rank) {
    const char *p = getenv("PHASELAB_TRACE_SAMPLES");
    h->trace = h->comm_trace = NULL;
    if (p && *p) {
        char path[4096];
        snprintf(path, sizeof path, "%s.rank%d", p, rank);
        h->trace = fopen(path, "a");
    }
    p = getenv("PHASELAB_TRACE_COMM");
    if (p && *p) {
        char path[4096];
        snprintf(path, sizeof path, "%s.rank%d", p, rank);
        h->comm_trace = fopen(path, "a");
    }
    h->fail_rank = getenv("PHASELAB_FAIL_RANK") ? atoi(getenv("PHASELAB_FAIL_RANK")) : -1;
    h->fail_step = getenv("PHASELAB_FAIL_STEP") ? atol(getenv("PHASELAB_FAIL_STEP")) : -1;
    h->stop_save_delay_ms = getenv("PHASELAB_STOP_SAVE_DELAY_MS") ? atol(getenv("PHASELAB_STOP_SAVE_DELAY_MS")) : 0;
}
/* A process-directed signal reaches any thread that does not block it, often an OpenMP
 * worker; the handler passes it on to the main thread, so that a console write blocked there
 * returns (common/log.c) and the main thread goes on to the checkpoint. */
static pthread_t main_thread;
static void on_stop_signal(int sig) {
    stop_signal = sig;
    log_guard_console();
    if (!pthread_equal(pthread_self(), main_thread)) pthread_kill(main_thread, sig);
}

typedef struct {
    Config *cfg;
    Comm *comm;
    const Backend *be;
    Model *model;
    Optimizer opt;
    TrainData *data;        /* data.train and the stages of data.stages */
    ValSet *val;
    ProbeSet *probe;
    Metrics *metrics;
    TrainState st;
    char run_dir[2048];
    const char *code_version;
    double flops_per_token;
    int micro;
    int lock_fd;            /* rank 0: flock on RUN/lock for the run's lifetime (-1: none) */
} Trainer;

/* The exit status of a file-system failure: 1 (runtime) for a lack of resources or an I/O error,
 * else 2: the path the config names cannot be used (not a directory, no permission, read-only). */
static int fs_failure_status(int e) {
    return e == ENOSPC || e == EIO || e == EDQUOT || e == ENOMEM || e == EMFILE || e == ENFILE ? 1 : 2;
}

/* The schedule rule of a resume (train.resume_schedule): the checkpoint's schedule was computed
 * for `recorded` total steps; returns the total to continue with, or -1 with err filled when
 * train.steps differs and the config does not say what to do. */
static long resume_schedule_total(const Config *now, const char *ckpt_dir, const TrainState *st, long recorded,
                                  char *err) {
    const TrainConfig *t = &now->train;
    if (t->steps < st->step)
        return set_err(err, "refusing to resume %s: train.steps = %ld is below its step %ld; expected train.steps >= "
                       "%ld (a finished run is continued by raising train.steps)", ckpt_dir, t->steps, st->step,
                       st->step);
    if (t->steps == recorded || t->steps == st->step) return recorded;   /* unchanged, or no step left to train */
    const char *how = config_resume_schedule_names[t->resume_schedule];
    if (t->resume_schedule == RESUME_SCHEDULE_KEEP) {
        char after[96] = "";   /* lr_at_step: warm-up while step < warmup_steps, the cosine to min_lr over the rest */
        if (t->steps > recorded && t->warmup_steps > recorded)
            snprintf(after, sizeof after, ", warm-up to step %ld, then min_lr", t->warmup_steps);
        else if (t->steps > recorded)
            snprintf(after, sizeof after, ", min_lr after the schedule's end");
        log_printf("resume: train.steps = %ld, the schedule's total stays %ld (train.resume_schedule = keep): lr %.3e "
                   "at step %ld%s\n", t->steps, recorded,
                   lr_at_step(st->step, recorded, t->warmup_steps, t->lr, t->min_lr), st->step + 1, after);
        return recorded;
    }
    if (t->resume_schedule == RESUME_SCHEDULE_STRETCH) {
        log_printf("resume: the schedule's total %ld -> %ld (train.resume_schedule = %s): lr at step %ld %.3e -> %.3e\n",
                   recorded, t->steps, how, st->step + 1,
                   lr_at_step(st->step, recorded, t->warmup_steps, t->lr, t->min_lr),
                   lr_at_step(st->step, t->steps, t->warmup_steps, t->lr, t->min_lr));
        return t->steps;
    }
    return set_err(err, "refusing to resume %s: train.steps = %ld, but its learning-rate schedule (warm-up + cosine) "
                   "was computed for %ld steps; say which to follow: train.resume_schedule=keep (the %ld-step schedule "
                   "continues: lr %.3e at step %ld%s) or train.resume_schedule=stretch (the cosine recomputed for %ld "
                   "steps: lr %.3e at step %ld)", ckpt_dir, t->steps, recorded, recorded,
                   lr_at_step(st->step, recorded, t->warmup_steps, t->lr, t->min_lr), st->step + 1,
                   t->steps > recorded ? ", min_lr after its end" : "", t->steps,
                   lr_at_step(st->step, t->steps, t->warmup_steps, t->lr, t->min_lr), st->step + 1);
}

/* Refuses a resume whose config would not continue the same run; notes harmless changes. Fills
 * *schedule_total (the resume_schedule rule above). */
static int check_resume_config(const Config *now, const char *ckpt_dir, const TrainState *st, const char *data_fp,
                               long *schedule_total, char *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/config.ini", ckpt_dir);
    Config then;
    char lerr[ERR_LEN];
    if (config_load(&then, path, 0, NULL, lerr)) return set_err(err, "cannot read the checkpoint's config: %s", lerr);
    char why[2048] = "";
#define DIFF(cond, what) \
    if (cond) snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", why[0] ? "; " : "", what)
    if (memcmp(&now->model, &then.model, sizeof now->model) != 0) {
        char keys[1024];
        if (config_diff(&then, now, "model", keys, sizeof keys) == 0) snprintf(keys, sizeof keys, "(no key's text differs)");
        snprintf(why + strlen(why), sizeof why - strlen(why), "%s[model] differs (shape or variant): %s", why[0] ? "; " : "", keys);
    }
    if (now->eval.residues != then.eval.residues)   /* the metrics file's residue columns are eval.residues wide */
        snprintf(why + strlen(why), sizeof why - strlen(why), "%seval.residues differs (%d in the run, %d now: the columns "
                 "of its metrics.h5 by residue are %d wide)", why[0] ? "; " : "", then.eval.residues, now->eval.residues,
                 then.eval.residues);
    DIFF(now->data.seq_len != then.data.seq_len, "data.seq_len differs");
    DIFF((now->data.train_seq_len ? now->data.train_seq_len : now->data.seq_len) !=
             (then.data.train_seq_len ? then.data.train_seq_len : then.data.seq_len), "data.train_seq_len differs");
    DIFF(now->train.batch_tokens != then.train.batch_tokens, "train.batch_tokens differs");
    DIFF(now->train.seed != then.train.seed, "train.seed differs");
    DIFF(strcmp(data_fp, st->data_fingerprint) != 0,
         "the training data (the files matched by data.train or data.stages, their sizes, or the stages' first "
         "steps) differ");
#undef DIFF
    if (why[0])
        return set_err(err, "refusing to resume %s: %s. That would not continue the same run: start a new run "
                       "(run.name=...) or restore the original config", ckpt_dir, why);
    long recorded = st->schedule_steps;
    if (recorded <= 0) {
        recorded = then.train.steps;
        log_printf("resume: %s/state.json records no schedule_steps (written before phaselab recorded them): the "
                   "schedule's total is taken from its config.ini, train.steps = %ld\n", ckpt_dir, recorded);
    }
    *schedule_total = resume_schedule_total(now, ckpt_dir, st, recorded, err);
    if (*schedule_total < 0) return -1;
    char notes[1024] = "";
#define NOTE(cond, what) if (cond) snprintf(notes + strlen(notes), sizeof notes - strlen(notes), " [%s]", what)
    NOTE(now->train.steps != then.train.steps, "train.steps");    /* the schedule: resume_schedule_total */
    NOTE(now->train.lr != then.train.lr || now->train.min_lr != then.train.min_lr ||
         now->train.warmup_steps != then.train.warmup_steps, "learning-rate schedule");
    NOTE(now->train.micro_batch != then.train.micro_batch, "train.micro_batch: sums change order, not bitwise identical");
    NOTE(now->run.threads != then.run.threads, "run.threads: sums change order, not bitwise identical");
    NOTE(now->eval.every != then.eval.every || now->eval.val_tokens != then.eval.val_tokens, "eval settings");
    NOTE(now->checkpoint.every != then.checkpoint.every || now->checkpoint.keep != then.checkpoint.keep, "checkpoint settings");
    NOTE(now->run.log_every != then.run.log_every, "run.log_every");
    NOTE(now->train.gate_coverage != then.train.gate_coverage, "train.gate_coverage: the training objective changes");
    NOTE(now->train.phase_jitter != then.train.phase_jitter, "train.phase_jitter: the training objective changes");
    NOTE(now->data.loss_targets != then.data.loss_targets, "data.loss_targets: the training objective changes");
#undef NOTE
    if (notes[0]) log_printf("resume: changed since the checkpoint:%s\n", notes);
    return 0;
}

int train_resume_plan(const Config *cfg, const char *run_dir, const TrainData *data, ResumePlan *plan, char *err) {
    memset(plan, 0, sizeof *plan);
    plan->schedule_steps = cfg->train.steps;
    int found = checkpoint_latest(run_dir, plan->ckpt, sizeof plan->ckpt, &plan->st, err);
    if (found <= 0) return found;      /* -1: the newest checkpoint is damaged (a runtime failure) */
    if (!plan->st.checksummed)
        log_printf("warning: %s has no checksums (written before phaselab recorded them): only file sizes were "
                   "checked\n", plan->ckpt);
    char data_fp[LOADER_FINGERPRINT_LEN + 1];
    train_data_fingerprint(data, plan->st.step, data_fp);   /* what the checkpoint's steps read */
    if (check_resume_config(cfg, plan->ckpt, &plan->st, data_fp, &plan->schedule_steps, err)) return -2;
    return 1;
}

/* --dry-run's view of the run directory: what fs_mkdirs and fs_lock_dir would meet, writing
 * nothing. The first missing component's parent must be a writable directory; an existing run
 * directory must be a writable directory whose lock no live ./train holds. */
static int check_run_dir(const char *run_dir, char *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s", run_dir);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return set_err(err, "%s: exists and is not a directory", path), 2;
        char lock[4200];
        snprintf(lock, sizeof lock, "%s/lock", path);
        if (access(path, W_OK | X_OK))
            return set_err(err, "%s: cannot open the run lock: %s", lock, strerror(errno)), fs_failure_status(errno);
        int fd = open(lock, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
            char pid[32] = "";
            ssize_t n = busy ? pread(fd, pid, sizeof pid - 1, 0) : 0;
            pid[n > 0 ? n : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            close(fd);
            if (busy)
                return set_err(err, "%s: the run directory is in use by pid %s (another ./train of this run.name); "
                               "wait for it to end or use another run.name", lock, pid[0] ? pid : "?"), 2;
        }
        return 0;
    }
    /* the nearest existing ancestor: mkdir -p creates the rest in it, from `first` (the first
     * missing directory, the one fs_mkdirs would name) on */
    char first[4096];
    for (;;) {
        snprintf(first, sizeof first, "%s", path);
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') path[--n] = 0;
        char *slash = strrchr(path, '/');
        if (!slash) { snprintf(path, sizeof path, "."); break; }
        if (slash == path) { path[1] = 0; break; }   /* the root */
        *slash = 0;
        if (stat(path, &st) == 0) break;
    }
    int e = stat(path, &st) != 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : access(path, W_OK | X_OK) ? errno : 0;
    if (e) return set_err(err, "%s: cannot create directory: %s", first, strerror(e)), fs_failure_status(e);
    return 0;
}

/* A schedule whose warm-up does not end before its total: the lr never reaches train.lr and the
 * cosine never runs (lr_at_step: warm-up to train.lr over warmup_steps, then the cosine to min_lr
 * over the rest). Said once at start, by the run and by --dry-run. */
static void note_warmup(const Config *cfg, long schedule_steps) {
    const TrainConfig *t = &cfg->train;
    if (t->warmup_steps < schedule_steps) return;
    if (t->warmup_steps > schedule_steps)
        log_printf("warning: train.warmup_steps = %ld is above the schedule's %ld steps: the schedule is warm-up to step %ld "
                   "(train.lr = %.3e reached there), then min_lr (no cosine decay)%s; lower train.warmup_steps for a short run\n",
                   t->warmup_steps, schedule_steps, t->warmup_steps - 1, t->lr,
                   t->steps < t->warmup_steps ? ": this run ends in its warm-up" : "");
    else
        log_printf("warning: train.warmup_steps = %ld equals the schedule's %ld steps: train.lr = %.3e is reached at the last "
                   "step, with no cosine decay; lower train.warmup_steps for a decay\n", t->warmup_steps, schedule_steps, t->lr);
}

int train_dry_run(const Config *cfg, ResumePlan *plan, char *err) {
    char run_dir[2048];
    snprintf(run_dir, sizeof run_dir, "%s/%s", cfg->run.dir, cfg->run.name);
    memset(plan, 0, sizeof *plan);
    plan->schedule_steps = cfg->train.steps;
    int rc = check_run_dir(run_dir, err);
    if (rc) return rc;
    RunInputs in;
    rc = run_inputs_open(&in, cfg, 1, err);
    if (rc) return rc == -2 ? 2 : 1;
    char *about = run_inputs_describe(&in, cfg);
    if (about) log_printf("%s", about);
    free(about);
    int found = train_resume_plan(cfg, run_dir, in.data, plan, err);
    run_inputs_close(&in);
    if (found < 0) return found == -2 ? 2 : 1;
    note_warmup(cfg, plan->schedule_steps);
    if (found)
        log_printf("run directory %s: resumes from %s at step %ld of %ld (learning-rate schedule over %ld steps)\n",
                   run_dir, plan->ckpt, plan->st.step, cfg->train.steps, plan->schedule_steps);
    else
        log_printf("run directory %s: %s\n", run_dir, access(run_dir, F_OK) ? "a new run (created at start)" : "a new run (no checkpoint yet)");
    return 0;
}


/* A layer schedule's probe folded by each compressed kind's own phase (docs/spec.md §5.5,
 * trainer/kind_fold.h): one log line per kind (its worst phase and the phase test, prefix
 * padding) and a /probe_kinds row. Nothing without a schedule. */
static int probe_log_kind_folds(Trainer *tr, const ProbeResult *pr, int T, char *err) {
    KindFold kf[KIND_FOLD_MAX];
    const int n = probe_kind_folds(&tr->cfg->model, T, pr, kf);
    struct KindFoldRow rows[KIND_FOLD_MAX];
    int nr = 0;
    for (int k = 0; k < n; k++) {
        const KindFold *f = &kf[k];
        if (!f->ok) continue;
        int worst = -1;
        for (int x = 0; x < f->S; x++)
            if (f->total[0][x] && (worst < 0 || (double)f->correct[0][x] / f->total[0][x] <
                                                    (double)f->correct[0][worst] / f->total[0][worst]))
                worst = x;
        if (worst >= 0) {
            double lo, hi;
            probe_wilson(f->correct[0][worst], f->total[0][worst], PROBE_Z95, &lo, &hi);
            log_printf("probe step %ld | %s layers' phase (t_K - (%d)) mod %d (prefix padding): worst phase %d %.1f%% "
                       "[%.1f, %.1f] (n = %ld), phase test p = %.3g\n", tr->st.step, f->name, f->o, f->S, worst,
                       100.0 * f->correct[0][worst] / f->total[0][worst], 100 * lo, 100 * hi, f->total[0][worst], f->test[0].p);
        }
        rows[nr++] = (struct KindFoldRow){f->kind, f->S, {f->correct[0], f->correct[1]}, {f->total[0], f->total[1]},
                                          {f->test[0].p, f->test[1].p}};
    }
    int periods[KIND_FOLD_MAX], any = 0;
    kind_fold_periods(&tr->cfg->model, T, tr->cfg->eval.residues, periods);
    for (int k = 0; k < KIND_FOLD_MAX; k++) any |= periods[k] > 0;
    return tr->metrics && any ? metrics_log_probe_kinds(tr->metrics, tr->st.step, rows, nr, err) : 0;
}

/* The probe by chunk phase (learned boundaries, docs/spec.md §6.5, trainer/chunk_phase.h): the
 * counts summed over the ranks, finalised, one log line per layer (its worst pooled chunk phase
 * with n, and the homogeneity p) and a /probe_chunk row. */
static int probe_log_chunk_phases(Trainer *tr, ChunkPhaseCounts *c, char *err) {
    const long n = (long)c->protocols * c->layers * (c->window + 1);
    double *sums = malloc(sizeof(double) * 2 * (size_t)n);
    if (!sums) return set_err(err, "out of memory: %zu bytes for the chunk-phase counts", sizeof(double) * 2 * (size_t)n);
    for (long i = 0; i < n; i++) { sums[i] = (double)c->correct[i]; sums[n + i] = (double)c->total[i]; }
    comm_allreduce_sum_host(tr->comm, sums, 2 * n);
    for (long i = 0; i < n; i++) { c->correct[i] = (long)sums[i]; c->total[i] = (long)sums[n + i]; }
    free(sums);
    chunk_phase_finalize(c);
    for (int l = 0; l < c->layers; l++) {
        int worst = -1;
        for (int k = 0; k < c->window; k++) {
            const long i = chunk_phase_index(c, 0, l, k);
            if (c->total[i] && (worst < 0 || c->acc[i] < c->acc[chunk_phase_index(c, 0, l, worst)])) worst = k;
        }
        const long u = chunk_phase_index(c, 0, l, c->window);
        if (worst < 0) {
            log_printf("probe step %ld | chunk phase, layer %d (prefix padding): no prompt's key is pooled (%ld unpooled)\n",
                       tr->st.step, l, c->total[u]);
            continue;
        }
        const long w = chunk_phase_index(c, 0, l, worst);
        double lo, hi;
        probe_wilson(c->correct[w], c->total[w], PROBE_Z95, &lo, &hi);
        log_printf("probe step %ld | chunk phase, layer %d (prefix padding): worst slot %d %.1f%% [%.1f, %.1f] (n = %ld), "
                   "unpooled %.1f%% (n = %ld), homogeneity p = %.3g\n",
                   tr->st.step, l, worst, c->acc[w], 100 * lo, 100 * hi, c->total[w], c->acc[u], c->total[u], c->test[l].p);
    }
    return tr->metrics ? metrics_log_probe_chunk(tr->metrics, tr->st.step, c, err) : 0;
}

/* Rank 0 holds the run's lock: the run directory must still be the one it locked before anything
 * more is written into it (a checkpoint, an evaluation's metrics row); every rank learns the answer.
 * Returns 0 or -1 with err. */
static int run_dir_still_ours(Trainer *tr, char *err) {
    char local[ERR_LEN] = "";
    int gone = tr->comm->rank == 0 && tr->lock_fd >= 0 && fs_lock_dir_held(tr->run_dir, tr->lock_fd, local);
    comm_allreduce_max_int(tr->comm, &gone, 1);
    if (!gone) return 0;
    return set_err(err, "%s", local[0] ? local : "the run directory was removed or replaced while the run was running (rank 0's error)");
}

static int run_evaluation(Trainer *tr, char *err) {
    if (run_dir_still_ours(tr, err)) return -1;
    Config *cfg = tr->cfg;
    int T = cfg->data.seq_len;
    if (model_set_seq_len(tr->model, T, err)) return -1;   /* a short stage trains below T */
    if (tr->val) {
        EvalResult r;
        double t0 = clock_seconds();
        if (evaluate_validation(tr->model, &cfg->model, tr->val, T, tr->micro, cfg->eval.residues, cfg->data.loss_targets, tr->comm,
                                tr->comm->rank == 0, &r, err))
            return -1;
        double worst = -INFINITY, best = INFINITY;
        int worst_r = 0, best_r = 0;
        for (int i = 0; i < r.residues; i++) {
            if (r.loss_by_residue[i] > worst) { worst = r.loss_by_residue[i]; worst_r = i; }
            if (r.loss_by_residue[i] < best) { best = r.loss_by_residue[i]; best_r = i; }
        }
        log_printf("eval step %ld | val loss %.4f over %ld windows | by residue t mod %d: best %.4f (r=%d), worst %.4f (r=%d) | %.1fs\n",
              tr->st.step, r.loss, r.windows, r.residues, best, best_r, worst, worst_r, clock_seconds() - t0);
        char note_r[160], note_p[160];
        loss_stats_power_note(&r.by_residue, note_r, sizeof note_r);
        loss_stats_power_note(&r.by_phase, note_p, sizeof note_p);
        log_printf("eval step %ld | val loss homogeneity (n = %ld windows): across residues F = %.3g (%d, %d), p = %.3g%s; "
                   "across phases t mod %d%s F = %.3g (%d, %d), p = %.3g%s\n",
                   tr->st.step, r.by_residue.units, r.by_residue.F, r.by_residue.df1, r.by_residue.df2, r.by_residue.p, note_r,
                   r.phases, probe_fold_note(&tr->cfg->model), r.by_phase.F, r.by_phase.df1, r.by_phase.df2, r.by_phase.p, note_p);
        for (int l = 0; r.has_boundaries && l < r.bounds.n_layers; l++) {   /* docs/spec.md §6.5 */
            const BoundaryStats *b = &r.bounds;
            log_printf("eval step %ld | boundaries layer %d: rate %.4f (target %.4f), mean chunk %.2f tokens, forced %.1f%%, "
                       "key|value splits %.1f%% of %ld pairs (chance %.1f%%), unpooled %ld tokens\n",
                       tr->st.step, l, b->rate[l], 1.0 / b->S, b->mean_len[l], 100 * b->forced_frac[l], 100 * b->split_frac[l],
                       b->pairs[l], 100 * b->rate[l], b->unpooled[l]);
        }
        int rc = 0;
        if (tr->metrics) {
            rc = metrics_log_val(tr->metrics, tr->st.step, r.loss, r.loss_by_residue, err);
            if (!rc) rc = metrics_log_val_stats(tr->metrics, tr->st.step, &r.by_residue, &r.by_phase, err);
            if (!rc && r.has_gates)
                rc = metrics_log_gates(tr->metrics, tr->st.step, r.eff_static, r.eff_window, r.profile, err);
            if (!rc && r.has_boundaries) rc = metrics_log_boundaries(tr->metrics, tr->st.step, &r.bounds, err);
        }
        eval_result_free(&r);
        if (rc) return -1;
    }
    if (tr->probe) {
        ProbeResult pr;
        ChunkPhaseCounts chunk = {0}, *chunked = NULL;   /* learned chunk boundaries: the fold by chunk phase (§6.5) */
        if (model_has_boundaries(tr->model)) {
            if (chunk_phase_init(&chunk, PROBE_N_PROTOCOLS, tr->cfg->model.n_layers, tr->cfg->model.window))
                return set_err(err, "out of memory for the probe's chunk-phase counts");
            chunked = &chunk;
        }
        double t0 = clock_seconds();
        if (probe_evaluate_chunked(tr->model, tr->probe, T, tr->micro, tr->comm->rank, tr->comm->world, chunked, &pr, err)) {
            chunk_phase_free(&chunk);
            return -1;
        }
        if (chunked && probe_log_chunk_phases(tr, chunked, err)) {
            chunk_phase_free(&chunk);
            return -1;
        }
        chunk_phase_free(&chunk);
        int n = PROBE_N_PROTOCOLS * PROBE_MAX_RESIDUES;      /* sum the counts over the ranks */
        double *sums = malloc(sizeof(double) * 2 * n);
        if (!sums) return set_err(err, "out of memory: %zu bytes for the probe counts", sizeof(double) * 2 * n);
        long *correct = &pr.correct[0][0], *total = &pr.total[0][0];
        for (int i = 0; i < n; i++) { sums[i] = (double)correct[i]; sums[n + i] = (double)total[i]; }
        comm_allreduce_sum_host(tr->comm, sums, 2 * n);
        for (int i = 0; i < n; i++) { correct[i] = (long)sums[i]; total[i] = (long)sums[n + i]; }
        free(sums);
        probe_result_set_fold(&pr, &tr->cfg->model);
        probe_result_finalize(&pr);
        /* the worst residue with its 95% Wilson interval and n (spec §3.6) */
        char worst_txt[2][96];
        for (int p = 0; p < 2; p++) {
            const int r = pr.worst_residue[p];
            if (r < 0) snprintf(worst_txt[p], sizeof worst_txt[p], "worst -");
            else
                snprintf(worst_txt[p], sizeof worst_txt[p], "worst %.1f%% [%.1f, %.1f] (r=%d, n = %ld)", pr.worst[p],
                         pr.lo[p][r], pr.hi[p][r], r, pr.total[p][r]);
        }
        log_printf("probe step %ld | prefix padding: mean %.1f%% %s gap %.1f pts | in-sequence padding: mean %.1f%% "
              "%s gap %.1f pts | %.1fs\n", tr->st.step, pr.mean[0], worst_txt[0], pr.gap[0], pr.mean[1],
              worst_txt[1], pr.gap[1], clock_seconds() - t0);
        if (probe_log_kind_folds(tr, &pr, T, err)) return -1;
        if (tr->metrics &&
            metrics_log_probe_tested(tr->metrics, tr->st.step, probe_result_acc(&pr, 0), probe_result_acc(&pr, 1),
                                     (const double[8]){pr.test_residue[0].chi2, pr.test_residue[0].p, pr.test_phase[0].chi2,
                                                       pr.test_phase[0].p, pr.test_residue[1].chi2, pr.test_residue[1].p,
                                                       pr.test_phase[1].chi2, pr.test_phase[1].p},
                                     err))
            return -1;
    }
    return 0;
}

static int save_checkpoint(Trainer *tr, char *err) {
    if (run_dir_still_ours(tr, err)) return -1;
    double t0 = clock_seconds();
    train_data_fingerprint(tr->data, tr->st.step, tr->st.data_fingerprint);   /* the data read so far */
    if (checkpoint_save(tr->run_dir, &tr->st, tr->cfg, tr->model, &tr->opt, tr->comm, tr->code_version,
                        tr->cfg->checkpoint.keep, err))
        return -1;
    log_printf("checkpoint step %ld -> %s/checkpoints/step_%08ld (%.1fs)\n", tr->st.step, tr->run_dir, tr->st.step,
          clock_seconds() - t0);
    return 0;
}

/* Returns 0, -1 (runtime error) or -2 (bad config / refused resume). */
static int setup(Trainer *tr, char *err) {
    Config *cfg = tr->cfg;
    Comm *comm = tr->comm;
    const int T = cfg->data.seq_len;
    snprintf(tr->run_dir, sizeof tr->run_dir, "%s/%s", cfg->run.dir, cfg->run.name);
    int fail = 0;
    char lerr[ERR_LEN] = "";
    if (comm->rank == 0) {
        char path[4096];
        if (fs_mkdirs(tr->run_dir, lerr)) fail = fs_failure_status(errno);
        int lrc = fail ? 0 : fs_lock_dir(tr->run_dir, &tr->lock_fd, lerr);   /* before anything is written */
        if (lrc) fail = lrc == -2 ? 2 : fs_failure_status(errno);
        snprintf(path, sizeof path, "%s/log.txt", tr->run_dir);
        if (!fail && log_open(path, lerr)) fail = fs_failure_status(errno);
        if (!fail) checkpoint_clean_tmp(tr->run_dir);
    }
    comm_allreduce_max_int(comm, &fail, 1);
    if (fail) {
        set_err(err, "%s", comm->rank == 0 ? lerr : "rank 0 could not set up the run directory");
        return fail == 2 ? -2 : -1;
    }
    if (!strcmp(tr->be->name, "cpu") && *cpu_blas_core())   /* which kernels the BLAS runs (kernels/cpu/cpu_backend.h) */
        log_printf("phaselab %s | run %s | world %d | backend cpu (%s, %s kernels)\n", tr->code_version, tr->run_dir, comm->world,
                   cpu_blas_name(), cpu_blas_core());
    else
        log_printf("phaselab %s | run %s | world %d | backend %s\n", tr->code_version, tr->run_dir, comm->world, tr->be->name);

    long Bg = cfg->train.batch_tokens / T;
    RunInputs in;                      /* every input check, the same for --dry-run (trainer/run_inputs.h) */
    int irc = run_inputs_open(&in, cfg, comm->world, err);
    if (irc) return irc;
    tr->data = in.data;
    tr->val = in.val;
    tr->probe = in.probe;
    char *about = run_inputs_describe(&in, cfg);
    if (about) log_printf("%s", about);
    free(about);
    ResumePlan plan;                   /* the resume rules, before any work (the same for --dry-run) */
    int found = train_resume_plan(cfg, tr->run_dir, tr->data, &plan, err);
    if (found < 0) return found;
    note_warmup(cfg, plan.schedule_steps);

    TensorTable tt;
    if (tensor_table_build(&tt, &cfg->model, err)) return -2;
    size_t padded = optimizer_padded_floats(&tt, comm->world);
    tensor_table_free(&tt);
    tr->micro = cfg->train.micro_batch;
    if (tr->micro > Bg / comm->world) tr->micro = (int)(Bg / comm->world);
    tr->model = model_create_padded(&cfg->model, tr->be, tr->micro, T, padded, err);
    if (!tr->model) return -1;
    if (model_set_gate_coverage(tr->model, cfg->train.gate_coverage, err)) return -1;
    if (model_has_boundaries(tr->model) && model_set_boundary_ratio(tr->model, cfg->train.boundary_ratio, err)) return -1;
    const TensorTable *mt = model_tensors(tr->model);
    if (optimizer_init(&tr->opt, tr->be, comm, mt, cfg->train.beta1, cfg->train.beta2, cfg->train.eps,
                       cfg->train.weight_decay, cfg->train.grad_clip, err))
        return -1;
    tr->flops_per_token = model_flops_per_token(&cfg->model, T);
    log_printf("model: %zu parameters | %.4g FLOPs per token | micro-batch %d x %d | %ld accumulation steps per rank\n",
          mt->n_params, tr->flops_per_token, tr->micro, T, (Bg / comm->world + tr->micro - 1) / tr->micro);

    memset(&tr->st, 0, sizeof tr->st);
    if (found) {
        if (checkpoint_load(plan.ckpt, tr->model, &tr->opt, &plan.st, err)) return -1;
        tr->st = plan.st;
        log_printf("resumed from %s (step %ld, %ld tokens%s)\n", plan.ckpt, plan.st.step, plan.st.tokens,
              plan.st.world_size != comm->world ? "; optimizer state re-sharded for the new world size" : "");
    } else {
        model_init_params(tr->model, cfg->train.seed);
        tr->st.seed = cfg->train.seed;
        train_data_fingerprint(tr->data, 0, tr->st.data_fingerprint);
    }
    tr->st.schedule_steps = plan.schedule_steps;   /* recorded with every checkpoint */
    tr->st.world_size = comm->world;
    if (comm->rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.ini", tr->run_dir);
        if (config_write(cfg, path, lerr)) fail = 1;
        snprintf(path, sizeof path, "%s/metrics.h5", tr->run_dir);
        const int gate_w = eval_gate_window(&cfg->model, cfg->data.seq_len);   /* every compressed layer, a schedule's too */
        MetricsShape shape = {cfg->model.n_layers, cfg->model.n_kv_heads, gate_w ? gate_w : cfg->model.window, cfg->eval.residues,
                              gate_w > 0,
                              cfg->train.gate_coverage > 0, model_has_indexer(&cfg->model),
                              probe_phase_fold(&cfg->model), model_has_boundaries(tr->model),
                              cfg->model.boundaries == BOUNDARIES_LEARNED ? cfg->model.window : 0,   /* §6.5: /probe_chunk */
                              {0}};
        kind_fold_periods(&cfg->model, cfg->data.seq_len, cfg->eval.residues, shape.kind_period);     /* §5.5 */
        char *cfg_text = config_to_string(cfg);
        if (!fail && !cfg_text) fail = set_err(lerr, "%s: out of memory formatting the config", path) != 0;
        if (!fail) tr->metrics = metrics_open(path, &shape, cfg_text, tr->code_version, found ? tr->st.step : -1, lerr);
        free(cfg_text);
        fail = fail || tr->metrics == NULL;
    }
    comm_allreduce_max_int(comm, &fail, 1);
    if (fail) return set_err(err, "%s", comm->rank == 0 ? lerr : "rank 0 could not open the metrics file");
    return 0;
}

static void teardown(Trainer *tr) {
    if (tr->metrics) metrics_close(tr->metrics);
    optimizer_free(&tr->opt);
    model_free(tr->model);
    train_data_close(tr->data);
    if (tr->val) val_set_close(tr->val);
    if (tr->probe) probe_set_free(tr->probe);
    log_close();
    if (tr->lock_fd >= 0) close(tr->lock_fd);
}

/* From here on SIGTERM, SIGUSR1 and SIGINT only ask the run to stop (at the next step, with a
 * checkpoint): installed by ./train before MPI starts and again by train_main, so that a signal that
 * arrives while the run is still starting (MPI_Init, reading data, building the model) is kept for
 * the first step instead of ending the process by the default action (a sweep's stop reached a rank
 * of a starting mpirun run that way and lost it). */
void train_catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;   /* no SA_RESTART: a blocked console write returns */
    main_thread = pthread_self();
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int train_main(Config *cfg, Comm *comm, const char *code_version) {
    char err[ERR_LEN] = "";
    train_catch_stop_signals();
    Trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.cfg = cfg;
    tr.comm = comm;
    tr.code_version = code_version;
    tr.lock_fd = -1;
    log_set_quiet(comm->rank != 0);
    tr.be = backend_select(cfg->run.device, cfg->run.threads, comm->local_rank, err);
    if (!tr.be) { log_error("%s", err); return 2; }
    tr.be->set_deterministic(tr.be->ctx, cfg->run.deterministic);   /* before the communicator exists */
    if (comm_attach_backend(comm, tr.be, err)) { log_error("%s", err); return 1; }
    int rc = setup(&tr, err);
    if (rc) {
        log_error("%s", err);
        teardown(&tr);
        return rc == -2 ? 2 : 1;
    }

    const int T = cfg->data.seq_len, micro = tr.micro;
    const long Bg = cfg->train.batch_tokens / T, Br = Bg / comm->world;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(T + 1));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T * micro), *tgt = malloc(sizeof(int32_t) * (size_t)T * micro);
    if (!buf || !tok || !tgt) {
        log_error("out of memory: %zu bytes for the training step's token buffers",
                  sizeof(int32_t) * ((size_t)T + 1 + 2 * (size_t)T * micro));
        free(buf); free(tok); free(tgt);
        teardown(&tr);
        return 1;
    }
    const long start_step = tr.st.step;
    const int step_width = snprintf(NULL, 0, "%ld", cfg->train.steps);
    double t_start = clock_seconds(), t_window = t_start;
    long window_tokens = 0, window_from = start_step, last_ckpt = start_step;   /* the log window: tokens, first step - 1 */
    int consecutive_bad = 0, exit_code = 0;
    TestHooks hooks;
    hooks_init(&hooks, comm->rank);
    if (start_step >= cfg->train.steps) log_printf("run already at step %ld of %ld: nothing to do\n", start_step, cfg->train.steps);

    while (tr.st.step < cfg->train.steps) {
        const long step = tr.st.step;
        const int stage = train_data_stage_at(tr.data, step);
        const int Ts = train_data_stage_seq_len(tr.data, stage);   /* this step's length, <= T */
        if (model_seq_len(tr.model) != Ts && model_set_seq_len(tr.model, Ts, err)) { log_error("%s", err); exit_code = 1; break; }
        const double loss_scale = 1.0 / ((double)Bg * Ts);
        if (stage > 0 && (step == start_step || stage != train_data_stage_at(tr.data, step - 1))) {
            const char *glob;
            long first;
            train_data_stage(tr.data, stage, &glob, &first);
            char at[48] = "";
            if (Ts != T) snprintf(at, sizeof at, "@%d", Ts);
            log_printf("data: step %ld on reads stage %d (%ld:%s%s)%s\n", step + 1, stage, first, glob, at,
                       first == step ? "" : ", resumed inside it");
        }
        double lr = lr_at_step(step, tr.st.schedule_steps, cfg->train.warmup_steps, cfg->train.lr, cfg->train.min_lr);
        if (hooks.fail_rank == comm->rank && hooks.fail_step == step) raise(SIGKILL);
        const long n_sum0 = comm->n_allreduce_sum_host, n_max0 = comm->n_allreduce_max_int, n_ctl0 = comm->n_step_control;
        model_zero_grads(tr.model);                  /* and the step's loss sum, kept on the backend */
        double coverage_sum = 0.0;                   /* coverage: sum over sequences, without lambda */
        double kl_sum = 0.0;                         /* the indexer's KL over this rank's queries (§5.4) */
        long kl_count = 0;
        const int has_indexer = model_has_indexer(&cfg->model);
        if (has_indexer && model_set_indexer(tr.model, cfg->train.indexer_weight, step < cfg->train.indexer_warmup, err)) {
            log_error("%s", err);
            exit_code = 2;
            break;
        }
        const double lambda = cfg->train.gate_coverage;
        double bd_ratio = 0.0, bd_rate = 0.0;        /* learned boundaries (§6.5): sums over this rank's micro-batches */
        int n_micro = 0;
        uint64_t first = tr.st.samples + (uint64_t)comm->rank * Br;   /* this rank's part of the global batch */
        for (long i = 0; i < Br && !rc; i += micro) {
            int B = (int)(Br - i < micro ? Br - i : micro);
            for (int b = 0; b < B && !rc; b++) {
                uint64_t g = first + i + b;
                uint64_t window;
                if (train_data_sample(tr.data, step, g, buf, &window, err)) { rc = -1; break; }
                if (hooks.trace)
                    fprintf(hooks.trace, "%ld %d %llu %llu %d\n", step, comm->rank, (unsigned long long)g,
                            (unsigned long long)window, train_data_stage_at(tr.data, step));
                memcpy(tok + (size_t)b * Ts, buf, sizeof(int32_t) * Ts);            /* tok [B, Ts] */
                window_targets(buf, Ts, cfg->data.loss_targets, tgt + (size_t)b * Ts);
            }
            if (rc) break;
            if (cfg->train.phase_jitter) {     /* docs/spec.md §6.2: sequence g's grid shifted by u(seed, g) */
                int32_t shift[B];
                const int period = model_grid_shift_period(tr.model);   /* S, or the lcm of multi-rate strides */
                for (int b = 0; b < B; b++) shift[b] = phase_jitter_shift(cfg->train.seed, first + i + b, period);
                if (model_set_grid_shift(tr.model, shift, B, err)) { rc = -1; break; }
            }
            model_accumulate_micro_batch(tr.model, tok, tgt, B, loss_scale);
            if (lambda > 0) coverage_sum += model_gate_coverage(tr.model, B);
            if (model_has_boundaries(tr.model)) {
                double rate;
                bd_ratio += model_boundary_ratio(tr.model, &rate);
                bd_rate += rate;
            }
            n_micro++;
            if (has_indexer) {
                long n_kl = 0;
                kl_sum += model_indexer_kl(tr.model, &n_kl);
                kl_count += n_kl;
            }
        }
        model_set_grid_shift(tr.model, NULL, 0, err);   /* evaluation and the next step start unshifted */
        /* the step's one control all-reduce: data failure, stop signal, loss and coverage sums */
        StepControl ctl = {.loss_sum = rc ? 0.0 : model_step_loss_sum(tr.model), .coverage_sum = coverage_sum,
                           .failed = rc != 0, .stop_signal = stop_signal};
        comm_step_control(comm, &ctl);
        if (ctl.failed) {
            log_error("%s", rc ? err : "a data error on another rank stopped the run");
            exit_code = 1;
            break;
        }
        double loss = ctl.loss_sum / ((double)Bg * Ts);   /* plain cross-entropy: the penalty is never mixed in */
        double coverage = 0.0;                            /* docs/spec.md §2b: lambda * mean over the step's sequences */
        if (lambda > 0) coverage = lambda * ctl.coverage_sum / (double)Bg;
        double gnorm = 0.0;   /* the owned step: clip + AdamW + the working-copy write, one pass per shard */
        int applied = optimizer_step(&tr.opt, tr.model, lr, isfinite(loss), &gnorm);
        if (hooks.comm_trace)
            fprintf(hooks.comm_trace, "%ld %d %ld %ld %ld\n", step, comm->rank, comm->n_step_control - n_ctl0,
                    comm->n_allreduce_max_int - n_max0, comm->n_allreduce_sum_host - n_sum0);
        tr.st.step++;
        tr.st.samples += (uint64_t)Bg;
        tr.st.tokens += Bg * Ts;
        window_tokens += Bg * Ts;
        if (applied) {
            consecutive_bad = 0;
        } else {
            tr.st.skipped_steps++;
            consecutive_bad++;
            log_printf("step %ld: non-finite %s (loss %g, grad norm %g): update skipped (%d in a row, %ld in total)\n",
                  tr.st.step, isfinite(loss) ? "gradient norm" : "loss", loss, gnorm, consecutive_bad, tr.st.skipped_steps);
            if (consecutive_bad >= cfg->train.max_bad_steps) {
                if (last_ckpt > 0)
                    log_error("%d non-finite steps in a row (train.max_bad_steps = %d): stopping; the last checkpoint "
                              "(step %ld) is intact", consecutive_bad, cfg->train.max_bad_steps, last_ckpt);
                else   /* a new run that stopped before its first checkpoint: there is none to name */
                    log_error("%d non-finite steps in a row (train.max_bad_steps = %d): stopping; no checkpoint was "
                              "written (the run stopped before its first)", consecutive_bad, cfg->train.max_bad_steps);
                exit_code = 3;
                break;
            }
        }
        tr.st.updates = tr.opt.updates;
        const long s = tr.st.step;
        const int last = s == cfg->train.steps;
        if (s % cfg->run.log_every == 0 || last || s == start_step + 1) {
            double now = clock_seconds();
            double tps = window_tokens / (now - t_window > 1e-9 ? now - t_window : 1e-9);
            double mfu = tps * model_flops_per_token(&cfg->model, Ts) / (tr.be->peak_flops * comm->world);
            double elapsed = now - t_start;
            /* ETA at the last log window's seconds per step (a whole-run mean lags behind a machine that
             * slowed down or sped up); the window's first line has only the first step to go by */
            double eta = (now - t_window) / (double)(s - window_from > 0 ? s - window_from : 1) * (double)(cfg->train.steps - s);
            char el[32], et[32];
            format_duration(elapsed, el, sizeof el);
            format_duration(eta, et, sizeof et);
            char cov_text[160] = "";
            if (lambda > 0) snprintf(cov_text, sizeof cov_text, " | gate coverage %.4f", coverage);
            const double kl = kl_count > 0 ? kl_sum / kl_count : 0.0;
            if (has_indexer)
                snprintf(cov_text + strlen(cov_text), sizeof cov_text - strlen(cov_text), " | indexer KL %.4f%s", kl,
                         step < cfg->train.indexer_warmup ? " (dense)" : "");
            metrics_set_indexer_kl(tr.metrics, kl);
            if (model_has_boundaries(tr.model)) {   /* docs/spec.md §6.5: rank 0's micro-batches, like the KL */
                const double r = n_micro ? bd_ratio / n_micro : 0.0, f = n_micro ? bd_rate / n_micro : 0.0;
                snprintf(cov_text + strlen(cov_text), sizeof cov_text - strlen(cov_text), " | boundary ratio %.4f rate %.4f",
                         r, f);
                metrics_set_boundaries(tr.metrics, r, f);
            }
            log_printf("step %*ld/%ld | loss %.4f%s | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | elapsed %s | ETA %s\n",
                  step_width, s, cfg->train.steps, loss, cov_text, lr, gnorm, tps, 100 * mfu, el, et);
            metrics_set_gate_coverage(tr.metrics, coverage);
            if (tr.metrics && metrics_log_train(tr.metrics, s, tr.st.tokens, loss, lr, gnorm, tps, mfu, err)) {
                log_error("%s", err);
                exit_code = 1;
                break;
            }
            t_window = now;
            window_tokens = 0;
            window_from = s;
        }
        if ((cfg->eval.every > 0 && s % cfg->eval.every == 0) || last) {
            if (run_evaluation(&tr, err)) { log_error("%s", err); exit_code = 1; break; }
        }
        const int sig = ctl.stop_signal;   /* sampled before the optimizer step, agreed by all ranks */
        if (sig) log_guard_console();      /* also on a rank whose own process saw no signal */
        if ((cfg->checkpoint.every > 0 && s % cfg->checkpoint.every == 0) || last || sig) {
            if (sig && hooks.stop_save_delay_ms > 0)
                nanosleep(&(struct timespec){hooks.stop_save_delay_ms / 1000, hooks.stop_save_delay_ms % 1000 * 1000000L}, NULL);
            if (save_checkpoint(&tr, err)) { log_error("%s", err); exit_code = 1; break; }
            last_ckpt = s;
        }
        if (sig) {
            log_printf("signal %d: stopped after step %ld with a checkpoint; run the same command to resume\n", sig, s);
            break;
        }
    }
    if (exit_code == 0 && tr.st.step >= cfg->train.steps && start_step < cfg->train.steps) {
        char el[32];
        format_duration(clock_seconds() - t_start, el, sizeof el);
        log_printf("done: %ld steps, %ld tokens in %s; run directory %s\n", tr.st.step, tr.st.tokens, el, tr.run_dir);
    }
    free(buf); free(tok); free(tgt);
    if (hooks.trace) fclose(hooks.trace);
    if (hooks.comm_trace) fclose(hooks.comm_trace);
    teardown(&tr);
    return exit_code;
}
