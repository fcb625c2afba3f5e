/* The inputs a run opens at start-up and every check made on them before any work: one function
 * that the run (trainer/trainer.c) and ./train --dry-run both call, so the two can never
 * disagree on what is accepted, and give the same error line and exit status.
 *
 * In order (the first failure is the one reported):
 *   1. [train] batch_tokens / seq_len sequences split evenly over the world's ranks;
 *   2. [data] train is set;
 *   3. data.train and every stage of data.stages (data/train_stages.h): each glob matches files,
 *      each shard's header and length are valid (data/shard.h), one tokenizer fingerprint over
 *      all of them, at least one window each;
 *   4. ids below model.vocab_size: every shard's header records the vocabulary size of the
 *      tokenizer that wrote it (bytes 16-19); it must be at most model.vocab_size (the ids
 *      themselves are checked again when read, file and offset named);
 *   5. data.loss_targets against each stage's tokenizer;
 *   6. the shards' tokenizer.json (hf_export_prepare: data.tokenizer, or next to the shards);
 *   7. data.val (when set): the glob, the headers, the tokens of the windows used, the
 *      vocabulary as in 4, the same tokenizer fingerprint as the training shards, loss_targets;
 *   8. eval.probe (when set): the file loads and validates (data/probe.h) with every prompt
 *      within seq_len and every id below model.vocab_size, its tokenizer fingerprint is the
 *      training shards', and its residue count equals eval.residues (the per-residue tables of
 *      metrics.h5 are eval.residues wide).
 * Returns 0, -2 for bad input (exit 2: the config or a file it names is wrong) or -1 for a
 * runtime failure (exit 1: out of memory), with one line in err naming the file. */
#ifndef PHASELAB_RUN_INPUTS_H
#define PHASELAB_RUN_INPUTS_H
#include "data/loader.h"
#include "data/probe.h"
#include "data/train_stages.h"
#include "trainer/run_config.h"

typedef struct {
    TrainData *data;        /* data.train and the stages of data.stages */
    ValSet *val;            /* NULL without data.val */
    ProbeSet *probe;        /* NULL without eval.probe */
} RunInputs;

/* Opens and checks everything above for a run of `world` ranks; on failure nothing stays open. */
int run_inputs_open(RunInputs *in, const Config *cfg, int world, char *err);
/* What was opened, as the run logs it ("data: ..." lines, each ending in a newline); malloc'd
 * (NULL when out of memory). */
char *run_inputs_describe(const RunInputs *in, const Config *cfg);
void run_inputs_close(RunInputs *in);
#endif
