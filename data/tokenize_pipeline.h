/* The tokenize pipeline as a library (data/tokenize_pipeline.c has the rules: inputs, splits,
 * bad-input handling, parallelism, resumption). ./tokenize (cli/tokenize_main.c) fills the
 * options from its command line and calls tokenize_run. */
#ifndef PHASELAB_TOKENIZE_PIPELINE_H
#define PHASELAB_TOKENIZE_PIPELINE_H
#include <stdint.h>
#include "data/text_reader.h"

typedef struct {
    const char *tokenizer, *out, *field;
    char **inputs;
    int n_inputs;
    uint64_t shard_tokens, val_tokens, max_doc_bytes;
    uint32_t vocab_size;
    int threads, quiet;
    TxtMode txt_mode;
} TokenizeOptions;

/* Tokenizes the files matching each of globs[0..n_globs) (sorted per glob, in the order given)
 * into opt->out, resuming from its state file; prints progress and the summary. Returns 0 when
 * the shards are complete; a bad input or a failed write ends the process (exit 2 or 1). */
int tokenize_run(const TokenizeOptions *opt, char **globs, int n_globs);
#endif
