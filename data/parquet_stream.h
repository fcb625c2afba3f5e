/* Parquet input for the corpus reader (data/text_reader.h): a .parquet file is read as the JSON
 * lines {"FIELD": "<the row's string>"} of its column FIELD, in row order, one line per row (a
 * null is {"FIELD": null}, a bad line by the JSONL rules). The bytes come from a child process,
 * tools/parquet-text (pyarrow), through a pipe; they depend only on the file, so their offsets
 * are resumption points like a compressed file's decompressed offsets (a seek reads again from
 * the start). */
#ifndef PHASELAB_PARQUET_STREAM_H
#define PHASELAB_PARQUET_STREAM_H
#include <stdio.h>
#include <sys/types.h>

/* Starts the reader of path's column field; *f reads its JSON lines. 0, or -1 with err. */
int parquet_stream_open(const char *path, const char *field, FILE **f, pid_t *pid, char *err);
/* After *f reached its end (and was closed): 0 when the reader exited 0, else -1 with err. */
int parquet_stream_finish(pid_t pid, const char *path, char *err);
/* Stops a reader whose output is not wanted any more (closing *f first lets it end by SIGPIPE). */
void parquet_stream_abort(pid_t pid);
#endif
