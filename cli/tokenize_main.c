/* ./tokenize: raw text corpora -> token shards. The command line:
 *
 *   ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB2' ...] --out DIR
 *              [--field text] [--shard-tokens N] [--val-tokens N] [--threads N]
 *              [--txt-docs block|file] [--max-doc-bytes N] [--vocab-size N] [--quiet]
 *
 * parsed into TokenizeOptions; the pipeline (inputs, splits, bad input, resumption) is
 * data/tokenize_pipeline.c. --out is a directory, created with its parents when missing (an
 * existing file there is refused). Exit status: 0 shards complete, 2 bad input (the command line,
 * an input, or inputs holding no document: "nothing tokenized"), 1 a runtime failure. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/optval.h"
#include "data/tokenize_pipeline.h"

static void fatal(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("phaselab: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static void usage(void) {
    fprintf(stderr,
            "usage: ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB' ...] --out DIR\n"
            "                  [--field text] [--shard-tokens N] [--val-tokens N] [--threads N]\n"
            "                  [--txt-docs block|file] [--max-doc-bytes N] [--vocab-size N] [--quiet]\n");
}

/* --help: the usage and what each option means, with its default (stdout, exit 0). */
static void help(void) {
    printf("usage: ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB' ...] --out DIR [options]\n"
           "Text corpora -> token shards (DIR/train_NNNNNN.bin, DIR/val_NNNNNN.bin) for [data] train / val; a rerun resumes.\n"
           "  --tokenizer FILE     a HuggingFace byte-level BPE tokenizer.json (Qwen2/Qwen3 family), or 'bytes'\n"
           "  --input 'GLOB'       files to read, quoted (each glob's files sorted; repeatable); the type is read\n"
           "                       from the name:\n"
           "                       .txt (UTF-8 text), .jsonl/.ndjson/.json (one JSON object a line), each optionally\n"
           "                       .gz or .zst, and .parquet; a directory is not read: give 'DIR/*.txt'\n"
           "  --out DIR            the shards' directory, created with its parents\n"
           "  --val-tokens N       the first documents (whole) go to the validation split until it holds N tokens\n"
           "                       (default 0: no val_*.bin, which a run's data.val needs)\n"
           "  --txt-docs block|file  .txt documents: blank-line-separated blocks (default) or one per file\n"
           "  --field NAME         the string field of each JSON line / parquet column (default text)\n"
           "  --shard-tokens N     tokens per shard (default 100000000)\n"
           "  --max-doc-bytes N    a longer .txt document is tokenized in pieces cut before a line and written\n"
           "                       whole; a longer JSON line is skipped as a bad line (default 67108864)\n"
           "  --vocab-size N       the vocabulary recorded in the shard headers (default: 151936 for Qwen, else\n"
           "                       the tokenizer's ids rounded up to a multiple of 128); model.vocab_size must be >= it\n"
           "  --threads N          encoding threads (default: the online CPUs)\n"
           "  --quiet              no progress line\n"
           "Exit status: 0 done, 2 bad input (the command line, an input, no document at all), 1 a runtime failure.\n");
}

/* An integer option (common/optval.h: decimal digits only; strtoull took " -18446744073709551615"
 * as 1). */
static uint64_t parse_u64(const char *flag, const char *v, uint64_t min, uint64_t max) {
    uint64_t x;
    if (optval_u64(v, min, max, &x))
        fatal(2, "%s: \"%s\" is not valid (expected an integer in [%llu, %llu])", flag, v, (unsigned long long)min,
              (unsigned long long)max);
    return x;
}

static void parse_args(TokenizeOptions *opt, int argc, char **argv, char ***globs, int *n_globs) {
    opt->field = "text";
    opt->shard_tokens = 100000000;
    opt->val_tokens = 0;
    opt->max_doc_bytes = 64ull << 20;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    opt->threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;
    opt->txt_mode = TXT_DOC_PER_BLOCK;
    *globs = calloc((size_t)argc, sizeof **globs);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { help(); exit(0); }
        if (!strcmp(a, "--quiet")) { opt->quiet = 1; continue; }
        if (i + 1 >= argc) { usage(); fatal(2, "%s: missing value", a); }
        const char *v = argv[++i];
        if (!strcmp(a, "--tokenizer")) opt->tokenizer = v;
        else if (!strcmp(a, "--input")) (*globs)[(*n_globs)++] = (char *)v;
        else if (!strcmp(a, "--out")) opt->out = v;
        else if (!strcmp(a, "--field")) opt->field = v;
        else if (!strcmp(a, "--shard-tokens")) opt->shard_tokens = parse_u64(a, v, 1, (uint64_t)1 << 40);
        else if (!strcmp(a, "--val-tokens")) opt->val_tokens = parse_u64(a, v, 0, (uint64_t)1 << 50);
        else if (!strcmp(a, "--threads")) opt->threads = (int)parse_u64(a, v, 1, 256);
        else if (!strcmp(a, "--max-doc-bytes")) opt->max_doc_bytes = parse_u64(a, v, 4096, (uint64_t)1 << 40);
        else if (!strcmp(a, "--vocab-size")) opt->vocab_size = (uint32_t)parse_u64(a, v, 1, UINT32_MAX);
        else if (!strcmp(a, "--txt-docs")) {
            if (!strcmp(v, "block")) opt->txt_mode = TXT_DOC_PER_BLOCK;
            else if (!strcmp(v, "file")) opt->txt_mode = TXT_DOC_PER_FILE;
            else fatal(2, "--txt-docs: \"%s\" (expected block or file)", v);
        } else { usage(); fatal(2, "unknown option %s", a); }
    }
    if (!opt->tokenizer || !*n_globs || !opt->out) { usage(); fatal(2, "--tokenizer, --input and --out are required"); }
}

int main(int argc, char **argv) {
    TokenizeOptions opt;
    memset(&opt, 0, sizeof opt);
    char **globs;
    int n_globs = 0;
    parse_args(&opt, argc, argv, &globs, &n_globs);
    int rc = tokenize_run(&opt, globs, n_globs);
    free(globs);
    return rc;
}
