/* Streaming reader of raw text corpora: a list of files read one after another, each plain or
 * compressed (.gz via zlib, .zst via zstd streaming), cut into records. Memory is bounded by
 * max_record (plus a read chunk), independent of file and corpus size; offsets are 64-bit.
 *
 * File kinds, by name after removing .gz/.zst:
 *   .jsonl .ndjson .json   one record per line (without the line terminator). Blank lines
 *                          are records of length 0. A line longer than max_record is skipped
 *                          and returned as a record with too_long set.
 *   .txt                   documents, by TxtMode:
 *        TXT_DOC_PER_BLOCK (default) a document is a block of consecutive non-blank lines;
 *                          blank lines (only spaces, tabs, CR, FF, VT) separate documents and
 *                          are not part of them; the block's final line terminator is dropped.
 *        TXT_DOC_PER_FILE  the whole file, byte for byte, is one document.
 *     A document longer than max_record is returned in pieces (more set on all but the last).
 *     A piece ends before a line that starts with a printable ASCII character, where neither
 *     the Qwen pre-tokenizer regex nor NFC can join text across the cut, so the ids of the
 *     pieces concatenate to the ids of the whole; when there is no such line start within
 *     max_record the cut falls at a UTF-8 character boundary and forced_split is set.
 *   .parquet               the string column FIELD (text_reader_set_field, default "text") of
 *                          each row, as the JSONL line {"FIELD": "..."} (data/parquet_stream.h:
 *                          tools/parquet-text with pyarrow): the JSONL rules apply, line = row
 *                          number + 1, offsets count the bytes of those lines. Not .gz/.zst.
 * Each record carries its file, 1-based line and decompressed byte offset, which is also a
 * resumption point (text_reader_seek). */
#ifndef PHASELAB_TEXT_READER_H
#define PHASELAB_TEXT_READER_H
#include <stddef.h>
#include <stdint.h>

typedef enum { INPUT_JSONL, INPUT_TXT } InputKind;
typedef enum { TXT_DOC_PER_BLOCK, TXT_DOC_PER_FILE } TxtMode;

typedef struct {
    const char *data;       /* record bytes, valid until the next text_reader_next call */
    size_t len;
    InputKind kind;
    int file_index;
    uint64_t line;          /* 1-based line of the record's first byte in its file */
    uint64_t offset;        /* decompressed byte offset of the record's first byte */
    int too_long;           /* JSONL line longer than max_record (data empty) */
    int more;               /* TXT: the document continues in the next record */
    int forced_split;       /* TXT: this piece ends at a forced cut (see above) */
} TextRecord;

typedef struct TextReader TextReader;

/* Checks every path's kind up front; returns NULL with err naming the first bad path. */
TextReader *text_reader_open(char *const *paths, int n_paths, TxtMode mode, size_t max_record, char *err);
/* The column a .parquet input's records come from (before the first text_reader_next). */
int text_reader_set_field(TextReader *r, const char *field, char *err);
/* Positions the reader at a record start previously returned (file, offset, line). */
int text_reader_seek(TextReader *r, int file_index, uint64_t offset, uint64_t line, char *err);
/* 1: a record in *rec; 0: end of input; -1: read or decompression error (err filled). */
int text_reader_next(TextReader *r, TextRecord *rec, char *err);
/* Compressed (on-disk) bytes consumed so far / in total, for progress and ETA. */
uint64_t text_reader_disk_pos(const TextReader *r);
uint64_t text_reader_disk_total(const TextReader *r);
void text_reader_close(TextReader *r);
#endif
