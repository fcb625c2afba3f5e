/* Lookup-probe evaluation (docs/spec.md §3.5): runs every prompt of a probe set through the
 * model (model_argmax_at at the query position, full-vocabulary top-1) and reports, per
 * protocol (pp, ip) and residue r = t_K mod P, correct/total, the accuracy A(r) in percent
 * and its 95% Wilson interval, and over the residues the mean, worst = min A(r), best and
 * gap = best - worst in percentage points.
 *
 * Distributed use: probe_evaluate_shard(rank, world) scores the prompts i with
 * i mod world == rank; sum `correct` and `total` over the ranks (e.g. MPI_Allreduce of the two
 * long arrays), then call probe_result_finalize to recompute every derived number. */
#ifndef PHASELAB_PROBE_EVAL_H
#define PHASELAB_PROBE_EVAL_H
#include <stdio.h>
#include "data/probe.h"
#include "trainer/phase_test.h"
#include "trainer/chunk_phase.h"
#include "trainer/run_config.h"

struct Model;

#define PROBE_Z95 1.959963984540054   /* standard normal quantile for a two-sided 95% interval */

typedef struct {
    int residues;                                         /* P */
    int present[PROBE_N_PROTOCOLS];                       /* protocol has prompts (total > 0) */
    long correct[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];
    long total[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];
    /* derived by probe_result_finalize; percent; NaN where total = 0 */
    double acc[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];     /* A(r) = 100 correct / total */
    double lo[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];      /* 95% Wilson interval */
    double hi[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];
    /* over the residues with total > 0 (NaN when none): unweighted mean of A(r), min, max,
     * gap = best - worst in percentage points; worst/best_residue -1 when none */
    double mean[PROBE_N_PROTOCOLS], worst[PROBE_N_PROTOCOLS], best[PROBE_N_PROTOCOLS], gap[PROBE_N_PROTOCOLS];
    int worst_residue[PROBE_N_PROTOCOLS], best_residue[PROBE_N_PROTOCOLS];
    /* phase-effect test (docs/spec.md §3.7, trainer/phase_test.h): chi-square homogeneity of
     * the counts across the P residues, and folded by phase r mod fold (fold = S, or 8 for
     * full attention; set fold before finalizing; 0 or fold not dividing P: NaN) */
    int fold;
    const char *fold_note;   /* what the fold is on this model (probe_fold_note; NULL: nothing to add) */
    ChiSquare test_residue[PROBE_N_PROTOCOLS], test_phase[PROBE_N_PROTOCOLS];
    /* candidate values a prompt offers (probe_set_candidates; chance accuracy 1 / candidates),
     * set by the evaluations; 0 = unknown */
    int candidates;
} ProbeResult;

/* Wilson score interval for k successes in n trials at normal quantile z, as fractions in
 * [0, 1]: centre (p + z^2/2n) / (1 + z^2/n), half-width z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n).
 * n = 0 gives NaN, NaN. */
void probe_wilson(long k, long n, double z, double *lo, double *hi);

/* Zeroes the counts for P residues (1..PROBE_MAX_RESIDUES) and finalizes (all NaN); fold = 8. */
void probe_result_clear(ProbeResult *res, int residues);
/* Recomputes present, acc, lo, hi, mean, worst, best, gap and the phase-effect tests from
 * correct, total and fold. */
void probe_result_finalize(ProbeResult *res);

/* Scores every prompt: argmax at position length - 1, correct when it equals the answer. Each
 * batch holds prompts of one length L and runs at that length (tokens [B, L], model_set_seq_len:
 * the model is causal, so this equals padding every prompt to T; the model's length is restored
 * afterwards). T is the model's sequence length (every prompt must fit); micro_batch <= the
 * model's max_batch. Returns 0, or -1 with err. */
int probe_evaluate(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeResult *res, char *err);
/* The same over the prompts i with i mod world == rank only (res holds this rank's counts,
 * finalized as if alone). */
int probe_evaluate_shard(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                         ProbeResult *res, char *err);

/* probe_evaluate_shard that also counts every prompt by the chunk phase of its target key in each
 * layer (docs/spec.md §6.5, trainer/chunk_phase.h) into chunk (initialised by the caller with
 * PROBE_N_PROTOCOLS protocols, the model's layers and W; NULL: probe_evaluate_shard); an error
 * when the model has no learned chunk boundaries. */
int probe_evaluate_chunked(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                           ChunkPhaseCounts *chunk, ProbeResult *res, char *err);

/* The same with a callback run before every batch (analyses use it to tell an intervention
 * which prompts a batch holds): before_batch(ctx, protocol [B], B) with B <= micro_batch rows;
 * row b of the batch is scored at the position its prompt asks for. before_batch may be NULL.
 * progress: when not NULL, a progress line on stderr (prefixed by it) at most every 2 s. */
typedef void (*ProbeBatchFn)(void *ctx, const int *protocol, int B);
int probe_evaluate_ex(struct Model *m, const ProbeSet *ps, int T, int micro_batch, int rank, int world,
                      ProbeBatchFn before_batch, void *ctx, const char *progress, ProbeResult *res, char *err);

/* probe_evaluate_ex in one process that also writes each prompt's outcome: hits [prompts] (caller's
 * array, or NULL), hits[i] = 1 when prompt i was right, 0 otherwise (the interventions' bootstrap
 * intervals, trainer/probe_bootstrap.h), and, when chunk is not NULL (a model with learned
 * boundaries), counts every prompt by the chunk phase of its key in each layer as
 * probe_evaluate_chunked. */
int probe_evaluate_hits(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeBatchFn before_batch, void *ctx,
                        const char *progress, ChunkPhaseCounts *chunk, unsigned char *hits, ProbeResult *res, char *err);

/* Tests and benchmarks only: probe_evaluate with every prompt padded to T with token 0 (the
 * evaluation before prompts ran at their own length), to compare against. */
int probe_evaluate_padded(struct Model *m, const ProbeSet *ps, int T, int micro_batch, ProbeResult *res, char *err);

/* Arrays for metrics_log_probe: acc of a protocol, or NULL when it has no prompts. */
const double *probe_result_acc(const ProbeResult *res, int protocol);

/* The phase period to fold by: S for compressed attention, 8 for full attention. */
int probe_phase_fold(const ModelConfig *mc);

/* What "phase t mod S" (the fold of probe_phase_fold) is on mc, to print after it, so that no
 * table folds by position mod S without saying what that means: "" on an aligned grid (the
 * phase itself); for grid = staggered " (KV head 0's grid; head g's phase is (t - o_g) mod S)";
 * for learned chunk boundaries (docs/spec.md §6.5), which have no grid, " (position only:
 * learned boundaries have no grid; their phase is the chunk phase)". One rule for every
 * printed fold: the probe table, the validation loss, the knockout, --score and the run's log. */
const char *probe_fold_note(const ModelConfig *mc);

/* res->fold = probe_phase_fold(mc), res->fold_note = probe_fold_note(mc) (set before finalizing). */
void probe_result_set_fold(ProbeResult *res, const ModelConfig *mc);

/* Whether protocol p retrieves at all: its pooled accuracy K / N over every residue with its 95%
 * Wilson interval [lo, hi]; a protocol whose lower bound does not exceed chance 1 / candidates
 * is "not retrieving" (its per-residue and phase tests say nothing about phase then). Returns 1
 * and fills line ("not retrieving: mean accuracy X% (95% CI a-b%) includes chance 1/N") when
 * not retrieving, 0 when it retrieves or when candidates or the counts are unknown. */
int probe_not_retrieving(const ProbeResult *res, int p, char *line, size_t len);

/* A readable table: one line per residue (A(r), correct/total, Wilson interval for pp and ip),
 * then mean, worst (residue), best (residue) and gap per protocol, then the phase-effect test
 * (chi-square, df, p across residues and folded by phase), or "not retrieving" when the protocol
 * is at chance (probe_not_retrieving), and a warning when an expected count of a test is below
 * PHASE_MIN_EXPECTED (the chi-square p-value is then only approximate). */
void probe_print_table(FILE *f, const ProbeResult *res);
#endif
